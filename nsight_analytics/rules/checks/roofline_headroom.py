"""roofline-headroom: a heavy kernel runs far below its roofline (ncu roofline counters)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ...units import dur, metric
from .. import ncu
from ..context import Context
from ..model import Finding, Threshold, rule
from ..thresholds import HEAVY_KERNEL_SHARE, MAX_KERNEL_FINDINGS

if TYPE_CHECKING:
    import pandas as pd

# FLOP/s and B/s in a sentence: 784 TFLOP/s, 2.95 TB/s; n/a where ncu gave no value
_rate = partial(metric, none="n/a")

_LEVEL = {"dram": "DRAM", "l2": "L2", "l1": "L1"}
_PRECISION_ORDER = {"tensor": 0, "fp32": 1, "fp64": 2, "fp16": 3}
_FIX = {
    "compute": (
        "The FP pipe is its busiest unit but runs below peak: let the compiler contract add+mul into "
        "FMA (no -fmad=false, no volatile temporaries), cut integer/address math and conversions "
        "that share the issue slots, break dependency chains into independent accumulators (ILP), "
        "and move matrix-like work to tensor cores (bf16/tf32 matmuls peak an order of magnitude "
        "above fp32)."
    ),
    "tensor": (
        "Tensor cores are its busiest unit but run below peak: pick tile shapes that fill whole "
        "waves of SMs and deepen the load pipeline (more stages, TMA on Hopper) so the MMA units "
        "never wait for operands."
    ),
    "tensor_sync": (
        " It issues warp-level mma.sync; the warpgroup wgmma (Hopper) and tcgen05 (Blackwell) paths "
        "that cuBLASLt, CUTLASS 3 and torch.compile max-autotune use have a higher peak."
    ),
    "dram": (
        "DRAM bandwidth is its nearest roof: keep more bytes in flight "
        "(more resident warps, 16-byte vector loads, cp.async/TMA prefetch), coalesce accesses so "
        "every 32-byte sector is used, and raise the intensity by fusing it with its producer or "
        "consumer so the data crosses DRAM once."
    ),
    "l2": (
        "L2 traffic is its nearest roof: blocks re-read the same lines from L2; tile through shared "
        "memory so each block loads its operands once, keep reused data in L1 (smaller working sets "
        "per block), and coalesce accesses so each L2 sector delivered is used."
    ),
    "l1": (
        "L1 traffic is its nearest roof: threads re-read global/local data through L1; keep reused "
        "values in registers or shared memory, remove register spills (local memory), and coalesce "
        "so each L1 wavefront serves a full warp."
    ),
}
_SHORT_FIX = (
    "Its launches are too short to reach any roof: ramp-up and the tail of the grid dominate. Fuse it "
    "with neighbouring kernels or batch the work into fewer, larger launches."
)


@rule(
    "roofline-headroom",
    order=55,
    needs=("ncu_metrics",),
    queries=("roofline", "bottleneck", "kernel_weights"),
    reads=("ncu_kernels",),
    severities=("info", "warning"),
    thresholds=(
        Threshold(
            "roof_near_pct",
            70.0,
            "%",
            "A kernel at or above this share of its roof is near it: no finding.",
        ),
        Threshold(
            "roof_far_pct",
            40.0,
            "%",
            "roofline-headroom is a warning below this share of the roof (an info between it and roof_near_pct).",
        ),
        Threshold(
            "roofline_min_launch_ns",
            10_000,
            "ns",
            "Launches shorter than this on average are too short to reach a roof: the advice is to fuse or batch.",
        ),
        HEAVY_KERNEL_SHARE,
        MAX_KERNEL_FINDINGS,
    ),
)
def roofline_headroom(ctx: Context, rid: int) -> list[Finding]:
    """A heavy kernel runs far below its roofline: the roof allows it to finish much sooner.

    Anti-pattern: the roofline (query `roofline`, ncu's Speed Of Light roofline charts) bounds
    a kernel's FLOP/s by the compute peak and by each memory level's bandwidth times the
    kernel's arithmetic intensity against it. A kernel whose busiest resource (compute, DRAM,
    L2 or L1) stays well below its peak is held back by something else: latency, too little
    parallelism, a poor instruction mix or wasted traffic. Kernels are ranked by time at stake x
    headroom (1 - the share of the roof reached), the time the kernel would save at its roof;
    below roof_far_pct of the roof it is a warning, up to roof_near_pct an info. The roofline
    counts floating-point work and three bandwidths only: a kernel whose speed-of-light Compute
    (SM) or Memory Throughput, busiest memory level or busiest pipe (query `bottleneck`: integer
    and issue work, L2 and L1/TEX throughput beyond bandwidth) already reaches roof_near_pct is
    near a limit the roofline does not draw, and gets no finding; nor do FP32 matrix multiplies,
    whose roof is the tensor cores' (fp32-matmul-kernel).

    Fix: Work on what the nearest roof names: compute-bound kernels need a better instruction
    mix (FMA contraction, fewer integer and conversion instructions, tensor cores); memory-bound
    ones more bytes in flight and fewer bytes moved (coalescing, vector loads, fusion, tiling
    for cache reuse); launches shorter than roofline_min_launch_ns need fusing or batching.

    The finding's advice is the paragraph for its limiter (compute, tensor, dram, l2, l1) or for
    short launches.

    est_savings_ns: time at stake x (1 - share of the roof reached): the time the kernel would
    give back at its roof, an upper bound (well-tuned kernels reach 70-90% of it).
    """
    import pandas as pd

    per_kernel = _by_kernel(ctx.query_df("roofline", rid))
    if per_kernel is None:
        return []
    near = ctx["roof_near_pct"] / 100.0
    cands = ncu.heavy(ctx, rid).merge(per_kernel, on=["report_id", "name"])
    cands = cands[cands["roof_fraction"] < near].copy()
    units = ncu.bottleneck_by_kernel(ctx, rid)
    if units is not None:
        busiest = units[["compute_pct", "memory_pct", "memory_level_pct", "pipe_pct"]].max(axis=1)
        held = (busiest >= ctx["roof_near_pct"]) | units.apply(ncu.fp32_matmul, axis=1).astype(bool)
        cands = cands[~cands["name"].isin(units.loc[held, "name"])]
    cands["save_ns"] = (cands["time_at_stake_ns"] * (1.0 - cands["roof_fraction"])).round()
    cands = cands.sort_values("save_ns", ascending=False).head(int(ctx["max_kernel_findings"]))
    out = []
    for _, r in cands.iterrows():
        stake_text, ev = ncu.stake(r)
        short = r["mean_launch_ns"] < ctx["roofline_min_launch_ns"]
        limiter = r["limiter"] if isinstance(r["limiter"], str) else None
        fix_key = "tensor" if limiter == "compute" and r["precision"] == "tensor" else limiter
        rec = _SHORT_FIX if short else _FIX.get(fix_key or "", roofline_headroom.fix)
        if fix_key == "tensor" and not short and _warp_mma(r["tensor_path"]):
            rec += _FIX["tensor_sync"]
        severity = "warning" if r["roof_fraction"] < ctx["roof_far_pct"] / 100.0 and not short else "info"
        ev.update(_evidence(r))
        title = (
            f"Roofline headroom: {ncu.short(r['name'], 60)} at {100 * r['roof_fraction']:.0f}% of its "
            f"{_roof_name(r)} roof"
        )
        message = (
            f"{ncu.short(r['name'])}: {_position(r)} At its roof it would take "
            f"{dur(r['time_at_stake_ns'] * r['roof_fraction'])} instead of {dur(r['time_at_stake_ns'])} "
            f"(saves up to {dur(r['save_ns'])}). It holds {stake_text}."
        )
        if pd.notna(r["mean_launch_ns"]) and short:
            message += f" Its profiled launches last {dur(r['mean_launch_ns'])} on average."
        out.append(Finding("roofline-headroom", severity, rid, title, message, rec, ev, int(r["save_ns"])))
    return out


def _by_kernel(roof: pd.DataFrame) -> pd.DataFrame | None:
    """Per kernel name, its launches taken together as one roofline point: work and traffic per
    second are time-weighted over its launches (total FLOP and bytes over total time), peaks
    likewise. Its precision is the one whose work uses most of its peak (ties: tensor, fp32,
    fp64, fp16; the fp16 counter also counts the HFMA2.MMA register moves compilers emit in
    kernels without fp16 math). roof_fraction is the busiest resource's utilisation."""
    import pandas as pd

    roof = roof[roof["duration_ns"].notna()]
    if roof.empty:
        return None
    roof = roof.assign(
        w=roof["duration_ns"].astype("float64") * roof["invocations"].astype("float64").fillna(1.0)
    )
    keys = ["report_id", "name"]
    launches = roof.drop_duplicates(["report_id", "launch_id"])
    out = launches.groupby(keys).agg(w=("w", "sum"), mean_launch_ns=("duration_ns", "mean"))
    for level in _LEVEL:
        out[f"{level}_bytes_per_s"] = _weighted(launches, f"{level}_bytes_per_s", keys)
        out[f"peak_{level}_bytes_per_s"] = _weighted(launches, f"peak_{level}_bytes_per_s", keys)
    work = roof[roof["precision"].notna()].assign(
        flop_w=lambda d: d["flops"] * d["w"], peak_w=lambda d: d["peak_flops"] * d["w"]
    )
    by_prec = work.groupby([*keys, "precision", "tensor_path"], dropna=False).agg(
        flop_w=("flop_w", "sum"), peak_w=("peak_w", "sum"), pw=("w", "sum")
    )
    by_prec = by_prec.reset_index().merge(out["w"].reset_index(), on=keys)
    by_prec["flops"] = by_prec["flop_w"] / by_prec["w"]  # launches without this work do none of it
    by_prec["peak_flops"] = by_prec["peak_w"] / by_prec["pw"]
    by_prec["u"] = by_prec["flops"] / by_prec["peak_flops"]
    by_prec["order"] = by_prec["precision"].map(_PRECISION_ORDER)
    best = by_prec.sort_values(["u", "order"], ascending=[False, True], na_position="last")
    best = best.groupby(keys).head(1).set_index(keys)
    out = out.join(best[["precision", "tensor_path", "flops", "peak_flops", "u"]])
    util = pd.DataFrame(
        {
            "compute": out["u"],
            **{lv: out[f"{lv}_bytes_per_s"] / out[f"peak_{lv}_bytes_per_s"] for lv in _LEVEL},
        }
    )
    out = out[util.notna().any(axis=1)]
    util = util.loc[out.index]
    out["roof_fraction"] = util.max(axis=1)
    out["limiter"] = util.fillna(-1.0).idxmax(axis=1)
    out["bound"] = out["limiter"].where(out["limiter"] == "compute", "memory")
    out["compute_pct"] = 100 * out["u"]
    out["attainable_flops"] = out["flops"] / out["roof_fraction"]
    for level in _LEVEL:
        out[f"{level}_intensity"] = out["flops"] / out[f"{level}_bytes_per_s"]
        out[f"{level}_ridge"] = out["peak_flops"] / out[f"peak_{level}_bytes_per_s"]
    return None if out.empty else out.reset_index()


