"""What the run rules share: naming runs and ranks, the straggler test, and what a rank did in its
steady steps compared with the other ranks.

A run is the ranks of one job (docs/runs.md). Its rules read the queries of queries/runs/
(`ctx.run_query`); the straggler test is here because two rules ask it: straggler-rank reports
the straggler, exposed-communication asks whether the exposed time it found is the straggler's
doing (the other ranks waiting inside collectives for it) before it blames overlap.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .context import Context, Rows


def ranks_text(ranks: Iterable[int]) -> str:
    """'rank 3', 'ranks 0 and 2', 'ranks 0, 1 and 5', 'ranks 0-7' (three or more in a row)."""
    rs = sorted({int(r) for r in ranks})
    if not rs:
        return "no rank"
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) >= 3 and rs[-1] - rs[0] == len(rs) - 1:
        return f"ranks {rs[0]}-{rs[-1]}"
    return "ranks " + ", ".join(map(str, rs[:-1])) + f" and {rs[-1]}"


def median(values: Sequence[float]) -> float:
    """The median (the mean of the two middle values for an even count); 0 for none."""
    return float(statistics.median(values)) if values else 0.0


def lowest_report(ctx: Context, run_id: int) -> int:
    """The run's lowest report id: where a finding about the whole run is filed."""
    run = ctx.run(run_id)
    if run is not None and run.report_ids:
        return int(min(run.report_ids))
    return int(min(r.report_id for r in ctx.run_ranks(run_id)))


@dataclass(frozen=True)
class Straggler:
    """The rank that arrives last at the run's collectives, per rank_balance (per-step means)."""

    rank: int
    report_id: int
    last_share: float  # share of the collectives it arrived last at
    late_ns: float  # how late it arrives, per steady step
    step_ns: float  # its steady step, mean
    steps: int  # its steady steps
    others_wait_ns: float  # what the other ranks wait inside collectives per step, summed
    wait_by_rank: dict[int, float]  # each other rank's wait per step

    @property
    def late_share(self) -> float:
        return self.late_ns / self.step_ns if self.step_ns else 0.0


def straggler(ctx: Context, run_id: int) -> Straggler | None:
    """The run's straggler, or None: the rank last to arrive at the most collectives, when it is
    last at `straggler_last_share` of them or more and arrives `straggler_late_share` of its
    step late or more (thresholds of straggler-rank, read by exposed-communication too)."""
    balance = ctx.run_query("rank_balance", run_id)
    if len(balance) < 2:
        return None
    worst = max(balance, key=lambda r: (r.last_share or 0.0, r.late_ns or 0.0, -r.rank))
    share = float(worst.last_share or 0.0)
    late = float(worst.late_ns or 0.0)
    step = float(worst.step_ns or 0.0)
    if share < ctx["straggler_last_share"] or not step or late / step < ctx["straggler_late_share"]:
        return None
    waits = {int(r.rank): float(r.wait_ns or 0.0) for r in balance if r.rank != worst.rank}
    return Straggler(
        rank=int(worst.rank),
        report_id=int(worst.report_id),
        last_share=share,
        late_ns=late,
        step_ns=step,
        steps=int(worst.steps or 0),
        others_wait_ns=sum(waits.values()),
        wait_by_rank=waits,
    )


