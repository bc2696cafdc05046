-- Where the host's CPU time went: per report and sample source, the CPU or Python samples taken in a
-- window (a thread, a time range), counted per frame: self (the frame was executing: the
-- innermost), total (the frame was on the stack, counted once per sample however deep it recurs)
-- and user (the frame was the innermost user frame of the sample: the program's own line, whatever
-- library code ran beneath it), as samples and as time. A sample stands for one sampling interval
-- (the median time between consecutive samples of a thread). User code is told apart
-- from library frames (stack_frames.user). Sources: python_sample (nsys `--python-sampling=true`)
-- and cpu_sample (nsys `-s cpu`: native frames). Where a report has no sample with a stack in the
-- window, one row with source NULL says why in `note` and which capture option records them.
-- Linear: samples grouped by stack, then stacks expanded to their frames (equality joins on ids);
-- only the interval sorts, at most about 100,000 samples per source.
-- reads reports, stack_events, stack_frames, stacks
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param source VARCHAR = NULL one of ('python_sample', 'cpu_sample'): only this sample source; both when NULL.
-- param pid BIGINT = NULL: only samples of this process.
-- param global_tid BIGINT = NULL: only samples of this thread (stack_events.global_tid).
-- param tid BIGINT = NULL: only samples of this thread id.
-- param start_ns BIGINT = NULL: only samples taken at or after this time (ns).
-- param end_ns BIGINT = NULL: only samples taken before this time (ns).
-- param top_n INTEGER = 20: keep the N frames with the most samples on the stack per report and source; all when NULL.
-- col report_id INTEGER: workspace report id.
-- col source VARCHAR: python_sample or cpu_sample; NULL on a note row.
-- col frame_id BIGINT: stack_frames.frame_id.
-- col function VARCHAR: the frame's function (`busy_python`, a symbol).
-- col file VARCHAR: its Python file; NULL for native frames.
-- col line INTEGER: its line (Python frames).
-- col module VARCHAR: the binary or library of a native frame.
-- col user BOOLEAN: the program's own code (stack_frames.user).
-- col self_samples BIGINT: samples with this frame innermost.
-- col total_samples BIGINT: samples with this frame anywhere on the stack.
-- col user_samples BIGINT: samples whose innermost user frame is this frame.
-- col self_ns BIGINT: self_samples as time (ns).
-- col total_ns BIGINT: total_samples as time (ns).
-- col user_ns BIGINT: user_samples as time (ns).
-- col share DOUBLE: total_samples / samples.
-- col samples BIGINT: samples of the report and source in the window.
-- col note VARCHAR: on a row with source NULL: why there are no samples and which capture option records them.
WITH
sample AS (
    SELECT report_id, source, global_tid, start_ns, stack_id
    FROM stack_events
    WHERE ($report_id IS NULL OR report_id = $report_id)
        AND source IN ('python_sample', 'cpu_sample') AND ($source IS NULL OR source = $source)
        AND ($pid IS NULL OR pid = $pid) AND ($global_tid IS NULL OR global_tid = $global_tid)
        AND ($tid IS NULL OR tid = $tid)
),
-- the sampling interval: the median time between consecutive samples of one thread (busy threads,
-- sampled at every tick, set it; a thread that ran rarely still ran one interval per sample), over
-- the samples of about the first 100,000 ticks' worth of the capture (a time cut-off, so that the
-- sort stays small however long the capture)
span AS (
    SELECT report_id, source, min(start_ns) AS t0, max(start_ns) AS t1, count(*) AS n FROM sample GROUP BY ALL
),
early AS (
    SELECT s.report_id, s.source, s.global_tid, s.start_ns
    FROM sample AS s
    JOIN span AS p USING (report_id, source)
    WHERE s.start_ns <= p.t0 + (p.t1 - p.t0) * least(1.0, 100000.0 / p.n)
),
interval AS (
    SELECT report_id, source, median(next_ns - start_ns) AS interval_ns
    FROM (
        SELECT report_id, source, start_ns,
               lead(start_ns) OVER (PARTITION BY report_id, source, global_tid ORDER BY start_ns) AS next_ns
        FROM early
    )
    WHERE next_ns > start_ns
    GROUP BY ALL
),
windowed AS (
    SELECT s.report_id, s.source, s.stack_id, coalesce(i.interval_ns, 0) AS interval_ns
    FROM sample AS s
    LEFT JOIN interval AS i USING (report_id, source)
    WHERE s.stack_id IS NOT NULL
        AND ($start_ns IS NULL OR s.start_ns >= $start_ns) AND ($end_ns IS NULL OR s.start_ns < $end_ns)
),
totals AS (SELECT report_id, source, count(*) AS samples FROM windowed GROUP BY ALL),
per_stack AS (
    SELECT report_id, source, stack_id, count(*) AS samples, sum(interval_ns) AS ns FROM windowed GROUP BY ALL
),
used AS (SELECT DISTINCT report_id, stack_id FROM per_stack),
framed AS (
    SELECT s.report_id, s.stack_id, s.depth, s.frame_id, f.user
    FROM stacks AS s
    SEMI JOIN used AS u ON u.report_id = s.report_id AND u.stack_id = s.stack_id
    JOIN stack_frames AS f ON f.report_id = s.report_id AND f.frame_id = s.frame_id
),
-- per stack and frame: innermost (self), on the stack (total), innermost user frame (user)
roles AS (
    SELECT report_id, stack_id, frame_id, bool_or(depth = 0) AS is_self,
           bool_or(depth = user_depth) AS is_user
    FROM (
        SELECT *, min(CASE WHEN user THEN depth END) OVER (PARTITION BY report_id, stack_id) AS user_depth
        FROM framed
    )
    GROUP BY ALL
),
per_frame AS (
    SELECT p.report_id, p.source, r.frame_id,
           sum(p.samples) FILTER (WHERE r.is_self) AS self_samples,
           sum(p.samples) AS total_samples,
           sum(p.samples) FILTER (WHERE r.is_user) AS user_samples,
           sum(p.ns) FILTER (WHERE r.is_self) AS self_ns,
           sum(p.ns) AS total_ns,
           sum(p.ns) FILTER (WHERE r.is_user) AS user_ns
    FROM per_stack AS p
    JOIN roles AS r USING (report_id, stack_id)
    GROUP BY ALL
),
ranked AS (
    SELECT p.*, t.samples, f.function, f.file, f.line, f.module, f.user
    FROM per_frame AS p
    JOIN totals AS t USING (report_id, source)
    JOIN stack_frames AS f USING (report_id, frame_id)
    QUALIFY $top_n IS NULL OR row_number() OVER (
        PARTITION BY p.report_id, p.source
        ORDER BY p.total_samples DESC, p.self_samples DESC NULLS LAST, p.frame_id
    ) <= $top_n
),
-- reports without a sample in the window: say why
bare AS (
    SELECT r.report_id,
           CASE
               WHEN EXISTS (SELECT 1 FROM stack_events AS e WHERE e.report_id = r.report_id
                            AND e.source = 'python_sample' AND e.stack_id IS NULL)
                   THEN 'nsys recorded Python samples but the export has no frames: export again with '
                        || '`nsys export --type sqlite --include-blobs=true`'
               WHEN r.format = 'kineto'
                   THEN 'a PyTorch-profiler trace holds no samples: its Python frames (`with_stack=True`) are '
                        || 'intervals, see gap_stacks and launch_stacks'
               WHEN EXISTS (SELECT 1 FROM stack_events AS e WHERE e.report_id = r.report_id
                            AND e.source IN ('python_sample', 'cpu_sample'))
                   THEN 'no samples of this source, thread or time window'
               ELSE 'no CPU or Python samples in this capture: profile with `nsys profile -s cpu '
                    || '--python-sampling=true`'
           END AS note
    FROM reports AS r
    WHERE ($report_id IS NULL OR r.report_id = $report_id)
        AND r.report_id NOT IN (SELECT report_id FROM totals)
)
SELECT
    report_id,
    source,
    frame_id,
    function,
    file,
    CAST(line AS INTEGER) AS line,
    module,
    user,
    CAST(coalesce(self_samples, 0) AS BIGINT) AS self_samples,
    CAST(total_samples AS BIGINT) AS total_samples,
    CAST(coalesce(user_samples, 0) AS BIGINT) AS user_samples,
    CAST(round(coalesce(self_ns, 0)) AS BIGINT) AS self_ns,
    CAST(round(total_ns) AS BIGINT) AS total_ns,
    CAST(round(coalesce(user_ns, 0)) AS BIGINT) AS user_ns,
    CAST(total_samples / samples AS DOUBLE) AS share,
    CAST(samples AS BIGINT) AS samples,
    NULL::VARCHAR AS note
FROM ranked
UNION ALL
SELECT report_id, NULL::VARCHAR, NULL::BIGINT, NULL::VARCHAR, NULL::VARCHAR, NULL::INTEGER, NULL::VARCHAR,
       NULL::BOOLEAN, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT,
       NULL::DOUBLE, NULL::BIGINT, note
FROM bare
ORDER BY report_id, source NULLS FIRST, total_samples DESC, self_samples DESC, frame_id
