-- Occupancy per ncu kernel launch: theoretical vs achieved occupancy, and what limits the
-- theoretical one. Each launch__occupancy_limit_* metric is the number of blocks per SM that
-- one resource allows; the smallest wins, and `limiter` names it (ties list every resource at
-- the minimum, comma-separated, in the order registers, shared_memory, warps, blocks, barriers).
-- reads ncu_kernels, ncu_metrics
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col launch_id INTEGER: ncu launch ID within the report.
-- col name VARCHAR: kernel name as ncu wrote it.
-- col theoretical_pct DOUBLE: theoretical occupancy, sm__maximum_warps_per_active_cycle_pct (% of max warps).
-- col achieved_pct DOUBLE: achieved occupancy, sm__warps_active.avg.pct_of_peak_sustained_active (% of max warps).
-- col achieved_of_theoretical_pct DOUBLE: achieved as a share of theoretical (%).
-- col limit_registers INTEGER: blocks per SM allowed by registers (block).
-- col limit_shared_memory INTEGER: blocks per SM allowed by shared memory (block).
-- col limit_warps INTEGER: blocks per SM allowed by the warp slots (block).
-- col limit_blocks INTEGER: blocks per SM allowed by the SM's block slots (block).
-- col limit_barriers INTEGER: blocks per SM allowed by barriers, on GPUs that report it (block).
-- col blocks_per_sm INTEGER: the smallest limit: resident blocks per SM (block).
-- col limiter VARCHAR: the resource(s) at the smallest limit.
WITH m AS (
    SELECT
        report_id,
        launch_id,
        max(value) FILTER (WHERE metric_name = 'sm__maximum_warps_per_active_cycle_pct') AS theoretical_pct,
        max(value) FILTER (WHERE metric_name = 'sm__warps_active.avg.pct_of_peak_sustained_active') AS achieved_pct,
        CAST(max(value) FILTER (WHERE metric_name = 'launch__occupancy_limit_registers') AS INTEGER) AS limit_registers,
        CAST(max(value) FILTER (WHERE metric_name = 'launch__occupancy_limit_shared_mem') AS INTEGER) AS limit_shared_memory,
        CAST(max(value) FILTER (WHERE metric_name = 'launch__occupancy_limit_warps') AS INTEGER) AS limit_warps,
        CAST(max(value) FILTER (WHERE metric_name = 'launch__occupancy_limit_blocks') AS INTEGER) AS limit_blocks,
        CAST(max(value) FILTER (WHERE metric_name = 'launch__occupancy_limit_barriers') AS INTEGER) AS limit_barriers
    FROM ncu_metrics
    WHERE ($report_id IS NULL OR report_id = $report_id)
    GROUP BY ALL
),
lim AS (
    SELECT
        *,
        least(limit_registers, limit_shared_memory, limit_warps, limit_blocks, limit_barriers) AS blocks_per_sm
    FROM m
)
SELECT
    k.report_id,
    k.launch_id,
    k.name,
    l.theoretical_pct,
    l.achieved_pct,
    CASE WHEN l.theoretical_pct > 0 THEN 100.0 * l.achieved_pct / l.theoretical_pct END AS achieved_of_theoretical_pct,
    l.limit_registers,
    l.limit_shared_memory,
    l.limit_warps,
    l.limit_blocks,
    l.limit_barriers,
    l.blocks_per_sm,
    nullif(concat_ws(',',
        CASE WHEN l.limit_registers = l.blocks_per_sm THEN 'registers' END,
        CASE WHEN l.limit_shared_memory = l.blocks_per_sm THEN 'shared_memory' END,
        CASE WHEN l.limit_warps = l.blocks_per_sm THEN 'warps' END,
        CASE WHEN l.limit_blocks = l.blocks_per_sm THEN 'blocks' END,
        CASE WHEN l.limit_barriers = l.blocks_per_sm THEN 'barriers' END
    ), '') AS limiter
FROM ncu_kernels AS k
LEFT JOIN lim AS l USING (report_id, launch_id)
WHERE ($report_id IS NULL OR k.report_id = $report_id)
ORDER BY k.report_id, k.launch_id
