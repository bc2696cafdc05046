-- The peak of bytes held per device, process and memory kind, and where it happened: the event
-- that set it (the allocation, its size, address and name), the step and the innermost NVTX
-- range of the process around it; then the headroom left on the device (gpus.total_memory_bytes)
-- and, where the source states reserved bytes (PyTorch profiler), the caching allocator's
-- fragmentation at the peak: the share of reserved memory not allocated. held_bytes follow
-- memory_timeline; the first event at the peak's level sets it.
-- reads gpus, memory_events, nvtx_ranges, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id; NULL for host memory.
-- col pid BIGINT: process id.
-- col memory VARCHAR: memory kind, as in memory_events.
-- col events BIGINT: events of the device / process / kind.
-- col allocations BIGINT: allocations.
-- col frees BIGINT: frees.
-- col peak_bytes BIGINT: most bytes held at once (byte).
-- col peak_ns BIGINT: when the peak was first reached (ns, report timeline).
-- col peak_event_bytes BIGINT: size of the allocation that set the peak (byte).
-- col peak_address BIGINT: its address, when the source has it.
-- col peak_name VARCHAR: its name, when the source gives one.
-- col peak_step INTEGER: 0-based position of the step the peak falls in; NULL outside steps.
-- col peak_step_name VARCHAR: that step's name.
-- col peak_range VARCHAR: innermost NVTX range of the same process around the peak; NULL when none.
-- col final_bytes BIGINT: bytes held after the last event (byte).
-- col reserved_at_peak_bytes BIGINT: bytes the caching allocator reserved at the peak, when the source states it (byte).
-- col fragmentation DOUBLE: 1 - peak_bytes / reserved_at_peak_bytes: reserved but not allocated at the peak (fraction); NULL without reserved bytes.
-- col total_memory_bytes BIGINT: the device's memory (gpus); NULL for host memory or when unknown (byte).
-- col headroom_bytes BIGINT: total_memory_bytes - peak_bytes for device memory kinds (byte).
-- col headroom_share DOUBLE: headroom_bytes / total_memory_bytes (fraction).
-- held_bytes as nsa_memory_held() computes it, the window carrying only what it needs (the
-- peak's own event is read back by rowid)
WITH held AS (
    SELECT report_id, device_id, pid, memory, ts_ns, seq, operation,
           CAST(coalesce(allocated_bytes, sum(coalesce(delta_bytes, 0)) OVER (
               PARTITION BY report_id, device_id, pid, memory ORDER BY ts_ns, seq
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           )) AS BIGINT) AS held_bytes
    FROM (
        SELECT report_id, device_id, pid, memory, ts_ns, rowid AS seq, operation, delta_bytes, allocated_bytes
        FROM memory_events
        WHERE ts_ns IS NOT NULL AND ($report_id IS NULL OR report_id = $report_id)
    )
),
per AS (
    SELECT report_id, device_id, pid, memory,
           count(*) AS events,
           count(*) FILTER (WHERE operation = 'alloc') AS allocations,
           count(*) FILTER (WHERE operation = 'free') AS frees,
           max(held_bytes) AS peak_bytes,
           arg_max(held_bytes, (ts_ns, seq)) AS final_bytes
    FROM held GROUP BY ALL
),
peak_event AS (
    SELECT p.*, h.ts_ns AS peak_ns, h.seq
    FROM per AS p
    JOIN held AS h
        ON h.report_id = p.report_id AND h.device_id IS NOT DISTINCT FROM p.device_id
        AND h.pid IS NOT DISTINCT FROM p.pid AND h.memory IS NOT DISTINCT FROM p.memory
        AND h.held_bytes = p.peak_bytes
    QUALIFY row_number() OVER (
        PARTITION BY p.report_id, p.device_id, p.pid, p.memory ORDER BY h.ts_ns, h.seq
    ) = 1
),
peak AS (
    SELECT p.* EXCLUDE (seq), m.bytes AS peak_event_bytes, m.address AS peak_address, m.name AS peak_name,
           m.reserved_bytes AS reserved_at_peak_bytes
    FROM peak_event AS p
    JOIN memory_events AS m ON m.rowid = p.seq
),
ranged AS (
    SELECT pk.report_id, pk.device_id, pk.pid, pk.memory, r.name AS peak_range
    FROM peak AS pk
    JOIN nvtx_ranges AS r
        ON r.report_id = pk.report_id AND r.pid = pk.pid
        AND r.start_ns <= pk.peak_ns AND coalesce(r.end_ns, pk.peak_ns) >= pk.peak_ns
    QUALIFY row_number() OVER (
        PARTITION BY pk.report_id, pk.device_id, pk.pid, pk.memory
        ORDER BY r.start_ns DESC, r.end_ns NULLS LAST
    ) = 1
)
SELECT pk.report_id, pk.device_id, pk.pid, pk.memory, pk.events, pk.allocations, pk.frees,
       pk.peak_bytes, pk.peak_ns, pk.peak_event_bytes, pk.peak_address, pk.peak_name,
       s.step AS peak_step, s.name AS peak_step_name, rg.peak_range, pk.final_bytes,
       pk.reserved_at_peak_bytes,
       CASE WHEN pk.reserved_at_peak_bytes > 0 THEN 1 - pk.peak_bytes / pk.reserved_at_peak_bytes END AS fragmentation,
       g.total_memory_bytes,
       g.total_memory_bytes - pk.peak_bytes AS headroom_bytes,
       (g.total_memory_bytes - pk.peak_bytes) / g.total_memory_bytes AS headroom_share
FROM peak AS pk
LEFT JOIN ranged AS rg USING (report_id, device_id, pid, memory)
LEFT JOIN steps AS s ON s.report_id = pk.report_id AND pk.peak_ns >= s.start_ns AND pk.peak_ns < s.end_ns
LEFT JOIN (SELECT *, true AS device_memory FROM gpus) AS g  -- equalities only: a hash join
    ON g.report_id = pk.report_id AND g.device_id = pk.device_id
    AND g.device_memory = (pk.memory IN ('device', 'device_static', 'array', 'managed', 'managed_static'))
ORDER BY pk.report_id, pk.device_id NULLS LAST, pk.pid, pk.memory
