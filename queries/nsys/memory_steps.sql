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
-- the steps of each report in (start_ns, rowid) order: rank, and how many start by its end
ranked AS (
    SELECT report_id, rowid AS row, start_ns, row_number() OVER (PARTITION BY report_id ORDER BY start_ns, rowid) AS rank
    FROM steps
    WHERE $report_id IS NULL OR report_id = $report_id
),
step_list AS (
    SELECT s.report_id, s.rowid AS row, s.step, s.name, s.steady, s.start_ns, s.end_ns, r.rank,
           coalesce(e.rank, 0) AS started_by_end
    FROM steps AS s
    JOIN ranked AS r ON r.report_id = s.report_id AND r.row = s.rowid
    ASOF LEFT JOIN (SELECT report_id, start_ns, max(rank) AS rank FROM ranked GROUP BY ALL) AS e
        ON e.report_id = s.report_id AND s.end_ns >= e.start_ns
    WHERE $report_id IS NULL OR s.report_id = $report_id
),
grid AS (
    SELECT se.*, s.row, s.step, s.name, s.steady, s.start_ns, s.end_ns, s.rank, s.started_by_end
    FROM series AS se
    JOIN step_list AS s ON s.report_id = se.report_id
),
-- the events and, in the same ordered pass, a probe for each step of each series where it starts
-- (before the events at that time: what was held and counted just before the step) and where it
-- ends (after them): each row carries held_bytes as nsa_memory_held() computes it and the running
-- counts of events, allocations and frees and their bytes; a probe adds nothing to them
stream AS (
    SELECT report_id, device_id, pid, memory, ts_ns, 1 AS ord, seq, NULL::BIGINT AS row,
           operation, bytes, delta_bytes, allocated_bytes
    FROM events
    UNION ALL
    SELECT report_id, device_id, pid, memory, start_ns, 0, NULL, row, NULL, NULL, NULL, NULL
    FROM grid WHERE start_ns IS NOT NULL
    UNION ALL
    SELECT report_id, device_id, pid, memory, end_ns, 2, NULL, row, NULL, NULL, NULL, NULL
    FROM grid WHERE end_ns IS NOT NULL
),
passed AS (
    SELECT report_id, device_id, pid, memory, ts_ns, ord, seq, row,
           CAST(CASE WHEN events > 0 THEN coalesce(last_event.allocated_bytes, delta_sum) END AS BIGINT) AS held_bytes,
           events, allocs, frees, alloc_bytes, free_bytes
    FROM (
        SELECT report_id, device_id, pid, memory, ts_ns, ord, seq, row,
               last_value(CASE WHEN seq IS NOT NULL THEN {'allocated_bytes': allocated_bytes} END IGNORE NULLS) OVER w
                   AS last_event,
               sum(coalesce(delta_bytes, 0)) OVER w AS delta_sum,
               count(seq) OVER w AS events,
               sum(CASE WHEN operation = 'alloc' THEN 1 ELSE 0 END) OVER w AS allocs,
               sum(CASE WHEN operation = 'free' THEN 1 ELSE 0 END) OVER w AS frees,
               sum(CASE WHEN operation = 'alloc' THEN bytes ELSE 0 END) OVER w AS alloc_bytes,
               sum(CASE WHEN operation = 'free' THEN bytes ELSE 0 END) OVER w AS free_bytes
        FROM stream
        WINDOW w AS (
            PARTITION BY report_id, device_id, pid, memory ORDER BY ts_ns, ord, seq
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        )
    )
),
held AS (SELECT report_id, device_id, pid, memory, ts_ns, held_bytes FROM passed WHERE ord = 1),
probed AS (SELECT * FROM passed WHERE ord <> 1),
-- what was held and counted just before each step starts and when it ends: the events in the
-- step, [start_ns, end_ns], are the difference
bounds AS (
    SELECT g.*, coalesce(b.held_bytes, g.initial_bytes) AS held_start_bytes,
           coalesce(e.held_bytes, g.initial_bytes) AS held_end_bytes,
           coalesce(b.events, 0) AS events_before, coalesce(e.events, 0) AS events_by_end,
           coalesce(e.allocs, 0) - coalesce(b.allocs, 0) AS allocations,
           coalesce(e.frees, 0) - coalesce(b.frees, 0) AS frees,
           coalesce(e.alloc_bytes, 0) - coalesce(b.alloc_bytes, 0) AS allocated_bytes,
           coalesce(e.free_bytes, 0) - coalesce(b.free_bytes, 0) AS freed_bytes
    FROM grid AS g
    LEFT JOIN probed AS b
        ON b.ord = 0 AND b.row = g.row AND b.report_id = g.report_id AND b.device_id IS NOT DISTINCT FROM g.device_id
        AND b.pid IS NOT DISTINCT FROM g.pid AND b.memory IS NOT DISTINCT FROM g.memory
    LEFT JOIN probed AS e
        ON e.ord = 2 AND e.row = g.row AND e.report_id = g.report_id AND e.device_id IS NOT DISTINCT FROM g.device_id
        AND e.pid IS NOT DISTINCT FROM g.pid AND e.memory IS NOT DISTINCT FROM g.memory
),
-- the most held during each step: the steps join their series' events as rows in (time, steps
-- first, rank) order, each with a window frame from itself to the last row at or before its
-- end: the events before it and the steps ranked before it precede it, the events and steps
-- that start by its end end the frame (rows, not a range: a segment tree, n log n)
framed AS (
    SELECT report_id, device_id, pid, memory, ts_ns, 1 AS kind, 0 AS rank, NULL AS row, 0 AS frame_rows, held_bytes
    FROM held
    UNION ALL
    SELECT report_id, device_id, pid, memory, start_ns, 0, rank, row,
           greatest(events_by_end + started_by_end - (events_before + rank), 0), NULL
    FROM bounds
),
peaks AS (
    SELECT report_id, device_id, pid, memory, row,
           max(held_bytes) OVER (
               PARTITION BY report_id, device_id, pid, memory ORDER BY ts_ns, kind, rank
               ROWS BETWEEN CURRENT ROW AND frame_rows FOLLOWING
           ) AS peak_bytes
    FROM framed
    QUALIFY kind = 0
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
