"""A workspace the user cannot write answers like a writable one; deferred data is loaded in one
place (the facade), from what the queries declare they read, and never by the rules."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from nsight_analytics import api, cli, queries
from nsight_analytics.rules import run_rules
from rows import required_params

EXPORT = Path(__file__).parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ingested(tmp_path: Path, name: str = "w.duckdb") -> tuple[Path, Path]:
    """(workspace, export): the export copied into tmp_path, ingested with its tables deferred."""
    export = tmp_path / EXPORT.name
    if not export.exists():
        shutil.copyfile(EXPORT, export)
    db = tmp_path / name
    con = nsa.connect(db)
    result = nsa.ingest(con, export)
    con.close()
    assert {"cuda_api", "nvtx_ranges"} <= set(result.deferred)
    return db, export


def _deferred(con) -> list[str]:
    """The deferred steps the workspace file records (a TEMP copy of `reports` left aside)."""
    (stored,) = con.execute("SELECT current_database()").fetchone()
    rows = con.execute(f'SELECT deferred_steps FROM "{stored}".main.reports').fetchall()
    return sorted(t for (ts,) in rows for t in ts)


def _cli(db: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli.main, [args[0], "--db", str(db), *args[1:]])
    return res.exit_code, res.output


@pytest.fixture
def read_only_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(writable workspace, the same workspace made read-only): file and folder lose their write
    bits; root ignores those, so `api.writable` is told the truth a user would see."""
    rw, _ = _ingested(tmp_path)
    folder = tmp_path / "shared"
    folder.mkdir()
    ro = folder / "w.duckdb"
    shutil.copyfile(rw, ro)
    ro.chmod(stat.S_IRUSR | stat.S_IRGRP)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    if os.geteuid() == 0:
        real = api.writable
        monkeypatch.setattr(api, "writable", lambda db=None: real(db) and Path(db or "").parent != folder)
    try:
        yield rw, ro
    finally:
        folder.chmod(stat.S_IRWXU)
        ro.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_read_only_connection_answers_every_query_and_findings(tmp_path: Path) -> None:
    rw, _ = _ingested(tmp_path)
    ro = tmp_path / "ro.duckdb"
    shutil.copyfile(rw, ro)
    before = _sha(ro)
    writer, reader = nsa.connect(rw), nsa.connect(ro, read_only=True)
    try:
        stored = _deferred(reader)
        assert {"cuda_api", "nvtx_ranges"} <= set(stored)
        for name in queries.library():
            bare = required_params(name)
            assert nsa.query(reader, name, **bare).fetchall() == nsa.query(writer, name, **bare).fetchall(), (
                name
            )
        assert [f.to_dict() for f in nsa.findings(reader)] == [f.to_dict() for f in nsa.findings(writer)]
        assert reader.sql("SELECT count(*) FROM cuda_api").fetchall()[0][0] > 0  # the TEMP copy
        assert reader.sql('SELECT count(*) FROM "ro".main.cuda_api').fetchall()[0][0] == 0
        assert _deferred(reader) == stored
    finally:
        writer.close()
        reader.close()
    assert _sha(ro) == before


def test_cli_on_a_workspace_the_user_cannot_write(read_only_copy) -> None:
    rw, ro = read_only_copy
    before = _sha(ro)
    commands = [
        ("query", "gaps", "--format", "csv"),
        ("query", "nvtx_summary", "--format", "csv"),
        ("findings", "--format", "json"),
        ("findings",),
        ("sql", "SELECT count(*) AS n FROM gaps()", "--format", "csv"),
        ("sql", "--read-only", "SELECT count(*) AS n FROM cuda_api", "--format", "csv"),
    ]
    for args in commands:
        got, want = _cli(ro, *args), _cli(rw, *args)
        assert got == want and got[0] == 0, args
    assert _sha(ro) == before


def test_moved_export_answers_what_needs_nothing_from_it_and_names_what_would(tmp_path: Path) -> None:
    db, export = _ingested(tmp_path)
    export.rename(tmp_path / "moved.sqlite")
    for name in ("utilization", "kernel_summary"):  # declared reads: nothing deferred
        code, out = _cli(db, "query", name, "--format", "csv")
        assert code == 0 and out.startswith("report_id,"), out
    code, out = _cli(db, "query", "gaps")  # reads cuda_api, left in the export at ingest
    assert code == 2
    assert f"report 1's cuda_api were left in {export} at ingest, and that file is gone" in out
    assert "nsa ingest --replace --full FILE" in out


def test_rules_load_nothing_the_facade_does(tmp_path: Path) -> None:
    db, _ = _ingested(tmp_path)
    con = nsa.connect(db, load_deferred=False)
    try:
        stored = _deferred(con)
        run_rules(con)
        assert _deferred(con) == stored
        nsa.findings(con)
        # what the rules read (gpu-idle follows the launching thread through NVTX and OS runtime
        # calls), not the ranges' kernels (nvtx_kernels), which no rule reads, nor the call stacks:
        # the export's only ones are the OS runtime calls' backtraces, which name no line a rule reads
        assert sorted(set(stored) - set(_deferred(con))) == [
            "cuda_api", "nvtx_ranges", "osrt_api", "steps"
        ]  # fmt: skip
        assert "stack_events" in _deferred(con)
    finally:
        con.close()
