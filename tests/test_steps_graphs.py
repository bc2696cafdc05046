"""Steps from CUDA graph replays (schema `steps`, source 'graphs'), and which source wins when a
report has several: NVTX / ProfilerStep ranges, then graph launches, then the kernel pattern.

Expected steps come from the exports themselves: the launch calls read with sqlite3, the
ProfilerStep events read from the Kineto JSON."""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
import sqlite3
import statistics
from pathlib import Path
from typing import Any

import pytest

import nsight_analytics as nsa
from conftest import realdata
from fixtures.nsys_fixtures import ExportBuilder
from rows import union_within

DATA = Path(__file__).resolve().parent / "data"
GRAPH_LOOP = DATA / "busy" / "nsys" / "h100_nsys2025.3_graph_loop_sleep.sqlite.gz"
ACTIVITY = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
)
MS = 1_000_000


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """export(path) -> (sqlite3 connection on the export, a plain SQLite path), unpacked once."""
    folder = tmp_path_factory.mktemp("graph_exports")

    def get(path: Path) -> tuple[sqlite3.Connection, Path]:
        if not path.exists():
            pytest.skip(f"capture not available: {path}")
        plain = path
        if path.suffix == ".gz":
            plain = folder / path.stem
            if not plain.exists():
                with gzip.open(path) as src, plain.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
        return sqlite3.connect(f"file:{plain}?mode=ro", uri=True), plain

    return get


def _steps(path: Path, tmp_path: Path) -> tuple[Any, int, list[tuple[Any, ...]]]:
    con = nsa.connect(tmp_path / f"{path.stem}.duckdb")
    rid = nsa.ingest(con, path).report_id
    nsa.query(con, "gaps", report_id=rid)  # the steps are found on first use
    rows = con.execute(
        "SELECT source, series, pid, device_id, step, name, start_ns, end_ns, steady FROM steps "
        "WHERE report_id = ? ORDER BY series, step",
        [rid],
    ).fetchall()
    return con, rid, rows


def _launches(db: sqlite3.Connection) -> list[tuple[int, int, int, int]]:
    """(start, end, globalTid, correlationId) of every cudaGraphLaunch, in time order."""
    return db.execute(
        'SELECT r.start, r."end", r.globalTid, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r '
        "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaGraphLaunch%' ORDER BY r.start"
    ).fetchall()


def _gpu_rows(db: sqlite3.Connection) -> list[tuple[int, int]]:
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [r for t in ACTIVITY if t in have for r in db.execute(f'SELECT start, "end" FROM {t}')]


def _expected(starts: list[int], gpu_end: int) -> list[tuple[int, int]]:
    """Launch i to launch i + 1; the last one the median period, at most to the end of the GPU work."""
    period = statistics.median(b - a for a, b in itertools.pairwise(starts))
    ends = [*starts[1:], min(int(starts[-1] + period), gpu_end)]
    return list(zip(starts, ends))


def _first_steady(spans: list[tuple[int, int]]) -> int:
    """Warm-up: every step before the first one no longer than 1.5x the median step."""
    med = statistics.median(e - s for s, e in spans)
    return next(i for i, (s, e) in enumerate(spans) if e - s <= 1.5 * med)


# --- real captures ------------------------------------------------------------------------------


