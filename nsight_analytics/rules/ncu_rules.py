"""Kernel rules on ncu reports: what bounds the heavy kernels, ranked by their timeline time.

A kernel's weight is its real timeline time when an nsys report of the same program is in the
workspace (all its launches there, matched by `nsa_kernel_key`, see queries/ncu/_macros.sql),
else the summed ncu duration of its profiled launches (a `--print-summary` row counts as its
`invocations` launches of its Average duration). Findings carry it as
`evidence["time_at_stake_ns"]`; none of these rules claims a saving (est_savings_ns None):
what a kernel-level fix gains depends on the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .context import Context
from .model import Finding, rule
from .units import dur, pct

if TYPE_CHECKING:  # pandas is imported when an ncu rule runs, not when the rules are loaded
    import pandas as pd

# One row per ncu report and kernel name: launches, ncu time, and the nsys match with the most time.
_WEIGHTS = """
WITH ncu AS (
    -- a --print-summary row stands for `invocations` launches of its Average duration
    SELECT k.report_id, k.name, nsa_kernel_key(k.name) AS kernel_key, sum(coalesce(k.invocations, 1)) AS launches,
           coalesce(sum(m.value * coalesce(k.invocations, 1)), 0) AS ncu_ns
    FROM ncu_kernels AS k
    LEFT JOIN ncu_metrics AS m
        ON m.report_id = k.report_id AND m.launch_id = k.launch_id AND m.metric_name = 'gpu__time_duration.sum'
    WHERE $rid IS NULL OR k.report_id = $rid
    GROUP BY ALL
),
by_name AS (
    SELECT report_id, name, count(*) AS launches, sum(duration_ns) AS total_ns
    FROM kernels WHERE name IS NOT NULL GROUP BY ALL
),
nsys AS (
    SELECT report_id AS nsys_report_id, nsa_kernel_key(name) AS kernel_key,
           sum(launches) AS nsys_launches, sum(total_ns) AS nsys_ns
    FROM by_name GROUP BY ALL
),
best AS (
    SELECT kernel_key, arg_max(nsys_report_id, nsys_ns) AS nsys_report_id,
           max(nsys_ns) AS nsys_ns, arg_max(nsys_launches, nsys_ns) AS nsys_launches
    FROM nsys WHERE kernel_key IN (SELECT kernel_key FROM ncu) GROUP BY ALL
)
SELECT n.report_id, n.name, n.launches, n.ncu_ns, b.nsys_report_id,
       CAST(b.nsys_launches AS BIGINT) AS nsys_launches, CAST(b.nsys_ns AS BIGINT) AS nsys_ns,
       sum(n.ncu_ns) OVER (PARTITION BY n.report_id) AS report_ncu_ns
FROM ncu AS n LEFT JOIN best AS b USING (kernel_key)
"""

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


def _weights(ctx: Context, rid: int) -> pd.DataFrame:
    w = ctx.sql_df("ncu_weights", _WEIGHTS, rid).copy()
    w["time_at_stake_ns"] = w["nsys_ns"].where(w["nsys_ns"].notna(), w["ncu_ns"]).astype("int64")
    w["share"] = w["ncu_ns"] / w["report_ncu_ns"].where(w["report_ncu_ns"] > 0)
    return w


def _heavy(ctx: Context, rid: int) -> pd.DataFrame:
    """Kernels holding at least heavy_kernel_share of the report's ncu time, heaviest first."""
    w = _weights(ctx, rid)
    w = w[(w["share"].fillna(1.0) >= ctx["heavy_kernel_share"])]
    return w.sort_values("time_at_stake_ns", ascending=False)


def _stake(row: pd.Series) -> tuple[str, dict[str, object]]:
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


def _short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _launch_weights(ctx: Context, rid: int) -> pd.DataFrame:
    """Per ncu row: duration and the launches it stands for (invocations of a summary row, else 1)."""
    return ctx.query_df("speed_of_light", rid)[["report_id", "launch_id", "duration_ns", "invocations"]]


