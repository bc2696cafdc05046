-- GPU hardware metrics per NVTX range name, per step and per phase: what the hardware did while
-- the GPU ran each part of the program. NVTX ranges and NVTX steps are host-side times, and the
-- GPU runs their work later, so each range is projected onto the GPU first: its window is the
-- first start to the last end of the kernels, copies and memsets launched by CUDA API calls of
-- any thread of its process (same pid; PyTorch launches backward from its autograd thread) that
-- started inside the range. Ranges that launched nothing have no GPU window and no row. Steps
-- found from the kernel pattern (steps.source 'kernels') and the phases ('startup', 'steady' or
-- 'run' as in the query phases: from GPU activity) are GPU windows already. Each sample weighs by
-- its overlap with a window; windows of one name on one device add up (overlapping windows, such
-- as nested ranges of the same name, count their shared samples twice).
-- reads cuda_api, gpu_metrics, graph_executions, kernel_names, kernel_rows, memcpy, memset, nvtx_ranges, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param metrics VARCHAR = NULL: only these canonical metrics, comma-separated (sm_issue,tensor_active); all when NULL.
-- param phase VARCHAR = NULL: 'steady': only windows starting in the steady state (reports with steps); all when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col range_type VARCHAR: 'nvtx' (a range name), 'step' (one step of table steps) or 'phase'.
-- col name VARCHAR: NVTX range name without per-call suffixes (nvtx_ranges.base_name), step name, or phase.
-- col metric VARCHAR: canonical metric name.
-- col unit VARCHAR: the metric's unit.
-- col ranges BIGINT: GPU windows of the name (range instances, steps, phases).
-- col gpu_ns BIGINT: summed length of their GPU windows (ns).
-- col start_ns BIGINT: the first window starts (ns).
-- col end_ns BIGINT: the last window ends (ns).
-- col average DOUBLE: time-weighted mean over the windows, in `unit`.
-- col peak DOUBLE: highest sample touching a window, in `unit`.
WITH steady AS (SELECT report_id, start_ns FROM nsa_steady($report_id)),
gpu AS (SELECT * FROM nsa_gpu_activity($report_id)),
host AS (
    SELECT report_id, pid, 'nvtx' AS range_type, coalesce(base_name, name) AS name, start_ns, end_ns,
           row_number() OVER () AS wid
    FROM nvtx_ranges
    WHERE ($report_id IS NULL OR report_id = $report_id) AND end_ns IS NOT NULL
    UNION ALL
    SELECT report_id, pid, 'step', name, start_ns, end_ns, -row_number() OVER ()
    FROM steps
    WHERE ($report_id IS NULL OR report_id = $report_id) AND source <> 'kernels'
),
projected AS (
    SELECT h.report_id, g.device_id, h.range_type, h.name, h.wid, min(g.start_ns) AS s, max(g.end_ns) AS e
    FROM host AS h
    JOIN cuda_api AS a ON a.report_id = h.report_id AND a.pid = h.pid
        AND a.start_ns >= h.start_ns AND a.start_ns <= h.end_ns
    JOIN gpu AS g ON g.report_id = a.report_id AND g.pid = a.pid AND g.correlation_id = a.correlation_id
    GROUP BY ALL
),
span AS (SELECT report_id, device_id, min(start_ns) AS s, max(end_ns) AS e FROM gpu GROUP BY ALL),
windows AS (
    SELECT report_id, device_id, range_type, name, s, e FROM projected
    UNION ALL
    SELECT report_id, device_id, 'step', name, start_ns, end_ns
    FROM steps
    WHERE ($report_id IS NULL OR report_id = $report_id) AND source = 'kernels'
    UNION ALL
    SELECT sp.report_id, sp.device_id, 'phase', 'startup', sp.s, w.start_ns
    FROM span AS sp JOIN steady AS w USING (report_id) WHERE sp.s < w.start_ns
    UNION ALL
    SELECT sp.report_id, sp.device_id, 'phase', 'steady', greatest(sp.s, w.start_ns), sp.e
    FROM span AS sp JOIN steady AS w USING (report_id)
    UNION ALL
    SELECT sp.report_id, sp.device_id, 'phase', 'run', sp.s, sp.e
    FROM span AS sp ANTI JOIN steady AS w USING (report_id)
),
kept AS (
    SELECT w.*, row_number() OVER () AS wid FROM windows AS w LEFT JOIN steady AS st USING (report_id)
    WHERE w.e > w.s AND ($phase IS NULL OR w.range_type = 'phase' AND w.name = 'steady' OR w.s >= st.start_ns)
),
totals AS (
    SELECT report_id, device_id, range_type, name, count(*) AS ranges, sum(e - s) AS gpu_ns, min(s) AS s, max(e) AS e
    FROM kept
    GROUP BY ALL
),
x AS (
    SELECT k.report_id, k.device_id, k.range_type, k.name, g.metric, g.unit, g.value,
           least(g.ts_ns + coalesce(g.period_ns, 0), k.e) - greatest(g.ts_ns, k.s) AS w
    FROM kept AS k
    JOIN gpu_metrics AS g ON g.report_id = k.report_id AND g.device_id = k.device_id
        AND g.ts_ns < k.e AND g.ts_ns + coalesce(g.period_ns, 0) > k.s
    WHERE ($report_id IS NULL OR g.report_id = $report_id) AND ($metrics IS NULL OR list_contains(list_transform(string_split($metrics, ','), x -> trim(x)), g.metric))
),
agg AS (
    SELECT report_id, device_id, range_type, name, metric, any_value(unit) AS unit,
           sum(value * w) / nullif(sum(w), 0) AS average, max(value) AS peak
    FROM x
    GROUP BY ALL
)
SELECT
    a.report_id,
    a.device_id,
    a.range_type,
    a.name,
    a.metric,
    a.unit,
    CAST(t.ranges AS BIGINT) AS ranges,
    CAST(t.gpu_ns AS BIGINT) AS gpu_ns,
    CAST(t.s AS BIGINT) AS start_ns,
    CAST(t.e AS BIGINT) AS end_ns,
    a.average,
    CAST(a.peak AS DOUBLE) AS peak
FROM agg AS a
JOIN totals AS t USING (report_id, device_id, range_type, name)
ORDER BY a.report_id, a.device_id, a.range_type, t.s, a.name, a.metric
