"""No saving exceeds the window it was judged on, and no saving counts start-up time.

Every real nsys and Kineto capture (../shared/realdata, tests/data, tests/data/busy) is ingested
into a workspace of its own and its findings computed; the data-parallel job of tests/data/ddp
(world 4, one rank slowed) is ingested as one run so the run rules judge it too. For every
finding with an `est_savings_ns`:

- the saving fits in the window: from the first steady step (nsa_steady, when the report has
  steps) or the first GPU activity (when it has none) to the device's last GPU activity, the
  largest device (an Nsight Compute report, which has no timeline: its profiled kernels' time);
- it fits in what the rule says it saves, measured in that window only: the GPU idle time
  (gpu-idle, small-kernel-storm), the copy time (copy-dominated), the pageable copy time
  (pageable-memcpy), the time the named process blocked in synchronising calls while its GPUs
  were idle (host-sync). A rule that counted start-up time would exceed them wherever start-up
  holds enough of it;
- on a report with steps, it says it judged the steady state (evidence `steady_start_ns` =
  the first steady step's start).

The windows and the bounds are computed here with plain SQL on the canonical rows and interval
arithmetic in Python; the GPU span of each report is checked against the export itself (sqlite3
on the nsys file, JSON arithmetic on the Kineto trace) so the windows are the capture's.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import nsight_analytics as nsa
from conftest import REALDATA
from nsight_analytics import api
from nsight_analytics.rules.model import Finding
from rows import gunzipped_sqlite

DATA = Path(__file__).resolve().parent / "data"


def _real(pattern: str) -> list[Any]:
    if not REALDATA.is_dir():
        reason = f"real data not available: {REALDATA} (tests expect ../shared/realdata beside the repo)"
        return [pytest.param(None, id=f"realdata-{pattern}", marks=pytest.mark.skip(reason=reason))]
    return sorted(REALDATA.glob(pattern))


FILES = [
    *_real("nsys/*.sqlite*"),
    *_real("kineto/*.json*"),
    *sorted(DATA.glob("*.sqlite*")),
    *sorted(DATA.glob("kineto/*.json*")),
    *sorted(DATA.glob("busy/*/*.sqlite*")),
    *sorted(DATA.glob("busy/*/*.json*")),
    # the CSV exports of the busy ncu report (its .ncu-rep holds the same kernels and takes 18 s)
    *sorted(DATA.glob("busy/ncu/*.csv*")),
]
RUN = sorted(DATA.glob("ddp/nsys/h200x4_nsys2025.3_ddp_w4_slow2_rank*.sqlite.gz"))
NSYS_ACTIVITY = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
)
KINETO_GPU = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
# The synchronising CUDA calls: device/stream/event/context synchronise, and synchronous copies
# and memsets (no Async in the name).
SYNC = re.compile(r"^(cu|cuda|hip)(Device|Thread|Ctx|Stream|Event)Synchronize(_ptsz)?(_v\d+)?$")
SYNC_COPY = re.compile(r"^(cu|cuda|hip)(Memcpy|Memset)")


class Covered:
    """The union of intervals, merged once; covered(a, b) is its length inside [a, b)."""

    def __init__(self, intervals: list[tuple[int, int]]) -> None:
        merged: list[list[int]] = []
        for s, e in sorted(intervals):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self.starts = [s for s, _ in merged]
        self.ends = [e for _, e in merged]
        self.before = [0]
        for s, e in merged:
            self.before.append(self.before[-1] + e - s)

    def _upto(self, t: int) -> int:
        i = bisect.bisect_right(self.starts, t)
        if i == 0:
            return 0
        return self.before[i - 1] + min(t, self.ends[i - 1]) - self.starts[i - 1]

    def covered(self, a: int, b: int) -> int:
        return max(0, self._upto(b) - self._upto(a)) if b > a else 0


@dataclass
class Window:
    """One report's judged window per device, and what the rules may save inside it."""

    steady_ns: int | None  # the first steady step's start; None without steps
    span: dict[Any, tuple[int, int]] = field(default_factory=dict)  # device -> (start, end)
    idle: dict[Any, int] = field(default_factory=dict)
    copy: dict[Any, int] = field(default_factory=dict)
    pageable: dict[Any, int] = field(default_factory=dict)
    sync_idle: dict[Any, int] = field(default_factory=dict)  # pid -> blocked while its GPUs idled
    first_ns: int | None = None  # the report's first and last GPU activity
    last_ns: int | None = None
    ncu_ns: int = 0  # an Nsight Compute report (no timeline): the profiled kernels' time

    @property
    def length(self) -> int:
        return max((e - s for s, e in self.span.values()), default=self.ncu_ns)

    @property
    def scope(self) -> str:
        if not self.span:
            return "profiled kernel time"
        return "steady state" if self.steady_ns is not None else "GPU span"


def _clipped(rows: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in rows if e > lo and s < hi]


