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
-- The device order is (start_ns, end_ns), as the stored timeline (gpu_timeline) keeps it, with
-- the latest end of the kernels before each one (prev_kernel_end_ns). Kernels tied on both have
-- the same duration, so the same `tiny`, and all land in one storm, whatever their order.
-- One ordered pass over the kernels: a kernel that is not tiny, or starts more than max_gap_ns
-- after the kernels before it ended, ends the storm before it; the running count of those breaks
-- numbers the storms (a run of tiny kernels with no break between them shares one number), and a
-- tiny kernel opens a storm when the kernel before it was not tiny or it starts after a pause.
WITH k AS (
    SELECT
        report_id, device_id, start_ns, end_ns, duration_ns, name_id,
        prev_kernel_end_ns AS prev_end,
        duration_ns < $max_kernel_ns AS tiny,
        coalesce(start_ns - prev_kernel_end_ns > $max_gap_ns, false) AS pause
    FROM gpu_timeline
    WHERE ($report_id IS NULL OR report_id = $report_id) AND kind = 'kernel'
),
numbered AS (
    SELECT *
    FROM (
        SELECT
            *,
            NOT coalesce(tiny AND lag(tiny) OVER ord AND NOT pause, false) AS first_of_storm,
            sum(CAST(NOT coalesce(tiny, false) OR pause AS INTEGER)) OVER (ord ROWS UNBOUNDED PRECEDING) AS storm
        FROM k
        WINDOW ord AS (PARTITION BY report_id, device_id ORDER BY start_ns, end_ns)
    )
    WHERE tiny
),
storms AS (
    SELECT
        report_id,
        device_id,
        storm,
        min(start_ns) AS start_ns,
        max(end_ns) AS end_ns,
        count(*) AS kernels,
        sum(CASE WHEN first_of_storm THEN duration_ns ELSE nsa_union_ns(end_ns, start_ns, prev_end) END) AS busy_ns,
        avg(duration_ns) AS avg_kernel_ns
    FROM numbered
    GROUP BY ALL
    HAVING count(*) >= $min_kernels
),
kept AS (
    SELECT *
    FROM storms
    WHERE end_ns = start_ns OR 100.0 * busy_ns / (end_ns - start_ns) <= $max_busy_pct
),
-- the device's idle pauses (no kernel, memcpy or memset) of at most max_gap_ns, in one sorted
-- pass like `gaps`; each is credited to the storm starting last at or before it, if it ends
-- inside that storm's window
pauses AS (
    SELECT report_id, device_id, prev_end_ns AS pause_start_ns, start_ns AS pause_end_ns
    FROM gpu_timeline
    WHERE ($report_id IS NULL OR report_id = $report_id)
        AND start_ns > prev_end_ns AND start_ns - prev_end_ns <= $max_gap_ns
        AND EXISTS (SELECT 1 FROM kept)
),
idle AS (
    SELECT s.report_id, s.device_id, s.storm, sum(p.pause_end_ns - p.pause_start_ns) AS idle_ns
    FROM pauses AS p
    -- an ASOF join never matches NULL keys, not even with IS NOT DISTINCT FROM: exports without
    -- deviceId have one NULL device, keyed -1 here (CUDA device ids are never negative)
    ASOF JOIN kept AS s
        ON s.report_id = p.report_id AND coalesce(s.device_id, -1) = coalesce(p.device_id, -1)
        AND p.pause_start_ns >= s.start_ns
    WHERE p.pause_end_ns <= s.end_ns
    GROUP BY ALL
),
-- kernel names only for the storms reported (names are long strings: kept out of the sorts);
-- mode breaks ties by first occurrence, fed in (start_ns, end_ns, name) order
top AS (
    SELECT n.report_id, n.device_id, n.storm, mode(kn.name ORDER BY n.start_ns, n.end_ns, kn.name) AS top_name
    FROM numbered AS n
    JOIN kept AS s ON s.report_id = n.report_id AND s.device_id IS NOT DISTINCT FROM n.device_id AND s.storm = n.storm
    LEFT JOIN kernel_names AS kn ON kn.report_id = n.report_id AND kn.name_id = n.name_id
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
    CAST(coalesce(i.idle_ns, 0) AS BIGINT) AS idle_ns
FROM kept AS s
LEFT JOIN top AS t ON t.report_id = s.report_id AND t.device_id IS NOT DISTINCT FROM s.device_id AND t.storm = s.storm
LEFT JOIN idle AS i ON i.report_id = s.report_id AND i.device_id IS NOT DISTINCT FROM s.device_id AND i.storm = s.storm
ORDER BY s.report_id, s.device_id, s.start_ns
