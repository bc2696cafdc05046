"""Helpers of the rules that read nsys GPU metrics sampling (table gpu_metrics)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ..units import dur, pct
from .context import Context
from .model import Threshold


def kernel_math(ctx: Context, rid: int) -> dict[str, tuple[str, str | None]]:
    """{kernel name: (class, math)} of the report's kernels, as the SQL macros nsa_kernel_class
    and nsa_kernel_math decide them (queries/_kernels.sql), keyed by the name
    gpu_metrics_by_kernel gives (the demangled name, else the short one)."""
    rows = ctx.sql(
        "kernel_math",
        "SELECT report_id, coalesce(name, short_name, '(unnamed kernel)') AS name, "
        "nsa_kernel_class(coalesce(name, short_name)) AS kernel_class, "
        "nsa_kernel_math(coalesce(name, short_name)) AS math "
        "FROM kernel_names WHERE $rid IS NULL OR report_id = $rid",
        rid,
    )
    return {str(r.name): (str(r.kernel_class), r.math) for r in rows}


def metric_values(rows: Any, device_id: int | None = None) -> dict[str, float]:
    """{metric: average} of summary or by-range rows (of one device when given)."""
    return {
        r.metric: float(r.average)
        for r in rows
        if r.average is not None and (device_id is None or r.device_id == device_id)
    }


def window_text(start_ns: int, end_ns: int) -> str:
    return f"{dur(start_ns)} to {dur(end_ns)} into the capture"


def judged_window(ctx: Context, rid: int) -> tuple[str, int, int] | None:
    """('steady' or 'run', start_ns, end_ns): the span the GPU metrics rules judge, as
    gpu_metrics_summary scopes it (the steady state when the report has steps); None without
    GPU metrics."""
    window = ctx.steady(rid)
    scope = "steady" if window is not None else "run"
    rows = ctx.query("gpu_metrics_summary", rid, scope=scope)
    if not rows:
        return None
    return scope, min(int(r.start_ns) for r in rows), max(int(r.end_ns) for r in rows)


def saturated_time(
    ctx: Context, rid: int, metrics: tuple[str, ...], limit_pct: float, span: tuple[int, int], total: bool
) -> dict[tuple[int, str], dict[str, Any]]:
    """Per (device, metric): the buckets of gpu_metrics_timeline (bucket gpu_metrics_bucket_ns)
    starting inside `span` where the metric reaches limit_pct (`total`: the sum of `metrics`,
    under the name 'total', as DRAM read + write share one bandwidth): saturated and observed
    time, first and last saturated bucket, the highest bucket."""
    bucket = int(ctx["gpu_metrics_bucket_ns"])
    rows = ctx.query("gpu_metrics_timeline", rid, bucket_ns=bucket, metrics=",".join(metrics))
    buckets: dict[tuple[int, int, int], dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r.average is not None and span[0] <= r.bucket_start_ns < span[1]:
            buckets[(r.device_id, r.bucket_start_ns, r.bucket_end_ns)][r.metric] = float(r.average)
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for (dev, bs, be), values in sorted(buckets.items()):
        if total:
            values = {"total": sum(values.values())}
        for name, value in values.items():
            slot = out.setdefault(
                (dev, name),
                {"saturated_ns": 0, "observed_ns": 0, "peak": 0.0, "first_ns": None, "last_ns": None},
            )
            length = min(be, span[1]) - bs
            slot["observed_ns"] += length
            slot["peak"] = max(slot["peak"], value)
            if value >= limit_pct:
                slot["saturated_ns"] += length
                slot["first_ns"] = bs if slot["first_ns"] is None else slot["first_ns"]
                slot["last_ns"] = min(be, span[1])
    return out


@dataclass
class Stretch:
    """The saturated time of one device and metric in the judged window (saturated_time's
    slot), which holds at least gpu_metrics_min_share of what was observed."""

    scope: str  # 'steady' or 'run', as judged_window says
    device_id: int
    metric: str  # 'total' when the metrics were summed
    slot: dict[str, Any]
    share: float  # saturated / observed

    @property
    def window(self) -> str:
        return "steady state" if self.scope == "steady" else "run"

    def evidence(self) -> dict[str, Any]:
        """The evidence keys dram-saturated and pcie-saturated share."""
        return {
            "saturated_ns": int(self.slot["saturated_ns"]),
            "observed_ns": int(self.slot["observed_ns"]),
            "share": self.share,
            "first_ns": self.slot["first_ns"],
            "last_ns": self.slot["last_ns"],
            "peak_pct": self.slot["peak"],
        }


def saturated_stretches(
    ctx: Context, rid: int, metrics: tuple[str, ...], limit_pct: float, total: bool
) -> list[Stretch]:
    """The (device, metric) pairs of the judged window whose buckets reach limit_pct for at
    least gpu_metrics_min_share of the observed time, in device then metric order; none
    without GPU metrics."""
    judged = judged_window(ctx, rid)
    if judged is None:
        return []
    scope, start, end = judged
    out = []
    for (dev, metric), slot in sorted(
        saturated_time(ctx, rid, metrics, limit_pct, (start, end), total).items()
    ):
        observed, saturated = int(slot["observed_ns"]), int(slot["saturated_ns"])
        if observed and saturated / observed >= ctx["gpu_metrics_min_share"]:
            out.append(Stretch(scope, dev, metric, slot, saturated / observed))
    return out


def ranges_at(
    ctx: Context, rid: int, metrics: tuple[str, ...], limit_pct: float, device_id: int
) -> list[Any]:
    """(name, summed average of `metrics`, GPU time) of the NVTX ranges of the judged span whose
    summed average reaches limit_pct, most GPU time first (gpu_metrics_by_range)."""
    phase = "steady" if ctx.steady(rid) is not None else None
    rows = ctx.query("gpu_metrics_by_range", rid, metrics=",".join(metrics), phase=phase)
    steps = {r.name for r in rows if r.range_type == "step"}
    sums: dict[str, list[float]] = {}
    for r in rows:
        if (
            r.range_type == "nvtx"
            and r.name not in steps
            and r.device_id == device_id
            and r.average is not None
        ):
            slot = sums.setdefault(str(r.name), [0.0, float(r.gpu_ns)])
            slot[0] += float(r.average)
    return sorted(((n, v, ns) for n, (v, ns) in sums.items() if v >= limit_pct), key=lambda x: -x[2])


BUCKET_NS = Threshold(
    "gpu_metrics_bucket_ns",
    2_000_000,
    "ns",
    "GPU metric samples are averaged over buckets this long before a link or DRAM counts as saturated.",
)
MIN_WINDOW_SHARE = Threshold(
    "gpu_metrics_min_share",
    0.05,
    "fraction",
    "A range, kernel or saturated stretch must hold at least this share of the steady state to be reported.",
)


def saturation_message(
    ctx: Context, what: str, stretch: Stretch, ranges: list[tuple[str, float, int]]
) -> str:
    """The sentence dram-saturated and pcie-saturated share: `what` ("DRAM read + write bandwidth
    reached 80% of peak or more") for how long of the judged window, when, the highest bucket,
    and the NVTX ranges at the limit."""
    slot = stretch.slot
    observed, saturated = int(slot["observed_ns"]), int(slot["saturated_ns"])
    return (
        f"{what} for {dur(saturated)} of {dur(observed)} ({pct(saturated / observed)}) of the {stretch.window} "
        f"on GPU {stretch.device_id}, "
        f"in {dur(ctx['gpu_metrics_bucket_ns'])} averages; the first and last such stretch "
        f"{window_text(int(slot['first_ns']), int(slot['last_ns']))}; highest {slot['peak']:.0f}%."
        + (
            " NVTX ranges at the limit: "
            + "; ".join(f"{n!r} ({v:.0f}%, {dur(ns)} on the GPU)" for n, v, ns in ranges)
            + "."
            if ranges
            else ""
        )
    )
