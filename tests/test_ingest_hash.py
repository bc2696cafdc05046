"""The ingest's content key (issue 31): reports.content_hash, xxHash XXH3-128 of the file's bytes,
and the reports ingested before it, which have only sha256 and must still be recognised: as a
duplicate of the same bytes, and as the same file when a deferred table is read from a source
whose mtime changed. The expected hashes are computed here with xxhash and hashlib."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import duckdb
import pytest
import xxhash
from click.testing import CliRunner

import nsight_analytics as nsa
from conftest import ROOT
from nsight_analytics.cli import main

EXPORT = ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite"


def _key(path: Path) -> str:
    return "xxh3_128-" + xxhash.xxh3_128(path.read_bytes()).hexdigest()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy(tmp_path: Path, name: str = "a.sqlite") -> Path:
    src = tmp_path / name
    shutil.copyfile(EXPORT, src)
    return src


def _same_size_other_bytes(src: Path, dst: Path) -> Path:
    data = bytearray(src.read_bytes())
    data[63] ^= 0xFF  # the SQLite header's user_version, which SQLite leaves to applications: still an export
    dst.write_bytes(bytes(data))
    return dst


def _as_before_content_hash(db: Path) -> None:
    """Make the workspace's reports look ingested by an nsa that kept SHA-256 only."""
    con = duckdb.connect(str(db))
    try:
        for rid, source in con.execute("SELECT report_id, source_path FROM reports").fetchall():
            con.execute(
                "UPDATE reports SET sha256 = ?, content_hash = NULL WHERE report_id = ?",
                [_sha(Path(source)), rid],
            )
    finally:
        con.close()


def _reports(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT report_id, sha256, content_hash FROM reports ORDER BY 1").fetchall()
    finally:
        con.close()


def test_a_report_keeps_the_xxh3_128_of_its_bytes_and_no_sha256(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    first = nsa.ingest(con, src)
    row = con.execute("SELECT sha256, content_hash, size_bytes FROM reports").fetchone()
    assert row == (None, _key(src), src.stat().st_size)
    # the same bytes at another path: the same report; other bytes of the same size: a new one
    again = nsa.ingest(con, shutil.copyfile(src, tmp_path / "b.sqlite"))
    assert (again.status, again.report_id) == ("unchanged", first.report_id)
    other = nsa.ingest(con, _same_size_other_bytes(src, tmp_path / "c.sqlite"))
    assert other.status == "ingested" and other.report_id != first.report_id
    keys = [r[0] for r in con.execute("SELECT content_hash FROM reports ORDER BY report_id").fetchall()]
    assert keys == [_key(src), _key(tmp_path / "c.sqlite")]
    con.close()


def _ingested_before_content_hash(tmp_path: Path) -> tuple[Path, Path, int]:
    """(export, workspace, report id): one report ingested, then keyed as before content_hash."""
    src = _copy(tmp_path)
    db = tmp_path / "w.duckdb"
    con = nsa.connect(db, load_deferred=False)
    rid = nsa.ingest(con, src).report_id
    con.close()
    _as_before_content_hash(db)
    return src, db, rid


def test_a_report_ingested_before_content_hash_is_still_a_duplicate(tmp_path: Path) -> None:
    src, db, rid = _ingested_before_content_hash(tmp_path)
    con = nsa.connect(db, load_deferred=False)
    again = nsa.ingest(con, shutil.copyfile(src, tmp_path / "b.sqlite"))
    assert (again.status, again.report_id) == ("unchanged", rid)
    other = nsa.ingest(con, _same_size_other_bytes(src, tmp_path / "c.sqlite"))
    assert other.status == "ingested"
    con.close()
    # the old report keeps its sha256 key; the new one has content_hash only
    assert _reports(db) == [(rid, _sha(src), None), (other.report_id, None, _key(tmp_path / "c.sqlite"))]


def test_replace_finds_a_report_ingested_before_content_hash(tmp_path: Path) -> None:
    src, db, rid = _ingested_before_content_hash(tmp_path)
    con = nsa.connect(db, load_deferred=False)
    replaced = nsa.ingest(con, src, replace=True)
    con.close()
    assert (replaced.status, replaced.report_id) == ("replaced", rid)
    assert _reports(db) == [(rid, None, _key(src))]


@pytest.mark.parametrize("old_style", [False, True], ids=["content_hash", "sha256"])
def test_a_touched_source_is_checked_by_the_key_the_report_has(tmp_path: Path, old_style: bool) -> None:
    src = _copy(tmp_path)
    db = tmp_path / "w.duckdb"
    con = nsa.connect(db, load_deferred=False)
    nsa.ingest(con, src)
    con.close()
    if old_style:
        _as_before_content_hash(db)
    mtime = src.stat().st_mtime_ns
    os.utime(src, ns=(mtime + 10**9, mtime + 10**9))  # same bytes, new mtime: the hash decides
    res = CliRunner().invoke(main, ["query", "--db", str(db), "sync_calls", "--format", "csv"])
    assert res.exit_code == 0, res.output
    # same size, other bytes, another new mtime: refused, for the NVTX ranges still deferred
    _same_size_other_bytes(EXPORT, src)
    os.utime(src, ns=(mtime + 2 * 10**9, mtime + 2 * 10**9))
    res = CliRunner().invoke(main, ["query", "--db", str(db), "nvtx_summary", "--format", "csv"])
    assert res.exit_code == 2 and "has changed since" in res.output, res.output
