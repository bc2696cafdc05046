-- NVTX ranges per report, domain and name: how many, how long (closed ranges only; ranges
-- never closed are counted in open_ranges and left out of every other column), and the GPU
-- time of the kernels launched inside them. A kernel belongs to a range when the API call that
-- launched it (cuda_api row with the kernel's report_id, pid and correlation_id) was made on the
-- range's thread (report_id, pid, tid) at a start time inside [range start, range end]; nested
-- ranges each count the kernel. Computed without a range join: launches are summed per thread
-- into a running total ordered by start time, and each range reads that total at its end and
-- just before its start (two ASOF joins), so 5M ranges x 1.7M calls stays linear. The ASOF
-- joins carry a 64-bit hash of (domain, name) instead of the strings (sorting 5M rows with their
-- names costs several times more); groups whose hash collides with another group's are summed
-- again exactly, from the ranges of those groups only.
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
WITH launches AS (
    SELECT c.report_id, c.pid, c.tid, c.start_ns, count(*) AS kernels, sum(k.duration_ns) AS kernel_ns
    FROM kernel_rows AS k
    JOIN cuda_api AS c ON c.report_id = k.report_id AND c.pid = k.pid AND c.correlation_id = k.correlation_id
    WHERE ($report_id IS NULL OR k.report_id = $report_id) AND ($report_id IS NULL OR c.report_id = $report_id)
    GROUP BY ALL
),
-- the threads that launched kernels, numbered: the ASOF joins match on this one key (sorting
-- 5M ranges on one key instead of three is ~40% faster), and ranges of other threads skip them
threads AS (
    SELECT report_id, pid, tid, row_number() OVER () AS thread_key
    FROM (SELECT DISTINCT report_id, pid, tid FROM launches)
),
running AS (
    SELECT
        t.thread_key, l.start_ns,
        sum(l.kernels) OVER w AS cum_kernels,
        sum(l.kernel_ns) OVER w AS cum_kernel_ns
    FROM launches AS l
    JOIN threads AS t ON t.report_id = l.report_id AND t.pid = l.pid AND t.tid = l.tid
    WINDOW w AS (PARTITION BY t.thread_key ORDER BY l.start_ns ROWS UNBOUNDED PRECEDING)
),
r AS NOT MATERIALIZED (
    SELECT report_id, pid, tid, domain, name, start_ns, end_ns, duration_ns
    FROM nvtx_ranges
    WHERE ($report_id IS NULL OR report_id = $report_id)
),
stats AS (
    SELECT
        report_id, domain, name,
        hash(domain, name) AS h,
        count(*) AS ranges,
        sum(duration_ns) AS total_ns,
        avg(duration_ns) AS avg_ns,
        median(duration_ns) AS median_ns,
        min(duration_ns) AS min_ns,
        max(duration_ns) AS max_ns
    FROM r
    WHERE end_ns IS NOT NULL
    GROUP BY report_id, domain, name
),
-- (report, hash) pairs shared by several groups: almost always none
collided AS (
    SELECT report_id, h FROM stats GROUP BY ALL HAVING count(*) > 1
),
rh AS NOT MATERIALIZED (
    SELECT r.report_id, t.thread_key, r.start_ns, r.end_ns, hash(r.domain, r.name) AS h
    FROM r
    JOIN threads AS t ON t.report_id = r.report_id AND t.pid = r.pid AND t.tid = r.tid
    WHERE r.end_ns IS NOT NULL
),
at_end AS (
    SELECT rh.report_id, rh.h, sum(e.cum_kernels) AS kernels, sum(e.cum_kernel_ns) AS kernel_ns
    FROM rh
    ASOF JOIN running AS e ON e.thread_key = rh.thread_key AND rh.end_ns >= e.start_ns
    GROUP BY ALL
),
before_start AS (
    SELECT rh.report_id, rh.h, sum(b.cum_kernels) AS kernels, sum(b.cum_kernel_ns) AS kernel_ns
    FROM rh
    ASOF JOIN running AS b ON b.thread_key = rh.thread_key AND rh.start_ns > b.start_ns
    GROUP BY ALL
),
-- the exact per-name sums, for the ranges of collided groups only
exact AS (
    SELECT
        r.report_id, r.domain, r.name,
        sum(coalesce(e.cum_kernels, 0) - coalesce(b.cum_kernels, 0)) AS kernels,
        sum(coalesce(e.cum_kernel_ns, 0) - coalesce(b.cum_kernel_ns, 0)) AS kernel_ns
    FROM (
        SELECT r.*, t.thread_key
        FROM r
        LEFT JOIN threads AS t ON t.report_id = r.report_id AND t.pid = r.pid AND t.tid = r.tid
        SEMI JOIN collided AS x ON x.report_id = r.report_id AND x.h = hash(r.domain, r.name)
        WHERE r.end_ns IS NOT NULL
    ) AS r
    ASOF LEFT JOIN running AS e ON e.thread_key = r.thread_key AND r.end_ns >= e.start_ns
    ASOF LEFT JOIN running AS b ON b.thread_key = r.thread_key AND r.start_ns > b.start_ns
    GROUP BY ALL
),
s AS (
    SELECT
        st.report_id, st.domain, st.name, st.ranges, st.total_ns, st.avg_ns, st.median_ns, st.min_ns, st.max_ns,
        CASE
            WHEN x.h IS NOT NULL THEN ex.kernels
            ELSE coalesce(e.kernels, 0) - coalesce(b.kernels, 0)
        END AS kernels,
        CASE
            WHEN x.h IS NOT NULL THEN ex.kernel_ns
            ELSE coalesce(e.kernel_ns, 0) - coalesce(b.kernel_ns, 0)
        END AS kernel_ns
    FROM stats AS st
    LEFT JOIN collided AS x ON x.report_id = st.report_id AND x.h = st.h
    LEFT JOIN at_end AS e ON e.report_id = st.report_id AND e.h = st.h
    LEFT JOIN before_start AS b ON b.report_id = st.report_id AND b.h = st.h
    LEFT JOIN exact AS ex
        ON ex.report_id = st.report_id AND ex.domain IS NOT DISTINCT FROM st.domain
        AND ex.name IS NOT DISTINCT FROM st.name
),
open AS (
    SELECT report_id, domain, name, count(*) AS open_ranges
    FROM r
    WHERE end_ns IS NULL
    GROUP BY ALL
)
SELECT
    report_id,
    domain,
    name,
    CAST(coalesce(s.ranges, 0) AS BIGINT) AS ranges,
    CAST(coalesce(o.open_ranges, 0) AS BIGINT) AS open_ranges,
    CAST(s.total_ns AS BIGINT) AS total_ns,
    CAST(s.avg_ns AS DOUBLE) AS avg_ns,
    CAST(s.median_ns AS DOUBLE) AS median_ns,
    CAST(s.min_ns AS BIGINT) AS min_ns,
    CAST(s.max_ns AS BIGINT) AS max_ns,
    CAST(coalesce(s.kernels, 0) AS BIGINT) AS kernels,
    CAST(coalesce(s.kernel_ns, 0) AS BIGINT) AS kernel_ns
FROM s
FULL JOIN open AS o USING (report_id, domain, name)
ORDER BY report_id, total_ns DESC NULLS LAST, domain, name
