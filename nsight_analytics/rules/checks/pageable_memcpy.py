"""pageable-memcpy: copies from or to pageable host memory."""

from __future__ import annotations

from ...units import bw, count, dur, pct, size
from ..context import Context, steady_evidence, steady_scope
from ..copies import copy_groups, copy_phrase, pinning_savings
from ..model import Finding, Threshold, rule, severity_for


@rule(
    "pageable-memcpy",
    order=20,
    needs=("memcpy",),
    queries=("memcpy_summary", "utilization"),
    reads=("steps",),
    severities=("info", "warning", "critical"),
    thresholds=(
        Threshold("pageable_min_ns", 1_000_000, "ns", "Pageable copy time below this is not reported."),
        Threshold(
            "pageable_share_warning", 0.05, "fraction", "Pageable copy share of the span that is a warning."
        ),
        Threshold(
            "pageable_share_critical", 0.25, "fraction", "Pageable copy share of the span that is critical."
        ),
    ),
)
def pageable_memcpy(ctx: Context, rid: int) -> list[Finding]:
    """Copies from or to pageable host memory: cudaMemcpyAsync silently becomes synchronous.

    Anti-pattern: the host buffer of a copy was allocated with malloc / new / a plain NumPy or
    torch CPU tensor. The driver must stage it through its own pinned buffer, so the copy runs
    at a fraction of the link's bandwidth and the calling thread blocks until it is done, even
    for cudaMemcpyAsync, killing copy/compute overlap.

    Fix: Allocate the host side of these copies as pinned memory: cudaHostAlloc / cudaMallocHost,
    or cudaHostRegister on existing buffers; in PyTorch tensor.pin_memory() or
    DataLoader(pin_memory=True), then .to('cuda', non_blocking=True). Reuse the pinned buffers
    across steps: pinning is expensive.

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
    groups = copy_groups(pg, "total_ns")
    pin, rates = pinning_savings(copies)
    parts = []
    for g in groups:
        text = (
            f"{copy_phrase(g)}: {count(g.copies)} copies, {size(g.bytes)} in {dur(g.total_ns)} at "
            f"{bw(g.bytes, g.total_ns)}"
        )
        if g.direction in rates:
            text += f" (pinned: {rates[g.direction]:.3g} GB/s)"
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
    title = (
        f"{count(n_copies)} copies use pageable host memory ({dur(total_ns)}, {copy_phrase(groups[0])} worst)"
    )
    ev = {
        "copies": n_copies,
        "bytes": int(pg.total("bytes")),
        "total_ns": total_ns,
        "busy_ns": busy,
        "span_share": share,
        "groups": [
            {
                "direction": str(g.direction),
                "src_memory": str(g.src_memory),
                "dst_memory": str(g.dst_memory),
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
    return [Finding("pageable-memcpy", severity, rid, title, message, pageable_memcpy.fix, ev, savings)]
