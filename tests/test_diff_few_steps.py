"""`nsa diff` on few steps: six PyTorch-profiler steps against six, two of them outliers.

tests/data/busy/kineto/h100_torch2.11_loader_{slow,fast}.json.gz (fixtures/captures/loader_resnet.py):
ResNet-18 fed by a DataLoader that sleeps 80 ms per batch (slow), then 10 ms per batch with two
batches 250 ms slower (fast: ProfilerStep#4 and #7). The median step more than halves, but two of
B's six steps are far slower than any of A's, and six against six cannot tell that from noise:
the verdict is 'inconclusive' both ways, with the size of the change and the steps that would tell,
and the host-op attribution names the DataLoader. Every expected number is computed here from the
trace's JSON: GPU step times from the runtime calls inside each `ProfilerStep#N` and the GPU work
they launched, the DataLoader's time per step, the GPU idle time under it, the exact Mann-Whitney
interval by enumeration and Noether's sample size."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from conftest import ROOT
from nsight_analytics.cli import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, main
from nsight_analytics.diff import Diff, stats
from nsight_analytics.render import diff as render_diff
from nsight_analytics.render.diff_panels import diff_sections
from nsight_analytics.units import table_dur
from rows import opened

KINETO = ROOT / "tests" / "data" / "busy" / "kineto"
SLOW = KINETO / "h100_torch2.11_loader_slow.json.gz"
FAST = KINETO / "h100_torch2.11_loader_fast.json.gz"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
Z_975, Z_80 = 1.959963984540054, 0.8416212335729143


def run(*args: str):
    return CliRunner(env={"COLUMNS": "80"}).invoke(main, list(args))


def ns(us: float) -> int:
    return round(us * 1000)


# --- independent answers: arithmetic on the trace's JSON ------------------------------------------


class Trace:
    """What the test needs of one trace, in ns: the ProfilerStep ranges, the GPU step times, the
    DataLoader's time and the GPU idle time under it per step, the GPU idle per step range."""

    def __init__(self, path: Path) -> None:
        with gzip.open(path) as fh:
            events = json.load(fh)["traceEvents"]
        steps = sorted(
            (
                e
                for e in events
                if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
            ),
            key=lambda e: e["ts"],
        )
        self.numbers = [int(e["name"].split("#")[1]) for e in steps]
        self.ranges = [(ns(e["ts"]), ns(e["ts"] + e["dur"])) for e in steps]
        self.pid, self.tid = steps[0]["pid"], steps[0]["tid"]
        gpu = [e for e in events if e.get("cat") in GPU_CATS]
        launch: dict[int, int] = {}
        for e in events:
            if e.get("cat") in LAUNCH_CATS and e["pid"] == self.pid:
                c = e["args"]["correlation"]
                launch[c] = min(launch.get(c, ns(e["ts"])), ns(e["ts"]))
        # the GPU work each step launched: its runtime call starts inside the step range (any
        # thread of the process); work whose call is not in the trace belongs to no step
        first, last = {}, {}
        for e in gpu:
            t = launch.get(e["args"].get("correlation"))
            if t is None:
                continue
            for k, (lo, hi) in enumerate(self.ranges):
                if lo <= t <= hi:
                    first[k] = min(first.get(k, ns(e["ts"])), ns(e["ts"]))
                    last[k] = max(last.get(k, 0), ns(e["ts"] + e["dur"]))
        n = len(self.ranges)
        # GPU step k: first GPU start of its work to the next step's; the last step as long as
        # its GPU work or its host range, whichever is longer
        self.gpu_steps = [first[k + 1] - first[k] for k in range(n - 1)]
        self.gpu_steps.append(max(last[n - 1] - first[n - 1], self.ranges[-1][1] - self.ranges[-1][0]))
        # the GPU's busy intervals, merged
        busy: list[list[int]] = []
        for s, e in sorted((ns(x["ts"]), ns(x["ts"] + x["dur"])) for x in gpu):
            if busy and s <= busy[-1][1]:
                busy[-1][1] = max(busy[-1][1], e)
            else:
                busy.append([s, e])
        self.busy = busy
        loaders = [
            (ns(e["ts"]), ns(e["ts"] + e["dur"]))
            for e in events
            if e.get("name") == LOADER and e["pid"] == self.pid and e["tid"] == self.tid
        ]
        self.loader = [0] * n
        self.loader_idle = [0] * n
        for s, e in loaders:
            k = next(k for k, (lo, hi) in enumerate(self.ranges) if lo <= s and e <= hi)
            self.loader[k] += e - s
            self.loader_idle[k] += self.idle(s, e)
        self.step_idle = [self.idle(lo, hi) for lo, hi in self.ranges]

    def idle(self, lo: int, hi: int) -> int:
        covered = sum(max(0, min(e, hi) - max(s, lo)) for s, e in self.busy)
        return hi - lo - covered


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    for path in (SLOW, FAST):
        if not path.exists():
            pytest.skip(f"capture not available: {path} (fixtures/captures/capture_busy.sh makes it)")
    return {"slow": Trace(SLOW), "fast": Trace(FAST)}


