-- CUDA API calls per report and call name: how often the host called each one and how long the
-- calls took, longest total first. A report with API rows but no kernel, memcpy or memset
-- records had CUDA tracing of the device fail (an nsys older than the driver).
-- reads cuda_api
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col name VARCHAR: CUDA API call.
-- col calls BIGINT: number of calls.
-- col total_ns BIGINT: summed call duration (ns).
-- col avg_ns DOUBLE: mean call duration (ns).
-- col max_ns BIGINT: longest call (ns).
SELECT
    report_id,
    name,
    count(*) AS calls,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    avg(duration_ns) AS avg_ns,
    max(duration_ns) AS max_ns
FROM cuda_api
WHERE $report_id IS NULL OR report_id = $report_id
GROUP BY ALL
ORDER BY report_id, total_ns DESC NULLS LAST, name
