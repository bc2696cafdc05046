-- Bytes held over time: every allocation and free of table memory_events with what its device,
-- process and memory kind hold after it. held_bytes is the source's own count where it states
-- one (PyTorch profiler `Total Allocated`), else the running sum of delta_bytes from the start
-- of the capture (nsys GPU memory usage events: what the process reserved from the driver, so a
-- caching allocator shows its pool, not its tensors; memory allocated before the capture began
-- is not in it). Events at the same time keep the source's order. The step is the `steps` row
-- the event falls in, by time: of each series of steps, the last one to start at or before the
-- event, if it has not ended (an event in the steps of two series has a row for each).
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
-- each step as the span in which it is the one an event falls in: from its start to its end or
-- the next start of its series, whichever comes first (empty for the first of two steps starting
-- together, and for a step without an end)
WITH spans AS (
    SELECT *
    FROM (
        SELECT report_id, step, name, start_ns,
               CASE WHEN end_ns IS NOT NULL THEN
                   least(end_ns, lead(start_ns) OVER (PARTITION BY report_id, series ORDER BY start_ns, rowid))
               END AS end_ns
        FROM steps
        WHERE series IS NOT NULL AND start_ns IS NOT NULL AND ($report_id IS NULL OR report_id = $report_id)
    )
    WHERE end_ns > start_ns
),
-- the spans cut into time buckets about as wide as the average span, each event looked up in the
-- bucket of its time by a hash join (no sort of the events for it)
width AS (
    SELECT report_id, CAST(greatest(1, sum(end_ns - start_ns) // count(*)) AS BIGINT) AS w
    FROM spans
    GROUP BY ALL
),
slots AS (
    SELECT s.report_id, s.step, s.name, s.start_ns, s.end_ns,
           unnest(range(s.start_ns // w.w, (s.end_ns - 1) // w.w + 1)) AS bucket
    FROM spans AS s JOIN width AS w USING (report_id)
),
held AS (
    SELECT h.*, h.ts_ns // w.w AS bucket
    FROM nsa_memory_held() AS h
    LEFT JOIN width AS w USING (report_id)  -- equalities only: a hash join
    WHERE ($report_id IS NULL OR h.report_id = $report_id) AND ($memory IS NULL OR h.memory = $memory)
)
SELECT h.report_id, h.device_id, h.pid, h.memory, h.ts_ns, h.operation, h.bytes, h.delta_bytes,
       h.held_bytes, h.reserved_bytes, h.address, h.name,
       s.step, s.name AS step_name
FROM held AS h
LEFT JOIN slots AS s
    ON s.report_id = h.report_id AND s.bucket = h.bucket AND h.ts_ns >= s.start_ns AND h.ts_ns < s.end_ns
ORDER BY h.report_id, h.device_id NULLS LAST, h.pid, h.memory, h.ts_ns, h.seq
