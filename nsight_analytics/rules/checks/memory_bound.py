"""memory-bound: a heavy kernel is bound by memory throughput (ncu speed of light)."""

from __future__ import annotations

from .. import ncu
from ..context import Context
from ..model import Finding, Threshold, rule
from ..thresholds import HEAVY_KERNEL_SHARE, MAX_KERNEL_FINDINGS


@rule(
    "memory-bound",
    order=50,
    needs=("ncu_metrics",),
    queries=("speed_of_light", "kernel_weights"),
    severities=("info", "warning"),
    thresholds=(
        Threshold(
            "sol_busy_pct", 60.0, "%", "Throughput at or above which a unit counts as busy (speed_of_light)."
        ),
        HEAVY_KERNEL_SHARE,
        MAX_KERNEL_FINDINGS,
    ),
)
def memory_bound(ctx: Context, rid: int) -> list[Finding]:
    """A heavy kernel is bound by memory throughput (speed_of_light: memory busy, compute not).

    Anti-pattern: the kernel moves more bytes than its arithmetic needs: unfused elementwise
    chains re-reading tensors, fp32 where bf16 would do, uncoalesced or strided accesses.
    Near the memory peak (>= 80%) only moving fewer bytes helps (info); below it the access
    pattern wastes bandwidth (warning).

    Fix: Move fewer bytes: fuse this kernel with its producer/consumer (torch.compile, a Triton
    kernel) so intermediates stay on chip, use bf16/fp16, vectorise and coalesce loads.

    The finding's advice is the Fix paragraph above; below ~80% of peak it adds: check
    coalescing and L2 hit rate (tiling improves L2 reuse).

    est_savings_ns: None (depends on the bytes a fix removes).
    """
    busy = ctx["sol_busy_pct"]
    out = []
    for r, ev, message in ncu.sol_candidates(
        ctx, rid, lambda p: (p["memory_pct"] >= busy) & (p["memory_pct"] > p["compute_pct"])
    ):
        severity = "info" if r["memory_pct"] >= 80 else "warning"
        title = f"Memory-bound: {ncu.short(r['name'], 60)} ({r['memory_pct']:.0f}% of DRAM peak)"
        rec = memory_bound.fix
        if severity == "warning":
            rec += " Below ~80% of peak the access pattern also wastes bandwidth: check coalescing and L2 hit rate."
        out.append(Finding("memory-bound", severity, rid, title, message, rec, ev, None))
    return out
