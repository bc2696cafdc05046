-- Memory copies per report, device, copy kind and source/destination memory: how many, how
-- much, how long the device was copying (union of the copies, overlaps once) and at what rate.
-- pageable flags copies from or to pageable host memory: the driver stages them through a
-- pinned buffer (slow, and the host thread blocks even for cudaMemcpyAsync). sync_copies counts
-- copies issued by a blocking call (cudaMemcpy, cudaMemcpy2D, cuMemcpyHtoD... not *Async),
-- found through the launching cuda_api row (same report_id, pid, correlation_id). With phase
-- 'steady' ('startup'), reports that have steps count only the copies starting at or after (before)
-- their first steady step (nsa_steady), and span_pct is against that part of the device's span;
-- reports without steps keep all their copies.
-- reads cuda_api, graph_executions, kernel_rows, memcpy, memset, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param phase VARCHAR = NULL one of ('steady', 'startup'): NULL for the whole span; 'steady' or 'startup' for that part of reports with steps.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col direction VARCHAR: HtoD, DtoH, DtoD, PtoP...
-- col src_memory VARCHAR: source memory: pageable, pinned, device, managed...
-- col dst_memory VARCHAR: destination memory.
-- col copies BIGINT: number of copies.
-- col bytes BIGINT: bytes copied (byte).
-- col total_ns BIGINT: summed copy durations (ns).
-- col busy_ns BIGINT: time at least one of these copies ran on the device (ns).
-- col span_pct DOUBLE: busy_ns as a share of the device's span of GPU activity (%).
-- col gb_per_s DOUBLE: achieved bandwidth, bytes / total_ns (GB/s, 1e9 byte/s).
-- col pageable BOOLEAN: source or destination is pageable host memory.
-- col sync_copies BIGINT: copies issued by a blocking (non-Async) memcpy call.
-- col launch_apis VARCHAR: distinct API calls that issued the copies, comma-separated.
WITH win AS (
    SELECT report_id, start_ns AS steady_ns FROM nsa_steady($report_id) WHERE $phase IN ('steady', 'startup')
),
m AS (
    SELECT c.report_id, c.device_id, c.pid, c.correlation_id, c.direction, c.src_memory, c.dst_memory, c.start_ns,
           c.end_ns, c.duration_ns, c.bytes
    FROM memcpy AS c
    LEFT JOIN win AS w USING (report_id)
    WHERE ($report_id IS NULL OR c.report_id = $report_id) AND c.start_ns IS NOT NULL AND c.end_ns >= c.start_ns
        AND (w.steady_ns IS NULL OR (c.start_ns >= w.steady_ns) = ($phase = 'steady'))
),
-- one integer per (report, device, copy kind, memory kinds): the union window below partitions
-- on it instead of on three strings (string sort keys cost several times more)
grp AS (
    SELECT CAST(row_number() OVER () AS INTEGER) AS gid, *
    FROM (SELECT DISTINCT report_id, device_id, direction, src_memory, dst_memory FROM m)
),
mg AS (
    SELECT g.gid, m.report_id, m.pid, m.correlation_id, m.start_ns, m.end_ns, m.duration_ns, m.bytes
    FROM m
    JOIN grp AS g
        ON g.report_id = m.report_id AND g.device_id IS NOT DISTINCT FROM m.device_id
        AND g.direction IS NOT DISTINCT FROM m.direction AND g.src_memory IS NOT DISTINCT FROM m.src_memory
        AND g.dst_memory IS NOT DISTINCT FROM m.dst_memory
),
-- each copy's share of the union (the part not covered by earlier copies of its group): the
-- running max of the earlier copies' ends is the previous copy's end (lag) in a group whose
-- ends never fall in (start_ns, end_ns) order, as copies that run one after the other; only
-- the other groups take the running max (a segment tree: several times lag's cost)
ml AS (
    SELECT *, lag(end_ns) OVER (PARTITION BY gid ORDER BY start_ns, end_ns) AS prev_end
    FROM mg
),
nested AS (SELECT DISTINCT gid FROM ml WHERE end_ns < prev_end),
mw AS (
    SELECT gid, report_id, pid, correlation_id, duration_ns, bytes, nsa_union_ns(end_ns, start_ns, prev_end) AS busy_ns
    FROM ml ANTI JOIN nested USING (gid)
    UNION ALL
    SELECT gid, report_id, pid, correlation_id, duration_ns, bytes, nsa_union_ns(end_ns, start_ns, prev_end) AS busy_ns
    FROM (
        SELECT
            gid, report_id, pid, correlation_id, start_ns, end_ns, duration_ns, bytes,
            max(end_ns) OVER (
                PARTITION BY gid ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            ) AS prev_end
        FROM ml SEMI JOIN nested USING (gid)
    )
),
-- copies per group and launching API (a few rows), so the API name tests run once per name; a
-- copy matched by several calls counts once per call, as a plain join of the copies would
per_api AS (
    SELECT
        mw.gid, c.name AS api, count(*) AS copies, sum(mw.bytes) AS bytes, sum(mw.duration_ns) AS total_ns,
        sum(mw.busy_ns) AS busy_ns
    FROM mw
    -- the copies' hash table is built and the calls probe it (a right join: cuda_api is the larger side)
    LEFT JOIN (SELECT report_id, pid, correlation_id, name FROM cuda_api WHERE $report_id IS NULL OR report_id = $report_id) AS c
        ON c.report_id = mw.report_id AND c.pid = mw.pid AND c.correlation_id = mw.correlation_id
    GROUP BY ALL
),
span AS (
    -- each device's first start and last end: those of nsa_gpu_activity's rows, per table
    SELECT a.report_id, a.device_id,
           CASE
               WHEN w.steady_ns IS NULL THEN max(a.end_ns) - min(a.start_ns)
               WHEN $phase = 'steady' THEN max(a.end_ns) - any_value(w.steady_ns)
               ELSE any_value(w.steady_ns) - min(a.start_ns)
           END AS span_ns
    FROM (
        SELECT report_id, device_id, min(start_ns) AS start_ns, max(end_ns) AS end_ns
        FROM kernel_rows
        WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
        GROUP BY ALL
        UNION ALL
        SELECT report_id, device_id, min(start_ns), max(end_ns)
        FROM memcpy
        WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
        GROUP BY ALL
        UNION ALL
        SELECT report_id, device_id, min(start_ns), max(end_ns)
        FROM memset
        WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
        GROUP BY ALL
        UNION ALL
        SELECT report_id, device_id, min(start_ns), max(end_ns)
        FROM graph_executions
        WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
        GROUP BY ALL
    ) AS a
    LEFT JOIN win AS w USING (report_id)
    GROUP BY a.report_id, a.device_id, w.steady_ns
),
s AS (
    SELECT
        g.report_id,
        g.device_id,
        g.direction,
        g.src_memory,
        g.dst_memory,
        sum(a.copies) AS copies,
        sum(a.bytes) AS bytes,
        sum(a.total_ns) AS total_ns,
        sum(a.busy_ns) AS busy_ns,
        coalesce(sum(a.copies) FILTER (WHERE nsa_blocking_call(a.api) = 'memcpy'), 0) AS sync_copies,
        string_agg(DISTINCT a.api, ',' ORDER BY a.api) AS launch_apis
    FROM per_api AS a
    JOIN grp AS g USING (gid)
    GROUP BY g.gid, g.report_id, g.device_id, g.direction, g.src_memory, g.dst_memory
)
SELECT
    s.report_id,
    s.device_id,
    s.direction,
    s.src_memory,
    s.dst_memory,
    CAST(s.copies AS BIGINT) AS copies,
    CAST(s.bytes AS BIGINT) AS bytes,
    CAST(s.total_ns AS BIGINT) AS total_ns,
    CAST(s.busy_ns AS BIGINT) AS busy_ns,
    CAST(CASE WHEN sp.span_ns > 0 THEN 100.0 * s.busy_ns / sp.span_ns END AS DOUBLE) AS span_pct,
    CAST(CASE WHEN s.total_ns > 0 THEN s.bytes / s.total_ns END AS DOUBLE) AS gb_per_s,
    coalesce(s.src_memory = 'pageable' OR s.dst_memory = 'pageable', false) AS pageable,
    CAST(s.sync_copies AS BIGINT) AS sync_copies,
    s.launch_apis
FROM s
LEFT JOIN span AS sp ON sp.report_id = s.report_id AND sp.device_id IS NOT DISTINCT FROM s.device_id
ORDER BY s.report_id, s.device_id, s.busy_ns DESC, s.direction, s.src_memory, s.dst_memory
