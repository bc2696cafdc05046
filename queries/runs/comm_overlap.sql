-- How much of each rank's communication the GPU hid behind compute, over its steady steps (HTA's
-- and TraceLens' definition, docs/runs.md): communication is the union of the rank's comm_ops
-- kernels, compute the union of its other kernels (and CUDA graph executions traced as one row;
-- copies and memsets are neither), both on the rank's GPU (ranks.device_id) and of its process
-- when ranks.pid is set; overlapped is the part of the communication union the compute union
-- covers, exposed the rest (communication during which no compute ran). The window is the sum of
-- the rank's steady GPU step windows (nsa_rank_steps: the work launched in each step's host range,
-- from its first GPU start to the next step's, as diff/timeline.py times GPU steps); activity is
-- clipped to it. A rank without steady steps is measured over its whole GPU span, first start to
-- last end of any activity on its GPU (phase 'run', steps 0). Unions from running maxima of
-- earlier ends (nsa_rank_windows: gpu_timeline's, or one sorted pass per rank), never a pairing of
-- kernels with windows.
-- reads comm_ops, cuda_api, gpu_timeline, gpu_comm, ranks, steps
-- param run_id INTEGER = NULL: only this run; all runs when NULL.
-- param per VARCHAR = 'rank' one of ('rank', 'step'): 'rank' for one row per rank, 'step' for one row per rank and steady step.
-- col run_id INTEGER: the run (`runs.run_id`).
-- col rank INTEGER: the rank.
-- col report_id INTEGER: the report holding the rank.
-- col pid BIGINT: the rank's process (ranks.pid); NULL when the whole report is the rank.
-- col device_id INTEGER: the rank's GPU.
-- col phase VARCHAR: 'steady' (the steady steps' windows) or 'run' (no steady steps: the rank's whole GPU span).
-- col step INTEGER: the step's 0-based position in its series (steps.step); NULL on a per-rank row.
-- col number BIGINT: the step's number (`step 12` -> 12, steps.number); NULL on a per-rank row or without one.
-- col steps BIGINT: steady steps the row covers (1 per step row, 0 for phase 'run').
-- col steady_ns BIGINT: the window's length: the sum of the steps' GPU windows, or the span for phase 'run' (ns).
-- col compute_ns BIGINT: union of the non-communication kernels within the window (ns).
-- col comm_ns BIGINT: union of the communication kernels within the window (ns).
-- col overlapped_ns BIGINT: communication during which compute ran (ns).
-- col exposed_ns BIGINT: comm_ns - overlapped_ns: communication during which no compute ran (ns).
-- col overlapped_share DOUBLE: overlapped_ns / comm_ns (NULL without communication).
-- col exposed_share DOUBLE: exposed_ns / steady_ns: the share of the window lost to exposed communication.
WITH w AS (
    SELECT *
    FROM nsa_rank_windows($run_id)
    WHERE CASE WHEN $per IN ('rank', 'step') THEN true ELSE error('per must be ''rank'' or ''step'', got ''' || $per || '''') END
),
g AS (
    SELECT
        run_id,
        rank,
        any_value(report_id) AS report_id,
        any_value(pid) AS pid,
        any_value(device_id) AS device_id,
        phase,
        CASE WHEN $per = 'step' THEN step END AS step,
        CASE WHEN $per = 'step' THEN number END AS number,
        count(step) AS steps,
        sum(window_ns) AS steady_ns,
        sum(compute_ns) AS compute_ns,
        sum(comm_ns) AS comm_ns,
        sum(cc_ns) AS cc_ns
    FROM w
    GROUP BY run_id, rank, phase, CASE WHEN $per = 'step' THEN step END, CASE WHEN $per = 'step' THEN number END
)
SELECT
    run_id,
    rank,
    report_id,
    pid,
    device_id,
    phase,
    CAST(step AS INTEGER) AS step,
    CAST(number AS BIGINT) AS number,
    CAST(steps AS BIGINT) AS steps,
    CAST(steady_ns AS BIGINT) AS steady_ns,
    CAST(compute_ns AS BIGINT) AS compute_ns,
    CAST(comm_ns AS BIGINT) AS comm_ns,
    CAST(comm_ns + compute_ns - cc_ns AS BIGINT) AS overlapped_ns,
    CAST(cc_ns - compute_ns AS BIGINT) AS exposed_ns,
    (comm_ns + compute_ns - cc_ns) / nullif(comm_ns, 0) AS overlapped_share,
    (cc_ns - compute_ns) / nullif(steady_ns, 0) AS exposed_share
FROM g
ORDER BY run_id, rank, step NULLS FIRST
