"""Bad input gets one clear sentence, exit 2, and an unchanged workspace."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT
from nsight_analytics.cli import main

# Real captures that ship in the repository, so these tests need no ../shared: the bundled demo
# export (nsight_analytics/data/README.md) and a capture committed with the tests (tests/data/README.md).
DEMO = ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"
IDLE_GAPS = ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def sqlite_value(path: Path, sql: str) -> int:
    """One number read from an export with sqlite3."""
    con = sqlite3.connect(path)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def snapshot(db: Path) -> list:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT report_id, sha256, content_hash FROM reports ORDER BY 1").fetchall() + [
            con.execute("SELECT count(*) FROM kernels").fetchone()
        ]
    finally:
        con.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    res = run("ingest", "--db", str(path), str(DEMO))
    assert res.exit_code == 0, res.output
    return path


def make_not_nsys(tmp: Path) -> Path:
    path = tmp / "other.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t (a INTEGER)")
        c.execute("INSERT INTO t VALUES (1)")
    return path


def make_truncated(tmp: Path) -> Path:
    src = DEMO
    path = tmp / "truncated.sqlite"
    path.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    return path


def make_empty_capture(tmp: Path) -> Path:
    path = tmp / "empty_capture.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
        c.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.20.3')")
        c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    return path


def make_text(tmp: Path) -> Path:
    path = tmp / "notes.txt"
    path.write_text("hello, this is not a profile\n")
    return path


CASES = {
    "missing": (lambda tmp: tmp / "nope.sqlite", "no such file"),
    "text file": (make_text, "not an SQLite file nor an ncu CSV"),
    "sqlite, not nsys": (make_not_nsys, "not an nsys export"),
    "truncated": (make_truncated, "truncated"),
    "capture with no activity": (make_empty_capture, "no activity records"),
    "folder": (lambda tmp: tmp, "is a folder"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_file_is_refused_cleanly(case: str, db: Path, tmp_path: Path) -> None:
    make, words = CASES[case]
    target = make(tmp_path / "in") if (tmp_path / "in").mkdir() is None else None
    before = snapshot(db)
    res = run("ingest", "--db", str(db), str(target))
    assert res.exit_code == 2, res.output
    assert words in res.output
    assert "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1  # one clear sentence
    assert snapshot(db) == before


def test_unwritable_workspace(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        target = "/proc/nsa.duckdb"  # not even root can create files in /proc
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        target = str(ro / "w.duckdb")
    res = run("ingest", "--db", target, str(DEMO))
    assert res.exit_code == 2
    assert "cannot" in res.output and "--db" in res.output


def test_workspace_path_that_is_not_duckdb(tmp_path: Path) -> None:
    bogus = tmp_path / "w.duckdb"
    bogus.write_text("not a database")
    res = run("ingest", "--db", str(bogus), str(DEMO))
    assert res.exit_code == 2
    assert "not an nsa workspace" in res.output
    assert bogus.read_text() == "not a database"


def test_error_midway_rolls_back(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception after some tables were copied leaves no trace of the report."""
    from nsight_analytics.ingest.nsys import nsys

    real = nsys.load_table
    calls = []

    def failing(con, src, table, rid, **kw):
        calls.append(table)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(con, src, table, rid, **kw)

    monkeypatch.setattr(nsys, "load_table", failing)
    before = snapshot(db)
    import nsight_analytics as nsa

    con = nsa.connect(db, load_deferred=False)
    with pytest.raises(KeyboardInterrupt):
        nsa.ingest(con, IDLE_GAPS)
    con.close()
    assert snapshot(db) == before


