"""scaling-loss: a job run at several world sizes loses step time as it grows."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ...units import dur, pct
from ..context import Context
from ..model import Finding, Threshold, rule
from ..runs import lowest_report, ranks_text, straggler
from ..thresholds import STRAGGLER_LAST_SHARE, STRAGGLER_LATE_SHARE

# Where the lost step time went (query scaling), in the words and advice of the finding.
_PARTS = {
    "lost_comm_ns": "more exposed communication",
    "lost_compute_ns": "slower compute",
    "lost_imbalance_ns": "more imbalance between the ranks' compute",
    "lost_other_ns": "the rest (GPU idle, copies)",
}
_FIX = {
    "lost_comm_ns": (
        "Communication grows with the world size and is not hidden: overlap it with backward (DDP: smaller "
        "bucket_cap_mb so the first all-reduce starts early, gradient_as_bucket_view=True; FSDP: "
        "forward_prefetch and backward_prefetch), reduce less often (gradient accumulation with no_sync()) and "
        "send fewer bytes (bf16 gradient compression hooks); across nodes, hybrid sharding keeps most traffic "
        "on NVLink. The exposed-communication finding on this run has the per-rank numbers."
    ),
    "lost_compute_ns": (
        "Each rank computes longer per step than in the base run: with weak scaling the work per rank should "
        "stay the same, so look for work that grows with the world size (optimizer or gradient-norm work over "
        "replicated state, padding to a global shape) and for slower GPUs (clocks, power and temperature with "
        "every GPU busy: nvidia-smi -q -d PERFORMANCE,CLOCK); with strong scaling each rank's share of the batch "
        "may be too small to fill its GPU: keep the per-rank batch (weak scaling) or use fewer GPUs. `nsa diff` "
        "of a rank's report in the base run and in this one shows which kernels grew."
    ),
    "lost_imbalance_ns": (
        "The ranks' compute per step diverges as the job grows, and every rank waits for the heaviest: balance "
        "the data (sequence-length bucketing or token-budget packing, shards sized by cost, pipeline stages "
        "split by measured time). The load-imbalance finding on this run names the heaviest rank."
    ),
    "lost_other_ns": (
        "The step grew by time that is neither compute nor communication: the GPUs idle (the host launches "
        "late, a data pipeline or a synchronisation that grows with the job, a straggler's host) or copy. "
        "See the gpu-idle and straggler-rank findings on this run's reports."
    ),
}


@rule(
    "scaling-loss",
    order=150,
    scope="run",
    needs=("kernel",),
    queries=("scaling", "rank_balance"),
    reads=("runs", "ranks"),
    severities=("warning", "critical"),
    thresholds=(
        Threshold(
            "scaling_efficiency_warning",
            0.90,
            "fraction",
            "Scaling efficiency at the largest world size below this is a warning.",
        ),
        Threshold(
            "scaling_efficiency_critical",
            0.75,
            "fraction",
            "Scaling efficiency at the largest world size below this is critical.",
        ),
        STRAGGLER_LAST_SHARE,
        STRAGGLER_LATE_SHARE,
    ),
)
def scaling_loss(ctx: Context, run_id: int) -> list[Finding]:
    """A job run at several world sizes loses efficiency as it grows.

    Anti-pattern: adding GPUs does not add throughput in proportion: communication grows with the
    world size and is not hidden, the ranks' compute diverges, or each rank computes longer (its
    GPU slower, work that grows with the job, or, in strong scaling, too little work per GPU to
    fill it). The runs compared are the runs of the same program in the workspace: runs whose
    names differ only where each has its own world size (`ddp_w2` and `ddp_w4`, `job_4gpu` and
    `job_8gpu`; not `ddp_w4_slow2`), or, when the user names several runs (run_rules' `run_id`
    given several ids), exactly those. Query scaling compares them with
    the smallest (weak scaling when the per-rank compute stayed, else strong), gives the
    efficiency and splits the step time lost against ideal scaling into exposed communication,
    slower compute, imbalance and the rest. The finding belongs to the run of the largest world
    size (ties: the latest run) and judges its efficiency.

    Fix: depends on where the lost time went; the finding names the largest part and what to
    change for it. When the largest run has a straggler (see straggler-rank) and the loss is
    mostly exposed communication or idle time, the other ranks' wait for it is much of that
    time, and the advice starts with the straggler.

    est_savings_ns: the step time lost against ideal scaling (step time - the base's step time,
    times base world / world in strong scaling) times the largest run's steady steps: what
    scaling as well as the base would give back. At most that run's steady time.
    """
    series = _series(ctx, run_id)
    if len(series) < 2:
        return []
    rows = ctx.query("scaling", run_ids=",".join(map(str, series)), mode="auto")
    measured = [r for r in rows if r.efficiency is not None and r.step_ns]
    if len({r.world_size for r in measured}) < 2:
        return []
    largest = max(measured, key=lambda r: (r.world_size, r.run_id))
    if largest.run_id != run_id:
        return []
    eff = float(largest.efficiency)
    warning, critical = ctx["scaling_efficiency_warning"], ctx["scaling_efficiency_critical"]
    if eff >= warning:
        return []
    severity = "critical" if eff < critical else "warning"
    base = next(r for r in measured if r.run_id == largest.base_run_id)
    label = ctx.run_label(run_id)
    unit = "rank-steps/s" if largest.mode == "weak" else "steps/s"
    through = "; ".join(
        f"{r.world_size} {'rank' if r.world_size == 1 else 'ranks'}: {r.throughput:.3g} {unit} "
        f"({ctx.run_label(int(r.run_id))})"
        for r in sorted(measured, key=lambda r: (r.world_size, r.run_id))
    )
    parts = {k: float(getattr(largest, k) or 0.0) for k in _PARTS}
    top = max(parts, key=lambda k: parts[k])
    lost = float(largest.lost_ns)
    steps = int(largest.steps or 0)
    savings = min(lost * steps, float(largest.step_ns) * steps)
    ranks = sorted(int(r.rank) for r in ctx.run_ranks(run_id))
    split = ", ".join(
        f"{dur(v)} {_PARTS[k]}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v > 0
    )
    gained = [
        f"{dur(-v)} less {_PARTS[k].removeprefix('more ').removeprefix('slower ')}"
        for k, v in parts.items()
        if v < 0
    ]
    if split and gained:  # the parts add up to the loss: say what went the other way
        split += ", against " + " and ".join(gained).replace(
            "less the rest (GPU idle, copies)", "less of the rest (GPU idle, copies)"
        )
    message = (
        f"{label[0].upper()}{label[1:]}, {ranks_text(ranks)}, scales at {pct(eff)} efficiency against "
        f"{ctx.run_label(int(base.run_id))} ({largest.mode} scaling from {base.world_size} to {largest.world_size} "
        f"ranks; speedup {float(largest.speedup):.2f}x). Throughput per world size: {through}. A steady step "
        f"takes {dur(largest.step_ns)} where ideal scaling would take {dur(largest.ideal_ns)}: {dur(lost)} lost "
        f"per step" + (f": {split}" if split else "") + "."
    )
    if sum(v > 0 for v in parts.values()) > 1:
        message += f" The largest part is {_PARTS[top]}."
    recommendation = _FIX[top]
    late = straggler(ctx, run_id)
    if late is not None and top in ("lost_comm_ns", "lost_other_ns"):
        who = ranks_text([late.rank])
        message += (
            f" {who[0].upper()}{who[1:]} is a straggler in this run ({dur(late.late_ns)} late per step): the other "
            f"ranks' wait for it, {dur(late.others_wait_ns)} per step together, is counted as their communication."
        )
        recommendation = (
            f"Fix the straggler, {who}, first (see straggler-rank): the other ranks wait for it inside the "
            f"collectives. Then: {recommendation}"
        )
    title = f"Scaling efficiency {pct(eff)} at {largest.world_size} ranks in {label}, mostly {_PARTS[top]}"
    ev: dict[str, Any] = {
        "run_id": run_id,
        "base_run_id": int(base.run_id),
        "mode": largest.mode,
        "efficiency": eff,
        "speedup": float(largest.speedup),
        "step_ns": float(largest.step_ns),
        "ideal_ns": float(largest.ideal_ns),
        "lost_ns": lost,
        **{k: v for k, v in parts.items()},
        "largest_part": top,
        "steps": steps,
        "straggler_rank": late.rank if late is not None else None,
        "runs": [
            {
                "run_id": int(r.run_id),
                "run": r.run,
                "world_size": int(r.world_size),
                "step_ns": float(r.step_ns),
                "throughput": float(r.throughput),
                "efficiency": float(r.efficiency),
            }
            for r in sorted(measured, key=lambda r: (r.world_size, r.run_id))
        ],
    }
    return [
        Finding(
            "scaling-loss", severity, lowest_report(ctx, run_id), title, message, recommendation, ev, int(savings),
            run_id=run_id, ranks=ranks,
        )
    ]  # fmt: skip


def same_program(a: str, a_world: int | None, b: str, b_world: int | None) -> bool:
    """True when two run names differ only by their world sizes: the same text around the same
    numbers, except numbers that are each run's own world size (`ddp_w2` / `ddp_w4`,
    `h100x2_ddp_w2` / `h100x4_ddp_w4`, `resnet_v1_w1` / `resnet_v1_w2`; not `resnet50_w4` /
    `resnet101_w8`)."""
    a_parts, b_parts = _DIGITS.split(a), _DIGITS.split(b)
    if a_parts != b_parts:
        return False
    for x, y in zip(_DIGITS.findall(a), _DIGITS.findall(b), strict=True):
        if x != y and not (int(x) == a_world and int(y) == b_world):
            return False
    return True


_DIGITS = re.compile(r"\d+")


def _series(ctx: Context, run_id: int) -> list[int]:
    """The runs of the same program as `run_id`: those the user named (two or more), else the
    workspace's runs with the same name stem."""
    named = ctx.run_ids or []
    if len(named) >= 2 and run_id in named:
        return list(named)
    return program_series(ctx.all_runs(), run_id)


def program_series(runs: Iterable[tuple[Any, ...]], run_id: int) -> list[int]:
    """The run ids among `runs` ((run_id, name, world_size, ranks_seen) rows, as table `runs`
    orders them) of the same program as `run_id` (`same_program`), itself included; [] when it
    is not among them."""
    rows = [(int(r), str(n), w or seen) for r, n, w, seen in runs]
    me = next((r for r in rows if r[0] == run_id), None)
    if me is None:
        return []
    return sorted(r for r, name, world in rows if same_program(me[1], me[2], name, world))
