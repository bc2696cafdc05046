-- Which line of code issued the GPU work or the blocking call: per report, stack source and kind,
-- the CUDA API calls grouped by the innermost user frame of their call stack (the program's own
-- code, not a library: stack_frames.user) and the library frame that frame was calling, with the
-- calls, the GPU work they launched and its time, and their own API time. Stack sources:
--   python_cuda    nsys Python backtraces of CUDA calls (`--python-backtrace=cuda`), by correlation id;
--   cuda_call      nsys native backtraces of CUDA calls (`--cudabacktrace=all`), by correlation id;
--   kineto_python  PyTorch-profiler Python frames (`with_stack=True`): the innermost frame open on
--                  the calling thread when the call started;
--   python_sample  nsys Python samples (`--python-sampling=true`) and
--   cpu_sample     nsys CPU samples (`-s cpu`), for captures without backtraces of the calls: the
--                  samples of the calling thread taken while the call ran ([start, end]); a call
--                  with samples takes the stack of its first one holding a user frame (else its
--                  first: a native unwinder often stops inside the driver), a call without any has
--                  no stack of the source (samples name long calls, syncs, and a share of short ones about
--                  their time over the sampling interval: see stacked_calls and samples).
-- A call's kind is 'sync' when it blocks the host (nsa_blocking_call: synchronize, synchronous
-- copies and memsets), else the kind of the work it launched (kernel, memcpy, memset, graph), else
-- 'other'; the `kind` parameter also matches the launched work of a blocking call (a synchronous
-- cudaMemcpy is a memcpy). Where a report has matching calls but no stack of any source for them,
-- one row with source NULL says why in `note` and which capture option records them. Linear:
-- calls, their work and their backtraces joined by (report, pid, correlation id); Kineto frames
-- placed by an ASOF join per thread on the frame boundaries (no join of calls against frames by
-- range); samples placed in the last matching call started on their thread by an ASOF join per
-- thread (a sample inside a call nested in another matching call is not counted).
-- reads cuda_api, graph_executions, kernel_names, kernel_rows, memcpy, memset, reports, stack_events, stack_frames, stacks
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param source VARCHAR = NULL one of ('python_cuda', 'cuda_call', 'kineto_python', 'python_sample', 'cpu_sample'): only stacks of this source; all when NULL.
-- param kind VARCHAR = NULL one of ('kernel', 'memcpy', 'memset', 'graph', 'sync', 'other'): only calls of this kind; all when NULL.
-- param pattern VARCHAR = NULL: only calls whose API name or launched work's name matches this regular expression (case-insensitive).
-- param max_gpu_ns BIGINT = NULL: only calls whose launched work ran at most this long (ns): tiny kernels.
-- param start_ns BIGINT = NULL: only calls starting at or after this time (ns).
-- param end_ns BIGINT = NULL: only calls starting before this time (ns).
-- param top_n INTEGER = 10: keep the N rows with the most calls per report, source and kind; all when NULL.
-- col report_id INTEGER: workspace report id.
-- col source VARCHAR: python_cuda, cuda_call, kineto_python, python_sample or cpu_sample; NULL on a note row.
-- col kind VARCHAR: sync, kernel, memcpy, memset, graph or other.
-- col user_function VARCHAR: the innermost user frame's function (`scale_params`); NULL when the stack has no user frame.
-- col user_file VARCHAR: its file (Python) or binary (native).
-- col user_line INTEGER: its line (Python frames; Kineto gives the function's first line).
-- col library_frame VARCHAR: the frame the user frame was calling (`mul_`, `cudaLaunchKernel`), or the innermost frame when no user frame; NULL when the user frame is the innermost.
-- col callers VARCHAR: the user frames calling the user frame, innermost first (`train_step < main < <module>`), of its most frequent stack.
-- col api_name VARCHAR: the most frequent CUDA API call of the group.
-- col calls BIGINT: calls with this stack.
-- col launched BIGINT: GPU activities (kernels, copies, memsets, graph replays) those calls launched.
-- col gpu_ns BIGINT: GPU time of what they launched (ns).
-- col api_ns BIGINT: host time in the calls themselves (ns).
-- col share DOUBLE: calls / total_calls.
-- col total_calls BIGINT: the report's calls of this kind that match the parameters, with a stack of this source or not; on a note row, all kinds (NULL where the report has no stacks).
-- col stacked_calls BIGINT: those calls with a stack of this source (for samples: with a sample inside); the share a sampled group stands for is calls / stacked_calls.
-- col samples BIGINT: python_sample and cpu_sample: the samples taken inside the group's calls; NULL for the other sources.
-- col note VARCHAR: on a row with source NULL: why there are no stacks and which capture option records them.
WITH
-- the reports holding backtraces of CUDA calls or Python frames: only theirs are joined
has AS (
    SELECT DISTINCT report_id FROM stack_events
    WHERE ($report_id IS NULL OR report_id = $report_id) AND stack_id IS NOT NULL
        AND source IN ('python_cuda', 'cuda_call', 'kineto_python', 'python_sample', 'cpu_sample')
        AND ($source IS NULL OR source = $source)
),
work AS (
    SELECT report_id, pid, correlation_id, any_value(kind) AS work_kind, any_value(label) AS work_name,
           count(*) AS launched, sum(end_ns - start_ns) AS gpu_ns, max(end_ns - start_ns) AS max_ns
    FROM nsa_gpu_activity($report_id)
    WHERE correlation_id IS NOT NULL AND report_id IN (SELECT report_id FROM has)
    GROUP BY ALL
),
call AS (
    SELECT c.report_id, c.pid, c.global_tid, c.correlation_id, c.start_ns, c.name,
           coalesce(c.end_ns - c.start_ns, 0) AS api_ns,
           CASE WHEN nsa_blocking_call(c.name) IS NOT NULL THEN 'sync' ELSE coalesce(w.work_kind, 'other') END AS kind,
           w.work_kind, coalesce(w.launched, 0) AS launched, coalesce(w.gpu_ns, 0) AS gpu_ns
    FROM cuda_api AS c
    LEFT JOIN work AS w ON w.report_id = c.report_id AND w.pid = c.pid AND w.correlation_id = c.correlation_id
    WHERE ($report_id IS NULL OR c.report_id = $report_id) AND c.report_id IN (SELECT report_id FROM has)
        AND ($start_ns IS NULL OR c.start_ns >= $start_ns) AND ($end_ns IS NULL OR c.start_ns < $end_ns)
        AND ($max_gpu_ns IS NULL OR w.max_ns <= $max_gpu_ns)
        AND ($pattern IS NULL OR regexp_matches(c.name, $pattern, 'i')
             OR regexp_matches(coalesce(w.work_name, ''), $pattern, 'i'))
),
matched AS (
    SELECT * FROM call WHERE $kind IS NULL OR kind = $kind OR work_kind = $kind
),
totals AS (SELECT report_id, kind, count(*) AS total_calls FROM matched GROUP BY ALL),
ev AS (
    SELECT * FROM stack_events
    WHERE ($report_id IS NULL OR report_id = $report_id) AND stack_id IS NOT NULL
        AND ($source IS NULL OR source = $source)
),
-- nsys: the call's own backtraces, by correlation id
recorded AS (
    SELECT m.*, e.source, e.stack_id, NULL::BIGINT AS samples
    FROM matched AS m
    JOIN ev AS e ON e.report_id = m.report_id AND e.pid = m.pid AND e.correlation_id = m.correlation_id
    WHERE e.source IN ('python_cuda', 'cuda_call')
),
-- Kineto: frame intervals nest on their thread; at each start the frame's own stack holds, at each
-- end its parent's (the frame one level out that started last before it, by ASOF on depth)
-- only the calls of reports with Kineto frames go through the ASOF join (it sorts its left side)
framed_calls AS (
    SELECT * FROM matched
    WHERE report_id IN (SELECT DISTINCT report_id FROM ev WHERE source = 'kineto_python')
),
threads AS (SELECT DISTINCT report_id, global_tid FROM framed_calls),
frames AS (
    SELECT x.report_id, x.global_tid, x.start_ns, x.end_ns, x.stack_id, d.depth
    FROM ev AS x
    SEMI JOIN threads AS t ON t.report_id = x.report_id AND t.global_tid = x.global_tid
    JOIN (SELECT report_id, stack_id, max(depth) AS depth FROM stacks GROUP BY ALL) AS d
        ON d.report_id = x.report_id AND d.stack_id = x.stack_id
    WHERE x.source = 'kineto_python' AND x.end_ns IS NOT NULL
),
-- at one moment, ends before starts, inner ends before outer ones, outer starts before inner ones
bounds AS (
    SELECT report_id, global_tid, start_ns AS t, 1 AS step, depth AS o, stack_id FROM frames
    UNION ALL
    SELECT f.report_id, f.global_tid, f.end_ns, 0, -f.depth, p.stack_id
    FROM frames AS f
    ASOF LEFT JOIN frames AS p
        ON p.report_id = f.report_id AND p.global_tid = f.global_tid AND p.depth = f.depth - 1
        AND f.start_ns >= p.start_ns
),
-- the last boundary at or before each moment decides the stack open then
segments AS (
    SELECT report_id, global_tid, t, stack_id
    FROM bounds
    QUALIFY row_number() OVER (PARTITION BY report_id, global_tid, t ORDER BY step DESC, o DESC) = 1
),
open_frame AS (
    SELECT m.*, 'kineto_python' AS source, s.stack_id, NULL::BIGINT AS samples
    FROM framed_calls AS m
    ASOF JOIN segments AS s ON s.report_id = m.report_id AND s.global_tid = m.global_tid AND m.start_ns >= s.t
    WHERE s.stack_id IS NOT NULL
),
-- samples: each placed in the last matching call started at or before it on its thread, kept
-- when taken before the call ended; a call takes the stack of its first sample
smp AS (
    SELECT report_id, source, global_tid, start_ns, stack_id FROM ev
    WHERE source IN ('python_sample', 'cpu_sample') AND end_ns IS NULL
),
sampled_calls AS (
    SELECT * FROM matched WHERE report_id IN (SELECT DISTINCT report_id FROM smp) AND global_tid IS NOT NULL
),
inside AS (
    SELECT c.*, x.source, x.stack_id AS sample_stack, x.start_ns AS sample_ns
    FROM smp AS x
    ASOF JOIN sampled_calls AS c
        ON c.report_id = x.report_id AND c.global_tid = x.global_tid AND x.start_ns >= c.start_ns
    WHERE x.start_ns <= c.start_ns + c.api_ns
),
-- the sampled stacks holding a user frame (an unwinder often stops early inside the driver)
user_stack AS (
    SELECT DISTINCT s.report_id, s.stack_id
    FROM stacks AS s
    SEMI JOIN (SELECT DISTINCT report_id, sample_stack AS stack_id FROM inside) AS u
        ON u.report_id = s.report_id AND u.stack_id = s.stack_id
    JOIN stack_frames AS f ON f.report_id = s.report_id AND f.frame_id = s.frame_id
    WHERE f.user
),
in_call AS (
    SELECT i.report_id, i.pid, i.global_tid, i.correlation_id, i.start_ns, i.name, i.api_ns, i.kind, i.work_kind,
           i.launched, i.gpu_ns, i.source,
           arg_min(i.sample_stack, (u.stack_id IS NULL, i.sample_ns)) AS stack_id, count(*) AS samples
    FROM inside AS i
    LEFT JOIN user_stack AS u ON u.report_id = i.report_id AND u.stack_id = i.sample_stack
    GROUP BY ALL
),
stacked AS (
    SELECT * FROM recorded
    UNION ALL BY NAME
    SELECT * FROM open_frame
    UNION ALL BY NAME
    SELECT * FROM in_call
),
stacked_totals AS (SELECT report_id, source, kind, count(*) AS stacked_calls FROM stacked GROUP BY ALL),
-- per stack: the innermost user frame, the frame it calls, and its user callers
used AS (SELECT DISTINCT report_id, stack_id FROM stacked),
described AS (SELECT * FROM nsa_stack_described('used')),
by_stack AS (
    SELECT report_id, source, kind, stack_id, count(*) AS calls, sum(launched) AS launched, sum(gpu_ns) AS gpu_ns,
           sum(api_ns) AS api_ns, sum(samples) AS samples,
           -- the most frequent name, the greatest name of equally frequent ones (mode() picks any)
           list_max(list_transform(map_entries(histogram(name)), e -> (e.value, e.key)))[2] AS api_name
    FROM stacked
    GROUP BY ALL
),
grouped AS (
    SELECT b.report_id, b.source, b.kind, d.user_function, d.user_file, d.user_line, d.library_frame,
           arg_max(d.callers, (b.calls, d.callers)) AS callers, arg_max(b.api_name, (b.calls, b.api_name)) AS api_name,
           sum(b.calls) AS calls, sum(b.launched) AS launched, sum(b.gpu_ns) AS gpu_ns, sum(b.api_ns) AS api_ns,
           sum(b.samples) AS samples
    FROM by_stack AS b
    JOIN described AS d USING (report_id, stack_id)
    GROUP BY ALL
),
ranked AS (
    SELECT g.*, t.total_calls, st.stacked_calls
    FROM grouped AS g
    JOIN totals AS t USING (report_id, kind)
    JOIN stacked_totals AS st USING (report_id, source, kind)
    QUALIFY $top_n IS NULL OR row_number() OVER (
        PARTITION BY g.report_id, g.source, g.kind
        ORDER BY g.calls DESC, g.gpu_ns DESC, g.user_file, g.user_line, g.library_frame, g.user_function
    ) <= $top_n
),
-- reports with CUDA calls but no stack for the matching ones: say which option records them
-- (total_calls counted only where the report has stacks)
bare AS (
    SELECT r.report_id, t.total_calls,
           CASE
               WHEN r.format = 'kineto'
                   THEN 'no Python frames in this trace: profile with `torch.profiler.profile(with_stack=True)`'
               WHEN r.report_id IN (SELECT report_id FROM stack_events WHERE stack_id IS NOT NULL
                                    AND source IN ('python_cuda', 'cuda_call'))
                   THEN 'no backtrace was recorded for these calls: nsys keeps them for calls longer than the '
                        || '`--cudabacktrace` threshold'
               WHEN r.report_id IN (SELECT report_id FROM has)
                   THEN 'no sample was taken inside these calls (too short or too few for the sampling '
                        || 'interval): profile with `nsys profile --cudabacktrace=all --python-backtrace=cuda` '
                        || 'to record the stack of every call'
               ELSE 'no backtraces of CUDA calls in this capture: profile with `nsys profile --cudabacktrace=all '
                    || '--python-backtrace=cuda` (and export with `nsys export --type sqlite --include-blobs=true`)'
           END AS note
    FROM reports AS r
    LEFT JOIN (SELECT report_id, sum(total_calls) AS total_calls FROM totals GROUP BY ALL) AS t USING (report_id)
    WHERE ($report_id IS NULL OR r.report_id = $report_id) AND list_contains(r.activity_kinds, 'cuda_api')
        AND r.report_id NOT IN (SELECT report_id FROM stacked)
        AND (r.report_id NOT IN (SELECT report_id FROM has) OR t.total_calls > 0)
)
SELECT
    report_id,
    source,
    kind,
    user_function,
    user_file,
    CAST(user_line AS INTEGER) AS user_line,
    library_frame,
    callers,
    api_name,
    CAST(calls AS BIGINT) AS calls,
    CAST(launched AS BIGINT) AS launched,
    CAST(gpu_ns AS BIGINT) AS gpu_ns,
    CAST(api_ns AS BIGINT) AS api_ns,
    CAST(calls / total_calls AS DOUBLE) AS share,
    CAST(total_calls AS BIGINT) AS total_calls,
    CAST(stacked_calls AS BIGINT) AS stacked_calls,
    CAST(samples AS BIGINT) AS samples,
    NULL::VARCHAR AS note
FROM ranked
UNION ALL
SELECT report_id, NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR, NULL::INTEGER, NULL::VARCHAR,
       NULL::VARCHAR, NULL::VARCHAR, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::DOUBLE,
       CAST(total_calls AS BIGINT), NULL::BIGINT, NULL::BIGINT, note
FROM bare
ORDER BY report_id, source NULLS FIRST, kind, calls DESC, gpu_ns DESC, user_file, user_line, library_frame, user_function
