-- Idle gaps per report, device and stream, split the way Holistic Trace Analysis splits idle
-- time. For each activity (kernel, memcpy, memset) on a stream, the gap is the time since the
-- previous activity on the same stream ended (running max of earlier ends). With `launch` the
-- API call that issued the activity after the gap (same report_id, pid, correlation_id):
--   host_wait    launch.start_ns > gap start: the host had not even issued the work when the
--                stream ran dry (CPU-bound: slow operators, Python, small batches);
--   kernel_wait  otherwise, and the gap is shorter than kernel_wait_ns (HTA's
--                consecutive_kernel_delay, 30 us): the work was queued, the gap is the GPU's
--                own launch overhead between back-to-back work (CUDA graphs shrink it);
--   other        otherwise (queued long before but started late: waits on events/other streams,
--                or no launch call recorded).
-- reads cuda_api, graph_executions, kernel_names, kernel_rows, memcpy, memset
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param min_gap_ns BIGINT = 0: shortest gap reported (ns); gaps are always > 0.
-- param kernel_wait_ns BIGINT = 30000: gaps shorter than this whose work was already queued are kernel_wait (ns).
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col stream_id BIGINT: CUDA stream id.
-- col gap_start_ns BIGINT: previous activity on the stream ended (ns).
-- col gap_end_ns BIGINT: next activity on the stream started (ns).
-- col gap_ns BIGINT: idle time of the stream (ns).
-- col before VARCHAR: activity ending at gap_start_ns.
-- col after VARCHAR: activity starting at gap_end_ns.
-- col launch_api VARCHAR: API call that launched the activity after the gap.
-- col launch_delay_ns BIGINT: launch call start - gap start (ns); > 0 is host_wait.
-- col category VARCHAR: host_wait, kernel_wait or other.
-- Labels travel as numbers (their rank in label order) through the sorts and joins and become
-- strings again after the final sort (a projection keeps its order): sorting 1M rows that carry
-- two long kernel names and the launch call's name costs seconds. Rows
-- are sorted on (start_ns, end_ns); the (kind, label) order among activities tied on both, and
-- the activity ending last when that is not the previous row alone (overlapping activities on a
-- stream), are looked up for the few rows concerned.
WITH labels AS (
    SELECT label, row_number() OVER (ORDER BY label) AS label_id
    FROM (SELECT DISTINCT label FROM nsa_gpu_activity($report_id))
),
a AS (
    SELECT x.report_id, x.device_id, x.stream_id, x.pid, x.correlation_id, x.start_ns, x.end_ns, x.kind, l.label_id
    FROM nsa_gpu_activity($report_id) AS x
    JOIN labels AS l ON l.label = x.label
),
w AS (
    SELECT
        report_id, device_id, stream_id, pid, correlation_id, start_ns, end_ns, label_id,
        max(end_ns) OVER prev AS prev_end,
        lag(end_ns) OVER ord AS lag_end,
        lag(label_id) OVER ord AS lag_label_id,
        max(end_ns) OVER prev2 AS prev2_end,
        coalesce(lead(start_ns) OVER ord = start_ns AND lead(end_ns) OVER ord = end_ns, false) AS tied
    FROM a
    WINDOW
        ord AS (PARTITION BY report_id, device_id, stream_id ORDER BY start_ns, end_ns),
        prev AS (ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
        prev2 AS (ord ROWS BETWEEN UNBOUNDED PRECEDING AND 2 PRECEDING)
),
g0 AS (
    SELECT *, lag_end IS DISTINCT FROM prev_end OR prev2_end >= prev_end AS overlapped
    FROM w
    WHERE start_ns - prev_end >= greatest($min_gap_ns, 1)
),
-- a gap opened by one of several activities with the same start and end: the first in
-- (kind, label) order is the activity after the gap
tied_after AS (
    SELECT
        g0.report_id, g0.device_id, g0.stream_id, g0.start_ns,
        first(a.pid ORDER BY a.kind, a.label_id) AS pid,
        first(a.correlation_id ORDER BY a.kind, a.label_id) AS correlation_id,
        first(a.label_id ORDER BY a.kind, a.label_id) AS label_id
    FROM g0
    JOIN a
        ON a.report_id = g0.report_id AND a.device_id IS NOT DISTINCT FROM g0.device_id
        AND a.stream_id IS NOT DISTINCT FROM g0.stream_id AND a.start_ns = g0.start_ns AND a.end_ns = g0.end_ns
    WHERE g0.tied
    GROUP BY ALL
),
-- the previous row is not the only earlier activity ending at prev_end (overlapping activities
-- on the stream): the first of those in (start_ns, kind, label) order, as arg_max keeps it
overlapped_before AS (
    SELECT
        g0.report_id, g0.device_id, g0.stream_id, g0.start_ns,
        first(a.label_id ORDER BY a.start_ns, a.kind, a.label_id) AS label_id
    FROM g0
    JOIN a
        ON a.report_id = g0.report_id AND a.device_id IS NOT DISTINCT FROM g0.device_id
        AND a.stream_id IS NOT DISTINCT FROM g0.stream_id AND a.end_ns = g0.prev_end AND a.start_ns < g0.start_ns
    WHERE g0.overlapped
    GROUP BY ALL
),
g AS (
    SELECT
        g0.report_id, g0.device_id, g0.stream_id, g0.start_ns, g0.prev_end,
        CASE WHEN g0.tied THEN ta.pid ELSE g0.pid END AS pid,
        CASE WHEN g0.tied THEN ta.correlation_id ELSE g0.correlation_id END AS correlation_id,
        CASE WHEN g0.tied THEN ta.label_id ELSE g0.label_id END AS label_id,
        CASE WHEN g0.overlapped THEN ob.label_id ELSE g0.lag_label_id END AS prev_label_id
    FROM g0
    LEFT JOIN tied_after AS ta
        ON g0.tied AND ta.report_id = g0.report_id AND ta.device_id IS NOT DISTINCT FROM g0.device_id
        AND ta.stream_id IS NOT DISTINCT FROM g0.stream_id AND ta.start_ns = g0.start_ns
    LEFT JOIN overlapped_before AS ob
        ON g0.overlapped AND ob.report_id = g0.report_id
        AND ob.device_id IS NOT DISTINCT FROM g0.device_id AND ob.stream_id IS NOT DISTINCT FROM g0.stream_id
        AND ob.start_ns = g0.start_ns
),
launch AS (
    SELECT c.report_id, c.pid, c.correlation_id, min(c.start_ns) AS start_ns, min(c.name) AS name
    FROM cuda_api AS c
    SEMI JOIN g ON c.report_id = g.report_id AND c.pid = g.pid AND c.correlation_id = g.correlation_id
    WHERE ($report_id IS NULL OR c.report_id = $report_id)
    GROUP BY ALL
),
label_list AS (
    SELECT list(label ORDER BY label_id) AS names FROM labels
),
-- the rows in output order, sorted with numbers and the launch call's name only; the labels and
-- the columns computed from these are attached after the sort
sorted AS (
    SELECT g.report_id, g.device_id, g.stream_id, g.prev_end, g.start_ns, g.prev_label_id, g.label_id,
           l.start_ns AS launch_start_ns, l.name AS launch_api
    FROM g
    LEFT JOIN launch AS l USING (report_id, pid, correlation_id)
    ORDER BY g.report_id, g.device_id, g.stream_id, g.prev_end
)
SELECT
    s.report_id,
    s.device_id,
    s.stream_id,
    CAST(s.prev_end AS BIGINT) AS gap_start_ns,
    CAST(s.start_ns AS BIGINT) AS gap_end_ns,
    CAST(s.start_ns - s.prev_end AS BIGINT) AS gap_ns,
    ll.names[s.prev_label_id] AS before,
    ll.names[s.label_id] AS after,
    s.launch_api,
    CAST(s.launch_start_ns - s.prev_end AS BIGINT) AS launch_delay_ns,
    CASE
        WHEN s.launch_start_ns > s.prev_end THEN 'host_wait'
        WHEN s.launch_start_ns IS NOT NULL AND s.start_ns - s.prev_end < $kernel_wait_ns THEN 'kernel_wait'
        ELSE 'other'
    END AS category
FROM sorted AS s
CROSS JOIN label_list AS ll
