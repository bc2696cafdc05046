"""What `nsa ingest` of an nsys export and the first `nsa query kernel_summary` spend besides the
copy (issue 31): the kernels' name fallback read only where the
export allows NULL names, and one attach of the export for all of a report's deferred steps.
Checked by what ran, never by timing (benchmarks/README.md times it). That neither imports
pyarrow, numpy or pandas is in test_cli_startup.py."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import nsight_analytics as nsa
from conftest import ROOT
from nsight_analytics.ingest.nsys import reader_sqlite

# A real export shipped with the tests (H100, nsys 2025.3): demangledName is NOT NULL in it.
EXPORT = ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite"


def _sq(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(sql).fetchall()


def _names(con, rid: int) -> Counter:
    return Counter(
        n for (n,) in con.execute("SELECT name FROM kernels WHERE report_id = ?", [rid]).fetchall()
    )


def test_kernel_names_fall_back_to_the_short_name_only_where_the_export_allows_null(tmp_path: Path) -> None:
    # The shipped export declares demangledName NOT NULL: its names are the demangled ones.
    schema = _sq(EXPORT, "SELECT sql FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'")[0][0]
    assert "demangledName               INTEGER   NOT NULL" in schema
    # A copy whose kernel table allows NULL names (CREATE TABLE AS drops the constraints), with
    # every other kernel's demangled name removed: those take the short name.
    nullable = tmp_path / "nullable.sqlite"
    shutil.copy(EXPORT, nullable)
    with sqlite3.connect(nullable) as db:
        db.executescript(
            "CREATE TABLE k2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL;"
            "UPDATE k2 SET demangledName = NULL WHERE rowid % 2 = 0;"
            "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;"
            "ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL;"
        )
    name = "(SELECT value FROM StringIds WHERE id = coalesce(k.demangledName, k.shortName))"
    want = {
        path: Counter(n for (n,) in _sq(path, f"SELECT {name} FROM CUPTI_ACTIVITY_KIND_KERNEL k"))
        for path in (EXPORT, nullable)
    }
    assert want[EXPORT] != want[nullable]  # the fallback changes names: the check below can fail
    short = Counter(
        n
        for (n,) in _sq(
            nullable,
            "SELECT (SELECT value FROM StringIds WHERE id = k.shortName) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "WHERE k.demangledName IS NULL",
        )
    )
    assert short and not (short - want[nullable])
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        for path in (EXPORT, nullable):
            assert _names(con, nsa.ingest(con, path).report_id) == want[path], path.name
    finally:
        con.close()


def test_a_reports_deferred_steps_attach_its_export_once(tmp_path: Path, monkeypatch) -> None:
    opened: list[Path] = []
    real_open = reader_sqlite.NsysSqliteReader.open

    def counting(self, con, path):  # type: ignore[no-untyped-def]
        opened.append(Path(path))
        return real_open(self, con, path)

    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    try:
        rid = nsa.ingest(con, EXPORT).report_id
        steps = con.execute("SELECT deferred_steps FROM reports WHERE report_id = ?", [rid]).fetchone()[0]
        monkeypatch.setattr(reader_sqlite.NsysSqliteReader, "open", counting)
        from nsight_analytics import api

        # every step the export left, as `nsa findings` or a writable connect runs them
        ran = api.materialise(con, api.ingest_deferrable())
        assert ran >= 2, steps  # several steps of one report ...
        assert opened == [EXPORT]  # ... one attach of its export
        assert con.execute("SELECT deferred_steps FROM reports").fetchall() == [([],)]
        want = _sq(EXPORT, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
        assert con.execute("SELECT count(*) FROM cuda_api").fetchone()[0] <= want
        assert con.execute("SELECT count(*) FROM cuda_api").fetchone()[0] > 0
    finally:
        con.close()
