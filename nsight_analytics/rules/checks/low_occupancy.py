"""low-occupancy: a heavy kernel keeps few warps resident per SM (ncu)."""

from __future__ import annotations

from .. import ncu
from ..context import Context
from ..model import Finding, Threshold, rule
from ..thresholds import HEAVY_KERNEL_SHARE, MAX_KERNEL_FINDINGS

_LIMITER_FIX = {
    "registers": "cap registers (__launch_bounds__, -maxrregcount) or simplify per-thread state",
    "shared_memory": "use less shared memory per block (smaller tiles, fewer stages) or a larger carve-out",
    "warps": "use smaller blocks so more of them fit per SM",
    "blocks": "use larger blocks: the SM's block slots run out before its warp slots",
    "barriers": "use fewer named barriers per block",
}

_MATMUL_FIX = (
    "A library matrix-math kernel holds large tiles in registers and shared memory and runs few warps per "
    "SM by design: its occupancy is not the lever, and capping its registers would spill. Below its peak"
    "{where} it has too little work to fill the GPU: batch more "
    "work per call (larger or batched/grouped matmuls, fused projections), keep M, N and K multiples of 64, "
    "or let the library pick another tile (cuBLASLt heuristics, torch.compile mode='max-autotune')."
)


@rule(
    "low-occupancy",
    order=70,
    needs=("ncu_metrics",),
    queries=("occupancy", "speed_of_light", "bottleneck", "kernel_weights"),
    reads=("ncu_kernels",),
    severities=("info", "warning"),
    thresholds=(
        Threshold("occupancy_low_pct", 40.0, "%", "Achieved occupancy below this is low."),
        Threshold(
            "occupancy_theoretical_low_pct",
            50.0,
            "%",
            "low-occupancy is a warning when the theoretical occupancy is below this (a limiter bites).",
        ),
        ncu.UNIT_PEAK_PCT,
        HEAVY_KERNEL_SHARE,
        MAX_KERNEL_FINDINGS,
    ),
)
def low_occupancy(ctx: Context, rid: int) -> list[Finding]:
    """A heavy kernel runs with few resident warps per SM (low achieved occupancy).

    Anti-pattern: too few warps to hide memory and pipeline latency. When the theoretical
    occupancy is itself low, a per-block resource (registers, shared memory, block size) caps
    how many blocks fit on an SM: the limiter is named (warning). When only the achieved
    occupancy is low, the grid is too small or unbalanced (tail effect) (info).

    More warps only help a kernel that no unit holds back: the rule stays silent on a kernel
    whose busiest pipe, SM throughput or memory level is at unit_peak_pct of its peak (query
    `bottleneck`; capping registers there would only spill), and on FP32 matrix multiplies,
    whose lever is tensor cores (fp32-matmul-kernel). Library matrix-math kernels (cuBLAS,
    CUTLASS, cuDNN, attention) run few warps by design, holding large tiles in registers and
    shared memory: for them it is an info that points at the problem size instead.

    Fix: relieve the named limiter (fewer registers, less shared memory per block, another
    block size), or launch more blocks / balance work.

    est_savings_ns: None (more occupancy helps only latency-bound kernels).
    """
    import pandas as pd

    occ = ctx.query_df("occupancy", rid)
    occ = occ[occ["achieved_pct"].notna()]
    if occ.empty:
        return []
    sol = ncu.launch_weights(ctx, rid)
    ach = ncu.weighted(occ[["report_id", "launch_id", "name", "achieved_pct"]], "achieved_pct", sol)
    theo = ncu.weighted(occ[["report_id", "launch_id", "name", "theoretical_pct"]], "theoretical_pct", sol)
    lim = occ.groupby(["report_id", "name"])["limiter"].agg(
        lambda s: s.mode().iloc[0] if s.notna().any() else None
    )
    pcts = ach.merge(theo, on=["report_id", "name"]).merge(lim.reset_index(), on=["report_id", "name"])
    pcts = pcts[pcts["achieved_pct"] < ctx["occupancy_low_pct"]]
    units = ncu.bottleneck_by_kernel(ctx, rid)
    if units is None or pcts.empty:
        return []
    pcts = pcts.merge(units, on=["report_id", "name"], how="left")
    peak = ctx["unit_peak_pct"]
    held = pcts.apply(lambda r: ncu.at_peak(r, peak) is not None or ncu.fp32_matmul(r), axis=1)
    pcts = pcts[~held.astype(bool)]
    cands = ncu.heavy(ctx, rid).merge(pcts, on=["report_id", "name"]).head(int(ctx["max_kernel_findings"]))
    out = []
    for _, r in cands.iterrows():
        stake, ev = ncu.stake(r)
        limiter = r["limiter"] if isinstance(r["limiter"], str) else None
        ev.update(
            achieved_pct=float(r["achieved_pct"]),
            theoretical_pct=float(r["theoretical_pct"]) if pd.notna(r["theoretical_pct"]) else None,
            limiter=limiter,
        )
        limited = (
            pd.notna(r["theoretical_pct"]) and r["theoretical_pct"] < ctx["occupancy_theoretical_low_pct"]
        )
        matmul = r["kernel_class"] in ncu.MATMUL_CLASSES
        severity = "warning" if limited and not matmul else "info"
        theo_text = f"{r['theoretical_pct']:.0f}%" if pd.notna(r["theoretical_pct"]) else "n/a"
        message = (
            f"{ncu.short(r['name'])}: achieved occupancy {r['achieved_pct']:.0f}% of the SM's warp slots, "
            f"theoretical {theo_text}"
            + (f", limited by {limiter}" if limiter and limited else "")
            + f". It holds {stake}."
        )
        if matmul:
            where = (
                f" (SM throughput {r['compute_pct']:.0f}%, memory {r['memory_pct']:.0f}%)"
                if pd.notna(r["compute_pct"]) and pd.notna(r["memory_pct"])
                else ""
            )
            rec = _MATMUL_FIX.format(where=where)
        elif limited and limiter:
            rec = "; ".join(_LIMITER_FIX.get(x, x) for x in limiter.split(",")).capitalize() + "."
        else:
            rec = (
                "The limit is not a per-block resource: launch more blocks (at least a few per SM), balance "
                "work across blocks, or fuse with neighbouring kernels so the grid fills the GPU."
            )
        title = f"Low occupancy ({r['achieved_pct']:.0f}%) in {ncu.short(r['name'], 60)}" + (
            f", limited by {limiter}" if limiter and limited else ""
        )
        out.append(Finding("low-occupancy", severity, rid, title, message, rec, ev, None))
    return out
