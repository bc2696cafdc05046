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
WITH w AS (
    SELECT
        *,
        max(end_ns) OVER s AS prev_end,
        -- the activity ending last among the earlier ones: serial streams make it the previous row
        arg_max(label, end_ns) OVER s AS prev_label
    FROM nsa_gpu_activity($report_id)
    WINDOW s AS (
        PARTITION BY report_id, device_id, stream_id ORDER BY start_ns, end_ns, kind, label
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    )
),
g AS (
    SELECT *
    FROM w
    WHERE start_ns - prev_end >= greatest($min_gap_ns, 1)
),
launch AS (
    SELECT c.report_id, c.pid, c.correlation_id, min(c.start_ns) AS start_ns, min(c.name) AS name
    FROM cuda_api AS c
    SEMI JOIN g ON c.report_id = g.report_id AND c.pid = g.pid AND c.correlation_id = g.correlation_id
    WHERE ($report_id IS NULL OR c.report_id = $report_id)
    GROUP BY ALL
)
SELECT
    g.report_id,
    g.device_id,
    g.stream_id,
    CAST(g.prev_end AS BIGINT) AS gap_start_ns,
    CAST(g.start_ns AS BIGINT) AS gap_end_ns,
    CAST(g.start_ns - g.prev_end AS BIGINT) AS gap_ns,
    g.prev_label AS before,
    g.label AS after,
    l.name AS launch_api,
    CAST(l.start_ns - g.prev_end AS BIGINT) AS launch_delay_ns,
    CASE
        WHEN l.start_ns > g.prev_end THEN 'host_wait'
        WHEN l.start_ns IS NOT NULL AND g.start_ns - g.prev_end < $kernel_wait_ns THEN 'kernel_wait'
        ELSE 'other'
    END AS category
FROM g
LEFT JOIN launch AS l USING (report_id, pid, correlation_id)
ORDER BY g.report_id, g.device_id, g.stream_id, g.prev_end
