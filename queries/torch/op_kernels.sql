-- GPU time per PyTorch op, the op -> kernel attribution of Holistic Trace Analysis: every
-- kernel, memcpy and memset is traced to the CUDA API call that launched it (cuda_api, same
-- report_id, pid and correlation_id) and from there to the cpu_ops enclosing that call on its
-- thread. `level` picks which op is named: 'top' the outermost cpu_op (the op the Python code
-- called: aten::linear, or the autograd node on the backward thread), 'leaf' the innermost (the
-- op that launched: aten::addmm), 'annotation' the innermost record_function range or Python
-- frame other than ProfilerStep#N (nn.Module: Linear_0 with with_modules=True, the optimizer's
-- Optimizer.step#AdamW.step). Work launched outside any such op is '(no op)'; work whose launch
-- call is not in the trace (launched before the profiler's window) is '(no launch call)'.
-- host_ns is the ops' own CPU time: an op whose GPU time is below it is launch-bound (the GPU
-- waits for the host). Reports without cpu_ops (nsys) have every row under '(no op)'.
-- reads cpu_ops, cuda_api, graph_executions, kernel_names, kernel_rows, memcpy, memset
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
WITH act AS (
    SELECT report_id, pid, correlation_id, kind, end_ns - start_ns AS gpu_ns,
           row_number() OVER () AS id
    FROM nsa_gpu_activity($report_id)
),
calls AS (
    SELECT report_id, pid, correlation_id, min(tid) AS tid, min(start_ns) AS start_ns, max(end_ns) AS end_ns
    FROM cuda_api
    WHERE ($report_id IS NULL OR report_id = $report_id) AND correlation_id IS NOT NULL
    GROUP BY ALL
),
launch AS (
    SELECT a.*, c.tid, c.start_ns, c.end_ns
    FROM act AS a LEFT JOIN calls AS c USING (report_id, pid, correlation_id)
),
enclosing AS (
    SELECT l.report_id, l.id, o.category, o.start_ns, o.end_ns,
           {'name': o.name, 'tid': o.tid, 'start_ns': o.start_ns, 'dur': o.end_ns - o.start_ns} AS op
    FROM launch AS l
    JOIN cpu_ops AS o ON o.report_id = l.report_id AND o.pid = l.pid AND o.tid = l.tid
        AND o.start_ns <= l.start_ns AND o.end_ns >= l.end_ns
    WHERE CASE WHEN $level IN ('top', 'leaf') THEN o.category = 'cpu_op'
               ELSE o.category IN ('user_annotation', 'python_function') AND NOT starts_with(o.name, 'ProfilerStep#')
          END
),
picked AS (
    SELECT report_id, id,
           CASE WHEN $level = 'top' THEN arg_min(op, (start_ns, -end_ns)) ELSE arg_max(op, (start_ns, -end_ns)) END AS op
    FROM enclosing
    GROUP BY ALL
),
attributed AS (
    SELECT l.report_id, l.kind, l.gpu_ns, p.op,
           CASE WHEN l.tid IS NULL THEN '(no launch call)' ELSE coalesce(p.op.name, '(no op)') END AS op_name
    FROM launch AS l LEFT JOIN picked AS p USING (report_id, id)
),
host AS (
    SELECT report_id, op.name AS op_name, count(*) AS op_calls, sum(op.dur) AS host_ns
    FROM (SELECT DISTINCT report_id, op FROM attributed WHERE op IS NOT NULL)
    GROUP BY ALL
)
SELECT
    a.report_id,
    a.op_name,
    coalesce(any_value(h.op_calls), 0) AS op_calls,
    count(*) FILTER (WHERE a.kind = 'kernel') AS kernels,
    count(*) FILTER (WHERE a.kind IN ('memcpy', 'memset')) AS copies,
    CAST(sum(a.gpu_ns) AS BIGINT) AS gpu_ns,
    CAST(any_value(h.host_ns) AS BIGINT) AS host_ns,
    100.0 * sum(a.gpu_ns) / any_value(t.total) AS gpu_pct,
    sum(a.gpu_ns) < any_value(h.host_ns) AS launch_bound
FROM attributed AS a
LEFT JOIN host AS h USING (report_id, op_name)
JOIN (SELECT report_id, nullif(sum(gpu_ns), 0) AS total FROM act GROUP BY ALL) AS t USING (report_id)
GROUP BY a.report_id, a.op_name
ORDER BY a.report_id, gpu_ns DESC, a.op_name
