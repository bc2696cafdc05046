"""gpu-idle: the GPU idles in the steady state; the dominant cause of its gaps says why."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ...units import count, dur, pct, plural
from .. import host_activity, stacks
from ..context import Context, steady_evidence, steady_scope
from ..model import GPU_ACTIVITY, Finding, Threshold, rule

_CAUSE_WORDS = {
    "sync": "the host blocked in a synchronising call",
    "host_wait": "the thread that launches the next work was waiting",
    "late_launch": "the host issued the next work late",
    "unknown": "work queued but not started (dependency, other process, or no launch record)",
}


_CAUSE_FIX = {
    "sync": (
        "Take the synchronisation out of the steady-state loop: {detail} blocks the host until the GPU "
        "drains, then the GPU waits for the next launch. Synchronise once every N steps; express "
        "dependencies with cudaEventRecord + cudaStreamWaitEvent; in PyTorch avoid .item(), .cpu(), "
        "printing tensors and torch.cuda.synchronize() per step, and copy results back with "
        "non_blocking=True into pinned buffers."
    ),
    "host_wait": (
        "The launching thread was waiting in {detail} while the GPU idled. Communication (MPI_*, nccl*, "
        "ucp_*): overlap it with compute (non-blocking MPI_Isend/Irecv with work between post and wait, "
        "CUDA-aware MPI or NCCL on a side stream, gradient bucketing) and look for load imbalance across "
        "ranks. Sleeps: take them out of the loop. Condition variables, semaphores, locks, poll: the "
        "thread waits for a producer (a data loader, a queue), so make the producer faster (more "
        "DataLoader workers, prefetch_factor, pinned memory). Reads: data loading from storage; cache or "
        "prefetch it."
    ),
    "late_launch": (
        "The CPU thread is the bottleneck between bursts (launch call {detail} issued after the GPU went "
        "idle): move host work off the critical path (DataLoader workers, prefetching, no sleeps or I/O "
        "in the loop), queue the next step before waiting on this one, or capture the steady state in "
        "a CUDA graph."
    ),
    "unknown": (
        "The work was already queued but did not start: look for cross-stream event waits, another "
        "process sharing the GPU, or missing launch records; `nsa query gaps` lists each gap with what "
        "ran before and after it."
    ),
}


# Most of the idle time in gaps shorter than idle_gap_min_ns: no single wait, the host is too slow
# for how little work each launch carries. Keyed by "does the program replay CUDA graphs".
_SHORT_GAPS_FIX = {
    False: (
        "The GPU waits on the host between short bursts of work: fuse the small kernels and capture the "
        "steady-state step in a CUDA graph so one launch replays it, avoid a host readback every step "
        "(.item(), .tolist(), .cpu(): copy into pinned memory asynchronously and read the previous step's "
        "result), and give each step more work (larger batches)."
    ),
    True: (
        "The program already replays CUDA graphs, yet each step still leaves the GPU waiting on the host "
        "between short bursts of work: capture the whole step in the graph (input copies, sampling), avoid "
        "a host readback every step (.item(), .tolist(), .cpu(): copy into pinned memory asynchronously "
        "and read the previous step's result), and give each step more work (larger batches, several "
        "decode steps per launch)."
    ),
}


# What gap_host reads beyond the GPU timeline and the launch calls: the host detail, which the
# rule can do without when it was left in an export that is gone (the message says so).
_HOST_DETAIL = ("nvtx_ranges", "osrt_api", "cpu_samples", "cpu_ops")


def _gaps(ctx: Context, rid: int) -> Any:
    return ctx.query("gaps", rid, min_gap_ns=int(ctx["idle_gap_min_ns"]))


def _at_startup(ctx: Context, rid: int) -> Callable[[Any], bool]:
    """Is a gap before its device's first kernel (start-up, for a report without steps)?"""
    first = {(r.report_id, r.device_id): r.first_kernel_ns for r in ctx.query("kernel_span", rid)}

    def at_startup(g: Any) -> bool:
        first_ns = first.get((g.report_id, g.device_id))
        return first_ns is None or g.gap_end_ns <= first_ns

    return at_startup


