-- Tiny kernels per report: kernels shorter than max_kernel_ns, how much of the launches and of
-- the kernel time they are, the host time spent in the API calls that launched them (the
-- cuda_api row with the same report_id, pid and correlation_id, each call counted once: the
-- kernels of a CUDA graph traced per node share their one cudaGraphLaunch), how often they were
-- launched (per second of the report's kernel span: first kernel start to last kernel end) and
-- the most frequent names. Many tiny kernels with launch time close to or above their GPU time
-- mean a launch-bound workload: fuse them or capture them in a CUDA graph; tiny kernels that
-- already run inside a graph (graph_kernels) are no longer launch-bound, only fusion helps them.
-- reads cuda_api, kernel_names, kernel_rows
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param max_kernel_ns BIGINT = 10000: kernels shorter than this are small (ns).
-- param top_n INTEGER = 5: how many names top_names lists.
-- col report_id INTEGER: workspace report id.
-- col kernels BIGINT: all kernels of the report.
-- col small_kernels BIGINT: kernels shorter than max_kernel_ns.
-- col launch_pct DOUBLE: small_kernels as a share of all kernels (%).
-- col small_kernel_ns BIGINT: summed GPU time of the small kernels (ns).
-- col time_pct DOUBLE: small_kernel_ns as a share of all kernel time (%).
-- col launch_api_ns BIGINT: summed duration of the API calls that launched the small kernels, each call once (ns).
-- col launch_calls BIGINT: distinct API calls that launched the small kernels.
-- col graph_kernels BIGINT: small kernels that ran as nodes of a CUDA graph (graph_node_id set).
-- col launches_per_s DOUBLE: small kernels per second of the report's kernel span (1/s).
-- col top_names VARCHAR: the top_n most frequent small kernels, 'name (count)' joined by '; '.
WITH per_report AS (
    SELECT
        report_id,
        count(*) AS kernels,
        count(*) FILTER (WHERE small) AS small_kernels,
        sum(duration_ns) AS kernel_ns,
        coalesce(sum(duration_ns) FILTER (WHERE small), 0) AS small_kernel_ns,
        count(*) FILTER (WHERE small AND graph_node_id IS NOT NULL) AS graph_kernels,
        max(end_ns) - min(start_ns) AS span_ns
    FROM (
        SELECT report_id, start_ns, end_ns, duration_ns, graph_node_id, duration_ns < $max_kernel_ns AS small
        FROM kernel_rows
        WHERE ($report_id IS NULL OR report_id = $report_id)
    )
    GROUP BY ALL
),
launch AS (
    SELECT c.report_id, sum(c.duration_ns) AS launch_api_ns, count(*) AS launch_calls
    FROM cuda_api AS c
    SEMI JOIN (
        SELECT report_id, pid, correlation_id FROM kernel_rows
        WHERE ($report_id IS NULL OR report_id = $report_id) AND duration_ns < $max_kernel_ns
    ) AS s
        ON c.report_id = s.report_id AND c.pid = s.pid AND c.correlation_id = s.correlation_id
    WHERE ($report_id IS NULL OR c.report_id = $report_id)
    GROUP BY ALL
),
names AS (
    SELECT c.report_id, kn.name, c.n
    FROM (
        SELECT report_id, name_id, count(*) AS n FROM kernel_rows
        WHERE ($report_id IS NULL OR report_id = $report_id) AND duration_ns < $max_kernel_ns
        GROUP BY ALL
    ) AS c
    LEFT JOIN kernel_names AS kn USING (report_id, name_id)
    QUALIFY row_number() OVER (PARTITION BY c.report_id ORDER BY c.n DESC, kn.name) <= $top_n
),
top AS (
    SELECT report_id, string_agg(name || ' (' || n || ')', '; ' ORDER BY n DESC, name) AS top_names
    FROM names
    GROUP BY ALL
)
SELECT
    r.report_id,
    CAST(r.kernels AS BIGINT) AS kernels,
    CAST(r.small_kernels AS BIGINT) AS small_kernels,
    CAST(100.0 * r.small_kernels / r.kernels AS DOUBLE) AS launch_pct,
    CAST(r.small_kernel_ns AS BIGINT) AS small_kernel_ns,
    CAST(CASE WHEN r.kernel_ns > 0 THEN 100.0 * r.small_kernel_ns / r.kernel_ns END AS DOUBLE) AS time_pct,
    CAST(coalesce(l.launch_api_ns, 0) AS BIGINT) AS launch_api_ns,
    CAST(coalesce(l.launch_calls, 0) AS BIGINT) AS launch_calls,
    CAST(r.graph_kernels AS BIGINT) AS graph_kernels,
    CAST(CASE WHEN r.span_ns > 0 THEN r.small_kernels * 1e9 / r.span_ns END AS DOUBLE) AS launches_per_s,
    t.top_names
FROM per_report AS r
LEFT JOIN launch AS l USING (report_id)
LEFT JOIN top AS t USING (report_id)
ORDER BY r.report_id