def _weighted(d: pd.DataFrame, col: str, keys: list[str]) -> pd.Series:
    """Time-weighted mean of `col` per kernel over the launches that have it."""
    has = d[d[col].notna()]
    g = has.assign(xw=has[col] * has["w"]).groupby(keys)
    return g["xw"].sum() / g["w"].sum()


def _warp_mma(path: object) -> bool:
    """A warp-level mma.sync path (`op_hmma_...`): the op_* paths exist from Hopper on, where
    faster warpgroup (and on Blackwell tcgen05) paths exist beside them."""
    return isinstance(path, str) and path.startswith(("op_hmma", "op_imma", "op_bmma"))


def _roof_name(r: pd.Series) -> str:
    if r["limiter"] == "compute":
        return "tensor-core" if r["precision"] == "tensor" else f"{r['precision']} compute"
    return f"{_LEVEL.get(r['limiter'], str(r['limiter']))} bandwidth"


def _position(r: pd.Series) -> str:
    """Where the kernel sits under its roof, in the numbers ncu's roofline chart shows."""
    import pandas as pd

    lim, share = r["limiter"], 100 * r["roof_fraction"]
    what = f"tensor {r['tensor_path']}" if r["precision"] == "tensor" else r["precision"]
    if lim == "compute":
        return (
            f"compute bound at {share:.0f}% of the roof: {what} at {_rate(r['flops'], 'FLOP/s')} of "
            f"{_rate(r['peak_flops'], 'FLOP/s')} peak ({_intensity(r, 'dram')})."
        )
    level = _LEVEL.get(lim, str(lim))
    bw_now, bw_peak = r[f"{lim}_bytes_per_s"], r[f"peak_{lim}_bytes_per_s"]
    head = f"{level}-bandwidth bound at {share:.0f}% of the roof: {level} traffic {_rate(bw_now, 'B/s')} of {_rate(bw_peak, 'B/s')} peak"
    if not isinstance(r["precision"], str):
        return f"{head}, no floating-point work."
    if pd.notna(r["compute_pct"]) and r["compute_pct"] < 1.0:
        return f"{head}, next to no arithmetic ({what} {_rate(r['flops'], 'FLOP/s')}, {r['compute_pct']:.2g}% of its peak)."
    return (
        f"{head}; {what} at {_rate(r['flops'], 'FLOP/s')} of an attainable {_rate(r['attainable_flops'], 'FLOP/s')} "
        f"({_intensity(r, lim)})."
    )


