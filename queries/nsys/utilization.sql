-- GPU busy and idle time per report and device, from interval unions (overlapping work, e.g.
-- concurrent streams, is counted once). span_ns runs from the first start to the last end of
-- any kernel, memcpy, memset or CUDA graph execution on the device; any_busy_ns is the union of
-- all of them; idle_ns = span_ns - any_busy_ns. GPU work is kernels (a graph execution traced as
-- one row counts as kernel time; graph_busy_ns says how much of it there was) or memory
-- operations: memcpys and memsets, as nsys' own GPU MemOps summary groups them (a memset is a
-- fill that the driver runs on a copy engine or as an internal kernel, depending on its size; it
-- is traced as a memset either way). copy_busy_ns is the union of the memory operations and
-- copy_only_ns the part of it during which no kernel ran (any_busy_ns - kernel_busy_ns), i.e.
-- copies not hidden behind compute; so any_busy_ns = kernel_busy_ns + copy_only_ns. Computed in
-- one sorted pass per device (running maxima of earlier kernel and copy ends), graph executions
-- in a pass of their own.
-- With phase 'steady', each report that has steps (table `steps`) is judged from the start of its
-- first steady step (nsa_steady) to its last GPU activity: activities are clipped to that window
-- and span_ns is its length; with 'startup', over the time before it. Reports without steps keep
-- their whole span (column phase says 'run').
-- reads graph_executions, kernel_names, kernel_rows, memcpy, memset, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param phase VARCHAR = NULL one of ('steady', 'startup'): NULL for the whole span; 'steady' or 'startup' for that part of reports with steps.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col phase VARCHAR: the part of the report measured: 'run' (whole span), 'steady' or 'startup'.
-- col span_ns BIGINT: first start to last end of GPU activity on the device, or the window's length (ns).
-- col kernel_busy_ns BIGINT: time at least one kernel or CUDA graph execution ran (ns).
-- col copy_busy_ns BIGINT: time at least one memcpy or memset ran (ns).
-- col any_busy_ns BIGINT: time any kernel, memcpy, memset or graph execution ran (ns).
-- col idle_ns BIGINT: span_ns - any_busy_ns: nothing ran (ns).
-- col copy_only_ns BIGINT: a memcpy or memset ran and no kernel did: any_busy_ns - kernel_busy_ns (ns).
-- col graph_busy_ns BIGINT: time at least one CUDA graph execution (traced as one row) ran (ns).
WITH win AS (
    SELECT
        report_id,
        CASE WHEN $phase = 'steady' THEN start_ns END AS ws,
        CASE WHEN $phase = 'startup' THEN start_ns END AS we
    FROM nsa_steady($report_id)
    WHERE $phase IN ('steady', 'startup')
),
x AS (
    SELECT
        g.report_id, g.device_id, g.kind,
        CASE WHEN w.ws IS NOT NULL THEN greatest(g.start_ns, w.ws) ELSE g.start_ns END AS start_ns,
        CASE WHEN w.we IS NOT NULL THEN least(g.end_ns, w.we) ELSE g.end_ns END AS end_ns,
        w.ws, w.we, w.report_id IS NOT NULL AS windowed
    FROM nsa_gpu_activity($report_id) AS g
    LEFT JOIN win AS w USING (report_id)
),
a AS (
    -- each class's end, NULL outside the class, computed once before the window
    SELECT
        report_id,
        device_id,
        start_ns,
        end_ns,
        ws,
        we,
        windowed,
        CASE WHEN kind IN ('kernel', 'graph') THEN end_ns END AS k_end,
        CASE WHEN kind IN ('memcpy', 'memset') THEN end_ns END AS c_end
    FROM x
    WHERE end_ns >= start_ns
),
-- Rows are ordered by start only: rows starting together add max(their ends) - start to a union
-- in any order, and a sort on one key is cheaper (1.31M rows: 0.26 s -> 0.20 s on 2 cores). Two
-- running maxima: the latest end of all earlier rows is the larger of the two (every row is a
-- kernel or a copy), and each running maximum costs about as much as the sort.
w AS (
    SELECT
        *,
        max(k_end) OVER prev AS k_prev,
        max(c_end) OVER prev AS c_prev
    FROM a
    WINDOW prev AS (
        PARTITION BY report_id, device_id ORDER BY start_ns
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    )
),
-- graph executions alone (usually none or few), clipped as in x: their own union. Read on their
-- own rather than from x, so that x has one reader and is never materialised.
graphs AS (
    SELECT report_id, device_id, sum(nsa_union_ns(end_ns, start_ns, g_prev)) AS graph_busy_ns
    FROM (
        SELECT *,
               max(end_ns) OVER (
                   PARTITION BY report_id, device_id ORDER BY start_ns
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
               ) AS g_prev
        FROM (
            SELECT
                g.report_id, g.device_id,
                CASE WHEN w.ws IS NOT NULL THEN greatest(g.start_ns, w.ws) ELSE g.start_ns END AS start_ns,
                CASE WHEN w.we IS NOT NULL THEN least(g.end_ns, w.we) ELSE g.end_ns END AS end_ns
            FROM nsa_gpu_activity($report_id) AS g
            LEFT JOIN win AS w USING (report_id)
            WHERE g.kind = 'graph'
        )
        WHERE end_ns >= start_ns
    )
    GROUP BY ALL
),
d AS (
    SELECT
        report_id,
        device_id,
        any_value(windowed) AS windowed,
        coalesce(any_value(we), max(end_ns)) - coalesce(any_value(ws), min(start_ns)) AS span_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, k_prev)) FILTER (WHERE k_end IS NOT NULL), 0) AS kernel_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, c_prev)) FILTER (WHERE c_end IS NOT NULL), 0) AS copy_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, greatest(k_prev, c_prev))), 0) AS any_busy_ns
    FROM w
    GROUP BY ALL
)
SELECT
    d.report_id,
    d.device_id,
    CASE WHEN windowed THEN $phase ELSE 'run' END AS phase,
    CAST(span_ns AS BIGINT) AS span_ns,
    CAST(kernel_busy_ns AS BIGINT) AS kernel_busy_ns,
    CAST(copy_busy_ns AS BIGINT) AS copy_busy_ns,
    CAST(any_busy_ns AS BIGINT) AS any_busy_ns,
    CAST(span_ns - any_busy_ns AS BIGINT) AS idle_ns,
    CAST(any_busy_ns - kernel_busy_ns AS BIGINT) AS copy_only_ns,
    CAST(coalesce(g.graph_busy_ns, 0) AS BIGINT) AS graph_busy_ns
FROM d
LEFT JOIN graphs AS g ON g.report_id = d.report_id AND g.device_id IS NOT DISTINCT FROM d.device_id
ORDER BY d.report_id, d.device_id
