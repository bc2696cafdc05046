-- GPU hardware metrics per kernel name: the samples taken while the kernels of a name ran, each
-- weighted by how long such a kernel ran inside it. A sample (typically 0.1-1 ms) also holds
-- whatever else the GPU did in that interval, idle time included; `sample_share` says how much of
-- the samples' time the name's kernels filled: near 1 the average is the kernels' own, near 0 it
-- is mostly their neighbours' (a 5 us kernel in a 1 ms sample). Concurrent kernels share samples.
-- reads gpu_metrics, kernel_names, kernel_rows, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param metrics VARCHAR = NULL: only these canonical metrics, comma-separated (sm_issue,tensor_active); all when NULL.
-- param phase VARCHAR = NULL one of ('steady'): 'steady': only kernels starting in the steady state (reports with steps; all kernels of the others).
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col name VARCHAR: kernel name (demangled; the short name when absent).
-- col metric VARCHAR: canonical metric name.
-- col unit VARCHAR: the metric's unit.
-- col kernels BIGINT: kernels of the name (in the phase).
-- col kernel_ns BIGINT: their summed duration (ns).
-- col sampled_ns BIGINT: kernel time covered by samples of the metric (ns).
-- col sample_share DOUBLE: sampled_ns / the summed length of the samples they touch (0..1).
-- col average DOUBLE: mean of the samples weighted by kernel time inside each, in `unit`.
-- col peak DOUBLE: highest sample a kernel of the name touched, in `unit`.
WITH steady AS (SELECT report_id, start_ns FROM nsa_steady($report_id)),
g AS (
    SELECT report_id, device_id, metric, unit, ts_ns, ts_ns + period_ns AS te, period_ns, value
    FROM gpu_metrics
    WHERE ($report_id IS NULL OR report_id = $report_id) AND period_ns > 0
        AND ($metrics IS NULL OR list_contains(list_transform(string_split($metrics, ','), x -> trim(x)), metric))
),
-- only the devices with samples: a workspace of kernels without GPU metrics costs nothing
sampled AS (SELECT DISTINCT report_id, device_id FROM g),
k AS (
    SELECT k.report_id, k.device_id, coalesce(n.name, n.short_name, '(unnamed kernel)') AS name,
           k.start_ns, k.end_ns
    FROM kernel_rows AS k
    JOIN sampled AS s ON s.report_id = k.report_id AND s.device_id = k.device_id
    LEFT JOIN kernel_names AS n ON n.report_id = k.report_id AND n.name_id = k.name_id
    LEFT JOIN steady AS st ON st.report_id = k.report_id
    WHERE ($report_id IS NULL OR k.report_id = $report_id) AND k.end_ns >= k.start_ns
        AND ($phase IS NULL OR st.start_ns IS NULL OR k.start_ns >= st.start_ns)
),
counts AS (
    SELECT report_id, device_id, name, count(*) AS kernels, sum(end_ns - start_ns) AS kernel_ns
    FROM k GROUP BY ALL
),
-- Kernels and samples meet in time buckets of a device's median sample period: each is listed in
-- every bucket it touches, and a (kernel, sample) pair is kept in the one bucket holding the start
-- of their overlap, so the join is on equality (no kernel x sample product per device)
width AS (
    SELECT report_id, device_id, greatest(quantile_disc(period_ns, 0.5), 1) AS w,
           least(min(ts_ns), (SELECT min(start_ns) FROM k)) AS t0
    FROM g
    GROUP BY ALL
),
kb AS (
    SELECT k.*, w.w, w.t0, unnest(range((k.start_ns - w.t0) // w.w, (greatest(k.start_ns, k.end_ns - 1) - w.t0) // w.w + 1)) AS b
    FROM k
    JOIN width AS w USING (report_id, device_id)
),
gb AS (
    SELECT g.*, unnest(range((g.ts_ns - w.t0) // w.w, (g.te - 1 - w.t0) // w.w + 1)) AS b
    FROM g
    JOIN width AS w USING (report_id, device_id)
),
per_sample AS (
    -- the name's kernel time inside each sample
    SELECT k.report_id, k.device_id, k.name, g.metric, any_value(g.unit) AS unit, g.ts_ns,
           any_value(g.period_ns) AS period_ns, any_value(g.value) AS value,
           sum(least(k.end_ns, g.te) - greatest(k.start_ns, g.ts_ns)) AS ov
    FROM kb AS k
    JOIN gb AS g ON g.report_id = k.report_id AND g.device_id = k.device_id AND g.b = k.b
    WHERE g.ts_ns < k.end_ns AND g.te > k.start_ns AND k.b = (greatest(k.start_ns, g.ts_ns) - k.t0) // k.w
    GROUP BY k.report_id, k.device_id, k.name, g.metric, g.ts_ns
),
agg AS (
    SELECT report_id, device_id, name, metric, any_value(unit) AS unit,
           sum(ov) AS sampled_ns, sum(ov) / nullif(sum(period_ns), 0) AS sample_share,
           sum(value * ov) / nullif(sum(ov), 0) AS average, max(value) AS peak
    FROM per_sample
    GROUP BY ALL
)
SELECT
    a.report_id,
    a.device_id,
    a.name,
    a.metric,
    a.unit,
    CAST(c.kernels AS BIGINT) AS kernels,
    CAST(c.kernel_ns AS BIGINT) AS kernel_ns,
    CAST(a.sampled_ns AS BIGINT) AS sampled_ns,
    CAST(least(1.0, a.sample_share) AS DOUBLE) AS sample_share,
    a.average,
    CAST(a.peak AS DOUBLE) AS peak
FROM agg AS a
JOIN counts AS c USING (report_id, device_id, name)
ORDER BY a.report_id, a.device_id, c.kernel_ns DESC, a.name, a.metric
