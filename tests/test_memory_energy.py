"""Memory over time (nsys GPU memory usage events) and energy from power logs (NVML sampler,
nvidia-smi), on the foreach / fused AdamW training pair captured with both.

Every expected number is computed here from the files themselves: plain sqlite3 SQL on the
gunzipped exports, csv arithmetic on the power logs, datetime for the time zones.
"""

from __future__ import annotations

import csv
import sqlite3
import statistics
from bisect import bisect_right
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from conftest import realdata
from nsight_analytics import api
from nsight_analytics.cli import EXIT_ERROR, main

RUNS = ("foreach", "fused")
NSYS = "h100_nsys2025.3_train_{}_gpumetrics.sqlite"
NVML = "h100_nvml_train_{}.csv"
SMI = "h100_nvidia-smi_train_{}.csv"
MEM_KINDS = {0: "pageable", 1: "pinned", 2: "device", 5: "device_static"}


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(connection, {'foreach': (nsys id, nvml id), 'fused': ...}): the two captures and their
    NVML logs in one workspace."""
    con = nsa.connect(tmp_path_factory.mktemp("pair") / "w.duckdb")
    ids = {}
    for run in RUNS:
        nsys = nsa.ingest(con, realdata("nsys", NSYS.format(run) + ".gz")).report_id
        ids[run] = (nsys, nsa.ingest(con, realdata("power", NVML.format(run))).report_id)
    yield con, ids
    con.close()


def _session_start(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT min(utcEpochNs) FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0])


def _steps(db: sqlite3.Connection) -> list[tuple[str, int, int]]:
    rows = db.execute("SELECT text, start, \"end\" FROM NVTX_EVENTS WHERE text GLOB 'step [0-9]*'").fetchall()
    return sorted(rows, key=lambda r: r[1])


def _nvml(run: str) -> list[dict[str, int]]:
    with realdata("power", NVML.format(run)).open() as fh:
        return [{k: int(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def _rows(con, name: str, **params) -> list[dict]:
    rel = nsa.query(con, name, **params)
    return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]


# --- memory -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", [NSYS.format(r) for r in RUNS] + ["h100_nsys2025.3_transformer_train.sqlite"]
)
def test_memory_events_are_the_exports_rows(real_sqlite, tmp_path: Path, name: str) -> None:
    path = real_sqlite(name)
    con = nsa.connect(tmp_path / "w.duckdb")
    result = nsa.ingest(con, path)
    rid = result.report_id
    # copied on first use, and the report says it holds memory events before they are copied
    assert "memory_events" in result.deferred
    kinds = con.execute("SELECT activity_kinds FROM reports WHERE report_id = ?", [rid]).fetchone()[0]
    assert "memory" in kinds
    assert con.execute("SELECT count(*) FROM memory_events").fetchone()[0] == 0
    api.materialise(con, {"memory_events"})
    db = sqlite3.connect(path)
    expected = db.execute(
        "SELECT memKind, memoryOperationType, count(*), sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS GROUP BY 1, 2"
    ).fetchall()
    got = con.execute(
        "SELECT memory, operation, count(*), sum(bytes) FROM memory_events WHERE report_id = ? GROUP BY ALL",
        [rid],
    ).fetchall()
    ops = {0: "alloc", 1: "free"}
    assert sorted(got) == sorted((MEM_KINDS[k], ops[o], n, b) for k, o, n, b in expected)
    con.close()


def test_memory_peak_and_where_it_happens(pair, real_sqlite) -> None:
    """The device-memory peak, the allocation that set it, its step and NVTX range, and the
    headroom, against a running sum in SQLite over the same events."""
    con, ids = pair
    peaks = {}
    for run in RUNS:
        db = sqlite3.connect(real_sqlite(NSYS.format(run)))
        held = db.execute(
            """SELECT start, bytes, sum(CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END)
                   OVER (ORDER BY start, rowid) AS held
               FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind = 2 ORDER BY held DESC, start LIMIT 1"""
        ).fetchone()
        total = db.execute("SELECT totalMemory FROM TARGET_INFO_GPU").fetchone()[0]
        step = next(name for name, s, e in _steps(db) if s <= held[0] < e)
        innermost = db.execute(
            'SELECT text FROM NVTX_EVENTS WHERE text IS NOT NULL AND start <= ? AND "end" >= ? '
            "ORDER BY start DESC LIMIT 1",
            [held[0], held[0]],
        ).fetchone()[0]
        (row,) = [r for r in _rows(con, "memory_peak", report_id=ids[run][0]) if r["memory"] == "device"]
        assert (row["peak_ns"], row["peak_event_bytes"], row["peak_bytes"]) == held
        assert (row["peak_step_name"], row["peak_range"]) == (step, innermost)
        assert row["headroom_bytes"] == total - held[2]
        assert row["frees"] == 0 and row["fragmentation"] is None  # nsys states no reserved bytes
        peaks[run] = held[2]
    # what the fused optimizer does to the memory the process reserved from the driver: 2 MiB less
    assert peaks["fused"] - peaks["foreach"] == -(2 << 20)


def test_memory_growth_is_silent_on_the_training_pair(pair, real_sqlite) -> None:
    """No leak: after the first steady step no device memory is allocated at all (SQLite), so
    the bytes held level off and the rule stays silent; the one step that grows is in
    memory_steps for anyone who looks."""
    con, ids = pair
    for run in RUNS:
        db = sqlite3.connect(real_sqlite(NSYS.format(run)))
        steps = _steps(db)
        later = db.execute(
            "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind = 2 AND start >= ?",
            [steps[2][1]],
        ).fetchone()[0]
        in_step_1 = db.execute(
            "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind = 2 AND start BETWEEN ? AND ?",
            [steps[1][1], steps[1][2]],
        ).fetchone()[0]
        assert later == 0
        rows = [r for r in _rows(con, "memory_steps", report_id=ids[run][0]) if r["memory"] == "device"]
        grown = [(r["name"], r["held_end_bytes"] - r["held_start_bytes"]) for r in rows if r["steady"]]
        assert [g for g in grown if g[1]] == [("step 1", in_step_1)]
        found = nsa.findings(con, report_id=ids[run][0], only=["memory-growth"])
        assert found == []


def test_memory_timeline_reads_a_stated_allocated_count(workspace) -> None:
    """Sources that state the allocator's totals (PyTorch profiler: Total Allocated / Reserved)
    are read as stated; fragmentation at the peak is reserved but not allocated."""
    mib = 1 << 20
    rows = [
        (0, "alloc", 4 * mib, 4 * mib, 4 * mib, 8 * mib),
        (10, "alloc", 2 * mib, 2 * mib, 6 * mib, 8 * mib),
        (20, "free", 4 * mib, -4 * mib, 2 * mib, 8 * mib),
    ]
    for ts, op, size, delta, allocated, reserved in rows:
        workspace.execute(
            "INSERT INTO memory_events (report_id, device_id, pid, ts_ns, operation, bytes, delta_bytes, "
            "memory, allocated_bytes, reserved_bytes) VALUES (9, 0, 1, ?, ?, ?, ?, 'device', ?, ?)",
            [ts, op, size, delta, allocated, reserved],
        )
    assert [r["held_bytes"] for r in _rows(workspace, "memory_timeline")] == [4 * mib, 6 * mib, 2 * mib]
    (peak,) = _rows(workspace, "memory_peak")
    assert (peak["peak_bytes"], peak["peak_ns"], peak["final_bytes"]) == (6 * mib, 10, 2 * mib)
    assert peak["fragmentation"] == pytest.approx(1 - 6 / 8)


def test_memory_timeline_finds_each_events_step_in_every_series(workspace) -> None:
    """An event's step, of each series: the last step to start at or before it, if it has not
    ended; an event at a step's start is in it, one at its end is not; an event in the steps
    of two series has a row for each, one in none a row without a step. Host memory too."""
    events = [
        (0, 0),
        (10, 0),
        (15, 0),
        (20, 0),
        (22, 0),
        (26, 0),
        (30, 0),
        (39, 0),
        (40, 0),
        (55, 0),
        (12, None),
        (45, None),
    ]
    for ts, dev in events:
        workspace.execute(
            "INSERT INTO memory_events (report_id, device_id, pid, ts_ns, operation, bytes, delta_bytes, memory) "
            "VALUES (9, ?, 1, ?, 'alloc', ?, ?, ?)",
            [dev, ts, ts + 1, ts + 1, "host" if dev is None else "device"],
        )
    # step, series, start_ns, end_ns: series 1's step 2 starts before step 1 ends (it then hides
    # it), series 2 overlaps series 1, series 3's one step has no end
    steps = [(0, 1, 10, 20), (1, 1, 20, 30), (2, 1, 25, 40), (0, 2, 12, 45), (0, 3, 50, None)]
    for step, series, start, end in steps:
        workspace.execute(
            "INSERT INTO steps (report_id, step, name, source, series, start_ns, end_ns, steady) "
            "VALUES (9, ?, ?, 'nvtx', ?, ?, ?, true)",
            [step, f"step {step} of {series}", series, start, end],
        )
    expected = []
    for dev in (0, None):
        held = 0
        for ts, _ in sorted(e for e in events if e[1] == dev):
            held += ts + 1
            found = []
            for series in (1, 2, 3):
                started = [s for s in steps if s[1] == series and s[2] <= ts]
                if started:
                    step, _, _, end = max(started, key=lambda s: s[2])
                    if end is not None and ts < end:
                        found.append((step, f"step {step} of {series}"))
            expected += [(dev, ts, held, *f) for f in found or [(None, None)]]
    rows = _rows(workspace, "memory_timeline")
    got = [(r["device_id"], r["ts_ns"], r["held_bytes"], r["step"], r["step_name"]) for r in rows]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    # in order: device before host memory, by time
    assert [(d, ts) for d, ts, *_ in got] == [(d, ts) for d, ts, *_ in expected]

    def held(at: int) -> int:
        return sum(ts + 1 for ts, d in events if d == 0 and ts <= at)

    assert sorted(g[3:] for g in got if g[1] == 26) == [(0, "step 0 of 2"), (2, "step 2 of 1")]
    assert [g for g in got if g[1] in (40, 55)] == [
        (0, 40, held(40), 0, "step 0 of 2"),
        (0, 55, held(55), None, None),
    ]


def test_memory_steps_counts_each_steps_events_however_steps_overlap(workspace) -> None:
    """Host memory (device_id NULL) is counted like device memory, an event at a step's start or
    end is in the step, and the steps of two series (same step numbers, overlapping in time) are
    each counted on their own."""
    events = [  # ts, device_id, operation, bytes
        (5, None, "alloc", 8),
        (10, None, "alloc", 4),
        (15, None, "free", 8),
        (20, None, "alloc", 16),
        (30, None, "free", 4),
        (40, None, "alloc", 2),
        (10, 0, "alloc", 100),
        (25, 0, "free", 100),
    ]
    for ts, dev, op, size in events:
        workspace.execute(
            "INSERT INTO memory_events (report_id, device_id, pid, ts_ns, operation, bytes, delta_bytes, memory) "
            "VALUES (9, ?, 1, ?, ?, ?, ?, ?)",
            [dev, ts, op, size, size if op == "alloc" else -size, "host" if dev is None else "device"],
        )
    steps = [(0, 1, 10, 20), (1, 1, 20, 30), (0, 2, 12, 40)]  # step, series, start_ns, end_ns
    for step, series, start, end in steps:
        workspace.execute(
            "INSERT INTO steps (report_id, step, name, source, series, start_ns, end_ns, duration_ns, steady) "
            "VALUES (9, ?, ?, 'nvtx', ?, ?, ?, ?, true)",
            [step, f"step {step}", series, start, end, end - start],
        )
    got = {(r["device_id"], r["start_ns"]): r for r in _rows(workspace, "memory_steps")}
    assert len(got) == 2 * len(steps)
    for dev in (None, 0):
        mine = sorted((ts, op, size) for ts, d, op, size in events if d == dev)
        held, running = [], 0
        for ts, op, size in mine:
            running += size if op == "alloc" else -size
            held.append((ts, running))
        for _, _, start, end in steps:
            inside = [(op, size) for ts, op, size in mine if start <= ts <= end]
            before = [h for ts, h in held if ts < start]
            start_bytes = before[-1] if before else 0
            r = got[(dev, start)]
            assert r["held_start_bytes"] == start_bytes
            assert r["held_end_bytes"] == ([h for ts, h in held if ts <= end] or [0])[-1]
            assert r["peak_bytes"] == max([start_bytes] + [h for ts, h in held if start <= ts <= end])
            assert r["allocations"] == sum(op == "alloc" for op, _ in inside)
            assert r["frees"] == sum(op == "free" for op, _ in inside)
            assert r["allocated_bytes"] == sum(size for op, size in inside if op == "alloc")
            assert r["freed_bytes"] == sum(size for op, size in inside if op == "free")


def test_memory_series_of_one_device_and_process_differ_by_memory_kind(workspace) -> None:
    """Series that share report, device and process but not the memory kind ('device' and
    'device_static', as nsys writes them), and one whose process is unknown (pid NULL), each
    hold and count their own bytes in memory_timeline and memory_steps."""
    events = [  # ts, pid, memory, operation, bytes
        (5, 1, "device", "alloc", 8),
        (6, 1, "device_static", "alloc", 1000),
        (12, 1, "device", "alloc", 4),
        (14, None, "device", "alloc", 50),
        (15, 1, "device_static", "free", 1000),
        (18, 1, "device", "free", 8),
        (22, None, "device", "free", 50),
        (24, 1, "device_static", "alloc", 30),
    ]
    for ts, pid, memory, op, size in events:
        workspace.execute(
            "INSERT INTO memory_events (report_id, device_id, pid, ts_ns, operation, bytes, delta_bytes, memory) "
            "VALUES (9, 0, ?, ?, ?, ?, ?, ?)",
            [pid, ts, op, size, size if op == "alloc" else -size, memory],
        )
    workspace.execute(
        "INSERT INTO steps (report_id, step, name, source, series, start_ns, end_ns, duration_ns, steady) "
        "VALUES (9, 0, 'step 0', 'nvtx', 1, 10, 20, 10, true)"
    )
    held: dict[tuple, int] = {}
    expected_held = []
    for ts, pid, memory, op, size in events:
        held[(pid, memory)] = held.get((pid, memory), 0) + (size if op == "alloc" else -size)
        expected_held.append(((pid, memory), ts, held[(pid, memory)]))
    got = [
        ((r["pid"], r["memory"]), r["ts_ns"], r["held_bytes"]) for r in _rows(workspace, "memory_timeline")
    ]
    assert sorted(got, key=str) == sorted(expected_held, key=str)
    steps = {(r["pid"], r["memory"]): r for r in _rows(workspace, "memory_steps")}
    assert set(steps) == {(1, "device"), (1, "device_static"), (None, "device")}
    for key, r in steps.items():
        mine = [
            (ts, op, size, h)
            for (k, ts, h), (_, _, _, op, size) in zip(expected_held, events, strict=True)
            if k == key
        ]
        inside = [(op, size, h) for ts, op, size, h in mine if 10 <= ts <= 20]
        start = ([h for ts, _, _, h in mine if ts < 10] or [0])[-1]
        assert r["held_start_bytes"] == start
        assert r["held_end_bytes"] == ([h for ts, _, _, h in mine if ts <= 20] or [0])[-1]
        assert r["peak_bytes"] == max([start] + [h for _, _, h in inside])
        assert (r["allocations"], r["frees"]) == (
            sum(op == "alloc" for op, _, _ in inside),
            sum(op == "free" for op, _, _ in inside),
        )
        assert (r["allocated_bytes"], r["freed_bytes"]) == (
            sum(size for op, size, _ in inside if op == "alloc"),
            sum(size for op, size, _ in inside if op == "free"),
        )
    assert (steps[(1, "device_static")]["held_start_bytes"], steps[(1, "device_static")]["peak_bytes"]) == (
        1000,
        1000,
    )


def test_memory_steps_with_stated_counts_tied_steps_and_a_step_without_events(workspace) -> None:
    """Where the source states what is held (allocated_bytes) the steps follow it; two steps that
    start at the same time, a step that starts when another ends, events tied with those times
    and a step with no events at all each get their own counts, peaks and held bytes."""
    events = [  # ts, operation, bytes, allocated_bytes after it (stated by the source)
        (3, "alloc", 10, 110),
        (10, "alloc", 5, 115),
        (10, "free", 7, 108),
        (14, "alloc", 40, 148),
        (20, "free", 48, 100),
        (20, "alloc", 1, 101),
        (33, "alloc", 9, 110),
    ]
    for ts, op, size, allocated in events:
        workspace.execute(
            "INSERT INTO memory_events (report_id, device_id, pid, ts_ns, operation, bytes, delta_bytes, "
            "memory, allocated_bytes) VALUES (9, 0, 1, ?, ?, ?, ?, 'device', ?)",
            [ts, op, size, size if op == "alloc" else -size, allocated],
        )
    steps = [(0, 1, 10, 20), (1, 1, 20, 25), (0, 2, 10, 14), (1, 2, 26, 30)]  # step, series, start, end
    for step, series, start, end in steps:
        workspace.execute(
            "INSERT INTO steps (report_id, step, name, source, series, start_ns, end_ns, duration_ns, steady) "
            "VALUES (9, ?, ?, 'nvtx', ?, ?, ?, ?, true)",
            [step, f"step {step}", series, start, end, end - start],
        )
    got = {(r["start_ns"], r["end_ns"]): r for r in _rows(workspace, "memory_steps")}
    assert len(got) == len(steps)
    initial = 110 - 10  # the stated count less the first event's own bytes
    for _, _, start, end in steps:
        inside = [(op, size, held) for ts, op, size, held in events if start <= ts <= end]
        start_bytes = ([held for ts, _, _, held in events if ts < start] or [initial])[-1]
        r = got[(start, end)]
        assert r["held_start_bytes"] == start_bytes
        assert r["held_end_bytes"] == ([held for ts, _, _, held in events if ts <= end] or [initial])[-1]
        assert r["peak_bytes"] == max([start_bytes] + [held for _, _, held in inside])
        assert r["allocations"] == sum(op == "alloc" for op, _, _ in inside)
        assert r["frees"] == sum(op == "free" for op, _, _ in inside)
        assert r["allocated_bytes"] == sum(size for op, size, _ in inside if op == "alloc")
        assert r["freed_bytes"] == sum(size for op, size, _ in inside if op == "free")
    # the step without events holds what the one before it ended with
    assert (got[(26, 30)]["held_start_bytes"], got[(26, 30)]["peak_bytes"]) == (101, 101)
    assert got[(10, 20)]["peak_bytes"] == 148


# --- power logs ---------------------------------------------------------------------------


def test_nvml_log_is_ingested_as_written(pair) -> None:
    con, ids = pair
    for run in RUNS:
        log = _nvml(run)
        n, mean_w, first_j, last_j, start = con.execute(
            "SELECT count(*), avg(power_w), arg_min(energy_j, ts_utc_ns), arg_max(energy_j, ts_utc_ns), "
            "min(ts_utc_ns) FROM power_samples WHERE report_id = ?",
            [ids[run][1]],
        ).fetchone()
        assert n == len(log)
        assert mean_w == pytest.approx(statistics.fmean(r["power_mw"] for r in log) / 1000, rel=1e-12)
        assert (first_j, last_j) == pytest.approx((log[0]["energy_mj"] / 1000, log[-1]["energy_mj"] / 1000))
        session = con.execute("SELECT session_start_utc_ns FROM reports WHERE report_id = ?", [ids[run][1]])
        assert session.fetchone()[0] == start == log[0]["timestamp_ns"]


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris"])
def test_nvidia_smi_times_are_read_in_the_zone_given(tmp_path: Path, zone: str) -> None:
    path = realdata("power", SMI.format("fused"))
    db = str(tmp_path / "w.duckdb")
    res = invoke("ingest", "--db", db, "--timezone", zone, str(path))
    assert res.exit_code == 0, res.output
    assert f"power samples (local times read as {zone}, as --timezone said)" in res.output
    with path.open() as fh:
        rows = list(csv.reader(fh, skipinitialspace=True))
    first = datetime.strptime(rows[1][0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=ZoneInfo(zone))
    watts = [float(r[3].split()[0]) for r in rows[1:]]
    res = invoke(
        "sql",
        "--db",
        db,
        "SELECT min(ts_utc_ns), count(*), avg(power_w) FROM power_samples",
        "--format",
        "csv",
    )
    start, n, mean_w = res.output.strip().splitlines()[1].split(",")
    assert int(start) == round(first.timestamp() * 1000) * 1_000_000
    assert (int(n), float(mean_w)) == (len(watts), pytest.approx(statistics.fmean(watts)))


def test_a_power_log_is_no_capture_without_gpu_activity(pair) -> None:
    con, ids = pair
    for run in RUNS:
        assert nsa.findings(con, report_id=ids[run][1]) == []


def test_nvidia_smi_times_default_to_this_machines_zone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    path = realdata("power", SMI.format("foreach"))
    db = str(tmp_path / "w.duckdb")
    res = invoke("ingest", "--db", db, str(path))
    assert (
        "local times read as Asia/Tokyo, this machine's zone: pass --timezone if the log was written"
        in res.output
    )
    first = path.read_text().splitlines()[1].split(",")[0]  # the first sample's timestamp
    local = datetime.strptime(first, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=ZoneInfo("Asia/Tokyo"))
    res = invoke("sql", "--db", db, "SELECT min(ts_utc_ns) FROM power_samples", "--format", "csv")
    assert int(res.output.split()[1]) == round(local.timestamp() * 1000) * 1_000_000


def test_a_power_log_attaches_only_to_the_captures_it_covers(tmp_path: Path, real_sqlite) -> None:
    """The nvidia-smi log of the fused run was written on a machine set to UTC: read as UTC it
    covers the capture's session (TARGET_INFO_SESSION_START_TIME); read as Paris time it is an
    hour off and attaches to nothing, and the energy query says so."""
    nsys = real_sqlite(NSYS.format("fused"))
    session = _session_start(sqlite3.connect(nsys))
    smi = realdata("power", SMI.format("fused"))
    for zone, attached in (("UTC", True), ("Europe/Paris", False)):
        con = nsa.connect(tmp_path / f"{zone.replace('/', '_')}.duckdb")
        rid = nsa.ingest(con, nsys).report_id
        nsa.ingest(con, smi, options={"timezone": zone})
        lo, hi = con.execute("SELECT min(ts_utc_ns), max(ts_utc_ns) FROM power_samples").fetchone()
        assert (lo < session < hi) is attached
        run = next(r for r in _rows(con, "energy", report_id=rid) if r["name"] == "report")
        assert run["method"] == ("power readings" if attached else "no power log")
        assert (run["coverage"] == 1.0) is attached
        con.close()


def test_bad_power_logs_are_refused_in_one_sentence(tmp_path: Path) -> None:
    db = str(tmp_path / "w.duckdb")
    nvml = tmp_path / "power.csv"
    nvml.write_text(
        "timestamp_ns,gpu,power_mw,energy_mj\n1795501641817245457,0,72432,26779265\n1795501641.8,0,72432,1\n"
    )
    res = CliRunner().invoke(main, ["ingest", "--db", db, str(nvml)])
    assert res.exit_code == EXIT_ERROR
    assert (
        "line 3: timestamp_ns is '1795501641.8'; it must be the UTC wall clock in integer nanoseconds"
        in res.output
    )
    assert "Traceback" not in res.output and res.output.count("\n") == 1
    smi = tmp_path / "smi.csv"
    smi.write_text(
        "timestamp, index, power.draw [W]\n2026/11/24 06:27:21.599, 0, 72.40 W\nyesterday, 0, 72.40 W\n"
    )
    res = CliRunner().invoke(main, ["ingest", "--db", db, "--timezone", "UTC", str(smi)])
    assert res.exit_code == EXIT_ERROR and "line 3: timestamp 'yesterday' is not nvidia-smi's" in res.output
    res = CliRunner().invoke(main, ["ingest", "--db", db, "--timezone", "Mars/Olympus", str(smi)])
    assert res.exit_code == EXIT_ERROR and "--timezone 'Mars/Olympus' is not a time zone" in res.output
    res = invoke("sql", "--db", db, "SELECT count(*) FROM reports", "--format", "csv")
    assert res.output.split() == ["count_star()", "0"]  # nothing was written


def test_a_log_cut_mid_line_loses_that_line_only(tmp_path: Path) -> None:
    """What a sampler killed mid-write leaves: the last line without its end, cut short."""
    lines = realdata("power", NVML.format("fused")).read_text().splitlines()
    cut = tmp_path / "cut.csv"
    cut.write_text("\n".join(lines[:50]) + "\n" + lines[50][:-3])  # the counter lost digits
    res = invoke("ingest", "--db", str(tmp_path / "w.duckdb"), str(cut))
    assert res.exit_code == 0
    assert "cut.csv: ingested as report 1 (nvml): 49 power samples." in res.output
    assert (
        "warning: cut.csv line 51 has no line end (the logger stopped mid-line); it was left out."
        in res.output
    )


# --- energy -------------------------------------------------------------------------------


def _cumulative(log: list[dict[str, int]]):
    """E(t): the energy counter through its updates (the first sample showing each new value),
    linear in between: the energy a window holds is E(end) - E(start)."""
    ts, joules = [], []
    for row in log:
        if not joules or row["energy_mj"] != joules[-1] * 1000:
            ts.append(row["timestamp_ns"])
            joules.append(row["energy_mj"] / 1000)

    def at(t: float) -> float:
        i = bisect_right(ts, t) - 1
        return joules[i] + (joules[i + 1] - joules[i]) * (t - ts[i]) / (ts[i + 1] - ts[i])

    return at


def test_joules_per_step_foreach_against_fused(pair, real_sqlite) -> None:
    """Joules per steady step from nsa alone, against the NVML counter read here: E(t) through
    the counter's updates, on the capture's timeline by TARGET_INFO_SESSION_START_TIME. Step 0
    is the warm-up (longer than 1.5x the median step), so the steady state is steps 1-24."""
    con, ids = pair
    per_step = {}
    for run in RUNS:
        db = sqlite3.connect(real_sqlite(NSYS.format(run)))
        t0, steps = _session_start(db), _steps(db)
        assert steps[0][2] - steps[0][1] > 1.5 * statistics.median(e - s for _, s, e in steps)
        energy = _cumulative(_nvml(run))
        start, end = steps[1][1], steps[-1][2]
        expected = (energy(t0 + end) - energy(t0 + start)) / (len(steps) - 1)
        rows = _rows(con, "energy", report_id=ids[run][0], items_per_step=32)
        steady = next(r for r in rows if r["scope"] == "run" and r["name"] == "steady")
        assert (steady["start_ns"], steady["end_ns"], steady["instances"]) == (start, end, len(steps) - 1)
        assert steady["energy_per_instance_j"] == pytest.approx(expected, rel=1e-9)
        assert steady["energy_per_item_j"] == pytest.approx(expected / 32, rel=1e-9)
        assert steady["method"] == "energy counter" and steady["power_report_id"] == ids[run][1]
        # each step row is the same arithmetic on its own window
        for name, s, e in steps:
            row = next(r for r in rows if r["scope"] == "step" and r["name"] == name)
            assert row["energy_j"] == pytest.approx(energy(t0 + e) - energy(t0 + s), rel=1e-9)
        per_step[run] = (expected, steady["error_j"] / steady["instances"])
    # measured: foreach 12.63 J/step, fused 11.07 J/step (bounds 2.7 and 1.9 J/step: the two
    # 100 ms counter intervals at the window's edges could hold all or none of their energy)
    assert per_step["foreach"][0] == pytest.approx(12.63, abs=0.01)
    assert per_step["fused"][0] == pytest.approx(11.07, abs=0.01)


def test_the_counter_checks_the_power_integral(pair, real_sqlite) -> None:
    """Over the whole log, the NVML power readings integrated agree with the energy counter's
    delta to 0.5%: the readings are one-second averages (NVML on Hopper), which only shifts
    energy by the second the average lags, and the logs start and end idle (measured: 0.01%
    and 0.19%). Over the capture's span the readings lag the load (they run 9-12% low), which
    is why `energy` integrates the counter; its readings_j column is that integral, computed
    here from the CSV, and energy_j stays within its stated error of the counter's delta."""
    con, ids = pair
    for run in RUNS:
        log = _nvml(run)
        ts = [r["timestamp_ns"] for r in log]
        watts = [r["power_mw"] / 1000 for r in log]
        integral = sum(w * (b - a) / 1e9 for w, a, b in zip(watts, ts, ts[1:]))
        delta = (log[-1]["energy_mj"] - log[0]["energy_mj"]) / 1000
        assert integral == pytest.approx(delta, rel=0.005)
        db = sqlite3.connect(real_sqlite(NSYS.format(run)))
        t0 = _session_start(db)
        last = db.execute(
            'SELECT max(e) FROM (SELECT max("end") AS e FROM CUPTI_ACTIVITY_KIND_KERNEL '
            'UNION ALL SELECT max("end") FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT max("end") '
            "FROM CUPTI_ACTIVITY_KIND_MEMSET UNION ALL SELECT max(\"end\") FROM NVTX_EVENTS WHERE text GLOB 'step *')"
        ).fetchone()[0]
        lo, hi = t0, t0 + last
        readings = sum(w * max(0, min(b, hi) - max(a, lo)) / 1e9 for w, a, b in zip(watts, ts, ts[1:]))
        run_row = next(r for r in _rows(con, "energy", report_id=ids[run][0]) if r["name"] == "report")
        assert (run_row["start_ns"], run_row["end_ns"]) == (0, last)
        assert run_row["readings_j"] == pytest.approx(readings, rel=1e-9)
        energy = _cumulative(log)
        assert run_row["energy_j"] == pytest.approx(energy(hi) - energy(lo), rel=1e-9)
        stepped = next(r["energy_mj"] for r in reversed(log) if r["timestamp_ns"] <= hi) - next(
            r["energy_mj"] for r in reversed(log) if r["timestamp_ns"] <= lo
        )
        assert abs(run_row["energy_j"] - stepped / 1000) <= run_row["error_j"]
        assert 0.85 < readings / run_row["energy_j"] < 0.95


