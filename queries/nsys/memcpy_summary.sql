-- Memory copies per report, device, copy kind and source/destination memory: how many, how
-- much, how long the device was copying (union of the copies, overlaps once) and at what rate.
-- pageable flags copies from or to pageable host memory: the driver stages them through a
-- pinned buffer (slow, and the host thread blocks even for cudaMemcpyAsync). sync_copies counts
-- copies issued by a blocking call (cudaMemcpy, cudaMemcpy2D, cuMemcpyHtoD... not *Async),
-- found through the launching cuda_api row (same report_id, pid, correlation_id).
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col copy_kind VARCHAR: HtoD, DtoH, DtoD, PtoP...
-- col src_kind VARCHAR: source memory: pageable, pinned, device, managed...
-- col dst_kind VARCHAR: destination memory.
-- col copies BIGINT: number of copies.
-- col bytes BIGINT: bytes copied (byte).
-- col total_ns BIGINT: summed copy durations (ns).
-- col busy_ns BIGINT: time at least one of these copies ran on the device (ns).
-- col span_pct DOUBLE: busy_ns as a share of the device's span of GPU activity (%).
-- col gb_per_s DOUBLE: achieved bandwidth, bytes / total_ns (GB/s, 1e9 byte/s).
-- col pageable BOOLEAN: source or destination is pageable host memory.
-- col sync_copies BIGINT: copies issued by a blocking (non-Async) memcpy call.
-- col launch_apis VARCHAR: distinct API calls that issued the copies, comma-separated.
WITH m AS (
    SELECT
        m.*,
        max(m.end_ns) OVER (
            PARTITION BY m.report_id, m.device_id, m.copy_kind, m.src_kind, m.dst_kind
            ORDER BY m.start_ns, m.end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev_end
    FROM memcpy AS m
    WHERE ($report_id IS NULL OR m.report_id = $report_id) AND m.start_ns IS NOT NULL AND m.end_ns >= m.start_ns
),
ml AS (
    SELECT m.*, c.name AS api
    FROM m
    LEFT JOIN cuda_api AS c
        ON c.report_id = m.report_id AND c.pid = m.pid AND c.correlation_id = m.correlation_id
        AND ($report_id IS NULL OR c.report_id = $report_id)
),
span AS (
    SELECT report_id, device_id, max(end_ns) - min(start_ns) AS span_ns
    FROM nsa_gpu_activity($report_id)
    GROUP BY ALL
),
s AS (
    SELECT
        report_id,
        device_id,
        copy_kind,
        src_kind,
        dst_kind,
        count(*) AS copies,
        sum(bytes) AS bytes,
        sum(duration_ns) AS total_ns,
        sum(nsa_union_ns(end_ns, start_ns, prev_end)) AS busy_ns,
        count(*) FILTER (WHERE nsa_sync_kind(api) = 'memcpy') AS sync_copies,
        string_agg(DISTINCT api, ',' ORDER BY api) AS launch_apis
    FROM ml
    GROUP BY ALL
)
SELECT
    s.report_id,
    s.device_id,
    s.copy_kind,
    s.src_kind,
    s.dst_kind,
    CAST(s.copies AS BIGINT) AS copies,
    CAST(s.bytes AS BIGINT) AS bytes,
    CAST(s.total_ns AS BIGINT) AS total_ns,
    CAST(s.busy_ns AS BIGINT) AS busy_ns,
    CAST(CASE WHEN sp.span_ns > 0 THEN 100.0 * s.busy_ns / sp.span_ns END AS DOUBLE) AS span_pct,
    CAST(CASE WHEN s.total_ns > 0 THEN s.bytes / s.total_ns END AS DOUBLE) AS gb_per_s,
    coalesce(s.src_kind = 'pageable' OR s.dst_kind = 'pageable', false) AS pageable,
    CAST(s.sync_copies AS BIGINT) AS sync_copies,
    s.launch_apis
FROM s
LEFT JOIN span AS sp ON sp.report_id = s.report_id AND sp.device_id IS NOT DISTINCT FROM s.device_id
ORDER BY s.report_id, s.device_id, s.busy_ns DESC, s.copy_kind, s.src_kind, s.dst_kind