def _window(con: Any, rid: int) -> Window:
    steady = con.execute("SELECT start_ns FROM nsa_steady(?)", [rid]).fetchone()
    w = Window(steady[0] if steady else None)
    rows = con.execute(
        """
        SELECT device_id, pid, start_ns, end_ns, 'kernel', false FROM kernel_rows WHERE report_id = $rid
        UNION ALL SELECT device_id, pid, start_ns, end_ns, 'graph', false FROM graph_executions WHERE report_id = $rid
        UNION ALL SELECT device_id, pid, start_ns, end_ns, 'memset', false FROM memset WHERE report_id = $rid
        UNION ALL SELECT device_id, pid, start_ns, end_ns, 'memcpy',
                         coalesce(src_memory = 'pageable' OR dst_memory = 'pageable', false)
                  FROM memcpy WHERE report_id = $rid
        """,
        {"rid": rid},
    ).fetchall()
    rows = [r for r in rows if r[2] is not None and r[3] is not None and r[3] >= r[2]]
    if not rows:
        # each launch's duration, times the launches a --print-summary row stands for
        w.ncu_ns = int(
            con.execute(
                "SELECT coalesce(sum(m.value * coalesce(k.invocations, 1)), 0) FROM ncu_metrics AS m "
                "JOIN ncu_kernels AS k USING (report_id, launch_id) "
                "WHERE m.report_id = ? AND m.metric_name = 'gpu__time_duration.sum'",
                [rid],
            ).fetchone()[0]
        )
        return w
    w.first_ns, w.last_ns = min(r[2] for r in rows), max(r[3] for r in rows)
    by_dev: dict[Any, list[tuple[Any, ...]]] = defaultdict(list)
    for r in rows:
        by_dev[r[0]].append(r)
    for dev, acts in by_dev.items():
        end = max(r[3] for r in acts)
        start = min(r[2] for r in acts) if w.steady_ns is None else min(w.steady_ns, end)
        w.span[dev] = (start, end)
        busy = Covered([(r[2], r[3]) for r in acts])
        w.idle[dev] = (end - start) - busy.covered(start, end)
        copies = [(r[2], r[3]) for r in acts if r[4] == "memcpy"]
        w.copy[dev] = sum(e - s for s, e in _clipped(copies, start, end))
        pageable = [(r[2], r[3]) for r in acts if r[4] == "memcpy" and r[5]]
        w.pageable[dev] = sum(e - s for s, e in _clipped(pageable, start, end))
    devices_of: dict[Any, set[Any]] = defaultdict(set)
    for r in rows:
        devices_of[r[1]].add(r[0])
    w.sync_idle = _sync_idle(con, rid, w, by_dev, devices_of)
    return w


def _sync_idle(
    con: Any, rid: int, w: Window, by_dev: dict[Any, list[tuple[Any, ...]]], devices_of: dict[Any, set[Any]]
) -> dict[Any, int]:
    """Per process: its synchronising calls' time in the window while none of its GPUs was busy
    (a call's idle part: its length less the most any of the process's GPUs was busy in it)."""
    if not con.execute("SELECT count(*) FROM cuda_api WHERE report_id = ?", [rid]).fetchone()[0]:
        return {}
    busy = {dev: Covered([(r[2], r[3]) for r in acts]) for dev, acts in by_dev.items()}
    out: dict[Any, int] = defaultdict(int)
    calls = con.execute(
        "SELECT pid, name, start_ns, end_ns FROM cuda_api WHERE report_id = ? AND end_ns IS NOT NULL", [rid]
    ).fetchall()
    lo = w.steady_ns if w.steady_ns is not None else -(2**62)
    for pid, name, s, e in calls:
        base = re.sub(r"_v\d+$", "", name or "")
        if not (SYNC.match(name or "") or (SYNC_COPY.match(base) and "Async" not in base)):
            continue
        s = max(s, lo)
        if e <= s:
            continue
        held = max((busy[d].covered(s, e) for d in devices_of.get(pid, ())), default=0)
        out[pid] += (e - s) - held
    return dict(out)


def _export_span(path: Path, tmp: Path) -> tuple[int, int] | None:
    """The first start and last end of GPU activity, read from the export itself (nsys: sqlite3;
    Kineto: the JSON events, as (0, length) since the workspace's clock starts elsewhere)."""
    name = path.name
    if ".sqlite" in name:
        db = gunzipped_sqlite(path, tmp) if name.endswith(".gz") else sqlite3.connect(path)
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        got = [
            db.execute(f'SELECT min(start), max("end") FROM {t}').fetchone()
            for t in NSYS_ACTIVITY
            if t in have
        ]
        db.close()
        got = [g for g in got if g[0] is not None]
        return (min(g[0] for g in got), max(g[1] for g in got)) if got else None
    if ".json" in name:
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt") as f:
            events = json.load(f, parse_float=Decimal)["traceEvents"]
        gpu = [
            (Decimal(str(e["ts"])), Decimal(str(e.get("dur", 0))))
            for e in events
            if isinstance(e, dict) and e.get("ph") == "X" and str(e.get("cat", "")).lower() in KINETO_GPU
        ]
        if not gpu:
            return None
        return 0, int(max(t + d for t, d in gpu) * 1000 - min(t for t, _ in gpu) * 1000)
    return None


