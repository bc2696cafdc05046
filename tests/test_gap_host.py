"""What the host did while the GPU idled (query gap_host) and how gpu-idle leads with it, on real
captures (tests/data/README.md): the graph-replay loop that sleeps, the DataLoader-bound ResNet
traced by the PyTorch profiler, the C++ MPI loop, the loop with a per-step sleep, the idle-gaps
program, and CloverLeaf (C++, ../shared/realdata). Expected numbers come from plain SQL on the
exports and JSON arithmetic on the traces: GPU idle intervals by a sort-and-merge of the GPU
activity, the thread that launched the work after each gap by its correlation id, and the
activity's time inside those gaps by interval arithmetic."""

from __future__ import annotations

import bisect
import gzip
import itertools
import json
import re
import shutil
import sqlite3
from collections.abc import Iterable
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest

import nsight_analytics as nsa
from conftest import realdata
from nsight_analytics.rules import host_activity
from nsight_analytics.units import dur, pct

DATA = Path(__file__).resolve().parent / "data"
BUSY = DATA / "busy"
ACTIVITY = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
)
LOADER_OP = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


# --- interval arithmetic, independent of nsa ---------------------------------------------------


def union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def overlap(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> int:
    """Length of (union of a) intersected with (union of b)."""
    ua, ub, i, j, total = union(a), union(b), 0, 0, 0
    while i < len(ua) and j < len(ub):
        total += max(0, min(ua[i][1], ub[j][1]) - max(ua[i][0], ub[j][0]))
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return total


def idle_gaps(acts: list[tuple[int, int, object]], start: int) -> list[tuple[int, int, object]]:
    """(gap start, gap end, key of the activity after it) for every idle interval between GPU
    activities whose midpoint lies at or after `start`; acts are (start, end, key)."""
    gaps, end = [], None
    for s, e, key in sorted(acts, key=lambda a: (a[0], a[1])):
        if end is not None and s > end and end + (s - end) // 2 >= start:
            gaps.append((end, s, key))
        end = e if end is None else max(end, e)
    return gaps


def steady_start(steps: list[tuple[int, int]]) -> tuple[int, int]:
    """(start of the first steady step, steady steps): warm-up is every step before the first one
    no longer than 1.5x the median step."""
    durations = sorted(e - s for s, e in steps)
    n = len(durations)
    median = durations[n // 2] if n % 2 else (durations[n // 2 - 1] + durations[n // 2]) / 2
    first = next(i for i, (s, e) in enumerate(steps) if e - s <= 1.5 * median)
    return steps[first][0], n - first


def on_thread(gaps: list[tuple[int, int, object]], thread_of: dict, tid: object) -> list[tuple[int, int]]:
    """The gaps whose next work the thread `tid` launched."""
    return [(s, e) for s, e, key in gaps if thread_of.get(key) == tid]


# --- captures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def unpack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gap_host")

    def get(path: Path) -> tuple[sqlite3.Connection, Path]:
        if not path.exists():
            pytest.skip(f"capture not available: {path}")
        out = path
        if path.suffix == ".gz":
            out = folder / path.name.removesuffix(".gz")
            if not out.exists():
                with gzip.open(path) as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
        return sqlite3.connect(f"file:{out}?mode=ro", uri=True), out

    return get


def idle_finding(path: Path, tmp_path: Path, config: dict | None = None) -> nsa.Finding:
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        rid = nsa.ingest(con, path).report_id
        found = [f for f in nsa.api.findings(con, rid, config=config) if f.rule_id == "gpu-idle"]
    finally:
        con.close()
    assert found, f"no gpu-idle finding on {path.name}"
    return found[0]


def nsys_activity(db: sqlite3.Connection) -> list[tuple[int, int, object]]:
    """GPU activity as (start, end, (globalPid, correlationId))."""
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [
        (s, e, (p, c))
        for t in ACTIVITY
        if t in have
        for s, e, p, c in db.execute(f'SELECT start, "end", globalPid, correlationId FROM {t}')
    ]


def nsys_threads(db: sqlite3.Connection) -> dict:
    """(globalPid, correlationId) of each CUDA API call -> its thread."""
    return {
        ((g >> 24) << 24, c): g
        for g, c in db.execute("SELECT globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    }


def osrt(db: sqlite3.Connection, name: str, tid: int) -> list[tuple[int, int]]:
    return db.execute(
        'SELECT o.start, o."end" FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId '
        "WHERE s.value = ? AND o.globalTid = ?",
        (name, tid),
    ).fetchall()


def nvtx(db: sqlite3.Connection, name: str, tid: int | None = None) -> list[tuple[int, int]]:
    rows = db.execute(
        'SELECT n.start, n."end", n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId '
        "WHERE n.eventType = 59 AND coalesce(n.text, s.value) = ?",
        (name,),
    ).fetchall()
    return [(s, e) for s, e, t in rows if tid is None or t == tid]


def nvtx_steps(db: sqlite3.Connection, prefix: str) -> list[tuple[int, int]]:
    rows = db.execute('SELECT text, start, "end" FROM NVTX_EVENTS WHERE eventType = 59').fetchall()
    return [(s, e) for t, s, e in sorted(rows, key=lambda r: r[1]) if t and t.startswith(prefix)]


def main_thread(thread_of: dict, gaps: list[tuple[int, int, object]]) -> int:
    """The thread that launched the work after most of the idle time."""
    per: dict = {}
    for s, e, key in gaps:
        per[thread_of.get(key)] = per.get(thread_of.get(key), 0) + e - s
    return max(per, key=lambda t: per[t])


# --- nsys ------------------------------------------------------------------------------------------


def test_graph_loop_leads_with_the_sleep(unpack, tmp_path: Path) -> None:
    """60 replays of one CUDA graph, no NVTX; each step reads ids back and sleeps 2 ms."""
    db, path = unpack(BUSY / "nsys" / "h100_nsys2025.3_graph_loop_sleep.sqlite.gz")
    launches = [
        s
        for (s,) in db.execute(
            "SELECT r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId "
            "WHERE n.value LIKE 'cudaGraphLaunch%' ORDER BY r.start"
        )
    ]
    assert len(launches) == 60
    periods = [b - a for a, b in itertools.pairwise(launches)]
    median = sorted(periods)[len(periods) // 2]
    start, steps = steady_start([*itertools.pairwise(launches), (launches[-1], launches[-1] + median)])
    assert steps == 59  # the first replay's step (module loading) is warm-up
    gaps = idle_gaps(nsys_activity(db), start)
    thread_of = nsys_threads(db)
    tid = main_thread(thread_of, gaps)
    mine = on_thread(gaps, thread_of, tid)
    slept = overlap(osrt(db, "clock_nanosleep", tid), mine)
    idle = sum(e - s for s, e, _ in gaps)
    assert slept > 0.8 * idle  # the sleep is most of the idle time

    f = idle_finding(path, tmp_path)
    lead = f.evidence["host_lead"]
    assert f.evidence["steady_start_ns"] == start
    assert (lead["source"], lead["name"]) == ("osrt", "clock_nanosleep")
    assert f.evidence["host_idle_ns"] == idle
    assert lead["in_gaps_ns"] == slept
    assert lead["per_step_ns"] == pytest.approx(slept / steps)
    assert f"the host sleeps (clock_nanosleep) {dur(slept / steps)} of each " in f.title
    first_sentence = f.message.split(". ")[0]
    assert f"sleeps (clock_nanosleep) {dur(slept / steps)} of each" in first_sentence
    assert "mostly in short gaps" not in f.title
    assert f.recommendation.startswith("The launching thread sleeps (clock_nanosleep)")


def test_no_loop_module_loading_in_the_gaps_is_not_a_saving(unpack, tmp_path: Path) -> None:
    """gemm_pair.py runs four rounds of two GEMMs: no steps, and much of its idle time is the host
    loading GPU code (cuLibraryLoadData). That time is start-up: the saving leaves it out."""
    db, path = unpack(BUSY / "nsys" / "h100_nsys2025.3_gemm_pair.sqlite.gz")
    acts = nsys_activity(db)
    first = min(s for s, _, _ in acts)
    gaps = idle_gaps(acts, first)
    thread_of = nsys_threads(db)
    tid = main_thread(thread_of, gaps)
    loads = db.execute(
        'SELECT r.start, r."end" FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId '
        "WHERE (n.value LIKE 'cuLibraryLoad%' OR n.value LIKE 'cuModuleLoad%') AND r.globalTid = ?",
        (tid,),
    ).fetchall()
    loading = overlap(loads, on_thread(gaps, thread_of, tid))
    long_gaps = sum(e - s for s, e, _ in gaps if e - s >= 100_000)
    assert loading > 0.1 * long_gaps  # the capture loads code while the GPU waits

    f = idle_finding(path, tmp_path)
    assert f.evidence["phase"] == "run"
    assert f.evidence["startup_loading_ns"] == pytest.approx(loading, rel=0.01)
    assert f.est_savings_ns == pytest.approx(long_gaps - loading, rel=0.01)
    assert "Not counted as a saving (start-up)" in f.message


def test_loop_with_a_sleep_per_step(unpack, tmp_path: Path) -> None:
    db, path = unpack(DATA / "h100_nsys2025.3_sync_loop_before.sqlite.gz")
    start, steps = steady_start(nvtx_steps(db, "step "))
    gaps = idle_gaps(nsys_activity(db), start)
    thread_of = nsys_threads(db)
    tid = main_thread(thread_of, gaps)
    slept = overlap(osrt(db, "clock_nanosleep", tid), on_thread(gaps, thread_of, tid))
    f = idle_finding(path, tmp_path)
    assert f.evidence["host_lead"]["name"] == "clock_nanosleep"
    assert f.evidence["host_lead"]["in_gaps_ns"] == slept
    assert f.evidence["host_lead"]["idle_share"] == pytest.approx(slept / sum(e - s for s, e, _ in gaps))
    assert f"sleeps (clock_nanosleep) {dur(slept / steps)} of each" in f.title
    assert f.evidence["dominant_cause"] == "host_wait"  # the gaps' causes are still told


def test_cpp_mpi_rank_waits_in_the_allreduce(unpack, tmp_path: Path) -> None:
    """Rank 0 computes 2 ms (NVTX host_work), then waits in MPI_Allreduce for rank 1 (4 ms)."""
    db, path = unpack(BUSY / "mpi" / "h100_nsys2025.3_mpi_loop_rank0.sqlite.gz")
    start, steps = steady_start(nvtx_steps(db, "step "))
    gaps = idle_gaps(nsys_activity(db), start)
    thread_of = nsys_threads(db)
    tid = main_thread(thread_of, gaps)
    mine = on_thread(gaps, thread_of, tid)
    allreduce = db.execute(
        'SELECT m.start, m."end" FROM MPI_COLLECTIVES_EVENTS m JOIN StringIds s ON s.id = m.textId '
        "WHERE s.value = 'MPI_Allreduce' AND m.globalTid = ?",
        (tid,),
    ).fetchall()
    waited = overlap(allreduce, mine)
    worked = overlap(nvtx(db, "host_work", tid), mine)
    assert waited > worked > 0

    f = idle_finding(path, tmp_path)
    lead = f.evidence["host_lead"]
    assert (lead["source"], lead["name"], lead["in_gaps_ns"]) == ("mpi", "MPI_Allreduce", waited)
    assert lead["second"] == "host_work"
    assert f"the host waits in MPI_Allreduce {dur(waited / steps)} of each " in f.title
    assert f"is also in NVTX range `host_work` {dur(worked / steps)} of each" in f.message
    assert "Python" not in f.message and "Python" not in f.recommendation
    assert "MPI_I" in f.recommendation  # overlap the communication


def test_cpp_rank_computing_is_named_by_its_range_and_samples(unpack, tmp_path: Path) -> None:
    """Rank 1 computes 4 ms in host_work (host_compute, inlined into main): no Python anywhere."""
    db, path = unpack(BUSY / "mpi" / "h100_nsys2025.3_mpi_loop_rank1.sqlite.gz")
    start, steps = steady_start(nvtx_steps(db, "step "))
    gaps = idle_gaps(nsys_activity(db), start)
    thread_of = nsys_threads(db)
    tid = main_thread(thread_of, gaps)
    worked = overlap(nvtx(db, "host_work", tid), on_thread(gaps, thread_of, tid))
    f = idle_finding(path, tmp_path)
    lead = f.evidence["host_lead"]
    assert (lead["source"], lead["name"], lead["in_gaps_ns"]) == ("nvtx", "host_work", worked)
    assert f"the host is in NVTX range `host_work` {dur(worked / steps)} of each " in f.title
    assert "CPU samples there name main" in f.message
    assert "Python" not in f.message and "Python" not in f.recommendation


def test_idle_gaps_lists_the_range_and_the_sleep_in_it(unpack, tmp_path: Path) -> None:
    """host_work (a 40 ms sleep each) holds a fifth of the steady idle time: too little to lead,
    so the finding lists it, with the sleep inside it, and the rest (CuPy start-up) as Python."""
    db, path = unpack(DATA / "h100_nsys2025.3_idle_gaps.sqlite")
    start, _ = steady_start(nvtx_steps(db, "step_"))
    gaps = idle_gaps(nsys_activity(db), start)
    thread_of = nsys_threads(db)
    tid = main_thread(thread_of, gaps)
    mine = on_thread(gaps, thread_of, tid)
    work = nvtx(db, "host_work", tid)
    in_range = overlap(work, mine)
    sleeps = [(s, e) for s, e in osrt(db, "clock_nanosleep", tid) if any(a <= s and e <= b for a, b in work)]
    sleep_in_range = overlap(sleeps, mine)
    idle = sum(e - s for s, e, _ in gaps)
    assert 0.1 < in_range / idle < 0.25
    f = idle_finding(path, tmp_path)
    assert "host_lead" not in f.evidence
    listed = (
        f"{dur(in_range)} in NVTX range `host_work` ({dur(sleep_in_range)} of it sleeping in clock_nanosleep)"
    )
    assert listed in f.message
    assert "in host code no trace covers (Python, data loading, I/O)" in f.message


# --- PyTorch profiler --------------------------------------------------------------------------------


def _ns(us: Decimal) -> int:
    return int((us * 1000).to_integral_value(ROUND_HALF_EVEN))


def kineto(path: Path) -> SimpleNamespace:
    """The trace's GPU activity, launching threads, op and frame intervals, steps (ns)."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh, parse_float=Decimal)["traceEvents"] if e.get("ph") == "X"]

    def span(e: dict) -> tuple[int, int]:
        s = _ns(Decimal(e["ts"]))
        return s, s + _ns(Decimal(e.get("dur", 0)))

    gpu = [
        (*span(e), e["args"].get("correlation"))
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    thread_of = {
        e["args"]["correlation"]: e["tid"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    host: dict[tuple[object, str], list[tuple[int, int]]] = {}
    for e in events:
        if e.get("cat") in ("cpu_op", "user_annotation", "python_function"):
            host.setdefault((e["tid"], e["name"]), []).append(span(e))
    steps = sorted(
        span(e) for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    )
    return SimpleNamespace(gpu=gpu, thread_of=thread_of, host=host, steps=steps)


@pytest.mark.parametrize("name", ["loader_slow", "loader_fast"])
def test_dataloader_op_and_its_frame_lead(name: str, tmp_path: Path) -> None:
    """ResNet-18 fed by a single-process DataLoader that sleeps per sample (with_stack=True)."""
    path = BUSY / "kineto" / f"h100_torch2.11_{name}.json.gz"
    if not path.exists():
        pytest.skip(f"capture not available: {path}")
    t = kineto(path)
    start, steps = steady_start(t.steps)
    gaps = idle_gaps(t.gpu, start)
    idle = sum(e - s for s, e, _ in gaps)
    tid = main_thread(t.thread_of, gaps)
    mine = on_thread(gaps, t.thread_of, tid)
    loader = overlap(t.host[(tid, LOADER_OP)], mine)
    getitem = overlap(t.host[(tid, "loader_resnet.py(28): __getitem__")], mine)
    assert loader > 0.7 * idle and getitem > 0.5 * loader

    f = idle_finding(path, tmp_path)
    lead = f.evidence["host_lead"]
    assert f.evidence["host_idle_ns"] == idle
    assert (lead["source"], lead["name"], lead["in_gaps_ns"]) == ("cpu_op", LOADER_OP, loader)
    assert lead["code"] == "loader_resnet.py(28): __getitem__"
    assert lead["idle_share"] == pytest.approx(loader / idle)
    assert f"the host runs `{LOADER_OP}` {dur(loader / steps)} of each " in f.title
    assert f"in the code: loader_resnet.py(28): __getitem__ ({dur(getitem)})" in f.message
    assert "host code" not in f.message  # the op is named, not "host code"
    assert "num_workers" in f.recommendation


# --- a C++ HPC application ---------------------------------------------------------------------------


def test_cloverleaf_idle_time_is_not_called_python(tmp_path: Path) -> None:
    """CloverLeaf (C++, no NVTX): its idle time is judged with a low threshold; the host's
    untraced time is host code, never Python."""
    path = realdata("nsys", "a100_nsys2024.5_perlmutter_cloverleaf.sqlite")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    f = idle_finding(path, tmp_path, config={"idle_share_warning": 0.01})
    # the window is nsa's (steps from the repeating kernel pattern); the rest is computed here
    gaps = idle_gaps(nsys_activity(db), f.evidence["steady_start_ns"])
    thread_of = nsys_threads(db)
    tid = main_thread(thread_of, gaps)
    wrote = overlap(osrt(db, "write", tid), on_thread(gaps, thread_of, tid))
    assert f.evidence["host_idle_ns"] == sum(e - s for s, e, _ in gaps)
    assert f.evidence["host_lead"]["name"] == "write" and f.evidence["host_lead"]["in_gaps_ns"] == wrote
    assert "the host does I/O (write)" in f.title
    assert "Python" not in f.message and "Python" not in f.title and "Python" not in f.recommendation


def test_launch_bound_loop_names_its_launches_and_the_phase(tmp_path: Path) -> None:
    """The transformer training loop (non-fused AdamW, NVTX phases): no one activity holds a
    quarter of the idle time; the finding lists the launch calls, the untraced Python time and the
    phase most of the idle time falls in (the optimizer)."""
    path = realdata("nsys", "h100_nsys2025.3_transformer_train.sqlite")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    start, _ = steady_start(nvtx_steps(db, "train_step_"))
    gaps = idle_gaps(nsys_activity(db), start)
    thread_of = nsys_threads(db)
    tid = main_thread(thread_of, gaps)
    mine = on_thread(gaps, thread_of, tid)
    idle = sum(e - s for s, e, _ in gaps)
    optimizer = overlap(nvtx(db, "optimizer", tid), mine)
    calls: dict[int, list[tuple[int, int]]] = {}  # the backward thread launches too
    for s, e, name, thread in db.execute(
        'SELECT r.start, r."end", n.value, r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r '
        "JOIN StringIds n ON n.id = r.nameId"
    ):
        if name.split("_v")[0] == "cudaLaunchKernel":
            calls.setdefault(thread, []).append((s, e))
    launching = sum(overlap(c, on_thread(gaps, thread_of, t)) for t, c in calls.items())
    assert launching < 0.25 * idle and optimizer > 0.25 * idle
    f = idle_finding(path, tmp_path)
    assert "host_lead" not in f.evidence and f.evidence["host_idle_ns"] == idle
    assert f"spent {dur(launching)} issuing launches in cudaLaunchKernel;" in f.message
    assert (
        f"{dur(optimizer)} ({pct(optimizer / idle)}) of the idle time falls inside NVTX range `optimizer`."
        in (f.message)
    )
    assert "in host code no trace covers (Python, data loading, I/O)" in f.message


# --- the wording, on rows made by hand ----------------------------------------------------------------


def _row(
    source: str, name: str, in_gaps: int, parent: tuple[str, str] | None = None, parent_ns: int = 0, **kw
):
    base = {
        "device_id": 0, "source": source, "name": name, "in_gaps_ns": in_gaps, "self_ns": kw.get("self_ns", in_gaps),
        "instances": 1, "depth": kw.get("depth", 0), "parent_source": parent[0] if parent else None,
        "parent_name": parent[1] if parent else None, "parent_ns": parent_ns, "idle_ns": 100_000_000,
        "attributed_ns": 100_000_000, "traced_ns": kw.get("traced", 60_000_000),
    }  # fmt: skip
    return SimpleNamespace(**base)


def test_a_range_leads_with_the_sleep_inside_it() -> None:
    ht = host_activity.host_time(
        [
            _row("nvtx", "host_work", 60_000_000),
            _row("osrt", "clock_nanosleep", 55_000_000, ("nvtx", "host_work"), 55_000_000),
            _row("cuda", "cudaLaunchKernel", 3_000_000),
        ]
    )
    assert ht is not None
    found = host_activity.lead(ht, 0.25)
    assert found is not None and found.act.name == "host_work" and found.inner and not found.second
    text = host_activity.describe(found, ht, 10, 8_000_000, 100_000_000)
    assert text == (
        "is in NVTX range `host_work` 6 ms of each 8 ms step (60 ms, 60% of the idle time), "
        "55 ms of it sleeping in clock_nanosleep"
    )


def test_a_call_leads_inside_its_range_and_a_second_activity_follows() -> None:
    ht = host_activity.host_time(
        [
            _row("mpi", "MPI_Wait", 40_000_000, ("nvtx", "halo"), 40_000_000),
            _row("nvtx", "halo", 0, self_ns=40_000_000),
            _row("nvtx", "physics", 30_000_000),
        ]
    )
    assert ht is not None
    found = host_activity.lead(ht, 0.25)
    assert found is not None and found.act.name == "MPI_Wait"
    assert found.outer is None  # `halo` encloses launches (no in_gaps_ns): not a range around it
    assert found.second is not None and found.second.name == "physics"
    assert host_activity.describe(found, ht, 0, 0, 100_000_000) == (
        "waits in MPI_Wait 40 ms of the 100 ms idle (40% of the idle time); it is also in NVTX range "
        "`physics` 30 ms of the 100 ms idle (30% of the idle time)"
    )


def test_no_lead_below_the_share_and_untraced_time_is_not_python_for_a_cpp_program() -> None:
    rows = [
        _row("cuda", "cudaMemcpy", 9_000_000),
        _row("osrt", "write", 8_000_000),
        _row("sample", "main", 6_000_000),
    ]
    rows[2].self_ns = 6_000_000
    ht = host_activity.host_time(rows)
    assert ht is not None and host_activity.lead(ht, 0.25) is None
    assert host_activity.summary(ht, python=False) == (
        " While the GPU idled (100 ms), the launching thread spent 9 ms blocked in cudaMemcpy, 8 ms doing I/O in "
        "write; 40 ms (40%) in host code no trace covers (CPU samples there: main 6 ms)."
    )
    assert "(Python, data loading, I/O)" in host_activity.summary(ht, python=True)


def test_nested_activities_are_listed_once() -> None:
    """`.item()` in an NVTX-annotated PyTorch program: aten::item > aten::_local_scalar_dense >
    cudaStreamSynchronize hold the same time; the summary names the outermost, the sync inside it."""
    item, dense = ("nvtx", "aten::item"), ("nvtx", "aten::_local_scalar_dense")
    ht = host_activity.host_time(
        [
            _row("nvtx", "aten::item", 20_000_000),
            _row("nvtx", "aten::_local_scalar_dense", 19_000_000, item, 19_000_000, depth=1),
            _row("cuda", "cudaStreamSynchronize", 18_000_000, dense, 18_000_000),
            _row("cuda", "cudaLaunchKernel", 10_000_000),
        ]
    )
    assert ht is not None and host_activity.lead(ht, 0.25) is None
    assert host_activity.summary(ht, python=True).startswith(
        " While the GPU idled (100 ms), the launching thread spent 20 ms in NVTX range `aten::item` (18 ms of it "
        "blocked in cudaStreamSynchronize), 10 ms issuing launches in cudaLaunchKernel;"
    )


def test_a_call_partly_inside_a_range_is_placed_in_it() -> None:
    ht = host_activity.host_time(
        [
            _row("osrt", "clock_nanosleep", 50_000_000, ("nvtx", "wait_for_batch"), 30_000_000),
            _row("nvtx", "wait_for_batch", 35_000_000),
        ]
    )
    assert ht is not None
    found = host_activity.lead(ht, 0.25)
    assert found is not None and found.outer is not None and found.second is None
    assert host_activity.describe(found, ht, 5, 20_000_000, 100_000_000) == (
        "sleeps (clock_nanosleep) 10 ms of each 20 ms step (50 ms, 50% of the idle time), inside NVTX range "
        "`wait_for_batch`"
    )


def test_traced_time_is_the_union_of_the_threads_activities_in_its_gaps(unpack, tmp_path: Path) -> None:
    """traced_ns: the part of the gaps the launching thread spent in any OS runtime call, CUDA API
    call or NVTX range (the steps and the ranges enclosing two or more launches left out), each
    moment once however many activities overlap it (a sleep inside a range)."""
    db, path = unpack(DATA / "h100_nsys2025.3_idle_gaps.sqlite")
    start, _ = steady_start(nvtx_steps(db, "step_"))
    gaps = idle_gaps(nsys_activity(db), start)
    thread_of = nsys_threads(db)
    steps = set(nvtx_steps(db, "step_"))
    calls = db.execute(
        'SELECT r.globalTid, r.start, r."end", s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r '
        "JOIN StringIds s ON s.id = r.nameId"
    ).fetchall()
    launches: dict[int, list[int]] = {}
    for tid, s, _e, name in calls:
        if any(k in name for k in ("Launch", "Memcpy", "Memset")) and "HostFunc" not in name:
            launches.setdefault(tid, []).append(s)
    acts: dict[int, list[tuple[int, int]]] = {}
    for tid, s, e, _name in calls:
        acts.setdefault(tid, []).append((s, e))
    for tid, s, e in db.execute('SELECT globalTid, start, "end" FROM OSRT_API'):
        acts.setdefault(tid, []).append((s, e))
    for tid, s, e in db.execute('SELECT globalTid, start, "end" FROM NVTX_EVENTS WHERE eventType = 59'):
        if e is not None and (s, e) not in steps and sum(s <= t <= e for t in launches.get(tid, [])) < 2:
            acts.setdefault(tid, []).append((s, e))
    per_thread: dict[int, list[tuple[int, int]]] = {}
    for s, e, key in gaps:
        tid = thread_of.get(key)
        if tid is not None:
            per_thread.setdefault(tid, []).append((s, e))
    expected = sum(overlap(acts.get(tid, []), mine) for tid, mine in per_thread.items())
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        rid = nsa.ingest(con, path).report_id
        rows = nsa.api.query(con, "gap_host", report_id=rid, top_n=None).fetchall()
        cols = [d[0] for d in nsa.api.query(con, "gap_host", report_id=rid, top_n=1).description]
    finally:
        con.close()
    traced = {r[cols.index("device_id")]: r[cols.index("traced_ns")] for r in rows}
    assert len(traced) == 1
    assert expected > 0
    assert next(iter(traced.values())) == expected


def _gap_host_rows(tmp_path: Path, path: Path) -> list[tuple]:
    """Every row of gap_host (top_n NULL) on `path`, ingested into a new workspace."""
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        rid = nsa.ingest(con, path).report_id
        return nsa.api.query(con, "gap_host", report_id=rid, top_n=None).fetchall()
    finally:
        con.close()


def _host_calls(db: sqlite3.Connection) -> list[tuple[str, int, int, int, str]]:
    """(source, globalTid, start, end, name) of every CUDA API and OS runtime call of the export."""
    cuda = db.execute(
        'SELECT r.globalTid, r.start, r."end", s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r '
        "JOIN StringIds s ON s.id = r.nameId"
    )
    osrt = db.execute(
        'SELECT o.globalTid, o.start, o."end", s.value FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId'
    )
    return [("cuda", *r) for r in cuda] + [("osrt", *r) for r in osrt]


def test_every_call_counts_its_time_in_the_gaps_of_its_thread(unpack, tmp_path: Path) -> None:
    """in_gaps_ns of each CUDA API and OS runtime call name (the API version suffix, `_v7000`,
    left out as nsa names the calls): its calls' time inside the gaps of their thread, summed, on
    the idle-gaps program: calls short and long, inside a gap, across a gap's start or end, and
    away from every gap."""
    db, path = unpack(DATA / "h100_nsys2025.3_idle_gaps.sqlite")
    start, _ = steady_start(nvtx_steps(db, "step_"))
    gaps = idle_gaps(nsys_activity(db), start)
    thread_of = nsys_threads(db)
    per_thread: dict[int, list[tuple[int, int]]] = {}
    for s, e, key in gaps:
        tid = thread_of.get(key)
        if tid is not None:
            per_thread.setdefault(tid, []).append((s, e))
    calls = _host_calls(db)
    merged = {tid: union(spans) for tid, spans in per_thread.items()}  # sorted, apart
    ends = {tid: [e for _, e in spans] for tid, spans in merged.items()}
    expected: dict[tuple[str, str], int] = {}
    far = across = 0
    for source, tid, s, e, name in calls:
        if tid not in merged or e < s:
            continue
        spans, i, ns = merged[tid], bisect.bisect_right(ends[tid], s), 0
        while i < len(spans) and spans[i][0] < e:  # the gaps that end after s and start before e
            ns += min(e, spans[i][1]) - max(s, spans[i][0])
            i += 1
        far += ns == 0
        across += 0 < ns < e - s
        if ns > 0:
            name = re.sub(r"_v[0-9]+$", "", name)
            expected[source, name] = expected.get((source, name), 0) + ns
    assert far > 0 and across > 0 and expected
    rows = _gap_host_rows(tmp_path, path)
    got = {(r[2], r[3]): r[4] for r in rows if r[2] in ("cuda", "osrt")}
    assert got == expected


def test_every_call_is_placed_in_the_range_open_just_before_it_starts(unpack, tmp_path: Path) -> None:
    """parent_name and parent_ns of each CUDA API and OS runtime call name on the idle-gaps
    program: each call's time in the gaps of its thread goes to the innermost NVTX range of that
    thread open just before the call starts (started before it, not ended before it: the latest
    to start), among the ranges with time in those gaps, the steps left out; the parent is the
    range holding most of the name's time (ties by name)."""
    db, path = unpack(DATA / "h100_nsys2025.3_idle_gaps.sqlite")
    start, _ = steady_start(nvtx_steps(db, "step_"))
    gaps = idle_gaps(nsys_activity(db), start)
    thread_of = nsys_threads(db)
    steps = set(nvtx_steps(db, "step_"))
    merged: dict[int, list[tuple[int, int]]] = {}
    for s, e, key in gaps:
        tid = thread_of.get(key)
        if tid is not None:
            merged.setdefault(tid, []).append((s, e))
    merged = {tid: union(spans) for tid, spans in merged.items()}  # sorted, apart
    ends = {tid: [e for _, e in spans] for tid, spans in merged.items()}

    def in_gaps(tid: int, s: int, e: int) -> int:
        spans, i, ns = merged[tid], bisect.bisect_right(ends[tid], s), 0
        while i < len(spans) and spans[i][0] < e:  # the gaps that end after s and start before e
            ns += min(e, spans[i][1]) - max(s, spans[i][0])
            i += 1
        return ns

    ranges: dict[int, list[tuple[int, int, str]]] = {}
    for tid, s, e, text in db.execute(
        'SELECT globalTid, start, "end", coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) '
        "FROM NVTX_EVENTS WHERE eventType = 59"
    ):
        if tid in merged and e is not None and (s, e) not in steps and in_gaps(tid, s, e) > 0:
            ranges.setdefault(tid, []).append((s, e, text))
    calls = _host_calls(db)
    per_parent: dict[tuple[str, str], dict[str, int]] = {}
    for source, tid, s, e, name in calls:
        if tid not in merged or e < s or (ns := in_gaps(tid, s, e)) == 0:
            continue
        # open just before s: started before it, ended at or after it; the innermost starts last
        # (of two starting together, the shorter)
        open_ranges = [(rs, -r_end, text) for rs, r_end, text in ranges.get(tid, []) if rs < s <= r_end]
        if open_ranges:
            sums = per_parent.setdefault((source, re.sub(r"_v[0-9]+$", "", name)), {})
            parent = max(open_ranges)[2]
            sums[parent] = sums.get(parent, 0) + ns
    expected = {key: min(sums.items(), key=lambda kv: (-kv[1], kv[0])) for key, sums in per_parent.items()}
    assert len(expected) > 10 and len({p for p, _ in expected.values()}) >= 3
    rows = _gap_host_rows(tmp_path, path)
    got = {(r[2], r[3]): (r[9], r[10]) for r in rows if r[2] in ("cuda", "osrt") and r[9] is not None}
    assert {r[8] for r in rows if r[2] in ("cuda", "osrt") and r[9] is not None} == {"nvtx"}
    assert got == expected
