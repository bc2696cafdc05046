-- GPU time per PyTorch op, the op -> kernel attribution of Holistic Trace Analysis: every
-- kernel, memcpy and memset is traced to the CUDA API call that launched it (cuda_api, same
-- report_id, pid and correlation_id) and from there to the cpu_ops enclosing that call on its
-- thread. `level` picks which op is named: 'top' the outermost cpu_op (the op the Python code
-- called: aten::linear, or the autograd node on the backward thread), 'leaf' the innermost (the
-- op that launched: aten::addmm), 'annotation' the innermost record_function range or Python
-- frame other than ProfilerStep#N (nn.Module: Linear_0 with with_modules=True, the optimizer's
-- Optimizer.step#AdamW.step); of ops with the same start and end (a parent and a child timed
-- alike) the one written first is the outer. Work launched outside any such op is '(no op)';
-- work whose launch call is not in the trace (launched before the profiler's window) is
-- '(no launch call)'.
-- host_ns is the ops' own CPU time: an op whose GPU time is below it is launch-bound (the GPU
-- waits for the host). Reports without cpu_ops (nsys) have every row under '(no op)'.
-- The work and its launch calls come from the stored timeline (gpu_timeline, with the earliest
-- start and latest end of the calls of each key); the calls' thread (the lowest tid of the key)
-- is looked up in cuda_api only for reports that have ops to name.
-- reads cpu_ops, cuda_api, gpu_timeline, gpu_launches
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param level VARCHAR = 'top' one of ('top', 'leaf', 'annotation'): which enclosing op to name: 'top', 'leaf' or 'annotation'.
-- col report_id INTEGER: workspace report id.
-- col op_name VARCHAR: the op (cpu_ops.name), '(no op)' or '(no launch call)'.
-- col op_calls BIGINT: instances of the op that launched GPU work.
-- col kernels BIGINT: kernels the op launched.
-- col copies BIGINT: memcpy and memset operations the op launched.
-- col gpu_ns BIGINT: summed GPU time of that work (ns).
-- col host_ns BIGINT: summed duration of those op instances on the host (ns).
-- col gpu_pct DOUBLE: share of the report's GPU time (sum of all its kernels, copies and memsets) (%).
-- col launch_bound BOOLEAN: gpu_ns < host_ns: the op keeps the host busier than the GPU.
WITH
-- the reports with ops to name
named AS (SELECT DISTINCT report_id FROM cpu_ops WHERE $report_id IS NULL OR report_id = $report_id),
-- the work of reports with ops, one row each
act AS (
    SELECT a.report_id, a.pid, a.correlation_id, a.kind, a.end_ns - a.start_ns AS gpu_ns, a.rowid AS id,
           a.api_start_ns, a.api_end_ns
    FROM gpu_timeline AS a
    SEMI JOIN named AS n ON n.report_id = a.report_id
    WHERE $report_id IS NULL OR a.report_id = $report_id
),
-- the work of reports without ops, all '(no op)' or '(no launch call)': counted per report, kind
-- and whether it has launch calls, the names written on those few groups
plain AS (
    SELECT a.report_id, coalesce(a.api_calls > 0, false) AS called, a.kind, count(*) AS n,
           sum(a.end_ns - a.start_ns) AS gpu_ns
    FROM gpu_timeline AS a
    ANTI JOIN named AS n ON n.report_id = a.report_id
    WHERE $report_id IS NULL OR a.report_id = $report_id
    GROUP BY ALL
),
-- the ops that can be named at this level
ops AS (
    SELECT report_id, pid, tid, category, name, start_ns, end_ns, rowid AS seq
    FROM cpu_ops
    WHERE ($report_id IS NULL OR report_id = $report_id)
        AND CASE WHEN $level IN ('top', 'leaf') THEN category = 'cpu_op'
                 ELSE category IN ('user_annotation', 'python_function') AND NOT starts_with(name, 'ProfilerStep#')
            END
),
-- the thread of each launch, for the reports with ops
tids AS (
    SELECT c.report_id, c.pid, c.correlation_id, min(c.tid) AS tid
    FROM cuda_api AS c
    SEMI JOIN named AS n ON n.report_id = c.report_id
    WHERE ($report_id IS NULL OR c.report_id = $report_id) AND c.correlation_id IS NOT NULL
    GROUP BY ALL
),
launch AS (
    SELECT a.report_id, a.pid, a.id, a.kind, a.gpu_ns, c.tid, a.api_start_ns AS start_ns, a.api_end_ns AS end_ns,
           c.tid IS NULL AS uncalled
    FROM act AS a
    LEFT JOIN tids AS c USING (report_id, pid, correlation_id)
),
-- 'top': in (start, longest first) order on a thread, the outermost op enclosing a launch is the
-- first whose end reaches the launch's end, if it starts by the launch's start (every op
-- enclosing the launch comes at or after it). That op ends later than every op before it, so
-- among those record-setting ops (ends rising) it is the one with the smallest end at or after
-- the launch's: an ASOF join, not a launches x ops product per thread.
outer_ops AS (
    SELECT * FROM (
        SELECT *, max(end_ns) OVER (
            PARTITION BY report_id, pid, tid ORDER BY start_ns, end_ns DESC, seq
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS earlier_end
        FROM ops
        WHERE $level = 'top'
    )
    WHERE earlier_end IS NULL OR end_ns > earlier_end
),
picked_top AS (
    SELECT l.report_id, l.id,
           {'name': o.name, 'tid': o.tid, 'start_ns': o.start_ns, 'dur': o.end_ns - o.start_ns} AS op
    FROM (SELECT * FROM launch WHERE $level = 'top' AND tid IS NOT NULL) AS l
    ASOF JOIN outer_ops AS o ON o.report_id = l.report_id AND o.pid = l.pid AND o.tid = l.tid AND l.end_ns <= o.end_ns
    WHERE o.start_ns <= l.start_ns
),
-- 'leaf' and 'annotation': the innermost enclosing op. Ops are filed by length in levels of 4x
-- (level l: at most 4^l us long) and, at their level, under each time bucket of width 4^l us they
-- touch (one or two). An op enclosing a launch holds the launch's start, so it is filed under the
-- bucket of that start at its level: each launch is looked up there at each level its thread has,
-- meeting the few ops near it, never every op of its thread.
leveled AS (
    SELECT *, 1000::BIGINT << (2 * lvl) AS width
    FROM (
        SELECT *, CAST(greatest(0, ceil(log(4, greatest(end_ns - start_ns, 1) / 1000.0))) AS INTEGER) AS lvl
        FROM ops
        WHERE $level <> 'top'
    )
),
filed AS (
    SELECT *, unnest(range(start_ns // width, end_ns // width + 1)) AS bucket FROM leveled
),
probes AS (
    SELECT l.report_id, l.id, l.pid, l.tid, l.start_ns, l.end_ns, v.lvl, l.start_ns // v.width AS bucket
    FROM (SELECT * FROM launch WHERE tid IS NOT NULL) AS l
    JOIN (SELECT DISTINCT report_id, pid, tid, lvl, width FROM leveled) AS v
        ON v.report_id = l.report_id AND v.pid = l.pid AND v.tid = l.tid
),
enclosing AS (
    SELECT l.report_id, l.id, o.category, o.start_ns, o.end_ns, o.seq,
           {'name': o.name, 'tid': o.tid, 'start_ns': o.start_ns, 'dur': o.end_ns - o.start_ns} AS op
    FROM probes AS l
    JOIN filed AS o
        ON o.report_id = l.report_id AND o.pid = l.pid AND o.tid = l.tid AND o.lvl = l.lvl AND o.bucket = l.bucket
    WHERE o.start_ns <= l.start_ns AND o.end_ns >= l.end_ns
),
picked AS (
    SELECT * FROM picked_top
    UNION ALL
    SELECT report_id, id, arg_max(op, (start_ns, -end_ns, seq)) AS op
    FROM enclosing
    GROUP BY ALL
),
attributed AS (
    SELECT l.report_id, l.kind, l.gpu_ns, p.op,
           CASE WHEN l.uncalled THEN '(no launch call)' ELSE coalesce(p.op.name, '(no op)') END AS op_name
    FROM launch AS l LEFT JOIN picked AS p USING (report_id, id)
),
host AS (
    SELECT report_id, op.name AS op_name, count(*) AS op_calls, sum(op.dur) AS host_ns
    FROM (SELECT DISTINCT report_id, op FROM attributed WHERE op IS NOT NULL)
    GROUP BY ALL
),
per_op AS (
    SELECT report_id, op_name,
           count(*) FILTER (WHERE kind = 'kernel') AS kernels,
           count(*) FILTER (WHERE kind IN ('memcpy', 'memset')) AS copies,
           sum(gpu_ns) AS gpu_ns
    FROM attributed
    GROUP BY ALL
    UNION ALL
    SELECT report_id, CASE WHEN called THEN '(no op)' ELSE '(no launch call)' END AS op_name,
           CAST(coalesce(sum(n) FILTER (WHERE kind = 'kernel'), 0) AS BIGINT) AS kernels,
           CAST(coalesce(sum(n) FILTER (WHERE kind IN ('memcpy', 'memset')), 0) AS BIGINT) AS copies,
           sum(gpu_ns) AS gpu_ns
    FROM plain
    GROUP BY ALL
)
SELECT
    a.report_id,
    a.op_name,
    coalesce(h.op_calls, 0) AS op_calls,
    a.kernels,
    a.copies,
    CAST(a.gpu_ns AS BIGINT) AS gpu_ns,
    CAST(h.host_ns AS BIGINT) AS host_ns,
    100.0 * a.gpu_ns / nullif(sum(a.gpu_ns) OVER (PARTITION BY a.report_id), 0) AS gpu_pct,
    a.gpu_ns < h.host_ns AS launch_bound
FROM per_op AS a
LEFT JOIN host AS h USING (report_id, op_name)
ORDER BY a.report_id, a.gpu_ns DESC, a.op_name
