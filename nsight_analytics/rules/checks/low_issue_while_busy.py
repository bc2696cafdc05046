"""low-issue-while-busy: parts of the steady state keep the GPU busy while its SMs barely issue."""

from __future__ import annotations

from typing import Any

from ...units import dur, pct
from ..context import Context, steady_evidence
from ..gpu_metrics import MIN_WINDOW_SHARE, metric_values, window_text
from ..model import Finding, Threshold, rule

_METRICS = [
    "gr_active",
    "sm_active",
    "sm_issue",
    "warps_in_flight",
    "tensor_active",
    "dram_read",
    "dram_write",
]

_FIX = {
    "parallelism": (
        "The kernels of {name} are too small to fill the GPU: fuse them and give each launch more work "
        "(a fused optimizer such as torch.optim.AdamW(fused=True) instead of per-tensor or foreach updates, torch.compile of the step, one kernel for an elementwise chain, "
        "larger batches), and replay the phase as a CUDA graph so launch gaps stop separating them."
    ),
    "occupancy": (
        "The SMs that work during {name} hold few warps: raise occupancy (more blocks or threads per "
        "launch, fewer registers or less shared memory per block; `ncu --section Occupancy` names the "
        "limiter) so there are warps to issue while others wait."
    ),
    "latency": (
        "The SMs during {name} are full of warps that do not issue: they stall on memory latency or "
        "dependencies. Profile its heaviest kernels with `ncu --set full` (warp state statistics) and "
        "raise instruction-level parallelism, coalesce accesses, or stage data in shared memory."
    ),
}


