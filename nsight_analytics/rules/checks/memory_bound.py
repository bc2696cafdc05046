"""memory-bound: a heavy kernel is bound by a memory level's throughput (ncu speed of light)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .. import ncu
from ..context import Context
from ..model import Finding, Threshold, rule
from ..thresholds import HEAVY_KERNEL_SHARE, MAX_KERNEL_FINDINGS

if TYPE_CHECKING:
    import pandas as pd

_FIX = {
    "dram": (
        "Move fewer bytes through DRAM: fuse this kernel with its producer/consumer (torch.compile, a "
        "Triton kernel) so intermediates stay on chip{narrow}{vector}."
    ),
    "l2": (
        "L2 is the busiest level, not DRAM: blocks re-read data that L2 holds, or scattered accesses touch "
        "many sectors per request (a strided or transposing copy uses a sector per element). Make accesses "
        "contiguous along the fastest-moving index, tile through shared memory so each block loads its "
        "operands once, and fuse it with its neighbours so the data is read once."
    ),
    "l1": (
        "L1/TEX is the busiest level: threads re-read global or local data through L1, or access it "
        "uncoalesced. Keep reused values in registers or shared memory, use 16-byte vector loads, remove "
        "register spills (local memory) and coalesce so each request serves a full warp."
    ),
    "shared": (
        "Shared memory is the busiest level: avoid bank conflicts (pad or swizzle the layout), use wider "
        "shared-memory accesses (128-bit, ldmatrix), and keep values reused by a thread in registers "
        "instead of re-reading them."
    ),
}
# Data already in 16 or 8 bits: narrower types are no advice to it.
_NARROW = re.compile(r"(?i)bf16|bfloat16|half|fp16|f16|e4m3|e5m2|fp8|int8|i8|__nv_fp")


@rule(
    "memory-bound",
    order=50,
    needs=("ncu_metrics",),
    queries=("bottleneck", "kernel_weights"),
    reads=("ncu_kernels",),
    severities=("info", "warning"),
    thresholds=(
        Threshold(
            "sol_busy_pct", 60.0, "%", "Throughput at or above which a unit counts as busy (speed_of_light)."
        ),
        Threshold(
            "sol_balance_pct",
            10.0,
            "points",
            "A busy kernel whose compute throughput is within this many points of its memory throughput is "
            "balanced, not memory-bound.",
        ),
        ncu.UNIT_PEAK_PCT,
        HEAVY_KERNEL_SHARE,
        MAX_KERNEL_FINDINGS,
    ),
)
def memory_bound(ctx: Context, rid: int) -> list[Finding]:
    """A heavy kernel is bound by the throughput of one memory level (DRAM, L2, L1/TEX or shared memory).

    Anti-pattern: the kernel moves more bytes than its arithmetic needs: unfused elementwise
    chains re-reading tensors, fp32 where bf16 would do, uncoalesced, strided or re-read
    accesses. ncu's Memory Throughput is the busiest of L1/TEX, L2 and DRAM, so the finding
    names the level (query `bottleneck`: gpu__dram_throughput, lts__throughput,
    l1tex__throughput, shared-memory wavefronts) and its share of peak. It fires when Memory
    Throughput reaches sol_busy_pct and exceeds Compute (SM) Throughput, unless the tensor pipe is
    busy too (a GEMM's operands streaming into its tensor cores) or compute is busy and within
    sol_balance_pct points of memory (a balanced kernel). At unit_peak_pct or more only moving
    fewer bytes helps (info); below it the access pattern wastes bandwidth (warning).

    Fix: Move fewer bytes through the named level: for DRAM fuse this kernel with its
    producer/consumer (torch.compile, a Triton kernel) so intermediates stay on chip and store
    fp32 tensors in bf16/fp16; for L2 make accesses contiguous and tile through shared memory;
    for L1/TEX coalesce, vectorise and keep reused values in registers; for shared memory avoid
    bank conflicts and use wider accesses.

    The finding's advice is the paragraph for its level; the narrower-type advice only where the
    kernel's name does not already say 16- or 8-bit data; below unit_peak_pct it adds: check
    coalescing and the L2 hit rate.

    est_savings_ns: None (depends on the bytes a fix removes).
    """
    busy, margin, peak = ctx["sol_busy_pct"], ctx["sol_balance_pct"], ctx["unit_peak_pct"]

    def keep(p: pd.DataFrame) -> pd.Series:
        memory_over = (p["memory_pct"] >= busy) & (p["memory_pct"] > p["compute_pct"])
        tensor_busy = p["tensor_pct"].fillna(0.0) >= busy
        balanced = (p["compute_pct"] >= busy) & (p["memory_pct"] - p["compute_pct"] < margin)
        return memory_over & ~tensor_busy & ~balanced

    out = []
    for r, ev, stake in ncu.sol_candidates(ctx, rid, keep):
        level = r["memory_level"] if isinstance(r["memory_level"], str) else None
        value = float(r["memory_level_pct"]) if level else float(r["memory_pct"])
        severity = "info" if value >= peak else "warning"
        if level:
            what = f"{ncu.LEVEL_NAMES[level]} {value:.0f}% of peak"
            levels = ncu.busy_levels(r, busy) or what
            detail = (
                f"{ncu.LEVEL_NAMES[level]} throughput is {value:.0f}% of its peak (levels at {busy:.0f}% or "
                f"more: {levels}; ncu's Memory Throughput {r['memory_pct']:.0f}%)"
            )
        else:
            what = f"memory throughput {value:.0f}% of peak"
            detail = (
                f"Memory Throughput is {value:.0f}% of peak (the busiest of L1/TEX, L2 and DRAM; this export "
                "does not say which)"
            )
        message = (
            f"{ncu.short(r['name'])}: {detail}, against Compute (SM) Throughput {r['compute_pct']:.0f}% "
            f"(duration-weighted over its launches). It holds {stake}."
        )
        title = f"Memory-bound: {ncu.short(r['name'], 60)} ({what})"
        name = str(r["name"])
        narrow = "" if _NARROW.search(name) else ", store fp32 tensors in bf16/fp16"
        vector = "" if "vectorized" in name else ", and vectorise and coalesce loads"
        rec = _FIX.get(level or "dram", _FIX["dram"]).format(narrow=narrow, vector=vector)
        if severity == "warning" and level in (None, "dram"):
            rec += " Below the peak the access pattern also wastes bandwidth: check coalescing and the L2 hit rate."
        out.append(Finding("memory-bound", severity, rid, title, message, rec, ev, None))
    return out