@dataclass
class Judged:
    findings: list[Any]
    windows: dict[int, Window]
    spans: dict[int, tuple[int, int] | None]  # report -> span read from its export


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """judged(key, paths) -> Judged: the paths ingested into one workspace (a run when several),
    their findings and windows; computed once per module."""
    cache: dict[str, Judged] = {}
    folder = tmp_path_factory.mktemp("savings_window")

    def get(key: str, paths: list[Path]) -> Judged:
        if key not in cache:
            con = nsa.connect(folder / f"{len(cache)}.duckdb")
            try:
                ids = {nsa.ingest(con, p).report_id: p for p in paths}
                if len(ids) > 1:
                    found = nsa.findings(con, run=nsa.make_run(con, list(ids), "job"))
                else:
                    found = nsa.findings(con, next(iter(ids)))
                api.materialise(con, ["cuda_api", "steps"])
                cache[key] = Judged(
                    found,
                    {rid: _window(con, rid) for rid in ids},
                    {rid: _export_span(p, folder) for rid, p in ids.items()},
                )
            finally:
                con.close()
        return cache[key]

    return get


def _bound(f: Any, w: Window) -> tuple[str, int] | None:
    """What the rule's saving is made of, in the window: (what, ns), or None when this test has
    no measure of it beyond the window itself."""
    if f.rule_id in ("gpu-idle", "small-kernel-storm"):
        return "GPU idle time in the window (largest device)", max(w.idle.values(), default=0)
    if f.rule_id == "copy-dominated":
        return "copy time in the window (largest device)", max(w.copy.values(), default=0)
    if f.rule_id == "pageable-memcpy":
        return "pageable copy time in the window (largest device)", max(w.pageable.values(), default=0)
    if f.rule_id == "host-sync":
        pid = f.evidence.get("pid")
        return f"process {pid}'s synchronising calls while its GPUs idled, in the window", w.sync_idle.get(
            pid, 0
        )
    return None


def _violations(j: Judged) -> list[str]:
    bad = []
    for f in j.findings:
        if f.est_savings_ns is None:
            continue
        save = int(f.est_savings_ns)
        w = j.windows.get(f.report_id)
        where = f"{f.rule_id} (report {f.report_id}): saving {save / 1e6:.3f} ms"
        if w is None:
            bad.append(f"{where} names a report outside the workspace")
            continue
        if save < 0:
            bad.append(f"{where} is negative")
        if w.length <= 0 or save > w.length:
            bad.append(f"{where} > the {w.length / 1e6:.3f} ms {w.scope} it was judged on")
        bound = _bound(f, w)
        if bound is not None and save > bound[1]:
            bad.append(f"{where} > {bound[0]}: {bound[1] / 1e6:.3f} ms")
        if w.steady_ns is not None and f.run_id is None and f.evidence.get("steady_start_ns") != w.steady_ns:
            bad.append(
                f"{where} on a report with steps: judged from {f.evidence.get('steady_start_ns')}, "
                f"not the steady state's start {w.steady_ns}"
            )
    return bad


def _check_spans(j: Judged) -> None:
    for rid, span in j.spans.items():
        w = j.windows[rid]
        if span is None:
            assert w.first_ns is None
        elif span[0] == 0:  # Kineto: a length
            assert w.last_ns - w.first_ns == pytest.approx(span[1], abs=2)
        else:
            assert (w.first_ns, w.last_ns) == span


@pytest.mark.one_python  # a heavy sweep of real captures; lighter cases cover its code on every Python
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if isinstance(p, Path) else str(p))
def test_savings_fit_their_window(judged, path: Path) -> None:
    j = judged(str(path), [path])
    _check_spans(j)
    assert _violations(j) == []


def test_run_rule_savings_fit_their_window(judged) -> None:
    if len(RUN) != 4:
        pytest.skip(f"capture not available: {DATA / 'ddp' / 'nsys'}")
    j = judged("ddp_w4_slow2", RUN)
    _check_spans(j)
    assert any(f.run_id is not None and f.est_savings_ns for f in j.findings)  # the run rules spoke
    assert _violations(j) == []


def test_a_saving_over_start_up_is_caught() -> None:
    # the check itself: a saving that counts idle time before the first steady step exceeds the
    # idle time of the steady window, and a finding judged over the whole run says so
    w = Window(steady_ns=100, span={0: (100, 1_000)}, idle={0: 300})
    f = Finding("gpu-idle", "warning", 1, "t", "m", "r", {"steady_start_ns": 0}, est_savings_ns=400)
    bad = _violations(Judged([f], {1: w}, {1: None}))
    assert len(bad) == 2
    assert "GPU idle time in the window" in bad[0] and "not the steady state's start 100" in bad[1]