def test_graph_loop_without_nvtx_gets_a_step_per_replay(export, tmp_path: Path) -> None:
    # 60 replays of one graph, no NVTX: each cudaGraphLaunch starts a step
    db, plain = export(GRAPH_LOOP)
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone()[0] == 0
    launches = _launches(db)
    assert len(launches) == 60 and len({tid for _, _, tid, _ in launches}) == 1
    execs = db.execute("SELECT DISTINCT graphExecId FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchall()
    assert execs == [(2,)]
    gpu = _gpu_rows(db)
    gpu_end = max(e for _, e in gpu)
    spans = _expected([s for s, _, _, _ in launches], gpu_end)
    first = _first_steady(spans)
    assert first == 1  # the first replay waits on lazy module loading: 52 ms

    con, rid, rows = _steps(plain, tmp_path)
    assert {r[0] for r in rows} == {"graphs"}
    assert {(r[1], r[2], r[3]) for r in rows} == {(launches[0][2], launches[0][2] >> 24 & 0xFFFFFF, None)}
    assert [(r[6], r[7]) for r in rows] == spans
    assert [r[8] for r in rows] == [False] * first + [True] * (len(spans) - first)
    assert rows[0][5] == "cudaGraphLaunch (graph exec 2)"
    window = con.execute("SELECT start_ns, steps, steady_steps, source FROM nsa_steady(?)", [rid]).fetchone()
    assert window == (spans[first][0], 60, 59, "graphs")

    # gpu-idle judges the loop, not the start-up: its window is the steady span and its
    # idle time the idle time in it, by a union of the export's GPU rows
    span = gpu_end - spans[first][0]
    idle = span - union_within(gpu, spans[first][0], gpu_end)
    (f,) = [f for f in nsa.findings(con, rid) if f.rule_id == "gpu-idle"]
    assert f.evidence["steady_start_ns"] == spans[first][0]
    assert f.evidence["span_ns"] == span
    assert f.evidence["idle_ns"] == idle
    assert f.est_savings_ns is not None and f.est_savings_ns <= idle
    # the host sleeps ~2 ms a step on the launching thread: most of the idle time
    sleeps = db.execute(
        'SELECT o.start, o."end" FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId '
        "WHERE o.globalTid = ? AND s.value = 'clock_nanosleep'",
        [launches[0][2]],
    ).fetchall()
    slept = sum(max(0, min(e, gpu_end) - max(s, spans[first][0])) for s, e in sleeps)
    assert slept > 0.8 * idle
    assert f.est_savings_ns >= 0.9 * slept
    con.close()


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("h100_nsys2025.3_decode_cudagraph", "decode_step "),
        ("h100_nsys2025.3_compile_reduce_overhead", "step "),
    ],
)
def test_nvtx_steps_win_over_graph_replays(export, tmp_path: Path, name: str, family: str) -> None:
    # both programs replay a CUDA graph every step AND mark their steps with NVTX: the ranges win
    db, plain = export(DATA / f"{name}.sqlite.gz")
    assert len(_launches(db)) >= 39
    ranges = db.execute(
        'SELECT start, "end" FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE ? ORDER BY start',
        [family + "%"],
    ).fetchall()
    ranges = [(s, e) for s, e in ranges if e is not None]
    con, _, rows = _steps(plain, tmp_path)
    assert {r[0] for r in rows} == {"nvtx"}
    assert all(r[5].startswith(family) for r in rows)
    assert [(r[6], r[7]) for r in rows] == ranges
    con.close()


@pytest.mark.parametrize(
    "name", ["h100_nsys2025.3_storm_cudagraph.sqlite", "h100_nsys2025.3_storm_cudagraph_nodes.sqlite.gz"]
)
def test_a_graph_replayed_once_is_not_a_loop(export, tmp_path: Path, name: str) -> None:
    db, plain = export(realdata("nsys", name))
    assert len(_launches(db)) == 1
    con, _, rows = _steps(plain, tmp_path)
    assert "graphs" not in {r[0] for r in rows}
    con.close()


