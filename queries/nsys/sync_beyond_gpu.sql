-- Blocking CUDA API calls per report, process and call name, with the part of the blocked time
-- the process's GPUs had nothing to do ("beyond GPU work"). Time blocked while a GPU of the
-- process was busy is mostly harmless (the host waits for work it needs); time blocked while
-- they were all idle is lost on both sides. The calls are those of nsa_blocking_call, as in
-- sync_calls; each call's busy time is the union of the GPU activity (gpu_timeline) of its
-- process's devices inside the call, on the device that was busiest.
-- With phase 'steady', each report that has steps (table `steps`) is judged from the start of its
-- first steady step (nsa_steady) on: calls are clipped to that window (a call running across its
-- start counts from there) and pid_span_ns starts there too. Reports without steps keep their
-- whole run.
-- reads cuda_api, gpu_timeline, steps
-- param report_id INTEGER = NULL: only this report; all reports when NULL.
-- param phase VARCHAR = NULL one of ('steady'): NULL for the whole run; 'steady' for the steady state of reports with steps.
-- col report_id INTEGER: workspace report id.
-- col pid BIGINT: process id.
-- col name VARCHAR: CUDA API call.
-- col calls BIGINT: number of calls.
-- col blocked_ns BIGINT: summed time blocked in the calls (ns).
-- col beyond_ns BIGINT: the part of blocked_ns during which the process's GPUs were idle (ns).
-- col pid_span_ns BIGINT: the process's run: first to last CUDA API call of the process, from the window's start with phase 'steady' (ns).
WITH win AS (SELECT report_id, start_ns AS ws FROM nsa_steady($report_id) WHERE $phase = 'steady'),
api AS (
    SELECT a.report_id, a.pid, a.tid, greatest(a.start_ns, coalesce(w.ws, a.start_ns)) AS start_ns, a.end_ns, a.name
    FROM cuda_api AS a LEFT JOIN win AS w USING (report_id)
    WHERE ($report_id IS NULL OR a.report_id = $report_id) AND (w.ws IS NULL OR a.end_ns > w.ws)
),
devs AS (
    SELECT DISTINCT report_id, pid, device_id FROM gpu_timeline WHERE ($report_id IS NULL OR report_id = $report_id)
),
calls AS (
    SELECT report_id, pid, tid, start_ns, end_ns, end_ns - start_ns AS duration_ns, name,
           row_number() OVER () AS call_id
    FROM api
    -- every blocking call's name has 'Synchronize', 'Memcpy' or 'Memset' in it: a cheap test first
    WHERE (contains(name, 'Sync') OR contains(name, 'Mem')) AND nsa_blocking_call(name) IS NOT NULL
),
-- each call's start and end as probes on each GPU of its process
probes AS (
    SELECT c.report_id, coalesce(d.device_id, -1) AS dev, t.probe_ns, c.call_id, t.side
    FROM calls AS c
    JOIN devs AS d ON d.report_id = c.report_id AND d.pid = c.pid
    CROSS JOIN LATERAL (VALUES (c.start_ns, -1), (c.end_ns, 1)) AS t(probe_ns, side)
),
-- the busy time up to a probe at time t, from the last activity of the device starting by t
-- (gpu_timeline's last_at_start row: one per start time): busy_through_ns is the union of the
-- activities starting by t, and all of [t, end_through_ns] is covered (by the activity ending
-- there), so the busy time up to t is busy_through_ns - (end_through_ns - t) when that ends
-- after t. An ASOF join never matches NULL keys: a NULL device is keyed -1 (CUDA device ids are
-- never negative).
-- The ASOF join sorts what it looks up in: not the whole timeline, only the rows that can be a
-- probe's match. Each device's rows are cut into blocks of k in (start_ns, end_ns) order (seq),
-- so every block holds k rows however GPU work bunches up in time (time buckets hold thousands
-- in a burst and none in an idle stretch); k is 2 sqrt(timeline rows / probes), which keeps the
-- first rows of the blocks (marks) and the rows of the probes' blocks both few. A probe's match
-- is in the block of the last mark starting by t: the next mark starts after t, and the match
-- starts no earlier than that mark and is the last row of its start time. Of marks tied on
-- start_ns only the last counts (a tie of more than k rows spans blocks). One k for all
-- reports, from scalar subqueries.
pw AS (
    SELECT CAST(greatest(1, round(2 * sqrt((SELECT count(*) FROM gpu_timeline) / (count(*) + 1)))) AS BIGINT) AS k
    FROM probes
),
marks AS (
    SELECT report_id, coalesce(device_id, -1) AS dev, start_ns, (seq - 1) // (SELECT k FROM pw) AS block
    FROM gpu_timeline
    WHERE ($report_id IS NULL OR report_id = $report_id) AND (seq - 1) % (SELECT k FROM pw) = 0
    QUALIFY lead(start_ns) OVER (PARTITION BY report_id, dev ORDER BY block) IS DISTINCT FROM start_ns
),
-- (the probes' blocks as one list unnested: a join of a few thousand rows that the optimizer
-- cannot mistake for the larger side)
pb AS (
    SELECT x.report_id, x.dev, x.block
    FROM (
        SELECT unnest(k) AS x
        FROM (
            SELECT list(DISTINCT {'report_id': p.report_id, 'dev': p.dev, 'block': m.block}) AS k
            FROM probes AS p
            ASOF JOIN marks AS m ON m.report_id = p.report_id AND m.dev = p.dev AND p.probe_ns >= m.start_ns
        )
    )
),
cand AS (
    SELECT report_id, dev, start_ns, busy_through_ns, end_through_ns
    FROM (
        SELECT report_id, coalesce(device_id, -1) AS dev, (seq - 1) // (SELECT k FROM pw) AS block, start_ns,
               busy_through_ns, end_through_ns
        FROM gpu_timeline
        WHERE last_at_start AND ($report_id IS NULL OR report_id = $report_id)
    )
    SEMI JOIN pb USING (report_id, dev, block)
),
-- (a probe before the device's first activity matches nothing: no time busy by then)
b AS (
    SELECT p.call_id, p.dev, p.side,
           coalesce(t.busy_through_ns - greatest(0, t.end_through_ns - p.probe_ns), 0) AS busy_until
    FROM probes AS p
    ASOF LEFT JOIN cand AS t ON t.report_id = p.report_id AND t.dev = p.dev AND p.probe_ns >= t.start_ns
),
per_call AS (
    SELECT call_id, max(busy_ns) AS busy_ns
    FROM (SELECT call_id, dev, sum(side * busy_until) AS busy_ns FROM b GROUP BY ALL)
    GROUP BY ALL
),
-- from cuda_api again rather than from api, so that api (with its names) has one reader and is
-- never materialised
spans AS (
    SELECT a.report_id, a.pid, max(a.end_ns) - min(greatest(a.start_ns, coalesce(w.ws, a.start_ns))) AS pid_span_ns
    FROM cuda_api AS a LEFT JOIN win AS w USING (report_id)
    WHERE ($report_id IS NULL OR a.report_id = $report_id) AND (w.ws IS NULL OR a.end_ns > w.ws)
        AND $phase = 'steady'
    GROUP BY ALL
    -- the whole run: no window to join every call to
    UNION ALL
    SELECT report_id, pid, max(end_ns) - min(start_ns)
    FROM cuda_api
    WHERE ($report_id IS NULL OR report_id = $report_id) AND $phase IS NULL
    GROUP BY ALL
)
SELECT c.report_id, c.pid, c.name, count(*) AS calls,
       CAST(sum(c.duration_ns) AS BIGINT) AS blocked_ns,
       CAST(sum(greatest(0, c.duration_ns - coalesce(p.busy_ns, 0))) AS BIGINT) AS beyond_ns,
       any_value(s.pid_span_ns) AS pid_span_ns
FROM calls AS c
LEFT JOIN per_call AS p USING (call_id)
LEFT JOIN spans AS s ON s.report_id = c.report_id AND s.pid = c.pid
GROUP BY ALL
ORDER BY c.report_id, c.pid, blocked_ns DESC, c.name
