-- GPU hardware metrics (nsys GPU metrics sampling, table gpu_metrics) per report, device and
-- canonical metric, over two scopes: 'run' (from the report's first to its last GPU activity;
-- the whole sampled span when it has none) and 'steady' (from the start of the first steady step
-- to the end of the run, nsa_steady; only reports with steps). Each sample covers [ts_ns, ts_ns +
-- period_ns) and weighs by how much of that interval lies inside the scope, so `average` is the
-- time-weighted mean the hardware saw over the scope; `peak` is the highest single sample
-- touching it (one sampling period, typically 0.1-1 ms, not a kernel's own peak).
-- reads gpu_metrics, graph_executions, kernel_names, kernel_rows, memcpy, memset, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param scope VARCHAR = NULL one of ('run', 'steady'): 'run' or 'steady'; both when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col metric VARCHAR: canonical metric name (gpu_metrics.metric; docs/gpu_metrics.md).
-- col unit VARCHAR: '%' (of peak), 'byte/s', 'hz', 'warp' or the raw unit.
-- col scope VARCHAR: 'run' or 'steady'.
-- col start_ns BIGINT: the scope starts (ns).
-- col end_ns BIGINT: the scope ends (ns).
-- col samples BIGINT: samples touching the scope.
-- col average DOUBLE: time-weighted mean over the scope, in `unit`.
-- col peak DOUBLE: highest sample touching the scope, in `unit`.
WITH span AS (
    SELECT report_id, min(start_ns) AS s, max(end_ns) AS e FROM nsa_gpu_activity($report_id) GROUP BY report_id
),
sampled AS (
    SELECT report_id, min(ts_ns) AS s, max(ts_ns + coalesce(period_ns, 0)) AS e
    FROM gpu_metrics
    WHERE $report_id IS NULL OR report_id = $report_id
    GROUP BY report_id
),
scopes AS (
    SELECT m.report_id, 'run' AS scope, coalesce(sp.s, m.s) AS s, coalesce(sp.e, m.e) AS e, 1 AS n
    FROM sampled AS m LEFT JOIN span AS sp USING (report_id)
    UNION ALL
    SELECT w.report_id, 'steady', w.start_ns, greatest(w.end_ns, sp.e), 2
    FROM nsa_steady($report_id) AS w JOIN sampled USING (report_id) LEFT JOIN span AS sp USING (report_id)
),
x AS (
    SELECT g.report_id, g.device_id, g.metric, g.unit, c.scope, c.n, c.s, c.e, g.value,
           least(g.ts_ns + coalesce(g.period_ns, 0), c.e) - greatest(g.ts_ns, c.s) AS w
    FROM gpu_metrics AS g
    JOIN scopes AS c ON c.report_id = g.report_id
        AND g.ts_ns < c.e AND g.ts_ns + coalesce(g.period_ns, 0) > c.s
    WHERE ($report_id IS NULL OR g.report_id = $report_id) AND ($scope IS NULL OR c.scope = $scope)
)
SELECT
    report_id,
    device_id,
    metric,
    any_value(unit) AS unit,
    scope,
    CAST(any_value(s) AS BIGINT) AS start_ns,
    CAST(any_value(e) AS BIGINT) AS end_ns,
    count(*) AS samples,
    sum(value * w) / nullif(sum(w), 0) AS average,
    CAST(max(value) AS DOUBLE) AS peak
FROM x
GROUP BY report_id, device_id, metric, scope, n
ORDER BY report_id, device_id, n, metric
