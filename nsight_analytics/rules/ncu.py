"""What the ncu rules share: each kernel's weight (its time at stake), the heavy kernels, and
time-weighted means of per-launch metrics.

A kernel's weight is its real timeline time when an nsys report of the same program is in the
workspace (all its launches there, matched by `nsa_kernel_key`, see queries/ncu/_macros.sql),
else the summed ncu duration of its profiled launches (a `--print-summary` row counts as its
`invocations` launches of its Average duration): query `kernel_weights`. Findings carry it as
`evidence["time_at_stake_ns"]`. Most ncu rules claim no saving (est_savings_ns None): what a
kernel-level fix gains depends on the fix; roofline-headroom (the time at the roof) and
fp32-matmul-kernel (the same work on tensor cores) do.

What a kernel is bound by comes from query `bottleneck`: the memory level and the pipe that are
busiest, beneath ncu's two speed-of-light percentages. A unit at or above unit_peak_pct of its
peak is at its limit: the kernel gets that unit's advice (memory-bound, fp32-matmul-kernel) and
no occupancy, stall or roofline advice, which helps only kernels that no unit holds back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..units import clip, dur, pct
from .context import Context
from .model import Threshold

if TYPE_CHECKING:  # pandas is imported when an ncu rule runs, not when the rules are loaded
    import pandas as pd

UNIT_PEAK_PCT = Threshold(
    "unit_peak_pct",
    80.0,
    "%",
    "A pipe, the SM or a memory level at or above this share of its peak is at its limit (ncu's own line): "
    "the kernel gets no occupancy, stall or roofline advice.",
)
# Kernel classes (nsa_kernel_class, queries/_kernels.sql) that do matrix math.
MATMUL_CLASSES = ("gemm", "conv", "attention")
LEVEL_NAMES = {"dram": "DRAM", "l2": "L2", "l1": "L1/TEX", "shared": "shared memory"}
PIPE_NAMES = {"tensor": "tensor", "fma": "FMA (FP32)", "alu": "ALU (integer, logic)", "fp64": "FP64", "lsu": "LSU (load/store)",
              "xu": "XU (special functions)", "fp16": "FP16", "adu": "ADU (address, branch)", "cbu": "CBU (branch)",
              "uniform": "uniform", "tex": "texture", "tma": "TMA", "ipa": "IPA"}  # fmt: skip
_PCTS = (
    "compute_pct",
    "memory_pct",
    "dram_pct",
    "l2_pct",
    "l1_pct",
    "shared_pct",
    "tensor_pct",
    "fma_pct",
    "pipe_pct",
)


def weights(ctx: Context, rid: int) -> pd.DataFrame:
    w = ctx.query_df("kernel_weights", rid).copy()
    w["time_at_stake_ns"] = w["nsys_ns"].where(w["nsys_ns"].notna(), w["ncu_ns"]).astype("int64")
    w["share"] = w["ncu_ns"] / w["report_ncu_ns"].where(w["report_ncu_ns"] > 0)
    return w


def heavy(ctx: Context, rid: int) -> pd.DataFrame:
    """Kernels holding at least heavy_kernel_share of the report's ncu time, heaviest first."""
    w = weights(ctx, rid)
    w = w[(w["share"].fillna(1.0) >= ctx["heavy_kernel_share"])]
    return w.sort_values("time_at_stake_ns", ascending=False)


def stake(row: pd.Series) -> tuple[str, dict[str, object]]:
    """The sentence and evidence describing the kernel's weight."""
    import pandas as pd

    ev: dict[str, object] = {
        "kernel": row["name"],
        "ncu_launches": int(row["launches"]),
        "ncu_ns": int(row["ncu_ns"]),
        "time_at_stake_ns": int(row["time_at_stake_ns"]),
    }
    if pd.notna(row["nsys_ns"]):
        ev.update(nsys_report_id=int(row["nsys_report_id"]), nsys_launches=int(row["nsys_launches"]))
        text = (
            f"{dur(row['nsys_ns'])} of timeline time in {int(row['nsys_launches']):,} launches "
            f"(nsys report {int(row['nsys_report_id'])})"
        )
    else:
        text = f"{dur(row['ncu_ns'])} over {int(row['launches'])} profiled launches ({pct(row['share'])} of this ncu report)"
    return text, ev


