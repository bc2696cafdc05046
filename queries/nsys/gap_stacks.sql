-- Which line of code the GPU's idle time waited on: per report, device and stack source, the
-- call stacks sampled or recorded on the thread that launched the work ending each idle gap,
-- while the gap lasted, grouped by their innermost user frame (the program's own code, not a
-- library: stack_frames.user) and the library frame that frame was calling, ranked by the idle
-- time they explain. The gaps are those of `gap_host`: the steady state's idle intervals at least
-- min_gap_ns long (gaps whose midpoint lies after the first steady step; for reports without
-- steps everything after the device's first kernel), the launching thread the thread of the CUDA
-- API call with the activity's report_id, pid and correlation_id. Stack sources:
--   python_sample  nsys Python samples (`--python-sampling=true`);
--   cpu_sample     nsys CPU samples (`-s cpu`): native frames, the user's own for C++ programs;
--   kineto_python  PyTorch-profiler Python frames (`with_stack=True`), as intervals: at each moment
--                  the innermost frame open on the thread, whose stack holds its callers.
-- A gap's time is shared among the samples of a source taken in it (each sample explains
-- gap_ns / samples of the gap); a frame interval explains its overlap with the gaps (one that
-- spans several counts with the last in per_gap rows). Where a window has gaps but no stack of
-- any source on its launching threads, one row with source NULL says why in `note` and which
-- capture option records them. Linear: the gaps in one sorted pass, samples and frame boundaries
-- placed in them by ASOF joins per thread, the idle time before a moment by a running sum of gap
-- time (no join of gaps against samples by range). Only the gaps of processes that have stacks
-- are matched to their launch calls: a capture without stacks costs its gaps' totals.
-- reads cuda_api, gpu_timeline, kernel_rows, reports, stack_events, stack_frames, stacks, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param min_gap_ns BIGINT = 0: shortest idle gap counted (ns); 0 counts all idle time.
-- param per_gap BOOLEAN = false: one group of rows per gap (gap_start_ns set) instead of totals over the window.
-- param step INTEGER = NULL: only the idle time of this step (steps.step; from the step's first start to its last end over the report's series), its gaps clipped to the step. A step of the steady state: a warm-up step gets one note row instead (its idle time is start-up, which gpu-idle does not judge: ask hot_stacks over its span). The whole window when NULL.
-- param top_n INTEGER = 10: keep the N rows that explain the most per report, device, source (and gap); all when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id of the gaps.
-- col gap_start_ns BIGINT: the gap's start (ns); NULL for totals over the window.
-- col source VARCHAR: python_sample, cpu_sample or kineto_python; NULL on a note row.
-- col user_function VARCHAR: the innermost user frame's function (`load_batch`); NULL when the stack has no user frame.
-- col user_file VARCHAR: its file (Python) or binary (native).
-- col user_line INTEGER: its line (Python frames; Kineto gives the function's first line).
-- col library_frame VARCHAR: the frame the user frame was calling (`tensor`, `cudaStreamSynchronize`), or the innermost frame when no user frame; NULL when the user frame is the innermost.
-- col callers VARCHAR: the user frames calling the user frame, innermost first (`train_step < main < <module>`), of its most frequent stack.
-- col explained_ns BIGINT: idle time explained by these stacks (ns).
-- col share DOUBLE: explained_ns / idle_ns.
-- col events BIGINT: samples or frame intervals counted.
-- col idle_ns BIGINT: idle time of the window's gaps, or of the gap (ns).
-- col note VARCHAR: on a row with source NULL: why there are no stacks and which capture option records them, or why a warm-up step is refused.
WITH
-- with a step: its span over the report's series, and whether it is steady
step_window AS (
    SELECT report_id, min(start_ns) AS s0, max(end_ns) AS s1, bool_or(steady) AS steady
    FROM steps
    WHERE $step IS NOT NULL AND step = $step AND ($report_id IS NULL OR report_id = $report_id)
    GROUP BY ALL
),
-- the stack sources, numbered: a small key through the sorts, joins and groups below
sources AS (SELECT * FROM (VALUES (1, 'python_sample'), (2, 'cpu_sample'), (3, 'kineto_python')) AS s (src, source)),
ev AS NOT MATERIALIZED (
    SELECT e.report_id, s.src, e.start_ns, e.end_ns, e.pid, e.global_tid, e.stack_id
    FROM stack_events AS e
    JOIN sources AS s USING (source)
    WHERE ($report_id IS NULL OR e.report_id = $report_id) AND e.stack_id IS NOT NULL
),
-- the window's gaps, a row each: the activity ending one is the first after it on its device, in
-- gpu_timeline's (start_ns, end_ns) order (any later one has that one's end in prev_end_ns), so a
-- gap's start is its own (tests/test_stacks.py checks it on every capture)
ends AS NOT MATERIALIZED (SELECT * FROM nsa_window_gaps($report_id, $min_gap_ns)),
-- the window's gaps, clipped to the step when there is one (a gap's length before clipping
-- decides min_gap_ns): all of them count in idle_ns. Neither this nor `ends` is materialised:
-- totals reads four columns of them and launch only the gaps of processes with stacks (none in
-- a capture without stacks), where storing a row per gap (over a million at 1M kernels) would
-- cost more than working them out again
gap AS NOT MATERIALIZED (
    SELECT g.report_id, g.dev, g.pid, g.correlation_id, g.gap_start_ns AS gap_key,
           greatest(g.gap_start_ns, w.s0) AS gap_start_ns, least(g.gap_end_ns, w.s1) AS gap_end_ns
    FROM ends AS g
    LEFT JOIN step_window AS w USING (report_id)
    WHERE $step IS NULL OR (w.steady AND g.gap_end_ns > w.s0 AND g.gap_start_ns < w.s1)
),
totals AS (
    SELECT report_id, dev, sum(gap_end_ns - gap_start_ns) AS idle_ns FROM gap GROUP BY ALL
),
-- a gap's thread is that of the earliest call with its ending activity's pid and correlation id,
-- looked up only for the gaps of the processes with stacks (stack_events' own pid; a semi join on
-- the gaps' side only, the side the join with cuda_api hashes: when a capture has no stacks it is
-- empty and cuda_api is not probed; a gap of another process is never joined to a stack, and a
-- launching thread without stacks adds nothing below); gaps whose call has no thread are left out
-- (a join with a distinct key set rather than a tuple IN list: Spark reads it)
stacked AS MATERIALIZED (SELECT DISTINCT report_id, pid FROM ev),
launch AS (
    SELECT e.report_id, e.dev, e.gap_key, any_value(e.gap_start_ns) AS gap_start_ns,
           any_value(e.gap_end_ns) AS gap_end_ns, arg_min(c.global_tid, c.start_ns) AS global_tid
    FROM (SELECT e.* FROM gap AS e SEMI JOIN stacked USING (report_id, pid)) AS e
    JOIN (
        SELECT c.report_id, c.pid, c.correlation_id, c.global_tid, c.start_ns
        FROM cuda_api AS c
        WHERE c.global_tid IS NOT NULL AND ($report_id IS NULL OR c.report_id = $report_id)
    ) AS c USING (report_id, pid, correlation_id)
    GROUP BY e.report_id, e.dev, e.gap_key
),
-- the launching threads, numbered (per device they launch on): one small key for the ASOF joins below
threads AS (
    SELECT report_id, dev, global_tid, row_number() OVER (ORDER BY report_id, dev, global_tid) AS thread
    FROM (SELECT DISTINCT report_id, dev, global_tid FROM launch)
),
thread_gaps AS (
    SELECT t.thread, l.gap_start_ns, l.gap_end_ns FROM launch AS l JOIN threads AS t USING (report_id, dev, global_tid)
),
-- samples inside the gaps of their thread, each worth its gap's time over the gap's samples (counted
-- per gap, then joined back: cheaper than a window partitioned by gap)
sampled AS (
    SELECT t.thread, x.src, x.stack_id, c.gap_start_ns, c.gap_end_ns - c.gap_start_ns AS gap_ns
    FROM ev AS x
    JOIN threads AS t USING (report_id, global_tid)
    ASOF JOIN thread_gaps AS c ON c.thread = t.thread AND x.start_ns >= c.gap_start_ns
    WHERE x.end_ns IS NULL AND x.start_ns < c.gap_end_ns
),
gap_samples AS (SELECT thread, src, gap_start_ns, count(*) AS samples FROM sampled GROUP BY ALL),
-- frame intervals (they nest on their thread): at each start the frame's own stack holds, at each
-- end its parent's (the frame one level out that started last before it, by ASOF on depth)
frames AS (
    SELECT t.thread, x.src, x.start_ns, x.end_ns, x.stack_id, d.depth
    FROM ev AS x
    JOIN threads AS t USING (report_id, global_tid)
    JOIN (SELECT report_id, stack_id, max(depth) AS depth FROM stacks GROUP BY ALL) AS d USING (report_id, stack_id)
    WHERE x.end_ns IS NOT NULL
),
-- G(t), a thread's gap time before t: before_ns of the last gap starting at or before t, plus the
-- part of that gap before t (only for the threads with frames)
cum AS (
    SELECT thread, gap_start_ns, gap_end_ns,
           coalesce(sum(gap_end_ns - gap_start_ns) OVER (
               PARTITION BY thread ORDER BY gap_start_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
           ), 0) AS before_ns
    FROM thread_gaps
    JOIN (SELECT DISTINCT thread FROM frames) AS f USING (thread)
),
-- at one moment, ends before starts, inner ends before outer ones, outer starts before inner ones
bounds AS (
    SELECT thread, src, start_ns AS t, 1 AS step, depth AS o, stack_id FROM frames
    UNION ALL
    SELECT f.thread, f.src, f.end_ns, 0, -f.depth, p.stack_id
    FROM frames AS f
    ASOF LEFT JOIN frames AS p
        ON p.thread = f.thread AND p.src = f.src AND p.depth = f.depth - 1 AND f.start_ns >= p.start_ns
),
segments AS (
    SELECT *, lead(t) OVER (PARTITION BY thread, src ORDER BY t, step, o) AS t_next
    FROM bounds
),
at_start AS (
    SELECT s.thread, s.src, s.stack_id, s.t, s.t_next,
           coalesce(a.before_ns + least(greatest(s.t - a.gap_start_ns, 0), a.gap_end_ns - a.gap_start_ns), 0) AS g0
    FROM segments AS s
    ASOF LEFT JOIN cum AS a ON a.thread = s.thread AND s.t >= a.gap_start_ns
    WHERE s.stack_id IS NOT NULL AND s.t_next > s.t
),
-- G(t_next) - G(t): the segment's time inside the gaps, put in the last gap it overlaps
interval_time AS (
    SELECT s.thread, s.src, s.stack_id, a.gap_start_ns,
           a.before_ns + least(s.t_next - a.gap_start_ns, a.gap_end_ns - a.gap_start_ns) - s.g0 AS ns
    FROM at_start AS s
    ASOF JOIN cum AS a ON a.thread = s.thread AND s.t_next > a.gap_start_ns
),
timed AS (
    SELECT thread, src, stack_id, gap_start_ns,
           -- exact decimals: a sum of them does not depend on the order DuckDB's threads add them in
           CAST(gap_ns / samples AS DECIMAL(38, 6)) AS ns
    FROM sampled
    JOIN gap_samples USING (thread, src, gap_start_ns)
    UNION ALL
    SELECT * FROM interval_time WHERE ns > 0
),
-- per stack (and gap) first, so the described stacks join few rows: time, events, and the largest
-- time of one event (callers are those of the stack whose event explains the most)
per_stack AS (
    SELECT t.report_id, t.dev, s.gap_start_ns, so.source, s.stack_id, s.ns, s.top_ns, s.events
    FROM (
        SELECT thread, CASE WHEN $per_gap THEN gap_start_ns END AS gap_start_ns, src, stack_id,
               sum(ns) AS ns, max(ns) AS top_ns, count(*) AS events
        FROM timed
        GROUP BY ALL
    ) AS s
    JOIN threads AS t USING (thread)
    JOIN sources AS so USING (src)
),
-- per stack: the innermost user frame, the frame it calls, and its user callers
used AS (SELECT DISTINCT report_id, stack_id FROM per_stack),
described AS (SELECT * FROM nsa_stack_described('used')),
grouped AS (
    SELECT t.report_id, t.dev, t.gap_start_ns, t.source, d.user_function, d.user_file, d.user_line, d.library_frame,
           arg_max(d.callers, (t.top_ns, d.callers)) AS callers, sum(t.ns) AS explained_ns, sum(t.events) AS events
    FROM per_stack AS t
    JOIN described AS d USING (report_id, stack_id)
    GROUP BY ALL
),
-- (per_gap rows are of gaps with a launching thread; none without per_gap)
gap_idle AS (
    SELECT report_id, dev, gap_start_ns, gap_end_ns - gap_start_ns AS idle_ns FROM launch WHERE $per_gap
),
ranked AS (
    SELECT g.*, coalesce(gi.idle_ns, tt.idle_ns) AS idle_ns
    FROM grouped AS g
    JOIN totals AS tt USING (report_id, dev)
    LEFT JOIN gap_idle AS gi USING (report_id, dev, gap_start_ns)
    QUALIFY $top_n IS NULL OR row_number() OVER (
        PARTITION BY g.report_id, g.dev, g.gap_start_ns, g.source
        ORDER BY g.explained_ns DESC, g.user_file, g.user_line, g.library_frame, g.user_function
    ) <= $top_n
),
-- windows with gaps but no stack on their launching threads: say which option records them
bare AS (
    SELECT t.report_id, t.dev, t.idle_ns,
           CASE
               WHEN EXISTS (SELECT 1 FROM stack_events AS e WHERE e.report_id = t.report_id
                            AND e.source = 'python_sample' AND e.stack_id IS NULL)
                   THEN 'nsys recorded Python samples but the export has no frames: export again with '
                        || '`nsys export --type sqlite --include-blobs=true`'
               WHEN r.format = 'kineto'
                   THEN 'no Python frames in this trace: profile with `torch.profiler.profile(with_stack=True)`'
               WHEN EXISTS (SELECT 1 FROM stack_events AS e WHERE e.report_id = t.report_id
                            AND e.source IN ('python_sample', 'cpu_sample'))
                   THEN 'no stacks were sampled on the launching threads during the idle time'
               ELSE 'no call stacks in this capture: profile with `nsys profile -s cpu --python-sampling=true` '
                    || '(Python frames) or `-s cpu` (native code)'
           END AS note
    FROM totals AS t
    JOIN reports AS r USING (report_id)
    ANTI JOIN (SELECT DISTINCT report_id, dev FROM per_stack) AS x USING (report_id, dev)
)
SELECT
    report_id,
    CAST(nullif(dev, -1) AS INTEGER) AS device_id,
    CAST(gap_start_ns AS BIGINT) AS gap_start_ns,
    source,
    user_function,
    user_file,
    CAST(user_line AS INTEGER) AS user_line,
    library_frame,
    callers,
    CAST(round(explained_ns) AS BIGINT) AS explained_ns,
    CAST(explained_ns / nullif(idle_ns, 0) AS DOUBLE) AS share,
    CAST(events AS BIGINT) AS events,
    CAST(idle_ns AS BIGINT) AS idle_ns,
    NULL::VARCHAR AS note
FROM ranked
UNION ALL
SELECT report_id, CAST(nullif(dev, -1) AS INTEGER), NULL::BIGINT, NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR,
       NULL::INTEGER, NULL::VARCHAR, NULL::VARCHAR, NULL::BIGINT, NULL::DOUBLE, NULL::BIGINT,
       CAST(idle_ns AS BIGINT), note
FROM bare
UNION ALL
-- a warm-up step: refused, with the reason and where to look instead
SELECT report_id, NULL::INTEGER, NULL::BIGINT, NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR, NULL::INTEGER,
       NULL::VARCHAR, NULL::VARCHAR, NULL::BIGINT, NULL::DOUBLE, NULL::BIGINT, NULL::BIGINT,
       'step ' || $step || ' is a warm-up step: gap_stacks attributes the steady state''s idle gaps (those gpu-idle '
       || 'judges), and a warm-up step''s idle time is start-up (compilation, module loading, allocation: see the '
       || 'startup rule); for its host time run hot_stacks with start_ns ' || s0 || ' and end_ns ' || s1 AS note
FROM step_window
WHERE NOT steady
ORDER BY report_id, device_id, gap_start_ns NULLS FIRST, source NULLS FIRST, explained_ns DESC, user_file, user_line, library_frame, user_function
