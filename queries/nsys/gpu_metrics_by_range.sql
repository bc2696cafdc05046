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
-- param phase VARCHAR = NULL one of ('steady'): 'steady': only windows starting in the steady state (reports with steps); all when NULL.
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
samples AS (
    SELECT report_id, device_id, metric, unit, value, ts_ns, coalesce(period_ns, 0) AS p
    FROM gpu_metrics
    WHERE ($report_id IS NULL OR report_id = $report_id) AND ($metrics IS NULL OR list_contains(list_transform(string_split($metrics, ','), x -> trim(x)), metric))
),
-- the GPU work of the devices with samples (the others have no row to show: a report without
-- samples reads no further)
gpu AS (
    SELECT g.report_id, g.device_id, g.pid, g.correlation_id, g.start_ns, g.end_ns
    FROM nsa_gpu_activity($report_id) AS g
    SEMI JOIN (SELECT DISTINCT report_id, device_id FROM samples) AS m
        ON m.report_id = g.report_id AND m.device_id = g.device_id
),
host AS (
    SELECT report_id, pid, 'nvtx' AS range_type, coalesce(base_name, name) AS name, start_ns, end_ns,
           row_number() OVER () AS wid
    FROM nvtx_ranges
    WHERE ($report_id IS NULL OR report_id = $report_id) AND end_ns >= start_ns
    UNION ALL
    SELECT report_id, pid, 'step', name, start_ns, end_ns, -row_number() OVER ()
    FROM steps
    WHERE ($report_id IS NULL OR report_id = $report_id) AND source <> 'kernels' AND end_ns >= start_ns
),
-- the GPU work of every CUDA API call, at the call's start
launched AS (
    SELECT a.report_id, a.pid, g.device_id, a.start_ns AS t, g.start_ns AS s, g.end_ns AS e
    FROM cuda_api AS a
    JOIN gpu AS g ON g.report_id = a.report_id AND g.pid = a.pid AND g.correlation_id = a.correlation_id
    WHERE ($report_id IS NULL OR a.report_id = $report_id) AND a.start_ns IS NOT NULL
),
-- each range projected onto each device its process launched work on: one sorted pass per
-- process and device over the launches and the ranges' starts (a range before the launches at
-- its start), each range's window frame reaching to the last launch at or before its end: n log
-- n, where a join on pid alone compares every range with every call
probes AS (
    SELECT report_id, pid, device_id, t, s, e, NULL AS range_type, NULL AS name, NULL AS wid, 0 AS len
    FROM launched
    UNION ALL
    SELECT h.report_id, h.pid, d.device_id, h.start_ns, NULL, NULL, h.range_type, h.name, h.wid, h.end_ns - h.start_ns
    FROM host AS h
    JOIN (SELECT DISTINCT report_id, pid, device_id FROM launched) AS d
        ON d.report_id = h.report_id AND d.pid = h.pid
),
ranked AS (
    SELECT *, row_number() OVER w AS rn, count(*) OVER w AS upto
    FROM probes
    WINDOW w AS (
        PARTITION BY report_id, pid, device_id ORDER BY t, wid IS NULL
        RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    )
),
reach AS (
    SELECT r.*, greatest(coalesce(l.upto, 0) - r.rn, 0) AS ahead
    FROM (SELECT * FROM ranked WHERE wid IS NOT NULL) AS r
    ASOF LEFT JOIN (SELECT * FROM ranked WHERE wid IS NULL) AS l
        ON l.report_id = r.report_id AND l.pid = r.pid AND coalesce(l.device_id, -1) = coalesce(r.device_id, -1)
        AND r.t + r.len >= l.t
    UNION ALL
    SELECT *, 0 FROM ranked WHERE wid IS NULL
),
projected AS (
    SELECT report_id, device_id, range_type, name, wid, s, e
    FROM (
        SELECT report_id, device_id, range_type, name, wid, min(s) OVER f AS s, max(e) OVER f AS e
        FROM reach
        WINDOW f AS (PARTITION BY report_id, pid, device_id ORDER BY rn ROWS BETWEEN CURRENT ROW AND ahead FOLLOWING)
    )
    WHERE wid IS NOT NULL AND s IS NOT NULL
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
-- each window's samples: a sample covers [ts_ns, ts_ns + period_ns), and the samples of one
-- device and metric follow one another without overlapping (period_ns runs to the next sample),
-- so those touching a window are the ones starting inside it (a zero-length one strictly inside)
-- plus the one before it when that one reaches into the window. One sorted pass per device and
-- metric over the samples (at 2 * ts_ns, less 1 for zero-length ones) and the windows' starts
-- (at 2 * s, the frame reaching to 2 * e - 2); only the last sample in a frame can run past e.
series AS (SELECT report_id, device_id, metric, any_value(unit) AS unit FROM samples GROUP BY ALL),
stream AS (
    SELECT report_id, device_id, metric, 2 * ts_ns - CAST(p = 0 AS BIGINT) AS t, 0 AS len,
           {'ts': ts_ns, 'p': p, 'v': value} AS smp, value, p, value * p AS vp,
           NULL AS wid, NULL AS range_type, NULL AS name, NULL AS s, NULL AS e
    FROM samples
    UNION ALL
    SELECT k.report_id, k.device_id, se.metric, 2 * k.s, 2 * (k.e - k.s) - 2, NULL, NULL, NULL, NULL,
           k.wid, k.range_type, k.name, k.s, k.e
    FROM kept AS k
    JOIN series AS se ON se.report_id = k.report_id AND se.device_id = k.device_id
),
ranked_samples AS (
    SELECT *, row_number() OVER w AS rn, count(*) OVER w AS upto
    FROM stream
    WINDOW w AS (
        PARTITION BY report_id, device_id, metric ORDER BY t, wid IS NULL
        RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    )
),
reach_samples AS (
    SELECT r.*, greatest(coalesce(l.upto, 0) - r.rn, 0) AS ahead
    FROM (SELECT * FROM ranked_samples WHERE wid IS NOT NULL) AS r
    ASOF LEFT JOIN (SELECT report_id, device_id, metric, t, upto FROM ranked_samples WHERE wid IS NULL) AS l
        ON l.report_id = r.report_id AND coalesce(l.device_id, -1) = coalesce(r.device_id, -1)
        AND l.metric = r.metric AND r.t + r.len >= l.t
    UNION ALL
    SELECT *, 0 FROM ranked_samples WHERE wid IS NULL
),
framed AS (
    SELECT report_id, device_id, metric, wid, range_type, name, s, e,
           count(smp) OVER f AS n, sum(vp) OVER f AS in_vp, sum(p) OVER f AS in_p, max(value) OVER f AS in_peak,
           last_value(smp) OVER f AS last,
           last_value(smp IGNORE NULLS) OVER b AS pred
    FROM reach_samples
    WINDOW f AS (PARTITION BY report_id, device_id, metric ORDER BY rn ROWS BETWEEN CURRENT ROW AND ahead FOLLOWING),
           b AS (PARTITION BY report_id, device_id, metric ORDER BY rn ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
x AS (
    SELECT f.*, greatest(0, coalesce(f.last.ts + f.last.p - f.e, 0)) AS over_ns,
           CASE WHEN f.pred.ts + f.pred.p > f.s THEN least(f.pred.ts + f.pred.p, f.e) - f.s END AS pred_ns
    FROM (SELECT * FROM framed WHERE wid IS NOT NULL) AS f
),
agg AS (
    SELECT x.report_id, x.device_id, x.range_type, x.name, x.metric, any_value(se.unit) AS unit,
           sum(coalesce(x.in_vp, 0) - coalesce(x.last.v * x.over_ns, 0) + coalesce(x.pred.v * x.pred_ns, 0))
               / nullif(sum(coalesce(x.in_p, 0) - x.over_ns + coalesce(x.pred_ns, 0)), 0) AS average,
           max(greatest(x.in_peak, CASE WHEN x.pred_ns IS NOT NULL THEN x.pred.v END)) AS peak
    FROM x
    JOIN series AS se ON se.report_id = x.report_id AND se.device_id = x.device_id AND se.metric = x.metric
    WHERE x.n > 0 OR x.pred_ns IS NOT NULL
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
