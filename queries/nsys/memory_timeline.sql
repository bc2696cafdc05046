-- Bytes held over time: every allocation and free of table memory_events with what its device,
-- process and memory kind hold after it. held_bytes is the source's own count where it states
-- one (PyTorch profiler `Total Allocated`), else the running sum of delta_bytes from the start
-- of the capture (nsys GPU memory usage events: what the process reserved from the driver, so a
-- caching allocator shows its pool, not its tensors; memory allocated before the capture began
-- is not in it). Events at the same time keep the source's order. The step is the `steps` row
-- the event falls in, by time.
-- reads memory_events, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param memory VARCHAR = NULL: only this memory kind ('device', 'pinned'...); all when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id; NULL for host memory.
-- col pid BIGINT: process id.
-- col memory VARCHAR: 'device', 'device_static', 'pinned', 'pageable', 'managed', 'host'... as in memory_events.
-- col ts_ns BIGINT: when the event happened (ns, report timeline).
-- col operation VARCHAR: 'alloc' or 'free'.
-- col bytes BIGINT: size of the allocation or free (byte).
-- col delta_bytes BIGINT: +bytes for an allocation, -bytes for a free (byte).
-- col held_bytes BIGINT: bytes held by the device / process / memory kind after the event (byte).
-- col reserved_bytes BIGINT: bytes the caching allocator reserved after the event, when the source states it (byte).
-- col address BIGINT: address of the allocation, when the source has it.
-- col name VARCHAR: what the source calls the allocation, when it says.
-- col step INTEGER: 0-based position of the step the event falls in (table steps); NULL outside steps.
-- col step_name VARCHAR: that step's name ('step 12').
WITH held AS (
    SELECT * FROM nsa_memory_held()
    WHERE ($report_id IS NULL OR report_id = $report_id) AND ($memory IS NULL OR memory = $memory)
),
-- the step of each series an event falls in: the last one to start at or before it, if it has not
-- ended (the steps of one series follow each other)
series AS (SELECT DISTINCT report_id, series FROM steps),
in_step AS (
    SELECT h.seq, s.step, s.name
    FROM (SELECT h.report_id, h.seq, h.ts_ns, x.series FROM held AS h JOIN series AS x USING (report_id)) AS h
    ASOF JOIN steps AS s ON s.report_id = h.report_id AND s.series = h.series AND h.ts_ns >= s.start_ns
    WHERE h.ts_ns < s.end_ns
)
SELECT h.report_id, h.device_id, h.pid, h.memory, h.ts_ns, h.operation, h.bytes, h.delta_bytes,
       h.held_bytes, h.reserved_bytes, h.address, h.name,
       i.step, i.name AS step_name
FROM held AS h
LEFT JOIN in_step AS i USING (seq)
ORDER BY h.report_id, h.device_id NULLS LAST, h.pid, h.memory, h.ts_ns, h.seq
