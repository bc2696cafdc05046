"""dram-saturated: stretches of the steady state run at the DRAM bandwidth limit (GPU metrics)."""

from __future__ import annotations

from ...units import dur, pct
from ..context import Context, steady_evidence
from ..gpu_metrics import (
    BUCKET_NS,
    MIN_WINDOW_SHARE,
    ranges_at,
    saturated_stretches,
    saturation_message,
)
from ..model import Finding, Threshold, rule

_DRAM = ("dram_read", "dram_write")


@rule(
    "dram-saturated",
    order=76,
    needs=("gpu_metrics",),
    queries=("gpu_metrics_summary", "gpu_metrics_timeline", "gpu_metrics_by_range", "gpu_metrics_by_kernel"),
    reads=("steps",),
    severities=("info", "warning"),
    thresholds=(
        Threshold(
            "dram_saturated_pct",
            80.0,
            "%",
            "DRAM read + write bandwidth, % of peak, at which a bucket counts as saturated.",
        ),
        Threshold(
            "dram_warning_share",
            0.25,
            "fraction",
            "Saturated share of the steady state that makes the finding a warning (else info).",
        ),
        BUCKET_NS,
        MIN_WINDOW_SHARE,
    ),
)
def dram_saturated(ctx: Context, rid: int) -> list[Finding]:
    """The GPU spends a real share of the steady state at its DRAM bandwidth limit (GPU metrics).

    Anti-pattern: DRAM read + write bandwidth (nsys GPU metrics, % of the GPU's peak; read and
    write share it) stays at dram_saturated_pct or more, averaged over gpu_metrics_bucket_ns
    buckets, for at least gpu_metrics_min_share of the steady state (the whole run without
    steps): the kernels or device-to-device copies then running are memory bound, and more SMs
    or tensor cores cannot speed them up; only moving fewer bytes does. The finding names the
    NVTX ranges and kernels whose average reaches the limit. Silent without DRAM samples, and
    when saturated buckets stay under the share.

    Fix: Move fewer bytes through DRAM: fuse elementwise chains so intermediates stay in
    registers or shared memory (torch.compile, fused kernels), avoid device-to-device copies of
    whole tensors (views, in-place ops), use lower-precision activations and weights (bf16,
    fp8), recompute cheap values instead of storing them, and keep working sets cache-sized.

    est_savings_ns: None: the bytes a fix removes decide the gain.
    """
    sat = ctx["dram_saturated_pct"]
    found = []
    for s in saturated_stretches(ctx, rid, _DRAM, sat, total=True):
        dev = s.device_id
        ranges = ranges_at(ctx, rid, _DRAM, sat, dev)[:3]
        kernels = _kernels_at(ctx, rid, dev, sat)[:3]
        message = saturation_message(
            ctx, f"DRAM read + write bandwidth reached {sat:.0f}% of peak or more", s, ranges
        )
        if kernels:
            message += (
                " Kernels at the limit: "
                + "; ".join(f"{n[:70]} ({v:.0f}%, {dur(ns)})" for n, v, ns in kernels)
                + "."
            )
        ev = {
            "device_id": dev,
            "scope": s.scope,
            **s.evidence(),
            "ranges": [{"name": n, "dram_pct": v, "gpu_ns": int(ns)} for n, v, ns in ranges],
            "kernels": [{"name": n, "dram_pct": v, "kernel_ns": int(ns)} for n, v, ns in kernels],
            **steady_evidence(ctx.steady(rid)),
        }
        severity = "warning" if s.share >= ctx["dram_warning_share"] else "info"
        title = f"DRAM bandwidth saturated {pct(s.share)} of the {s.window}"
        found.append(Finding("dram-saturated", severity, rid, title, message, dram_saturated.fix, ev, None))
    return found


def _kernels_at(ctx: Context, rid: int, device_id: int, limit: float) -> list[tuple[str, float, int]]:
    """(name, DRAM read + write average, kernel time) of the kernels at the limit, most time first."""
    rows = ctx.query("gpu_metrics_by_kernel", rid, metrics=",".join(_DRAM), phase="steady")
    per: dict[str, list[float]] = {}
    for r in rows:
        if r.device_id == device_id and r.average is not None:
            slot = per.setdefault(str(r.name), [0.0, float(r.kernel_ns)])
            slot[0] += float(r.average)
    return sorted(((n, v, int(ns)) for n, (v, ns) in per.items() if v >= limit), key=lambda x: -x[2])