# What each rank did in its steady steps, per source and name: the time of its NVTX ranges
# inside its steps (not the step ranges themselves), of the host waits of the thread that runs
# its steps (the thread of the step's NVTX range; every thread of the process for kernel-pattern
# steps), clipped to its steps, and of its compute kernels (not comm_ops: the match
# nsa_rank_activity makes) that start between its first steady step's start and its last one's
# end. `steps` is the rank's steady steps, to take means per step. A rank's steps and rows are as
# queries/runs/_macros.sql takes them: its report's rows, of its process when ranks.pid is set
# (else of the steps' process), kernels of its GPU; of several step series, the one with the most
# steady steps.
RANK_ACTIVITY_SQL = """
WITH rk AS (
    SELECT rank, report_id, pid, device_id FROM ranks WHERE run_id = $run
),
rs AS (
    SELECT rk.rank, rk.report_id, coalesce(rk.pid, s.pid) AS pid, rk.device_id, s.series, s.start_ns, s.end_ns
    FROM rk
    JOIN steps AS s ON s.report_id = rk.report_id
    WHERE s.steady AND CASE WHEN s.source = 'kernels' THEN s.device_id = rk.device_id
                            ELSE rk.pid IS NULL OR s.pid = rk.pid END
),
pick AS (
    SELECT rank, arg_min(series, (-n, series)) AS series
    FROM (SELECT rank, series, count(*) AS n FROM rs GROUP BY ALL)
    GROUP BY rank
),
st AS (SELECT rs.* FROM rs SEMI JOIN pick USING (rank, series)),
n AS (
    SELECT rank, any_value(report_id) AS report_id, any_value(pid) AS pid, any_value(device_id) AS device_id,
           count(*) AS steps, min(start_ns) AS lo, max(end_ns) AS hi
    FROM st
    GROUP BY rank
),
step_thread AS (
    SELECT st.rank, st.start_ns, min(v.tid) AS tid
    FROM st
    JOIN nvtx_ranges AS v
        ON v.report_id = st.report_id AND (st.pid IS NULL OR v.pid = st.pid)
        AND v.start_ns = st.start_ns AND v.end_ns = st.end_ns
    GROUP BY ALL
),
phases AS (
    SELECT st.rank, 'nvtx' AS source, coalesce(v.base_name, v.name) AS name, sum(v.duration_ns) AS total_ns
    FROM st
    JOIN nvtx_ranges AS v
        ON v.report_id = st.report_id AND (st.pid IS NULL OR v.pid = st.pid)
        AND v.start_ns >= st.start_ns AND v.end_ns <= st.end_ns
    WHERE NOT (v.start_ns = st.start_ns AND v.end_ns = st.end_ns)
    GROUP BY ALL
),
waits AS (
    SELECT st.rank, 'host_wait' AS source, w.name,
        sum(least(w.end_ns, st.end_ns) - greatest(w.start_ns, st.start_ns)) AS total_ns
    FROM st
    LEFT JOIN step_thread AS t USING (rank, start_ns)
    JOIN host_waits AS w
        ON w.report_id = st.report_id AND (st.pid IS NULL OR w.pid = st.pid)
        AND (t.tid IS NULL OR w.tid = t.tid)
        AND w.start_ns < st.end_ns AND w.end_ns > st.start_ns
    GROUP BY ALL
),
kern AS (
    SELECT n.rank, 'kernel' AS source, k.name, sum(k.duration_ns) AS total_ns
    FROM n
    JOIN kernels AS k
        ON k.report_id = n.report_id AND k.device_id = n.device_id AND (n.pid IS NULL OR k.pid = n.pid)
        AND k.start_ns >= n.lo AND k.start_ns < n.hi
    ANTI JOIN comm_ops AS c
        ON c.report_id = k.report_id AND c.device_id = k.device_id AND c.start_ns = k.start_ns
        AND c.stream_id IS NOT DISTINCT FROM k.stream_id
    GROUP BY ALL
),
-- PyTorch profiler traces: host time of the step's thread that no recorded op covers (Python
-- between torch calls: data loading, sleeps, logging), per step: the step minus the union of the
-- thread's ops and annotations inside it
host_ops AS (
    SELECT st.rank, st.start_ns AS s0, st.end_ns AS s1,
           greatest(o.start_ns, st.start_ns) AS a, least(o.end_ns, st.end_ns) AS b
    FROM st
    JOIN step_thread AS t USING (rank, start_ns)
    JOIN cpu_ops AS o
        ON o.report_id = st.report_id AND o.pid = st.pid AND o.tid = t.tid
        AND o.start_ns < st.end_ns AND o.end_ns > st.start_ns
    WHERE NOT (o.start_ns <= st.start_ns AND o.end_ns >= st.end_ns)
),
covered AS (
    SELECT rank, s0, s1, sum(greatest(0, b - greatest(a, coalesce(prev, a)))) AS covered_ns
    FROM (
        SELECT *, max(b) OVER (PARTITION BY rank, s0 ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
        FROM host_ops
    )
    GROUP BY rank, s0, s1
),
gaps AS (
    SELECT rank, 'host_gap' AS source, 'host time outside recorded ops' AS name, sum(s1 - s0 - covered_ns) AS total_ns
    FROM covered
    GROUP BY rank
)
SELECT a.rank, a.source, a.name, CAST(a.total_ns AS BIGINT) AS total_ns, n.steps
FROM (SELECT * FROM phases UNION ALL SELECT * FROM waits UNION ALL SELECT * FROM kern UNION ALL SELECT * FROM gaps) AS a
JOIN n USING (rank)
ORDER BY a.rank, a.source, a.name
"""
# The tables RANK_ACTIVITY_SQL reads (a rule that runs it lists them in `reads`).
RANK_ACTIVITY_READS = (
    "ranks",
    "steps",
    "nvtx_ranges",
    "host_waits",
    "kernel_rows",
    "kernel_names",
    "comm_ops",
    "cpu_ops",
)


@dataclass(frozen=True)
class Excess:
    """A name in a rank's steady steps that took longer per step than on the median other rank."""

    source: str  # 'nvtx' (a phase), 'host_wait', 'kernel' or 'host_gap' (untraced host time)
    name: str
    mine_ns: float  # per step, on the rank
    median_ns: float  # per step, the median of the other ranks (0 where a rank has none)

    @property
    def excess_ns(self) -> float:
        return self.mine_ns - self.median_ns


def excesses(ctx: Context, run_id: int, rank: int) -> dict[str, list[Excess]]:
    """Per source ('nvtx', 'host_wait', 'kernel'): the names that took longer per steady step
    on `rank` than on the median of the other ranks, the largest excess first."""
    rows: Rows = ctx.run_sql("rank_activity", RANK_ACTIVITY_SQL, run_id)
    per_step: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    ranks: set[int] = {int(r.rank) for r in ctx.run_ranks(run_id)}
    for r in rows:
        if r.steps:
            per_step[(str(r.source), str(r.name))][int(r.rank)] = float(r.total_ns) / int(r.steps)
    others = sorted(ranks - {rank})
    out: dict[str, list[Excess]] = defaultdict(list)
    for (source, name), by_rank in per_step.items():
        mine = by_rank.get(rank, 0.0)
        ref = median([by_rank.get(o, 0.0) for o in others])
        if mine > ref:
            out[source].append(Excess(source, name, mine, ref))
    for found in out.values():
        found.sort(key=lambda e: (-e.excess_ns, e.name))
    return dict(out)


def per_rank(rows: Rows, column: str) -> dict[int, Any]:
    """{rank: value of column} of a query's rows (one row per rank)."""
    return {int(r.rank): getattr(r, column) for r in rows}
