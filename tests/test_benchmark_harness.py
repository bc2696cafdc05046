"""benchmarks/compare.py: the arithmetic of benchmarks/run.py (growth, flags, regressions, history),
on made-up numbers; no timing is measured or asserted here."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("bench_compare", ROOT / "benchmarks" / "compare.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_growth_linear_and_quadratic(compare):
    # 10x the kernels: a linear query takes 10x the time, a quadratic one 100x
    linear = compare.growth(0.2, 2.0, 100_000, 1_000_000)
    assert linear["time_ratio"] == pytest.approx(10)
    assert linear["size_ratio"] == pytest.approx(10)
    assert linear["per_size"] == pytest.approx(1)
    assert linear["exponent"] == pytest.approx(1)
    quadratic = compare.growth(0.1, 10.0, 50_000, 500_000)
    assert quadratic["exponent"] == pytest.approx(2)
    assert quadratic["per_size"] == pytest.approx(10)
    # n log n from 100k to 1M rows: log(1e6) / log(1e5) = 1.2 more per row
    nlogn = compare.growth(1e5 * math.log(1e5), 1e6 * math.log(1e6), 100_000, 1_000_000)
    assert nlogn["exponent"] == pytest.approx(1 + math.log10(1.2), rel=1e-9)
    assert nlogn["exponent"] < compare.SUPERLINEAR_EXPONENT


def test_query_flags(compare):
    quadratic = compare.growth(0.1, 10.0, 50_000, 500_000)
    flags = compare.query_flags(10.0, 200.0, quadratic)
    assert len(flags) == 2
    assert flags[0].startswith("200x kernel_summary")
    assert flags[1] == "superlinear: time ~ size^2.00"
    linear = compare.growth(0.02, 0.2, 50_000, 500_000)
    assert compare.query_flags(0.2, 4.9, linear) == []
    # too fast at the large size for its growth to mean anything: only the ratio counts
    assert compare.query_flags(0.01, 1.0, compare.growth(0.0001, 0.01, 1, 10)) == []


def test_ratios_and_spread(compare):
    r = compare.ratios([2.0, 3.0, 2.5], [1.0, 2.0, 1.0])
    assert r == [2.0, 1.5, 2.5]
    s = compare.spread(r)
    assert (s["median"], s["min"], s["max"], s["spread"]) == (2.0, 1.5, 2.5, 1.0)
    assert compare.spread([]) is None
    with pytest.raises(ValueError):
        compare.ratios([1.0], [1.0, 2.0])


def _result(step_ratios: dict[str, list[float]], query_ratios: list[float] | None = None) -> dict:
    res: dict = {"steps": {name: {"ratios": r} for name, r in step_ratios.items()}}
    if query_ratios is not None:
        res["queries"] = {
            "h2d_heavy": {
                "sizes": {
                    "x300": {
                        "queries": {
                            "gaps": {"vs_kernel_summary_repeats": query_ratios, "median_s": 0.5},
                            # a few milliseconds: too fast to compare, though 10x slower here
                            "kernel_span": {
                                "vs_kernel_summary_repeats": [x * 10 for x in query_ratios],
                                "median_s": 0.01,
                            },
                        }
                    }
                }
            }
        }
    return res


def test_regressions(compare):
    previous = _result(
        {
            "ingest + kernel_summary": [1.0, 1.1, 1.2],  # median 1.1, spread 0.2
            "first NVTX use": [2.0, 2.0, 2.0],  # no spread: 10% of 2.0 is allowed
            "stream_gaps to CSV": [5.0, 5.5, 6.0],
            "only before": [1.0],
        },
        query_ratios=[8.0, 9.0, 10.0],
    )
    current = _result(
        {
            "ingest + kernel_summary": [1.25, 1.3, 1.35],  # +0.2: within the spread of 0.2
            "first NVTX use": [2.3, 2.3, 2.3],  # +0.3 > 0.2
            "stream_gaps to CSV": [1.0, 1.0, 1.0],  # faster: not listed
            "only now": [9.0],
        },
        query_ratios=[20.0, 21.0, 22.0],
    )
    slower = compare.regressions(previous, current)
    assert [r["step"] for r in slower] == [
        "first NVTX use",
        "query gaps vs kernel_summary (h2d_heavy x300)",
    ]
    nvtx = slower[0]
    assert nvtx["previous"] == 2.0 and nvtx["current"] == 2.3
    assert nvtx["allowed"] == pytest.approx(0.2)
    assert nvtx["times"] == pytest.approx(1.15)
    assert slower[1]["allowed"] == pytest.approx(2.0)  # the larger spread of the two runs
    # a result from before the repeats were kept compares nothing
    assert compare.regressions({"steps": {"ingest + kernel_summary": {"wall_s": 1.0}}}, current) == []
    # nor one of run 5's layout (results/history/2026-11-24_*.json: `queries` a list, no steps)
    assert (
        compare.regressions({"when": "2026-11-24", "queries": [{"query": "gaps", "x300_s": 1.0}]}, current)
        == []
    )
    assert compare.regressions(current, current) == []


def test_archive_keeps_every_previous_run(compare, tmp_path):
    latest, history = tmp_path / "latest.json", tmp_path / "history"
    assert compare.archive(latest, history) is None
    latest.write_text(json.dumps({"when": "2026-11-26 16:00:00", "n": 1}))
    first = compare.archive(latest, history)
    assert first == history / "2026-11-26_160000.json"
    assert not latest.exists()
    latest.write_text(json.dumps({"when": "2026-11-26 16:00:00", "n": 2}))
    second = compare.archive(latest, history)
    assert second == history / "2026-11-26_160000_2.json"
    assert [json.loads(p.read_text())["n"] for p in (first, second)] == [1, 2]


def test_a_step_failing_now_is_a_regression(compare):
    """A step or query that finished with a ratio last time and fails now (killed for its memory,
    past its time, an error) has no ratio to compare: it is listed as failed, not left out."""
    previous = _result({"first NVTX use": [1.0, 1.1, 1.2], "report": [3.0, 3.1], "broken": [2.0]},
                       query_ratios=[8.0, 9.0, 10.0])  # fmt: skip
    previous["steps"]["broken"]["ok"] = False  # failed in a repeat last time as well: not news
    current = _result(
        {"first NVTX use": [], "report": [3.0, 3.2], "broken": []}, query_ratios=[8.0, 9.0, 10.0]
    )
    current["steps"]["first NVTX use"] |= {
        "ok": False,
        "repeats": [{"ok": False, "error": "killed above 8 GB of memory"}, {"ok": False, "error": "rc=1: x"}],
    }
    current["steps"]["broken"] |= {"ok": False, "repeats": [{"ok": False, "error": "rc=1: y"}]}
    gaps = current["queries"]["h2d_heavy"]["sizes"]["x300"]["queries"]["gaps"]
    gaps.clear()
    gaps["timeout_s"] = 300.0
    slower = compare.regressions(previous, current)
    assert [r["step"] for r in slower] == ["first NVTX use", "query gaps vs kernel_summary (h2d_heavy x300)"]
    nvtx, gap = slower
    assert nvtx["failed"] == "killed above 8 GB of memory"
    assert nvtx["previous"] == pytest.approx(1.1) and nvtx["current"] is None
    assert gap["failed"] == "did not finish in 300 s" and gap["previous"] == 9.0
    assert compare.describe(nvtx) == "first NVTX use: ratio 1.10 -> FAILED now (killed above 8 GB of memory)"
    assert compare.describe(
        {"step": "s", "previous": 2.0, "current": 2.3, "times": 1.15, "allowed": 0.2}
    ) == ("s: ratio 2.00 -> 2.30 (1.15x; allowed +0.20)")
    # a step failing in only some repeats still has ratios: listed as failing now, with its ratio
    current["steps"]["report"] |= {"ok": False, "repeats": [{"ok": True}, {"ok": False, "error": "rc=1: z"}]}
    partly = [r for r in compare.regressions(previous, current) if r["step"] == "report"]
    assert partly and partly[0]["failed"] == "rc=1: z" and partly[0]["current"] == pytest.approx(3.1)
