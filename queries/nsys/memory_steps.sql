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
-- first event's own bytes where the source states one (held_bytes as nsa_memory_held() computes it);
-- each series numbered (sid): the windows, groups and joins below key on that one integer, not on
-- the four columns with the memory kind's string (integer keys sort and hash cheaper)
WITH events AS (
    SELECT report_id, device_id, pid, memory, ts_ns, rowid AS seq, operation, bytes, delta_bytes, allocated_bytes
    FROM memory_events
    WHERE ts_ns IS NOT NULL AND ($report_id IS NULL OR report_id = $report_id)
),
series AS (
    SELECT report_id, device_id, pid, memory,
           arg_min(coalesce(allocated_bytes, coalesce(delta_bytes, 0)) - coalesce(delta_bytes, 0), (ts_ns, seq))
               AS initial_bytes,
           row_number() OVER (ORDER BY report_id, device_id, pid, memory) AS sid
    FROM events GROUP BY report_id, device_id, pid, memory
),
-- the events with their series number, operations as 1 (alloc) and 2 (free)
keyed AS (
    SELECT s.sid, e.ts_ns, e.seq, CASE e.operation WHEN 'alloc' THEN 1 WHEN 'free' THEN 2 END AS op, e.bytes,
           e.delta_bytes, e.allocated_bytes
    FROM events AS e
    JOIN series AS s  -- equalities only: a hash join
        ON s.report_id = e.report_id AND s.device_id IS NOT DISTINCT FROM e.device_id
        AND s.pid IS NOT DISTINCT FROM e.pid AND s.memory IS NOT DISTINCT FROM e.memory
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
    SELECT *, row_number() OVER (PARTITION BY sid ORDER BY ts_ns, ord, row) - 1 AS pos
    FROM (
        SELECT sid, start_ns AS ts_ns, 0 AS ord, row FROM grid WHERE start_ns IS NOT NULL
        UNION ALL
        SELECT sid, end_ns, 2, row FROM grid WHERE end_ns IS NOT NULL
    )
),
-- one ordered pass over the events and probes: each event's held_bytes as nsa_memory_held()
-- computes it, its bucket (a probe adds nothing to the sum) and its place n in the pass
passed AS (
    SELECT sid, op, bytes,
           CAST(coalesce(allocated_bytes, sum(coalesce(delta_bytes, 0)) OVER w) AS BIGINT) AS held_bytes,
           count(row) OVER w AS bucket, count(*) OVER w AS n
    FROM (
        SELECT sid, ts_ns, 1 AS ord, seq, NULL::BIGINT AS row, op, bytes, delta_bytes, allocated_bytes
        FROM keyed
        UNION ALL
        SELECT sid, ts_ns, ord, NULL, row, NULL, NULL, NULL, NULL
        FROM probes
    )
    WINDOW w AS (PARTITION BY sid ORDER BY ts_ns, ord, seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
    QUALIFY ord = 1
),
-- per bucket: its events, allocations and frees and their bytes, the most held and what its last
-- event (the largest n) left held
buckets AS (
    SELECT sid, bucket, count(*) AS events,
           count(*) FILTER (WHERE op = 1) AS allocs,
           count(*) FILTER (WHERE op = 2) AS frees,
           sum(CASE WHEN op = 1 THEN bytes ELSE 0 END) AS alloc_bytes,
           sum(CASE WHEN op = 2 THEN bytes ELSE 0 END) AS free_bytes,
           max(held_bytes) AS peak_bytes, arg_max(held_bytes, n) AS last_held
    FROM passed
    GROUP BY ALL
),
-- each probe with what was held and counted before it (the buckets up to its own) and, for a
-- start, the most held by the events of the buckets after it up to its step's end
probed AS (
    SELECT p.sid, p.row, p.ord, p.pos,
           last_value(k.last_held IGNORE NULLS) OVER c AS held_bytes,
           sum(coalesce(k.events, 0)) OVER c AS events,
           sum(coalesce(k.allocs, 0)) OVER c AS allocs,
           sum(coalesce(k.frees, 0)) OVER c AS frees,
           sum(coalesce(k.alloc_bytes, 0)) OVER c AS alloc_bytes,
           sum(coalesce(k.free_bytes, 0)) OVER c AS free_bytes,
           k.peak_bytes
    FROM probes AS p
    LEFT JOIN buckets AS k ON k.sid = p.sid AND k.bucket = p.pos
    WINDOW c AS (PARTITION BY p.sid ORDER BY p.pos ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
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
    LEFT JOIN probed AS b ON b.ord = 0 AND b.row = g.row AND b.sid = g.sid
    LEFT JOIN probed AS e ON e.ord = 2 AND e.row = g.row AND e.sid = g.sid
),
-- the most held during each step: the bucket maxima from the probe after its start to its end
-- probe, a rows frame over the probes (a segment tree, n log n)
peaks AS (
    SELECT p.sid, p.row,
           max(p.peak_bytes) OVER (
               PARTITION BY p.sid ORDER BY p.pos
               ROWS BETWEEN 1 FOLLOWING AND coalesce(b.end_pos - b.start_pos, 0) FOLLOWING
           ) AS peak_bytes
    FROM probed AS p
    LEFT JOIN bounds AS b ON b.row = p.row AND b.sid = p.sid  -- equalities only: a hash join
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
LEFT JOIN peaks AS p ON p.sid = b.sid AND p.row = b.row
LEFT JOIN (SELECT *, true AS device_memory FROM gpus) AS g  -- equalities only: a hash join
    ON g.report_id = b.report_id AND g.device_id = b.device_id
    AND g.device_memory = (b.memory IN ('device', 'device_static', 'array', 'managed', 'managed_static'))
ORDER BY b.report_id, b.device_id NULLS LAST, b.pid, b.memory, b.step
