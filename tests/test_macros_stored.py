"""The query library's macros stored in a workspace nsa can write (issue 31: creating them cost
every CLI process ~0.08 s), under a stamp of the library that made them: a later library replaces
them and drops the ones it no longer has, a read-only connection on a workspace of another
library gets TEMP macros that hide the stored ones, and a team's macros are TEMP on top."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

import nsight_analytics as nsa
from nsight_analytics import queries

STAMP = queries.STAMP_MACRO


def _macros(con: duckdb.DuckDBPyConnection, temporary: bool) -> set[str]:
    """Names of the non-internal macros of the workspace (`temporary` False) or TEMP ones."""
    where = "database_name = 'temp'" if temporary else "database_name <> 'temp'"
    rows = con.execute(
        "SELECT function_name FROM duckdb_functions() WHERE NOT internal "
        f"AND function_type IN ('macro', 'table_macro') AND {where}"
    ).fetchall()
    return {r[0] for r in rows}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    nsa.connect(path).close()
    return path


def test_a_writable_workspace_stores_the_library_once(db: Path) -> None:
    raw = duckdb.connect(str(db), read_only=True)  # plain DuckDB: nothing installed by nsa
    try:
        stored = _macros(raw, temporary=False)
        stamp = json.loads(raw.execute(f"SELECT {STAMP}()").fetchone()[0])
    finally:
        raw.close()
    assert set(queries.library()) <= stored and {"nsa_gpu_activity", "nsa_kernel_class", STAMP} <= stored
    assert stamp["failed"] == {} and set(stamp["names"]) == stored - {STAMP}
    # opened again (read only or not), nothing is created: the stored macros answer
    for read_only in (True, False):
        con = nsa.connect(db, read_only=read_only)
        try:
            assert _macros(con, temporary=True) == set()
            assert con.execute("SELECT count(*) FROM kernel_summary()").fetchone() == (0,)
        finally:
            con.close()


def _stale(db: Path, extra: str) -> None:
    """The workspace as another library left it: another stamp, and a macro this one lacks."""
    con = duckdb.connect(str(db))
    try:
        con.execute(f"CREATE MACRO {extra}() AS TABLE SELECT 42 AS answer")
        con.execute("CREATE OR REPLACE MACRO nsa_kernel_class(name) AS 'stale'")
        names = [extra, "nsa_kernel_class"]
        text = json.dumps({"stamp": "another library", "names": names, "failed": {}})
        con.execute(f"CREATE OR REPLACE MACRO {STAMP}() AS '{text}'")
        con.execute("CREATE MACRO users_own() AS 7")  # not the library's: left alone
    finally:
        con.close()


def test_a_read_only_connection_hides_another_librarys_macros(db: Path) -> None:
    _stale(db, "old_query")
    con = nsa.connect(db, read_only=True)
    try:
        assert con.execute("SELECT nsa_kernel_class('ampere_sgemm_128x64_nn')").fetchone() != ("stale",)
        assert set(queries.library()) <= _macros(con, temporary=True)
    finally:
        con.close()


def test_a_writable_connection_replaces_another_librarys_macros(db: Path) -> None:
    _stale(db, "old_query")
    nsa.connect(db).close()
    raw = duckdb.connect(str(db), read_only=True)
    try:
        stored = _macros(raw, temporary=False)
        assert "old_query" not in stored and {"users_own", "kernel_summary"} <= stored
        assert raw.execute("SELECT nsa_kernel_class('ampere_sgemm_128x64_nn')").fetchone() != ("stale",)
        assert json.loads(raw.execute(f"SELECT {STAMP}()").fetchone()[0])["stamp"] != "another library"
    finally:
        raw.close()


def test_a_team_override_hides_the_stored_macro(db: Path, tmp_path: Path) -> None:
    team = tmp_path / "team"
    team.mkdir()
    (team / "_team.sql").write_text(
        "-- override nsa_kernel_class\nCREATE MACRO nsa_kernel_class(name) AS 'team class';\n"
    )
    queries.add_folder(team)
    try:
        con = nsa.connect(db, read_only=True)
        try:
            assert con.execute("SELECT nsa_kernel_class('x')").fetchone() == ("team class",)
        finally:
            con.close()
    finally:
        queries.remove_folder(team)
    con = nsa.connect(db, read_only=True)  # the team's folder gone: the library's again
    try:
        assert con.execute("SELECT nsa_kernel_class('x')").fetchone() != ("team class",)
    finally:
        con.close()
