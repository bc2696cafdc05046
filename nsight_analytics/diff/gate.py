"""The CI gate: fail a pull request when B is slower than A beyond a set share, with confidence.

For the step time the whole confidence interval of the relative shift must lie above the
threshold (`--fail-on-regression 5`: the 95% CI's lower end is more than +5%), so noise never
fails a build and a real 5% slowdown does. Other metrics are single numbers per side (busy,
idle, exposed copy time per step, memory peak, energy per step): their relative increase is
compared with the threshold as it is. A diff that is not comparable passes the gate (exit 0)
but says so: there is no regression to measure between a run and a different program.

A scaling comparison (two runs of different world sizes) has no before and after to regress:
its gate fails when the scaling efficiency is below (100 - threshold)% (`--fail-on-regression
20`: below 80%), the share of ideal scaling the larger run must keep.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import QueryError
from .model import Diff

# Metrics the gate can watch; lower is better for each.
GATE_METRICS = (
    "step_time",
    "mean_step_time",
    "gpu_busy",
    "gpu_idle",
    "exposed_copy",
    "kernels_per_step",
    "memory_peak",
    "energy_per_step",
)


@dataclass
class Gate:
    metric: str
    threshold_pct: float
    failed: bool
    message: str


def gate(d: Diff, threshold_pct: float, metric: str = "step_time") -> Gate:
    """Did B regress `metric` beyond `threshold_pct` percent of A (with confidence, for the
    step time)?"""
    if metric not in GATE_METRICS:
        raise QueryError(f"the gate cannot watch {metric!r}; choose one of {', '.join(GATE_METRICS)}.")
    limit = threshold_pct / 100
    if not d.comparable:
        return Gate(metric, threshold_pct, False, f"gate not applied: not comparable ({d.reason})")
    if d.same_run:
        return Gate(metric, threshold_pct, False, "gate not applied: A and B are the same run.")
    if d.scaling is not None:
        return _scaling_gate(d, threshold_pct, metric)
    if metric == "step_time" and d.step_change is not None and d.step_change.ci_relative is not None:
        lo, hi = d.step_change.ci_relative
        failed = lo > limit
        verb = "beyond" if failed else "not beyond"
        return Gate(
            metric,
            threshold_pct,
            failed,
            f"gate {'FAILED' if failed else 'passed'}: step time {d.step_change.relative * 100:+.1f}% "
            f"({d.step_change.confidence:.0%} CI {lo * 100:+.1f}% .. {hi * 100:+.1f}%) is {verb} "
            f"+{threshold_pct:g}% with confidence.",
        )
    m = d.metric(metric)
    if m is None or m.relative is None:
        return Gate(
            metric, threshold_pct, False, f"gate not applied: {metric} is not measured on both sides."
        )
    failed = m.relative > limit
    return Gate(
        metric,
        threshold_pct,
        failed,
        f"gate {'FAILED' if failed else 'passed'}: {metric} {m.relative * 100:+.1f}% "
        f"({'above' if failed else 'within'} +{threshold_pct:g}%).",
    )


def _scaling_gate(d: Diff, threshold_pct: float, metric: str) -> Gate:
    """Failed when the scaling efficiency is below (100 - threshold)%."""
    s = d.scaling
    assert s is not None
    if metric != "step_time" or s.efficiency is None:
        return Gate(
            metric,
            threshold_pct,
            False,
            f"gate not applied: a scaling comparison is gated on its efficiency (--metric step_time), "
            f"not {metric}."
            if s.efficiency is not None
            else "gate not applied: no scaling efficiency.",
        )
    floor = max(0.0, 1 - threshold_pct / 100)
    failed = s.efficiency < floor
    return Gate(
        metric,
        threshold_pct,
        failed,
        f"gate {'FAILED' if failed else 'passed'}: scaling efficiency {s.efficiency * 100:.1f}% "
        f"({s.base.world_size} -> {s.scaled.world_size} ranks) is {'below' if failed else 'not below'} "
        f"{floor * 100:g}% (100% - {threshold_pct:g}%).",
    )
