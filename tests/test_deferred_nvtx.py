"""The NVTX ranges' kernels (nvtx_ranges.kernels, kernel_ns and their process_ forms) are worked
out only for what reads them (`-- reads nvtx_kernels`, schema.COMPUTED), not for every reader of
the ranges; and a rule's optional reads (gpu-idle's host detail) let it judge a report whose
export has moved. Expected kernel counts come from plain SQL on the export (sqlite3)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

import nsight_analytics as nsa
from nsight_analytics import api, queries
from nsight_analytics.ingest import ensure_loaded
from rows import gunzipped_sqlite

FUSED = Path(__file__).parent / "data" / "h100_nsys2025.3_train_fused_rerun.sqlite.gz"
KERNEL_COLS = ("kernels", "kernel_ns", "process_kernels", "process_kernel_ns")

# Summed over the closed ranges: the kernels whose launching runtime call started inside the range
# on its own thread (same globalTid) or on any thread of its process (globalTid >> 24).
RANGE_KERNELS_SQL = """
    SELECT count(k.rowid), coalesce(sum(k."end" - k.start), 0)
    FROM NVTX_EVENTS e
    JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON {thread} AND r.start BETWEEN e.start AND e."end"
    JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
         AND k.globalPid / 16777216 = r.globalTid / 16777216
    WHERE e.eventType IN (59, 60) AND e."end" IS NOT NULL"""


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fused")
    gunzipped_sqlite(FUSED, folder).close()
    return folder / FUSED.name.removesuffix(".gz")


def _ingest(tmp_path: Path, export: Path) -> tuple[object, int, Path]:
    src = tmp_path / export.name
    shutil.copyfile(export, src)
    con = nsa.connect(tmp_path / "w.duckdb")
    return con, nsa.ingest(con, src).report_id, src


def _deferred(con, rid: int) -> list[str]:
    return list(con.execute("SELECT deferred_steps FROM reports WHERE report_id = ?", [rid]).fetchone()[0])


def test_only_nvtx_summary_reads_the_ranges_kernels() -> None:
    declared = {name for name, q in queries.library().items() if "nvtx_kernels" in q.tables()}
    assert declared == {"nvtx_summary"}
    assert "nvtx_kernels" not in queries.get("gap_host").tables()
    assert "nvtx_kernels" not in api.rules_reads()  # no rule reads them
    # users' SQL: the columns by name, or `*`, ask for them; the ranges' own columns do not
    assert "nvtx_kernels" in api.tables_needed("SELECT name, kernel_ns FROM nvtx_ranges")
    assert "nvtx_kernels" in api.tables_needed("SELECT * FROM nvtx_ranges")
    assert "nvtx_kernels" not in api.tables_needed("SELECT name, count(*) FROM nvtx_ranges GROUP BY name")


def test_ranges_come_alone_and_their_kernels_when_read(tmp_path: Path, export: Path) -> None:
    con, rid, _ = _ingest(tmp_path, export)
    assert {"nvtx_ranges", "nvtx_kernels"} <= set(_deferred(con, rid))
    assert nsa.query(con, "gap_host", report_id=rid).fetchall()
    nsa.findings(con, rid)  # gpu-idle reads gap_host
    pending = _deferred(con, rid)
    assert "nvtx_ranges" not in pending and "nvtx_kernels" in pending  # the step did not run
    nulls = " AND ".join(f"{c} IS NULL" for c in KERNEL_COLS)
    ranges, unset = con.execute(f"SELECT count(*), count(*) FILTER ({nulls}) FROM nvtx_ranges").fetchone()
    assert ranges == unset > 0

    rows = nsa.query(con, "nvtx_summary", report_id=rid).fetchall()
    assert "nvtx_kernels" not in _deferred(con, rid)
    cols = [d[0] for d in nsa.query(con, "nvtx_summary", report_id=rid).description]
    got = {c: sum(r[cols.index(c)] for r in rows) for c in KERNEL_COLS}
    with sqlite3.connect(export) as db:
        same = db.execute(RANGE_KERNELS_SQL.format(thread="r.globalTid = e.globalTid")).fetchone()
        proc = db.execute(
            RANGE_KERNELS_SQL.format(thread="r.globalTid / 16777216 = e.globalTid / 16777216")
        ).fetchone()
    assert (got["kernels"], got["kernel_ns"]) == same and same[0] > 0
    assert (got["process_kernels"], got["process_kernel_ns"]) == proc
    con.close()


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n, q in queries.library().items()
        if "nvtx_ranges" in q.tables() and "nvtx_kernels" not in q.tables()
    ),
)
def test_readers_of_the_ranges_alone_do_not_need_their_kernels(
    tmp_path: Path, export: Path, name: str
) -> None:
    """A query that does not declare nvtx_kernels answers the same with them worked out or not."""
    con, _, _ = _ingest(tmp_path, export)
    nsa.query(con, "nvtx_summary")  # works them out
    with_kernels = sorted(nsa.query(con, name).fetchall(), key=repr)
    con.execute("BEGIN TRANSACTION")
    con.execute(f"UPDATE nvtx_ranges SET {', '.join(f'{c} = NULL' for c in KERNEL_COLS)}")
    without = sorted(nsa.query(con, name).fetchall(), key=repr)
    con.execute("ROLLBACK")
    assert without == with_kernels
    con.close()


def test_gpu_idle_can_judge_without_the_host_detail() -> None:
    gpu_idle = next(r for r in api.rules() if r.id == "gpu-idle")
    assert {"nvtx_ranges", "osrt_api", "cpu_samples"} <= set(gpu_idle.optional_reads)
    needed = api.rules_reads(["gpu-idle"], optional=False)
    assert {"cuda_api", "steps"} <= needed and not needed & set(gpu_idle.optional_reads)
    assert set(gpu_idle.optional_reads) - {"cpu_ops"} <= api.rules_reads(["gpu-idle"])


def test_moved_export_gpu_idle_runs_without_host_detail(tmp_path: Path, export: Path) -> None:
    """Only what ingest copied and the launch calls (what gaps needs) are in the workspace when
    the export moves: gpu-idle still judges the report and says the host detail is missing."""
    con, rid, src = _ingest(tmp_path, export)
    ensure_loaded(con, {"cuda_api"})
    src.rename(tmp_path / "moved.sqlite")
    found = {f.rule_id: f for f in nsa.findings(con, rid)}
    idle = found["gpu-idle"]
    assert idle.evidence["host_detail_missing"] == ["nvtx_ranges", "osrt_api"]
    assert f"Host detail missing: nvtx_ranges, osrt_api stayed in {src.name} at ingest" in idle.message
    assert {"nvtx_ranges", "nvtx_kernels", "osrt_api"} <= set(_deferred(con, rid))
    # with the export back, findings load the host detail (and the steps), still not the kernels
    (tmp_path / "moved.sqlite").rename(src)
    found = {f.rule_id: f for f in nsa.findings(con, rid)}
    assert not [f for f in found.values() if "Host detail missing" in f.message]
    assert _deferred(con, rid) == ["kernel_launch", "nvtx_kernels"]  # the stacks name the line in findings
    con.close()
