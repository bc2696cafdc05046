-- Bytes held at each step's boundaries, per device, process and memory kind: what a leak looks
-- like is held_end_bytes rising step after step in the steady state. held_* follow
-- memory_timeline (the source's own count where it states one, else the running sum of
-- delta_bytes); a step without events holds what the one before it ended with, and before the
-- first event what the source says was held then (0 for a running sum). Only the memory
-- kinds and processes the report has events of; reports without steps have no rows.
-- reads gpus, memory_events, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id; NULL for host memory.
-- col pid BIGINT: process id.
-- col memory VARCHAR: memory kind, as in memory_events.
-- col step INTEGER: 0-based position of the step (table steps).
-- col name VARCHAR: the step's name ('step 12').
-- col steady BOOLEAN: false for warm-up steps (steps.steady).
-- col start_ns BIGINT: the step starts (ns).
-- col end_ns BIGINT: the step ends (ns).
-- col held_start_bytes BIGINT: bytes held when the step starts (byte).
-- col held_end_bytes BIGINT: bytes held when the step ends (byte).
-- col peak_bytes BIGINT: most bytes held at any time during the step (byte).
-- col allocations BIGINT: allocations during the step.
-- col frees BIGINT: frees during the step.
-- col allocated_bytes BIGINT: bytes allocated during the step (byte).
-- col freed_bytes BIGINT: bytes freed during the step (byte).
-- col total_memory_bytes BIGINT: the device's memory (gpus) for device memory kinds; NULL for host memory or when unknown (byte).
WITH held AS (SELECT * FROM nsa_memory_held() WHERE ($report_id IS NULL OR report_id = $report_id)),
-- the last event at each time: what is held from then on
settled AS (
    SELECT report_id, device_id, pid, memory, ts_ns, arg_max(held_bytes, seq) AS held_bytes
    FROM held GROUP BY ALL
),
-- what each series held before its first event: 0 for a running sum, the stated count less the
-- first event's own bytes where the source states one
series AS (
    SELECT report_id, device_id, pid, memory,
           arg_min(held_bytes - coalesce(delta_bytes, 0), (ts_ns, seq)) AS initial_bytes
    FROM held GROUP BY ALL
),
grid AS (
    SELECT se.*, s.step, s.name, s.steady, s.start_ns, s.end_ns
    FROM series AS se
    JOIN steps AS s ON s.report_id = se.report_id
    WHERE ($report_id IS NULL OR s.report_id = $report_id)
),
bounds AS (
    SELECT g.*, coalesce(b.held_bytes, g.initial_bytes) AS held_start_bytes,
           coalesce(e.held_bytes, g.initial_bytes) AS held_end_bytes
    FROM grid AS g
    ASOF LEFT JOIN settled AS b
        ON b.report_id = g.report_id AND b.device_id IS NOT DISTINCT FROM g.device_id
        AND b.pid IS NOT DISTINCT FROM g.pid AND b.memory IS NOT DISTINCT FROM g.memory
        AND g.start_ns > b.ts_ns
    ASOF LEFT JOIN settled AS e
        ON e.report_id = g.report_id AND e.device_id IS NOT DISTINCT FROM g.device_id
        AND e.pid IS NOT DISTINCT FROM g.pid AND e.memory IS NOT DISTINCT FROM g.memory
        AND g.end_ns >= e.ts_ns
),
inside AS (
    SELECT g.report_id, g.device_id, g.pid, g.memory, g.step,
           max(h.held_bytes) AS peak_bytes,
           count(*) FILTER (WHERE h.operation = 'alloc') AS allocations,
           count(*) FILTER (WHERE h.operation = 'free') AS frees,
           coalesce(sum(h.bytes) FILTER (WHERE h.operation = 'alloc'), 0) AS allocated_bytes,
           coalesce(sum(h.bytes) FILTER (WHERE h.operation = 'free'), 0) AS freed_bytes
    FROM grid AS g
    JOIN held AS h
        ON h.report_id = g.report_id AND h.device_id IS NOT DISTINCT FROM g.device_id
        AND h.pid IS NOT DISTINCT FROM g.pid AND h.memory IS NOT DISTINCT FROM g.memory
        AND h.ts_ns >= g.start_ns AND h.ts_ns <= g.end_ns
    GROUP BY ALL
)
SELECT b.report_id, b.device_id, b.pid, b.memory, b.step, b.name, b.steady, b.start_ns, b.end_ns,
       b.held_start_bytes, b.held_end_bytes,
       greatest(b.held_start_bytes, coalesce(i.peak_bytes, b.held_start_bytes)) AS peak_bytes,
       coalesce(i.allocations, 0) AS allocations, coalesce(i.frees, 0) AS frees,
       CAST(coalesce(i.allocated_bytes, 0) AS BIGINT) AS allocated_bytes,
       CAST(coalesce(i.freed_bytes, 0) AS BIGINT) AS freed_bytes,
       g.total_memory_bytes
FROM bounds AS b
LEFT JOIN inside AS i USING (report_id, device_id, pid, memory, step)
LEFT JOIN gpus AS g
    ON g.report_id = b.report_id AND g.device_id = b.device_id
    AND b.memory IN ('device', 'device_static', 'array', 'managed', 'managed_static')
ORDER BY b.report_id, b.device_id NULLS LAST, b.pid, b.memory, b.step