def _idle(ctx: Context, rid: int) -> tuple[Any, Any, int, int, int, int] | None:
    """gpu-idle's tests before it reads the gaps' causes and the host detail: (utilization,
    steady window, idle time before the first kernels, span, idle time, steady steps), or None
    when the report has no GPU span worth judging or idles less than `idle_share_warning` of it."""
    util = ctx.query("utilization", rid, phase="steady")
    if not util:
        return None
    window = ctx.steady(rid)
    startup_ns = (
        0 if window is not None else int(_gaps(ctx, rid).where(_at_startup(ctx, rid)).total("gap_ns"))
    )
    span = int(util.total("span_ns")) - startup_ns
    idle = int(util.total("idle_ns")) - startup_ns
    steps = int(window.steady_steps) if window is not None else 0
    if span <= 0 or (span < ctx["idle_min_span_ns"] and steps < ctx["idle_min_steps"]):
        return None
    if idle / span < ctx["idle_share_warning"]:
        return None
    return util, window, startup_ns, span, idle, steps


def _reads_host(ctx: Context, rid: int) -> bool | tuple[str, ...]:
    """Which of its optional tables gpu-idle reads on this report: the host detail (gap_host) and,
    where they could name a line (stacks.could_name), the stack tables (gap_stacks); none where
    it returns before them, which its tests tell (_idle) when one of those is still to load."""
    tables = _HOST_DETAIL + (stacks.TABLES if stacks.could_name(ctx, rid) else ())
    if ctx.unloaded(rid, tables) and _idle(ctx, rid) is None:
        return False
    return tables


