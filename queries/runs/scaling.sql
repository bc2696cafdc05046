-- How a job scales across runs of different world sizes, against the smallest one (the base):
-- throughput, speedup, efficiency, and the step time lost against ideal scaling split into
-- communication, compute, imbalance and the rest. Each run's numbers come from its ranks' steady
-- steps (nsa_rank_windows, as rank_balance measures them): step_ns is the median over ranks of
-- each rank's mean GPU step time (its steady windows' total over their count: the time the
-- program takes per step, as its own throughput counts it; GPU windows before the first one no
-- longer than 1.5x the rank's median are warm-up and left out), compute_ns and exposed_comm_ns the means over ranks of the
-- per-step values, imbalance_ns the slowest rank's compute minus that mean. Weak scaling (each
-- rank keeps its batch) is ideal when the step time stays the base's; strong scaling (the global
-- batch is split) when it shrinks by base world / world. mode 'auto' picks weak when the
-- per-rank compute per step of the run with the largest world size is at least 0.75x the base's
-- (the work per rank stayed), else strong: one mode for every row. With f = 1 (weak) or base
-- world / world (strong) the ideal step is f x base step_ns, and lost_ns = step_ns - ideal splits
-- into lost_compute_ns (compute_ns - f x base), lost_imbalance_ns (imbalance_ns - f x base),
-- lost_comm_ns ((exposed_comm_ns - imbalance_ns) - f x base's: the ranks that wait for the
-- slowest one's compute wait inside a collective, so that much of the exposed communication is
-- imbalance and is counted there, once) and lost_other_ns, the remainder (GPU idle, copies,
-- clock): the four add up to lost_ns. Runs without steady steps are listed with NULL numbers.
-- reads comm_ops, cuda_api, gpu_timeline, gpu_comm, ranks, runs, steps
-- param run_ids VARCHAR = NULL: comma-separated run ids to compare (`1,2,3`); all runs when NULL.
-- param mode VARCHAR = 'auto' one of ('auto', 'weak', 'strong'): 'weak' (each rank keeps its batch), 'strong' (the global batch is split) or 'auto'.
-- col run_id INTEGER: the run (`runs.run_id`).
-- col run VARCHAR: the run's name.
-- col world_size INTEGER: ranks in the job (runs.world_size, else the ranks seen).
-- col ranks BIGINT: ranks with steady steps measured.
-- col steps BIGINT: steady steps of the rank with the fewest.
-- col mode VARCHAR: 'weak' or 'strong': how throughput, efficiency and the ideal are computed.
-- col step_ns DOUBLE: median over ranks of each rank's mean steady GPU step time (ns).
-- col compute_ns DOUBLE: compute per step, mean over ranks (ns).
-- col exposed_comm_ns DOUBLE: exposed communication per step, mean over ranks (ns).
-- col imbalance_ns DOUBLE: the slowest rank's compute per step minus the mean over ranks (ns).
-- col throughput DOUBLE: weak: rank-steps/s (world_size / step time); strong: steps/s (1 / step time).
-- col base_run_id INTEGER: the run compared against: the smallest world size (ties: the lowest run id).
-- col speedup DOUBLE: throughput / the base's throughput.
-- col efficiency DOUBLE: weak: base step_ns / step_ns; strong: base step_ns x base world / (step_ns x world_size).
-- col ideal_ns DOUBLE: the step time of ideal scaling from the base: f x base step_ns (ns).
-- col lost_ns DOUBLE: step_ns - ideal_ns: step time lost against ideal scaling (ns).
-- col lost_comm_ns DOUBLE: the part from more exposed communication, net of imbalance (ns).
-- col lost_compute_ns DOUBLE: the part from slower compute (ns).
-- col lost_imbalance_ns DOUBLE: the part from more imbalance between the ranks' compute (ns).
-- col lost_other_ns DOUBLE: the rest: lost_ns minus the three parts (ns).
WITH ids AS (SELECT list_transform(string_split($run_ids, ','), x -> TRY_CAST(trim(x) AS INTEGER)) AS ids),
sel AS (
    SELECT r.run_id, r.name AS run, coalesce(r.world_size, r.ranks_seen) AS world_size
    FROM runs AS r
    CROSS JOIN ids
    WHERE ($run_ids IS NULL OR list_contains(ids.ids, r.run_id))
      AND CASE WHEN $mode NOT IN ('auto', 'weak', 'strong')
                   THEN error('mode must be ''auto'', ''weak'' or ''strong'', got ''' || $mode || '''')
               WHEN len(list_filter(ids.ids, x -> x IS NULL)) > 0
                   THEN error('run_ids wants run ids separated by commas (1,2,3), got ''' || $run_ids || '''')
               ELSE true END
),
med AS (
    SELECT w.*, median(w.window_ns) OVER (PARTITION BY w.run_id, w.rank) AS median_ns
    FROM nsa_rank_windows(NULL) AS w
    SEMI JOIN sel USING (run_id)
    WHERE w.phase = 'steady'
),
settled AS (
    -- GPU-side warm-up: windows before the first one no longer than 1.5x the rank's median
    -- (the host's steady steps can still queue slow first GPU steps: allocator, NCCL set-up)
    SELECT *, min(CASE WHEN window_ns <= 1.5 * median_ns THEN step END) OVER (PARTITION BY run_id, rank) AS first_step
    FROM med
),
rk AS (
    SELECT
        run_id,
        rank,
        count(*) AS steps,
        sum(window_ns) / count(*) AS step_ns,
        sum(compute_ns) / count(*) AS compute_ns,
        sum(cc_ns - compute_ns) / count(*) AS exposed_ns
    FROM settled
    WHERE step >= first_step
    GROUP BY run_id, rank
),
per_run AS (
    SELECT
        run_id,
        count(*) AS ranks,
        min(steps) AS steps,
        median(step_ns) AS step_ns,
        avg(compute_ns) AS compute_ns,
        avg(exposed_ns) AS exposed_comm_ns,
        max(compute_ns) - avg(compute_ns) AS imbalance_ns
    FROM rk
    GROUP BY run_id
),
m AS MATERIALIZED (
    SELECT sel.*, p.ranks, p.steps, p.step_ns, p.compute_ns, p.exposed_comm_ns, p.imbalance_ns
    FROM sel
    LEFT JOIN per_run AS p USING (run_id)
),
base AS (SELECT * FROM m WHERE step_ns IS NOT NULL ORDER BY world_size, run_id LIMIT 1),
largest AS (SELECT * FROM m WHERE step_ns IS NOT NULL ORDER BY world_size DESC, run_id DESC LIMIT 1),
how AS (
    SELECT
        b.run_id AS base_run_id,
        b.world_size AS base_world,
        b.step_ns AS base_step,
        b.compute_ns AS base_compute,
        b.exposed_comm_ns AS base_exposed,
        b.imbalance_ns AS base_imbalance,
        CASE WHEN $mode <> 'auto' THEN $mode WHEN l.compute_ns >= 0.75 * b.compute_ns THEN 'weak' ELSE 'strong' END
            AS mode
    FROM base AS b
    CROSS JOIN largest AS l
),
f AS (
    SELECT
        m.*,
        h.*,
        CASE WHEN m.step_ns IS NULL THEN NULL WHEN h.mode = 'weak' THEN 1.0 ELSE h.base_world / m.world_size END AS f,
        CASE WHEN h.mode = 'weak' THEN m.world_size ELSE 1 END * 1e9 / m.step_ns AS throughput,
        CASE WHEN h.mode = 'weak' THEN h.base_world ELSE 1 END * 1e9 / h.base_step AS base_throughput
    FROM m
    LEFT JOIN how AS h ON true
)
SELECT
    run_id,
    run,
    CAST(world_size AS INTEGER) AS world_size,
    CAST(ranks AS BIGINT) AS ranks,
    CAST(steps AS BIGINT) AS steps,
    CASE WHEN step_ns IS NOT NULL THEN mode END AS mode,
    CAST(step_ns AS DOUBLE) AS step_ns,
    CAST(compute_ns AS DOUBLE) AS compute_ns,
    CAST(exposed_comm_ns AS DOUBLE) AS exposed_comm_ns,
    CAST(imbalance_ns AS DOUBLE) AS imbalance_ns,
    CAST(throughput AS DOUBLE) AS throughput,
    CASE WHEN step_ns IS NOT NULL THEN base_run_id END AS base_run_id,
    CAST(throughput / base_throughput AS DOUBLE) AS speedup,
    CAST(f * base_step / step_ns AS DOUBLE) AS efficiency,
    CAST(f * base_step AS DOUBLE) AS ideal_ns,
    CAST(step_ns - f * base_step AS DOUBLE) AS lost_ns,
    CAST((exposed_comm_ns - imbalance_ns) - f * (base_exposed - base_imbalance) AS DOUBLE) AS lost_comm_ns,
    CAST(compute_ns - f * base_compute AS DOUBLE) AS lost_compute_ns,
    CAST(imbalance_ns - f * base_imbalance AS DOUBLE) AS lost_imbalance_ns,
    CAST(
        (step_ns - f * base_step) - ((exposed_comm_ns - imbalance_ns) - f * (base_exposed - base_imbalance))
        - (compute_ns - f * base_compute) - (imbalance_ns - f * base_imbalance) AS DOUBLE
    ) AS lost_other_ns
FROM f
ORDER BY world_size, run_id