def test_kernel_energy_adds_up_to_the_run(pair) -> None:
    """Every power interval's energy goes to the work running in it or to '(idle)': the kernel
    scope sums to the run's energy, and the work's rows never claim more than their intervals."""
    con, ids = pair
    for run in RUNS:
        rows = _rows(con, "energy", report_id=ids[run][0])
        total = next(r["energy_j"] for r in rows if r["scope"] == "run" and r["name"] == "report")
        kernels = [r for r in rows if r["scope"] == "kernel"]
        assert sum(r["energy_j"] for r in kernels) == pytest.approx(total, rel=1e-9)
        idle = next(r for r in kernels if r["name"] == "(idle)")
        assert 0 < idle["energy_j"] < total
        assert all(r["coverage"] == 1.0 and r["samples"] > 0 for r in kernels if r["name"] != "(idle)")


def test_energy_splits_power_intervals_at_their_edges(workspace) -> None:
    """Hand-built: a power log on device 0 read every 100 ms, 100 W then 200 W, a missing reading
    (a hole from 200 to 400 ms), 300 W, and a last sample at 500 ms: intervals A [0, 100) 10 J,
    B [100, 200) 20 J, C [400, 500) 30 J. Kernel a [50, 150] crosses A's end, b [150, 450] reaches
    over the hole from B into C, a again [410, 420], c [250, 300] sits in the hole; the NVTX range
    r [90, 410] spans A's end to C's start. Each interval's energy goes to the work in it by time
    run (over the interval's length, or the busy time when work overlaps): A: a 50/100 of 10 J;
    B: a and b 50/100 each of 20 J; C: b 50/100 and a 10/100 of 30 J. A window takes the share
    of each interval it covers: r 10/100 of A, all of B, 10/100 of C; the run (0 to the last
    end, 450 ms) A, B and half of C."""
    from rows import insert

    ms, t0 = 1_000_000, 1_000_000_000_000_000_000
    insert(workspace, "reports", [
        {"report_id": 1, "format": "nsys", "source_path": "a.sqlite", "sha256": "a", "session_start_utc_ns": t0},
        {"report_id": 2, "format": "nvml", "source_path": "p.csv", "sha256": "p"},
    ])  # fmt: skip
    samples = [(0, 100.0), (100, 200.0), (200, None), (400, 300.0), (500, 50.0)]
    insert(workspace, "power_samples", [
        {"report_id": 2, "device_id": 0, "ts_utc_ns": t0 + t * ms, "power_w": w, "source": "nvml"} for t, w in samples
    ])  # fmt: skip
    kernels = [("a", 50, 150), ("b", 150, 450), ("a", 410, 420), ("c", 250, 300)]
    insert(workspace, "kernels", [
        {"report_id": 1, "device_id": 0, "stream_id": 7, "pid": 1, "start_ns": s * ms, "end_ns": e * ms,
         "duration_ns": (e - s) * ms, "name": n, "correlation_id": i}
        for i, (n, s, e) in enumerate(kernels)
    ])  # fmt: skip
    insert(workspace, "nvtx_ranges", [
        {"report_id": 1, "pid": 1, "tid": 1, "start_ns": 90 * ms, "end_ns": 410 * ms, "name": "r", "base_name": "r"}
    ])  # fmt: skip
    rows = {(r["scope"], r["name"]): r for r in _rows(workspace, "energy", report_id=1)}
    a_j, b_j, c_j = 10.0, 20.0, 30.0
    expected = {
        ("run", "report"): a_j + b_j + c_j / 2,
        ("range", "r"): a_j * 0.1 + b_j + c_j * 0.1,
        ("kernel", "a"): a_j * 0.5 + b_j * 0.5 + c_j * 0.1,
        ("kernel", "b"): b_j * 0.5 + c_j * 0.5,
    }
    expected[("kernel", "(idle)")] = (
        expected[("run", "report")] - expected[("kernel", "a")] - expected[("kernel", "b")]
    )
    assert {k: rows[k]["energy_j"] for k in expected} == pytest.approx(expected, rel=1e-12)
    assert ("kernel", "c") not in rows  # in the hole: no power interval to share
    assert (
        rows[("kernel", "a")]["samples"],
        rows[("kernel", "b")]["samples"],
        rows[("range", "r")]["samples"],
    ) == (3, 2, 3)
    assert rows[("run", "report")]["method"] == "power readings"
