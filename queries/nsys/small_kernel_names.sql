-- Tiny kernels by name per report: kernels shorter than max_kernel_ns grouped by their short
-- name (template variants of one kernel together), most launched first. `small_kernels` counts
-- them per report; this names the ones to fuse first.
-- reads kernel_names, kernel_rows
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param max_kernel_ns BIGINT = 10000: kernels shorter than this are small (ns).
-- col report_id INTEGER: workspace report id.
-- col short_name VARCHAR: the kernel's short name (its full name when the export has no short one).
-- col variants BIGINT: distinct full names (template instantiations) under the short name.
-- col name VARCHAR: one full name of the group (the smallest), as an example.
-- col launches BIGINT: small kernels launched under the name.
-- col avg_ns DOUBLE: their mean duration (ns).
-- col total_ns BIGINT: their summed duration (ns).
SELECT c.report_id, coalesce(n.short_name, n.name) AS short_name, count(DISTINCT n.name) AS variants,
       min(n.name) AS name, CAST(sum(c.launches) AS BIGINT) AS launches,
       sum(c.total_ns) / sum(c.launches) AS avg_ns, CAST(sum(c.total_ns) AS BIGINT) AS total_ns
FROM (
    SELECT report_id, name_id, count(*) AS launches, sum(duration_ns) AS total_ns
    FROM kernel_rows
    WHERE ($report_id IS NULL OR report_id = $report_id) AND duration_ns < $max_kernel_ns
    GROUP BY ALL
) AS c
LEFT JOIN kernel_names AS n USING (report_id, name_id)
GROUP BY ALL
ORDER BY c.report_id, launches DESC, short_name
