"""stall-dominated: one warp-stall reason dominates a heavy kernel (ncu)."""

from __future__ import annotations

from .. import ncu
from ..context import Context
from ..model import Finding, Threshold, rule
from ..thresholds import HEAVY_KERNEL_SHARE, MAX_KERNEL_FINDINGS

_STALL_FIX = {
    "long_scoreboard": "warps wait on global/local memory loads: improve locality and coalescing, stage reused "
    "data in shared memory, keep more loads in flight (more independent work per thread, higher occupancy)",
    "barrier": "warps wait at __syncthreads: balance work across the block's warps, use fewer or smaller "
    "barriers, or split the block's phases",
    "math_pipe_throttle": "a math pipe is saturated: use tensor cores or a cheaper instruction mix, or "
    "spread work across pipes (e.g. fp32 FMA vs. integer)",
    "mio_throttle": "the memory I/O queue is full (shared memory, special math): reduce shared-memory "
    "instructions (wider accesses), avoid bank conflicts",
    "short_scoreboard": "warps wait on shared memory or MUFU results: avoid shared-memory bank conflicts and "
    "reduce dependent special-function math",
    "lg_throttle": "the local/global memory queue is full: fewer, wider memory instructions (vectorised "
    "loads), less local-memory spilling",
    "wait": "fixed-latency dependencies: increase instruction-level parallelism (unroll, independent work)",
    "not_selected": "warps are ready but not picked: the scheduler is busy, which is close to ideal",
    "selected": "warps are issuing: the kernel is issue-bound; reduce instruction count",
    "tex_throttle": "the texture unit is saturated: fewer texture/surface fetches or better locality",
    "membar": "memory fences stall warps: remove unneeded __threadfence / atomics ordering",
    "branch_resolving": "branch resolution stalls: reduce divergent control flow",
    "dispatch_stall": "dispatch stalls: check for pipeline conflicts (rare; see ncu's source view)",
    "drain": "warps wait for memory stores to drain at exit: usually small kernels; fuse them",
    "imc_miss": "constant-cache misses: keep constant data small and uniform across the warp",
    "no_instruction": "instruction-cache misses or branch targets: smaller code, fewer unrolled variants",
    "sleeping": "warps sleep (nanosleep/ barriers in cooperative groups)",
}


@rule(
    "stall-dominated",
    order=40,
    needs=("ncu_metrics",),
    queries=("stalls", "speed_of_light", "bottleneck", "kernel_weights"),
    reads=("ncu_kernels",),
    severities=("warning",),
    thresholds=(
        Threshold(
            "stall_share_min", 40.0, "%", "A stall reason dominates at this share of all stall cycles."
        ),
        ncu.UNIT_PEAK_PCT,
        HEAVY_KERNEL_SHARE,
        MAX_KERNEL_FINDINGS,
    ),
)
def stall_dominated(ctx: Context, rid: int) -> list[Finding]:
    """One warp-stall reason dominates a heavy kernel's stall cycles.

    Anti-pattern: most of the cycles warps spend not issuing go to a single cause (waiting on
    global memory = long_scoreboard, on barriers, on a saturated pipe...). That one cause is
    the kernel's limiter, and the fix follows from its name. Not on a kernel that a unit already
    holds at unit_peak_pct of its peak (query `bottleneck`): its warps stall on that unit (long
    scoreboard on a saturated DRAM, not-selected on a saturated pipe), and the unit's own finding
    (memory-bound) says what helps; nor on FP32 matrix multiplies, whose fix is tensor cores
    (fp32-matmul-kernel).

    Fix: specific to the reason; the finding names the reason and the usual remedy. Check
    ncu's source view (`--set full`, Source page) for the instructions that stall.

    est_savings_ns: None. The time attributed to the reason (time at stake x share) is in the
    evidence as an upper bound, not an estimate: stalls overlap with other warps' issue.
    """
    import pandas as pd

    stalls = ctx.query_df("stalls", rid)
    if stalls.empty:
        return []
    sol = ncu.launch_weights(ctx, rid)
    stalls = stalls.copy()
    out: list[Finding] = []
    per_reason = []
    for reason, grp in stalls.groupby("reason"):
        m = ncu.weighted(grp[["report_id", "launch_id", "name", "share_pct"]], "share_pct", sol)
        m["reason"] = reason
        per_reason.append(m)
    shares = pd.concat(per_reason)
    launches = stalls[["report_id", "launch_id", "name"]].drop_duplicates()
    norm = ncu.weighted(launches.assign(one=1.0), "one", sol)  # 1.0 per name; keeps names with stall data
    shares = shares[shares["name"].isin(norm["name"])]
    top = shares.sort_values("share_pct", ascending=False).drop_duplicates(["report_id", "name"])
    heavy = ncu.heavy(ctx, rid)
    units = ncu.bottleneck_by_kernel(ctx, rid)
    if units is not None:
        peak = ctx["unit_peak_pct"]
        held = units.apply(lambda r: ncu.at_peak(r, peak) is not None or ncu.fp32_matmul(r), axis=1)
        heavy = heavy[~heavy["name"].isin(units.loc[held.astype(bool), "name"])]
    cands = heavy.merge(top, on=["report_id", "name"], how="inner")
    cands = cands[cands["share_pct"] >= ctx["stall_share_min"]].head(int(ctx["max_kernel_findings"]))
    for _, r in cands.iterrows():
        stake, ev = ncu.stake(r)
        reason = str(r["reason"])
        ev.update(
            reason=reason,
            share_pct=float(r["share_pct"]),
            reason_time_upper_bound_ns=int(r["time_at_stake_ns"] * r["share_pct"] / 100),
        )
        second = shares[(shares["name"] == r["name"]) & (shares["reason"] != reason)].nlargest(1, "share_pct")
        runner = (
            f"; next: {second.iloc[0]['reason']} {second.iloc[0]['share_pct']:.0f}%" if len(second) else ""
        )
        message = (
            f"{reason} is {r['share_pct']:.0f}% of the warp stall cycles of {ncu.short(r['name'])}{runner}. "
            f"The kernel holds {stake}."
        )
        fix = _STALL_FIX.get(
            reason, "see ncu's Warp State Statistics and Source pages for the stalling instructions"
        )
        out.append(
            Finding(
                "stall-dominated",
                "warning",
                rid,
                f"{reason} stalls dominate {ncu.short(r['name'], 60)}",
                message,
                f"{fix[0].upper()}{fix[1:]}.",
                ev,
                None,
            )
        )
    return out
