-- The phases of each report's timeline: 'startup' from its first GPU activity to the start of its
-- first steady step (warm-up steps, module loading, first allocations, autotuning, graph capture),
-- then 'steady' to its last GPU activity; a report without steps (table `steps`) is one 'run'.
-- Timeline rules judge the steady phase; `utilization(phase := 'steady')` and the `phase` column
-- of `gaps` use the same boundary (nsa_steady).
-- reads graph_executions, kernel_names, kernel_rows, memcpy, memset, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col phase VARCHAR: 'startup', 'steady' or 'run' (no steps found).
-- col start_ns BIGINT: the phase starts (ns).
-- col end_ns BIGINT: the phase ends (ns).
-- col duration_ns BIGINT: end_ns - start_ns (ns).
-- col steps BIGINT: steps that start in the phase (0 for 'run').
-- col first_step INTEGER: 0-based position of the phase's first step, NULL without steps.
-- col source VARCHAR: where the steps come from: 'nvtx', 'graphs' or 'kernels' (schema `steps.source`); NULL for 'run'.
WITH span AS (
    SELECT report_id, min(start_ns) AS first_ns, max(end_ns) AS last_ns
    FROM nsa_gpu_activity($report_id)
    GROUP BY report_id
),
w AS (SELECT * FROM nsa_steady($report_id)),
counted AS (
    SELECT
        s.report_id,
        count(*) FILTER (WHERE s.start_ns < w.start_ns) AS startup_steps,
        count(*) FILTER (WHERE s.start_ns >= w.start_ns) AS steady_steps,
        min(s.step) FILTER (WHERE s.start_ns < w.start_ns) AS startup_first
    FROM steps AS s
    JOIN w USING (report_id)
    WHERE ($report_id IS NULL OR s.report_id = $report_id)
    GROUP BY s.report_id
),
phases AS (
    SELECT sp.report_id, 'startup' AS phase, 1 AS n, sp.first_ns AS start_ns, w.start_ns AS end_ns,
           c.startup_steps AS steps, c.startup_first AS first_step, w.source
    FROM span AS sp JOIN w USING (report_id) JOIN counted AS c USING (report_id)
    WHERE sp.first_ns < w.start_ns
    UNION ALL
    SELECT sp.report_id, 'steady', 2, w.start_ns, greatest(sp.last_ns, w.end_ns), c.steady_steps, w.first_step, w.source
    FROM span AS sp JOIN w USING (report_id) JOIN counted AS c USING (report_id)
    UNION ALL
    SELECT sp.report_id, 'run', 3, sp.first_ns, sp.last_ns, 0, NULL, NULL
    FROM span AS sp ANTI JOIN w USING (report_id)
)
SELECT
    report_id,
    phase,
    CAST(start_ns AS BIGINT) AS start_ns,
    CAST(end_ns AS BIGINT) AS end_ns,
    CAST(end_ns - start_ns AS BIGINT) AS duration_ns,
    CAST(steps AS BIGINT) AS steps,
    CAST(first_step AS INTEGER) AS first_step,
    source
FROM phases
ORDER BY report_id, n