@rule(
    "low-issue-while-busy",
    order=74,
    needs=("gpu_metrics", "nvtx"),
    queries=("gpu_metrics_by_range",),
    reads=("steps",),
    severities=("info", "warning"),
    thresholds=(
        Threshold(
            "issue_per_busy_max",
            0.25,
            "fraction",
            "low-issue-while-busy fires when SM Issue / GR Active (issue cycles per cycle the GPU had work) stays below this.",
        ),
        Threshold(
            "issue_min_busy_pct",
            10.0,
            "%",
            "Ranges whose GR Active stays below this are idle, not busy (gpu-idle's finding).",
        ),
        Threshold(
            "issue_other_unit_pct",
            50.0,
            "%",
            "A range whose Tensor Active or DRAM read + write reaches this is limited by that unit, not by issue.",
        ),
        Threshold(
            "issue_warning_share",
            0.10,
            "fraction",
            "Share of the steady state's GPU time a low-issue range needs for a warning (else info).",
        ),
        MIN_WINDOW_SHARE,
    ),
)
def low_issue_while_busy(ctx: Context, rid: int) -> list[Finding]:
    """Parts of the steady state keep the GPU busy while its SMs issue few instructions (GPU metrics).

    Anti-pattern: while the kernels of an NVTX range run, the graphics/compute engine has work
    (GR Active) but the SMs issue an instruction in only a small share of those cycles (SM Issue):
    the GPU counts as busy on the timeline yet does little. Three causes, told apart by the
    metrics: too little parallel work (SMs Active far below GR Active: tiny kernels that fill a few
    SMs, as a foreach optimizer's thousands of launches do), low occupancy (the active SMs hold
    few warps), or latency (SMs full of warps that stall). Judged per NVTX range name over the
    steady state, each range projected onto the GPU (gpu_metrics_by_range); silent without
    GPU metrics, without NVTX ranges, for ranges under gpu_metrics_min_share of the steady
    state's GPU time, for ranges whose GR Active is below issue_min_busy_pct (idle, not busy),
    and for ranges whose Tensor Active or DRAM read + write reaches issue_other_unit_pct: a
    tensor-core GEMM issues few instructions for a lot of work, and a DRAM-bound phase is
    dram-saturated's finding.

    Fix: depends on the cause the finding names: fuse and batch tiny kernels; raise occupancy;
    or profile the stalls with ncu.

    est_savings_ns: None: issue efficiency does not convert into time without knowing the
    kernels' limiter; the finding states the range's GPU time.
    """
    window = ctx.steady(rid)
    phase = "steady" if window is not None else None
    rows = ctx.query("gpu_metrics_by_range", rid, metrics=",".join(_METRICS), phase=phase)
    steady = [r for r in rows if r.range_type == "phase" and r.name in ("steady", "run")]
    if not steady:
        return []
    total = {r.device_id: int(r.gpu_ns) for r in steady}
    step_names = {r.name for r in rows if r.range_type == "step"}
    ranges: dict[tuple[int, str], list[Any]] = {}
    for r in rows:
        if r.range_type == "nvtx" and r.name not in step_names:
            ranges.setdefault((r.device_id, r.name), []).append(r)
    out = []
    for (dev, name), rs in ranges.items():
        v = metric_values(rs)
        gpu_ns, span = int(rs[0].gpu_ns), total.get(dev, 0)
        busy, issue = v.get("gr_active"), v.get("sm_issue")
        if busy is None or issue is None or not span or gpu_ns / span < ctx["gpu_metrics_min_share"]:
            continue
        if busy < ctx["issue_min_busy_pct"] or issue / busy >= ctx["issue_per_busy_max"]:
            continue
        other = max(v.get("tensor_active", 0.0), v.get("dram_read", 0.0) + v.get("dram_write", 0.0))
        if other >= ctx["issue_other_unit_pct"]:
            continue  # tensor-core GEMMs issue few instructions; a DRAM-bound phase waits on DRAM
        active = v.get("sm_active", busy)
        cause = _cause(active, busy, v.get("warps_in_flight"))
        share = gpu_ns / span
        severity = "warning" if share >= ctx["issue_warning_share"] else "info"
        where = window_text(int(rs[0].start_ns), int(rs[0].end_ns))
        message = (
            f"{'In the steady state' if window is not None else 'Over the run'}, the GPU work of NVTX range {name!r} ({rs[0].ranges} ranges, {dur(gpu_ns)} on the "
            f"GPU, {pct(share)} of the {dur(span)} {'steady state' if window is not None else 'run'}; {where}) kept the GPU busy {busy:.0f}% of the "
            f"time (GR Active) but its SMs issued instructions only {issue:.1f}% of it (SM Issue): "
            f"{pct(issue / busy)} of the busy cycles. SMs Active {active:.1f}%"
            + (
                f", warps in flight {v['warps_in_flight']:.1f}% of the slots"
                if "warps_in_flight" in v
                else ""
            )
            + f". {_CAUSE_WORDS[cause]}"
        )
        ev = {
            "device_id": dev,
            "range": name,
            "ranges": int(rs[0].ranges),
            "gpu_ns": gpu_ns,
            "steady_gpu_ns": span,
            "share": share,
            "start_ns": int(rs[0].start_ns),
            "end_ns": int(rs[0].end_ns),
            "cause": cause,
            **{f"{m}_pct": x for m, x in v.items()},
            "issue_per_busy": issue / busy,
            **steady_evidence(window),
        }
        title = f"Low SM issue in {name!r}: {issue:.1f}% issue at {busy:.0f}% busy ({cause})"
        out.append(
            Finding(
                "low-issue-while-busy", severity, rid, title, message, _FIX[cause].format(name=repr(name)), ev
            )
        )
    return sorted(out, key=lambda f: -int(f.evidence["gpu_ns"]))


_CAUSE_WORDS = {
    "parallelism": "Fewer than half the SMs had work while the GPU was busy: the kernels are too small to fill it.",
    "occupancy": "The SMs that had work held few warps: occupancy limits how much latency they can hide.",
    "latency": "The SMs held warps but those warps stalled: the kernels are latency bound.",
}


def _cause(active: float, busy: float, warps: float | None) -> str:
    """Which limit the metrics point at: SMs without work, SMs without warps, or stalled warps."""
    if busy > 0 and active / busy < 0.5:
        return "parallelism"
    if warps is not None and active > 0 and warps / active < 0.25:
        return "occupancy"
    return "latency"
