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
    """Per source ('nvtx', 'host_wait', 'kernel', 'host_gap'): the names that took longer per
    steady step on `rank` than on the median of the other ranks (query rank_activity), the largest
    excess first."""
    rows: Rows = ctx.run_query("rank_activity", run_id)
    per_step: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    ranks: set[int] = {int(r.rank) for r in ctx.run_ranks(run_id)}
    for r in rows:
        if r.steps:
            per_step[(str(r.source), str(r.name))][int(r.rank)] = float(r.per_step_ns)
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
