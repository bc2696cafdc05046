-- Macros shared by the run queries (queries/runs/); the query runner executes this file after
-- queries/nsys/_macros.sql (nsa_union_ns). A rank is a report (ranks.pid NULL) or one process of
-- a report (ranks.pid set): its rows are the report's, of that process when pid is set, and only
-- those of its GPU (ranks.device_id). Times are the rank's report clock unless a column says run
-- clock (report clock + ranks.clock_offset_ns, as the `collectives` view has them).
-- Macro parameters are spelled nsa_* so they never shadow a column of the same name.

-- nsa_rank_activity(nsa_run): the GPU activity of each rank of run `nsa_run` (all runs when
-- NULL): run_id, rank, report_id, pid, correlation_id, start_ns, end_ns (report clock) and class:
-- 'comm' (a comm_ops kernel), 'compute' (every other kernel, and CUDA graph executions traced as
-- one row), 'copy' (memcpy and memset: neither). A kernel is the comm op comm_ops holds for its
-- report, GPU and stream at the same start. Rows without a start or with end < start are dropped.
CREATE OR REPLACE MACRO nsa_rank_activity(nsa_run) AS TABLE
    WITH r AS (
        SELECT run_id, rank, report_id, pid AS rank_pid, device_id
        FROM ranks
        WHERE nsa_run IS NULL OR run_id = nsa_run
    ),
    k AS (
        SELECT report_id, device_id, pid, stream_id, correlation_id, start_ns, end_ns
        FROM kernel_rows
        WHERE start_ns IS NOT NULL AND end_ns >= start_ns
    ),
    a AS (
        SELECT k.report_id, k.device_id, k.pid, k.correlation_id, k.start_ns, k.end_ns, 'compute' AS class
        FROM k
        ANTI JOIN comm_ops AS c
            ON c.report_id = k.report_id AND c.device_id = k.device_id AND c.start_ns = k.start_ns
           AND c.stream_id IS NOT DISTINCT FROM k.stream_id
        UNION ALL
        SELECT report_id, device_id, pid, correlation_id, start_ns, end_ns, 'comm'
        FROM comm_ops
        WHERE start_ns IS NOT NULL AND end_ns >= start_ns
        UNION ALL
        SELECT report_id, device_id, pid, correlation_id, start_ns, end_ns, 'copy'
        FROM memcpy
        WHERE start_ns IS NOT NULL AND end_ns >= start_ns
        UNION ALL
        SELECT report_id, device_id, pid, correlation_id, start_ns, end_ns, 'copy'
        FROM memset
        WHERE start_ns IS NOT NULL AND end_ns >= start_ns
        UNION ALL
        SELECT report_id, device_id, pid, correlation_id, start_ns, end_ns, 'compute'
        FROM graph_executions
        WHERE start_ns IS NOT NULL AND end_ns >= start_ns
    )
    SELECT r.run_id, r.rank, a.report_id, a.pid, a.correlation_id, a.start_ns, a.end_ns, a.class
    FROM a
    JOIN r ON r.report_id = a.report_id AND r.device_id = a.device_id
    WHERE r.rank_pid IS NULL OR a.pid = r.rank_pid;

