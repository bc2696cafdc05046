"""The verdict of a diff in words: the step-time change, whether the steps can tell it from
noise, and when they cannot, why (the spread, the outlier steps) and how many steps would.

'No significant change' is a claim that nothing beyond the noise floor changed, so it needs an
interval inside the floor (or a real shift under it); an interval that holds zero and changes
beyond the floor (few steps, or an outlier step or two) is 'inconclusive', as is a capture too
short for any result to reach the confidence asked (3 steps a side). The same report on both
sides is 'same report', not a measurement (`same_reports`).
"""

from __future__ import annotations

from ..units import dur, plural, signed, signed_pct
from . import stats
from .model import Check, Diff, Side, StepChange


def same_reports(side: Side, floor: float) -> Diff:
    """A and B are the same report(s): there is nothing to compare, and 'no significant change'
    would read as a measured result (the verdict 'same report')."""
    ids = ", ".join(map(str, side.report_ids))
    what = f"report {ids} ({', '.join(side.files)})" if len(side.report_ids) == 1 else f"reports {ids}"
    text = f"A and B are both {what}: nothing to compare; give two different reports."
    d = Diff(side, side, [], "same report", text, floor)
    d.same_run = True
    return d


def too_few(a: Side, b: Side, s: stats.Shift) -> Check:
    """A note, not a failure: the sides compare, there are only too few steps to decide."""
    return Check(
        "steps",
        True,
        f"too few steps: with {len(a.step_ns)} and {len(b.step_ns)} steady steps no result can reach "
        f"{s.confidence:.0%} confidence (the smallest possible p-value is {s.min_p:.2g}); 4 steps a side "
        "is the least that can, and only when every step of one side beats every step of the other.",
        warning=True,
    )


def step_change(s: stats.Shift, a: Side, b: Side, floor: float) -> StepChange:
    base = a.median_step_ns or 1.0
    method = "exact" if s.exact else "normal approximation"
    return StepChange(
        statistic=f"Mann-Whitney U ({method}), Hodges-Lehmann shift of the GPU step times",
        estimate_ns=s.estimate,
        ci_ns=list(s.ci) if s.ci else None,
        relative=s.estimate / base,
        ci_relative=[s.ci[0] / base, s.ci[1] / base] if s.ci else None,
        p_value=s.p_value,
        confidence=s.confidence,
        superiority=stats.superiority(s),
        steps_needed=stats.steps_needed(a.step_ns, b.step_ns, s, floor * base),
    )


def verdict(
    checks: list[Check], change: StepChange | None, a: Side, b: Side, floor: float
) -> tuple[str, str]:
    failed = [c.detail for c in checks if not c.ok and not c.warning]
    if failed or change is None:
        return "not comparable", " ".join(failed) or "no step times to compare."
    medians = f"median GPU step {dur(a.median_step_ns)} -> {dur(b.median_step_ns)}"
    profilers = (
        " (different profilers: part of it may be theirs)"
        if any(c.name == "tool" and c.warning for c in checks)
        else ""
    )
    if change.ci_ns is None or change.ci_relative is None:
        what = (
            f"{medians}: shift {signed(change.estimate_ns)} ({signed_pct(change.relative)}), no "
            f"{change.confidence:.0%} interval: with {len(a.step_ns)} and {len(b.step_ns)} steady steps no "
            f"result can reach {change.confidence:.0%} confidence{profilers}"
        )
        return "inconclusive", f"{what}. {_capture(change, a, b, floor)}"
    lo, hi = change.ci_ns
    rlo, rhi = change.ci_relative
    what = (
        f"{medians}: shift {signed(change.estimate_ns)} "
        f"({signed_pct(change.relative)}), {change.confidence:.0%} CI {signed(lo)} .. {signed(hi)} "
        f"({signed_pct(rlo)} .. {signed_pct(rhi)}), Mann-Whitney p = {change.p_value:.2g}{profilers}"
    )
    if lo <= 0 <= hi:
        if max(-rlo, rhi) <= floor:
            return (
                "no significant change",
                f"{what}; the interval includes zero and lies within the {floor:.0%} noise floor.",
            )
        return (
            "inconclusive",
            f"{what}; the interval includes zero and changes beyond the {floor:.0%} noise floor: "
            f"{len(a.step_ns)} steps against {len(b.step_ns)} cannot tell {_spread(a, b)}. "
            + _capture(change, a, b, floor),
        )
    if abs(change.relative) < floor:
        return (
            "no significant change",
            (
                f"{what}; the shift is real but under the {floor:.0%} noise floor (two runs of one "
                "program on one GPU differ this much)."
            ),
        )
    return ("improvement" if hi < 0 else "regression"), what + "."


def _spread(a: Side, b: Side) -> str:
    """Why the steps cannot tell: their ranges, and the slow outliers of either side."""
    text = f"this change from the spread of the steps: A's run {_range(a.step_ns)}, B's {_range(b.step_ns)}"
    for label, side in (("A", a), ("B", b)):
        slow = stats.slow_outliers(side.step_ns)
        if slow:
            times = (
                " and ".join(dur(side.step_ns[i]) for i in slow)
                if len(slow) <= 3
                else "up to " + dur(max(side.step_ns))
            )
            text += (
                f", with {plural(len(slow), 'outlier step')} in {label} ({times} against its median of "
                f"{dur(side.median_step_ns)})"
            )
    return text


def _range(xs: list[float]) -> str:
    return f"{dur(min(xs))} .. {dur(max(xs))}"


def _capture(change: StepChange, a: Side, b: Side, floor: float) -> str:
    """What to capture: the steps a side that would resolve a change of this size."""
    n = change.steps_needed
    kineto = "kineto" in a.tools or "kineto" in b.tools
    if n is None:
        return "No number of steps would: B's steps are longer than A's exactly as often as shorter."
    where = f" (`schedule(active={n})`)" if kineto else ""
    if abs(change.relative) >= floor:
        odds = change.superiority if change.superiority is not None else 0.5
        share = 1 - odds if change.estimate_ns < 0 else odds
        word = "shorter" if change.estimate_ns < 0 else "longer"
        return (
            f"To resolve a change of this size at this spread (a step of B is {word} than one of A in "
            f"{share:.0%} of pairs) at {change.confidence:.0%} confidence with {stats.POWER:.0%} power, capture about "
            f"{n} steady steps a side{where}."
        )
    sd = stats.pooled_sd(a.step_ns, b.step_ns)
    vary = f" (a step varies by {sd / a.median_step_ns:.0%} of A's median)" if sd and a.median_step_ns else ""
    return (
        f"To tell whether it reaches the {floor:.0%} noise floor at this spread{vary}, capture about {n} "
        f"steady steps a side{where}."
    )


def outlier_note(a: Side, b: Side, floor: float, host: bool) -> list[str]:
    """When outlier steps move the mean (what the parts add up to) away from the median (what
    the verdict compares) by more than the noise floor, say so."""
    if (
        a.mean_step_ns is None
        or b.mean_step_ns is None
        or a.median_step_ns is None
        or b.median_step_ns is None
    ):
        return []
    dmean = b.mean_step_ns - a.mean_step_ns
    dmed = b.median_step_ns - a.median_step_ns
    slow = stats.slow_outliers(a.step_ns) or stats.slow_outliers(b.step_ns)
    if not slow or abs(dmean - dmed) < floor * a.median_step_ns:
        return []
    return [
        f"The mean GPU step moved {signed(dmean)}, the median {signed(dmed)}: the outlier steps weigh on "
        "the mean, which the phases and causes add up to"
        + ("; the host ops are medians per step." if host else ".")
    ]
