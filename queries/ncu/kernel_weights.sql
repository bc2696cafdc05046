-- The weight of each kernel of an ncu report: its profiled launches and ncu time, and the real
-- timeline time of the same kernel in the nsys report of the workspace that ran it longest
-- (matched by nsa_kernel_key, all its launches there). The ncu rules rank kernels by it: a
-- kernel's timeline time when an nsys report has it, else its summed ncu duration (a
-- `--print-summary` row counts as its `invocations` launches of its Average duration).
-- reads kernel_names, kernel_rows, ncu_kernels, ncu_metrics
-- param report_id INTEGER = NULL: only this ncu report; all ncu reports when NULL.
-- col report_id INTEGER: workspace report id of the ncu report.
-- col name VARCHAR: kernel name as ncu wrote it.
-- col launches HUGEINT: profiled launches (a summary row counts as its invocations).
-- col ncu_ns DOUBLE: summed ncu duration of those launches (ns).
-- col nsys_report_id INTEGER: the nsys report where the kernel ran longest; NULL when none has it.
-- col nsys_launches BIGINT: its launches in that nsys report.
-- col nsys_ns BIGINT: its summed duration in that nsys report (ns).
-- col report_ncu_ns DOUBLE: ncu_ns summed over the kernels of the ncu report (ns).
WITH ncu AS (
    -- a --print-summary row stands for `invocations` launches of its Average duration
    SELECT k.report_id, k.name, nsa_kernel_key(k.name) AS kernel_key, sum(coalesce(k.invocations, 1)) AS launches,
           coalesce(sum(m.value * coalesce(k.invocations, 1)), 0) AS ncu_ns
    FROM ncu_kernels AS k
    LEFT JOIN ncu_metrics AS m
        ON m.report_id = k.report_id AND m.launch_id = k.launch_id AND m.metric_name = 'gpu__time_duration.sum'
    WHERE ($report_id IS NULL OR k.report_id = $report_id)
    GROUP BY ALL
),
by_name AS (
    SELECT k.report_id, n.name, count(*) AS launches, sum(k.duration_ns) AS total_ns
    FROM kernel_rows AS k JOIN kernel_names AS n USING (report_id, name_id)
    WHERE n.name IS NOT NULL GROUP BY ALL
),
nsys AS (
    SELECT report_id AS nsys_report_id, nsa_kernel_key(name) AS kernel_key,
           sum(launches) AS nsys_launches, sum(total_ns) AS nsys_ns
    FROM by_name GROUP BY ALL
),
best AS (
    SELECT kernel_key, arg_max(nsys_report_id, nsys_ns) AS nsys_report_id,
           max(nsys_ns) AS nsys_ns, arg_max(nsys_launches, nsys_ns) AS nsys_launches
    FROM nsys WHERE kernel_key IN (SELECT kernel_key FROM ncu) GROUP BY ALL
)
SELECT n.report_id, n.name, n.launches, n.ncu_ns, b.nsys_report_id,
       CAST(b.nsys_launches AS BIGINT) AS nsys_launches, CAST(b.nsys_ns AS BIGINT) AS nsys_ns,
       sum(n.ncu_ns) OVER (PARTITION BY n.report_id) AS report_ncu_ns
FROM ncu AS n LEFT JOIN best AS b USING (kernel_key)
