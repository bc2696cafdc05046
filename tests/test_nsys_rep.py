"""`.nsys-rep` files ingested through the user's own nsys (readers/nsys_rep.py).

The success path runs a real nsys (Debian's 2022.4 on CI: `.ci/run` installs it) on a report
that nsys recorded (tests/data/nsys-rep/, made by fixtures/captures/capture_nsys_rep.sh), and
compares the rows with an export the test makes itself with the same nsys, read with sqlite3.
The error paths use small fake nsys programs that fail the way nsys does.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
import xxhash
from click.testing import CliRunner
from test_cli_everyday import state

import nsight_analytics as nsa
from conftest import ROOT, realdata
from nsight_analytics import api
from nsight_analytics.cli import EXIT_ERROR, EXIT_OK, main
from nsight_analytics.ingest import detect_format
from nsight_analytics.ingest.nsys import nsys_cli

REP_GZ = ROOT / "tests" / "data" / "nsys-rep" / "cpu_nsys2022.4_osrt.nsys-rep.gz"
REP_NAME = "cpu_nsys2022.4_osrt.nsys-rep"
# The version nsys 2022.4 writes into the report's trailer (`strings` on the file shows it).
REP_WRITER = "2022.4.2.1-df9881f"
STORM = "h100_nsys2025.3_storm_cudagraph.nsys-rep"
STORM_WRITER = "2025.3.1.0"  # the same trailer field in the 2025.3 report


@dataclass(frozen=True)
class Capture:
    nsys: Path  # a real nsys that opens the report
    report: Path  # the plain .nsys-rep
    export: Path  # the test's own `nsys export --type sqlite` of it


def _real_nsys() -> Path | None:
    found = os.environ.get("NSYS") or shutil.which("nsys")
    return Path(found) if found and os.access(found, os.X_OK) else None


def _version(nsys: Path) -> str:
    out = subprocess.run([str(nsys), "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip().rsplit(" ", 1)[-1]  # "NVIDIA Nsight Systems version 2022.4.2.1-df9881f"


@pytest.fixture(scope="session")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Capture:
    nsys = _real_nsys()
    if nsys is None:
        pytest.skip("no nsys on PATH or in $NSYS (Debian: `apt-get install nsight-systems`, non-free)")
    folder = tmp_path_factory.mktemp("nsys_rep")
    report = folder / REP_NAME
    report.write_bytes(gzip.decompress(REP_GZ.read_bytes()))
    export = folder / "reference.sqlite"
    done = subprocess.run(
        [str(nsys), "export", "--type", "sqlite", "-o", str(export), str(report)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"{nsys} cannot export a 2022.4 report: {done.stderr.strip()[-200:]}")
    return Capture(nsys, report, export)


@pytest.fixture
def only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """only(nsys or None): that nsys is the only one nsa can find ($NSYS, nothing on PATH, no
    install folders)."""

    def use(nsys: Path | None) -> None:
        empty = tmp_path / "empty-path"
        empty.mkdir(exist_ok=True)
        monkeypatch.setenv("PATH", str(empty))
        monkeypatch.setattr(nsys_cli, "INSTALL_GLOBS", ())
        if nsys is None:
            monkeypatch.delenv("NSYS", raising=False)
        else:
            monkeypatch.setenv("NSYS", str(nsys))

    return use


def fake_nsys(folder: Path, body: str) -> Path:
    """An nsys that records each call in calls.log, answers --version as 2021.1.1.1-abc123, and
    runs `body` (Python, with `out`: the -o path, `argv`) for anything else."""
    path = folder / "fake" / "nsys"
    path.parent.mkdir(exist_ok=True)
    log = folder / "calls.log"
    path.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            f"""\
            import os, sys, time
            argv = sys.argv[1:]
            with open({str(log)!r}, "a") as fh:
                fh.write(" ".join(argv) + "\\n")
            if argv == ["--version"]:
                print("NVIDIA Nsight Systems version 2021.1.1.1-abc123")
                sys.exit(0)
            out = argv[argv.index("-o") + 1]
            """
        )
        + textwrap.dedent(body)
    )
    path.chmod(0o755)
    return path


def run(*args: str):
    return CliRunner(env={"COLUMNS": "80"}).invoke(main, list(args))


def cache_of(db: Path) -> Path:
    return Path(f"{db}.nsa-cache")


def content_hash(path: Path) -> str:
    """reports.content_hash of the file, computed here with xxhash itself."""
    return "xxh3_128-" + xxhash.xxh3_128(path.read_bytes()).hexdigest()


def assert_user_error(res, message: str) -> None:
    assert res.exit_code == EXIT_ERROR, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.stdout == ""
    assert res.stderr == f"Error: {message}\n"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A workspace that exists (so that 'unchanged' can be checked) and holds no report."""
    path = tmp_path / "w.duckdb"
    nsa.connect(path).close()
    return path