@pytest.mark.parametrize("rank", [0, 2])
def test_kineto_profiler_steps_are_steps(tmp_path: Path, rank: int) -> None:
    # torch.profiler's ProfilerStep#N ranges (host side; the trace repeats them on the GPU as
    # gpu_user_annotation) are the step family of a Kineto trace
    path = DATA / "ddp" / "kineto" / "ddp_w4_slow2" / f"rank{rank}.json.gz"
    if not path.exists():
        pytest.skip(f"capture not available: {path}")
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    marks = sorted(
        (e["ts"], e["dur"], e["name"])
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    assert len(marks) >= 3
    con, _, rows = _steps(path, tmp_path)
    assert {r[0] for r in rows} == {"nvtx"}
    assert [r[5] for r in rows] == [m[2] for m in marks]
    assert [r[7] - r[6] for r in rows] == [pytest.approx(m[1] * 1000, abs=1) for m in marks]
    assert [r[6] - rows[0][6] for r in rows] == [
        pytest.approx((m[0] - marks[0][0]) * 1000, abs=1) for m in marks
    ]
    con.close()


# --- exports built by code ----------------------------------------------------------------------


def _graph_replay(
    b: ExportBuilder, h: int, g: int, *, gtid: int, nodes: int, graph: int, node_trace: bool
) -> tuple[int, int, int]:
    """One cudaGraphLaunch at host time h and its work on the GPU after g: with the node trace,
    `nodes` kernels carrying graph node ids (graph << 32) + j; else one graph-trace row.
    Returns (launch start, host time after the call, GPU end)."""
    if not node_trace:
        end_h, end_g = b.graph_launch(h, max(g, h + 10_000), nodes * 200_000, gtid=gtid, graph=graph)
        return h, end_h, end_g
    corr = b.api(h, h + 8_000, "cudaGraphLaunch_v10000", gtid)
    t = max(g, h + 10_000)
    for j in range(nodes):
        row = b.kernel(t, t + 200_000, f"void node_{j}(float*)", corr=corr, gpid=gtid & ~0xFFFFFF)
        row["graphNodeId"] = (graph << 32) + j
        t += 201_000
    return h, h + 8_000, t


def _graph_program(path: Path, *, node_trace: bool, replays: int = 30, profiler_steps: bool = False,
                   eager_after_ms: int = 0, side_graph: bool = False) -> dict[str, Any]:  # fmt: skip
    """A decode loop: start-up (eager kernels and 3 replays of a warm-up graph), then `replays`
    replays of the loop graph, each followed by a sampling kernel and ~1 ms of host work; optionally
    a second graph replayed every other step, ProfilerStep#N NVTX ranges around each step and eager
    work after the loop."""
    b = ExportBuilder()
    gtid = b.process(5100, "python3")
    b.gpu(0)
    h = g = 50 * MS
    for i in range(8):
        h, g = b.launch_kernel(h + 5_000, max(g, h + 9_000), 300_000, f"void init_{i}(float*)", gtid=gtid)
    for _ in range(3):  # the warm-up graph: fewer replays than the loop's
        _, h, g = _graph_replay(b, h + 200_000, g, gtid=gtid, nodes=2, graph=7, node_trace=node_trace)
    h += 5 * MS
    starts = []
    for i in range(replays):
        step_start = h
        start, h, g = _graph_replay(b, h + 2_000, g, gtid=gtid, nodes=6, graph=3, node_trace=node_trace)
        starts.append(start)
        h, g = b.launch_kernel(h + 2_000, max(g, h + 6_000), 20_000, "void sample(float*)", gtid=gtid)
        if side_graph and i % 2 == 0:  # every other step: a second graph, replayed half as often
            _, h, g = _graph_replay(b, h + 2_000, g, gtid=gtid, nodes=3, graph=9, node_trace=node_trace)
        h = max(h, g) + 1 * MS + 100_000 * (i % 3)  # reads the sample back, then host work
        if profiler_steps:
            b.nvtx(step_start, h - 1_000, f"ProfilerStep#{i}", gtid=gtid)
    for i in range(eager_after_ms // 10):  # distinct kernels: no repeating pattern
        h, g = b.launch_kernel(h + 5_000, max(g, h + 9_000), 10 * MS, f"void eager_{i}(float*)", gtid=gtid)
    b.write(path)
    gpu_end = max(r["end"] for t in ACTIVITY for r in b.rows.get(t, []))
    return {"starts": starts, "gpu_end": gpu_end, "gtid": gtid}


@pytest.mark.parametrize("side_graph", [False, True], ids=["one_graph", "two_graphs"])
@pytest.mark.parametrize("node_trace", [False, True], ids=["graph_trace", "node_trace"])
def test_the_most_replayed_graph_gives_the_steps(tmp_path: Path, node_trace: bool, side_graph: bool) -> None:
    # the loop graph (30 replays), not the warm-up graph (3 replays) nor one replayed every other
    # step (15); with the node trace a graph is known by its kernels' node ids (no graph-trace rows)
    path = tmp_path / "loop.sqlite"
    a = _graph_program(path, node_trace=node_trace, side_graph=side_graph)
    con, rid, rows = _steps(path, tmp_path)
    graph_rows = con.execute("SELECT count(*) FROM graph_executions").fetchone()[0]
    assert graph_rows == (0 if node_trace else 33 + 15 * side_graph)
    assert {r[0] for r in rows} == {"graphs"}
    assert {r[1] for r in rows} == {a["gtid"]}
    assert [(r[6], r[7]) for r in rows] == _expected(a["starts"], a["gpu_end"])
    assert {r[5] for r in rows} == {
        "cudaGraphLaunch (graph of 6 kernels)" if node_trace else "cudaGraphLaunch (graph exec 4)"
    }
    assert all(r[8] for r in rows)  # no warm-up inside the loop: it starts steady
    assert con.execute("SELECT start_ns FROM nsa_steady(?)", [rid]).fetchone()[0] == a["starts"][0]
    con.close()


def test_profiler_step_ranges_win_over_graph_replays(tmp_path: Path) -> None:
    path = tmp_path / "profiled.sqlite"
    _graph_program(path, node_trace=False, profiler_steps=True)
    db = sqlite3.connect(path)
    ranges = db.execute('SELECT text, start, "end" FROM NVTX_EVENTS ORDER BY start').fetchall()
    con, _, rows = _steps(path, tmp_path)
    assert {r[0] for r in rows} == {"nvtx"}
    assert [(r[5], r[6], r[7]) for r in rows] == ranges
    con.close()


@pytest.mark.parametrize(("replays", "graph_steps"), [(2, False), (3, True)])
def test_a_loop_takes_three_replays(tmp_path: Path, replays: int, graph_steps: bool) -> None:
    path = tmp_path / "short.sqlite"
    a = _graph_program(path, node_trace=False, replays=replays)
    con, _, rows = _steps(path, tmp_path)
    got = [(r[6], r[7]) for r in rows if r[0] == "graphs"]
    # with 2 replays of the loop graph, only the warm-up graph's 3 make a loop, and it holds a
    # corner of the GPU time after it: no graph steps. With 3, the two graphs tie and the loop
    # graph's replays are the ones that hold the GPU time
    assert got == (_expected(a["starts"], a["gpu_end"]) if graph_steps else [])
    con.close()


def test_replays_in_a_corner_are_not_the_programs_steps(tmp_path: Path) -> None:
    # 30 replays (~40 ms of GPU work), then 300 ms of eager kernels: the replays are a phase
    path = tmp_path / "corner.sqlite"
    _graph_program(path, node_trace=False, eager_after_ms=300)
    con, _, rows = _steps(path, tmp_path)
    assert "graphs" not in {r[0] for r in rows}
    con.close()


def test_kineto_graph_replays_without_profiler_steps(tmp_path: Path) -> None:
    # a Kineto trace names no graph: a launch is known by the kernels it ran (same correlation)
    ev: list[dict[str, Any]] = []
    starts = []
    t = 100.0
    for i in range(12):
        corr = 1000 + i
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 9, "tid": 9, "ts": t,
                   "dur": 6.0, "args": {"correlation": corr}})  # fmt: skip
        starts.append(t)
        for j in range(4):
            ev.append({"ph": "X", "cat": "kernel", "name": f"void graph_node_{j}(float*)", "pid": 0, "tid": 7,
                       "ts": t + 10 + 50 * j, "dur": 40.0,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})  # fmt: skip
        t += 1000.0 + 10 * (i % 2)
    gpu_end = max(e["ts"] + e["dur"] for e in ev if e["cat"] == "kernel")
    path = tmp_path / "graphs.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    con, _, rows = _steps(path, tmp_path)
    assert {r[0] for r in rows} == {"graphs"}
    first = min(e["ts"] for e in ev)
    ns = [round((s - first) * 1000) for s in starts]
    assert [(r[6], r[7]) for r in rows] == _expected(ns, round((gpu_end - first) * 1000))
    assert {r[5] for r in rows} == {"cudaGraphLaunch (graph of 4 kernels)"}
    con.close()
