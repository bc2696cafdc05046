-- Timeline time lost to each warp-stall reason, per kernel: for kernels that appear both in an
-- nsys report (every launch timed) and in an ncu report (a few launches dissected), the kernel's
-- total nsys GPU time split by its ncu stall-reason shares, e.g. "38 ms of this run were warps
-- waiting on long scoreboard in kernel X". The ncu share of a kernel is the duration-weighted
-- mean over its profiled launches (plain mean where ncu lacks durations). A `--print-summary`
-- row stands for ncu_kernels.invocations launches with the Average duration and stall values:
-- it weighs invocations times that duration and counts as that many launches; per-launch rows
-- (invocations NULL) count once.
-- Kernels are matched by nsa_kernel_key(name) (see _macros.sql), because the tools spell names
-- differently: nsys `void at::native::k<(int)4, std::array<char *, (unsigned long)2>>(int)`
-- is ncu `void k<4, array<char *, 2>>(int)`. The key drops every `ns::` qualifier (namespaces,
-- `std::`, `(anonymous namespace)::`, `<unnamed>::`, ncu's `unnamed>::`), C-style casts before
-- literals (`(int)`, `(unsigned long)`, `(bool)`), spells true/false as 1/0, drops a leading
-- `void` and all whitespace. Kernels found in only one of the two reports are left out.
-- Every (nsys report, ncu report) pair that shares a kernel is reported unless narrowed.
-- reads kernel_names, kernel_rows, ncu_kernels, ncu_metrics
-- param nsys_report_id INTEGER = NULL: only this nsys report; all when NULL.
-- param ncu_report_id INTEGER = NULL: only this ncu report; all when NULL.
-- col nsys_report_id INTEGER: workspace report id of the nsys report.
-- col ncu_report_id INTEGER: workspace report id of the ncu report.
-- col kernel_key VARCHAR: the normalised name both tools' names reduce to.
-- col name VARCHAR: kernel name as nsys wrote it (the first one, when several share the key).
-- col nsys_launches BIGINT: launches of the kernel in the nsys report.
-- col nsys_total_ns BIGINT: GPU time of all those launches, from nsys (ns).
-- col ncu_launches BIGINT: launches of the kernel that ncu profiled (summary rows count their invocations).
-- col reason VARCHAR: stall reason (long_scoreboard, barrier, ...).
-- col rank BIGINT: 1 for the reason costing the most time in this kernel.
-- col share_pct DOUBLE: the reason's share of the kernel's stall cycles, from ncu (%).
-- col stall_ns BIGINT: nsys_total_ns times share_pct: timeline time attributed to the reason (ns).
WITH nsys_names AS (
    -- Aggregate by name first: the key's regexes then run once per distinct name, not per launch.
    SELECT c.report_id, n.name, c.launches, c.total_ns
    FROM (
        SELECT report_id, name_id, count(*) AS launches, sum(duration_ns) AS total_ns
        FROM kernel_rows
        WHERE ($nsys_report_id IS NULL OR report_id = $nsys_report_id)
        GROUP BY ALL
    ) AS c
    JOIN kernel_names AS n USING (report_id, name_id)
    WHERE n.name IS NOT NULL
),
nsys AS (
    SELECT
        report_id AS nsys_report_id,
        nsa_kernel_key(name) AS kernel_key,
        min(name) AS name,
        CAST(sum(launches) AS BIGINT) AS nsys_launches,
        sum(total_ns) AS nsys_total_ns
    FROM nsys_names
    GROUP BY ALL
),
ncu_launch AS (
    SELECT
        k.report_id AS ncu_report_id,
        k.launch_id,
        nsa_kernel_key(k.name) AS kernel_key,
        coalesce(k.invocations, 1) AS launches,
        coalesce(max(m.value), 1) AS duration
    FROM ncu_kernels AS k
    LEFT JOIN ncu_metrics AS m
        ON m.report_id = k.report_id
        AND m.launch_id = k.launch_id
        AND m.metric_name = 'gpu__time_duration.sum'
    WHERE ($ncu_report_id IS NULL OR k.report_id = $ncu_report_id)
    GROUP BY ALL
),
ncu AS (
    SELECT
        l.ncu_report_id,
        l.kernel_key,
        s.reason,
        -- one row per launch and reason (nsa_ncu_stall_reasons), so this counts launches
        CAST(sum(l.launches) AS BIGINT) AS ncu_launches,
        -- weight: the ncu time of the launch(es), Average duration times invocations for summaries
        -- (summed in launch order: the same float sum on every run)
        sum(s.share_pct * l.duration * l.launches ORDER BY l.launch_id)
            / sum(l.duration * l.launches ORDER BY l.launch_id) AS share_pct
    FROM ncu_launch AS l
    JOIN nsa_ncu_stall_reasons($ncu_report_id) AS s
        ON s.report_id = l.ncu_report_id AND s.launch_id = l.launch_id
    WHERE s.share_pct IS NOT NULL
    GROUP BY ALL
)
SELECT
    n.nsys_report_id,
    c.ncu_report_id,
    n.kernel_key,
    n.name,
    n.nsys_launches,
    CAST(n.nsys_total_ns AS BIGINT) AS nsys_total_ns,
    c.ncu_launches,
    c.reason,
    row_number() OVER (
        PARTITION BY n.nsys_report_id, c.ncu_report_id, n.kernel_key ORDER BY c.share_pct DESC, c.reason
    ) AS rank,
    c.share_pct,
    CAST(round(n.nsys_total_ns * c.share_pct / 100.0) AS BIGINT) AS stall_ns
FROM nsys AS n
JOIN ncu AS c USING (kernel_key)
ORDER BY stall_ns DESC, n.nsys_report_id, c.ncu_report_id, n.kernel_key, rank