@rule(
    "gpu-idle",
    order=80,
    needs=(GPU_ACTIVITY,),
    queries=("utilization", "gaps", "kernel_span", "gap_host", "graph_launches", "gap_stacks"),
    reads=("steps", "processes"),
    optional_reads=(*_HOST_DETAIL, *stacks.TABLES),
    optional_when=_reads_host,
    severities=("warning", "critical"),
    thresholds=(
        Threshold(
            "idle_share_warning",
            0.20,
            "fraction",
            "GPU idle share of the steady-state span (the whole span without steps) that is a warning.",
        ),
        Threshold(
            "idle_share_critical",
            0.50,
            "fraction",
            "GPU idle share of the steady-state span that is critical.",
        ),
        Threshold(
            "idle_gap_min_ns",
            100_000,
            "ns",
            "Idle gaps shorter than this are not attributed to a cause (launch jitter).",
        ),
        Threshold(
            "idle_min_span_ns",
            50_000_000,
            "ns",
            "Steady-state spans shorter than this are too short to judge idleness (a smoke test, not a run),",
        ),
        Threshold(
            "idle_min_steps",
            10,
            "count",
            "... unless they hold at least this many steady steps: a loop that repeats is judged however fast it is.",
        ),
        Threshold(
            "idle_host_lead_share",
            0.25,
            "fraction",
            "A host activity of the launching thread (a sleep, a wait, a synchronising or MPI call, an NVTX "
            "range, a profiler op) holding at least this share of the idle time leads the finding.",
        ),
    ),
)
def gpu_idle(ctx: Context, rid: int) -> list[Finding]:
    """The GPU sits idle for a large share of the steady state.

    Anti-pattern: inside the program's main loop the device runs nothing for long stretches,
    because the host blocks in synchronising calls (cause `sync`), the launching thread waits in
    communication or the OS (`host_wait`: MPI_Recv, a NCCL call, a sleep, a lock, a read), issues
    the next work late (`late_launch`: Python overhead, slow host code) or work waits on something
    the trace cannot show (`unknown`). The loop is judged on its steady state (table `steps`: from the
    first step after warm-up to the end of the last step); start-up is the `startup` rule's.
    Reports without steps are judged over their whole span, less the idle time before each
    device's first kernel, and the finding says so.

    What the host did meanwhile (query `gap_host`): over all the idle time of the window, short
    gaps between launches included (in a launch-bound loop that is where the time goes), the
    thread that launched the work ending each gap is followed through its CUDA API, OS runtime and
    MPI calls, NVTX ranges, PyTorch-profiler ops and Python frames and CPU samples. When one of
    them holds at least `idle_host_lead_share` of the idle time it leads the title and the first
    sentence, per step where the report has steps: "the host sleeps (clock_nanosleep) 2 ms of
    each 2.7 ms step"; the step ranges and the ranges, ops and frames that enclose launches (a
    `forward` range, the loop's Python frame) do not count, what runs inside the lead (a sleep in
    a range, the deepest Python frame under an op, CPU samples) or around it is named. Otherwise
    the finding lists the largest activities, the time no trace covers (host code: Python only
    for a Python program) and the phase most of the idle time falls in. When NVTX ranges, OS
    runtime calls or CPU samples were left in an export that has moved since ingest, the rule
    judges without them and says which are missing.

    Which line of code (query `gap_stacks`): where the report has call stacks sampled on the
    launching thread during the idle time (nsys Python or CPU samples, PyTorch-profiler Python
    frames), the finding names the innermost user frame that explains the most of it
    (`stack_loop.py:31 in busy_python`, with its callers) in its message and under `location` in
    its evidence; without stacks it says once which capture option records them.

    Fix: depends on the lead activity and the dominant cause; the finding says which and what to
    change.

    est_savings_ns: the steady-state idle time in gaps of the dominant cause (gaps >=
    idle_gap_min_ns), the most that removing that cause can give back; the largest device's value
    when several GPUs run side by side. None when the dominant cause is `unknown` (no honest fix
    to estimate). Without steps, the time the launching thread spent loading GPU code
    (cuModuleLoad*, cuLibraryLoad*) inside the gaps is start-up too and is left out. Severity
    follows the steady-state idle share.
    """
    judged = _idle(ctx, rid)
    if judged is None:
        return []
    util, window, startup_ns, span, idle, steps = judged
    gaps = _gaps(ctx, rid)
    if window is not None:
        steady = gaps.where(lambda g: g.phase == "steady")
    else:
        at_startup = _at_startup(ctx, rid)
        steady = gaps.where(lambda g: not at_startup(g))
    share = idle / span
    severity = "critical" if share >= ctx["idle_share_critical"] else "warning"
    by_cause = steady.sum_by("cause", "gap_ns")
    gap_total = int(steady.total("gap_ns"))
    devices = len(util)
    where = f" on {devices} GPUs" if devices > 1 else ""
    scope = steady_scope(window, ctx.steps_unknown(rid))
    ev = {
        "phase": "steady" if window is not None else "run",
        "span_ns": span,
        "idle_ns": idle,
        "idle_share": share,
        "devices": devices,
        "gaps": len(steady),
        "gap_ns": gap_total,
        "idle_gap_min_ns": int(ctx["idle_gap_min_ns"]),
        "startup_idle_ns": startup_ns,
        "idle_by_cause_ns": {str(k): int(v) for k, v in by_cause},
        **steady_evidence(window),
    }
    # what the launching thread did in all the idle time of the window, short gaps included
    host = host_activity.host_time(ctx.query("gap_host", rid, top_n=_HOST_TOP))
    found = host_activity.lead(host, ctx["idle_host_lead_share"]) if host else None
    step_ns = span / devices / steps if steps else 0.0
    per_gpu_idle = idle / devices
    gap_text = f"{count(len(steady))} gaps of at least {dur(ctx['idle_gap_min_ns'])} hold {dur(gap_total)}."
    message = (
        f"{scope[0].upper()}{scope[1:]}, the GPU was idle {dur(idle)} of {dur(span)}{where} ({pct(share)})"
    )
    if found and host:
        describe = host_activity.describe(found, host, steps, step_ns, per_gpu_idle)
        message += f": the thread that launches its work {describe}. {gap_text[0].upper()}{gap_text[1:]}"
        ev["host_lead"] = _lead_evidence(found, host, steps)
    else:
        message += f"; {gap_text}"
    if host:
        ev.update(host_idle_ns=host.idle_ns, host_untraced_ns=host.untraced_ns)
    savings = None
    graphs = bool(ctx.query("graph_launches", rid))
    short = idle - gap_total >= 0.5 * idle  # most of the idle time lies in short gaps
    short_text = ""
    if short:
        short_text = (
            f" Most of the idle time, {dur(idle - gap_total)}, lies in gaps shorter than {dur(ctx['idle_gap_min_ns'])}: "
            "the host issues the work too slowly for how short it is."
        )
        if window is not None and steps:
            short_text += (
                f" A steady step takes {dur(span / steps)} on average and keeps the GPU busy "
                f"{dur((span - idle) / steps)} of it."
            )
        ev["short_gap_idle_ns"] = idle - gap_total
    if not by_cause:
        recommendation = _SHORT_GAPS_FIX[graphs]
    else:
        cause, cause_ns = by_cause[0]
        cause_gaps = steady.where(lambda g: g.cause == cause)
        detail = cause_gaps.sum_by("cause_detail", "gap_ns")
        detail_name = str(detail[0][0]) if detail else "the call"
        ev.update(dominant_cause=cause, dominant_detail=detail_name if detail else None)
        cause_share = cause_ns / gap_total if gap_total else 0.0
        message += (
            f" {pct(cause_share)} of that gap time ({dur(cause_ns)}, {plural(len(cause_gaps), 'gap')}): "
            f"{_CAUSE_WORDS.get(cause, cause)}" + (f", mostly {detail_name}" if detail else "") + "."
        )
        for other, other_ns in by_cause[1:]:
            if gap_total and other_ns / gap_total >= 0.05:  # a second cause worth naming
                others = steady.where(partial(_has_cause, other))
                top = others.sum_by("cause_detail", "gap_ns")
                message += (
                    f" Also {pct(other_ns / gap_total)} ({dur(other_ns)}, {plural(len(others), 'gap')}): "
                    f"{_CAUSE_WORDS.get(str(other), str(other))}"
                    + (f", mostly {top[0][0]}" if top else "")
                    + "."
                )
        recommendation = _CAUSE_FIX.get(cause, _CAUSE_FIX["unknown"]).format(detail=detail_name)
        if graphs:  # no advice to capture graphs to a program that does
            recommendation = recommendation.replace(
                ", or capture the steady state in a CUDA graph.",
                "; the program already replays CUDA graphs, so look at what the host does before each launch.",
            )
        if cause != "unknown":
            savings = int(cause_gaps.sum_by("device_id", "gap_ns", nulls=True)[0][1])
        if short:
            recommendation = (
                f"{_SHORT_GAPS_FIX[graphs]} The longer gaps: {recommendation[0].lower()}{recommendation[1:]}"
            )
    message += short_text
    loading = host.loading_ns() if host and window is None else 0
    if savings is not None and loading:  # no steps: module loading inside the gaps is start-up too
        savings = max(0, savings - loading)
        ev["startup_loading_ns"] = loading
    if found:
        recommendation = _with_lead(
            found, ev.get("dominant_cause"), ev.get("dominant_detail"), recommendation
        )
    if host and not found:
        message += host_activity.summary(host, _is_python(ctx, rid, gaps))
    missing = ctx.unloaded(rid, _HOST_DETAIL)
    if missing:
        message += (
            f" Host detail missing: {', '.join(missing)} stayed in {ctx.report_file(rid)} at ingest, and "
            "that file has moved or changed since (`nsa ingest --replace --full FILE` brings it in)."
        )
        ev["host_detail_missing"] = missing
    line = _stack_line(ctx, rid)
    if isinstance(line, tuple):
        message += f" {line[0]}"
        ev["location"] = line[1]
    if window is not None:
        message += f" Start-up before step {window.first_step} is not counted (see the startup rule)."
    elif startup_ns or loading:
        parts = [f"{dur(startup_ns)} idle before the first kernel"] if startup_ns else []
        parts += [f"{dur(loading)} of the gaps the host spent loading GPU code"] if loading else []
        message += f" Not counted as a saving (start-up): {' and '.join(parts)}."
        if "--capture-range" not in recommendation:
            recommendation += (
                " To profile only the steady state, start the capture later (`nsys profile --delay`, or "
                "--capture-range=cudaProfilerApi around the loop)."
            )
    if isinstance(line, str):
        recommendation += f" {line}"
    title = f"GPU idle {pct(share)} of the {'steady state' if window is not None else 'run'}{where}"
    if found:
        lead_ns = found.act.in_gaps_ns / devices
        title += (
            f": the host {found.act.doing()} {host_activity.amount(lead_ns, steps, step_ns, per_gpu_idle)}"
        )
    elif short:
        title += ", mostly in short gaps between the host's launches"
    elif "dominant_cause" in ev:
        title += f", mostly {ev['dominant_cause'].replace('_', ' ')}"
    return [Finding("gpu-idle", severity, rid, title, message, recommendation, ev, savings)]


