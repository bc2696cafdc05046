-- What host threads did inside given time intervals: per report and CUDA API call, the call
-- time that falls inside the intervals, each call clipped to them. The intervals come as three
-- lists of equal length (thread_ids, starts_ns, ends_ns), e.g. some GPU idle gaps from `gaps`
-- and the thread that launched the work after each (launch_global_tid). Time not covered by any
-- call was spent outside CUDA: `gap_host` follows the launching threads through all the idle
-- time and every traced source (OS runtime, MPI, NVTX, PyTorch-profiler ops and frames, CPU
-- samples). No rows without intervals.
-- reads cuda_api
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param thread_ids BIGINT[]: the global thread id (cuda_api.global_tid) of each interval.
-- param starts_ns BIGINT[]: the start of each interval (ns).
-- param ends_ns BIGINT[]: the end of each interval (ns).
-- param top_n INTEGER = 3: the calls with the most time inside the intervals, per report.
-- col report_id INTEGER: workspace report id.
-- col name VARCHAR: CUDA API call.
-- col in_gaps_ns BIGINT: the calls' time inside the intervals (ns).
WITH g AS (
    SELECT unnest($thread_ids) AS tid, unnest($starts_ns) AS s, unnest($ends_ns) AS e
)
SELECT c.report_id, c.name, CAST(sum(least(c.end_ns, g.e) - greatest(c.start_ns, g.s)) AS BIGINT) AS in_gaps_ns
FROM cuda_api AS c
JOIN g ON c.global_tid = g.tid AND c.start_ns < g.e AND c.end_ns > g.s
WHERE ($report_id IS NULL OR c.report_id = $report_id)
    AND c.start_ns < (SELECT max(e) FROM g) AND c.end_ns > (SELECT min(s) FROM g)
GROUP BY c.report_id, c.name
QUALIFY row_number() OVER (PARTITION BY c.report_id ORDER BY in_gaps_ns DESC, c.name) <= $top_n
ORDER BY c.report_id, in_gaps_ns DESC, c.name
