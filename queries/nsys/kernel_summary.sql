-- Kernel time per report and kernel name: the numbers `nsys stats -r cuda_gpu_kern_sum` prints.
-- Grouped like nsys's default (the demangled name, `kernels.name`); median is the mean of the
-- two middle values for an even count; stddev is the sample deviation (n-1), 0 for a single
-- instance as nsys prints it; time_pct is the kernel's share of the report's total kernel time
-- (a sum of durations, not of wall time). nsys rounds avg/median/stddev/time_pct to 0.1 when it
-- prints; these columns are unrounded. Ordered like nsys: total time desc, instances, name.
-- reads kernel_names, kernel_rows
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col name VARCHAR: kernel name (demangled, else the short name).
-- col instances BIGINT: executions of the kernel.
-- col total_ns BIGINT: summed execution time (ns).
-- col avg_ns DOUBLE: mean execution time (ns).
-- col median_ns DOUBLE: median execution time (ns).
-- col min_ns BIGINT: shortest execution (ns).
-- col max_ns BIGINT: longest execution (ns).
-- col stddev_ns DOUBLE: sample standard deviation of the execution time (ns).
-- col time_pct DOUBLE: share of the report's summed kernel time (%).
-- Grouped on the name id (one integer per name), named afterwards: the same groups, since an
-- export's StringIds hold each string once.
WITH s AS (
    SELECT
        report_id,
        name_id,
        count(*) AS instances,
        sum(duration_ns) AS total_ns,
        avg(duration_ns) AS avg_ns,
        median(duration_ns) AS median_ns,
        min(duration_ns) AS min_ns,
        max(duration_ns) AS max_ns,
        stddev_samp(duration_ns) AS stddev_ns
    FROM kernel_rows
    WHERE ($report_id IS NULL OR report_id = $report_id)
    GROUP BY ALL
)
SELECT
    s.report_id,
    n.name,
    CAST(instances AS BIGINT) AS instances,
    CAST(total_ns AS BIGINT) AS total_ns,
    CAST(avg_ns AS DOUBLE) AS avg_ns,
    CAST(median_ns AS DOUBLE) AS median_ns,
    CAST(min_ns AS BIGINT) AS min_ns,
    CAST(max_ns AS BIGINT) AS max_ns,
    CAST(coalesce(stddev_ns, 0) AS DOUBLE) AS stddev_ns,
    CAST(CASE WHEN sum(total_ns) OVER r > 0 THEN 100.0 * total_ns / sum(total_ns) OVER r END AS DOUBLE) AS time_pct
FROM s
LEFT JOIN kernel_names AS n USING (report_id, name_id)
WINDOW r AS (PARTITION BY s.report_id)
ORDER BY s.report_id, s.total_ns DESC, s.instances, n.name
