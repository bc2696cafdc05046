"""Timeline rules on nsys reports: an idle GPU, a blocked host, and a report with no GPU records."""

from __future__ import annotations

from functools import partial
from typing import Any

from .context import Context, steady_evidence, steady_scope
from .model import Finding, rule
from .units import count, dur, pct, plural

_FIRST_KERNEL = """
SELECT report_id, device_id, min(start_ns) AS first_kernel_ns
FROM kernels WHERE $rid IS NULL OR report_id = $rid GROUP BY ALL
"""

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


@rule(
    "gpu-idle",
    kind="nsys",
    severities=("warning", "critical"),
    thresholds=("idle_share_warning", "idle_share_critical", "min_gap_ns", "idle_min_span_ns"),
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

    Fix: depends on the dominant cause; the finding says which and what to change.

    est_savings_ns: the steady-state idle time in gaps of the dominant cause (gaps >=
    min_gap_ns), the most that removing that cause can give back; the largest device's value
    when several GPUs run side by side. None when the dominant cause is `unknown` (no honest fix
    to estimate). Severity follows the steady-state idle share.
    """
    util = ctx.query("utilization", rid, phase="steady")
    if not util:
        return []
    gaps = ctx.query("gaps", rid, min_gap_ns=int(ctx["min_gap_ns"]))
    window = ctx.steady(rid)
    if window is not None:
        steady = gaps.where(lambda g: g.phase == "steady")
        startup_ns = 0
    else:
        first = {
            (r.report_id, r.device_id): r.first_kernel_ns for r in ctx.sql("first_kernel", _FIRST_KERNEL, rid)
        }

        def at_startup(g: Any) -> bool:
            first_ns = first.get((g.report_id, g.device_id))
            return first_ns is None or g.gap_end_ns <= first_ns

        steady = gaps.where(lambda g: not at_startup(g))
        startup_ns = int(gaps.where(at_startup).total("gap_ns"))
    span = int(util.total("span_ns")) - startup_ns
    idle = int(util.total("idle_ns")) - startup_ns
    if span <= 0 or span < ctx["idle_min_span_ns"]:
        return []
    share = idle / span
    if share < ctx["idle_share_warning"]:
        return []
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
        "min_gap_ns": int(ctx["min_gap_ns"]),
        "startup_idle_ns": startup_ns,
        "idle_by_cause_ns": {str(k): int(v) for k, v in by_cause},
        **steady_evidence(window),
    }
    message = (
        f"{scope[0].upper()}{scope[1:]}, the GPU was idle {dur(idle)} of {dur(span)}{where} ({pct(share)}); "
        f"{count(len(steady))} gaps of at least {dur(ctx['min_gap_ns'])} hold {dur(gap_total)}."
    )
    savings = None
    if not by_cause:
        recommendation = (
            "The idle time is spread over gaps shorter than min_gap_ns: the GPU waits on launch latency "
            "between short kernels; see small-kernel-storm, fuse kernels or use CUDA graphs."
        )
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
        if cause == "late_launch":
            message += _host_calls_in(ctx, rid, cause_gaps)
        recommendation = _CAUSE_FIX.get(cause, _CAUSE_FIX["unknown"]).format(detail=detail_name)
        if ctx.query("graph_launches", rid):  # no advice to capture graphs to a program that does
            recommendation = recommendation.replace(
                ", or capture the steady state in a CUDA graph.",
                "; the program already replays CUDA graphs, so look at what the host does before each launch.",
            )
        if cause != "unknown":
            savings = int(cause_gaps.sum_by("device_id", "gap_ns", nulls=True)[0][1])
    if window is not None:
        message += f" Start-up before step {window.first_step} is not counted (see the startup rule)."
    elif startup_ns:
        message += f" Not counted: {dur(startup_ns)} idle before the first kernel (start-up)."
        recommendation += (
            " To profile only the steady state, start the capture later (`nsys profile --delay`, or "
            "--capture-range=cudaProfilerApi around the loop)."
        )
    title = f"GPU idle {pct(share)} of the {'steady state' if window is not None else 'run'}{where}"
    if "dominant_cause" in ev:
        title += f", mostly {ev['dominant_cause'].replace('_', ' ')}"
    return [Finding("gpu-idle", severity, rid, title, message, recommendation, ev, savings)]


# What the launching threads did during the largest late-launch gaps: their CUDA API time per
# call, clipped to the gaps. The gaps travel as a VALUES list (at most _HOST_GAPS of them).
_HOST_CALLS = """
WITH g AS (SELECT * FROM (VALUES {values}) AS t(report_id, tid, s, e))
SELECT c.name, sum(least(c.end_ns, g.e) - greatest(c.start_ns, g.s)) AS in_gaps_ns
FROM cuda_api AS c
JOIN g ON c.report_id = g.report_id AND c.global_tid = g.tid AND c.start_ns < g.e AND c.end_ns > g.s
WHERE c.report_id = {rid} AND c.start_ns < {hi} AND c.end_ns > {lo}
GROUP BY c.name
ORDER BY in_gaps_ns DESC, c.name
LIMIT 3
"""
_HOST_GAPS = 20


def _host_calls_in(ctx: Context, rid: int, gaps: Any) -> str:
    """' In the N largest of these gaps the launching thread spent X in A, Y in B ...; the rest
    outside CUDA calls.' ('' when no launching thread is known)."""
    top = sorted((g for g in gaps if g.launch_global_tid is not None), key=lambda g: -g.gap_ns)[:_HOST_GAPS]
    if not top:
        return ""
    values = ", ".join(
        f"({int(g.report_id)}, {int(g.launch_global_tid)}, {int(g.gap_start_ns)}, {int(g.gap_end_ns)})"
        for g in top
    )
    lo, hi = min(int(g.gap_start_ns) for g in top), max(int(g.gap_end_ns) for g in top)
    sql = _HOST_CALLS.format(values=values, rid=int(rid), lo=lo, hi=hi)
    calls = ctx.sql(f"host_calls:{values}", sql)
    total = sum(int(g.gap_ns) for g in top)
    parts = [f"{dur(r.in_gaps_ns)} in {r.name}" for r in calls if r.in_gaps_ns >= 0.05 * total]
    which = f"the {len(top)} largest of these gaps" if len(gaps) > len(top) else "these gaps"
    if not parts:
        return f" In {which} ({dur(total)}) the launching thread was outside CUDA calls (host code: Python, data, I/O)."
    rest = total - sum(int(r.in_gaps_ns) for r in calls)
    return (
        f" In {which} ({dur(total)}) the launching thread spent "
        + ", ".join(parts)
        + f"; {dur(max(0, rest))} outside CUDA calls."
    )


def _has_cause(cause: Any, gap: Any) -> bool:
    return bool(gap.cause == cause)


_STARTUP_CALLS = """
SELECT c.report_id,
       CASE
           WHEN regexp_matches(c.name, '^cu(Module|Library)(Load|GetFunction|GetKernel|GetGlobal)')
                OR c.name IN ('cudaGetFuncBySymbol', 'cudaFuncGetAttributes', 'cuKernelGetFunction') THEN 'module loading'
           WHEN regexp_matches(c.name, '^(cuda(Malloc|Free|HostAlloc|HostRegister|MallocHost|FreeHost)|cuMem(Alloc|Free|Create|Map|AddressReserve|HostAlloc|HostRegister))')
               THEN 'memory allocation'
           WHEN regexp_matches(c.name, '^cu(da)?GraphInstantiate') THEN 'CUDA graph instantiation'
           WHEN regexp_matches(c.name, '^(cuInit|cuCtxCreate|cuDevicePrimaryCtxRetain|cudaSetDevice)') THEN 'context creation'
           WHEN nsa_sync_kind(c.name) IS NOT NULL THEN 'waiting for the GPU'
       END AS category,
       count(*) AS calls, sum(c.duration_ns) AS total_ns
FROM cuda_api AS c JOIN nsa_steady($rid) AS w ON w.report_id = c.report_id
WHERE ($rid IS NULL OR c.report_id = $rid) AND c.start_ns < w.start_ns
GROUP BY ALL
"""

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


@rule("startup", kind="nsys", severities=("info",), thresholds=("startup_share_info", "startup_min_ns"))
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
    calls = ctx.sql("startup_calls", _STARTUP_CALLS, rid).where(lambda r: r.category is not None)
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
    title = f"Start-up fills {pct(startup_ns / total)} of the capture ({dur(startup_ns)} before {steps})"
    return [Finding("startup", "info", rid, title, message, recommendation, ev, None)]


# Per blocking call: how much of it the GPUs of the same process spent busy. "Beyond GPU work" is
# the rest: the host waited while its GPUs had nothing to do.
_SYNC_BEYOND = r"""
WITH act AS (
    SELECT report_id, device_id, pid, start_ns, end_ns FROM nsa_gpu_activity($rid)
),
devs AS (SELECT DISTINCT report_id, pid, device_id FROM act),
calls AS (
    SELECT report_id, pid, tid, start_ns, end_ns, duration_ns, name,
           row_number() OVER () AS call_id
    FROM cuda_api
    WHERE ($rid IS NULL OR report_id = $rid) AND nsa_sync_kind(name) IS NOT NULL
),
-- each call's start and end as probe rows on each GPU of its process, placed after the
-- activities that start at the same time (end_ns NULL: a probe adds nothing)
probes AS (
    SELECT c.report_id, d.device_id, t.probe_ns AS start_ns, CAST(NULL AS BIGINT) AS end_ns, c.call_id, t.side
    FROM calls AS c
    JOIN devs AS d ON d.report_id = c.report_id AND d.pid = c.pid
    CROSS JOIN LATERAL (VALUES (c.start_ns, -1), (c.end_ns, 1)) AS t(probe_ns, side)
),
rows AS (
    SELECT report_id, device_id, start_ns, end_ns, NULL AS call_id, 0 AS side FROM act
    UNION ALL
    SELECT * FROM probes
),
-- one sorted pass per device: prev_end is the latest end before the row, and each activity adds
-- to the busy union the part of it not covered before
o AS (
    SELECT *, max(end_ns) OVER (
        PARTITION BY report_id, device_id ORDER BY start_ns, call_id IS NOT NULL
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS prev_end
    FROM rows
),
-- at a probe at time t: busy_to is the union of the activities starting by t, and all of
-- [t, prev_end] is covered (by the activity ending at prev_end), so busy time up to t is
-- busy_to - (prev_end - t) when prev_end > t
b AS (
    SELECT call_id, device_id, side,
           coalesce(busy_to, 0) - greatest(0, coalesce(prev_end, start_ns) - start_ns) AS busy_until
    FROM (
        SELECT *, sum(CASE WHEN call_id IS NULL THEN nsa_union_ns(end_ns, start_ns, prev_end) END) OVER (
            PARTITION BY report_id, device_id ORDER BY start_ns, call_id IS NOT NULL ROWS UNBOUNDED PRECEDING
        ) AS busy_to
        FROM o
    )
    WHERE call_id IS NOT NULL
),
per_call AS (
    SELECT call_id, max(busy_ns) AS busy_ns
    FROM (SELECT call_id, device_id, sum(side * busy_until) AS busy_ns FROM b GROUP BY ALL)
    GROUP BY ALL
),
spans AS (
    SELECT report_id, pid, max(end_ns) - min(start_ns) AS pid_span_ns
    FROM cuda_api WHERE $rid IS NULL OR report_id = $rid GROUP BY ALL
)
SELECT c.report_id, c.pid, c.name, count(*) AS calls,
       sum(c.duration_ns) AS blocked_ns,
       sum(greatest(0, c.duration_ns - coalesce(p.busy_ns, 0))) AS beyond_ns,
       any_value(s.pid_span_ns) AS pid_span_ns
FROM calls AS c
LEFT JOIN per_call AS p USING (call_id)
LEFT JOIN spans AS s ON s.report_id = c.report_id AND s.pid = c.pid
GROUP BY ALL
ORDER BY c.report_id, c.pid, blocked_ns DESC
"""


@rule(
    "host-sync",
    kind="nsys",
    severities=("info", "warning", "critical"),
    thresholds=("sync_share_warning", "sync_share_critical", "sync_share_info"),
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

    est_savings_ns: the blocked time during which the process's GPUs were idle ("beyond GPU
    work"), for the process the finding names (the one with the largest such share of its run,
    or for an info finding the largest blocked share); time covered by GPU work is not counted.
    Severity follows that share of the process's run; an info finding notes a large blocked
    share when the GPU was busy throughout.
    """
    calls = ctx.sql("sync_beyond", _SYNC_BEYOND, rid)
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
    }
    message = (
        f"Process {int(worst_pid)}{procs} spent {dur(w['blocked_ns'])} of its {dur(w['span_ns'])} run "
        f"({pct(w['share'])}) blocked in synchronising calls: {names}. Its GPUs were idle for "
        f"{dur(w['beyond_ns'])} of that ({pct(w['beyond_share'])} of the run)."
    )
    if severity == "info":
        title = f"Host blocked {pct(w['share'])} of the run in {top.name}, while the GPU was busy"
        recommendation = (
            "The waits cover GPU work, so they are not the bottleneck today; but a host that waits cannot "
            "queue ahead. Once the GPU work shrinks, replace per-step synchronisation with events or "
            "synchronise every N steps."
        )
    else:
        title = f"Host blocked in {top.name} while the GPU idles: {pct(w['beyond_share'])} of the run"
        recommendation = (
            f"Remove {top.name} from the hot loop or make it rarer: synchronise every N steps, express "
            "dependencies with cudaEventRecord + cudaStreamWaitEvent, use cudaMemcpyAsync into pinned "
            "buffers and consume results one step later (PyTorch: avoid .item()/.cpu()/print per step)."
        )
    savings = int(w["beyond_ns"])  # the process the finding names, so message and estimate agree
    return [Finding("host-sync", severity, rid, title, message, recommendation, ev, savings)]


_API_ROWS = """
SELECT report_id, count(*) AS calls FROM cuda_api WHERE $rid IS NULL OR report_id = $rid GROUP BY ALL
"""


@rule("no-gpu-activity", kind="nsys", severities=("warning",))
def no_gpu_activity(ctx: Context, rid: int) -> list[Finding]:
    """The report holds no kernel, memcpy or memset records: nothing can be said about the GPU.

    Anti-pattern: reading such a report as "the GPU is healthy / idle". CUDA tracing was off
    (`-t` without `cuda`) or failed, typically because the nsys is too old for the CUDA
    driver; NVTX and OS runtime rows can still be there.

    Fix: profile again with `nsys profile -t cuda,nvtx,osrt` using an nsys that supports the
    installed driver. est_savings_ns: None (nothing measured).
    """
    row = next((r for r in ctx.reports("nsys") if r.report_id == rid), None)
    if row is None:
        return []
    kinds = [str(k) for k in (row.activity_kinds or [])]
    if row.has_kernels or any(k in kinds for k in ("kernel", "memcpy", "memset")):
        return []
    api_rows = int(ctx.sql("cuda_api_rows", _API_ROWS, rid).total("calls"))
    captured = ", ".join(k for k in kinds if k != "processes") or "nothing"
    message = (
        f"{ctx.report_file(rid)} has no kernel, memcpy or memset records (it holds: {captured}; "
        f"{count(api_rows)} CUDA API rows). GPU utilization, copies and kernels cannot be judged from it."
    )
    recommendation = (
        "Profile again with `nsys profile -t cuda,nvtx,osrt` using an nsys release that supports the "
        "installed CUDA driver (an nsys older than the driver records no CUDA activity)."
    )
    ev = {"activity_kinds": kinds, "cuda_api_rows": api_rows}
    return [
        Finding("no-gpu-activity", "warning", rid, "No GPU activity captured", message, recommendation, ev)
    ]
