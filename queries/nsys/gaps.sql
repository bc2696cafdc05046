-- GPU idle gaps per report and device: every interval at least min_gap_ns long in which no
-- kernel, memcpy, memset or CUDA graph execution ran on the device (between its first and last
-- activity), with the activity ending before and starting after it, the phase of the run it
-- falls in, and what the host was doing:
--   sync         a blocking CUDA call (nsa_blocking_call: cuda*Synchronize, synchronous cudaMemcpy /
--                cudaMemset) of the process that runs the next activity, on any of its threads,
--                overlapped at least half the gap; cause_detail names it;
--   host_wait    otherwise, when the host thread that launched the activity after the gap was
--                waiting (table host_waits: an MPI_* / nccl* / ucp_* NVTX range, a sleep, a
--                condition-variable or lock wait, poll, a read...) for at least half the gap,
--                at its midpoint; cause_detail names the wait ('MPI_Recv', 'usleep'): of nested
--                waits (an NCCL or MPI range around the reads and polls it makes), the latest
--                to start if it covers half the gap, else the one around it;
--   late_launch  otherwise, when the API call that launched the activity after the gap started
--                after the gap began: the host issued the work late (host busy elsewhere, or
--                launch latency); cause_detail names the launch call;
--   unknown      otherwise: the work was queued before the gap began but did not start (a
--                stream/event dependency, another process, or no launch call recorded).
-- The launch call is the cuda_api row with the same report_id, pid and correlation_id. The gap
-- is a filter on the stored timeline (gpu_timeline: the latest end of earlier activity on the
-- device); the blocking call is found by an ASOF join per host thread at the gap's midpoint (a
-- call covering half the gap covers the midpoint).
-- reads cuda_api, gpu_timeline, host_waits, kernel_names, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param min_gap_ns BIGINT = 1000000: shortest gap reported (ns).
-- col report_id INTEGER: workspace report id.
-- col device_id INTEGER: CUDA device id.
-- col gap_start_ns BIGINT: the gap starts: last end of earlier activity (ns).
-- col gap_end_ns BIGINT: the gap ends: the next activity starts (ns).
-- col gap_ns BIGINT: idle time (ns).
-- col before VARCHAR: activity ending at gap_start_ns (kernel name, 'memcpy HtoD', 'memset').
-- col after VARCHAR: activity starting at gap_end_ns.
-- col cause VARCHAR: sync, host_wait, late_launch or unknown.
-- col cause_detail VARCHAR: the blocking call (sync), the wait (host_wait) or the launch call (late_launch).
-- col pid BIGINT: process of the activity after the gap.
-- col launch_api VARCHAR: CUDA API call that launched the activity after the gap.
-- col launch_delay_ns BIGINT: launch call start - gap start: > 0 means issued during the gap (ns).
-- col sync_overlap_ns BIGINT: how much of the gap the blocking call covered (ns).
-- col launch_global_tid BIGINT: host thread (nsys global_tid) of the launch call.
-- col phase VARCHAR: where the gap's midpoint falls: 'startup' (before the first steady step of nsa_steady), 'steady' (after its start), or 'run' for reports without steps.
WITH
-- the gap's end opens it: the first row (smallest end) of those starting at gap_end_ns, in the
-- timeline's (start_ns, end_ns) order; the kind and label order among rows with the same start
-- and end is applied below, to the few gaps
g0 AS (
    SELECT report_id, device_id, coalesce(device_id, -1) AS dev, prev_end_ns AS gap_start_ns,
           start_ns AS gap_end_ns, end_ns AS after_end_ns, coalesce(last_at_start, false) AS alone,
           kind, label, name_id, pid, correlation_id
    FROM gpu_timeline
    WHERE ($report_id IS NULL OR report_id = $report_id) AND start_ns - prev_end_ns >= greatest($min_gap_ns, 1)
),
-- kernel names numbered in (report, name) order, as nsa_gpu_activity labels them: the gaps carry
-- these numbers (and the other activities' short labels) through the joins and the sort, and
-- the names are put in after it (a projection keeps the order): a million gaps carrying two
-- kernel names of a few hundred bytes through five joins and the sort held gigabytes
kn AS (
    SELECT report_id, name_id, label, row_number() OVER (ORDER BY report_id, label) AS k
    FROM (
        SELECT report_id, name_id, coalesce(name, short_name, '(unnamed kernel)') AS label
        FROM kernel_names
        WHERE ($report_id IS NULL OR report_id = $report_id)
    )
),
-- the activity after the gap: of those starting at gap_end_ns with the smallest end, the first
-- in (kind, label) order, as the sort (start_ns, end_ns, kind, label) would place it. Most often
-- the gap's row is the only one starting then (last_at_start): it is that activity, and only
-- the others look for rows tied with it. The timeline's rows at the gaps' edges are found on
-- integer keys (a NULL device keyed -1: CUDA device ids are never negative).
g AS (
    SELECT report_id, device_id, dev, pid, correlation_id, gap_start_ns, gap_end_ns,
           gap_end_ns - gap_start_ns AS gap_ns, label AS after_label, name_id AS after_name_id
    FROM g0
    WHERE alone
    UNION ALL
    SELECT report_id, device_id, dev, r.pid, r.correlation_id, gap_start_ns, gap_end_ns,
           gap_end_ns - gap_start_ns AS gap_ns, r.label AS after_label, r.name_id AS after_name_id
    FROM (
        SELECT
            g0.report_id,
            any_value(g0.device_id) AS device_id,
            g0.dev,
            g0.gap_start_ns,
            g0.gap_end_ns,
            min({
                'kind': a.kind, 'after': coalesce(a.label, n.label, '(unnamed kernel)'),
                'pid': a.pid, 'correlation_id': a.correlation_id, 'label': a.label, 'name_id': a.name_id
            }) AS r
        FROM g0
        JOIN gpu_timeline AS a
            ON a.report_id = g0.report_id AND coalesce(a.device_id, -1) = g0.dev
            AND a.start_ns = g0.gap_end_ns AND a.end_ns = g0.after_end_ns
        LEFT JOIN kn AS n ON n.report_id = a.report_id AND n.name_id = a.name_id
        WHERE NOT g0.alone
        GROUP BY g0.report_id, g0.dev, g0.gap_start_ns, g0.gap_end_ns
    )
),
-- the activity ending at the gap's start, first in label order: the least of the other
-- activities' labels and of the kernels' names (by their numbers)
before AS (
    SELECT g.report_id, g.device_id, g.gap_start_ns,
           min(CASE WHEN a.label IS NOT NULL THEN a.label WHEN n.k IS NULL THEN '(unnamed kernel)' END) AS before_label,
           min(n.k) FILTER (WHERE a.label IS NULL) AS before_k
    FROM g
    JOIN gpu_timeline AS a
        ON a.report_id = g.report_id AND coalesce(a.device_id, -1) = g.dev AND a.end_ns = g.gap_start_ns
    LEFT JOIN kn AS n ON n.report_id = a.report_id AND n.name_id = a.name_id
    GROUP BY ALL
),
launch AS (
    SELECT g.report_id, g.device_id, g.gap_start_ns, min(c.start_ns) AS launch_start_ns, min(c.name) AS launch_api,
           arg_min(c.global_tid, c.start_ns) AS launch_tid, any_value(g.gap_ns) AS gap_ns
    FROM g
    JOIN cuda_api AS c
        ON c.report_id = g.report_id AND c.pid = g.pid AND c.correlation_id = g.correlation_id
    WHERE ($report_id IS NULL OR c.report_id = $report_id)
    GROUP BY ALL
),
sync_calls AS (
    SELECT report_id, pid, tid, start_ns, end_ns, name
    FROM cuda_api
    -- every blocking call's name has 'Synchronize', 'Memcpy' or 'Memset' in it: a cheap test first
    WHERE ($report_id IS NULL OR report_id = $report_id)
        AND (contains(name, 'Sync') OR contains(name, 'Mem')) AND nsa_blocking_call(name) IS NOT NULL
),
probe AS (
    SELECT g.report_id, g.device_id, g.pid, t.tid, g.gap_start_ns, g.gap_end_ns, g.gap_ns,
           g.gap_start_ns + g.gap_ns // 2 AS mid_ns
    FROM g
    JOIN (SELECT DISTINCT report_id, pid, tid FROM sync_calls) AS t
        ON t.report_id = g.report_id AND t.pid = g.pid
),
hit AS (
    SELECT
        p.report_id,
        p.device_id,
        p.gap_start_ns,
        s.name,
        least(s.end_ns, p.gap_end_ns) - greatest(s.start_ns, p.gap_start_ns) AS overlap_ns,
        p.gap_ns
    FROM probe AS p
    ASOF JOIN sync_calls AS s
        ON s.report_id = p.report_id AND s.pid = p.pid AND s.tid = p.tid AND p.mid_ns >= s.start_ns
    WHERE s.end_ns >= p.mid_ns
),
sync AS (
    SELECT report_id, device_id, gap_start_ns, arg_max(name, overlap_ns) AS sync_api, max(overlap_ns) AS sync_overlap_ns
    FROM hit
    WHERE 2 * overlap_ns >= gap_ns
    GROUP BY ALL
),
-- the wait the launching thread was in at the gap's midpoint: the latest to start before it if
-- that one covers half the gap, else the one reaching furthest of those started by then (a
-- thread's waits nest: an MPI or NCCL range holds the reads and polls it makes, so the latest to
-- start can be a short inner one while the range around it covers the gap; of nested waits the
-- outer one covers more of the gap). Only waits at least half the shortest gap long can cover
-- half a gap: the others are left out before the sort.
waits AS (
    SELECT report_id, global_tid, start_ns, end_ns, name,
           arg_max({'s': start_ns, 'e': end_ns, 'n': name}, {'e': end_ns, 's': -start_ns}) OVER (
               PARTITION BY report_id, global_tid ORDER BY start_ns RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS reach
    FROM host_waits
    WHERE ($report_id IS NULL OR report_id = $report_id) AND 2 * (end_ns - start_ns) >= greatest($min_gap_ns, 1)
),
wait AS (
    SELECT report_id, device_id, gap_start_ns, wait_name
    FROM (
        SELECT l.report_id, l.device_id, l.gap_start_ns,
               CASE
                   WHEN w.end_ns >= l.mid_ns
                       AND 2 * (least(w.end_ns, l.gap_end_ns) - greatest(w.start_ns, l.gap_start_ns)) >= l.gap_ns
                       THEN w.name
                   WHEN w.reach.e >= l.mid_ns
                       AND 2 * (least(w.reach.e, l.gap_end_ns) - greatest(w.reach.s, l.gap_start_ns)) >= l.gap_ns
                       THEN w.reach.n
               END AS wait_name
        FROM (
            SELECT *, gap_start_ns + gap_ns // 2 AS mid_ns, gap_start_ns + gap_ns AS gap_end_ns
            FROM launch
            WHERE launch_tid IS NOT NULL
        ) AS l
        ASOF JOIN waits AS w ON w.report_id = l.report_id AND w.global_tid = l.launch_tid AND l.mid_ns >= w.start_ns
    )
    WHERE wait_name IS NOT NULL
),
sorted AS (
    SELECT
        g.report_id, g.device_id, g.gap_start_ns, g.gap_end_ns, g.gap_ns, b.before_label, b.before_k,
        g.after_label, ak.k AS after_k, s.sync_api, s.sync_overlap_ns, hw.wait_name, g.pid,
        l.launch_api, l.launch_start_ns, l.launch_tid, w.report_id IS NULL AS no_steps,
        g.gap_start_ns + g.gap_ns // 2 < w.start_ns AS before_steady
    FROM g
    LEFT JOIN nsa_steady($report_id) AS w USING (report_id)
    LEFT JOIN before AS b USING (report_id, device_id, gap_start_ns)
    LEFT JOIN launch AS l USING (report_id, device_id, gap_start_ns)
    LEFT JOIN sync AS s USING (report_id, device_id, gap_start_ns)
    LEFT JOIN wait AS hw USING (report_id, device_id, gap_start_ns)
    LEFT JOIN kn AS ak ON ak.report_id = g.report_id AND ak.name_id = g.after_name_id
    ORDER BY g.report_id, g.device_id, g.gap_start_ns
),
kernel_labels AS (
    SELECT list(label ORDER BY k) AS labels FROM kn
)
SELECT
    s.report_id,
    s.device_id,
    CAST(s.gap_start_ns AS BIGINT) AS gap_start_ns,
    CAST(s.gap_end_ns AS BIGINT) AS gap_end_ns,
    CAST(s.gap_ns AS BIGINT) AS gap_ns,
    least(s.before_label, kl.labels[s.before_k]) AS before,
    coalesce(s.after_label, kl.labels[s.after_k], '(unnamed kernel)') AS after,
    CASE
        WHEN s.sync_api IS NOT NULL THEN 'sync'
        WHEN s.wait_name IS NOT NULL THEN 'host_wait'
        WHEN s.launch_start_ns > s.gap_start_ns THEN 'late_launch'
        ELSE 'unknown'
    END AS cause,
    CASE
        WHEN s.sync_api IS NOT NULL THEN s.sync_api
        WHEN s.wait_name IS NOT NULL THEN s.wait_name
        WHEN s.launch_start_ns > s.gap_start_ns THEN s.launch_api
    END AS cause_detail,
    s.pid,
    s.launch_api,
    CAST(s.launch_start_ns - s.gap_start_ns AS BIGINT) AS launch_delay_ns,
    CAST(s.sync_overlap_ns AS BIGINT) AS sync_overlap_ns,
    s.launch_tid AS launch_global_tid,
    CASE
        WHEN s.no_steps THEN 'run'
        WHEN s.before_steady THEN 'startup'
        ELSE 'steady'
    END AS phase
FROM sorted AS s
CROSS JOIN kernel_labels AS kl
