"""copy-dominated: host<->device copies set the pace of the GPU timeline."""

from __future__ import annotations

from typing import Any

from ...units import bw, count, dur, pct, plural, size
from ..context import Context, steady_evidence, steady_scope
from ..copies import HOST_DEVICE, copy_groups, copy_phrase, direction_savings, host_memory, pinning_savings
from ..model import Finding, Threshold, rule


@rule(
    "copy-dominated",
    order=10,
    needs=("memcpy",),
    queries=("utilization", "memcpy_summary", "copy_directions"),
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
        Threshold(
            "copy_directions_min_share",
            0.02,
            "fraction",
            "Running HtoD and DtoH copies side by side is named when it would save at least this share of the span.",
        ),
    ),
)
def copy_dominated(ctx: Context, rid: int) -> list[Finding]:
    """Host<->device copies fill most of the GPU timeline while kernels fill little of it.

    Anti-pattern: the program moves data between host and GPU for most of its run (re-sending
    inputs every step, copying results back eagerly, staging through pageable memory) and the
    GPU computes only a small part of the time, so the copy engines, not the SMs, set the pace.

    A GPU has a copy engine per direction, so uploads and downloads can run at the same time;
    issued on one stream they run one after the other, and a loop that sends inputs and fetches
    results every step takes the sum of the two instead of the larger.

    Fix: when HtoD and DtoH copies never overlap, issue them on separate streams (ordered by
    events where one needs the other; double buffering so the next step's upload runs while
    this step's results download). Keep data resident on the GPU across steps; send less (lower
    precision, only what changed); overlap copies with compute (copies on a side stream with
    cudaMemcpyAsync from pinned memory, DataLoader pin_memory=True + non_blocking=True); move
    pageable buffers to pinned (cudaHostAlloc / tensor.pin_memory()).

    Judged on the steady state (from the first steady step to the end of the capture; the whole
    span for reports without steps), like every timeline rule.

    est_savings_ns: the largest of (a) the copy time that could hide behind kernels, i.e.
    min(copy time not overlapped by kernels, kernel time not overlapped by copies): overlapping
    can never save more than the compute there is to overlap with; (b) for pageable copies,
    their time minus bytes / the pinned bandwidth measured in the same report (None for (b)
    without a pinned measurement); and (c) running the two directions side by side:
    min(the smaller direction's busy time less the time both already ran together, the time a
    copy ran with a copy the other way issued and waiting right behind it on its stream; query
    copy_directions), named when it reaches copy_directions_min_share of the device's span.
    The lever with the largest value leads the finding. The largest device's value when GPUs
    run side by side.
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
    dirs = ctx.query("copy_directions", rid, phase="steady")
    # a saving too small to be worth reordering the copies is no lever
    spans = {r.device_id: r.span_ns for r in util}
    side = {
        d: ns
        for d, ns in direction_savings(dirs).items()
        if ns >= ctx["copy_directions_min_share"] * spans.get(d, span)
    }
    levers = (overlap, pin, side)
    per_device = {d: max(lv.get(d, 0) for lv in levers) for d in set().union(*levers)}
    savings = max(per_device.values()) if per_device else None
    memory = host_memory(top)
    side_ns = max(side.values(), default=0)
    side_row = max(dirs, key=lambda r: side.get(r.device_id, 0), default=None)
    # a tie goes to the other levers: pinning and compute overlap need no reordering of the copies
    side_leads = side_ns > max(max(overlap.values(), default=0), max(pin.values(), default=0))
    if side_row is not None and side_ns:
        message += " " + _directions_sentence(side_row, side_ns, len(dirs) > 1)
    if side_leads:
        recommendation = (
            "Issue the HtoD and DtoH copies on separate streams so the two copy engines run them side by side: "
            "cudaMemcpyAsync on an upload stream and a download stream, ordered with cudaEventRecord / "
            "cudaStreamWaitEvent where one needs the other, and double buffering so the next step's upload runs "
            "while this step's results download (PyTorch: the copies under torch.cuda.stream(s) with "
            "non_blocking=True, s.wait_stream(...) and tensor.record_stream(s))."
            + (
                " Both directions need pinned host buffers to run asynchronously (tensor.pin_memory())."
                if memory == "pageable"
                else ""
            )
            + " Then move fewer bytes: keep tensors resident on the GPU across steps, send only what changed or "
            "in lower precision (bf16/fp16/int8)."
        )
    elif memory == "pageable":
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
    if side_leads and side_row is not None:
        title = (
            f"HtoD and DtoH copies fill {pct(share)} of the GPU span and {_overlap_phrase(side_row)}{where}"
        )
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
        "direction_savings_ns": side_ns,
        "directions": _directions_evidence(side_row),
        "lever": "directions" if side_leads else ("pinning" if same_saving else "overlap"),
        **steady_evidence(window),
    }
    return [
        Finding(
            "copy-dominated", severity, rid, title, message, recommendation, ev, savings,
            same_saving_as="pageable-memcpy" if same_saving else None,
        )
    ]  # fmt: skip


def _overlap_phrase(r: Any) -> str:
    """'never overlap (one stream)' / 'overlap only 3 ms (shared stream 7)'."""
    if r.copy_streams == 1:
        where = "one stream"
    elif r.stream_id is not None:
        where = f"shared stream {r.stream_id}"
    else:
        where = f"{plural(r.shared_streams, 'shared stream')}"
    # below 1% of the smaller direction, the two directions do not really overlap
    if r.both_busy_ns < 0.01 * min(r.htod_busy_ns, r.dtoh_busy_ns):
        return f"never overlap ({where})"
    return f"overlap only {dur(r.both_busy_ns)} ({where})"


def _directions_sentence(r: Any, saving: int, name_device: bool) -> str:
    smaller, smaller_ns = min((("HtoD", r.htod_busy_ns), ("DtoH", r.dtoh_busy_ns)), key=lambda kv: kv[1])
    room = smaller_ns - r.both_busy_ns
    device = f" on GPU {r.device_id}" if name_device else ""
    waited = "a copy ran with a copy the other way issued and waiting right behind it on its stream"
    if saving >= room:
        why = (
            f", the smaller direction's ({smaller}) copy time"
            + (" not yet overlapped" if r.both_busy_ns else "")
            + f": for {dur(r.serialised_ns)} {waited}"
        )
    else:
        why = f": the time {waited} (the smaller direction, {smaller}, ran {dur(smaller_ns)})"
    return (
        f"HtoD and DtoH copies{device} {_overlap_phrase(r)}: put them on separate streams (each direction has "
        f"its own copy engine) to save up to {dur(saving)}{why}."
    )


def _directions_evidence(r: Any) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "device_id": r.device_id,
        "htod_busy_ns": int(r.htod_busy_ns),
        "dtoh_busy_ns": int(r.dtoh_busy_ns),
        "both_busy_ns": int(r.both_busy_ns),
        "serialised_ns": int(r.serialised_ns),
        "copy_streams": int(r.copy_streams),
        "shared_streams": int(r.shared_streams),
        "stream_id": r.stream_id,
    }
