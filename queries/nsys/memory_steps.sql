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
-- what each series held before its first event: 0 for a running sum, the stated count less the
-- first event's own bytes where the source states one (held_bytes as nsa_memory_held() computes it)
WITH events AS (
    SELECT report_id, device_id, pid, memory, ts_ns, rowid AS seq, operation, bytes, delta_bytes, allocated_bytes
    FROM memory_events
    WHERE ts_ns IS NOT NULL AND ($report_id IS NULL OR report_id = $report_id)
),
series AS (
    SELECT report_id, device_id, pid, memory,
           arg_min(coalesce(allocated_bytes, coalesce(delta_bytes, 0)) - coalesce(delta_bytes, 0), (ts_ns, seq))
               AS initial_bytes
    FROM events GROUP BY ALL
),
grid AS (
    SELECT se.*, s.rowid AS row, s.step, s.name, s.steady, s.start_ns, s.end_ns
    FROM series AS se
    JOIN steps AS s ON s.report_id = se.report_id
    WHERE $report_id IS NULL OR s.report_id = $report_id
),
-- where each step of each series starts (before the events at that time: ord 0) and ends (after
-- them: ord 2), numbered in (time, ord) order per series: an event's bucket is the number of
-- probes before it, so the events of a step are those of buckets start_pos + 1 .. end_pos
probes AS (
    SELECT *, row_number() OVER (PARTITION BY report_id, device_id, pid, memory ORDER BY ts_ns, ord, row) - 1 AS pos
    FROM (
        SELECT report_id, device_id, pid, memory, start_ns AS ts_ns, 0 AS ord, row FROM grid WHERE start_ns IS NOT NULL
        UNION ALL
        SELECT report_id, device_id, pid, memory, end_ns, 2, row FROM grid WHERE end_ns IS NOT NULL
    )
),
-- one ordered pass over the events and probes: each event's held_bytes as nsa_memory_held()
-- computes it and its bucket (a probe adds nothing to the sum)
passed AS (
    SELECT report_id, device_id, pid, memory, ts_ns, ord, seq, operation, bytes,
           CAST(coalesce(allocated_bytes, sum(coalesce(delta_bytes, 0)) OVER w) AS BIGINT) AS held_bytes,
           count(row) OVER w AS bucket
    FROM (
        SELECT report_id, device_id, pid, memory, ts_ns, 1 AS ord, seq, NULL::BIGINT AS row,
               operation, bytes, delta_bytes, allocated_bytes
        FROM events
        UNION ALL
        SELECT report_id, device_id, pid, memory, ts_ns, ord, NULL, row, NULL, NULL, NULL, NULL
        FROM probes
    )
    WINDOW w AS (
        PARTITION BY report_id, device_id, pid, memory ORDER BY ts_ns, ord, seq
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    )
    QUALIFY ord = 1
),
-- per bucket: its events, allocations and frees and their bytes, the most held and what its last
-- event left held
buckets AS (
    SELECT report_id, device_id, pid, memory, bucket, count(*) AS events,
           count(*) FILTER (WHERE operation = 'alloc') AS allocs,
           count(*) FILTER (WHERE operation = 'free') AS frees,
           sum(CASE WHEN operation = 'alloc' THEN bytes ELSE 0 END) AS alloc_bytes,
           sum(CASE WHEN operation = 'free' THEN bytes ELSE 0 END) AS free_bytes,
           max(held_bytes) AS peak_bytes, arg_max(held_bytes, (ts_ns, seq)) AS last_held
    FROM passed
    GROUP BY ALL
),
-- each probe with what was held and counted before it (the buckets up to its own) and, for a
-- start, the most held by the events of the buckets after it up to its step's end
probed AS (
    SELECT p.report_id, p.device_id, p.pid, p.memory, p.row, p.ord, p.pos,
           last_value(k.last_held IGNORE NULLS) OVER c AS held_bytes,
           sum(coalesce(k.events, 0)) OVER c AS events,
           sum(coalesce(k.allocs, 0)) OVER c AS allocs,
           sum(coalesce(k.frees, 0)) OVER c AS frees,
           sum(coalesce(k.alloc_bytes, 0)) OVER c AS alloc_bytes,
           sum(coalesce(k.free_bytes, 0)) OVER c AS free_bytes,
           k.peak_bytes
    FROM probes AS p
    LEFT JOIN buckets AS k
        ON k.report_id = p.report_id AND k.device_id IS NOT DISTINCT FROM p.device_id
        AND k.pid IS NOT DISTINCT FROM p.pid AND k.memory IS NOT DISTINCT FROM p.memory AND k.bucket = p.pos
    WINDOW c AS (
        PARTITION BY p.report_id, p.device_id, p.pid, p.memory ORDER BY p.pos
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    )
),
-- what was held and counted just before each step starts and when it ends: the events in the
-- step, [start_ns, end_ns], are the difference
bounds AS (
    SELECT g.*, coalesce(b.held_bytes, g.initial_bytes) AS held_start_bytes,
           coalesce(e.held_bytes, g.initial_bytes) AS held_end_bytes,
           coalesce(e.allocs, 0) - coalesce(b.allocs, 0) AS allocations,
           coalesce(e.frees, 0) - coalesce(b.frees, 0) AS frees,
           coalesce(e.alloc_bytes, 0) - coalesce(b.alloc_bytes, 0) AS allocated_bytes,
           coalesce(e.free_bytes, 0) - coalesce(b.free_bytes, 0) AS freed_bytes,
           b.pos AS start_pos, e.pos AS end_pos
    FROM grid AS g
    LEFT JOIN probed AS b
        ON b.ord = 0 AND b.row = g.row AND b.report_id = g.report_id AND b.device_id IS NOT DISTINCT FROM g.device_id
        AND b.pid IS NOT DISTINCT FROM g.pid AND b.memory IS NOT DISTINCT FROM g.memory
    LEFT JOIN probed AS e
        ON e.ord = 2 AND e.row = g.row AND e.report_id = g.report_id AND e.device_id IS NOT DISTINCT FROM g.device_id
        AND e.pid IS NOT DISTINCT FROM g.pid AND e.memory IS NOT DISTINCT FROM g.memory
),
-- the most held during each step: the bucket maxima from the probe after its start to its end
-- probe, a rows frame over the probes (a segment tree, n log n)
peaks AS (
    SELECT p.report_id, p.device_id, p.pid, p.memory, p.row,
           max(p.peak_bytes) OVER (
               PARTITION BY p.report_id, p.device_id, p.pid, p.memory ORDER BY p.pos
               ROWS BETWEEN 1 FOLLOWING AND coalesce(b.end_pos - b.start_pos, 0) FOLLOWING
           ) AS peak_bytes
    FROM probed AS p
    LEFT JOIN bounds AS b  -- equalities only: a hash join
        ON b.row = p.row AND b.report_id = p.report_id AND b.device_id IS NOT DISTINCT FROM p.device_id
        AND b.pid IS NOT DISTINCT FROM p.pid AND b.memory IS NOT DISTINCT FROM p.memory
    QUALIFY p.ord = 0
)
SELECT b.report_id, b.device_id, b.pid, b.memory, b.step, b.name, b.steady, b.start_ns, b.end_ns,
       b.held_start_bytes, b.held_end_bytes,
       greatest(b.held_start_bytes, coalesce(p.peak_bytes, b.held_start_bytes)) AS peak_bytes,
       CAST(b.allocations AS BIGINT) AS allocations, CAST(b.frees AS BIGINT) AS frees,
       CAST(b.allocated_bytes AS BIGINT) AS allocated_bytes,
       CAST(b.freed_bytes AS BIGINT) AS freed_bytes,
       g.total_memory_bytes
FROM bounds AS b
LEFT JOIN peaks AS p
    ON p.report_id = b.report_id AND p.device_id IS NOT DISTINCT FROM b.device_id
    AND p.pid IS NOT DISTINCT FROM b.pid AND p.memory IS NOT DISTINCT FROM b.memory AND p.row = b.row
LEFT JOIN (SELECT *, true AS device_memory FROM gpus) AS g  -- equalities only: a hash join
    ON g.report_id = b.report_id AND g.device_id = b.device_id
    AND g.device_memory = (b.memory IN ('device', 'device_static', 'array', 'managed', 'managed_static'))
ORDER BY b.report_id, b.device_id NULLS LAST, b.pid, b.memory, b.step