def moses(a: list[float], b: list[float]) -> tuple[float, float] | None:
    """The exact distribution-free 95% interval of B - A, by enumerating every split of the pooled
    ranks: the order statistics of the pairwise differences at the largest k with P(U <= k) <= 2.5%."""
    n, m = len(a), len(b)
    counts = [0] * (n * m + 1)
    for pos in itertools.combinations(range(n + m), n):  # positions of A in the joint order
        counts[sum(1 for p in pos for q in range(p + 1, n + m) if q not in pos)] += 1
    total, acc, k = math.comb(n + m, n), 0, -1
    for u, c in enumerate(counts):
        acc += c
        if acc / total <= 0.025 + 1e-12:
            k = u
    diffs = sorted(y - x for x in a for y in b)
    return None if k < 0 else (diffs[k], diffs[n * m - 1 - k])


# --- the pair, both ways -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ws(tmp_path_factory, traces):
    db = tmp_path_factory.mktemp("few") / "w.duckdb"
    with opened(db) as con:
        ids = {"slow": nsa.ingest(con, SLOW).report_id, "fast": nsa.ingest(con, FAST).report_id}
    return db, ids


@pytest.fixture(scope="module")
def diffs(ws) -> dict[str, Diff]:
    db, ids = ws
    with opened(db) as con:
        return {
            "faster": nsa.diff(con, ids["slow"], ids["fast"], with_findings=False),
            "slower": nsa.diff(con, ids["fast"], ids["slow"], with_findings=False),
        }


@pytest.mark.parametrize(("way", "before", "after"), [("faster", "slow", "fast"), ("slower", "fast", "slow")])
def test_six_steps_with_outliers_are_inconclusive(diffs, traces, way, before, after) -> None:
    d = diffs[way]
    a, b = traces[before], traces[after]
    # the GPU step times: the first active step's leftover warm-up work is no step's, the last
    # step holds its host time
    assert d.a.step_ns == pytest.approx(a.gpu_steps, abs=2)
    assert d.b.step_ns == pytest.approx(b.gpu_steps, abs=2)
    assert d.verdict == "inconclusive", d.reason
    assert d.comparable
    c = d.step_change
    assert c is not None and c.ci_ns is not None
    hl = statistics.median(y - x for x in a.gpu_steps for y in b.gpu_steps)
    assert c.estimate_ns == pytest.approx(hl, abs=2)
    lo, hi = moses(a.gpu_steps, b.gpu_steps)
    assert c.ci_ns == pytest.approx([lo, hi], abs=2)
    assert lo < 0 < hi
    # the median step moves by half or more: the change is large, the steps too spread to tell
    ma, mb = statistics.median(a.gpu_steps), statistics.median(b.gpu_steps)
    assert abs(mb - ma) > 0.5 * min(ma, mb)
    # Noether: (z.975 + z.8)^2 / (3 (P(B > A) - 1/2)^2) steps in all, half a side
    wins = sum((y > x) + 0.5 * (y == x) for x in a.gpu_steps for y in b.gpu_steps) / 36
    assert c.superiority == pytest.approx(wins)
    assert c.steps_needed == math.ceil((Z_975 + Z_80) ** 2 / (3 * (wins - 0.5) ** 2) / 2)
    assert (
        f"capture about {c.steps_needed} steady steps a side (`schedule(active={c.steps_needed})`)"
        in d.reason
    )
    outliers = sorted(b.gpu_steps if way == "faster" else a.gpu_steps)[-2:]
    said = " and ".join(table_dur(x).replace("µs", "us") for x in outliers)
    assert f"2 outlier steps in {'B' if way == 'faster' else 'A'} ({said}" in d.reason
    assert render_diff.headline(d).startswith("INCONCLUSIVE: GPU step time ")