def _weighted(df: pd.DataFrame, value: str, weights: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name: the time-weighted mean of `value` over its launches (duration x launches)."""
    d = df.merge(weights, on=["report_id", "launch_id"], how="left")
    d["w"] = d["duration_ns"].astype("float64").fillna(1.0).clip(lower=1.0) * d["invocations"].astype(
        "float64"
    ).fillna(1.0)
    d["wv"] = d[value] * d["w"]
    g = d.groupby(["report_id", "name"], dropna=False).agg(wv=("wv", "sum"), w=("w", "sum"))
    return (g["wv"] / g["w"]).rename(value).reset_index()


@rule(
    "stall-dominated",
    kind="ncu",
    severities=("warning",),
    thresholds=("stall_share_min", "heavy_kernel_share", "max_kernel_findings"),
)
def stall_dominated(ctx: Context, rid: int) -> list[Finding]:
    """One warp-stall reason dominates a heavy kernel's stall cycles.

    Anti-pattern: most of the cycles warps spend not issuing go to a single cause (waiting on
    global memory = long_scoreboard, on barriers, on a saturated pipe...). That one cause is
    the kernel's limiter, and the fix follows from its name.

    Fix: specific to the reason; the finding names the reason and the usual remedy. Check
    ncu's source view (`--set full`, Source page) for the instructions that stall.

    est_savings_ns: None. The time attributed to the reason (time at stake x share) is in the
    evidence as an upper bound, not an estimate: stalls overlap with other warps' issue.
    """
    import pandas as pd

    stalls = ctx.query_df("stalls", rid)
    if stalls.empty:
        return []
    sol = _launch_weights(ctx, rid)
    stalls = stalls.copy()
    out: list[Finding] = []
    per_reason = []
    for reason, grp in stalls.groupby("reason"):
        m = _weighted(grp[["report_id", "launch_id", "name", "share_pct"]], "share_pct", sol)
        m["reason"] = reason
        per_reason.append(m)
    shares = pd.concat(per_reason)
    launches = stalls[["report_id", "launch_id", "name"]].drop_duplicates()
    norm = _weighted(launches.assign(one=1.0), "one", sol)  # 1.0 per name; keeps names with stall data
    shares = shares[shares["name"].isin(norm["name"])]
    top = shares.sort_values("share_pct", ascending=False).drop_duplicates(["report_id", "name"])
    heavy = _heavy(ctx, rid)
    cands = heavy.merge(top, on=["report_id", "name"], how="inner")
    cands = cands[cands["share_pct"] >= ctx["stall_share_min"]].head(int(ctx["max_kernel_findings"]))
    for _, r in cands.iterrows():
        stake, ev = _stake(r)
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
            f"{reason} is {r['share_pct']:.0f}% of the warp stall cycles of {_short(r['name'])}{runner}. "
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
                f"{reason} stalls dominate {_short(r['name'], 60)}",
                message,
                f"{fix[0].upper()}{fix[1:]}.",
                ev,
                None,
            )
        )
    return out


@rule(
    "memory-bound",
    kind="ncu",
    severities=("info", "warning"),
    thresholds=("sol_busy_pct", "heavy_kernel_share", "max_kernel_findings"),
)
def memory_bound(ctx: Context, rid: int) -> list[Finding]:
    """A heavy kernel is bound by memory throughput (speed_of_light: memory busy, compute not).

    Anti-pattern: the kernel moves more bytes than its arithmetic needs: unfused elementwise
    chains re-reading tensors, fp32 where bf16 would do, uncoalesced or strided accesses.
    Near the memory peak (>= 80%) only moving fewer bytes helps (info); below it the access
    pattern wastes bandwidth (warning).

    Fix: fuse producers and consumers so data stays in registers/shared memory, use lower
    precision, vectorise and coalesce accesses, improve L2 reuse (tiling).

    est_savings_ns: None (depends on the bytes a fix removes).
    """
    return _bound_rule(ctx, rid, "memory")


@rule(
    "latency-bound",
    kind="ncu",
    severities=("warning",),
    thresholds=("latency_bound_max_pct", "heavy_kernel_share", "max_kernel_findings"),
)
def latency_bound(ctx: Context, rid: int) -> list[Finding]:
    """A heavy kernel keeps neither compute nor memory busy: it is latency bound.

    Anti-pattern: both SM and memory throughput stay below latency_bound_max_pct of peak, so
    the kernel waits on dependencies: too few warps or blocks to hide latency (small grid, low
    occupancy), serial dependency chains, or launch/tail overhead of a very short kernel.

    Fix: give the GPU more parallel work (bigger batches, fuse small kernels, more blocks than
    SMs), raise occupancy (see low-occupancy), add independent work per thread (ILP).

    est_savings_ns: None.
    """
    return _bound_rule(ctx, rid, "latency")


def _bound_rule(ctx: Context, rid: int, bound: str) -> list[Finding]:
    sol = ctx.query_df("speed_of_light", rid, busy_pct=float(ctx["sol_busy_pct"]))
    sol = sol[sol["compute_pct"].notna() & sol["memory_pct"].notna()]
    if sol.empty:
        return []
    w = sol[["report_id", "launch_id", "duration_ns", "invocations"]]
    comp = _weighted(sol[["report_id", "launch_id", "name", "compute_pct"]], "compute_pct", w)
    mem = _weighted(sol[["report_id", "launch_id", "name", "memory_pct"]], "memory_pct", w)
    pcts = comp.merge(mem, on=["report_id", "name"])
    busy = ctx["sol_busy_pct"]
    if bound == "memory":
        pick = pcts[(pcts["memory_pct"] >= busy) & (pcts["memory_pct"] > pcts["compute_pct"])]
    else:
        lim = ctx["latency_bound_max_pct"]
        pick = pcts[(pcts["memory_pct"] < lim) & (pcts["compute_pct"] < lim)]
    cands = _heavy(ctx, rid).merge(pick, on=["report_id", "name"]).head(int(ctx["max_kernel_findings"]))
    out = []
    for _, r in cands.iterrows():
        stake, ev = _stake(r)
        ev.update(compute_pct=float(r["compute_pct"]), memory_pct=float(r["memory_pct"]))
        sol_text = f"memory throughput {r['memory_pct']:.0f}% of peak, compute {r['compute_pct']:.0f}%"
        if bound == "memory":
            severity = "info" if r["memory_pct"] >= 80 else "warning"
            title = f"Memory-bound: {_short(r['name'], 60)} ({r['memory_pct']:.0f}% of DRAM peak)"
            rec = (
                "Move fewer bytes: fuse this kernel with its producer/consumer (torch.compile, a Triton "
                "kernel) so intermediates stay on chip, use bf16/fp16, vectorise and coalesce loads."
            )
            if severity == "warning":
                rec += " Below ~80% of peak the access pattern also wastes bandwidth: check coalescing and L2 hit rate."
        else:
            severity = "warning"
            title = f"Latency-bound: {_short(r['name'], 60)} (compute {r['compute_pct']:.0f}%, memory {r['memory_pct']:.0f}%)"
            rec = (
                "Give the GPU more parallel work per launch: larger batches or fused kernels, more blocks than "
                "SMs, more independent work per thread; check low-occupancy for a resource limiter."
            )
        message = f"{_short(r['name'])}: {sol_text} (duration-weighted over its launches). It holds {stake}."
        out.append(Finding(f"{bound}-bound", severity, rid, title, message, rec, ev, None))
    return out


_LIMITER_FIX = {
    "registers": "cap registers (__launch_bounds__, -maxrregcount) or simplify per-thread state",
    "shared_memory": "use less shared memory per block (smaller tiles, fewer stages) or a larger carve-out",
    "warps": "use smaller blocks so more of them fit per SM",
    "blocks": "use larger blocks: the SM's block slots run out before its warp slots",
    "barriers": "use fewer named barriers per block",
}


@rule(
    "low-occupancy",
    kind="ncu",
    severities=("info", "warning"),
    thresholds=(
        "occupancy_low_pct",
        "occupancy_theoretical_low_pct",
        "heavy_kernel_share",
        "max_kernel_findings",
    ),
)
def low_occupancy(ctx: Context, rid: int) -> list[Finding]:
    """A heavy kernel runs with few resident warps per SM (low achieved occupancy).

    Anti-pattern: too few warps to hide memory and pipeline latency. When the theoretical
    occupancy is itself low, a per-block resource (registers, shared memory, block size) caps
    how many blocks fit on an SM: the limiter is named (warning). When only the achieved
    occupancy is low, the grid is too small or unbalanced (tail effect) (info).

    Fix: relieve the named limiter (fewer registers, less shared memory per block, another
    block size), or launch more blocks / balance work.

    est_savings_ns: None (more occupancy helps only latency-bound kernels).
    """
    import pandas as pd

    occ = ctx.query_df("occupancy", rid)
    occ = occ[occ["achieved_pct"].notna()]
    if occ.empty:
        return []
    sol = _launch_weights(ctx, rid)
    ach = _weighted(occ[["report_id", "launch_id", "name", "achieved_pct"]], "achieved_pct", sol)
    theo = _weighted(occ[["report_id", "launch_id", "name", "theoretical_pct"]], "theoretical_pct", sol)
    lim = occ.groupby(["report_id", "name"])["limiter"].agg(
        lambda s: s.mode().iloc[0] if s.notna().any() else None
    )
    pcts = ach.merge(theo, on=["report_id", "name"]).merge(lim.reset_index(), on=["report_id", "name"])
    pcts = pcts[pcts["achieved_pct"] < ctx["occupancy_low_pct"]]
    cands = _heavy(ctx, rid).merge(pcts, on=["report_id", "name"]).head(int(ctx["max_kernel_findings"]))
    out = []
    for _, r in cands.iterrows():
        stake, ev = _stake(r)
        limiter = r["limiter"] if isinstance(r["limiter"], str) else None
        ev.update(
            achieved_pct=float(r["achieved_pct"]),
            theoretical_pct=float(r["theoretical_pct"]) if pd.notna(r["theoretical_pct"]) else None,
            limiter=limiter,
        )
        limited = (
            pd.notna(r["theoretical_pct"]) and r["theoretical_pct"] < ctx["occupancy_theoretical_low_pct"]
        )
        severity = "warning" if limited else "info"
        theo_text = f"{r['theoretical_pct']:.0f}%" if pd.notna(r["theoretical_pct"]) else "n/a"
        message = (
            f"{_short(r['name'])}: achieved occupancy {r['achieved_pct']:.0f}% of the SM's warp slots, "
            f"theoretical {theo_text}"
            + (f", limited by {limiter}" if limiter and limited else "")
            + f". It holds {stake}."
        )
        if limited and limiter:
            rec = "; ".join(_LIMITER_FIX.get(x, x) for x in limiter.split(",")).capitalize() + "."
        else:
            rec = (
                "The limit is not a per-block resource: launch more blocks (at least a few per SM), balance "
                "work across blocks, or fuse with neighbouring kernels so the grid fills the GPU."
            )
        title = f"Low occupancy ({r['achieved_pct']:.0f}%) in {_short(r['name'], 60)}" + (
            f", limited by {limiter}" if limiter and limited else ""
        )
        out.append(Finding("low-occupancy", severity, rid, title, message, rec, ev, None))
    return out
