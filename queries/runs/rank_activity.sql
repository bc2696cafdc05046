-- What each rank of a run did in its steady steps, by source and name, in total and per step: what
-- straggler-rank sets beside the run's other ranks to name what the straggler did instead of
-- arriving. Sources: 'nvtx', the NVTX ranges inside its steps (by base name; not the step ranges
-- themselves), of any thread of its process; 'host_wait', the host waits (host_waits) of the
-- thread that runs its steps (the thread of the step's NVTX range; every thread of the process for
-- kernel-pattern steps), clipped to its steps; 'kernel', its compute kernels (not comm_ops: the
-- match nsa_rank_activity makes) that start between its first steady step's start and its last
-- one's end; 'host_gap', in PyTorch profiler traces (cpu_ops), the host time of the step's thread
-- that no recorded op or annotation covers (Python between torch calls: data loading, sleeps,
-- logging): per step, the step minus the union of the thread's ops in it, over the steps where it
-- recorded any. Steps are host ranges here (NVTX steps), not rank_balance's GPU windows. A rank's
-- steps are those the other run queries take: its report's steady steps of its process
-- (ranks.pid, else the steps' process) or of its GPU (kernel-pattern steps); of several series
-- (threads), the one with the most steady steps (ties: the lowest series id). A rank without
-- steady steps has no row.
-- reads comm_ops, cpu_ops, host_waits, kernel_names, kernel_rows, nvtx_ranges, ranks, steps
-- param run_id INTEGER = NULL: only this run; all runs when NULL.
-- col run_id INTEGER: the run (`runs.run_id`).
-- col rank INTEGER: the rank.
-- col source VARCHAR: 'nvtx' (an NVTX range), 'host_wait' (host_waits), 'kernel' (a compute kernel) or 'host_gap' (host time outside every recorded op).
-- col name VARCHAR: the range's base name, the wait's name, the kernel's name, or 'host time outside recorded ops'.
-- col total_ns BIGINT: time over the rank's steady steps (ns).
-- col steps BIGINT: the rank's steady steps.
-- col per_step_ns DOUBLE: total_ns / steps (ns).
WITH rk AS (
    SELECT run_id, rank, report_id, pid, device_id FROM ranks WHERE $run_id IS NULL OR run_id = $run_id
),
rs AS (
    SELECT rk.run_id, rk.rank, rk.report_id, coalesce(rk.pid, s.pid) AS pid, rk.device_id, s.series,
           s.source, s.start_ns, s.end_ns
    FROM rk
    JOIN steps AS s ON s.report_id = rk.report_id
    WHERE s.steady AND CASE WHEN s.source = 'kernels' THEN s.device_id = rk.device_id
                            ELSE rk.pid IS NULL OR s.pid = rk.pid END
),
pick AS (
    SELECT run_id, rank, arg_min(series, (-n, series)) AS series
    FROM (SELECT run_id, rank, series, count(*) AS n FROM rs GROUP BY ALL)
    GROUP BY run_id, rank
),
mine AS MATERIALIZED (SELECT rs.* FROM rs SEMI JOIN pick USING (run_id, rank, series)),
-- the thread of each step: that of the NVTX range that is the step (none for kernel-pattern steps)
step_thread AS (
    SELECT m.run_id, m.rank, m.start_ns, min(v.tid) AS tid
    FROM mine AS m
    JOIN nvtx_ranges AS v
        ON v.report_id = m.report_id AND (m.pid IS NULL OR v.pid = m.pid)
        AND v.start_ns = m.start_ns AND v.end_ns = m.end_ns
    WHERE m.source <> 'kernels'
    GROUP BY ALL
),
-- the rank's steps in time order (i), with their thread and the latest end so far (reach)
st AS MATERIALIZED (
    SELECT m.*, t.tid, row_number() OVER w AS i, max(m.end_ns) OVER (w ROWS UNBOUNDED PRECEDING) AS reach
    FROM mine AS m
    LEFT JOIN step_thread AS t ON t.run_id = m.run_id AND t.rank = m.rank AND t.start_ns = m.start_ns
    WINDOW w AS (PARTITION BY m.run_id, m.rank ORDER BY m.start_ns, m.end_ns)
),
n AS MATERIALIZED (
    SELECT run_id, rank, any_value(report_id) AS report_id, any_value(pid) AS pid,
           any_value(device_id) AS device_id, count(*) AS steps, min(start_ns) AS lo, max(end_ns) AS hi
    FROM st
    GROUP BY run_id, rank
),
-- time buckets of about a step's length from the rank's first step start (the rank's span over
-- its steps): what meets the steps by time meets them by a hash join on the bucket, not a sort
nb AS MATERIALIZED (
    SELECT run_id, rank, report_id, pid, lo, hi, greatest((hi - lo) // steps, 1) AS w FROM n WHERE hi >= lo
),
-- A host wait or op is matched to the steps it may meet without testing it against every step: the
-- steps that start last at or before its start (first_i..last_i, one step unless starts tie), by
-- a hash join on its start's time bucket (owned, below); an earlier step can overlap it only if
-- the steps before reach past its start (prev_reach), and is then no earlier than g_i, the first
-- step reaching this start; a later step only if the next start comes before its end (an ASOF
-- join, on its end, finds the last).
-- Each step found is then tested as a range join would test it. A series' steps follow each other,
-- so nearly every row has one step to test.
starts AS (
    SELECT g.*, r.i AS g_i,
           max(g.group_end) OVER (
               PARTITION BY g.run_id, g.rank ORDER BY g.start_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
           ) AS prev_reach,
           lead(g.start_ns) OVER (PARTITION BY g.run_id, g.rank ORDER BY g.start_ns) AS next_start
    FROM (
        SELECT run_id, rank, start_ns, min(i) AS first_i, max(i) AS last_i, max(end_ns) AS group_end
        FROM st
        WHERE start_ns IS NOT NULL
        GROUP BY ALL
    ) AS g
    ASOF LEFT JOIN (SELECT run_id, rank, reach, min(i) AS i FROM st GROUP BY ALL) AS r
        ON r.run_id = g.run_id AND r.rank = g.rank AND g.start_ns <= r.reach
),
-- each start owns the time up to the next one (the last, all after it), listed in every bucket
-- it touches: a row meets the start it follows (the last at or before its start) in its bucket
owned AS (
    SELECT s.*, coalesce(s.next_start, b.hi) AS upto,
           unnest(range((s.start_ns - b.lo) // b.w, (coalesce(s.next_start, b.hi) - 1 - b.lo) // b.w + 1)) AS bk
    FROM starts AS s
    JOIN nb AS b USING (run_id, rank)
),
-- what may fall in a step, within the span of the rank's steps: its host waits and its ops
-- (cpu_ops: counted where they overlap a step); NVTX ranges go by time buckets (below)
rows_in AS (
    SELECT n.run_id, n.rank, 'host_wait' AS source, w.name, w.tid, w.start_ns, w.end_ns, w.duration_ns,
           (w.start_ns - b.lo) // b.w AS bk
    FROM n
    LEFT JOIN nb AS b USING (run_id, rank)
    JOIN host_waits AS w
        ON w.report_id = n.report_id AND (n.pid IS NULL OR w.pid = n.pid)
        AND w.start_ns < n.hi AND w.end_ns > n.lo
    UNION ALL
    SELECT n.run_id, n.rank, 'op', NULL, o.tid, o.start_ns, o.end_ns, o.duration_ns, (o.start_ns - b.lo) // b.w
    FROM n
    LEFT JOIN nb AS b USING (run_id, rank)
    JOIN cpu_ops AS o
        ON o.report_id = n.report_id AND o.pid = n.pid
        AND o.start_ns < n.hi AND o.end_ns > n.lo
),
placed AS MATERIALIZED (
    SELECT x.* EXCLUDE (bk),
           CASE WHEN b.first_i IS NULL THEN 1
                WHEN b.prev_reach IS NULL THEN b.first_i
                WHEN x.start_ns >= b.prev_reach THEN b.first_i
                ELSE coalesce(b.g_i, b.first_i) END AS i0,
           coalesce(b.last_i, 0) AS i1,
           b.first_i IS NULL OR coalesce(x.end_ns > b.next_start, false) AS beyond
    FROM rows_in AS x
    LEFT JOIN owned AS b
        ON b.run_id = x.run_id AND b.rank = x.rank AND b.bk = x.bk
        AND x.start_ns >= b.start_ns AND x.start_ns < b.upto
    -- a row that starts once its steps (and every earlier one) have ended, and ends before the
    -- next start, meets no step: left out here (between the steps: most host waits)
    WHERE b.first_i IS NULL OR x.start_ns < b.group_end OR x.start_ns < b.prev_reach OR x.end_ns > b.next_start
),
candidates AS (
    SELECT * EXCLUDE (i0, i1, beyond), i1 AS i FROM placed WHERE NOT beyond AND i0 = i1
    UNION ALL
    SELECT * EXCLUDE (i0, i1, beyond), unnest(range(i0, i1 + 1)) AS i FROM placed WHERE NOT beyond AND i0 < i1
    UNION ALL
    SELECT p.* EXCLUDE (i0, i1, beyond), unnest(range(p.i0, u.last_i + 1)) AS i
    FROM (SELECT * FROM placed WHERE beyond) AS p
    ASOF JOIN starts AS u ON u.run_id = p.run_id AND u.rank = p.rank AND p.end_ns > u.start_ns
),
hits AS (
    SELECT c.run_id, c.rank, c.source, c.name, c.start_ns, c.end_ns, c.duration_ns, st.start_ns AS s0,
           st.end_ns AS s1
    FROM candidates AS c
    JOIN st USING (run_id, rank, i)
    WHERE CASE c.source
        -- a host wait overlapping the step, of the step's thread (any thread for kernel-pattern steps)
        WHEN 'host_wait' THEN c.start_ns < st.end_ns AND c.end_ns > st.start_ns
                              AND (st.tid IS NULL OR c.tid = st.tid)
        -- an op of the step's thread overlapping the step, not spanning it (ProfilerStep#N)
        ELSE c.tid = st.tid AND c.start_ns < st.end_ns AND c.end_ns > st.start_ns
             AND NOT (c.start_ns <= st.start_ns AND c.end_ns >= st.end_ns)
    END
),
-- NVTX ranges inside a step (5M rows at 1M kernels) meet the steps in time buckets of about a
-- step's length (the rank's span over its steps): each step is listed in every bucket it touches,
-- each range in the bucket of its start, which a step holding the range touches; the join is on
-- equality and each range meets the one or two steps of its bucket
sb AS (
    SELECT st.run_id, st.rank, st.start_ns, st.end_ns,
           unnest(range((st.start_ns - b.lo) // b.w, (st.end_ns - b.lo) // b.w + 1)) AS b
    FROM st
    JOIN nb AS b USING (run_id, rank)
),
-- the ranges by base name (their name where it has none): the two read apart, so that the base
-- names, few and stored as a dictionary, are read without the names (a scan of base_name IS NULL
-- skips what holds no NULL)
ranges AS NOT MATERIALIZED (
    SELECT report_id, pid, base_name AS name, start_ns, end_ns, duration_ns FROM nvtx_ranges WHERE base_name IS NOT NULL
    UNION ALL
    SELECT report_id, pid, name, start_ns, end_ns, duration_ns FROM nvtx_ranges WHERE base_name IS NULL
),
-- the ranges within the span: of the rank's process (a hash join on it), or of the whole report
vb AS (
    SELECT b.run_id, b.rank, v.name, v.start_ns, v.end_ns, v.duration_ns, (v.start_ns - b.lo) // b.w AS b
    FROM nb AS b
    JOIN ranges AS v ON v.report_id = b.report_id AND v.pid = b.pid
    WHERE v.start_ns >= b.lo AND v.end_ns <= b.hi
    UNION ALL
    SELECT b.run_id, b.rank, v.name, v.start_ns, v.end_ns, v.duration_ns, (v.start_ns - b.lo) // b.w
    FROM nb AS b
    JOIN ranges AS v ON v.report_id = b.report_id
    WHERE b.pid IS NULL AND v.start_ns >= b.lo AND v.end_ns <= b.hi
),
-- an NVTX range inside the step, not the step's own range
phases AS (
    SELECT v.run_id, v.rank, 'nvtx' AS source, v.name, sum(v.duration_ns) AS total_ns
    FROM vb AS v
    JOIN sb AS s ON s.run_id = v.run_id AND s.rank = v.rank AND s.b = v.b
    WHERE v.start_ns >= s.start_ns AND v.end_ns <= s.end_ns
      AND NOT (v.start_ns = s.start_ns AND v.end_ns = s.end_ns)
    GROUP BY ALL
),
waits AS (
    SELECT run_id, rank, 'host_wait' AS source, name, sum(least(end_ns, s1) - greatest(start_ns, s0)) AS total_ns
    FROM hits
    WHERE source = 'host_wait'
    GROUP BY ALL
),
-- compute kernels, summed per name id and named afterwards (the names are the `kernels` view's)
kern_ids AS (
    SELECT n.run_id, n.rank, k.report_id, k.name_id, sum(k.duration_ns) AS total_ns
    FROM n
    JOIN kernel_rows AS k
        ON k.report_id = n.report_id AND k.device_id = n.device_id AND (n.pid IS NULL OR k.pid = n.pid)
        AND k.start_ns >= n.lo AND k.start_ns < n.hi
    ANTI JOIN comm_ops AS c
        ON c.report_id = k.report_id AND c.device_id = k.device_id AND c.start_ns = k.start_ns
        AND c.stream_id IS NOT DISTINCT FROM k.stream_id
    GROUP BY ALL
),
kern AS (
    SELECT k.run_id, k.rank, 'kernel' AS source, kn.name, sum(k.total_ns) AS total_ns
    FROM kern_ids AS k
    LEFT JOIN kernel_names AS kn USING (report_id, name_id)
    GROUP BY ALL
),
-- PyTorch profiler traces: host time of the step's thread that no recorded op covers (Python
-- between torch calls: data loading, sleeps, logging), per step: the step minus the union of the
-- thread's ops and annotations inside it
host_ops AS (
    SELECT run_id, rank, s0, s1, greatest(start_ns, s0) AS a, least(end_ns, s1) AS b
    FROM hits
    WHERE source = 'op'
),
covered AS (
    SELECT run_id, rank, s0, s1, sum(greatest(0, b - greatest(a, coalesce(prev, a)))) AS covered_ns
    FROM (
        SELECT *, max(b) OVER (
            PARTITION BY run_id, rank, s0 ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev
        FROM host_ops
    )
    GROUP BY run_id, rank, s0, s1
),
gaps AS (
    SELECT run_id, rank, 'host_gap' AS source, 'host time outside recorded ops' AS name,
           sum(s1 - s0 - covered_ns) AS total_ns
    FROM covered
    GROUP BY run_id, rank
)
SELECT a.run_id, a.rank, a.source, a.name, CAST(a.total_ns AS BIGINT) AS total_ns, n.steps,
       CAST(a.total_ns AS DOUBLE) / n.steps AS per_step_ns
FROM (SELECT * FROM phases UNION ALL SELECT * FROM waits UNION ALL SELECT * FROM kern UNION ALL SELECT * FROM gaps) AS a
JOIN n USING (run_id, rank)
ORDER BY a.run_id, a.rank, a.source, a.name
