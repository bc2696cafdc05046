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
from nsight_analytics import api, queries, workspace
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


def test_no_library_query_reads_the_ranges_kernels() -> None:
    declared = {name for name, q in queries.library().items() if "nvtx_kernels" in q.tables()}
    assert declared == set()
    assert queries.get("nvtx_summary").tables() == {"nvtx_totals"}  # its own table, not the ranges
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

    api.materialise(con, {"nvtx_kernels"})
    assert "nvtx_kernels" not in _deferred(con, rid)
    sums = con.execute(f"SELECT {', '.join(f'sum({c})' for c in KERNEL_COLS)} FROM nvtx_ranges").fetchone()
    got = dict(zip(KERNEL_COLS, sums, strict=True))
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
    api.materialise(con, {"nvtx_kernels"})  # works them out
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
    # nvtx_summary's rows and the synchronisations are not read by any rule, nor the call stacks of
    # an export whose only ones are OS runtime backtraces; with the steps found, gpu-idle judges
    # the steady state, where the GPU idles under idle_share_warning, so it returns before reading
    # the host detail, which stays
    assert "gpu-idle" not in found
    assert _deferred(con, rid) == [
        "kernel_launch", "sync_events", "nvtx_ranges", "nvtx_kernels", "nvtx_totals", "osrt_api", "stack_events"
    ]  # fmt: skip
    con.close()


def test_host_detail_stays_in_the_export_when_gpu_idle_returns_before_reading_it(
    tmp_path: Path, export: Path
) -> None:
    """gpu-idle reads the host detail (gap_host) only past its idle-share test: findings whose
    thresholds keep it from firing leave the NVTX ranges and OS runtime calls in the export;
    once it fires, they are copied (into the workspace, through `findings_reader` too)."""
    con, rid, _ = _ingest(tmp_path, export)
    strict = {"idle_share_warning": 1.0, "idle_share_critical": 1.0}  # no report idles 100%
    assert "gpu-idle" not in {f.rule_id for f in nsa.findings(con, rid, config=strict)}
    assert {"nvtx_ranges", "osrt_api"} <= set(_deferred(con, rid))
    assert "steps" not in _deferred(con, rid)  # what gpu-idle needs to decide was loaded
    con.close()
    reader = api.findings_reader(tmp_path / "w.duckdb", rid, config=strict)
    assert {"nvtx_ranges", "osrt_api"} <= set(_deferred(reader, rid))
    reader.close()
    # the steady state idles ~3% (15.6 of 490.7 ms): a 1% threshold makes it fire
    loose = {"idle_share_warning": 0.01}
    reader = api.findings_reader(tmp_path / "w.duckdb", rid, config=loose)
    assert not {"nvtx_ranges", "osrt_api"} & set(_deferred(reader, rid))
    assert "gpu-idle" in {f.rule_id for f in nsa.findings(reader, rid, config=loose)}
    reader.close()


# Per range name (the export's names have no emit_nvtx suffixes: base name = name): count, total,
# min, max of the closed ranges, the open ones, and the kernels both ways, by plain SQL.
SUMMARY_SQL = """
    WITH r AS (
        SELECT e.rowid AS id, coalesce(e.text, s.value) AS name, e.start, e."end", e.globalTid
        FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60)
    ),
    k AS (
        SELECT r.id, sum(r2.globalTid = r.globalTid) AS kernels,
               sum(CASE WHEN r2.globalTid = r.globalTid THEN kk."end" - kk.start END) AS kernel_ns,
               count(*) AS process_kernels, sum(kk."end" - kk.start) AS process_kernel_ns
        FROM r
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r2 ON r2.globalTid / 16777216 = r.globalTid / 16777216
             AND r2.start BETWEEN r.start AND r."end"
        JOIN CUPTI_ACTIVITY_KIND_KERNEL kk ON kk.correlationId = r2.correlationId
             AND kk.globalPid / 16777216 = r2.globalTid / 16777216
        GROUP BY r.id
    )
    SELECT r.name, count(r."end"), count(*) - count(r."end"), sum(r."end" - r.start), min(r."end" - r.start),
           max(r."end" - r.start), coalesce(sum(k.kernels), 0), coalesce(sum(k.kernel_ns), 0),
           coalesce(sum(k.process_kernels), 0), coalesce(sum(k.process_kernel_ns), 0)
    FROM r LEFT JOIN k ON k.id = r.id GROUP BY r.name"""


