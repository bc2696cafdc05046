-- Where each rank's steady steps went, side by side with the run's other ranks: the GPU step time
-- and its parts per step (compute, communication, exposed communication and idle, as
-- comm_overlap measures them over the nsa_rank_steps windows), and how the rank met the others at
-- the collectives (collective_skew's matched collectives whose start on this rank falls in one of
-- its windows): the time it waited inside them for the last rank, how late it arrived itself, and
-- how often it was the last. A straggler has a large late_ns and last_share and a small wait_ns;
-- the ranks waiting for it the reverse. compute_vs_median far from 1 is a compute imbalance; near
-- 1 with a straggler, the delay is elsewhere (the host: see host_ns, idle_ns). Per-step columns
-- are means over the steady steps, step_ns and host_ns medians. A rank without steady steps is
-- measured over its whole GPU span (phase 'run', steps 0): its per-step columns are NULL.
-- reads collectives, comm_ops, cuda_api, gpu_timeline, gpu_comm, ranks, steps
-- param run_id INTEGER = NULL: only this run; all runs when NULL.
-- col run_id INTEGER: the run (`runs.run_id`).
-- col rank INTEGER: the rank.
-- col report_id INTEGER: the report holding the rank.
-- col pid BIGINT: the rank's process (ranks.pid); NULL when the whole report is the rank.
-- col device_id INTEGER: the rank's GPU.
-- col phase VARCHAR: 'steady' (the steady steps) or 'run' (no steady steps: the whole GPU span).
-- col steps BIGINT: steady steps measured.
-- col step_ns DOUBLE: median GPU step time: the steps' GPU windows (ns).
-- col host_ns DOUBLE: median duration of the step ranges on the host (ns); for kernel-pattern steps the GPU window.
-- col compute_ns DOUBLE: union of the non-communication kernels, per step (ns).
-- col comm_ns DOUBLE: union of the communication kernels, per step (ns).
-- col exposed_comm_ns DOUBLE: communication during which no compute ran, per step (ns).
-- col idle_ns DOUBLE: time nothing ran on the GPU (no kernel, copy or memset), per step (ns).
-- col collectives BIGINT: matched collectives the rank started within its windows.
-- col wait_ns DOUBLE: time waited inside those collectives for the last rank (last arrival - own arrival), per step (ns).
-- col late_ns DOUBLE: own arrival - first arrival at those collectives, per step (ns).
-- col last_share DOUBLE: fraction of those collectives at which the rank arrived last (ties: the lowest rank); NULL without any.
-- col compute_vs_median DOUBLE: compute_ns / the median compute_ns of the run's ranks.
WITH w AS MATERIALIZED (SELECT * FROM nsa_rank_windows($run_id)),
r AS (
    SELECT
        run_id,
        rank,
        any_value(report_id) AS report_id,
        any_value(pid) AS pid,
        any_value(device_id) AS device_id,
        any_value(phase) AS phase,
        count(step) AS steps,
        median(window_ns) FILTER (WHERE step IS NOT NULL) AS step_ns,
        median(host_ns) AS host_ns,
        sum(compute_ns) / nullif(count(step), 0) AS compute_ns,
        sum(comm_ns) / nullif(count(step), 0) AS comm_ns,
        sum(cc_ns - compute_ns) / nullif(count(step), 0) AS exposed_comm_ns,
        sum(window_ns - busy_ns) / nullif(count(step), 0) AS idle_ns
    FROM w
    GROUP BY run_id, rank
),
-- each collective to the window holding its start on this rank (windows follow each other)
met AS (
    SELECT
        c.run_id,
        c.rank,
        count(*) AS collectives,
        sum(c.last_arrival_ns - c.start_ns) AS wait_ns,
        sum(c.start_ns - c.first_arrival_ns) AS late_ns,
        count(*) FILTER (WHERE c.rank = c.last_rank) AS last_count
    FROM nsa_collective_ranks($run_id) AS c
    ASOF JOIN (
        SELECT run_id, rank, start_ns + clock_offset_ns AS run_start, end_ns + clock_offset_ns AS run_end FROM w
    ) AS x ON x.run_id = c.run_id AND x.rank = c.rank AND c.start_ns >= x.run_start
    WHERE c.start_ns < x.run_end
    GROUP BY c.run_id, c.rank
)
SELECT
    r.run_id,
    r.rank,
    r.report_id,
    r.pid,
    r.device_id,
    r.phase,
    CAST(r.steps AS BIGINT) AS steps,
    CAST(r.step_ns AS DOUBLE) AS step_ns,
    CAST(r.host_ns AS DOUBLE) AS host_ns,
    CAST(r.compute_ns AS DOUBLE) AS compute_ns,
    CAST(r.comm_ns AS DOUBLE) AS comm_ns,
    CAST(r.exposed_comm_ns AS DOUBLE) AS exposed_comm_ns,
    CAST(r.idle_ns AS DOUBLE) AS idle_ns,
    CAST(coalesce(m.collectives, 0) AS BIGINT) AS collectives,
    CAST(coalesce(m.wait_ns, 0) / nullif(r.steps, 0) AS DOUBLE) AS wait_ns,
    CAST(coalesce(m.late_ns, 0) / nullif(r.steps, 0) AS DOUBLE) AS late_ns,
    CAST(m.last_count / m.collectives AS DOUBLE) AS last_share,
    CAST(r.compute_ns / nullif(median(r.compute_ns) OVER (PARTITION BY r.run_id), 0) AS DOUBLE) AS compute_vs_median
FROM r
LEFT JOIN met AS m USING (run_id, rank)
ORDER BY r.run_id, r.rank
