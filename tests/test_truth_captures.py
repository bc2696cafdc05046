"""Diagnoses on programs captured for these tests (tests/data/README.md): a CUDA-graph decode
loop, torch.compile(mode="reduce-overhead"), and a loop before and after removing its per-step
host readback. Expected numbers come from plain SQL on the exports."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest

import nsight_analytics as nsa
from rows import union_within

DATA = Path(__file__).resolve().parent / "data"
ACTIVITY = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """capture(name) -> (sqlite3 connection on the export, its path), unpacked once."""
    folder = tmp_path_factory.mktemp("captures")

    def get(name: str) -> tuple[sqlite3.Connection, Path]:
        out = folder / f"{name}.sqlite"
        if not out.exists():
            with gzip.open(DATA / f"{name}.sqlite.gz") as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        return sqlite3.connect(f"file:{out}?mode=ro", uri=True), out

    return get


def _steady(db: sqlite3.Connection, prefix: str) -> tuple[int, int, float]:
    """(steady start, steady steps, steady idle share) by plain SQL and Python: steps are the NVTX
    ranges `prefix N`; warm-up is every step before the first one no longer than 1.5x the median;
    the steady state runs from there to the last GPU activity."""
    rows = sorted(
        (int(t[len(prefix) :]), a, b)
        for t, a, b in db.execute('SELECT text, start, "end" FROM NVTX_EVENTS WHERE eventType = 59')
        if t and t.startswith(prefix) and t[len(prefix) :].isdigit()
    )
    durations = sorted(b - a for _, a, b in rows)
    n = len(durations)
    median = durations[n // 2] if n % 2 else (durations[n // 2 - 1] + durations[n // 2]) / 2
    first = next(i for i, (_, a, b) in enumerate(rows) if b - a <= 1.5 * median)
    start = rows[first][1]
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    acts = [r for t in ACTIVITY if t in have for r in db.execute(f'SELECT start, "end" FROM {t}')]
    end = max(e for _, e in acts)
    busy = union_within([(max(s, start), e) for s, e in acts if e > start])
    return start, n - first, 1 - busy / (end - start)


def _findings(path: Path, tmp_path: Path) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path).report_id
    found = {f.rule_id: f for f in nsa.api.findings(con, rid)}
    graphs = nsa.query(con, "graph_launches", report_id=rid).fetchall()
    con.close()
    return {"findings": found, "graphs": graphs}


def test_cuda_graph_decode_loop(capture, tmp_path: Path) -> None:
    db, path = capture("h100_nsys2025.3_decode_cudagraph")
    replays = db.execute(
        'SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE'
    ).fetchone()
    assert replays[0] == 60
    start, steps, idle = _steady(db, "decode_step ")
    assert steps == 59 and idle > 0.5  # the host round trip per token, not the graph, sets the pace
    got = _findings(path, tmp_path)
    assert [(g[2], g[3], g[5]) for g in got["graphs"]] == [("graph", 60, replays[1])]
    f = got["findings"]["gpu-idle"]
    assert f.severity == "critical"
    assert f.evidence["steady_start_ns"] == start
    assert f.evidence["idle_share"] == pytest.approx(idle)
    assert "in a CUDA graph so one launch" not in f.recommendation
    assert "already replays CUDA graphs" in f.recommendation


def test_torch_compile_reduce_overhead(capture, tmp_path: Path) -> None:
    db, path = capture("h100_nsys2025.3_compile_reduce_overhead")
    replays = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchone()[0]
    start, _, idle = _steady(db, "step ")
    got = _findings(path, tmp_path)
    assert sum(g[3] for g in got["graphs"]) == replays > 30
    f = got["findings"]["gpu-idle"]
    assert f.evidence["steady_start_ns"] == start
    assert f.evidence["idle_share"] == pytest.approx(idle)
    assert got["findings"]["startup"].evidence["steady_start_ns"] == start  # compilation is start-up


def test_loop_before_and_after_removing_its_host_readback(capture, tmp_path: Path) -> None:
    db, path = capture("h100_nsys2025.3_sync_loop_before")
    _, _, idle_before = _steady(db, "step ")
    sleeps = db.execute(
        "SELECT count(*) FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId WHERE s.value LIKE '%nanosleep' "
        'AND o."end" - o.start >= 5000000'
    ).fetchone()[0]
    assert sleeps >= 30  # a 5 ms sleep in each of the 30 steps
    before = _findings(path, tmp_path / "before")
    f = before["findings"]["gpu-idle"]
    assert f.evidence["idle_share"] == pytest.approx(idle_before)
    assert f.evidence["dominant_cause"] == "host_wait" and "sleep" in f.evidence["dominant_detail"]
    db, path = capture("h100_nsys2025.3_sync_loop_after")
    _, _, idle_after = _steady(db, "step ")
    assert idle_after < 0.2 < idle_before
    after = _findings(path, tmp_path / "after")
    assert "gpu-idle" not in after["findings"]