def reference(capture: Capture, sql: str) -> list[tuple]:
    with sqlite3.connect(capture.export) as con:
        return con.execute(sql).fetchall()


# --- detection -------------------------------------------------------------------------------


def test_reports_of_every_version_are_recognised_from_content(tmp_path: Path) -> None:
    renamed = tmp_path / "capture.bin"  # the name plays no part
    renamed.write_bytes(gzip.decompress(REP_GZ.read_bytes()))
    assert detect_format(renamed) == "nsys-rep"
    assert detect_format(REP_GZ) == "nsys-rep"
    assert detect_format(realdata("nsys-rep", STORM)) == "nsys-rep"  # 2025.3
    assert detect_format(realdata("nsys-rep", "jax_benchmark.nsys-rep")) == "nsys-rep"  # 2025.5


# --- through a real nsys -----------------------------------------------------------------------


def test_rows_equal_an_independent_export(capture: Capture, db: Path, only) -> None:
    only(capture.nsys)
    res = run("ingest", "--db", str(db), "--full", str(REP_GZ))
    assert res.exit_code == EXIT_OK, res.output
    (processes,) = reference(capture, "SELECT count(*) FROM PROCESSES")[0]
    (osrt,) = reference(capture, "SELECT count(*) FROM OSRT_API")[0]
    # OS runtime calls nsys kept a backtrace of (callchainId 0 or NULL: none) are the stack events
    (stacked,) = reference(capture, "SELECT count(*) FROM OSRT_API WHERE callchainId > 0")[0]
    events = f"{stacked:,} stack_events, " if stacked else ""
    assert (
        res.stdout
        == f"{REP_GZ.name}: ingested as report 1 (nsys-rep): {osrt:,} osrt_api, {events}{processes:,} processes.\n"
    )
    con = duckdb.connect(str(db), read_only=True)
    try:
        calls = reference(
            capture,
            'SELECT s.value, count(*), sum(o."end" - o.start) FROM OSRT_API o '
            "JOIN StringIds s ON s.id = o.nameId GROUP BY 1 ORDER BY 1",
        )
        assert calls and (
            con.execute(
                "SELECT name, count(*), sum(duration_ns) FROM osrt_api WHERE report_id = 1 GROUP BY 1 ORDER BY 1"
            ).fetchall()
            == calls
        )
        assert con.execute("SELECT count(*) FROM processes").fetchone() == (processes,)
        # cpu_app.py sleeps 20 ms five times
        sleeps = con.execute("SELECT duration_ns FROM osrt_api WHERE name = 'clock_nanosleep'").fetchall()
        assert len(sleeps) == 5 and all(d >= 20_000_000 for (d,) in sleeps)
        row = con.execute(
            "SELECT format, source_path, content_hash, tool_version, session_start_utc_ns, deferred_steps FROM reports"
        ).fetchone()
    finally:
        con.close()
    (version,) = reference(
        capture, "SELECT value FROM EXPORT_META_DATA WHERE name = 'EXPORT_PRODUCT_VERSION'"
    )[0]
    (start,) = reference(capture, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0]
    sha = content_hash(REP_GZ)
    assert row[:5] == ("nsys-rep", str(REP_GZ), sha, version, start)
    assert [p.name for p in cache_of(db).iterdir()] == [f"{sha}.sqlite"]


