-- Arrival skew of each collective matched across a run's ranks (the `collectives` view: the same
-- channel and seq on every rank, times on the run's clock, the rank's GPU only): when the first
-- and the last rank arrived (started their kernel), how far apart the ends were, who came last,
-- and how long the others waited for it inside the collective (docs/runs.md). latency_ns is the
-- shortest duration among the ranks (the last to arrive waits least), the bandwidths come from it
-- as nccl-tests computes them: algbw = message_bytes / latency, busbw = algbw x 2(n-1)/n for
-- all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 for broadcast, reduce,
-- send_recv, send and recv (n: group_size, else the ranks seen; NULL for other ops and without
-- message_bytes). op, dtype, message_bytes and group_size are the lowest rank's. Only collectives
-- seen on at least two ranks are listed: one seen on a single rank (a one-GPU run, a rank whose
-- capture started late or stopped early, a channel only one rank uses) has nothing to compare
-- and is left out. With per 'rank', one row per collective and rank adds the rank's own times.
-- Clock alignment limits what a skew means: runs.clock_uncertainty_ns says how far apart two
-- ranks' clocks may still be.
-- reads collectives, ranks
-- param run_id INTEGER = NULL: only this run; all runs when NULL.
-- param per VARCHAR = 'collective' one of ('collective', 'rank'): 'collective' for one row per collective, 'rank' for one row per collective and rank.
-- col run_id INTEGER: the run (`runs.run_id`).
-- col channel VARCHAR: what the ops are ordered on (`comm_ops.channel`: the process group, else the stream).
-- col seq BIGINT: the op's position in its channel: with channel, the collective.
-- col op VARCHAR: the collective: all_reduce, all_gather, reduce_scatter, broadcast, ...
-- col dtype VARCHAR: element type (NULL unknown).
-- col message_bytes BIGINT: bytes the collective moves per rank (byte); NULL unknown.
-- col group_size INTEGER: ranks in the communicator, as the trace records it (NULL unknown).
-- col ranks BIGINT: ranks the collective was seen on.
-- col first_arrival_ns BIGINT: the earliest rank's kernel start, run clock (ns).
-- col last_arrival_ns BIGINT: the latest rank's kernel start, run clock (ns).
-- col arrival_skew_ns BIGINT: last_arrival_ns - first_arrival_ns (ns).
-- col end_skew_ns BIGINT: latest end - earliest end across the ranks (ns); a few microseconds plus clock error.
-- col last_rank INTEGER: the rank that arrived last (ties: the lowest rank).
-- col latency_ns BIGINT: the shortest duration among the ranks (ns).
-- col algbw_gbps DOUBLE: message_bytes / latency_ns (GB/s, 1e9 byte/s).
-- col busbw_gbps DOUBLE: algbw_gbps times the op's nccl-tests factor (GB/s, 1e9 byte/s).
-- col rank INTEGER: the rank (per 'rank'); NULL on a per-collective row.
-- col report_id INTEGER: the rank's report (per 'rank'); NULL on a per-collective row.
-- col start_ns BIGINT: the rank's arrival: its kernel start, run clock (ns); NULL on a per-collective row.
-- col end_ns BIGINT: the rank's kernel end, run clock (ns); NULL on a per-collective row.
-- col duration_ns BIGINT: end_ns - start_ns (ns); NULL on a per-collective row.
-- col arrival_delay_ns BIGINT: start_ns - first_arrival_ns: how late the rank came (ns); NULL on a per-collective row.
-- col wait_ns DOUBLE: last_arrival_ns - start_ns: the rank's wait inside the collective for the last one (ns); per collective, the mean over its ranks.
WITH c AS MATERIALIZED (
    SELECT *
    FROM nsa_collective_ranks($run_id)
    WHERE CASE WHEN $per IN ('collective', 'rank') THEN true
               ELSE error('per must be ''collective'' or ''rank'', got ''' || $per || '''') END
),
one AS (
    SELECT
        run_id,
        channel,
        seq,
        arg_min(op, rank) AS op,
        arg_min(dtype, rank) AS dtype,
        arg_min(message_bytes, rank) AS message_bytes,
        arg_min(group_size, rank) AS group_size,
        any_value(ranks) AS ranks,
        any_value(first_arrival_ns) AS first_arrival_ns,
        any_value(last_arrival_ns) AS last_arrival_ns,
        any_value(last_end_ns) - any_value(first_end_ns) AS end_skew_ns,
        any_value(last_rank) AS last_rank,
        any_value(latency_ns) AS latency_ns,
        avg(last_arrival_ns - start_ns) AS wait_ns
    FROM c
    GROUP BY run_id, channel, seq
),
bw AS (
    SELECT
        *,
        message_bytes / nullif(latency_ns, 0) AS algbw_gbps,
        CASE
            WHEN op = 'all_reduce' THEN 2.0 * (coalesce(group_size, ranks) - 1) / coalesce(group_size, ranks)
            WHEN op IN ('all_gather', 'reduce_scatter', 'all_to_all')
                THEN (coalesce(group_size, ranks) - 1) / coalesce(group_size, ranks)
            WHEN op IN ('broadcast', 'reduce', 'send_recv', 'send', 'recv') THEN 1.0
        END AS factor
    FROM one
),
per_collective AS (
    SELECT
        run_id, channel, seq, op, dtype, message_bytes, group_size, ranks, first_arrival_ns, last_arrival_ns,
        end_skew_ns, last_rank, latency_ns, algbw_gbps, algbw_gbps * factor AS busbw_gbps, wait_ns
    FROM bw
)
SELECT
    p.run_id,
    p.channel,
    p.seq,
    p.op,
    p.dtype,
    p.message_bytes,
    p.group_size,
    CAST(p.ranks AS BIGINT) AS ranks,
    p.first_arrival_ns,
    p.last_arrival_ns,
    p.last_arrival_ns - p.first_arrival_ns AS arrival_skew_ns,
    p.end_skew_ns,
    p.last_rank,
    p.latency_ns,
    CAST(p.algbw_gbps AS DOUBLE) AS algbw_gbps,
    CAST(p.busbw_gbps AS DOUBLE) AS busbw_gbps,
    c.rank,
    c.report_id,
    c.start_ns,
    c.end_ns,
    c.duration_ns,
    c.start_ns - p.first_arrival_ns AS arrival_delay_ns,
    CAST(CASE WHEN $per = 'rank' THEN p.last_arrival_ns - c.start_ns ELSE p.wait_ns END AS DOUBLE) AS wait_ns
FROM per_collective AS p
LEFT JOIN c ON $per = 'rank' AND c.run_id = p.run_id AND c.channel = p.channel AND c.seq = p.seq
ORDER BY p.run_id, p.first_arrival_ns, p.channel, p.seq, c.rank
