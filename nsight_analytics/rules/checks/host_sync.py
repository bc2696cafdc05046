"""host-sync: host threads block in synchronising CUDA calls while their GPUs idle."""

from __future__ import annotations

from typing import Any

from ...units import count, dur, pct
from .. import stacks
from ..context import Context, steady_evidence, steady_scope
from ..model import Finding, Threshold, rule


@rule(
    "host-sync",
    order=100,
    needs=("cuda_api",),
    queries=("sync_beyond_gpu", "launch_stacks"),
    optional_reads=stacks.TABLES,
    optional_when=stacks.could_name,
    severities=("info", "warning", "critical"),
    thresholds=(
        Threshold(
            "sync_share_warning",
            0.20,
            "fraction",
            "Share of a process's run (its steady state when the report has steps) its host threads spend "
            "blocked in synchronising calls, beyond GPU work, that is a warning.",
        ),
        Threshold("sync_share_critical", 0.50, "fraction", "The same share that is critical."),
        Threshold(
            "sync_share_info",
            0.20,
            "fraction",
            "Blocked share (all of it, GPU busy or not) worth an info finding even when the GPU was busy.",
        ),
    ),
)
def host_sync(ctx: Context, rid: int) -> list[Finding]:
    """Host threads spend a large share of the run blocked in synchronising CUDA calls.

    Anti-pattern: cudaDeviceSynchronize / cudaStreamSynchronize / cudaEventSynchronize and
    synchronous cudaMemcpy / cudaMemset in the hot loop. While the host waits it cannot queue
    more work, so after the call returns the GPU waits for the host in turn. Time blocked while
    the process's GPUs were busy is mostly harmless (the host waits for work it needs); time
    blocked while they were idle is pure loss for both (waiting on another stream, process or
    event that is late).

    Fix: synchronise less often (every N steps), replace host syncs with stream/event
    dependencies, use async copies into pinned buffers and read results a step later.

    Judged on the steady state (the whole run for reports without steps): calls before the first
    steady step are start-up, and a call running into it counts from there.

    Which line of code (query `launch_stacks`, kind `sync`): where the report holds the call
    stacks of the blocking calls (nsys `--python-backtrace=cuda` / `--cudabacktrace`, PyTorch
    profiler `with_stack=True`), the message names the user frames that blocked longest (the
    `.item()` line: `stack_loop.py:61 in report_loss`, calling cudaStreamSynchronize), the evidence
    the same under `location`. A capture without backtraces of the calls but with CPU or Python
    samples (`nsys profile -s cpu`, `--python-sampling=true`) names the line from the samples of the
    blocking thread taken inside the calls, when at least stacks.MIN_SAMPLED_CALLS calls hold one
    (else it says they are too few). Without stacks the finding says once which capture option
    records them.

    est_savings_ns: the blocked time during which the process's GPUs were idle ("beyond GPU
    work"), for the process the finding names (the one with the largest such share of its run,
    or for an info finding the largest blocked share); time covered by GPU work is not counted.
    Severity follows that share of the process's run; an info finding notes a large blocked
    share when the GPU was busy for most of it (its title says how much of it the GPU idled).
    """
    calls = ctx.query("sync_beyond_gpu", rid, phase="steady")
    window = ctx.steady(rid)
    run = "run" if window is None else "steady state"
    per_pid: dict[Any, dict[str, Any]] = {}
    for r in sorted((r for r in calls if r.pid is not None), key=lambda r: r.pid):
        p = per_pid.setdefault(r.pid, {"blocked_ns": 0, "beyond_ns": 0, "span_ns": None})
        p["blocked_ns"] += r.blocked_ns
        p["beyond_ns"] += r.beyond_ns
        if r.pid_span_ns is not None and (p["span_ns"] is None or r.pid_span_ns > p["span_ns"]):
            p["span_ns"] = r.pid_span_ns
    per_pid = {pid: p for pid, p in per_pid.items() if p["span_ns"] is not None and p["span_ns"] > 0}
    if not per_pid:
        return []
    for p in per_pid.values():
        p["share"] = p["blocked_ns"] / p["span_ns"]
        p["beyond_share"] = p["beyond_ns"] / p["span_ns"]
    worst_pid = max(per_pid, key=lambda pid: per_pid[pid]["beyond_share"])  # first of equals
    w = per_pid[worst_pid]
    if w["beyond_share"] >= ctx["sync_share_critical"]:
        severity = "critical"
    elif w["beyond_share"] >= ctx["sync_share_warning"]:
        severity = "warning"
    else:
        worst_pid = max(per_pid, key=lambda pid: per_pid[pid]["share"])
        w = per_pid[worst_pid]
        if w["share"] < ctx["sync_share_info"]:
            return []
        severity = "info"
    # the query lists each process's calls by blocked time, most first
    mine = [r for r in calls if r.pid == worst_pid]
    top = mine[0]
    names = ", ".join(f"{r.name} {dur(r.blocked_ns)} in {count(r.calls)} calls" for r in mine[:3])
    procs = f" (worst of {len(per_pid)} processes)" if len(per_pid) > 1 else ""
    ev = {
        "pid": int(worst_pid),
        "blocked_ns": int(w["blocked_ns"]),
        "beyond_gpu_ns": int(w["beyond_ns"]),
        "process_span_ns": int(w["span_ns"]),
        "blocked_share": float(w["share"]),
        "beyond_gpu_share": float(w["beyond_share"]),
        "calls": {str(r.name): {"calls": int(r.calls), "blocked_ns": int(r.blocked_ns)} for r in mine},
        "processes": len(per_pid),
        **steady_evidence(window),
    }
    scope = steady_scope(window, ctx.steps_unknown(rid))
    message = (
        f"{scope[0].upper()}{scope[1:]}, process {int(worst_pid)}{procs} spent {dur(w['blocked_ns'])} of "
        f"its {dur(w['span_ns'])} ({pct(w['share'])}) blocked in synchronising calls: {names}. Its GPUs "
        f"were idle for {dur(w['beyond_ns'])} of that ({pct(w['beyond_share'])} of the {run})."
    )
    if severity == "info":
        title = f"Host blocked {pct(w['share'])} of the {run}{_in_calls(mine, w['blocked_ns'])}, " + (
            "while the GPU was busy"
            if w["beyond_ns"] <= 0
            else f"the GPU idle for {pct(w['beyond_ns'] / w['blocked_ns'])} of that"
        )
        if 2 * w["beyond_ns"] > w["blocked_ns"]:  # the GPU idled for most of the wait: a small win today
            recommendation = (
                f"The GPU idled for {pct(w['beyond_ns'] / w['blocked_ns'])} of these waits, "
                f"{dur(w['beyond_ns'])} ({pct(w['beyond_share'])} of the {run}): synchronise every N steps, "
                "or express the dependency with events (cudaEventRecord + cudaStreamWaitEvent), so the host "
                "queues the next work before the GPU runs dry."
            )
        else:
            recommendation = (
                "The waits cover GPU work, so they are not the bottleneck today; but a host that waits "
                "cannot queue ahead. Once the GPU work shrinks, replace per-step synchronisation with "
                "events or synchronise every N steps."
            )
    else:
        title = f"Host blocked in {top.name} while the GPU idles: {pct(w['beyond_share'])} of the {run}"
        recommendation = (
            f"Remove {top.name} from the hot loop or make it rarer: synchronise every N steps, express "
            "dependencies with cudaEventRecord + cudaStreamWaitEvent, use cudaMemcpyAsync into pinned "
            "buffers and consume results one step later (PyTorch: avoid .item()/.cpu()/print per step)."
        )
    callers = _callers(ctx, rid, None if window is None else int(window.start_ns))
    if isinstance(callers, str):
        recommendation += f" {callers}"
    elif callers:
        named = [
            f"{stacks.where(r)}{stacks.callers_text(r) if r.user_line is None else ''}{stacks.beneath(r, r.api_name)} "
            f"({dur(r.api_ns)} in {count(r.calls)} calls)"
            for r in callers
        ]
        message += f" The blocking calls came from {' and '.join(named)}, by {stacks.by_samples(callers[0])}."
        ev["location"] = stacks.location(
            callers[0], calls=int(callers[0].calls), blocked_ns=int(callers[0].api_ns)
        )
        if len(callers) > 1:
            ev["locations"] = [
                stacks.location(r, calls=int(r.calls), blocked_ns=int(r.api_ns)) for r in callers
            ]
    savings = int(w["beyond_ns"])  # the process the finding names, so message and estimate agree
    return [Finding("host-sync", severity, rid, title, message, recommendation, ev, savings)]