def test_nvtx_summary_needs_neither_the_ranges_nor_the_api_calls(tmp_path: Path, export: Path) -> None:
    """nvtx_summary's rows (nvtx_totals) come from the export in one pass: the ranges and the CUDA
    API calls stay deferred, and the totals per name are the export's, kernels both ways."""
    con, rid, _ = _ingest(tmp_path, export)
    res = nsa.query(con, "nvtx_summary", report_id=rid)
    cols = [d[0] for d in res.description]
    rows = [dict(zip(cols, r)) for r in res.fetchall()]
    pending = _deferred(con, rid)
    assert {"nvtx_ranges", "nvtx_kernels", "cuda_api"} <= set(pending) and "nvtx_totals" not in pending
    assert con.execute("SELECT count(*) FROM nvtx_ranges").fetchone()[0] == 0
    got = {
        r["name"]: (
            r["ranges"],
            r["open_ranges"],
            r["total_ns"],
            r["min_ns"],
            r["max_ns"],
            *(r[c] for c in KERNEL_COLS),
        )
        for r in rows
    }
    with sqlite3.connect(export) as db:
        want = {n: tuple(v) for n, *v in db.execute(SUMMARY_SQL)}
    assert got == want and len(got) == len(rows)
    assert sum(r["kernels"] for r in rows) > 0 and any(r["process_kernels"] > r["kernels"] for r in rows)
    con.close()


def test_nvtx_summary_is_the_same_from_the_ranges(tmp_path: Path, export: Path) -> None:
    """Worked out from the export or from the copied ranges (ranges copied first, with or
    without their kernels worked out): the same rows."""
    con, rid, _ = _ingest(tmp_path, export)
    first = nsa.query(con, "nvtx_summary", report_id=rid).fetchall()
    assert first
    con.close()
    for steps in ({"nvtx_ranges", "cuda_api"}, {"nvtx_kernels"}):
        folder = tmp_path / "_".join(sorted(steps))
        folder.mkdir()
        con, rid, _ = _ingest(folder, export)
        api.materialise(con, steps)
        assert nsa.query(con, "nvtx_summary", report_id=rid).fetchall() == first
        con.close()
    # --full: worked out at ingest, from the ranges and calls it copied
    (tmp_path / "full").mkdir()
    con = nsa.connect(tmp_path / "full" / "w.duckdb")
    rid = nsa.ingest(con, export, defer=[]).report_id
    assert _deferred(con, rid) == ["nvtx_kernels"]
    assert nsa.query(con, "nvtx_summary", report_id=rid).fetchall() == first
    con.close()


def test_a_workspace_from_before_nvtx_totals_gets_them(tmp_path: Path, export: Path) -> None:
    """A version-3 workspace (no nvtx_totals rows, no such step) answers nvtx_summary as before
    once opened: the nsys report gets the step, the Kineto one its rows from its ranges."""
    kineto = Path(__file__).parent / "data" / "kineto" / "h100_torch2.11_train_fused_rerun.json.gz"
    con, rid, _ = _ingest(tmp_path, export)
    kid = nsa.ingest(con, kineto).report_id
    want = {r: nsa.query(con, "nvtx_summary", report_id=r).fetchall() for r in (rid, kid)}
    assert want[rid] and want[kid]
    con.execute("DELETE FROM nvtx_totals")
    con.execute("UPDATE reports SET deferred_steps = list_filter(deferred_steps, s -> s != 'nvtx_totals')")
    con.execute("UPDATE nsa_workspace SET schema_version = 3")
    con.close()
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    assert con.execute("SELECT schema_version FROM nsa_workspace").fetchone()[0] == workspace.SCHEMA_VERSION
    assert "nvtx_totals" in _deferred(con, rid) and not _deferred(con, kid)
    assert {r: nsa.query(con, "nvtx_summary", report_id=r).fetchall() for r in (rid, kid)} == want
    con.close()


