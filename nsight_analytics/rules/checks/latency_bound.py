"""latency-bound: a heavy kernel keeps neither compute nor memory busy (ncu speed of light)."""

from __future__ import annotations

from .. import ncu
from ..context import Context
from ..model import Finding, Threshold, rule
from ..thresholds import HEAVY_KERNEL_SHARE, MAX_KERNEL_FINDINGS


@rule(
    "latency-bound",
    order=60,
    needs=("ncu_metrics",),
    queries=("bottleneck", "kernel_weights"),
    reads=("ncu_kernels",),
    severities=("warning",),
    thresholds=(
        Threshold(
            "latency_bound_max_pct",
            40.0,
            "%",
            "latency-bound fires when both compute and memory throughput are below this.",
        ),
        HEAVY_KERNEL_SHARE,
        MAX_KERNEL_FINDINGS,
    ),
)
def latency_bound(ctx: Context, rid: int) -> list[Finding]:
    """A heavy kernel keeps neither compute nor memory busy: it is latency bound.

    Anti-pattern: both SM and memory throughput stay below latency_bound_max_pct of peak, so
    the kernel waits on dependencies: too few warps or blocks to hide latency (small grid, low
    occupancy), serial dependency chains, or launch/tail overhead of a very short kernel.

    Fix: Give the GPU more parallel work per launch: larger batches or fused kernels, more blocks
    than SMs, more independent work per thread; check low-occupancy for a resource limiter.

    est_savings_ns: None.
    """
    lim = ctx["latency_bound_max_pct"]
    out = []
    for r, ev, stake in ncu.sol_candidates(
        ctx, rid, lambda p: (p["memory_pct"] < lim) & (p["compute_pct"] < lim)
    ):
        message = (
            f"{ncu.short(r['name'])}: memory throughput {r['memory_pct']:.0f}% of peak, compute "
            f"{r['compute_pct']:.0f}% (duration-weighted over its launches). It holds {stake}."
        )
        title = (
            f"Latency-bound: {ncu.short(r['name'], 60)} "
            f"(compute {r['compute_pct']:.0f}%, memory {r['memory_pct']:.0f}%)"
        )
        out.append(Finding("latency-bound", "warning", rid, title, message, latency_bound.fix, ev, None))
    return out
