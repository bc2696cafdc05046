"""Where on the timeline each finding happens, so the page can pin it there.

Findings carry evidence, not coordinates, so the place is read from it in order of
precision: an explicit window in the evidence (`start_ns`/`end_ns`, `gap_start_ns`/`gap_end_ns`);
the longest copy of the copy kind the evidence names; the longest gap for gap and sync rules;
the start-up phase for start-up rules; otherwise the part of the run the finding judged. A
finding that judged the steady state (its evidence's `steady_start_ns`/`steady_end_ns`) is
pinned inside it: its longest copy or gap is the steady state's, never a start-up one.
`pin.how` says which, so the page never presents a guess as a measurement.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_WINDOWS = (("start_ns", "end_ns"), ("gap_start_ns", "gap_end_ns"), ("window_start_ns", "window_end_ns"))


def pin_findings(found: list[dict[str, Any]], timeline: dict[str, Any], panels: dict[str, Any]) -> None:
    """Add `pin = {s, d, how}` (ns from the timeline's start) to each finding dict."""
    t0, span = timeline["t0"], timeline["t1"] - timeline["t0"]
    for f in found:
        steady = _steady(f, t0, span)
        f["pin"] = (
            _window(f["evidence"], t0, span)
            or _copy(f["evidence"], timeline, steady)
            or _gap(f["rule_id"], timeline, steady)
            or _phase(f["rule_id"], panels, t0)
            or (steady and {"s": steady[0], "d": steady[1] - steady[0], "how": "steady state"})
            or {"s": 0, "d": span, "how": "whole run"}
        )


def _steady(f: dict[str, Any], t0: int, span: int) -> tuple[int, int] | None:
    """The steady state the finding judged, from the timeline's start; None for start-up rules
    and findings that judged the whole run."""
    ev = f["evidence"]
    a, b = ev.get("steady_start_ns"), ev.get("steady_end_ns")
    if "startup" in f["rule_id"] or "warm" in f["rule_id"] or ev.get("phase") not in (None, "steady"):
        return None
    if not isinstance(a, int) or not isinstance(b, int) or b < a:
        return None
    return max(0, a - t0), min(span, b - t0)


def _inside(s: int, d: int, scope: tuple[int, int] | None) -> bool:
    return scope is None or (scope[0] <= s and s + d <= scope[1])


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _dicts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _dicts(v)


def _window(evidence: dict[str, Any], t0: int, span: int) -> dict[str, Any] | None:
    for d in _dicts(evidence):
        for a, b in _WINDOWS:
            s, e = d.get(a), d.get(b)
            if isinstance(s, int) and isinstance(e, int) and t0 <= s <= e <= t0 + span:
                return {"s": s - t0, "d": e - s, "how": f"evidence {a}"}
    return None


def _copy(
    evidence: dict[str, Any], timeline: dict[str, Any], scope: tuple[int, int] | None
) -> dict[str, Any] | None:
    kinds = {d["direction"] for d in _dicts(evidence) if isinstance(d.get("direction"), str)}
    best: tuple[int, int] | None = None
    for lane in timeline["lanes"]:
        if lane["kind"] != "memcpy" or not any(lane["label"].endswith(f"memcpy {k}") for k in kinds):
            continue
        start = 0
        for s, d in zip(lane.get("s", []), lane.get("d", []), strict=True):
            start += s
            if (best is None or d > best[1]) and _inside(start, d, scope):
                best = (start, d)
    return None if best is None else {"s": best[0], "d": best[1], "how": "longest copy of that kind"}


def _gap(rule_id: str, timeline: dict[str, Any], scope: tuple[int, int] | None) -> dict[str, Any] | None:
    """The longest idle gap (of the steady state when the finding judged it; gaps come longest first)."""
    if not any(w in rule_id for w in ("gap", "idle", "sync", "launch", "host")):
        return None
    for g in timeline["gaps"]:
        if scope is None or (g.get("phase") == "steady" and _inside(g["s"], g["d"], scope)):
            how = "longest idle gap" if scope is None else "longest idle gap of the steady state"
            return {"s": g["s"], "d": g["d"], "how": how}
    return None


def _phase(rule_id: str, panels: dict[str, Any], t0: int) -> dict[str, Any] | None:
    if "startup" not in rule_id and "warm" not in rule_id:
        return None
    for p in panels.get("phases", []):
        if p["phase"] == "startup":
            return {"s": p["start_ns"] - t0, "d": p["duration_ns"], "how": "start-up phase"}
    return None
