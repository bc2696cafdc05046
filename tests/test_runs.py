"""Runs: the ranks of a multi-GPU job made one unit (nsight_analytics.ingest.runs, `nsa ingest --run`).

Expected ranks, processes, GPUs and clock offsets are read with plain sqlite3 / json from the
captured files themselves (tests/data/ddp: fixtures/captures/capture_ddp.sh on 4 H200s), never
from nsa's output.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsight_analytics.cli import main
from nsight_analytics.ingest import runs
from rows import gunzipped_sqlite

DDP = Path(__file__).resolve().parent / "data" / "ddp"
W4 = sorted((DDP / "nsys").glob("h200x4_nsys2025.3_ddp_w4_rank*.sqlite.gz"))
JOB = DDP / "nsys" / "h200x4_nsys2025.3_ddp_w4_job.sqlite.gz"


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def env_of(con: sqlite3.Connection) -> dict[str, str]:
    (text,) = con.execute(
        "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'"
    ).fetchone()
    return dict(item.partition("=")[::2] for item in text.split(";") if "=" in item)


@pytest.mark.parametrize(
    "names, ranks",
    [
        (["job_rank0.sqlite", "job_rank1.sqlite"], [0, 1]),
        (["out_3.nsys-rep", "out_1.nsys-rep", "out_2.nsys-rep"], [3, 1, 2]),  # nsys -o out_%q{RANK}
        (["a/rank0.json.gz", "a/rank1.json.gz"], [0, 1]),
        (["run7_rank-02.sqlite.gz", "run7_rank-05.sqlite.gz"], [2, 5]),
        (["before.sqlite", "after.sqlite"], None),  # no rank in either name
        (["w4_r1_0.sqlite", "w4_r2_1.sqlite"], None),  # two numbers vary: which is the rank?
        (["train_ranked.sqlite", "train_rank.sqlite"], None),
    ],
)
def test_ranks_read_from_file_names(names, ranks):
    assert runs.ranks_from_names(names) == ranks


def test_run_names_leave_the_rank_out():
    assert (
        runs.run_name(["x/h200x4_ddp_w4_rank0.sqlite.gz", "x/h200x4_ddp_w4_rank1.sqlite.gz"])
        == "h200x4_ddp_w4"
    )
    assert runs.run_name(["traces/ddp_w2/rank0.json.gz", "traces/ddp_w2/rank1.json.gz"]) == "ddp_w2"


def test_per_rank_nsys_reports_form_a_run_with_ranks_from_their_environment(tmp_path):
    db = str(tmp_path / "w.duckdb")
    res = cli("ingest", "-q", "--db", db, *map(str, W4))
    assert res.exit_code == 0, res.output
    assert "run 1 (h200x4_nsys2025.3_ddp_w4): 4 ranks" in res.output
    import nsight_analytics as nsa

    con = nsa.connect(db, read_only=True)
    got = con.execute(
        "SELECT k.rank, k.local_rank, k.device_id, k.clock_offset_ns, r.source_path, k.rank_source, r.host "
        "FROM ranks k JOIN reports r USING (report_id) ORDER BY rank"
    ).fetchall()
    starts, expected = {}, {}
    for path in W4:
        src = gunzipped_sqlite(path, tmp_path)
        env = env_of(src)
        (start,) = src.execute("SELECT min(utcEpochNs) FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        (device,) = src.execute(
            "SELECT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY deviceId ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()
        (host,) = src.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'").fetchone()
        rank = int(env["RANK"])
        starts[rank] = start
        expected[rank] = (int(env["LOCAL_RANK"]), device, path.name, host)
    origin = min(starts.values())
    assert [g[0] for g in got] == sorted(expected) == [0, 1, 2, 3]
    for rank, local, device, offset, source_path, source, host in got:
        assert (local, device, Path(source_path).name, host) == expected[rank]
        assert offset == starts[rank] - origin
        assert source == "environment"
    (world, clock) = con.execute("SELECT world_size, clock_source FROM runs").fetchone()
    assert (world, clock) == (4, "session start")
    con.close()


def test_one_report_of_a_whole_job_is_a_run_of_its_gpu_processes(tmp_path):
    db = str(tmp_path / "w.duckdb")
    assert cli("ingest", "-q", "--db", db, str(JOB)).exit_code == 0
    src = gunzipped_sqlite(JOB, tmp_path)
    procs = src.execute(
        "SELECT (globalPid >> 24) & 16777215 AS pid, min(deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "GROUP BY pid ORDER BY min(deviceId)"
    ).fetchall()
    import nsight_analytics as nsa

    con = nsa.connect(db, read_only=True)
    got = con.execute(
        "SELECT rank, pid, device_id, rank_source, clock_offset_ns FROM ranks ORDER BY rank"
    ).fetchall()
    assert [(p, d) for _, p, d, _, _ in got] == procs and len(procs) == 4
    assert [g[0] for g in got] == [0, 1, 2, 3]
    assert {g[3] for g in got} == {"processes"} and {g[4] for g in got} == {0}
    assert con.execute("SELECT clock_source, clock_uncertainty_ns FROM runs").fetchone() == ("one report", 0)
    # the report holds several ranks: no single rank on the report itself
    assert con.execute("SELECT rank, run_id FROM reports").fetchone() == (None, 1)
    con.close()


def test_kineto_traces_of_one_job_form_a_run_from_distributed_info(tmp_path):
    db = str(tmp_path / "w.duckdb")
    folder = DDP / "kineto" / "ddp_w2"
    res = cli("ingest", "-q", "--db", db, str(folder))
    assert res.exit_code == 0, res.output
    expected = {}
    for f in sorted(folder.glob("*.json.gz")):
        with gzip.open(f) as fh:
            trace = json.load(fh)
        expected[trace["distributedInfo"]["rank"]] = f.name
    import nsight_analytics as nsa

    con = nsa.connect(db, read_only=True)
    got = con.execute(
        "SELECT k.rank, regexp_extract(r.source_path, '[^/]+$'), k.rank_source FROM ranks k JOIN reports r "
        "USING (report_id) ORDER BY rank"
    ).fetchall()
    assert {r: n for r, n, _ in got} == expected and {s for *_, s in got} == {"distributedInfo"}
    assert con.execute("SELECT name, world_size FROM runs").fetchone() == ("ddp_w2", 2)
    con.close()


def test_a_tar_of_rank_files_with_run_is_one_named_run(tmp_path):
    archive = tmp_path / "job.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for f in sorted((DDP / "kineto" / "ddp_w4").glob("*.json.gz")):
            tar.add(f, arcname=f"job/{f.name}")
        log = tmp_path / "notes.txt"
        log.write_text("not a trace\n")
        tar.add(log, arcname="job/notes.txt")
    db = str(tmp_path / "ws" / "w.duckdb")
    (tmp_path / "ws").mkdir()
    res = cli("ingest", "-q", "--db", db, "--run", "nightly", str(archive))
    assert res.exit_code == 0, res.output
    assert "notes.txt: skipped" in res.output
    assert "run 1 (nightly): 4 ranks" in res.output
    res = cli("runs", "--db", db, "--format", "csv")
    assert "nightly" in res.output
    # a library query of reports, over the run: every rank's report answers
    res = cli("query", "kernel_summary", "--db", db, "--run", "nightly", "--format", "csv")
    assert res.exit_code == 0, res.output
    assert {line.split(",")[0] for line in res.output.splitlines()[1:]} == {"1", "2", "3", "4"}


def test_two_reports_of_the_same_rank_are_refused_and_nothing_is_made(tmp_path):
    db = str(tmp_path / "w.duckdb")
    two = [
        DDP / "nsys" / "h200x4_nsys2025.3_ddp_w4_rank0.sqlite.gz",
        DDP / "nsys" / "h200x4_nsys2025.3_ddp_w4_slow2_rank0.sqlite.gz",
    ]
    res = CliRunner().invoke(main, ["ingest", "-q", "--db", db, "--run", "bad", *map(str, two)])
    assert res.exit_code == 2
    assert "both hold rank 0" in res.output and "Traceback" not in res.output
    import nsight_analytics as nsa

    con = nsa.connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM ranks").fetchone() == (0,)
    con.close()


def test_an_unknown_run_names_the_runs_there_are(tmp_path):
    db = str(tmp_path / "w.duckdb")
    cli("ingest", "-q", "--db", db, str(DDP / "kineto" / "ddp_w2"))
    res = CliRunner().invoke(main, ["query", "kernel_summary", "--db", db, "--run", "nope"])
    assert res.exit_code == 2
    assert "no run 'nope'" in res.output and "1 (ddp_w2)" in res.output


def _end_spreads(con, run_id: int) -> list[int]:
    """How far apart each collective held by every rank ends, on the run's clock."""
    rows = con.execute(
        "SELECT max(end_ns) - min(end_ns) FROM collectives WHERE run_id = ? GROUP BY channel, seq "
        "HAVING count(*) = (SELECT ranks_seen FROM runs WHERE run_id = ?)",
        [run_id, run_id],
    ).fetchall()
    return sorted(r[0] for r in rows)