@pytest.mark.parametrize(("way", "before", "after"), [("faster", "slow", "fast"), ("slower", "fast", "slow")])
def test_the_dataloader_is_what_moved(diffs, traces, way, before, after) -> None:
    d = diffs[way]
    a, b = traces[before], traces[after]
    att = d.attribution
    assert att is not None
    top = att.by_host_op[0]
    assert top.name == LOADER
    assert att.a_host_steps == a.numbers and att.b_host_steps == b.numbers
    assert top.a_steps_ns == pytest.approx(a.loader, abs=2)
    assert top.b_steps_ns == pytest.approx(b.loader, abs=2)
    drop = statistics.median(b.loader) - statistics.median(a.loader)  # about -78 ms per step (faster)
    assert top.delta_ns == pytest.approx(drop, abs=2)
    assert abs(drop) > 70e6 and (drop < 0) == (way == "faster")
    assert top.a_mean_ns == pytest.approx(statistics.fmean(a.loader), abs=2)
    assert top.b_mean_ns == pytest.approx(statistics.fmean(b.loader), abs=2)
    # the GPU idles under it: almost all of its time
    idle = statistics.median(b.loader_idle) - statistics.median(a.loader_idle)
    # (sums over hundreds of GPU intervals: each end rounded to the ns on ingest)
    assert top.idle_delta_ns == pytest.approx(idle, abs=1000)
    assert abs(idle) > 0.95 * abs(drop)
    assert att.a_host_idle_ns == pytest.approx(a.step_idle, abs=1000)
    assert att.b_host_idle_ns == pytest.approx(b.step_idle, abs=1000)
    words = " ".join(att.summary)
    assert f"most of it under {LOADER}" in words
    # the outlier batches: ProfilerStep#4 and #7 of the fast run
    slow_side = "B" if way == "faster" else "A"
    fast_trace = b if way == "faster" else a
    worst = sorted(range(6), key=lambda k: fast_trace.loader[k])[-2:]
    assert sorted(fast_trace.numbers[k] for k in worst) == [4, 7]
    assert f"In {slow_side}, {LOADER} takes" in words
    assert "the outlier steps weigh on the mean" in words


def test_the_gate_and_inconclusive(ws) -> None:
    """Inconclusive is no regression shown: the gate passes unless asked to fail when a
    regression beyond the threshold is not ruled out."""
    db, ids = ws
    slower = (str(ids["fast"]), str(ids["slow"]))
    default = run("diff", "--db", str(db), *slower, "--no-findings", "--fail-on-regression", "5")
    assert default.exit_code == EXIT_OK, default.output
    assert "gate passed: inconclusive: step time +" in default.stdout
    assert "one beyond +5% is not ruled out" in default.stdout
    strict = run(
        "diff", "--db", str(db), *slower, "--no-findings", "--fail-on-regression", "5", "--fail-on-inconclusive"
    )  # fmt: skip
    assert strict.exit_code == EXIT_FINDINGS, strict.output
    assert "gate FAILED: inconclusive" in strict.stdout
    faster = (str(ids["slow"]), str(ids["fast"]))
    # the faster side's interval reaches +133%: strict still fails at 5%, passes at 200%
    data = json.loads(run("diff", "--db", str(db), *faster, "--no-findings", "--format", "json").stdout)
    hi = data["step_change"]["ci_relative"][1] * 100
    assert 5 < hi < 200
    lenient = run(
        "diff", "--db", str(db), *faster, "--no-findings", "--fail-on-regression", "200", "--fail-on-inconclusive"
    )  # fmt: skip
    assert lenient.exit_code == EXIT_OK, lenient.output
    assert "a regression beyond +200% is ruled out" in lenient.stdout
    alone = run("diff", "--db", str(db), *faster, "--fail-on-inconclusive")
    assert alone.exit_code == EXIT_ERROR
    assert "--fail-on-regression" in alone.stderr


def test_renderings(diffs) -> None:
    d = diffs["faster"]
    text = render_diff.to_text(d)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "by host op (medians per step)" in text
    md = render_diff.to_markdown(d)
    assert "| host op | A (median) | B (median) | change |" in md
    back = Diff.from_dict(json.loads(render_diff.to_json(d)))
    assert back == d
    html = "".join(diff_sections(d.to_dict()))
    assert 'data-verdict="inconclusive"' in html and "attribution_by_host_op" in html


# --- the statistic's new parts ---------------------------------------------------------------


def test_steps_needed_to_bound_a_small_change() -> None:
    """A shift under the floor with a wide interval: enough steps to fit the interval between it
    and the floor, from the pooled spread and the Hodges-Lehmann estimate's pi/3 variance."""
    a = [10.0, 11.0, 9.0, 10.5, 9.5, 10.2]
    b = [10.1, 10.9, 9.2, 10.4, 9.8, 10.0]
    s = stats.shift(a, b)
    floor = 0.2  # 2% of a 10 ms step
    assert abs(s.estimate) < floor
    sigma = math.sqrt((statistics.variance(a) + statistics.variance(b)) / 2)
    target = max(floor - abs(s.estimate), floor / 2)
    expected = math.ceil(2 * math.pi / 3 * (Z_975 * sigma / target) ** 2)
    assert stats.steps_needed(a, b, s, floor) == expected
    assert stats.slow_outliers([10, 11, 10.5, 30, 9.8]) == [3]
    assert stats.slow_outliers(a) == []