def short(name: str, width: int = 90) -> str:
    return clip(name, width)


def launch_weights(ctx: Context, rid: int) -> pd.DataFrame:
    """Per ncu row: duration and the launches it stands for (invocations of a summary row, else 1)."""
    return ctx.query_df("speed_of_light", rid)[["report_id", "launch_id", "duration_ns", "invocations"]]


def weighted(df: pd.DataFrame, value: str, weights: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name: the time-weighted mean of `value` over its launches (duration x launches)."""
    d = df.merge(weights, on=["report_id", "launch_id"], how="left")
    d["w"] = d["duration_ns"].astype("float64").fillna(1.0).clip(lower=1.0) * d["invocations"].astype(
        "float64"
    ).fillna(1.0)
    d["wv"] = d[value] * d["w"]
    g = d.groupby(["report_id", "name"], dropna=False).agg(wv=("wv", "sum"), w=("w", "sum"))
    return (g["wv"] / g["w"]).rename(value).reset_index()


def sol_candidates(
    ctx: Context, rid: int, keep: Callable[[pd.DataFrame], pd.Series]
) -> list[tuple[pd.Series, dict[str, object], str]]:
    """The heavy kernels whose duration-weighted percentages (bottleneck_by_kernel, kernels with
    both speed-of-light percentages) pass `keep`, at most max_kernel_findings, heaviest first:
    each with its evidence (weight and units) and the sentence saying its weight."""
    per = bottleneck_by_kernel(ctx, rid)
    if per is None:
        return []
    per = per[per["compute_pct"].notna() & per["memory_pct"].notna()]
    if per.empty:
        return []
    picked = per[keep(per)]
    cands = heavy(ctx, rid).merge(picked, on=["report_id", "name"]).head(int(ctx["max_kernel_findings"]))
    out = []
    for _, r in cands.iterrows():
        stake_text, ev = stake(r)
        ev.update(units_evidence(r))
        out.append((r, ev, stake_text))
    return out


def units_evidence(r: pd.Series) -> dict[str, object]:
    """The bottleneck numbers of a kernel row, for a finding's evidence (None where missing)."""
    import pandas as pd

    ev: dict[str, object] = {}
    for col in (*_PCTS, "memory_level_pct"):
        ev[col] = float(r[col]) if pd.notna(r[col]) else None
    for col in ("memory_level", "pipe", "kernel_class", "math"):
        ev[col] = r[col] if isinstance(r[col], str) else None
    return ev


def kinds(ctx: Context, rid: int) -> pd.DataFrame:
    """Per kernel name: its class and math precision from the name (queries/_kernels.sql) and the
    GPU's compute capability."""
    return ctx.sql_df(
        "ncu_kernel_kinds",
        "SELECT report_id, name, nsa_kernel_class(name) AS kernel_class, nsa_kernel_math(name) AS math, "
        "max(cc) AS cc FROM ncu_kernels WHERE $rid IS NULL OR report_id = $rid GROUP BY ALL",
        rid,
    )


def bottleneck_by_kernel(ctx: Context, rid: int) -> pd.DataFrame | None:
    """Per kernel name: the `bottleneck` percentages, each time-weighted over the launches that
    have it; the busiest pipe (the one holding most of the kernel's time), the busiest memory
    level (as the query picks it, on the weighted means), and the kernel's class, math and cc.
    None when the report has no launches."""
    b = ctx.query_df("bottleneck", rid)
    if b.empty:
        return None
    b = b.assign(
        w=b["duration_ns"].astype("float64").fillna(1.0).clip(lower=1.0)
        * b["invocations"].astype("float64").fillna(1.0)
    )
    keys = ["report_id", "name"]
    out = b[keys].drop_duplicates().set_index(keys)
    for col in _PCTS:
        has = b[b[col].notna()]
        g = has.assign(x=has[col] * has["w"]).groupby(keys)
        out[col] = g["x"].sum() / g["w"].sum()
    pipes = b[b["pipe"].notna()].groupby([*keys, "pipe"])["w"].sum().reset_index()
    pipes = pipes.sort_values(["w", "pipe"]).drop_duplicates(keys, keep="last").set_index(keys)
    out = out.join(pipes["pipe"])
    level = out.apply(memory_level, axis=1, result_type="expand")
    out["memory_level"], out["memory_level_pct"] = level[0], level[1]
    out = out.reset_index().merge(kinds(ctx, rid), on=keys, how="left")
    return out


def memory_level(r: pd.Series) -> tuple[str | None, float | None]:
    """The busiest memory level and its throughput, as query `bottleneck` picks it: DRAM, L2 or
    L1/TEX, and shared memory when it makes at least 90% of a busiest L1/TEX."""
    import pandas as pd

    have = {lv: float(r[f"{lv}_pct"]) for lv in ("dram", "l2", "l1") if pd.notna(r[f"{lv}_pct"])}
    if not have:
        return None, None
    level = max(have, key=lambda lv: have[lv])  # ties: dram, then l2, as the query
    if level == "l1" and pd.notna(r["shared_pct"]) and r["shared_pct"] >= 0.9 * have["l1"]:
        return "shared", float(r["shared_pct"])
    return level, have[level]


def busy_levels(r: pd.Series, at_least: float) -> str:
    """The memory levels at or above `at_least` % of peak, busiest first: 'L2 98%, DRAM 88%'."""
    import pandas as pd

    lv = [
        (LEVEL_NAMES[x], float(r[f"{x}_pct"]))
        for x in ("dram", "l2", "l1", "shared")
        if pd.notna(r[f"{x}_pct"])
    ]
    if r["memory_level"] == "shared":  # shared memory is named in place of the L1/TEX it fills
        lv = [x for x in lv if x[0] != LEVEL_NAMES["l1"]]
    picked = sorted((x for x in lv if x[1] >= at_least), key=lambda x: -x[1])
    return ", ".join(f"{n} {v:.0f}%" for n, v in picked)


def at_peak(r: pd.Series, peak: float) -> str | None:
    """The unit that holds the kernel at its limit, in words ('tensor pipe 94% of peak'), or
    None: the busiest pipe (SM throughput where the export has no pipe metrics), then the
    busiest memory level (Memory Throughput without level metrics)."""
    import pandas as pd

    if pd.notna(r["pipe_pct"]) and r["pipe_pct"] >= peak:
        return f"{PIPE_NAMES.get(r['pipe'], r['pipe'])} pipe {r['pipe_pct']:.0f}% of peak"
    if pd.notna(r["compute_pct"]) and r["compute_pct"] >= peak:
        return f"SM throughput {r['compute_pct']:.0f}% of peak"
    if pd.notna(r["memory_level_pct"]) and r["memory_level_pct"] >= peak:
        return f"{LEVEL_NAMES[r['memory_level']]} throughput {r['memory_level_pct']:.0f}% of peak"
    if pd.notna(r["memory_pct"]) and r["memory_pct"] >= peak:
        return f"memory throughput {r['memory_pct']:.0f}% of peak"
    return None


def fp32_matmul(r: pd.Series) -> bool:
    """A matrix-math kernel (gemm, conv, attention) computing in FP32 where tensor cores would run
    TF32 or bf16 several times faster: its name says FP32 (nsa_kernel_math 'fp32') and, for a
    GEMM or convolution, its tensor pipe, where measured, is idle (SIMT / FFMA); FP32 attention
    whatever its tensor pipe does (PyTorch's memory-efficient kernel builds FP32 products from
    three TF32 tensor-core products from Ampere on); or its name does not say and the pipes show
    it: tensor pipe idle, FMA pipe busy."""
    import pandas as pd

    if r["kernel_class"] not in MATMUL_CLASSES:
        return False
    tensor_idle = pd.isna(r["tensor_pct"]) or r["tensor_pct"] < _TENSOR_IDLE_PCT
    if r["math"] == "fp32":
        return bool(tensor_idle or r["kernel_class"] == "attention")
    fma_busy = pd.notna(r["fma_pct"]) and r["fma_pct"] >= _FMA_BUSY_PCT
    return bool(pd.isna(r["math"]) and pd.notna(r["tensor_pct"]) and tensor_idle and fma_busy)


_TENSOR_IDLE_PCT = 1.0  # tensor pipe below this % of peak: no tensor-core work to speak of
_FMA_BUSY_PCT = 20.0  # FMA pipe at or above this: the kernel's math runs there
