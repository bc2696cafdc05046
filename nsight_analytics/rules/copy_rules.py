"""Copy rules on nsys reports: host<->device copies that dominate, and pageable host memory."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .context import Context, steady_evidence, steady_scope
from .model import Finding, rule, severity_for
from .units import bw, count, dur, pct, size

HOST_DEVICE = ("HtoD", "DtoH")
MIN_BANDWIDTH_BYTES = 1 << 20  # average copy size below which a copy group measures no bandwidth


def _memory(row: Any) -> str:
    """The host side of a copy: 'pageable' or 'pinned' (or whatever the export says)."""
    host = row.src_kind if row.copy_kind == "HtoD" else row.dst_kind
    return str(host) if host is not None else "unknown"


def _phrase(row: Any) -> str:
    prep = "from" if row.copy_kind == "HtoD" else "into"
    return f"{row.copy_kind} copies {prep} {_memory(row)} memory"


@dataclass
class CopyGroup:
    """memcpy_summary rows of one (copy kind, source, destination memory), all devices summed."""

    copy_kind: str | None
    src_kind: str | None
    dst_kind: str | None
    copies: int = 0
    bytes: int = 0
    total_ns: int = 0
    busy_ns: int = 0
    apis: set[str] = field(default_factory=set)


def _groups(rows: Iterable[Any], order_by: str) -> list[CopyGroup]:
    """Copy groups, `order_by` largest first (ties: copy kind, source, destination; NULL last)."""
    groups: dict[tuple[Any, ...], CopyGroup] = {}
    for r in rows:
        g = groups.setdefault(
            (r.copy_kind, r.src_kind, r.dst_kind), CopyGroup(r.copy_kind, r.src_kind, r.dst_kind)
        )
        g.copies += r.copies
        g.bytes += r.bytes
        g.total_ns += r.total_ns
        g.busy_ns += r.busy_ns
        g.apis |= set(filter(None, (r.launch_apis or "").split(",")))
    by_key = sorted(groups.items(), key=lambda kv: [(v is None, v or "") for v in kv[0]])
    return sorted((g for _, g in by_key), key=lambda g: getattr(g, order_by), reverse=True)


def _pinned_gbps(copies: Iterable[Any], direction: str) -> tuple[float | None, str]:
    """Measured pinned bandwidth in this report: same direction first, else the other one."""
    # tiny copies measure latency, not bandwidth
    pinned = [r for r in copies if _memory(r) == "pinned" and r.bytes >= MIN_BANDWIDTH_BYTES * r.copies]
    for scope, rows in (
        ("same direction", [r for r in pinned if r.copy_kind == direction]),
        ("other direction", pinned),
    ):
        b, ns = sum(r.bytes for r in rows), sum(r.total_ns for r in rows)
        if ns > 0 and b > 0:
            return float(b / ns), scope
    return None, ""


def pinning_savings(copies: Iterable[Any]) -> tuple[dict[int, int], dict[str, float]]:
    """Per device: time the pageable host<->device copies would save at this report's pinned rate."""
    copies = list(copies)
    per_device: dict[int, int] = {}
    rates: dict[str, float] = {}
    for r in copies:
        if not (r.pageable and r.copy_kind in HOST_DEVICE):
            continue
        gbps, _ = _pinned_gbps(copies, r.copy_kind)
        if gbps is None:
            continue
        rates[r.copy_kind] = gbps
        saved = max(0.0, r.total_ns - r.bytes / gbps)
        per_device[r.device_id] = per_device.get(r.device_id, 0) + int(saved)
    return per_device, rates


