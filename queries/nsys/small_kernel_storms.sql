-- Tiny-kernel storms per report and device: stretches of at least min_kernels consecutive
-- kernels (in device start order, all streams) that are each shorter than max_kernel_ns, where
-- each starts at most max_gap_ns after the previous kernel on the device ended, and the GPU was
-- busy at most max_busy_pct of the window: the GPU mostly waits for the host to launch the next
-- tiny kernel. A larger kernel or a longer pause ends a storm. busy_ns is the union of the
-- storm's kernels (overlaps once); memcpy/memset are not considered, except by idle_ns.
-- reads gpu_timeline, kernel_names
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param max_kernel_ns BIGINT = 10000: kernels shorter than this are tiny (ns).
-- param max_gap_ns BIGINT = 50000: longest pause between kernels inside a storm (ns).
-- param min_kernels BIGINT = 100: fewest kernels a storm has.
-- param max_busy_pct DOUBLE = 50.0: storms busier than this share of their window are dropped (%).
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col start_ns BIGINT: first kernel of the storm starts (ns).
-- col end_ns BIGINT: last kernel of the storm ends (ns).
-- col window_ns BIGINT: end_ns - start_ns (ns).
-- col kernels BIGINT: kernels in the storm.
-- col busy_ns BIGINT: time at least one storm kernel ran (ns).
-- col busy_pct DOUBLE: busy_ns as a share of window_ns (%).
-- col avg_kernel_ns DOUBLE: mean kernel duration (ns).
-- col launches_per_s DOUBLE: kernels per second of window (1/s).
-- col top_name VARCHAR: most frequent kernel name in the storm.
-- col idle_ns BIGINT: time nothing ran on the device (no kernel, memcpy or memset) in pauses of at most max_gap_ns inside the window: what fusing the storm or a CUDA graph could win (ns).
-- The device order is gpu_timeline's seq: (start_ns, end_ns), rows tied on both in the order its
-- running maxima (prev_kernel_end_ns, prev_end_ns) count them. A kernel that is not tiny, or that
-- starts more than max_gap_ns after the kernels before it ended, is a break: it ends the storm
-- before it, and a tiny one opens the next. A storm is the kernels from one break (itself only if
-- tiny) up to the next break, so the breaks alone, in seq order, bound every storm; only the
-- stretches of at least min_kernels rows (kernels or other activities) can hold a storm. Cut into
-- seq buckets of that width, such a stretch shares a bucket with at most one other: each kernel is
-- found in its stretch by a hash join, probing one bucket.
WITH breaks AS (
    SELECT report_id, device_id, seq, coalesce(duration_ns < $max_kernel_ns, false) AS tiny
    FROM gpu_timeline
    WHERE ($report_id IS NULL OR report_id = $report_id) AND kind = 'kernel'
        -- not tiny, or gapped; plain comparisons (no coalesce) that the scan filters by
        AND (duration_ns >= $max_kernel_ns OR duration_ns IS NULL OR $max_kernel_ns IS NULL
            OR start_ns - prev_kernel_end_ns > $max_gap_ns)
    UNION ALL
    -- a break (not tiny) before each device's first row and one after its last
    SELECT report_id, device_id, unnest([0, max(seq) + 1]), false
    FROM gpu_timeline
    WHERE ($report_id IS NULL OR report_id = $report_id)
    GROUP BY ALL
),
stretches AS (
    SELECT report_id, coalesce(device_id, -1) AS dev, device_id, seq AS storm, lo, hi
    FROM (
        SELECT *, seq + CASE WHEN tiny THEN 0 ELSE 1 END AS lo,
               lead(seq) OVER (PARTITION BY report_id, device_id ORDER BY seq) - 1 AS hi
        FROM breaks
    )
    WHERE hi - lo + 1 >= greatest($min_kernels, 1)
),
spans AS (
    SELECT report_id, dev, device_id, storm, lo, hi,
           unnest(range(lo // greatest($min_kernels, 1), hi // greatest($min_kernels, 1) + 1)) AS bucket
    FROM stretches
),
-- each candidate storm's kernels by name id: counts, sums, and what its first kernel (lowest seq)
-- says; a gap is the idle pause before a row, of at most max_gap_ns
by_id AS (
    SELECT
        s.report_id, s.device_id, s.storm, t.name_id,
        count(*) AS kernels,
        min(t.start_ns) AS start_ns,
        arg_min(t.end_ns, t.seq) AS first_end_ns,
        max(t.end_ns) AS end_ns,
        sum(t.duration_ns) AS duration_ns,
        sum(nsa_union_ns(t.end_ns, t.start_ns, t.prev_kernel_end_ns)) AS covered_ns,
        min(t.seq) AS first_seq,
        arg_min(t.duration_ns - nsa_union_ns(t.end_ns, t.start_ns, t.prev_kernel_end_ns), t.seq) AS first_extra_ns,
        sum(CASE WHEN t.start_ns > t.prev_end_ns AND t.start_ns - t.prev_end_ns <= $max_gap_ns THEN t.start_ns - t.prev_end_ns ELSE 0 END) AS gap_ns,
        arg_min(CASE WHEN t.start_ns > t.prev_end_ns AND t.start_ns - t.prev_end_ns <= $max_gap_ns THEN t.start_ns - t.prev_end_ns ELSE 0 END, t.seq) AS first_gap_ns
    FROM gpu_timeline AS t
    JOIN spans AS s ON s.report_id = t.report_id AND s.dev = coalesce(t.device_id, -1) AND s.bucket = t.seq // greatest($min_kernels, 1)
    WHERE ($report_id IS NULL OR t.report_id = $report_id) AND t.kind = 'kernel' AND t.seq BETWEEN s.lo AND s.hi
    GROUP BY ALL
),
-- the first kernel counts whole (busy_ns), the others by what they add to the kernels before
-- them; the pause before the first kernel is not the storm's
storms AS (
    SELECT
        report_id, device_id, storm,
        min(start_ns) AS start_ns,
        max(end_ns) AS end_ns,
        sum(kernels) AS kernels,
        sum(covered_ns) + arg_min(first_extra_ns, first_seq) AS busy_ns,
        sum(duration_ns) / sum(kernels) AS avg_kernel_ns,
        sum(gap_ns) - arg_min(first_gap_ns, first_seq) AS kernel_gap_ns
    FROM by_id
    GROUP BY ALL
    HAVING sum(kernels) >= $min_kernels
),
kept AS (
    SELECT *
    FROM storms
    WHERE end_ns = start_ns OR 100.0 * busy_ns / (end_ns - start_ns) <= $max_busy_pct
),
-- idle_ns: the device's idle pauses (no kernel, memcpy or memset) of at most max_gap_ns inside
-- the storm's window, as `gaps` finds them: the pause before a row that starts after the storm's
-- first kernel (so after it in seq) and by its end. Those before its kernels are in by_id; those
-- before the other activities in its stretch are added here.
others AS (
    SELECT s.report_id, s.device_id, s.storm, sum(t.start_ns - t.prev_end_ns) AS gap_ns
    FROM gpu_timeline AS t
    JOIN spans AS s ON s.report_id = t.report_id AND s.dev = coalesce(t.device_id, -1) AND s.bucket = t.seq // greatest($min_kernels, 1)
    JOIN kept AS k ON k.report_id = s.report_id AND k.device_id IS NOT DISTINCT FROM s.device_id AND k.storm = s.storm
    WHERE ($report_id IS NULL OR t.report_id = $report_id) AND t.kind <> 'kernel' AND t.seq BETWEEN s.lo AND s.hi
        AND t.start_ns > t.prev_end_ns AND t.start_ns - t.prev_end_ns <= $max_gap_ns
        AND t.prev_end_ns >= k.start_ns AND t.start_ns <= k.end_ns
    GROUP BY ALL
),
-- the most frequent kernel name of each storm reported, ties to the name seen first in
-- (start_ns, end_ns, name) order: counted per name id (integers: names are long strings, kept out
-- of the big aggregate), then per name (ids of one name add up), each with its first (start_ns,
-- end_ns); kernels without a name are not counted
per_name AS (
    SELECT p.report_id, p.device_id, p.storm, kn.name, sum(p.kernels) AS kernels, min((p.start_ns, p.first_end_ns)) AS first
    FROM by_id AS p
    JOIN kept AS s ON s.report_id = p.report_id AND s.device_id IS NOT DISTINCT FROM p.device_id AND s.storm = p.storm
    JOIN kernel_names AS kn ON kn.report_id = p.report_id AND kn.name_id = p.name_id
    WHERE kn.name IS NOT NULL
    GROUP BY ALL
),
top AS (
    SELECT report_id, device_id, storm, arg_min(name, (-kernels, first, name)) AS top_name
    FROM per_name
    GROUP BY ALL
)
SELECT
    s.report_id,
    s.device_id,
    CAST(s.start_ns AS BIGINT) AS start_ns,
    CAST(s.end_ns AS BIGINT) AS end_ns,
    CAST(s.end_ns - s.start_ns AS BIGINT) AS window_ns,
    CAST(s.kernels AS BIGINT) AS kernels,
    CAST(s.busy_ns AS BIGINT) AS busy_ns,
    CAST(CASE WHEN s.end_ns > s.start_ns THEN 100.0 * s.busy_ns / (s.end_ns - s.start_ns) END AS DOUBLE) AS busy_pct,
    CAST(s.avg_kernel_ns AS DOUBLE) AS avg_kernel_ns,
    CAST(CASE WHEN s.end_ns > s.start_ns THEN s.kernels * 1e9 / (s.end_ns - s.start_ns) END AS DOUBLE) AS launches_per_s,
    t.top_name,
    CAST(s.kernel_gap_ns + coalesce(i.gap_ns, 0) AS BIGINT) AS idle_ns
FROM kept AS s
LEFT JOIN top AS t ON t.report_id = s.report_id AND t.device_id IS NOT DISTINCT FROM s.device_id AND t.storm = s.storm
LEFT JOIN others AS i ON i.report_id = s.report_id AND i.device_id IS NOT DISTINCT FROM s.device_id AND i.storm = s.storm
ORDER BY s.report_id, s.device_id, s.start_ns
