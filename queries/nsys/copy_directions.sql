-- Host<->device copies per report and device by direction: how long HtoD and DtoH copies ran,
-- how long the two directions ran at the same time, and how much of the copy time was
-- serialised by stream order alone. A GPU copies each direction on its own copy engine (nsys'
-- TARGET_INFO_GPU.asyncEngines: 2 or more on every data-center GPU), so an upload and a download
-- can run side by side, but only when they are on different streams.
-- serialised_ns is the union of the intervals in which a copy ran while the next activity on its
-- stream (same report, device, process and stream) was a copy the other way that had already been
-- issued: its launch call (the cuda_api row with the same report_id, pid and correlation_id) had
-- returned. That copy waited only for the stream's order; on a stream of its own it could have
-- run alongside. Any other GPU work in between (kernel, memset, graph, DtoD copy) breaks the pair:
-- in upload, compute, download the download waits for the compute, not only for the stream. A
-- copy issued after the one before it ended (a synchronous cudaMemcpy, a host that blocks on
-- pageable memory) or without a launch call is not serialised. Busy times are unions (overlaps
-- counted once), in one sorted pass per device (running max of earlier ends).
-- With phase 'steady' ('startup'), reports that have steps (table `steps`) count only the copies
-- starting at or after (before) their first steady step (nsa_steady), as memcpy_summary does, and
-- the serialised time of those copies; reports without steps keep all their copies (column phase
-- says 'run').
-- reads cuda_api, graph_executions, kernel_rows, memcpy, memset, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param phase VARCHAR = NULL one of ('steady', 'startup'): NULL for the whole span; 'steady' or 'startup' for that part of reports with steps.
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col phase VARCHAR: the part of the report measured: 'run' (whole span), 'steady' or 'startup'.
-- col htod_busy_ns BIGINT: time at least one HtoD copy ran (ns).
-- col dtoh_busy_ns BIGINT: time at least one DtoH copy ran (ns).
-- col both_busy_ns BIGINT: time an HtoD and a DtoH copy ran at the same time (ns).
-- col serialised_ns BIGINT: time a copy ran while the next copy on its stream, in the other direction, was already issued (ns).
-- col htod_copies BIGINT: HtoD copies.
-- col dtoh_copies BIGINT: DtoH copies.
-- col copy_streams BIGINT: streams (process, stream id) that ran HtoD or DtoH copies.
-- col shared_streams BIGINT: streams that ran copies of both directions.
-- col stream_id BIGINT: the stream with the most serialised time (NULL when none).
WITH win AS (
    SELECT report_id, start_ns AS steady_ns FROM nsa_steady($report_id) WHERE $phase IN ('steady', 'startup')
),
c AS (
    SELECT
        m.report_id, m.device_id, m.pid, m.stream_id, m.correlation_id, m.direction, m.start_ns, m.end_ns,
        w.report_id IS NOT NULL AS windowed,
        w.steady_ns IS NULL OR (m.start_ns >= w.steady_ns) = ($phase = 'steady') AS in_win
    FROM memcpy AS m
    LEFT JOIN win AS w USING (report_id)
    WHERE ($report_id IS NULL OR m.report_id = $report_id) AND m.direction IN ('HtoD', 'DtoH')
        AND m.start_ns IS NOT NULL AND m.end_ns >= m.start_ns
),
-- the other GPU work (it breaks a pair): the rows of nsa_gpu_activity that are not HtoD or DtoH
-- copies, read from the tables without the labels; only those on a pair's stream and in a pair's
-- time bucket are kept, by the hash join in `broken`
other AS (
    SELECT report_id, device_id, pid, stream_id, start_ns, end_ns
    FROM kernel_rows
    WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL
    SELECT report_id, device_id, pid, stream_id, start_ns, end_ns
    FROM memcpy
    WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
        AND coalesce(direction, 'Unknown') NOT IN ('HtoD', 'DtoH')
    UNION ALL
    SELECT report_id, device_id, pid, stream_id, start_ns, end_ns
    FROM memset
    WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
    UNION ALL
    SELECT report_id, device_id, pid, stream_id, start_ns, end_ns
    FROM graph_executions
    WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns IS NOT NULL AND end_ns >= start_ns
),
-- each copy with the copy before it on its stream in (start_ns, end_ns) order: a window over the
-- copies only (not over the other work on their streams: millions of kernels)
cs AS (
    SELECT
        report_id, device_id, pid, stream_id, correlation_id, direction, start_ns, end_ns, in_win,
        row_number() OVER s AS rn,
        lag(direction) OVER s AS prev_dir,
        lag(start_ns) OVER s AS prev_start,
        lag(end_ns) OVER s AS prev_end,
        lag(in_win) OVER s AS prev_in
    FROM c
    WINDOW s AS (PARTITION BY report_id, device_id, pid, stream_id ORDER BY start_ns, end_ns)
),
-- the copies that follow one going the other way (in the window), with when their launch call
-- returned: a hash table of those copies, not of the calls
turns AS (SELECT * FROM cs WHERE prev_dir <> direction AND prev_in),
issued AS (
    SELECT a.report_id, a.pid, a.correlation_id, min(a.end_ns) AS issued_ns
    FROM cuda_api AS a
    SEMI JOIN turns AS t ON t.report_id = a.report_id AND t.pid = a.pid AND t.correlation_id = a.correlation_id
    WHERE ($report_id IS NULL OR a.report_id = $report_id)
    GROUP BY ALL
),
-- the earlier copy ran while the later one, going the other way, was issued and waiting; unless
-- other work on the stream comes between the two in (start_ns, end_ns) order (then that work, not
-- the copy, is what the later one waited for)
pairs AS (
    SELECT *
    FROM (
        SELECT t.*, i.issued_ns, greatest(t.prev_start, i.issued_ns) AS lo, least(t.prev_end, t.start_ns) AS hi
        FROM turns AS t
        JOIN issued AS i USING (report_id, pid, correlation_id)
        WHERE i.issued_ns IS NOT NULL
    )
    WHERE hi > lo
),
-- that work is looked up without sorting it into the copies: the stretches from each pair's
-- earlier start to its later start are cut into time buckets (about as wide as the average
-- stretch), and each other activity looked up in the bucket of its start by a hash join. A
-- stretch ends where the next of its stream begins, so an activity lands in one or two of them.
-- (Work tied with a copy on both start and end is not between: a sort would place it either way.)
width AS (
    SELECT report_id, CAST(greatest(1, sum(start_ns - prev_start) // count(*)) AS BIGINT) AS w
    FROM pairs
    GROUP BY ALL
),
slots AS (
    SELECT p.report_id, p.device_id, p.pid, p.stream_id, p.rn, p.prev_start, p.prev_end, p.start_ns, p.end_ns,
           unnest(range(p.prev_start // w.w, p.start_ns // w.w + 1)) AS bucket
    FROM pairs AS p JOIN width AS w USING (report_id)
),
broken AS (
    SELECT DISTINCT s.report_id, s.device_id, s.pid, s.stream_id, s.rn
    FROM (SELECT o.*, o.start_ns // w.w AS bucket FROM other AS o JOIN width AS w USING (report_id)) AS o
    JOIN slots AS s
        ON s.report_id = o.report_id AND s.device_id = o.device_id AND s.pid = o.pid AND s.stream_id = o.stream_id
        AND s.bucket = o.bucket
    WHERE (o.start_ns > s.prev_start OR (o.start_ns = s.prev_start AND o.end_ns > s.prev_end))
        AND (o.start_ns < s.start_ns OR (o.start_ns = s.start_ns AND o.end_ns < s.end_ns))
),
ser AS (
    SELECT p.report_id, p.device_id, p.pid, p.stream_id, p.lo, p.hi
    FROM pairs AS p
    LEFT JOIN broken AS b
        ON b.report_id = p.report_id AND b.device_id = p.device_id AND b.pid = p.pid AND b.stream_id = p.stream_id
        AND b.rn = p.rn
    WHERE b.rn IS NULL
),
ser_dev AS (
    SELECT
        report_id,
        device_id,
        sum(nsa_union_ns(hi, lo, prev_hi)) AS serialised_ns
    FROM (
        SELECT *, max(hi) OVER (
            PARTITION BY report_id, device_id ORDER BY lo ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev_hi
        FROM ser
    )
    GROUP BY ALL
),
ser_top AS (
    -- copies on one stream never overlap, so a plain sum is that stream's serialised time
    SELECT report_id, device_id, arg_max(stream_id, ns) AS stream_id
    FROM (SELECT report_id, device_id, pid, stream_id, sum(hi - lo) AS ns FROM ser GROUP BY ALL)
    GROUP BY ALL
),
a AS (
    SELECT
        report_id, device_id, pid, stream_id, direction, windowed, start_ns, end_ns,
        CASE WHEN direction = 'HtoD' THEN end_ns END AS h_end,
        CASE WHEN direction = 'DtoH' THEN end_ns END AS d_end
    FROM c
    WHERE in_win
),
w AS (
    SELECT
        *,
        max(h_end) OVER prev AS h_prev,
        max(d_end) OVER prev AS d_prev,
        max(end_ns) OVER prev AS all_prev
    FROM a
    WINDOW prev AS (
        PARTITION BY report_id, device_id ORDER BY start_ns
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    )
),
d AS (
    SELECT
        report_id,
        device_id,
        any_value(windowed) AS windowed,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, h_prev)) FILTER (WHERE h_end IS NOT NULL), 0) AS htod_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, d_prev)) FILTER (WHERE d_end IS NOT NULL), 0) AS dtoh_busy_ns,
        coalesce(sum(nsa_union_ns(end_ns, start_ns, all_prev)), 0) AS any_busy_ns,
        count(*) FILTER (WHERE direction = 'HtoD') AS htod_copies,
        count(*) FILTER (WHERE direction = 'DtoH') AS dtoh_copies
    FROM w
    GROUP BY ALL
),
streams AS (
    SELECT
        report_id,
        device_id,
        count(*) AS copy_streams,
        count(*) FILTER (WHERE directions = 2) AS shared_streams
    FROM (SELECT report_id, device_id, pid, stream_id, count(DISTINCT direction) AS directions FROM a GROUP BY ALL)
    GROUP BY ALL
)
SELECT
    d.report_id,
    d.device_id,
    CASE WHEN d.windowed THEN $phase ELSE 'run' END AS phase,
    CAST(d.htod_busy_ns AS BIGINT) AS htod_busy_ns,
    CAST(d.dtoh_busy_ns AS BIGINT) AS dtoh_busy_ns,
    CAST(d.htod_busy_ns + d.dtoh_busy_ns - d.any_busy_ns AS BIGINT) AS both_busy_ns,
    CAST(coalesce(s.serialised_ns, 0) AS BIGINT) AS serialised_ns,
    CAST(d.htod_copies AS BIGINT) AS htod_copies,
    CAST(d.dtoh_copies AS BIGINT) AS dtoh_copies,
    CAST(st.copy_streams AS BIGINT) AS copy_streams,
    CAST(st.shared_streams AS BIGINT) AS shared_streams,
    CAST(t.stream_id AS BIGINT) AS stream_id
FROM d
LEFT JOIN ser_dev AS s ON s.report_id = d.report_id AND s.device_id IS NOT DISTINCT FROM d.device_id
LEFT JOIN ser_top AS t ON t.report_id = d.report_id AND t.device_id IS NOT DISTINCT FROM d.device_id
LEFT JOIN streams AS st ON st.report_id = d.report_id AND st.device_id IS NOT DISTINCT FROM d.device_id
ORDER BY d.report_id, d.device_id
