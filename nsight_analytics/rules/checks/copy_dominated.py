"""copy-dominated: host<->device copies set the pace of the GPU timeline."""

from __future__ import annotations

from ..context import Context, steady_evidence, steady_scope
from ..copies import HOST_DEVICE, copy_groups, copy_phrase, host_memory, pinning_savings
from ..model import Finding, Threshold, rule
from ..units import bw, count, dur, pct, size


@rule(
    "copy-dominated",
    order=10,
    needs=("memcpy",),
    queries=("utilization", "memcpy_summary"),
    reads=("steps",),
    severities=("warning", "critical"),
    thresholds=(
        Threshold(
            "copy_share_warning", 0.30, "fraction", "Host<->device copy share of the span that is a warning."
        ),
        Threshold(
            "copy_share_critical", 0.60, "fraction", "Host<->device copy share of the span that is critical."
        ),
        Threshold(
            "copy_kernel_share_max",
            0.30,
            "fraction",
            "copy-dominated fires only while kernels fill less than this share of the span.",
        ),
    ),
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
    hd = copies.where(lambda r: r.direction in HOST_DEVICE)
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
    groups = copy_groups(hd, "busy_ns")
    top = groups[0]
    top_share = top.busy_ns / span
    devices = len(util)
    where = f" on {devices} GPUs" if devices > 1 else ""
    parts = [
        f"{copy_phrase(g)}: {size(g.bytes)} in {count(g.copies)} copies, {dur(g.total_ns)} at "
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
    memory = host_memory(top)
    if memory == "pageable":
        rate = rates.get(str(top.direction))
        recommendation = (
            f"Allocate the host buffers of these {top.direction} copies as pinned memory (cudaHostAlloc / "
            f"cudaHostRegister; PyTorch: tensor.pin_memory(), DataLoader(pin_memory=True)): pageable copies "
            f"are staged by the driver and ran at {bw(top.bytes, top.total_ns)}"
            + (f" where pinned copies in this run reached {rate:.3g} GB/s" if rate else "")
            + ". Then send less data per step and overlap the copies with compute on a second stream."
        )
    else:
        recommendation = (
            f"The {top.direction} copies already use {memory} memory at {bw(top.bytes, top.total_ns)}: "
            "the win is moving fewer bytes. Keep tensors resident on the GPU across steps instead of re-sending "
            "them, send only what changed or in lower precision (bf16/fp16/int8), and overlap what remains with "
            "compute (cudaMemcpyAsync on a side stream, double buffering; PyTorch: non_blocking=True)."
        )
    same_saving = pin and savings == max(pin.values())
    if same_saving:
        # the same win pageable-memcpy reports: say so, so nobody adds the two estimates
        message += (
            f" Pinning the pageable buffers would save about {dur(savings)}: the same saving as the "
            "pageable-memcpy finding, not in addition to it."
        )
    title = f"{copy_phrase(top)} fill {pct(top_share)} of the GPU span ({bw(top.bytes, top.total_ns)}){where}"
    ev = {
        "span_ns": span,
        "copy_busy_ns": hd_busy,
        "copy_share": share,
        "kernel_busy_ns": kernel,
        "kernel_share": kernel_share,
        "devices": devices,
        "dominant": {
            "direction": str(top.direction),
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
    return [
        Finding(
            "copy-dominated", severity, rid, title, message, recommendation, ev, savings,
            same_saving_as="pageable-memcpy" if same_saving else None,
        )
    ]  # fmt: skip
