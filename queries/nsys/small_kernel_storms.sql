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
-- the device's idle pauses (no kernel, memcpy or memset) of at most max_gap_ns, as `gaps` finds
-- them; each is credited to the storm starting last at or before it, if it ends inside that
-- storm's window. A pause ends after it starts, so it can end inside that storm only when it
-- starts in [start_ns, least(end_ns, the next storm's start_ns)): the storm's own stretch.
-- Stretches do not overlap, so no sort of the pauses is needed: the stretches are cut into time
-- buckets (about as wide as the average stretch) and each pause looked up in its bucket by a hash
-- join. A NULL device is keyed -1 (CUDA device ids are never negative).
owns AS (
    SELECT
        report_id, coalesce(device_id, -1) AS dev, device_id, storm, start_ns AS own_start, end_ns,
        least(end_ns, coalesce(lead(start_ns) OVER (PARTITION BY report_id, coalesce(device_id, -1) ORDER BY start_ns), end_ns)) AS own_end
    FROM kept
),
width AS (
    SELECT report_id, CAST(greatest(1, sum(own_end - own_start) // count(*)) AS BIGINT) AS w
    FROM owns
    WHERE own_end > own_start
    GROUP BY ALL
),
slots AS (
    SELECT o.report_id, o.dev, o.device_id, o.storm, o.own_start, o.own_end, o.end_ns,
           unnest(range(o.own_start // w.w, (o.own_end - 1) // w.w + 1)) AS bucket
    FROM owns AS o JOIN width AS w USING (report_id)
    WHERE o.own_end > o.own_start
),
pauses AS (
    SELECT t.report_id, coalesce(t.device_id, -1) AS dev, t.prev_end_ns AS pause_start_ns, t.start_ns AS pause_end_ns,
           t.prev_end_ns // w.w AS bucket
    FROM gpu_timeline AS t JOIN width AS w USING (report_id)
    WHERE ($report_id IS NULL OR t.report_id = $report_id)
        AND t.start_ns > t.prev_end_ns AND t.start_ns - t.prev_end_ns <= $max_gap_ns
),
idle AS (
    SELECT s.report_id, s.device_id, s.storm, sum(p.pause_end_ns - p.pause_start_ns) AS idle_ns
    FROM pauses AS p
    JOIN slots AS s ON s.report_id = p.report_id AND s.dev = p.dev AND s.bucket = p.bucket
    WHERE p.pause_start_ns >= s.own_start AND p.pause_start_ns < s.own_end AND p.pause_end_ns <= s.end_ns
    GROUP BY ALL
),
-- the most frequent kernel name of each storm reported, ties to the name seen first in
-- (start_ns, end_ns, name) order: counted per name id (integers: names are long strings, kept out
-- of the big aggregate), then per name (ids of one name add up), each with its first (start_ns,
-- end_ns); kernels without a name are not counted
per_id AS (
    SELECT n.report_id, n.device_id, n.storm, n.name_id, count(*) AS kernels, min((n.start_ns, n.end_ns)) AS first
    FROM numbered AS n
    JOIN kept AS s ON s.report_id = n.report_id AND s.device_id IS NOT DISTINCT FROM n.device_id AND s.storm = n.storm
    GROUP BY ALL
),
per_name AS (
    SELECT p.report_id, p.device_id, p.storm, kn.name, sum(p.kernels) AS kernels, min(p.first) AS first
    FROM per_id AS p
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
    CAST(coalesce(i.idle_ns, 0) AS BIGINT) AS idle_ns
FROM kept AS s
LEFT JOIN top AS t ON t.report_id = s.report_id AND t.device_id IS NOT DISTINCT FROM s.device_id AND t.storm = s.storm
LEFT JOIN idle AS i ON i.report_id = s.report_id AND i.device_id IS NOT DISTINCT FROM s.device_id AND i.storm = s.storm
ORDER BY s.report_id, s.device_id, s.start_ns