def _stack_line(ctx: Context, rid: int) -> str | tuple[str, dict[str, Any]] | None:
    """(sentence, evidence) naming the user frame the idle time waited on most, or the capture
    hint (a str) where the report has no samples or Python frames, or None."""
    if not stacks.sources(ctx, rid) & set(stacks.SAMPLE_SOURCES):
        return stacks.capture_hint(ctx, rid, needs="samples")
    rows = ctx.query("gap_stacks", rid)
    top = stacks.top_user(rows, stacks.SAMPLE_SOURCES, "share", 1.0)
    if top is None:
        return stacks.no_user_frame_hint(ctx, rid, rows)
    callers = f" (called from {top.callers})" if top.callers else ""
    sentence = (
        f"The idle time waited most on {stacks.where(top)}{callers}{stacks.beneath(top)}: "
        f"{dur(top.explained_ns)}, {pct(top.share)} of it by {stacks.SOURCE_WORDS[top.source]}."
    )
    return sentence, stacks.location(top, explained_ns=int(top.explained_ns), share=float(top.share))


# gap_host rows per report, device and source: enough for the chain of Python frames under an op.
_HOST_TOP = 100


def _lead_evidence(found: host_activity.Lead, host: host_activity.HostTime, steps: int) -> dict[str, Any]:
    a = found.act

    def name(x: host_activity.Activity | None) -> str | None:
        return None if x is None else x.name

    return {
        "source": a.source,
        "name": a.name,
        "in_gaps_ns": a.in_gaps_ns,
        "idle_share": a.in_gaps_ns / host.idle_ns,
        "per_step_ns": a.in_gaps_ns / host.devices / steps if steps else None,
        "inner": name(found.inner),
        "outer": name(found.outer),
        "code": name(found.code),
        "second": name(found.second),
    }


