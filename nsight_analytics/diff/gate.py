"""The CI gate: fail a pull request when B is slower than A beyond a set share, with confidence.

For the step time the whole confidence interval of the relative shift must lie above the
threshold (`--fail-on-regression 5`: the 95% CI's lower end is more than +5%), so noise never
fails a build and a real 5% slowdown does. Other metrics are single numbers per side (busy,
idle, exposed copy time per step, memory peak, energy per step): their relative increase is
compared with the threshold as it is. A diff that is not comparable (a different program, other
GPUs, no steps) fails the gate: it could not judge B, and a gate that passes what it could not
judge lets anything through; so does a metric watched (`--metric`) that is not measured on both
sides (a memory peak or an energy per step that one side has no data for). With
`allow_not_comparable` (`--allow-not-comparable`) either passes, saying so. The same report or
run on both sides has nothing to judge and passes.

An inconclusive step time (the interval holds zero and changes beyond the noise floor: too few
steps, or outliers) has shown no regression, so it passes by default, and the gate line says
whether a regression beyond the threshold is ruled out and how many steps would tell. With
`fail_inconclusive` (`--fail-on-inconclusive`) the gate asks for the opposite proof: it fails
unless the interval's upper end is within the threshold, so a build passes only when a
regression beyond it is ruled out.

Findings (`new_findings`, `--fail-on-new-finding [SEVERITY]`): a finding of B at or above the
severity that A has not (same rule, same report slot) or that got more severe fails the gate,
built-in rules and rule files alike; asked for alone or beside the metric gate, whose verdict it
leaves as it is. Without it findings never fail a diff.

A scaling comparison (two runs of different world sizes) has no before and after to regress:
its gate fails when the scaling efficiency is below (100 - threshold)% (`--fail-on-regression
20`: below 80%), the share of ideal scaling the larger run must keep.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import QueryError
from ..names import GATE_METRICS
from .model import Diff, FindingChange


@dataclass
class Gate:
    metric: str  # what the metric gate watched; 'findings' for a gate on findings alone
    threshold_pct: float | None  # None: no metric gate (--fail-on-new-finding alone)
    failed: bool
    message: str
    # the findings gate (`new_findings`): the severity it fails at, and the findings of B that failed it
    findings_severity: str | None = None
    failing_findings: list[FindingChange] = field(default_factory=list)


def gate(
    d: Diff,
    threshold_pct: float | None,
    metric: str = "step_time",
    fail_inconclusive: bool = False,
    allow_not_comparable: bool = False,
    new_findings: str | None = None,
) -> Gate:
    """Did B regress `metric` beyond `threshold_pct` percent of A (with confidence, for the
    step time)? An inconclusive step time fails only with `fail_inconclusive`, and then only
    when a regression beyond the threshold is not ruled out; a diff that is not comparable
    fails unless `allow_not_comparable` (module doc). With `new_findings` (a severity), also
    when B has a finding at or above it that is new or worse than in A (`findings_gate`);
    without `threshold_pct`, that alone."""
    if threshold_pct is None and new_findings is None:
        raise QueryError("a diff gate needs a threshold (--fail-on-regression) or --fail-on-new-finding.")
    if new_findings is None:
        assert threshold_pct is not None
        return _metric_gate(d, threshold_pct, metric, fail_inconclusive, allow_not_comparable)
    by_findings = findings_gate(d, new_findings)
    if threshold_pct is None:
        return by_findings
    by_metric = _metric_gate(d, threshold_pct, metric, fail_inconclusive, allow_not_comparable)
    return Gate(
        by_metric.metric,
        threshold_pct,
        by_metric.failed or by_findings.failed,
        f"{by_metric.message} {by_findings.message}",
        new_findings,
        by_findings.failing_findings,
    )


def findings_gate(d: Diff, severity: str) -> Gate:
    """Failed when B has a finding at or above `severity` that A has not (status 'new': its
    rule on its report slot, as `findings.finding_changes` pairs them) or that is more severe
    than A's (a persisting finding whose severity rose). The step-time verdict plays no part:
    each side's findings are judged on that side alone, so a diff that is not comparable is
    still gated on them. The same report or run twice is not gated."""
    from ..rules.model import SEVERITY_RANK

    if severity not in SEVERITY_RANK:
        raise QueryError(f"no severity {severity!r}; choose one of {', '.join(SEVERITY_RANK)}.")
    if d.same_run:
        what = "run" if d.run_a is not None else "report"
        return Gate(
            "findings", None, False, f"findings gate not applied: A and B are the same {what}.", severity
        )
    floor = SEVERITY_RANK[severity]
    failing = [
        c
        for c in d.findings
        if SEVERITY_RANK[c.severity] >= floor
        and (
            c.status == "new"
            or (
                c.status == "persisting"
                and c.a_severity is not None
                and SEVERITY_RANK[c.severity] > SEVERITY_RANK[c.a_severity]
            )
        )
    ]
    at = f"at {severity} or above" if floor < len(SEVERITY_RANK) - 1 else f"at {severity}"
    if not failing:
        resolved = sum(c.status == "resolved" for c in d.findings)
        tail = f" ({resolved} resolved)" if resolved else ""
        return Gate(
            "findings",
            None,
            False,
            f"gate passed: no finding of B {at} is new or worse than in A{tail}.",
            severity,
        )
    named = "; ".join(
        f"new [{c.severity}] {c.rule_id}: {c.title}"
        if c.status == "new"
        else f"worse [{c.a_severity} -> {c.severity}] {c.rule_id}: {c.title}"
        for c in failing
    )
    many = "finding" if len(failing) == 1 else "findings"
    return Gate(
        "findings",
        None,
        True,
        f"gate FAILED: B has {len(failing)} {many} {at} that {'is' if len(failing) == 1 else 'are'} new or "
        f"worse than in A (--fail-on-new-finding): {named}.",
        severity,
        failing,
    )


def _metric_gate(
    d: Diff, threshold_pct: float, metric: str, fail_inconclusive: bool, allow_not_comparable: bool
) -> Gate:
    if metric not in GATE_METRICS:
        raise QueryError(f"the gate cannot watch {metric!r}; choose one of {', '.join(GATE_METRICS)}.")
    limit = threshold_pct / 100
    if not d.comparable:
        what = f"not comparable ({d.reason.rstrip('.')})"
        return _not_comparable(metric, threshold_pct, allow_not_comparable, what)
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
    if m is None or m.a is None or m.b is None:
        where = (
            "measured on neither side"
            if m is None or (m.a is None and m.b is None)
            else f"measured in {'A' if m.b is None else 'B'} only"
        )
        what = f"{metric} is NOT COMPARABLE, {where}"
        return _not_comparable(metric, threshold_pct, allow_not_comparable, what)
    if m.relative is None:  # A is zero: any increase is beyond every threshold
        failed = m.b > 0
        change = f"{m.a:g} -> {m.b:g}"
    else:
        failed = m.relative > limit
        change = f"{m.relative * 100:+.1f}%"
    return Gate(
        metric,
        threshold_pct,
        failed,
        f"gate {'FAILED' if failed else 'passed'}: {metric} {change} "
        f"({'above' if failed else 'within'} +{threshold_pct:g}%).",
    )


def _not_comparable(metric: str, threshold_pct: float, allow: bool, what: str) -> Gate:
    """The gate could not judge B against A (the diff, or the metric watched): failed, unless
    `allow` (--allow-not-comparable) passes it, saying so."""
    if allow:
        return Gate(
            metric,
            threshold_pct,
            False,
            f"gate passed without judging (--allow-not-comparable): {what}.",
        )
    return Gate(
        metric,
        threshold_pct,
        True,
        f"gate FAILED: it could not judge B against A: {what}; --allow-not-comparable passes such a diff.",
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
