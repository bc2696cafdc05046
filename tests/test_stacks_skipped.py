"""`nsa findings` leaves the call-stacks step in the export where it can only yield OS runtime
backtraces, which no rule names a line from (rules/stacks.py), and runs it where the export may
hold a source the rules read. Expected values come from the exports themselves (sqlite3)."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from conftest import ROOT, realdata
from nsight_analytics import api
from nsight_analytics.cli import main
from nsight_analytics.ingest import stacks

DATA = ROOT / "tests" / "data" / "stacks" / "nsys"
# -s none: no CPU samples, no CUDA or Python backtraces; OS runtime backtraces by default
NOSTACKS = DATA / "h100_nsys2025.3_stack_loop_nostacks.sqlite.gz"
# -s cpu --cudabacktrace=all: CPU samples and CUDA backtraces
NATIVE = DATA / "h100_nsys2025.3_stack_loop_native.sqlite.gz"
PYTHON = {
    "NVTX_EVENTS": {"eventType", "domainId", "start", "globalTid", "binaryData"},
    "NVTX_PAYLOAD_SCHEMAS": {"domainId"},
    "NVTX_PAYLOAD_SCHEMA_ENTRIES": {"domainId", "name"},
}


def _plain(gz: Path, folder: Path) -> Path:
    out = folder / gz.name.removesuffix(".gz")
    with gzip.open(gz) as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def _ingested(export: Path, db: Path, full: bool = False) -> Path:
    con = nsa.connect(db, load_deferred=False)
    try:
        nsa.ingest(con, export, **({"defer": ()} if full else {}))
    finally:
        con.close()
    return db


def _findings(db: Path) -> list[dict[str, object]]:
    res = CliRunner().invoke(main, ["findings", "--format", "json", "--no-config", "--db", str(db)])
    assert res.exit_code == 0, res.output
    found: list[dict[str, object]] = json.loads(res.output)
    return found


def _deferred(db: Path) -> list[str]:
    con = nsa.connect(db, read_only=True)
    try:
        return list(con.execute("SELECT deferred_steps FROM reports").fetchone()[0])
    finally:
        con.close()


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exports")
    return {"nostacks": _plain(NOSTACKS, tmp), "native": _plain(NATIVE, tmp)}


def test_osrt_backtraces_only_findings_skip_the_step_and_match_the_loaded_ones(exports, tmp_path) -> None:
    export = exports["nostacks"]
    with sqlite3.connect(export) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        osrt_events = db.execute(
            "SELECT count(*) FROM OSRT_API WHERE callchainId IN (SELECT id FROM OSRT_CALLCHAINS)"
        ).fetchone()[0]
    # what makes the capture's only call stacks OS runtime backtraces
    assert "OSRT_CALLCHAINS" in tables and osrt_events > 0
    assert not tables & {"COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS", "CUDA_CALLCHAINS", "NVTX_PAYLOAD_SCHEMAS"}

    lazy = _ingested(export, tmp_path / "lazy.duckdb")
    assert "stack_events" in _deferred(lazy)
    skipped = _findings(lazy)
    assert "stack_events" in _deferred(lazy)  # the findings left it in the export

    full = _ingested(export, tmp_path / "full.duckdb", full=True)
    assert "stack_events" not in _deferred(full)
    con = nsa.connect(full, read_only=True)
    try:
        loaded = con.execute("SELECT source, count(*) FROM stack_events GROUP BY source").fetchall()
    finally:
        con.close()
    assert loaded == [("osrt_call", osrt_events)]
    assert skipped == _findings(full)

    # an explicit query of the stack tables still runs the step
    con = nsa.connect(lazy, load_deferred=False)
    try:
        assert nsa.query(con, "hot_stacks").fetchall() is not None
    finally:
        con.close()
    assert "stack_events" not in _deferred(lazy)


def test_cpu_samples_and_cuda_backtraces_still_load_the_step(exports, tmp_path) -> None:
    db = _ingested(exports["native"], tmp_path / "native.duckdb")
    assert "stack_events" in _deferred(db)
    _findings(db)
    assert "stack_events" not in _deferred(db)


def test_nccl_payloads_without_python_frames_skip_the_step(tmp_path) -> None:
    # PyTorch and NCCL NVTX payloads (schemas of NCCL's domain), no call stacks of any kind
    h2d = realdata("nsys", "h100x2_nsys2026.2_h2d_heavy.sqlite")
    with sqlite3.connect(f"file:{h2d}?mode=ro", uri=True) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        names = {r[0] for r in db.execute("SELECT DISTINCT name FROM NVTX_PAYLOAD_SCHEMA_ENTRIES")}
    # payload schemas (which make the export one that may hold stacks), but none that lays out frames
    assert "NVTX_PAYLOAD_SCHEMAS" in tables and not {"Frames", "Frames count"} & names
    assert not tables & {"COMPOSITE_EVENTS", "CUDA_CALLCHAINS", "OSRT_CALLCHAINS"}
    lazy = _ingested(h2d, tmp_path / "lazy.duckdb")
    assert "stack_events" in _deferred(lazy)
    skipped = _findings(lazy)
    assert "stack_events" in _deferred(lazy)
    full = _ingested(h2d, tmp_path / "full.duckdb", full=True)
    con = nsa.connect(full, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM stack_events").fetchone() == (0,)
    finally:
        con.close()
    assert skipped == _findings(full)


def test_a_gzip_export_loads_the_step_as_before(tmp_path) -> None:
    """Its table listing would need the file decompressed: the step runs, as it did."""
    db = _ingested(NOSTACKS, tmp_path / "gz.duckdb")
    _findings(db)
    assert "stack_events" not in _deferred(db)


def test_a_moved_export_loads_the_step_as_before(exports, tmp_path) -> None:
    """Where the export is gone, whether it held other stacks cannot be told: the rules ask for
    the step again, which then says the file is gone (as before), and judge without it."""
    export = tmp_path / "moved.sqlite"
    shutil.copyfile(exports["nostacks"], export)
    db = _ingested(export, tmp_path / "moved.duckdb")
    before = _findings(db)  # loads what the rules read but the stacks
    con = nsa.connect(db, load_deferred=False)
    try:
        assert stacks.deferred_sources(con, 1) == {"osrt_call"}
        assert not api._rules_pending(con, None, None, None)  # a second findings opens no writer
        export.rename(tmp_path / "gone.sqlite")
        assert stacks.deferred_sources(con, 1) is None
        assert api._rules_pending(con, None, None, None)
    finally:
        con.close()
    assert _findings(db) == before
    assert "stack_events" in _deferred(db)


@pytest.mark.parametrize(
    ("tables", "entries", "expected"),
    [
        (
            {"OSRT_API": {"callchainId"}, "OSRT_CALLCHAINS": {"id", "symbol", "stackDepth"}},
            None,
            {"osrt_call"},
        ),
        # a callchain table without frame columns gives events without stacks
        ({"OSRT_API": {"callchainId"}, "OSRT_CALLCHAINS": {"id"}}, None, set()),
        (
            {
                "COMPOSITE_EVENTS": {"id", "start", "globalTid"},
                "SAMPLING_CALLCHAINS": {"id", "symbol", "stackDepth"},
            },
            None,
            {"cpu_sample"},
        ),
        (
            {
                "CUPTI_ACTIVITY_KIND_RUNTIME": {"callchainId", "correlationId", "globalTid", "start"},
                "CUDA_CALLCHAINS": {"id", "symbol", "stackDepth"},
            },
            None,
            {"cuda_call"},
        ),
        # the runtime calls without callchainId: no CUDA backtraces
        (
            {
                "CUPTI_ACTIVITY_KIND_RUNTIME": {"correlationId", "globalTid", "start"},
                "CUDA_CALLCHAINS": {"id", "symbol", "stackDepth"},
            },
            None,
            set(),
        ),
        (PYTHON, None, {"python_sample", "python_cuda"}),
        (PYTHON, stacks.FRAME_ENTRIES, {"python_sample", "python_cuda"}),
        # payload schemas of other domains (NCCL's): no frames to lay out
        (PYTHON, ("NCCL communicator ID", "Rank", "Frames count"), set()),
        # exported without --include-blobs: the events keep no frames
        ({**PYTHON, "NVTX_EVENTS": PYTHON["NVTX_EVENTS"] - {"binaryData"}}, None, set()),
        ({"NVTX_EVENTS": PYTHON["NVTX_EVENTS"]}, None, set()),
    ],
    ids=[
        "osrt",
        "osrt no frames",
        "cpu samples",
        "cuda backtraces",
        "no callchainId",
        "python",
        "python frame entries",
        "other payloads",
        "no blobs",
        "no payloads",
    ],
)
def test_export_sources(
    tables: dict[str, set[str]], entries: tuple[str, ...] | None, expected: set[str]
) -> None:
    assert stacks.export_sources(tables, entries) == expected
