-- GPU hardware metrics over time, resampled per device into buckets of bucket_ns (from the
-- report's first sample): what a timeline plot or a notebook needs instead of every sample. A
-- sample falls in the bucket its start lies in and weighs by its length; buckets shorter than
-- the sampling period hold one sample or none.
-- reads gpu_metrics
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param bucket_ns BIGINT = 10000000: bucket length (ns).
-- param metrics VARCHAR = NULL: only these canonical metrics, comma-separated (sm_issue,tensor_active); all when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col bucket_start_ns BIGINT: the bucket starts (ns).
-- col bucket_end_ns BIGINT: the bucket ends (ns).
-- col metric VARCHAR: canonical metric name.
-- col unit VARCHAR: the metric's unit.
-- col samples BIGINT: samples starting in the bucket.
-- col average DOUBLE: mean of those samples weighted by their length, in `unit`.
-- col peak DOUBLE: highest of those samples, in `unit`.
WITH g AS (
    SELECT *, min(ts_ns) OVER (PARTITION BY report_id) AS t0
    FROM gpu_metrics
    WHERE ($report_id IS NULL OR report_id = $report_id) AND ($metrics IS NULL OR list_contains(list_transform(string_split($metrics, ','), x -> trim(x)), metric))
),
b AS (
    SELECT report_id, device_id, metric, unit, value, coalesce(period_ns, 1) AS w,
           t0 + (ts_ns - t0) // greatest($bucket_ns, 1) * greatest($bucket_ns, 1) AS bs
    FROM g
)
SELECT
    report_id,
    device_id,
    CAST(bs AS BIGINT) AS bucket_start_ns,
    CAST(bs + greatest($bucket_ns, 1) AS BIGINT) AS bucket_end_ns,
    metric,
    any_value(unit) AS unit,
    count(*) AS samples,
    sum(value * w) / sum(w) AS average,
    CAST(max(value) AS DOUBLE) AS peak
FROM b
GROUP BY report_id, device_id, bs, metric
ORDER BY report_id, device_id, bucket_start_ns, metric
