"""startup: a large part of the capture is start-up, before the steady state."""

from __future__ import annotations

from typing import Any

from ...units import count, dur, pct
from .. import stacks
from ..context import Context, steady_evidence
from ..model import GPU_ACTIVITY, Finding, Threshold, rule

_CATEGORY_FIX = {
    "module loading": "lazy module loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) and fewer "
    "kernel variants compiled at start-up",
    "memory allocation": "allocating once and reusing (PyTorch's caching allocator does after the first step; "
    "pre-allocate buffers outside the loop)",
    "CUDA graph instantiation": "instantiating graphs once and updating them (cudaGraphExecUpdate) instead of "
    "re-instantiating",
    "context creation": "creating the CUDA context once per process",
    "waiting for the GPU": "less start-up GPU work: autotuning (torch.backends.cudnn.benchmark, cuBLAS/Triton "
    "autotune) runs once and can be cached",
}


@rule(
    "startup",
    order=90,
    needs=(GPU_ACTIVITY,),
    queries=("utilization", "startup_calls", "hot_stacks"),
    reads=("steps",),
    optional_reads=stacks.TABLES,
    optional_when=stacks.could_name,
    severities=("info",),
    thresholds=(
        Threshold(
            "startup_share_info",
            0.20,
            "fraction",
            "Start-up (before the first steady step) share of the capture's GPU timeline worth an info finding.",
        ),
        Threshold("startup_min_ns", 100_000_000, "ns", "Start-up shorter than this is not reported."),
    ),
)
def startup(ctx: Context, rid: int) -> list[Finding]:
    """A large part of the capture is start-up, before the main loop's steady state.

    Anti-pattern: not a defect of the program so much as of the capture: module loading, first
    allocations, cuDNN/cuBLAS autotuning and the first step's one-off work fill much of a
    short capture, so whole-run numbers (idle share, copy share) describe the warm-up, not the
    loop. nsa judges the timeline rules on the steady state (table `steps`); this finding says
    what the start-up cost and where the host spent it.

    Fix: profile the steady state (`nsys profile --delay`, or --capture-range=cudaProfilerApi
    / nvtx around the loop); where start-up matters (short jobs, serving cold starts), cut the
    largest host cost it names.

    Which line of code (query `hot_stacks`): where the report holds Python or CPU samples, the
    message names the user frame the sampled start-up time ran under most (an import, a model
    built or moved to the GPU), the evidence the same under `location`.

    est_savings_ns: None (start-up is paid once per run, not per step).
    """
    window = ctx.steady(rid)
    if window is None:
        return []
    startup_util = ctx.query("utilization", rid, phase="startup")
    steady_util = ctx.query("utilization", rid, phase="steady")
    startup_ns = max((int(r.span_ns) for r in startup_util), default=0)
    steady_ns = max((int(r.span_ns) for r in steady_util), default=0)
    total = startup_ns + steady_ns
    if total <= 0 or startup_ns < ctx["startup_min_ns"] or startup_ns / total < ctx["startup_share_info"]:
        return []
    busy = max((int(r.any_busy_ns) for r in startup_util), default=0)
    calls = ctx.query("startup_calls", rid)
    by_cat = sorted(calls, key=lambda r: -r.total_ns)
    parts = [
        f"{r.category} {dur(r.total_ns)} in {count(r.calls)} calls" for r in by_cat if r.total_ns >= 1_000_000
    ]
    steps = f"step {window.first_step}" if window.first_step else "the first step"
    message = (
        f"Start-up, from the first GPU activity to the start of {steps} (of {count(window.steps)} steps, "
        f"{window.source}), took {dur(startup_ns)}: {pct(startup_ns / total)} of the capture's GPU "
        f"timeline, against {dur(steady_ns)} of steady state. The GPU was busy {dur(busy)} of it."
    )
    if parts:
        message += " Host time in CUDA calls before the steady state: " + "; ".join(parts[:4]) + "."
    hot = _hot_frame(ctx, rid, int(window.start_ns))
    if hot is not None:
        message += (
            f" Of the host's start-up {stacks.SOURCE_WORDS[hot.source]}, {pct(hot.user_samples / hot.samples)} "
            f"({dur(hot.user_ns)}) ran under {stacks.frame_text(hot)}."
        )
    message += " Timeline findings judge the steady state only."
    fixes = [
        _CATEGORY_FIX[r.category]
        for r in by_cat[:2]
        if r.total_ns >= 1_000_000 and r.category in _CATEGORY_FIX
    ]
    recommendation = (
        "To profile the loop itself, start the capture after warm-up (`nsys profile --delay N`, or "
        "`--capture-range=cudaProfilerApi` with cudaProfilerStart/Stop around a few steps)."
        + (
            " Where start-up time matters (short jobs, cold starts), cut it by " + "; ".join(fixes) + "."
            if fixes
            else ""
        )
    )
    ev = {
        "startup_ns": startup_ns,
        "steady_ns": steady_ns,
        "startup_share": startup_ns / total,
        "startup_gpu_busy_ns": busy,
        "host_calls": {str(r.category): {"calls": int(r.calls), "total_ns": int(r.total_ns)} for r in by_cat},
        **steady_evidence(window),
    }
    if hot is not None:
        ev["location"] = stacks.frame_location(hot)
    title = f"Start-up fills {pct(startup_ns / total)} of the capture ({dur(startup_ns)} before {steps})"
    return [Finding("startup", "info", rid, title, message, recommendation, ev, None)]


def _hot_frame(ctx: Context, rid: int, end_ns: int) -> Any:
    """The hot_stacks row of the user frame most start-up samples ran under, or None."""
    if not stacks.sources(ctx, rid) & {"python_sample", "cpu_sample"}:
        return None
    return stacks.hot_user(ctx.query("hot_stacks", rid, end_ns=end_ns, top_n=None))
