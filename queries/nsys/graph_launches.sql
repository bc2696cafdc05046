-- CUDA graph launches per report and graph: how often each graph was replayed, what the launch
-- calls cost the host, and how long the replays ran on the GPU. With nsys' default
-- --cuda-graph-trace=graph each replay is one graph_executions row (joined to its launch call on
-- report_id, pid, correlation_id); with --cuda-graph-trace=node the replay's kernels are listed
-- one by one, sharing the launch call's correlation id: kernels_per_replay counts them and the
-- replay runs from the first of them to the last. A graph's kernels pay one launch call per
-- replay, however many kernels it holds.
-- reads cuda_api, graph_executions, kernel_rows
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col graph_id BIGINT: graph id (NULL when only the graph's nodes were traced).
-- col traced VARCHAR: 'graph' (one row per replay) or 'node' (the replay's kernels).
-- col replays BIGINT: graph launches that ran on the GPU.
-- col launch_api_ns BIGINT: summed duration of the launch calls (cudaGraphLaunch) (ns).
-- col gpu_ns BIGINT: summed GPU time of the replays, first start to last end of each (ns).
-- col avg_replay_ns DOUBLE: mean GPU time of one replay (ns).
-- col kernels_per_replay DOUBLE: kernels per replay when nodes are traced, else NULL.
-- col kernel_ns BIGINT: summed GPU time of the traced node kernels, else NULL (ns).
WITH replays AS (
    SELECT report_id, pid, correlation_id, graph_id, 'graph' AS traced,
           min(start_ns) AS start_ns, max(end_ns) AS end_ns, NULL::BIGINT AS kernels, NULL::BIGINT AS kernel_ns
    FROM graph_executions
    WHERE ($report_id IS NULL OR report_id = $report_id)
    GROUP BY report_id, pid, correlation_id, graph_id
    UNION ALL
    SELECT report_id, pid, correlation_id, NULL AS graph_id, 'node' AS traced,
           min(start_ns), max(end_ns), count(*), sum(duration_ns)
    FROM kernel_rows
    WHERE ($report_id IS NULL OR report_id = $report_id) AND graph_node_id IS NOT NULL
    GROUP BY report_id, pid, correlation_id
),
calls AS (
    SELECT c.report_id, c.pid, c.correlation_id, c.duration_ns
    FROM cuda_api AS c
    SEMI JOIN replays AS r ON r.report_id = c.report_id AND r.pid = c.pid AND r.correlation_id = c.correlation_id
    WHERE ($report_id IS NULL OR c.report_id = $report_id)
)
SELECT
    r.report_id,
    r.graph_id,
    r.traced,
    CAST(count(*) AS BIGINT) AS replays,
    CAST(coalesce(sum(c.duration_ns), 0) AS BIGINT) AS launch_api_ns,
    CAST(sum(r.end_ns - r.start_ns) AS BIGINT) AS gpu_ns,
    CAST(avg(r.end_ns - r.start_ns) AS DOUBLE) AS avg_replay_ns,
    CAST(avg(r.kernels) AS DOUBLE) AS kernels_per_replay,
    CAST(sum(r.kernel_ns) AS BIGINT) AS kernel_ns
FROM replays AS r
LEFT JOIN calls AS c ON c.report_id = r.report_id AND c.pid = r.pid AND c.correlation_id = r.correlation_id
GROUP BY r.report_id, r.graph_id, r.traced
ORDER BY r.report_id, gpu_ns DESC, r.graph_id