def test_progress_follows_nsys(capture: Capture, tmp_path: Path, only) -> None:
    only(capture.nsys)
    seen: list[tuple[str, int, int]] = []
    con = nsa.connect(tmp_path / "p.duckdb")
    try:
        nsa.ingest(con, capture.report, progress=lambda step, done, total: seen.append((step, done, total)))
    finally:
        con.close()
    export = [done for step, done, total in seen if step == "nsys export" and total == 100]
    assert export and export == sorted(export) and export[-1] == 100
    assert seen[-1] == ("done", seen[-1][1], seen[-1][1])  # then the SQLite reader's steps


def test_the_cache_is_reused_without_running_nsys(capture: Capture, db: Path, tmp_path: Path, only) -> None:
    only(capture.nsys)
    assert run("ingest", "--db", str(db), str(capture.report)).exit_code == EXIT_OK
    cached = cache_of(db) / f"{content_hash(capture.report)}.sqlite"
    made = cached.stat().st_mtime_ns
    only(fake_nsys(tmp_path, "sys.exit(1)\n"))
    res = run("ingest", "--db", str(db), "--replace", str(capture.report))
    assert res.exit_code == EXIT_OK, res.output
    assert res.stdout.startswith(f"{REP_NAME}: replaced as report 1 (nsys-rep)")
    # the deferred OS runtime rows come from the cached export too
    res = run("sql", "--db", str(db), "--format", "csv", "SELECT count(*) AS n FROM osrt_api")
    assert res.exit_code == EXIT_OK, res.output
    assert res.stdout == f"n\n{reference(capture, 'SELECT count(*) FROM OSRT_API')[0][0]}\n"
    assert not (tmp_path / "calls.log").exists()
    assert cached.stat().st_mtime_ns == made


def test_a_deferred_step_exports_again_when_the_cache_is_gone(capture: Capture, db: Path, only) -> None:
    only(capture.nsys)
    assert run("ingest", "--db", str(db), str(capture.report)).exit_code == EXIT_OK
    shutil.rmtree(cache_of(db))
    con = nsa.connect(db, load_deferred=False)
    try:
        (n,) = con.execute("SELECT count(*) FROM osrt_api").fetchone()
        assert n == 0  # still deferred
        api.materialise(con, ["osrt_api"])
        assert (
            con.execute("SELECT count(*) FROM osrt_api").fetchone()
            == reference(capture, "SELECT count(*) FROM OSRT_API")[0]
        )
    finally:
        con.close()
    assert (cache_of(db) / f"{content_hash(capture.report)}.sqlite").is_file()


def test_a_read_only_connection_exports_into_a_temporary_folder(capture: Capture, db: Path, only) -> None:
    only(capture.nsys)
    assert run("ingest", "--db", str(db), str(capture.report)).exit_code == EXIT_OK
    shutil.rmtree(cache_of(db))
    con = nsa.connect(db, read_only=True)
    try:
        api.materialise(con, ["osrt_api"])  # TEMP tables, from an export nsa may not keep
        assert (
            con.execute("SELECT count(*) FROM osrt_api").fetchone()
            == reference(capture, "SELECT count(*) FROM OSRT_API")[0]
        )
    finally:
        con.close()
    assert not cache_of(db).exists()


def test_the_export_goes_with_its_report(capture: Capture, db: Path, tmp_path: Path, only) -> None:
    only(capture.nsys)
    path = tmp_path / "run.nsys-rep"
    shutil.copy(capture.report, path)
    assert run("ingest", "--db", str(db), str(path)).exit_code == EXIT_OK
    first = content_hash(path)
    path.write_bytes(REP_GZ.read_bytes())  # other bytes at the same path (the same report, gzip'd)
    res = run("ingest", "--db", str(db), "--replace", str(path))
    assert res.exit_code == EXIT_OK, res.output
    assert res.stdout.startswith("run.nsys-rep: replaced as report 1 (nsys-rep)")
    assert first != content_hash(path)
    assert [p.name for p in cache_of(db).iterdir()] == [f"{content_hash(path)}.sqlite"]


