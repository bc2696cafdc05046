"""pcie-saturated: stretches of the steady state run a PCIe or NVLink direction at its limit (GPU metrics)."""

from __future__ import annotations

from ...units import pct
from ..context import Context, steady_evidence
from ..gpu_metrics import (
    BUCKET_NS,
    MIN_WINDOW_SHARE,
    ranges_at,
    saturated_stretches,
    saturation_message,
)
from ..model import Finding, Threshold, rule

_LINKS = ("pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx")
_WORDS = {
    "pcie_rx": "PCIe into the GPU (host-to-device copies, reads of host memory)",
    "pcie_tx": "PCIe out of the GPU (device-to-host copies, writes to host memory)",
    "nvlink_rx": "NVLink into the GPU",
    "nvlink_tx": "NVLink out of the GPU",
}


@rule(
    "pcie-saturated",
    order=78,
    needs=("gpu_metrics",),
    queries=("gpu_metrics_summary", "gpu_metrics_timeline", "gpu_metrics_by_range"),
    reads=("steps",),
    severities=("info", "warning"),
    thresholds=(
        Threshold(
            "link_saturated_pct",
            70.0,
            "%",
            "PCIe / NVLink throughput, % of the link's peak in one direction, at which a bucket counts as saturated.",
        ),
        Threshold(
            "link_warning_share",
            0.25,
            "fraction",
            "Saturated share of the steady state that makes the finding a warning (else info).",
        ),
        BUCKET_NS,
        MIN_WINDOW_SHARE,
    ),
)
def pcie_saturated(ctx: Context, rid: int) -> list[Finding]:
    """A PCIe or NVLink direction runs at its limit for a real share of the steady state (GPU metrics).

    Anti-pattern: PCIe RX/TX or NVLink RX/TX throughput (nsys GPU metrics, % of the link's peak)
    stays at link_saturated_pct or more, averaged over gpu_metrics_bucket_ns buckets, for at least
    gpu_metrics_min_share of the steady state (the whole run without steps): copies (or kernels
    reading host or peer memory) are at the link limit, so making them faster is impossible;
    only moving less or hiding it helps. Silent without link samples, and when saturated buckets
    stay under the share.

    Fix: Move less over the link and hide the rest: keep data on the GPU between steps, send
    compressed or lower-precision data (uint8 images decoded on the GPU, bf16 instead of fp32),
    copy from pinned memory with non_blocking=True on a side stream so the transfer overlaps
    compute, and for NVLink overlap collectives with compute (bucketed all-reduce).

    est_savings_ns: None: how much of the transfer can be removed or hidden decides the gain.
    """
    limit = ctx["link_saturated_pct"]
    out = []
    for s in saturated_stretches(ctx, rid, _LINKS, limit, total=False):
        dev, link = s.device_id, s.metric
        ranges = ranges_at(ctx, rid, (link,), limit, dev)[:3]
        message = saturation_message(
            ctx, f"{_WORDS[link]} ran at {limit:.0f}% of the link's peak or more", s, ranges
        )
        ev = {
            "device_id": dev,
            "link": link,
            "scope": s.scope,
            **s.evidence(),
            "ranges": [{"name": n, "pct": v, "gpu_ns": int(ns)} for n, v, ns in ranges],
            **steady_evidence(ctx.steady(rid)),
        }
        severity = "warning" if s.share >= ctx["link_warning_share"] else "info"
        label = (
            link.replace("_", " ")
            .replace("pcie", "PCIe")
            .replace("nvlink", "NVLink")
            .replace("rx", "RX")
            .replace("tx", "TX")
        )
        title = f"{label} at the link limit {pct(s.share)} of the {s.window}"
        out.append(Finding("pcie-saturated", severity, rid, title, message, pcie_saturated.fix, ev, None))
    return out