def _with_lead(found: host_activity.Lead, cause: str | None, detail: str | None, cause_fix: str) -> str:
    """The lead's fix; then the gaps' dominant cause's, unless the lead is that cause (its wait or
    call) or explains it (a late launch is the host busy in the lead)."""
    lead_fix = host_activity.fix(found)
    names = {name for _, name in found.related()} | ({found.second.name} if found.second else set())
    if cause is None or cause == "late_launch" or detail in names:
        return lead_fix
    return f"{lead_fix} The gaps' dominant cause: {cause_fix[0].lower()}{cause_fix[1:]}"


def _is_python(ctx: Context, rid: int, gaps: Any) -> bool:
    """Is the program a Python one: a PyTorch-profiler trace, or a process named python* that
    launched the work after the gaps."""
    if any(r.format == "kineto" for r in ctx.reports() if r.report_id == rid):
        return True
    pids = {g.pid for g in gaps if g.pid is not None}
    procs = ctx.sql(
        "gpu_idle_processes",
        "SELECT report_id, pid, name FROM processes WHERE $rid IS NULL OR report_id = $rid",
        rid,
    )
    return any(p.pid in pids and str(p.name or "").lower().startswith("python") for p in procs)


def _has_cause(cause: Any, gap: Any) -> bool:
    return bool(gap.cause == cause)
