-- Warp-stall breakdown per ncu kernel launch: for each stall reason (long_scoreboard, barrier,
-- math_pipe_throttle, ...), the warp cycles it costs per issued instruction and its share of all
-- stall reasons, top reason first. Uses whichever stall metric family the export has (see
-- nsa_ncu_stall_reasons in _macros.sql); `source` names it. cycles_per_issue is NULL when the
-- export has only sample counts or percentages and no total warp latency to scale them by.
-- For a `--print-summary` export a launch_id is one summarized kernel and its numbers are the
-- Averages over ncu_kernels.invocations launches.
-- reads ncu_kernels, ncu_metrics
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param top_n INTEGER = NULL: keep only the top N reasons of each launch; all when NULL.
-- col report_id INTEGER: workspace report id.
-- col launch_id INTEGER: ncu launch ID within the report.
-- col name VARCHAR: kernel name as ncu wrote it.
-- col reason VARCHAR: stall reason, as in ncu's metric names (long_scoreboard, barrier, ...).
-- col rank BIGINT: 1 for the reason costing the most cycles in this launch.
-- col cycles_per_issue DOUBLE: warp cycles stalled on this reason per issued instruction (cycle).
-- col share_pct DOUBLE: share of this reason among all stall reasons of the launch (%).
-- col source VARCHAR: the ncu metric family the numbers come from.
SELECT
    s.report_id,
    s.launch_id,
    k.name,
    s.reason,
    s.rank,
    s.cycles_per_issue,
    s.share_pct,
    s.source
FROM nsa_ncu_stall_reasons($report_id) AS s
LEFT JOIN ncu_kernels AS k USING (report_id, launch_id)
WHERE ($report_id IS NULL OR s.report_id = $report_id)
  AND ($top_n IS NULL OR s.rank <= $top_n)
ORDER BY s.report_id, s.launch_id, s.rank