def test_killed_ingest_leaves_no_partial_report(db: Path, tmp_path: Path) -> None:
    """SIGKILL half-way through an ingest (kernels and copies already copied): nothing of it survives."""
    src = IDLE_GAPS  # it has a memcpy table
    script = textwrap.dedent(
        f"""
        import os, signal
        import nsight_analytics as nsa
        from nsight_analytics.ingest.nsys import nsys
        real = nsys.load_table
        def load(con, src, table, rid, **kw):
            n = real(con, src, table, rid, **kw)
            if table == "memcpy":
                os.kill(os.getpid(), signal.SIGKILL)
            return n
        nsys.load_table = load
        con = nsa.connect({str(db)!r}, load_deferred=False)
        nsa.ingest(con, {str(src)!r})
        """
    )
    before = snapshot(db)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    assert snapshot(db) == before
    # And the workspace still takes new reports.
    res = run("ingest", "--db", str(db), str(src))
    assert res.exit_code == 0, res.output
    assert "ingested as report 2" in res.output


def test_deferred_table_whose_source_is_gone(tmp_path: Path) -> None:
    """Host-side tables are copied on first use; if the export moved away meanwhile, the user is
    told what to do, and the GPU tables already in the workspace stay usable."""
    src = tmp_path / "moved.sqlite"
    shutil.copy(DEMO, src)
    names = sqlite_value(src, "SELECT count(DISTINCT demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    db = str(tmp_path / "w.duckdb")
    assert run("ingest", "--db", db, str(src)).exit_code == 0
    src.unlink()
    res = run("query", "--db", db, "sync_calls")  # reads cuda_api
    assert res.exit_code == 2
    assert "is gone" in res.output and "--full" in res.output
    res = run("query", "--db", db, "kernel_summary", "--format", "csv")
    assert res.exit_code == 0 and res.output.count("\n") == 1 + names  # header + one line per kernel name


def _ingest_copy(tmp_path: Path) -> tuple[Path, str, int]:
    """A copy of a small export ingested with its host-side tables deferred: (file, db, mtime)."""
    src = tmp_path / "copy.sqlite"
    shutil.copy(DEMO, src)
    db = str(tmp_path / "w.duckdb")
    assert run("ingest", "--db", db, str(src)).exit_code == 0
    return src, db, src.stat().st_mtime_ns


def test_deferred_table_whose_source_changed(tmp_path: Path) -> None:
    """Same path and size, other bytes: the first use of a deferred table refuses to mix them in."""
    src, db, mtime = _ingest_copy(tmp_path)
    data = bytearray(src.read_bytes())
    data[100] ^= 0xFF  # inside the SQLite header's reserved space: still the same size
    src.write_bytes(bytes(data))
    os.utime(src, ns=(mtime + 10**9, mtime + 10**9))
    res = run("query", "--db", db, "sync_calls")  # reads cuda_api
    assert res.exit_code == 2
    assert "has changed since" in res.output and "--replace" in res.output


def test_deferred_table_of_a_touched_source_checks_the_bytes(tmp_path: Path, monkeypatch) -> None:
    """A new mtime alone (touch, a copy) costs one hash; an unchanged size and mtime cost none."""
    ingest = sys.modules["nsight_analytics.ingest.pipeline"]
    src, db, mtime = _ingest_copy(tmp_path)
    hashed: list[Path] = []
    real_hash = ingest.content_hash_file
    monkeypatch.setattr(ingest, "content_hash_file", lambda p: hashed.append(p) or real_hash(p))
    os.utime(src, ns=(mtime + 10**9, mtime + 10**9))
    res = run("query", "--db", db, "sync_calls", "--format", "csv")
    assert res.exit_code == 0, res.output
    assert hashed == [src]  # cuda_api: mtime differs, bytes the same
    os.utime(src, ns=(mtime, mtime))
    res = run(
        "sql", "--db", db, "SELECT count(grid_x) AS n FROM kernels", "--format", "csv"
    )  # launch columns
    launched = sqlite_value(DEMO, "SELECT count(gridX) FROM CUPTI_ACTIVITY_KIND_KERNEL")  # src's bytes
    assert res.exit_code == 0 and res.output == f"n\n{launched}\n", res.output
    assert hashed == [src]  # same size and mtime as at ingest: not read again
