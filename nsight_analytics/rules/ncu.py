"""What the ncu rules share: each kernel's weight (its time at stake), the heavy kernels, and
time-weighted means of per-launch metrics.

A kernel's weight is its real timeline time when an nsys report of the same program is in the
workspace (all its launches there, matched by `nsa_kernel_key`, see queries/ncu/_macros.sql),
else the summed ncu duration of its profiled launches (a `--print-summary` row counts as its
`invocations` launches of its Average duration): query `kernel_weights`. Findings carry it as
`evidence["time_at_stake_ns"]`; no ncu rule claims a saving (est_savings_ns None): what a
kernel-level fix gains depends on the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .context import Context
from .units import dur, pct

if TYPE_CHECKING:  # pandas is imported when an ncu rule runs, not when the rules are loaded
    import pandas as pd


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
    return name if len(name) <= width else name[: width - 3] + "..."


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


def sol_by_kernel(ctx: Context, rid: int) -> pd.DataFrame | None:
    """Per kernel name: compute_pct and memory_pct (speed_of_light), duration-weighted over its
    launches that have both; None when no launch has them."""
    sol = ctx.query_df("speed_of_light", rid)
    sol = sol[sol["compute_pct"].notna() & sol["memory_pct"].notna()]
    if sol.empty:
        return None
    w = sol[["report_id", "launch_id", "duration_ns", "invocations"]]
    comp = weighted(sol[["report_id", "launch_id", "name", "compute_pct"]], "compute_pct", w)
    mem = weighted(sol[["report_id", "launch_id", "name", "memory_pct"]], "memory_pct", w)
    return comp.merge(mem, on=["report_id", "name"])


def sol_candidates(
    ctx: Context, rid: int, keep: Callable[[pd.DataFrame], pd.Series]
) -> list[tuple[pd.Series, dict[str, object], str]]:
    """The heavy kernels whose duration-weighted speed-of-light percentages pass `keep` (a row
    mask over sol_by_kernel), at most max_kernel_findings, heaviest first: each with its evidence
    and the sentence memory-bound and latency-bound both write."""
    pcts = sol_by_kernel(ctx, rid)
    if pcts is None:
        return []
    picked = pcts[keep(pcts)]
    cands = heavy(ctx, rid).merge(picked, on=["report_id", "name"]).head(int(ctx["max_kernel_findings"]))
    out = []
    for _, r in cands.iterrows():
        stake_text, ev = stake(r)
        ev.update(compute_pct=float(r["compute_pct"]), memory_pct=float(r["memory_pct"]))
        sol_text = f"memory throughput {r['memory_pct']:.0f}% of peak, compute {r['compute_pct']:.0f}%"
        message = (
            f"{short(r['name'])}: {sol_text} (duration-weighted over its launches). It holds {stake_text}."
        )
        out.append((r, ev, message))
    return out