@rule(
    "copy-dominated",
    kind="nsys",
    severities=("warning", "critical"),
    thresholds=("copy_share_warning", "copy_share_critical", "copy_kernel_share_max"),
)
def copy_dominated(ctx: Context, rid: int) -> list[Finding]:
    """Host<->device copies fill most of the GPU timeline while kernels fill little of it.

    Anti-pattern: the program moves data between host and GPU for most of its run (re-sending
    inputs every step, copying results back eagerly, staging through pageable memory) and the
    GPU computes only a small part of the time, so the copy engines, not the SMs, set the pace.

    Fix: keep data resident on the GPU across steps; send less (lower precision, only what
    changed); overlap copies with compute (copies on a side stream with cudaMemcpyAsync from
    pinned memory, double buffering, DataLoader pin_memory=True + non_blocking=True); move
    pageable buffers to pinned (cudaHostAlloc / tensor.pin_memory()).

    Judged on the steady state (from the first steady step to the end of the capture; the whole
    span for reports without steps), like every timeline rule.

    est_savings_ns: the larger of (a) the copy time that could hide behind kernels, i.e.
    min(copy time not overlapped by kernels, kernel time not overlapped by copies): overlapping
    can never save more than the compute there is to overlap with; and (b) for pageable copies,
    their time minus bytes / the pinned bandwidth measured in the same report (None for (b)
    without a pinned measurement). The largest device's value when GPUs run side by side.
    """
    util = ctx.query("utilization", rid, phase="steady")
    copies = ctx.query("memcpy_summary", rid, phase="steady")
    hd = copies.where(lambda r: r.copy_kind in HOST_DEVICE)
    if not util or not hd:
        return []
    window = ctx.steady(rid)
    span = int(util.total("span_ns"))
    kernel = int(util.total("kernel_busy_ns"))
    hd_busy = int(hd.total("busy_ns"))
    share = min(1.0, hd_busy / span) if span else 0.0
    kernel_share = kernel / span if span else 0.0
    if share < ctx["copy_share_warning"] or kernel_share >= ctx["copy_kernel_share_max"]:
        return []
    severity = "critical" if share >= ctx["copy_share_critical"] else "warning"
    groups = _groups(hd, "busy_ns")
    top = groups[0]
    top_share = top.busy_ns / span
    devices = len(util)
    where = f" on {devices} GPUs" if devices > 1 else ""
    parts = [
        f"{_phrase(g)}: {size(g.bytes)} in {count(g.copies)} copies, {dur(g.total_ns)} at "
        f"{bw(g.bytes, g.total_ns)} ({pct(g.busy_ns / span)} of the span)"
        for i, g in enumerate(groups[:3])
        if i == 0 or g.busy_ns >= 0.01 * span
    ]
    scope = steady_scope(window, ctx.steps_unknown(rid))
    message = (
        f"{scope[0].upper()}{scope[1:]}, host<->device copies ran {pct(share)} of the {dur(span)} GPU span{where}; "
        f"kernels only {pct(kernel_share)}. " + "; ".join(parts) + "."
    )
    overlap: dict[int, int] = {}
    for r in util:
        hidden = r.copy_busy_ns - r.copy_only_ns
        overlap[r.device_id] = int(max(0, min(r.copy_only_ns, r.kernel_busy_ns - hidden)))
    pin, rates = pinning_savings(copies)
    per_device = {d: max(overlap.get(d, 0), pin.get(d, 0)) for d in set(overlap) | set(pin)}
    savings = max(per_device.values()) if per_device else None
    memory = _memory(top)
    if memory == "pageable":
        rate = rates.get(str(top.copy_kind))
        recommendation = (
            f"Allocate the host buffers of these {top.copy_kind} copies as pinned memory (cudaHostAlloc / "
            f"cudaHostRegister; PyTorch: tensor.pin_memory(), DataLoader(pin_memory=True)): pageable copies "
            f"are staged by the driver and ran at {bw(top.bytes, top.total_ns)}"
            + (f" where pinned copies in this run reached {rate:.3g} GB/s" if rate else "")
            + ". Then send less data per step and overlap the copies with compute on a second stream."
        )
    else:
        recommendation = (
            f"The {top.copy_kind} copies already use {memory} memory at {bw(top.bytes, top.total_ns)}: "
            "the win is moving fewer bytes. Keep tensors resident on the GPU across steps instead of re-sending "
            "them, send only what changed or in lower precision (bf16/fp16/int8), and overlap what remains with "
            "compute (cudaMemcpyAsync on a side stream, double buffering; PyTorch: non_blocking=True)."
        )
    if pin and savings == max(pin.values()):
        # the same win pageable-memcpy reports: say so, so nobody adds the two estimates
        message += (
            f" Pinning the pageable buffers would save about {dur(savings)}: the same saving as the "
            "pageable-memcpy finding, not in addition to it."
        )
    title = f"{_phrase(top)} fill {pct(top_share)} of the GPU span ({bw(top.bytes, top.total_ns)}){where}"
    ev = {
        "span_ns": span,
        "copy_busy_ns": hd_busy,
        "copy_share": share,
        "kernel_busy_ns": kernel,
        "kernel_share": kernel_share,
        "devices": devices,
        "dominant": {
            "copy_kind": str(top.copy_kind),
            "host_memory": memory,
            "copies": int(top.copies),
            "bytes": int(top.bytes),
            "total_ns": int(top.total_ns),
            "busy_ns": int(top.busy_ns),
            "share": float(top_share),
            "gb_per_s": float(top.bytes / top.total_ns) if top.total_ns else None,
        },
        "overlap_savings_ns": max(overlap.values()) if overlap else 0,
        "pinning_savings_ns": max(pin.values()) if pin else None,
        "pinned_gb_per_s": rates or None,
        **steady_evidence(window),
    }
    return [Finding("copy-dominated", severity, rid, title, message, recommendation, ev, savings)]


