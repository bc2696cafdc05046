"""load-imbalance: the ranks of a run do unequal amounts of compute per step."""

from __future__ import annotations

from typing import Any

from ...units import dur, pct
from ..context import Context
from ..model import Finding, Threshold, rule, severity_for
from ..runs import median, ranks_text, straggler
from ..thresholds import STRAGGLER_LAST_SHARE, STRAGGLER_LATE_SHARE


@rule(
    "load-imbalance",
    order=140,
    scope="run",
    needs=("kernel",),
    queries=("rank_balance",),
    reads=("runs", "ranks"),
    severities=("warning", "critical"),
    thresholds=(
        Threshold(
            "imbalance_ratio_warning",
            1.10,
            "ratio",
            "The heaviest rank's compute per step over the median rank's that is a warning.",
        ),
        Threshold(
            "imbalance_ratio_critical",
            1.25,
            "ratio",
            "The heaviest rank's compute per step over the median rank's that is critical.",
        ),
        STRAGGLER_LAST_SHARE,
        STRAGGLER_LATE_SHARE,
    ),
)
def load_imbalance(ctx: Context, run_id: int) -> list[Finding]:
    """The ranks of a run compute unequal amounts per step: the heaviest sets the pace.

    Anti-pattern: data-parallel ranks get batches of unequal cost (variable-length sequences
    padded or packed differently, shards split by sample count when samples differ in cost),
    or pipeline stages hold unequal shares of the model, so one rank computes longer each
    step and the others wait for it at the next collective. Compute is the union of a rank's
    non-communication kernels (docs/runs.md), a mean per steady step (query rank_balance);
    severity follows the heaviest rank's compute over the median rank's. When the heaviest
    rank is also the run's straggler, this is the cause the straggler-rank finding sees: the
    two are one fix and their savings are not added.

    Fix: Give every rank the same work per step: bucket samples by sequence length (or pack
    sequences to a fixed token budget per rank) so each rank's batch holds the same number of
    tokens; shard by cost, not by sample count (uneven shards sized so each rank's work
    matches); in pipeline parallelism, split the stages by measured time, not by layer count
    (the first and last stages also hold the embedding and the loss); in mixture-of-experts
    models, balance the experts' load (auxiliary loss, capacity factor).

    est_savings_ns: (heaviest rank's compute per step - the median rank's) times the heaviest
    rank's steady steps: what the others wait for it each step, if balancing brought it to the
    median. At most the heaviest rank's steady time.
    """
    rows = [r for r in ctx.run_query("rank_balance", run_id) if r.compute_ns is not None]
    if len(rows) < 2:
        return []
    compute = {int(r.rank): float(r.compute_ns) for r in rows}
    mid = median(list(compute.values()))
    heavy = max(compute, key=lambda k: (compute[k], -k))
    if mid <= 0:
        return []
    ratio = compute[heavy] / mid
    if ratio < ctx["imbalance_ratio_warning"]:
        return []
    severity = severity_for(ratio, ctx["imbalance_ratio_warning"], ctx["imbalance_ratio_critical"])
    row = next(r for r in rows if r.rank == heavy)
    steps = int(row.steps or 0)
    step_ns = float(row.step_ns or 0)
    savings = min((compute[heavy] - mid) * steps, step_ns * steps)
    label = ctx.run_label(run_id)
    light = min(compute, key=lambda k: (compute[k], k))
    late = straggler(ctx, run_id)
    same = late is not None and late.rank == heavy
    message = (
        f"In {label}, {ranks_text([heavy])} computes {dur(compute[heavy])} per steady step, {ratio:.2f}x the "
        f"median rank's {dur(mid)} (lightest: {ranks_text([light])}, {dur(compute[light])}); "
        f"{pct((compute[heavy] - mid) / step_ns if step_ns else None)} of its {dur(step_ns)} step is compute the "
        f"median rank does not have, which the other ranks wait for at the next collective. Compute per step: "
        + ", ".join(f"rank {k} {dur(v)}" for k, v in sorted(compute.items()))
        + "."
    )
    if same:
        message += (
            f" {ranks_text([heavy]).capitalize()} is also the straggler the other ranks wait for: the "
            "straggler-rank finding and this one are one fix, not two savings."
        )
    title = f"Load imbalance in {label}: {ranks_text([heavy])} computes {ratio:.2f}x the median rank per step"
    ev: dict[str, Any] = {
        "run_id": run_id,
        "heaviest_rank": heavy,
        "lightest_rank": light,
        "compute_ns": {str(k): v for k, v in sorted(compute.items())},
        "median_compute_ns": mid,
        "ratio": ratio,
        "steps": steps,
        "step_ns": step_ns,
        "straggler_rank": late.rank if late is not None else None,
    }
    return [
        Finding(
            "load-imbalance", severity, int(row.report_id), title, message, load_imbalance.fix, ev, int(savings),
            same_saving_as="straggler-rank" if same else None, run_id=run_id, ranks=[heavy],
        )
    ]  # fmt: skip
