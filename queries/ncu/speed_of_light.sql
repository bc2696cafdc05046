-- Speed of light per ncu kernel launch: how close the kernel came to the GPU's peak compute
-- (SM) and memory throughput, and what bounds it. `bound` follows ncu's own reading of the
-- section: below busy_pct on both units the kernel is latency bound (neither unit is kept
-- busy); otherwise it is bound by the busier unit, or balanced when the two are within
-- balance_margin_pct points of each other. NULL when the export lacks either percentage.
-- reads ncu_kernels, ncu_metrics
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param busy_pct DOUBLE = 60: throughput at or above which a unit counts as busy (% of peak).
-- param balance_margin_pct DOUBLE = 10: compute and memory closer than this are balanced (percentage points).
-- col report_id INTEGER: workspace report id.
-- col launch_id INTEGER: ncu launch ID within the report.
-- col name VARCHAR: kernel name as ncu wrote it.
-- col duration_ns BIGINT: kernel duration, gpu__time_duration.sum (ns); for a summary row, the Average over its invocations.
-- col compute_pct DOUBLE: compute (SM) throughput, sm__throughput.avg.pct_of_peak_sustained_elapsed (% of peak).
-- col memory_pct DOUBLE: memory throughput, gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed (% of peak).
-- col bound VARCHAR: 'compute', 'memory', 'balanced' or 'latency'.
-- col invocations BIGINT: launches a `--print-summary` row aggregates (its values are Averages); NULL for per-launch exports.
WITH sol AS (
    SELECT
        report_id,
        launch_id,
        max(value) FILTER (WHERE metric_name = 'gpu__time_duration.sum') AS duration_ns,
        max(value) FILTER (WHERE metric_name = 'sm__throughput.avg.pct_of_peak_sustained_elapsed') AS compute_pct,
        max(value) FILTER (
            WHERE metric_name = 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed'
        ) AS memory_pct
    FROM ncu_metrics
    WHERE ($report_id IS NULL OR report_id = $report_id)
    GROUP BY ALL
)
SELECT
    k.report_id,
    k.launch_id,
    k.name,
    CAST(round(s.duration_ns) AS BIGINT) AS duration_ns,
    s.compute_pct,
    s.memory_pct,
    CASE
        WHEN s.compute_pct IS NULL OR s.memory_pct IS NULL THEN NULL
        WHEN greatest(s.compute_pct, s.memory_pct) < $busy_pct THEN 'latency'
        WHEN abs(s.compute_pct - s.memory_pct) < $balance_margin_pct THEN 'balanced'
        WHEN s.compute_pct > s.memory_pct THEN 'compute'
        ELSE 'memory'
    END AS bound,
    k.invocations
FROM ncu_kernels AS k
LEFT JOIN sol AS s USING (report_id, launch_id)
WHERE ($report_id IS NULL OR k.report_id = $report_id)
ORDER BY k.report_id, k.launch_id