def test_an_nsys_too_old_for_the_report_gives_way_to_the_next(
    capture: Capture, db: Path, tmp_path: Path, only, monkeypatch: pytest.MonkeyPatch
) -> None:
    only(
        fake_nsys(
            tmp_path, 'sys.stderr.write("Exportation error: Version not supported: 1\\n")\nsys.exit(1)\n'
        )
    )
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nsys").symlink_to(capture.nsys)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    res = run("ingest", "--db", str(db), str(capture.report))
    assert res.exit_code == EXIT_OK, res.output
    assert "export --type sqlite" in (tmp_path / "calls.log").read_text()  # $NSYS was tried first


def test_the_whole_path_from_nsys_profile(tmp_path: Path, only) -> None:
    """What CI can do with no GPU: record cpu_app.py with nsys, import the .qdstrm, ingest."""
    nsys = _real_nsys()
    if nsys is None:
        pytest.skip("no nsys on PATH or in $NSYS (Debian: `apt-get install nsight-systems`, non-free)")
    done = subprocess.run(
        ["bash", "fixtures/captures/capture_nsys_rep.sh", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:  # nsys itself, not nsa: a machine where it cannot record
        pytest.skip(f"nsys could not record cpu_app.py here: {done.stderr.strip()[-300:]}")
    (made,) = (tmp_path / "out").glob("*.nsys-rep.gz")
    only(nsys)
    db = tmp_path / "w.duckdb"
    res = run("ingest", "--db", str(db), "--full", str(made))
    assert res.exit_code == EXIT_OK, res.output
    con = duckdb.connect(str(db), read_only=True)
    try:
        # the five 20 ms sleeps: clock_nanosleep from Python 3.11 on, select() before (time.sleep)
        sleeps = con.execute(
            "SELECT count(*) FROM osrt_api WHERE duration_ns >= 19000000 "
            "AND name IN ('clock_nanosleep', 'nanosleep', 'select', 'pselect6')"
        ).fetchone()
        assert sleeps == (5,)
    finally:
        con.close()


# --- errors: exit 2, one sentence, nothing written ----------------------------------------------


def test_no_nsys_says_how_to_export(db: Path, only) -> None:
    only(None)
    before = state(db)
    assert_user_error(
        run("ingest", "--db", str(db), str(REP_GZ)),
        f"{REP_GZ} is an Nsight Systems report, and no nsys was found to export it (not on PATH, $NSYS "
        "unset, none in the usual install folders); install Nsight Systems "
        "(https://developer.nvidia.com/nsight-systems, or Debian's non-free `nsight-systems`) and set $NSYS "
        f"to its nsys if it is not on PATH, or run `nsys export --type sqlite {REP_NAME}` where nsys is and "
        "ingest the .sqlite file.",
    )
    assert state(db) == before
    assert not cache_of(db).exists()


def test_nsys_variable_pointing_nowhere(db: Path, tmp_path: Path, only) -> None:
    only(tmp_path / "nowhere" / "nsys")
    before = state(db)
    assert_user_error(
        run("ingest", "--db", str(db), str(REP_GZ)),
        f"$NSYS is {tmp_path / 'nowhere' / 'nsys'}, which is not an nsys executable; point it at the nsys "
        "of an Nsight Systems install (for example /opt/nvidia/nsight-systems/2025.3.1/bin/nsys) or unset it.",
    )
    assert state(db) == before


def test_a_report_too_new_for_debians_nsys(db: Path, only) -> None:
    storm = realdata("nsys-rep", STORM)
    nsys = _real_nsys()
    if nsys is None or not _version(nsys).startswith("2022."):
        pytest.skip("needs Debian's nsys 2022.4 (`apt-get install nsight-systems`, non-free)")
    only(nsys)
    before = state(db)
    assert_user_error(
        run("ingest", "--db", str(db), str(storm)),
        f"{storm} was recorded by Nsight Systems {STORM_WRITER}, and the nsys found ({nsys}, version "
        f"{_version(nsys)}, from $NSYS) is too old to open it (Exportation error: Version not supported: "
        f"36398880); set $NSYS to the nsys that recorded it or a newer one, or run `nsys export --type "
        f"sqlite {STORM}` on the machine that recorded it and ingest the .sqlite file.",
    )
    assert state(db) == before
    assert not cache_of(db).exists()


def test_too_old_as_nsys_says_it(db: Path, tmp_path: Path, only) -> None:
    report = tmp_path / REP_NAME
    report.write_bytes(gzip.decompress(REP_GZ.read_bytes()))
    nsys = fake_nsys(
        tmp_path, 'sys.stderr.write("Exportation error: Version not supported: 36398880\\n")\nsys.exit(1)\n'
    )
    only(nsys)
    before = state(db)
    assert_user_error(
        run("ingest", "--db", str(db), str(report)),
        f"{report} was recorded by Nsight Systems {REP_WRITER}, and the nsys found ({nsys}, version "
        "2021.1.1.1-abc123, from $NSYS) is too old to open it (Exportation error: Version not supported: "
        f"36398880); set $NSYS to the nsys that recorded it or a newer one, or run `nsys export --type "
        f"sqlite {REP_NAME}` on the machine that recorded it and ingest the .sqlite file.",
    )
    assert state(db) == before
    assert not cache_of(db).exists()


HALF_THEN_FAIL = """\
with open(out, "wb") as fh:
    fh.write(b"SQLite format 3\\x00" + bytes(4000))
sys.stderr.write("Processing events...\\nExportation error: No space left on device\\n")
sys.exit(1)
"""
HALF_THEN_KILLED = """\
with open(out, "wb") as fh:
    fh.write(b"SQLite format 3\\x00" + bytes(4000))
os.kill(os.getpid(), 9)
"""


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (HALF_THEN_FAIL, "Exportation error: No space left on device"),
        (HALF_THEN_KILLED, "killed by signal 9"),
    ],
)
def test_a_failed_export_leaves_no_cache_and_no_report(
    body: str, said: str, db: Path, tmp_path: Path, only
) -> None:
    nsys = fake_nsys(tmp_path, body)
    only(nsys)
    before = state(db)
    assert_user_error(
        run("ingest", "--db", str(db), str(REP_GZ)),
        f"`nsys export --type sqlite {REP_NAME}` failed with {nsys} (version 2021.1.1.1-abc123): {said}; "
        "run it yourself to see why, then ingest the .sqlite file it writes.",
    )
    assert state(db) == before
    assert not cache_of(db).exists()
    assert "export --type sqlite" in (tmp_path / "calls.log").read_text()  # it did run


def test_an_interrupted_export_stops_nsys_and_leaves_nothing(db: Path, tmp_path: Path, only) -> None:
    pid_file = tmp_path / "nsys.pid"
    nsys = fake_nsys(
        tmp_path,
        f"""\
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        with open(out, "wb") as fh:
            fh.write(b"SQLite format 3\\x00" + bytes(4000))
        sys.stderr.write("Exporting 396 events: [=====50%      ]")
        sys.stderr.flush()
        time.sleep(60)
        """,
    )
    only(nsys)
    before = state(db)

    def ctrl_c(step: str, done: int, total: int) -> None:
        if step == "nsys export":
            raise KeyboardInterrupt

    con = nsa.connect(db)
    try:
        with pytest.raises(KeyboardInterrupt):
            nsa.ingest(con, REP_GZ, progress=ctrl_c)
    finally:
        con.close()
    assert state(db) == before
    assert not cache_of(db).exists()
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(int(pid_file.read_text()), 0)
