"""The CI gate: fail a pull request when B is slower than A beyond a set share, with confidence.

For the step time the whole confidence interval of the relative shift must lie above the
threshold (`--fail-on-regression 5`: the 95% CI's lower end is more than +5%), so noise never
fails a build and a real 5% slowdown does. Other metrics are single numbers per side (busy,
idle, exposed copy time per step, memory peak, energy per step): their relative increase is
compared with the threshold as it is. A diff that is not comparable (a different program, other
GPUs, no steps) fails the gate: it could not judge B, and a gate that passes what it could not
judge lets anything through. With `allow_not_comparable` (`--allow-not-comparable`) it passes,
saying so. The same report on both sides has nothing to judge and passes.

An inconclusive step time (the interval holds zero and changes beyond the noise floor: too few
steps, or outliers) has shown no regression, so it passes by default, and the gate line says
whether a regression beyond the threshold is ruled out and how many steps would tell. With
`fail_inconclusive` (`--fail-on-inconclusive`) the gate asks for the opposite proof: it fails
unless the interval's upper end is within the threshold, so a build passes only when a
regression beyond it is ruled out.

A scaling comparison (two runs of different world sizes) has no before and after to regress:
its gate fails when the scaling efficiency is below (100 - threshold)% (`--fail-on-regression
20`: below 80%), the share of ideal scaling the larger run must keep.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import QueryError
from ..names import GATE_METRICS
from .model import Diff


@dataclass
class Gate:
    metric: str
    threshold_pct: float
    failed: bool
    message: str


def gate(
    d: Diff,
    threshold_pct: float,
    metric: str = "step_time",
    fail_inconclusive: bool = False,
    allow_not_comparable: bool = False,
) -> Gate:
    """Did B regress `metric` beyond `threshold_pct` percent of A (with confidence, for the
    step time)? An inconclusive step time fails only with `fail_inconclusive`, and then only
    when a regression beyond the threshold is not ruled out; a diff that is not comparable
    fails unless `allow_not_comparable` (module doc)."""
    if metric not in GATE_METRICS:
        raise QueryError(f"the gate cannot watch {metric!r}; choose one of {', '.join(GATE_METRICS)}.")
    limit = threshold_pct / 100
    if not d.comparable:
        reason = d.reason.rstrip(".")
        if allow_not_comparable:
            return Gate(
                metric,
                threshold_pct,
                False,
                f"gate passed without judging (--allow-not-comparable): not comparable ({reason}).",
            )
        return Gate(
            metric,
            threshold_pct,
            True,
            f"gate FAILED: it could not judge B against A: not comparable ({reason}); "
            "--allow-not-comparable passes such a diff.",
        )
    if d.same_run:
        what = "run" if d.run_a is not None else "report"
        return Gate(metric, threshold_pct, False, f"gate not applied: A and B are the same {what}.")
    if d.scaling is not None:
        return _scaling_gate(d, threshold_pct, metric)
    if metric == "step_time" and d.verdict == "inconclusive" and d.step_change is not None:
        return _inconclusive_gate(d, threshold_pct, fail_inconclusive)
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


def _inconclusive_gate(d: Diff, threshold_pct: float, fail_inconclusive: bool) -> Gate:
    c = d.step_change
    assert c is not None
    limit = threshold_pct / 100
    steps = f"{len(d.a.step_ns)} vs {len(d.b.step_ns)} steps"
    if c.ci_relative is not None:
        lo, hi = c.ci_relative
        interval = f"{c.confidence:.0%} CI {lo * 100:+.1f}% .. {hi * 100:+.1f}%"
        ruled_out = hi <= limit
    else:
        interval = f"no {c.confidence:.0%} interval"
        ruled_out = False
    failed = fail_inconclusive and not ruled_out
    more = f"; about {c.steps_needed} steady steps a side would tell" if c.steps_needed else ""
    if ruled_out:
        tail = f"a regression beyond +{threshold_pct:g}% is ruled out."
    elif fail_inconclusive:
        tail = f"a regression beyond +{threshold_pct:g}% is not ruled out (--fail-on-inconclusive){more}."
    else:
        tail = (
            f"no regression shown, but one beyond +{threshold_pct:g}% is not ruled out{more} "
            "(--fail-on-inconclusive fails here)."
        )
    return Gate(
        "step_time",
        threshold_pct,
        failed,
        f"gate {'FAILED' if failed else 'passed'}: inconclusive: step time {c.relative * 100:+.1f}% "
        f"({interval}, {steps}): {tail}",
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