@pytest.mark.parametrize(
    "files", [W4, sorted((DDP / "kineto" / "ddp_w4_slow2").glob("*.json.gz"))], ids=["nsys", "kineto"]
)
def test_clocks_aligned_on_session_starts_line_collective_ends_up(tmp_path, files):
    """A collective completes on every rank within microseconds of the last arrival: once the
    ranks' clocks are aligned, the same collective's ends meet, and the run states that spread."""
    import nsight_analytics as nsa

    con = nsa.connect(tmp_path / "w.duckdb")
    ids = [nsa.ingest(con, f).report_id for f in files]
    run_id = nsa.make_run(con, ids, "job")
    spreads = _end_spreads(con, run_id)
    assert len(spreads) >= 40
    median = spreads[len(spreads) // 2]
    assert median < 200_000  # 0.2 ms, against steps of 5-18 ms
    (clock, unc) = con.execute("SELECT clock_source, clock_uncertainty_ns FROM runs").fetchone()
    assert clock == "session start" and unc == pytest.approx(median, abs=60_000)
    con.close()


def test_without_wall_clocks_ranks_are_aligned_on_collective_ends(tmp_path):
    """Hosts differ or a report has no wall clock: the offsets come from the collectives' ends and
    agree with what the session starts say on one host."""
    import nsight_analytics as nsa

    con = nsa.connect(tmp_path / "w.duckdb")
    ids = [nsa.ingest(con, f).report_id for f in sorted((DDP / "kineto" / "ddp_w4").glob("*.json.gz"))]
    assert nsa.group_runs(con, ids) == [1]  # distributedInfo: one job of 4
    by_wall = dict(con.execute("SELECT rank, clock_offset_ns FROM ranks WHERE run_id = 1").fetchall())
    con.execute("UPDATE reports SET host = 'node' || report_id")  # as if each rank ran on its own host
    run_id = nsa.make_run(con, ids, "job")
    (clock, unc) = con.execute(
        "SELECT clock_source, clock_uncertainty_ns FROM runs WHERE run_id = ?", [run_id]
    ).fetchone()
    assert clock == "collective ends" and unc is not None and unc < 200_000
    by_ends = dict(
        con.execute("SELECT rank, clock_offset_ns FROM ranks WHERE run_id = ?", [run_id]).fetchall()
    )
    shift = by_ends[0] - by_wall[0]
    for rank, offset in by_wall.items():
        assert by_ends[rank] - offset == pytest.approx(shift, abs=200_000)
    con.close()


def test_profiler_named_traces_of_one_job_form_one_run(tmp_path):
    """tensorboard_trace_handler names each rank's trace `HOST_PID.TIME.pt.trace.json`: nothing
    in the names is a rank; distributedInfo is, and the traces of one folder and world size with
    distinct ranks are one job. Two jobs of the same world size in one folder split by name."""
    import nsight_analytics as nsa

    folder = tmp_path / "traces"
    folder.mkdir()
    for i, f in enumerate(sorted((DDP / "kineto" / "ddp_w4").glob("*.json.gz"))):
        shutil.copy(f, folder / f"node{i % 2}_{4242 + 17 * i}.{1790000000123 + 7 * i}.pt.trace.json.gz")
    for i, f in enumerate(sorted((DDP / "kineto" / "ddp_w4_slow2").glob("*.json.gz"))):
        shutil.copy(f, folder / f"slow_rank{i}.pt.trace.json.gz")
    con = nsa.connect(tmp_path / "w.duckdb")
    ids = [nsa.ingest(con, f).report_id for f in sorted(folder.iterdir())]
    runs_made = nsa.group_runs(con, ids)
    sizes = sorted(r[0] for r in con.execute("SELECT ranks_seen FROM runs").fetchall())
    assert len(runs_made) == 2 and sizes == [4, 4]
    (slow,) = [r for r in con.execute("SELECT run_id, name FROM runs").fetchall() if r[1] == "slow"]
    assert [
        r[0]
        for r in con.execute("SELECT rank FROM ranks WHERE run_id = ? ORDER BY rank", [slow[0]]).fetchall()
    ] == [0, 1, 2, 3]
    con.close()


def test_ranks_ingested_one_at_a_time_join_their_run(tmp_path):
    """A CI job that ingests each rank's trace as it arrives still ends with one run of the job."""
    db = str(tmp_path / "w.duckdb")
    files = sorted((DDP / "kineto" / "ddp_w4").glob("*.json.gz"))
    for f in files:
        res = cli("ingest", "-q", "--db", db, str(f))
        assert res.exit_code == 0, res.output
    import nsight_analytics as nsa

    con = nsa.connect(db, read_only=True)
    assert con.execute("SELECT name, world_size, ranks_seen FROM runs").fetchall() == [("ddp_w4", 4, 4)]
    assert [r[0] for r in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()] == [0, 1, 2, 3]
    con.close()
