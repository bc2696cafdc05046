-- The span of each device's kernels per report: when its first kernel started and its last one
-- ended. Everything a device did before its first kernel (context creation, module loading,
-- first copies) is start-up; a timeline rule without steps judges the run from there on.
-- reads kernel_rows
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: GPU index as the export numbers it.
-- col kernels BIGINT: kernel executions on the device.
-- col first_kernel_ns BIGINT: start of the device's first kernel (ns).
-- col last_kernel_end_ns BIGINT: end of the device's last kernel (ns).
-- col span_ns BIGINT: last_kernel_end_ns - first_kernel_ns (ns).
SELECT
    report_id,
    device_id,
    count(*) AS kernels,
    min(start_ns) AS first_kernel_ns,
    max(end_ns) AS last_kernel_end_ns,
    max(end_ns) - min(start_ns) AS span_ns
FROM kernel_rows
WHERE $report_id IS NULL OR report_id = $report_id
GROUP BY ALL
ORDER BY report_id, device_id
