-- NVTX ranges per report, domain and name: how many, how long (closed ranges only; ranges
-- never closed are counted in open_ranges and left out of every other column), and the GPU
-- time of the kernels launched inside them. A kernel belongs to a range when the API call that
-- launched it (cuda_api row with the kernel's report_id, pid and correlation_id) was made on the
-- range's thread (global_tid) at a start time inside [range start, range end]; nested ranges
-- each count the kernel. That projection is computed once per range, the first time a report's
-- NVTX ranges are read (nvtx_ranges.kernels / kernel_ns, by running totals and two ASOF joins,
-- linear in ranges + calls), so this query is one aggregation.
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- col report_id INTEGER: workspace report id.
-- col domain VARCHAR: NVTX domain (NULL for the default domain).
-- col name VARCHAR: range name.
-- col ranges BIGINT: closed ranges.
-- col open_ranges BIGINT: ranges with no end (not closed before the capture ended).
-- col total_ns BIGINT: summed range duration (ns).
-- col avg_ns DOUBLE: mean range duration (ns).
-- col median_ns DOUBLE: median range duration (ns).
-- col min_ns BIGINT: shortest range (ns).
-- col max_ns BIGINT: longest range (ns).
-- col kernels BIGINT: kernels launched inside the ranges.
-- col kernel_ns BIGINT: summed GPU time of those kernels (ns).
SELECT
    report_id,
    domain,
    name,
    CAST(count(end_ns) AS BIGINT) AS ranges,
    CAST(count(*) - count(end_ns) AS BIGINT) AS open_ranges,
    CAST(sum(duration_ns) AS BIGINT) AS total_ns,
    CAST(avg(duration_ns) AS DOUBLE) AS avg_ns,
    CAST(median(duration_ns) AS DOUBLE) AS median_ns,
    CAST(min(duration_ns) AS BIGINT) AS min_ns,
    CAST(max(duration_ns) AS BIGINT) AS max_ns,
    CAST(coalesce(sum(kernels), 0) AS BIGINT) AS kernels,
    CAST(coalesce(sum(kernel_ns), 0) AS BIGINT) AS kernel_ns
FROM nvtx_ranges
WHERE ($report_id IS NULL OR report_id = $report_id)
GROUP BY report_id, domain, name
ORDER BY report_id, total_ns DESC NULLS LAST, domain, name