-- nsa_rank_steps(nsa_run): each rank's steady steps and their GPU windows, as diff/timeline.py
-- defines GPU step time: run_id, rank, step (steps.step: 0-based position in its series), number
-- (steps.number), source ('nvtx', 'graphs' or 'kernels'), start_ns / end_ns (the GPU window,
-- report clock) and host_ns (the step range's own duration: host time for NVTX and graph steps,
-- the window for kernel steps).
--   - A rank's steps are its report's `steps` of its process (NVTX and graph steps) or of its GPU
--     (kernel-pattern steps); of several series (threads), the one with the most steady steps
--     (ties: the lowest series id).
--   - NVTX steps (and graph steps: host ranges from one graph launch call to the next): a
--     step's work is the GPU activity of the rank's GPU (gpu_timeline's rows) launched inside
--     the step's host range by the range's process (its launch call, cuda_api joined on
--     report_id, pid, correlation_id, starts in the range; without a launch call the GPU start
--     stands in).
--     diff/timeline.py takes every GPU of the process: the same windows for a process on one GPU. Its window runs from the first GPU start of
--     its work to the first GPU start of the next step's (steps without work are skipped; a step
--     whose next step starts no later is dropped); the last step's, to the later of its work's
--     end on the GPU and its range's end on the host.
--   - Kernel-pattern steps are GPU times already: the window is the step.
-- Only steady steps are returned; a rank without any has no row.
CREATE OR REPLACE MACRO nsa_rank_steps(nsa_run) AS TABLE
    WITH r AS (
        SELECT run_id, rank, report_id, pid AS rank_pid, device_id
        FROM ranks
        WHERE nsa_run IS NULL OR run_id = nsa_run
    ),
    rs AS (
        SELECT r.run_id, r.rank, s.series, s.step, s.number, s.source, s.pid, s.start_ns, s.end_ns, s.steady
        FROM steps AS s
        JOIN r ON r.report_id = s.report_id
        WHERE CASE WHEN s.source = 'kernels' THEN s.device_id = r.device_id
                   ELSE r.rank_pid IS NULL OR s.pid = r.rank_pid END
    ),
    pick AS (
        SELECT run_id, rank, arg_min(series, (-n, series)) AS series
        FROM (SELECT run_id, rank, series, count(*) FILTER (WHERE steady) AS n FROM rs GROUP BY ALL)
        WHERE n > 0
        GROUP BY ALL
    ),
    mine AS (SELECT rs.* FROM rs SEMI JOIN pick USING (run_id, rank, series)),
    nvtx AS (SELECT * FROM mine WHERE source IN ('nvtx', 'graphs')),
    -- the rank's GPU activity as gpu_timeline lists it (kernels, communication kernels among
    -- them, copies, memsets, graph executions): which is communication does not matter here
    step_work AS (
        SELECT r.run_id, r.rank, a.report_id, a.pid, a.correlation_id, a.start_ns, a.end_ns
        FROM gpu_timeline AS a
        JOIN r ON r.report_id = a.report_id AND r.device_id = a.device_id
        SEMI JOIN (SELECT DISTINCT run_id, rank, pid FROM nvtx) AS m
            ON m.run_id = r.run_id AND m.rank = r.rank AND m.pid = a.pid
        WHERE r.rank_pid IS NULL OR a.pid = r.rank_pid
    ),
    -- each activity's launch call: one join, where no activity meets two calls of its key (nsys
    -- gives each call its own correlation id); else, the earliest call of each key: the calls
    -- that launched this work grouped (the semi join skips the many that launch nothing: event
    -- records, syncs, queries), joined back. `one` holds whether the join kept the row count.
    joined AS MATERIALIZED (
        SELECT w.run_id, w.rank, w.start_ns, w.end_ns, coalesce(c.start_ns, w.start_ns) AS launch_ns
        FROM step_work AS w
        LEFT JOIN cuda_api AS c
            ON c.report_id = w.report_id AND c.pid = w.pid AND c.correlation_id = w.correlation_id
    ),
    one AS (SELECT (SELECT count(*) FROM joined) = (SELECT count(*) FROM step_work) AS one),
    -- the work again when a key has two calls (empty otherwise, so neither join below runs)
    again AS (SELECT * FROM step_work WHERE NOT (SELECT one FROM one)),
    launch AS (
        SELECT c.report_id, c.pid, c.correlation_id, min(c.start_ns) AS launch_ns
        FROM cuda_api AS c
        SEMI JOIN again AS w
            ON w.report_id = c.report_id AND w.pid = c.pid AND w.correlation_id = c.correlation_id
        GROUP BY ALL
    ),
    act AS (
        SELECT * FROM joined WHERE (SELECT one FROM one)
        UNION ALL
        SELECT w.run_id, w.rank, w.start_ns, w.end_ns, coalesce(l.launch_ns, w.start_ns)
        FROM again AS w
        LEFT JOIN launch AS l
            ON l.report_id = w.report_id AND l.pid = w.pid AND l.correlation_id = w.correlation_id
    ),
    -- the step whose range holds the launch: the last one starting at or before it (a series'
    -- ranges follow each other; step detection keeps one range of a start), if it has not ended.
    -- Each step owns the time from its start up to the next one's start or past its own end,
    -- whichever comes first, listed in every time bucket (about a step's length from the rank's
    -- first step) it touches: a launch meets its step by a hash join on its bucket, not a sort
    nb AS MATERIALIZED (
        SELECT run_id, rank, lo, greatest((hi - lo) // n, 1) AS bw
        FROM (SELECT run_id, rank, min(start_ns) AS lo, max(end_ns) AS hi, count(start_ns) AS n FROM nvtx GROUP BY ALL)
        WHERE hi >= lo
    ),
    owned AS (
        SELECT s.run_id, s.rank, s.step, s.start_ns, s.upto,
               unnest(range((s.start_ns - b.lo) // b.bw, (s.upto - 1 - b.lo) // b.bw + 1)) AS bk
        FROM (
            SELECT run_id, rank, step, start_ns, end_ns,
                   least(lead(start_ns) OVER (PARTITION BY run_id, rank ORDER BY start_ns), end_ns + 1) AS upto
            FROM nvtx
            WHERE start_ns IS NOT NULL
        ) AS s
        JOIN nb AS b USING (run_id, rank)
        WHERE s.end_ns IS NOT NULL AND s.upto > s.start_ns
    ),
    work AS (
        SELECT s.run_id, s.rank, s.step, min(a.start_ns) AS first_ns, max(a.end_ns) AS last_ns
        FROM (
            SELECT a.*, (a.launch_ns - b.lo) // b.bw AS bk FROM act AS a JOIN nb AS b USING (run_id, rank)
        ) AS a
        JOIN owned AS s
            ON s.run_id = a.run_id AND s.rank = a.rank AND s.bk = a.bk
           AND a.launch_ns >= s.start_ns AND a.launch_ns < s.upto
        GROUP BY ALL
    ),
    placed AS (
        SELECT n.run_id, n.rank, n.step, n.number, n.source, n.steady, n.start_ns AS host_start, n.end_ns AS host_end,
               w.first_ns, w.last_ns,
               lead(w.first_ns) OVER (PARTITION BY n.run_id, n.rank ORDER BY n.step) AS next_ns
        FROM nvtx AS n
        JOIN work AS w USING (run_id, rank, step)
    )
    SELECT run_id, rank, step, number, source, first_ns AS start_ns,
           coalesce(next_ns, greatest(last_ns, host_end)) AS end_ns, host_end - host_start AS host_ns
    FROM placed
    WHERE steady AND (next_ns IS NULL OR next_ns > first_ns)
    UNION ALL
    SELECT run_id, rank, step, number, 'kernels', start_ns, end_ns, end_ns - start_ns
    FROM mine
    WHERE source = 'kernels' AND steady AND end_ns > start_ns;

-- nsa_clip(end, hi): end, no later than hi; NULL when end is NULL (least() would skip it).
CREATE OR REPLACE MACRO nsa_clip(nsa_end, nsa_hi) AS CASE WHEN nsa_end > nsa_hi THEN nsa_hi ELSE nsa_end END;

-- nsa_rank_windows(nsa_run): the windows each rank of run `nsa_run` (all runs when NULL) is
-- measured over, with what ran in each: one row per rank and steady step (phase 'steady', the
-- windows of nsa_rank_steps), or, for a rank without steady steps, one row spanning its GPU
-- activity from first start to last end (phase 'run', step NULL). Columns: run_id, rank,
-- report_id, pid, device_id, clock_offset_ns, phase, step, number, source, start_ns, end_ns
-- (report clock), host_ns, window_ns, and the unions of the rank's activity within the window
-- (ns): comm_ns, compute_ns, cc_ns (communication or compute) and busy_ns (anything, copies and
-- memsets too). Overlapped communication = comm_ns + compute_ns - cc_ns; exposed = cc_ns -
-- compute_ns; idle = window_ns - busy_ns.
-- Each activity belongs to the window its start falls in and is clipped to that window's end
-- (the latest end of the windows started so far); what earlier activity still covers when a
-- window starts (the running max of earlier ends) is counted at that start, so activity reaching
-- across a window bound is split exactly. The running maxima come from one of two places:
--   - a rank whose GPU's stored timeline is its own (the rank is the whole report, or its process
--     the only one there) reads them from gpu_timeline (compute: the kernels but the communication
--     ones, gpu_timeline.comm, and graph executions; either: every kernel and graph execution;
--     anything: copies and memsets too); communication's, from one sorted pass over the
--     communication kernels alone (a few percent of the rows). Its activities meet their
--     windows in time buckets of about a window's length (each window owns its start up to the
--     next one's; bucket 0 what comes before the first), and a window's start takes the largest
--     maxima of the slots before it;
--   - any other rank: one sorted pass per rank over its activity (nsa_rank_activity's, read from
--     gpu_timeline with its comm flag) and its windows' starts, with the running maxima of comm,
--     compute and copy ends.
CREATE OR REPLACE MACRO nsa_rank_windows(nsa_run) AS TABLE
    WITH rk AS (
        SELECT run_id, rank, report_id, pid AS rank_pid, device_id
        FROM ranks
        WHERE nsa_run IS NULL OR run_id = nsa_run
    ),
    dev AS (
        SELECT t.report_id, t.device_id, count(*) AS n, count(t.pid) AS n_pid, min(t.pid) AS lo_pid,
               max(t.pid) AS hi_pid, min(t.start_ns) AS lo, max(t.end_ns) AS hi, count(*) - count(t.comm) AS unflagged
        FROM gpu_timeline AS t
        SEMI JOIN rk ON rk.report_id = t.report_id AND rk.device_id = t.device_id
        GROUP BY t.report_id, t.device_id
    ),
    -- ranks whose GPU's stored timeline is theirs alone and has its comm flag (gpu_comm: a
    -- library query asks for it; SQL calling this macro on a timeline worked out without it takes
    -- the sorted pass below), with their activity's span
    plain AS MATERIALIZED (
        SELECT rk.run_id, rk.rank, rk.report_id, rk.device_id, d.lo, d.hi
        FROM rk
        JOIN dev AS d ON d.report_id = rk.report_id AND d.device_id = rk.device_id
        WHERE d.unflagged = 0
          AND (rk.rank_pid IS NULL OR (d.n_pid = d.n AND d.lo_pid = rk.rank_pid AND d.hi_pid = rk.rank_pid))
    ),
    -- the other ranks' activity (nsa_rank_activity's, its classes from the stored flag, else from
    -- comm_ops as the build matches them): the join is empty where every rank has its GPU to itself
    a AS MATERIALIZED (
        SELECT r.run_id, r.rank, g.start_ns, g.end_ns,
               CASE WHEN coalesce(g.comm, c.report_id IS NOT NULL) THEN 'comm'
                    WHEN g.kind IN ('memcpy', 'memset') THEN 'copy' ELSE 'compute' END AS class
        FROM gpu_timeline AS g
        JOIN (SELECT * FROM rk ANTI JOIN plain AS p ON p.run_id = rk.run_id AND p.rank = rk.rank) AS r
            ON r.report_id = g.report_id AND r.device_id = g.device_id
        LEFT JOIN (SELECT DISTINCT report_id, device_id, stream_id, start_ns FROM comm_ops) AS c
            ON g.comm IS NULL AND g.kind = 'kernel' AND c.report_id = g.report_id AND c.device_id = g.device_id
           AND c.start_ns = g.start_ns AND c.stream_id IS NOT DISTINCT FROM g.stream_id
        WHERE r.rank_pid IS NULL OR g.pid = r.rank_pid
    ),
    s AS MATERIALIZED (SELECT * FROM nsa_rank_steps(nsa_run)),
    w AS MATERIALIZED (
        SELECT *, row_number() OVER (PARTITION BY run_id, rank ORDER BY start_ns) AS wid
        FROM (
            SELECT run_id, rank, 'steady' AS phase, step, number, source, start_ns, end_ns, host_ns
            FROM s
            UNION ALL
            SELECT run_id, rank, 'run', NULL, NULL, NULL, lo, hi, NULL
            FROM (
                SELECT run_id, rank, min(start_ns) AS lo, max(end_ns) AS hi FROM a GROUP BY run_id, rank
                UNION ALL
                SELECT run_id, rank, lo, hi FROM plain
            ) AS span
            ANTI JOIN s USING (run_id, rank)
        )
    ),
    -- the sorted pass: activity (ord 1) and window starts (ord 0) in time order; rows of one time
    -- may come in any order: an activity that starts with a window and sorts before that start is
    -- counted by the start, as what covers it
    x AS (
        SELECT run_id, rank, start_ns AS t, 1 AS ord,
               CASE WHEN class = 'comm' THEN end_ns END AS c_end,
               CASE WHEN class = 'compute' THEN end_ns END AS k_end,
               CASE WHEN class = 'copy' THEN end_ns END AS o_end,
               NULL::BIGINT AS wid, NULL::BIGINT AS w_end
        FROM a
        UNION ALL
        SELECT w.run_id, w.rank, w.start_ns, 0, NULL, NULL, NULL, w.wid, w.end_ns
        FROM w
        ANTI JOIN plain AS p ON p.run_id = w.run_id AND p.rank = w.rank
    ),
    y AS (
        SELECT *,
               max(c_end) OVER prev AS c_prev,
               max(k_end) OVER prev AS k_prev,
               max(o_end) OVER prev AS o_prev,
               max(wid) OVER prev AS in_wid,
               max(w_end) OVER prev AS in_end
        FROM x
        WINDOW prev AS (
            PARTITION BY run_id, rank ORDER BY t
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        )
    ),
    -- a window start counts what earlier activity covers after it (up to the window's end); an
    -- activity, its part not covered before it (up to its window's end)
    z AS (
        SELECT run_id, rank, wid,
               coalesce(greatest(0, nsa_clip(c_prev, w_end) - t), 0) AS comm_add,
               coalesce(greatest(0, nsa_clip(k_prev, w_end) - t), 0) AS comp_add,
               coalesce(greatest(0, nsa_clip(greatest(c_prev, k_prev), w_end) - t), 0) AS cc_add,
               coalesce(greatest(0, nsa_clip(greatest(c_prev, k_prev, o_prev), w_end) - t), 0) AS any_add
        FROM y
        WHERE ord = 0
        UNION ALL
        SELECT run_id, rank, in_wid,
               nsa_union_ns(nsa_clip(c_end, in_end), t, c_prev),
               nsa_union_ns(nsa_clip(k_end, in_end), t, k_prev),
               nsa_union_ns(nsa_clip(greatest(c_end, k_end), in_end), t, greatest(c_prev, k_prev)),
               nsa_union_ns(nsa_clip(greatest(c_end, k_end, o_end), in_end), t, greatest(c_prev, k_prev, o_prev))
        FROM y
        WHERE ord = 1 AND t < in_end
    ),
    -- the stored timeline's ranks: each window owns [its start, the next one's start), slot 0 what
    -- comes before the first; reach is the latest end of the windows started so far (the clip)
    slot AS (
        SELECT w.run_id, w.rank, p.report_id, p.device_id, w.wid, w.start_ns AS s_lo,
               coalesce(lead(w.start_ns) OVER byw, greatest(p.hi, w.start_ns) + 1) AS s_hi,
               max(w.end_ns) OVER (byw ROWS UNBOUNDED PRECEDING) AS reach,
               least(p.lo, min(w.start_ns) OVER one) AS o,
               greatest(p.hi, max(w.start_ns) OVER one) AS top,
               count(*) OVER one AS n
        FROM w
        JOIN plain AS p ON p.run_id = w.run_id AND p.rank = w.rank
        WINDOW one AS (PARTITION BY w.run_id, w.rank), byw AS (PARTITION BY w.run_id, w.rank ORDER BY w.wid)
    ),
    -- buckets of about a window's length from the rank's first start
    slots AS MATERIALIZED (
        SELECT run_id, rank, report_id, device_id, wid, s_lo, s_hi, reach, o, greatest((top - o) // n, 1) AS bw
        FROM slot
        UNION ALL
        SELECT run_id, rank, report_id, device_id, 0, o, s_lo, NULL, o, greatest((top - o) // n, 1)
        FROM slot
        WHERE wid = 1
    ),
    sb AS (
        SELECT run_id, rank, wid, s_lo, s_hi, reach, unnest(range((s_lo - o) // bw, (s_hi - 1 - o) // bw + 1)) AS b
        FROM slots
        WHERE s_hi > s_lo
    ),
    ranked AS (
        SELECT DISTINCT run_id, rank, report_id, device_id, o, bw FROM slots
    ),
    -- each activity: its end by class (comm, compute, either, any) and the running maxima of
    -- earlier ends (the stored ones; communication's over its own kernels, in time order)
    tl AS (
        SELECT r.run_id, r.rank, g.start_ns AS t, g.end_ns AS a_end, NULL::BIGINT AS c_end,
               CASE WHEN g.kind IN ('kernel', 'graph') THEN g.end_ns END AS k_end,
               CASE WHEN g.kind IN ('kernel', 'graph') THEN g.end_ns END AS cc_end,
               NULL::BIGINT AS c_prev, g.prev_compute_end_ns AS k_prev,
               greatest(g.prev_kernel_end_ns, g.prev_graph_end_ns) AS cc_prev, g.prev_end_ns AS a_prev,
               (g.start_ns - r.o) // r.bw AS b
        FROM gpu_timeline AS g
        JOIN ranked AS r ON r.report_id = g.report_id AND r.device_id = g.device_id
        WHERE NOT g.comm
        UNION ALL
        SELECT r.run_id, r.rank, g.start_ns, g.end_ns, g.end_ns, NULL, g.end_ns,
               max(g.end_ns) OVER (
                   PARTITION BY r.run_id, r.rank ORDER BY g.start_ns, g.end_ns
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
               ),
               NULL, greatest(g.prev_kernel_end_ns, g.prev_graph_end_ns), g.prev_end_ns,
               (g.start_ns - r.o) // r.bw
        FROM gpu_timeline AS g
        JOIN ranked AS r ON r.report_id = g.report_id AND r.device_id = g.device_id
        WHERE g.comm
    ),
    -- per slot: what its activities add (those starting before its reach) and the maxima after it
    per_slot AS (
        SELECT sb.run_id, sb.rank, sb.wid,
               max(greatest(tl.c_prev, tl.c_end)) AS c_max,
               max(greatest(tl.k_prev, tl.k_end)) AS k_max,
               max(greatest(tl.cc_prev, tl.cc_end)) AS cc_max,
               max(greatest(tl.a_prev, tl.a_end)) AS any_max,
               sum(CASE WHEN tl.t < sb.reach THEN nsa_union_ns(nsa_clip(tl.c_end, sb.reach), tl.t, tl.c_prev) END) AS comm_add,
               sum(CASE WHEN tl.t < sb.reach THEN nsa_union_ns(nsa_clip(tl.k_end, sb.reach), tl.t, tl.k_prev) END) AS comp_add,
               sum(CASE WHEN tl.t < sb.reach THEN nsa_union_ns(nsa_clip(tl.cc_end, sb.reach), tl.t, tl.cc_prev) END) AS cc_add,
               sum(CASE WHEN tl.t < sb.reach THEN nsa_union_ns(nsa_clip(tl.a_end, sb.reach), tl.t, tl.a_prev) END) AS any_add
        FROM tl
        JOIN sb ON sb.run_id = tl.run_id AND sb.rank = tl.rank AND sb.b = tl.b
        WHERE tl.t >= sb.s_lo AND tl.t < sb.s_hi
        GROUP BY sb.run_id, sb.rank, sb.wid
    ),
    -- each window of those ranks: what covers its start (the maxima of the slots before it) and
    -- what its own slot adds
    pz AS (
        SELECT sl.run_id, sl.rank, sl.wid, ps.comm_add, ps.comp_add, ps.cc_add, ps.any_add,
               max(ps.c_max) OVER before AS c_before,
               max(ps.k_max) OVER before AS k_before,
               max(ps.cc_max) OVER before AS cc_before,
               max(ps.any_max) OVER before AS any_before
        FROM slots AS sl
        LEFT JOIN per_slot AS ps ON ps.run_id = sl.run_id AND ps.rank = sl.rank AND ps.wid = sl.wid
        WINDOW before AS (PARTITION BY sl.run_id, sl.rank ORDER BY sl.wid ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    ),
    u AS (
        SELECT run_id, rank, wid,
               coalesce(sum(comm_add), 0) AS comm_ns,
               coalesce(sum(comp_add), 0) AS compute_ns,
               coalesce(sum(cc_add), 0) AS cc_ns,
               coalesce(sum(any_add), 0) AS busy_ns
        FROM z
        GROUP BY run_id, rank, wid
        UNION ALL
        SELECT pz.run_id, pz.rank, pz.wid,
               coalesce(greatest(0, nsa_clip(pz.c_before, w.end_ns) - w.start_ns), 0) + coalesce(pz.comm_add, 0),
               coalesce(greatest(0, nsa_clip(pz.k_before, w.end_ns) - w.start_ns), 0) + coalesce(pz.comp_add, 0),
               coalesce(greatest(0, nsa_clip(pz.cc_before, w.end_ns) - w.start_ns), 0) + coalesce(pz.cc_add, 0),
               coalesce(greatest(0, nsa_clip(pz.any_before, w.end_ns) - w.start_ns), 0) + coalesce(pz.any_add, 0)
        FROM pz
        JOIN w ON w.run_id = pz.run_id AND w.rank = pz.rank AND w.wid = pz.wid
    )
    SELECT w.run_id, w.rank, r.report_id, r.pid, r.device_id, coalesce(r.clock_offset_ns, 0) AS clock_offset_ns,
           w.phase, w.step, w.number, w.source, w.start_ns, w.end_ns, w.host_ns,
           w.end_ns - w.start_ns AS window_ns,
           CAST(u.comm_ns AS BIGINT) AS comm_ns,
           CAST(u.compute_ns AS BIGINT) AS compute_ns,
           CAST(u.cc_ns AS BIGINT) AS cc_ns,
           CAST(u.busy_ns AS BIGINT) AS busy_ns
    FROM w
    JOIN u USING (run_id, rank, wid)
    JOIN ranks AS r USING (run_id, rank);

-- nsa_collective_ranks(nsa_run): each rank's part of each collective of run `nsa_run` (all runs
-- when NULL) seen on at least two ranks, from `collectives` (run clock), the rank's GPU only (of
-- two ops of one rank with the same channel and seq, the earlier): run_id, channel, seq, rank,
-- report_id, op, dtype, message_bytes, group_size, start_ns, end_ns, duration_ns (end - start),
-- and over the collective's ranks: ranks, first_arrival_ns / last_arrival_ns (earliest / latest
-- start), first_end_ns / last_end_ns, latency_ns (shortest duration) and last_rank (the rank
-- that started last; ties: the lowest rank).
CREATE OR REPLACE MACRO nsa_collective_ranks(nsa_run) AS TABLE
    WITH c AS (
        SELECT c.run_id, c.channel, c.seq, c.rank, c.report_id, c.op, c.dtype, c.message_bytes, c.group_size,
               c.start_ns, c.end_ns, c.end_ns - c.start_ns AS duration_ns
        FROM collectives AS c
        JOIN ranks AS r ON r.run_id = c.run_id AND r.rank = c.rank
        WHERE (nsa_run IS NULL OR c.run_id = nsa_run) AND c.device_id = r.device_id
          AND c.start_ns IS NOT NULL AND c.end_ns >= c.start_ns
        QUALIFY row_number() OVER (PARTITION BY c.run_id, c.channel, c.seq, c.rank ORDER BY c.start_ns) = 1
    ),
    -- the collective's numbers over its ranks: one group per collective, joined back to its ranks
    g AS (
        SELECT run_id, channel, seq,
               count(*) AS ranks,
               min(start_ns) AS first_arrival_ns,
               max(start_ns) AS last_arrival_ns,
               min(end_ns) AS first_end_ns,
               max(end_ns) AS last_end_ns,
               min(duration_ns) AS latency_ns,
               arg_min(rank, (-start_ns, rank)) AS last_rank
        FROM c
        GROUP BY run_id, channel, seq
        HAVING count(*) >= 2
    )
    SELECT c.*, g.ranks, g.first_arrival_ns, g.last_arrival_ns, g.first_end_ns, g.last_end_ns, g.latency_ns, g.last_rank
    FROM c
    JOIN g ON g.run_id = c.run_id AND g.channel IS NOT DISTINCT FROM c.channel AND g.seq IS NOT DISTINCT FROM c.seq;
