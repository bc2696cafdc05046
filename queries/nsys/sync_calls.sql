-- Blocking CUDA API calls per report, process and API name: how long host threads sat in
-- device/stream/event/context synchronize and in synchronous cudaMemcpy / cudaMemset (the
-- nsa_blocking_call list; cudaStreamWaitEvent, queries and *Async calls do not block). span_pct is
-- the blocked time as a share of the report span (first to last start/end of any CUDA API call,
-- kernel, memcpy or memset of the report); several threads can block at once, so it can pass 100.
-- reads cuda_api, graph_executions, kernel_names, kernel_rows, memcpy, memset
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col pid BIGINT: process id.
-- col name VARCHAR: CUDA API call.
-- col blocking VARCHAR: synchronize, memcpy or memset.
-- col calls BIGINT: number of calls.
-- col total_ns BIGINT: summed time blocked in the calls (ns).
-- col avg_ns DOUBLE: mean call duration (ns).
-- col max_ns BIGINT: longest call (ns).
-- col threads BIGINT: distinct host threads that made the calls.
-- col span_pct DOUBLE: total_ns as a share of the report span (%).
WITH c AS (
    SELECT report_id, pid, tid, name, nsa_blocking_call(name) AS blocking, duration_ns
    FROM cuda_api
    WHERE ($report_id IS NULL OR report_id = $report_id) AND nsa_blocking_call(name) IS NOT NULL
),
span AS (
    SELECT report_id, max(end_ns) - min(start_ns) AS span_ns
    FROM (
        SELECT report_id, start_ns, end_ns FROM cuda_api WHERE ($report_id IS NULL OR report_id = $report_id)
        UNION ALL
        SELECT report_id, start_ns, end_ns FROM nsa_gpu_activity($report_id)
    )
    GROUP BY ALL
),
s AS (
    SELECT
        report_id, pid, name, blocking,
        count(*) AS calls,
        sum(duration_ns) AS total_ns,
        avg(duration_ns) AS avg_ns,
        max(duration_ns) AS max_ns,
        count(DISTINCT tid) AS threads
    FROM c
    GROUP BY ALL
)
SELECT
    s.report_id,
    s.pid,
    s.name,
    s.blocking,
    CAST(s.calls AS BIGINT) AS calls,
    CAST(s.total_ns AS BIGINT) AS total_ns,
    CAST(s.avg_ns AS DOUBLE) AS avg_ns,
    CAST(s.max_ns AS BIGINT) AS max_ns,
    CAST(s.threads AS BIGINT) AS threads,
    CAST(CASE WHEN sp.span_ns > 0 THEN 100.0 * s.total_ns / sp.span_ns END AS DOUBLE) AS span_pct
FROM s
LEFT JOIN span AS sp USING (report_id)
ORDER BY s.report_id, s.total_ns DESC, s.pid, s.name