# The export's closed `step N` ranges (the fused loop's steps), by plain SQL.
STEP_RANGES_SQL = """
    SELECT coalesce(e.text, s.value) AS name, e.start, e."end"
    FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
    WHERE e.eventType IN (59, 60) AND e."end" IS NOT NULL AND coalesce(e.text, s.value) GLOB 'step [0-9]*'
    ORDER BY e.start"""


def _steps_and_waits(con, rid: int) -> tuple[list, list]:
    steps = con.execute("SELECT * FROM steps WHERE report_id = ? ORDER BY series, step", [rid]).fetchall()
    waits = sorted(con.execute("SELECT * FROM host_waits WHERE report_id = ?", [rid]).fetchall(), key=repr)
    return steps, waits


def _steps_three_ways(tmp_path: Path, export: Path, table: str, where: str, value: object) -> dict:
    """The steps and host waits (_steps_and_waits) of `export` worked out while `table` is
    deferred ("export"), once it is copied ("copied"), and once copied with its rows `where`
    `value` deleted ("dropped")."""
    found = {}
    for how in ("export", "copied", "dropped"):
        (tmp_path / how).mkdir()
        con, rid, _ = _ingest(tmp_path / how, export)
        if how != "export":
            api.materialise(con, {table})
            assert "steps" in _deferred(con, rid)
        if how == "dropped":
            con.execute(f"DELETE FROM {table} WHERE report_id = ? AND {where}", [rid, value])
        api.materialise(con, {"steps"})
        assert (table in _deferred(con, rid)) == (how == "export")
        found[how] = _steps_and_waits(con, rid)
        con.close()
    return found


def test_steps_read_the_copied_ranges_once_copied(tmp_path: Path, export: Path) -> None:
    """The steps come from the export's NVTX ranges while those are deferred and from the
    workspace's once copied (`nsa findings` copies them first): the same steps and host waits
    either way, the export's `step N` ranges; and once copied, a range dropped from the
    workspace is a step fewer (the export is not read again)."""
    with sqlite3.connect(export) as db:
        want = [(name, start, end, "nvtx") for name, start, end in db.execute(STEP_RANGES_SQL)]
    assert len(want) >= 5
    found = _steps_three_ways(tmp_path, export, "nvtx_ranges", "name = ?", want[2][0])
    assert [(s[2], s[8], s[9], s[4]) for s in found["export"][0]] == want
    assert found["copied"] == found["export"]
    assert [s[2] for s in found["dropped"][0]] == [w[0] for w in want if w != want[2]]


# The export's blocking OS runtime calls (nsys.WAIT_CALLS), by plain SQL: host_waits' osrt rows.
OSRT_WAITS_SQL = """
    SELECT s.value, o.start, o."end" FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId
    WHERE s.value IN ({names}) ORDER BY 1, 2, 3"""


def test_steps_read_the_copied_os_runtime_calls_once_copied(tmp_path: Path, export: Path) -> None:
    """The blocking OS runtime calls among the host waits come from the export while osrt_api is
    deferred and from the workspace's once copied (`nsa report` copies them before the steps):
    the same rows either way, the export's calls of those names; and once copied, a call dropped
    from the workspace is a wait fewer (the export is not read again)."""
    from nsight_analytics.ingest.nsys.nsys import WAIT_CALLS

    with sqlite3.connect(export) as db:
        names = ", ".join(f"'{c}'" for c in WAIT_CALLS)
        want = [tuple(r) for r in db.execute(OSRT_WAITS_SQL.format(names=names))]
    assert len(want) >= 100
    found = _steps_three_ways(tmp_path, export, "osrt_api", "start_ns = ?", want[0][1])
    osrt = sorted((w[7], w[4], w[5]) for w in found["export"][1] if w[8] == "osrt")
    assert osrt == want
    assert found["copied"] == found["export"]
    assert len(found["dropped"][1]) == len(found["export"][1]) - 1
