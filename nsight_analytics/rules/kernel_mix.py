"""Helpers of the rules that judge what the GPU's busy time went to (query `kernel_classes`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..units import clip, pct
from .context import Context
from .model import Threshold

# Matrix math, the work tensor cores exist for (nsa_kernel_class).
MATRIX = ("gemm", "attention", "conv")
# Memory-bound work torch.compile / hand-written fused kernels merge into fewer kernels.
FUSIBLE = ("elementwise", "copy", "reduction", "norm", "softmax")
CLASS_WORDS = {
    "gemm": "GEMM",
    "attention": "attention",
    "conv": "convolution",
    "elementwise": "elementwise",
    "copy": "copies/casts",
    "reduction": "reductions",
    "norm": "norms",
    "softmax": "softmax",
    "optimizer": "optimizer",
    "communication": "communication",
    "other": "other",
}


# Shared by fp32-matmul and unfused-elementwise: below it the GPU is mostly idle or copying,
# and what its few kernels do is not where the time goes.
MIN_SPAN_SHARE = Threshold(
    "kernel_mix_min_span_share",
    0.05,
    "fraction",
    "fp32-matmul and unfused-elementwise stay silent while the kernel time they judge is below this share of "
    "the judged window's span (a mostly idle or copying GPU: gpu-idle's and copy-dominated's).",
)


@dataclass
class Device:
    """One device's kernel mix over the judged window, with the window's span and busy time."""

    device_id: int
    rows: list[Any]  # kernel_classes rows of the device
    span_ns: int  # the window's length on the device (utilization.span_ns)
    kernel_busy_ns: int  # time at least one kernel ran (utilization.kernel_busy_ns)
    kernel_ns: int = field(init=False)  # summed kernel durations (concurrent kernels both count)

    def __post_init__(self) -> None:
        self.kernel_ns = sum(int(r.kernel_ns) for r in self.rows)

    def busy(self, ns: float) -> float:
        """Summed kernel time as timeline time: scaled down where kernels overlapped, so that the
        whole device's sum becomes its kernel busy time."""
        if self.kernel_ns <= self.kernel_busy_ns or not self.kernel_ns:
            return float(ns)
        return ns * self.kernel_busy_ns / self.kernel_ns

    def idle_note(self) -> str:
        """' No kernel runs X% of that span: ...' when kernels leave at least half the window
        idle (faster kernels then wait for the host), else ''."""
        idle = 1 - self.kernel_busy_ns / self.span_ns if self.span_ns else 0.0
        if idle < 0.5:
            return ""
        return (
            f" No kernel runs {pct(idle)} of that span: while the host sets the pace, faster kernels shorten "
            "the step only once that idle time is gone (gpu-idle)."
        )


def devices(ctx: Context, rid: int) -> list[Device]:
    """The report's devices with kernels in the judged window: the steady state when the report
    has steps (phase 'steady' of both queries), else the whole run."""
    phase = "steady" if ctx.steady(rid) is not None else None
    rows = ctx.query("kernel_classes", rid, phase=phase)
    util = {int(u.device_id): u for u in ctx.query("utilization", rid, phase="steady")}
    out = []
    for dev in sorted({int(r.device_id) for r in rows}):
        u = util.get(dev)
        mine = [r for r in rows if int(r.device_id) == dev]
        if u is not None and sum(int(r.kernel_ns) for r in mine) > 0:
            out.append(Device(dev, mine, int(u.span_ns), int(u.kernel_busy_ns)))
    return out


def short(name: str, width: int = 60) -> str:
    """A kernel name without a leading `void `, cut to `width` characters."""
    return clip(name.removeprefix("void "), width)
