"""The arithmetic of benchmarks/run.py, apart from any timing: ratios to a floor, growth with the
input, the flags of issue 31 and the comparison with the previous run.

Every step of a run keeps its repeats; each repeat pairs nsa's time with its peer's or floor's
time measured right beside it (`nsys stats`, DuckDB's own COPY, a bare JSON parse, `python -c
pass`, `kernel_summary`), so a run is judged by ratios, which survive a change of machine, and
its spread is the range of those ratios over the repeats.
"""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path
from typing import Any

# A query slower than this many times kernel_summary at the large size is flagged (issue 31).
MAX_VS_KERNEL_SUMMARY = 5.0
# Time grows as size ** exponent: 1 is linear, n log n between the two sizes here (10x) is about
# 1.07, 2 is quadratic. Above this exponent a query is flagged as superlinear; the margin over
# n log n is the noise of a warm median under load.
SUPERLINEAR_EXPONENT = 1.3
# Below this time at the large size fixed costs (parsing, planning) dominate and the exponent
# says nothing about growth: not flagged.
MIN_GROWTH_S = 0.05
# A step is slower than last time when its median ratio rose by more than the larger spread of
# the two runs, and by at least this share of the old median (a step repeated once has no spread;
# repeating a step moves its time by 10-20% on this machine).
MIN_REGRESSION = 0.10


def ratios(nsa_s: list[float], floor_s: list[float]) -> list[float]:
    """Repeat by repeat: nsa's time over its floor's, measured side by side."""
    return [a / b for a, b in zip(nsa_s, floor_s, strict=True) if b > 0]


def spread(values: list[float]) -> dict[str, float] | None:
    """Median, min and max of a step's repeated ratios (None when there are none)."""
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "spread": max(values) - min(values),
    }


def growth(small_s: float, large_s: float, small_n: int, large_n: int) -> dict[str, float]:
    """How a query's time grows with its input: the time ratio, the size ratio, the time ratio
    per size ratio (1.0 = linear) and the exponent k in time ~ size ** k."""
    time_ratio = large_s / small_s
    size_ratio = large_n / small_n
    return {
        "time_ratio": time_ratio,
        "size_ratio": size_ratio,
        "per_size": time_ratio / size_ratio,
        "exponent": math.log(time_ratio) / math.log(size_ratio) if size_ratio != 1 else math.nan,
    }


def query_flags(large_s: float, vs_kernel_summary: float | None, grow: dict[str, float] | None) -> list[str]:
    """Issue 31's two tests for a library query at the large size."""
    flags = []
    if vs_kernel_summary is not None and vs_kernel_summary > MAX_VS_KERNEL_SUMMARY:
        flags.append(f"{vs_kernel_summary:.0f}x kernel_summary (> {MAX_VS_KERNEL_SUMMARY:g}x)")
    if grow is not None and large_s >= MIN_GROWTH_S and grow["exponent"] > SUPERLINEAR_EXPONENT:
        flags.append(f"superlinear: time ~ size^{grow['exponent']:.2f}")
    return flags


def _parts(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A result's steps and queries; {} for a part in an older layout (before run 6 `queries` was a
    list and there were no steps), which has nothing to compare."""
    steps, queries = result.get("steps"), result.get("queries")
    return (steps if isinstance(steps, dict) else {}), (queries if isinstance(queries, dict) else {})


def step_ratios(result: dict[str, Any]) -> dict[str, list[float]]:
    """Every step's repeated ratios in a result of run.py: the steps with a peer or floor, and
    each library query of at least MIN_GROWTH_S against kernel_summary at each size of each export."""
    out: dict[str, list[float]] = {}
    steps, queries = _parts(result)
    for name, step in steps.items():
        if step.get("ratios"):
            out[name] = step["ratios"]
    for export, exp in queries.items():
        for size, res in exp.get("sizes", {}).items():
            for q, v in res.get("queries", {}).items():
                # a query of a few milliseconds moves by more than itself: not compared
                if v.get("vs_kernel_summary_repeats") and v.get("median_s", 0) >= MIN_GROWTH_S:
                    out[f"query {q} vs kernel_summary ({export} {size})"] = v["vs_kernel_summary_repeats"]
    return out


def failed_steps(result: dict[str, Any]) -> dict[str, str]:
    """The steps and queries of a result of run.py that did not finish (an error, past their time,
    killed for their memory), named as step_ratios names them, with the first reason."""
    out: dict[str, str] = {}
    steps, queries = _parts(result)
    for name, step in steps.items():
        if step.get("ok") is False:
            errors = [r["error"] for r in step.get("repeats", []) if r.get("error")]
            out[name] = errors[0] if errors else "failed"
    for export, exp in queries.items():
        for size, res in exp.get("sizes", {}).items():
            for q, v in res.get("queries", {}).items():
                why = (
                    v.get("killed")
                    or (f"did not finish in {v['timeout_s']:g} s" if v.get("timeout_s") else None)
                    or v.get("error")
                )
                if why:
                    out[f"query {q} vs kernel_summary ({export} {size})"] = why
    return out


def regressions(previous: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
    """Steps whose ratio to their in-run floor rose by more than their spread since `previous`
    (seconds are not compared: the machines differ), and steps that finished with a ratio then
    and fail now (`failed`: why; the slowest regression of all). Steps in only one run are left out."""
    old, new = step_ratios(previous), step_ratios(current)
    failed_before, failed_now = failed_steps(previous), failed_steps(current)
    slower = []
    for name in sorted(old.keys() & (new.keys() | failed_now.keys())):
        a, b = spread(old[name]), spread(new.get(name, []))
        if a is None:
            continue
        if name in failed_now and name not in failed_before:
            slower.append({
                "step": name,
                "previous": a["median"],
                "current": b["median"] if b else None,
                "allowed": None,
                "times": None,
                "failed": failed_now[name],
            })  # fmt: skip
            continue
        if b is None:
            continue
        allowed = max(a["spread"], b["spread"], MIN_REGRESSION * a["median"])
        if b["median"] - a["median"] > allowed:
            slower.append({
                "step": name,
                "previous": a["median"],
                "current": b["median"],
                "allowed": allowed,
                "times": b["median"] / a["median"],
            })  # fmt: skip
    return slower


def describe(r: dict[str, Any]) -> str:
    """One line of run.py's list of regressions."""
    if r.get("failed"):
        return f"{r['step']}: ratio {r['previous']:.2f} -> FAILED now ({r['failed']})"
    return (
        f"{r['step']}: ratio {r['previous']:.2f} -> {r['current']:.2f} ({r['times']:.2f}x; "
        f"allowed +{r['allowed']:.2f})"
    )


def archive(latest: Path, history: Path) -> Path | None:
    """Move the previous run's result into history/ under its own date, never overwriting one."""
    if not latest.exists():
        return None
    import json

    try:
        when = json.loads(latest.read_text())["when"]
    except (ValueError, KeyError):
        when = "unknown"
    stem = when.replace(" ", "_").replace(":", "")
    history.mkdir(parents=True, exist_ok=True)
    target, n = history / f"{stem}.json", 1
    while target.exists():
        n += 1
        target = history / f"{stem}_{n}.json"
    shutil.move(latest, target)
    return target