def _intensity(r: pd.Series, level: str) -> str:
    import pandas as pd

    i, ridge = r[f"{level}_intensity"], r[f"{level}_ridge"]
    if pd.isna(i) or pd.isna(ridge):
        return "intensity n/a"
    return f"{i:.3g} FLOP/byte against {_LEVEL[level]}, ridge point {ridge:.3g}"


def _evidence(r: pd.Series) -> dict[str, object]:
    import pandas as pd

    def num(key: str) -> float | None:
        return float(r[key]) if pd.notna(r[key]) else None

    def text(key: str) -> str | None:
        return r[key] if isinstance(r[key], str) else None

    return {
        "roof_fraction": float(r["roof_fraction"]),
        "save_at_roof_ns": int(r["save_ns"]),
        "limiter": text("limiter"),
        "bound": text("bound"),
        "precision": text("precision"),
        "tensor_path": text("tensor_path"),
        "flops": num("flops"),
        "attainable_flops": num("attainable_flops"),
        "peak_flops": num("peak_flops"),
        "dram_intensity": num("dram_intensity"),
        "dram_ridge": num("dram_ridge"),
        "dram_bytes_per_s": num("dram_bytes_per_s"),
        "peak_dram_bytes_per_s": num("peak_dram_bytes_per_s"),
        "mean_launch_ns": num("mean_launch_ns"),
    }