@rule(
    "pageable-memcpy",
    kind="nsys",
    severities=("info", "warning", "critical"),
    thresholds=("pageable_min_ns", "pageable_share_warning", "pageable_share_critical"),
)
def pageable_memcpy(ctx: Context, rid: int) -> list[Finding]:
    """Copies from or to pageable host memory: cudaMemcpyAsync silently becomes synchronous.

    Anti-pattern: the host buffer of a copy was allocated with malloc / new / a plain NumPy or
    torch CPU tensor. The driver must stage it through its own pinned buffer, so the copy runs
    at a fraction of the link's bandwidth and the calling thread blocks until it is done, even
    for cudaMemcpyAsync, killing copy/compute overlap.

    Fix: allocate those buffers pinned (cudaHostAlloc, cudaMallocHost, cudaHostRegister;
    PyTorch tensor.pin_memory(), DataLoader(pin_memory=True)) and issue the copies async.

    Judged on the steady state (the whole span for reports without steps).

    est_savings_ns: for each pageable copy group, its time minus bytes / the pinned bandwidth
    measured in the same report (same direction when there is one), summed over the groups of
    a device; the largest device. None when the report has no pinned copy to measure. Overlaps
    with copy-dominated's estimate when that finding is about the same copies: do not add them.
    """
    copies = ctx.query("memcpy_summary", rid, phase="steady")
    util = ctx.query("utilization", rid, phase="steady")
    pg = copies.where(lambda r: r.pageable)
    if not pg or not util:
        return []
    window = ctx.steady(rid)
    total_ns = int(pg.total("total_ns"))
    if total_ns < ctx["pageable_min_ns"]:
        return []
    span = int(util.total("span_ns"))
    busy = int(pg.total("busy_ns"))
    share = busy / span if span else 0.0
    severity = severity_for(share, ctx["pageable_share_warning"], ctx["pageable_share_critical"])
    groups = _groups(pg, "total_ns")
    pin, rates = pinning_savings(copies)
    parts = []
    for g in groups:
        text = (
            f"{_phrase(g)}: {count(g.copies)} copies, {size(g.bytes)} in {dur(g.total_ns)} at "
            f"{bw(g.bytes, g.total_ns)}"
        )
        if g.copy_kind in rates:
            text += f" (pinned: {rates[g.copy_kind]:.3g} GB/s)"
        parts.append(text)
    apis = sorted(set().union(*(g.apis for g in groups)))
    async_note = ""
    if any("Async" in a for a in apis):
        async_note = (
            " They were issued with " + ", ".join(apis) + ", which blocks the host for pageable memory."
        )
    n_copies = int(pg.total("copies"))
    scope = steady_scope(window, ctx.steps_unknown(rid))
    message = (
        f"{scope[0].upper()}{scope[1:]}, {count(n_copies)} copies touched pageable host memory for "
        f"{dur(total_ns)} ({pct(share)} of the {dur(span)} GPU span): " + "; ".join(parts) + "." + async_note
    )
    savings = max(pin.values()) if pin else None
    if savings is not None:
        message += f" At the pinned bandwidth measured in this run they would take {dur(savings)} less."
    title = f"{count(n_copies)} copies use pageable host memory ({dur(total_ns)}, {_phrase(groups[0])} worst)"
    recommendation = (
        "Allocate the host side of these copies as pinned memory: cudaHostAlloc / cudaMallocHost, or "
        "cudaHostRegister on existing buffers; in PyTorch tensor.pin_memory() or DataLoader(pin_memory=True), "
        "then .to('cuda', non_blocking=True). Reuse the pinned buffers across steps: pinning is expensive."
    )
    ev = {
        "copies": n_copies,
        "bytes": int(pg.total("bytes")),
        "total_ns": total_ns,
        "busy_ns": busy,
        "span_share": share,
        "groups": [
            {
                "copy_kind": str(g.copy_kind),
                "src_kind": str(g.src_kind),
                "dst_kind": str(g.dst_kind),
                "copies": int(g.copies),
                "bytes": int(g.bytes),
                "total_ns": int(g.total_ns),
                "gb_per_s": float(g.bytes / g.total_ns) if g.total_ns else None,
            }
            for g in groups
        ],
        "launch_apis": apis,
        "pinned_gb_per_s": rates or None,
        **steady_evidence(window),
    }
    return [Finding("pageable-memcpy", severity, rid, title, message, recommendation, ev, savings)]
