-- GPU busy and idle time per report and device, from interval unions (overlapping work, e.g.
-- concurrent streams, is counted once). span_ns runs from the first start to the last end of
-- any kernel, memcpy, memset or CUDA graph execution on the device; any_busy_ns is the union of
-- all of them; idle_ns = span_ns - any_busy_ns. GPU work is kernels (a graph execution traced as
-- one row counts as kernel time; graph_busy_ns says how much of it there was) or memory
-- operations: memcpys and memsets, as nsys' own GPU MemOps summary groups them (a memset is a
-- fill that the driver runs on a copy engine or as an internal kernel, depending on its size; it
-- is traced as a memset either way). copy_busy_ns is the union of the memory operations and
-- copy_only_ns the part of it during which no kernel ran (any_busy_ns - kernel_busy_ns), i.e.
-- copies not hidden behind compute; so any_busy_ns = kernel_busy_ns + copy_only_ns. Each union
-- is a plain sum over the stored timeline (gpu_timeline: the running maxima of earlier kernel,
-- graph and copy ends), with no sort.
-- With phase 'steady', each report that has steps (table `steps`) is judged from the start of its
-- first steady step (nsa_steady) to its last GPU activity: activities are clipped to that window
-- and span_ns is its length; with 'startup', over the time before it. Reports without steps keep
-- their whole span (column phase says 'run').
-- reads gpu_timeline, steps
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
-- Clipping to the window needs no new pass: a row's part not covered by the rows before it is
-- [greatest(start_ns, prev), end_ns]; these parts are disjoint and make up the union, so the
-- union inside [ws, we] is the sum of those parts clipped to it. The running maxima are those of
-- the unclipped rows: a row ending before ws (or starting after we) adds nothing either way.
-- Rows that the window leaves out entirely (ending before ws, starting after we) are dropped.
x AS (
    SELECT
        t.report_id, t.device_id, t.kind,
        CASE WHEN w.ws IS NOT NULL THEN greatest(t.start_ns, w.ws) ELSE t.start_ns END AS start_ns,
        CASE WHEN w.we IS NOT NULL THEN least(t.end_ns, w.we) ELSE t.end_ns END AS end_ns,
        greatest(t.prev_kernel_end_ns, t.prev_graph_end_ns) AS k_prev,
        t.prev_copy_end_ns AS c_prev,
        t.prev_graph_end_ns AS g_prev,
        t.prev_end_ns AS a_prev,
        w.ws, w.we, w.report_id IS NOT NULL AS windowed
    FROM gpu_timeline AS t
    LEFT JOIN win AS w USING (report_id)
    WHERE ($report_id IS NULL OR t.report_id = $report_id)
        AND (w.ws IS NULL OR t.end_ns >= w.ws)
        AND (w.we IS NULL OR t.start_ns <= w.we)
),
d AS (
    SELECT
        report_id,
        device_id,
        any_value(windowed) AS windowed,
        coalesce(any_value(we), max(end_ns)) - coalesce(any_value(ws), min(start_ns)) AS span_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, k_prev)) FILTER (WHERE kind IN ('kernel', 'graph')), 0) AS kernel_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, c_prev)) FILTER (WHERE kind IN ('memcpy', 'memset')), 0) AS copy_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, a_prev)), 0) AS any_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, g_prev)) FILTER (WHERE kind = 'graph'), 0) AS graph_busy_ns
    FROM x
    GROUP BY ALL
)
SELECT
    report_id,
    device_id,
    CASE WHEN windowed THEN $phase ELSE 'run' END AS phase,
    CAST(span_ns AS BIGINT) AS span_ns,
    CAST(kernel_busy_ns AS BIGINT) AS kernel_busy_ns,
    CAST(copy_busy_ns AS BIGINT) AS copy_busy_ns,
    CAST(any_busy_ns AS BIGINT) AS any_busy_ns,
    CAST(span_ns - any_busy_ns AS BIGINT) AS idle_ns,
    CAST(any_busy_ns - kernel_busy_ns AS BIGINT) AS copy_only_ns,
    CAST(graph_busy_ns AS BIGINT) AS graph_busy_ns
FROM d
ORDER BY report_id, device_id
