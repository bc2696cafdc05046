"""Timeline rules on nsys reports: an idle GPU, a blocked host, and a report with no GPU records."""

from __future__ import annotations

from typing import Any

from .context import Context
from .model import Finding, rule
from .units import count, dur, pct

_FIRST_KERNEL = """
SELECT report_id, device_id, min(start_ns) AS first_kernel_ns
FROM kernels WHERE $rid IS NULL OR report_id = $rid GROUP BY ALL
"""

_CAUSE_WORDS = {
    "sync": "the host blocked in a synchronising call",
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
    """The GPU sits idle for a large share of the run.

    Anti-pattern: between the first and last GPU activity the device runs nothing for long
    stretches, because the host blocks in synchronising calls (cause `sync`), issues the next
    work late (`late_launch`: Python overhead, data loading, sleeps) or work waits on something
    the trace cannot show (`unknown`). Idle gaps before the device's first kernel are start-up
    (context creation, model loading) and are reported apart, not counted in the share.

    Fix: depends on the dominant cause; the finding says which and what to change.

    est_savings_ns: the idle time in gaps of the dominant cause (gaps >= min_gap_ns), the most
    that removing that cause can give back; the largest device's value when several GPUs run
    side by side. None when the dominant cause is `unknown` (no honest fix to estimate).
    """
    util = ctx.query("utilization", rid)
    if not util:
        return []
    gaps = ctx.query("gaps", rid, min_gap_ns=int(ctx["min_gap_ns"]))
    first = {(r.report_id, r.device_id): r.first_kernel_ns for r in ctx.sql("first_kernel", _FIRST_KERNEL, rid)}

    def at_startup(g: Any) -> bool:
        first_ns = first.get((g.report_id, g.device_id))
        return first_ns is None or g.gap_end_ns <= first_ns

    startup = gaps.where(at_startup)
    steady = gaps.where(lambda g: not at_startup(g))
    startup_ns = int(startup.total("gap_ns"))
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
    ev = {
        "span_ns": span,
        "idle_ns": idle,
        "idle_share": share,
        "devices": devices,
        "gaps": len(steady),
        "gap_ns": gap_total,
        "min_gap_ns": int(ctx["min_gap_ns"]),
        "startup_idle_ns": startup_ns,
        "idle_by_cause_ns": {str(k): int(v) for k, v in by_cause},
    }
    message = (
        f"The GPU was idle {dur(idle)} of its {dur(span)} span{where} ({pct(share)}); "
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
            f" {pct(cause_share)} of that gap time ({dur(cause_ns)}, {count(len(cause_gaps))} gaps): "
            f"{_CAUSE_WORDS.get(cause, cause)}"
            + (f", mostly {detail_name}" if detail else "")
            + "."
        )
        for other, other_ns in by_cause[1:]:
            if gap_total and other_ns / gap_total >= 0.05:  # a second cause worth naming
                others = steady.where(lambda g, other=other: g.cause == other)
                top = others.sum_by("cause_detail", "gap_ns")
                message += (
                    f" Also {pct(other_ns / gap_total)} ({dur(other_ns)}, {count(len(others))} gaps): "
                    f"{_CAUSE_WORDS.get(str(other), str(other))}"
                    + (f", mostly {top[0][0]}" if top else "")
                    + "."
                )
        recommendation = _CAUSE_FIX.get(cause, _CAUSE_FIX["unknown"]).format(detail=detail_name)
        if cause != "unknown":
            savings = int(cause_gaps.sum_by("device_id", "gap_ns", nulls=True)[0][1])
    if startup_ns:
        message += f" Not counted: {dur(startup_ns)} idle before the first kernel (start-up)."
        recommendation += (
            " To profile only the steady state, start the capture later (`nsys profile --delay`, or "
            "--capture-range=cudaProfilerApi around the loop)."
        )
    title = f"GPU idle {pct(share)} of the run{where}"
    if "dominant_cause" in ev:
        title += f", mostly {ev['dominant_cause'].replace('_', ' ')}"
    return [Finding("gpu-idle", severity, rid, title, message, recommendation, ev, savings)]


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
    return [Finding("no-gpu-activity", "warning", rid, "No GPU activity captured", message, recommendation, ev)]