def _in_calls(mine: list[Any], blocked_ns: int) -> str:
    """Where the time was blocked, as the title says it: the one call, else the call that
    blocked longest ('mostly in' when it holds at least half of the blocked time)."""
    top = mine[0]
    if len(mine) == 1:
        return f" in {top.name}"
    return f", {'mostly in' if 2 * top.blocked_ns >= blocked_ns else 'longest in'} {top.name}"


def _callers(ctx: Context, rid: int, start_ns: int | None) -> list[Any] | str | None:
    """The launch_stacks rows of the user frames whose blocking calls blocked longest (up to two,
    each at least stacks.MIN_SHARE of the blocked time of their source), the capture hint (a str)
    where the report holds no stacks of its calls or too few samples inside them, or None. Backtraces
    of the calls first, then samples taken inside them."""
    source = stacks.first_source(ctx, rid, stacks.LAUNCH_SOURCES)
    if source is None:
        return stacks.capture_hint(ctx, rid)
    rows = stacks.launch_rows(ctx, rid, kind="sync", start_ns=start_ns, top_n=None)
    rows = rows.where(lambda r: r.kind == "sync" or r.source is None)
    for source in stacks.LAUNCH_SOURCES:
        mine = [r for r in rows if r.source == source]
        if source in stacks.WINDOW_SOURCES:
            if not mine or mine[0].stacked_calls < stacks.MIN_SAMPLED_CALLS:
                continue
            mine = [r for r in stacks.merge_native(mine, "api_ns") if r.calls >= stacks.MIN_NAMED_CALLS]
        blocked = sum(r.api_ns for r in mine)
        named = sorted(
            (r for r in mine if r.user_function is not None and r.api_ns >= stacks.MIN_SHARE * blocked),
            key=lambda r: (-r.api_ns, r.user_file, r.user_line or 0),
        )
        if named:
            return named[:2]
    if not any(r.source in stacks.CALL_SOURCES for r in rows):
        few = stacks.sampled_too_few(ctx, rid, rows, "synchronising calls")
        if few is not None:
            return few
        if not stacks.has_stacks(rows):
            return stacks.capture_hint(ctx, rid)
    return stacks.no_user_frame_hint(ctx, rid, rows)
