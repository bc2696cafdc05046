"""The workspace's layout version: stored on creation, numbered migrations run oldest first in
one transaction, and workspaces nsa cannot bring up to date are refused with a sentence."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from nsight_analytics import schema, workspace
from nsight_analytics.cli import EXIT_ERROR, EXIT_OK, main
from nsight_analytics.errors import WorkspaceError


def _version(path: Path) -> int:
    with duckdb.connect(str(path), read_only=True) as con:
        return int(con.execute("SELECT schema_version FROM nsa_workspace").fetchone()[0])


def test_new_workspace_stores_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    workspace.open_workspace(path).close()
    assert _version(path) == workspace.SCHEMA_VERSION
    workspace.open_workspace(path).close()  # opening again changes nothing
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM nsa_workspace").fetchone()[0] == 1


def test_migrations_run_oldest_first_then_the_version_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.duckdb"
    workspace.open_workspace(path).close()  # a workspace of this version
    now = workspace.SCHEMA_VERSION
    ran: list[int] = []

    def step(n: int):
        def run(con: duckdb.DuckDBPyConnection) -> None:
            ran.append(n)
            con.execute(f"CREATE TABLE IF NOT EXISTS migrated_{n} (x INTEGER)")

        return run

    monkeypatch.setattr(workspace, "SCHEMA_VERSION", now + 2)
    monkeypatch.setattr(workspace, "MIGRATIONS", {now + 2: step(now + 2), now + 1: step(now + 1)})
    workspace.open_workspace(path, read_only=True).close()  # a reader upgrades it once, briefly writable
    assert ran == [now + 1, now + 2]
    assert _version(path) == now + 2
    workspace.open_workspace(path).close()
    assert ran == [now + 1, now + 2]  # nothing runs twice


def test_a_failing_migration_leaves_the_workspace_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.duckdb"
    workspace.open_workspace(path).close()

    def broken(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("CREATE TABLE half_done (x INTEGER)")
        raise RuntimeError("migration bug")

    now = workspace.SCHEMA_VERSION
    monkeypatch.setattr(workspace, "SCHEMA_VERSION", now + 1)
    monkeypatch.setattr(workspace, "MIGRATIONS", {now + 1: broken})
    with pytest.raises(RuntimeError):
        workspace.open_workspace(path).close()
    monkeypatch.setattr(workspace, "SCHEMA_VERSION", now)
    assert _version(path) == now
    with duckdb.connect(str(path), read_only=True) as con:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "half_done" not in tables


def test_workspace_of_a_newer_nsa_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    workspace.open_workspace(path).close()
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE nsa_workspace SET schema_version = ?", [workspace.SCHEMA_VERSION + 1])
    with pytest.raises(WorkspaceError, match="newer than this nsa's"):
        workspace.open_workspace(path)
    res = CliRunner().invoke(main, ["reports", "--db", str(path)])
    assert res.exit_code == EXIT_ERROR
    assert "upgrade nsa" in res.stderr and "Traceback" not in res.output


def test_pre_release_workspace_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with duckdb.connect(str(path)) as con:  # reports but no layout version: a pre-release nsa
        con.execute("CREATE TABLE reports (report_id INTEGER)")
    res = CliRunner().invoke(main, ["reports", "--db", str(path)])
    assert res.exit_code == EXIT_ERROR
    assert "pre-release nsa" in res.stderr and "ingest the reports again" in res.stderr
    assert CliRunner().invoke(main, ["reports", "--db", str(tmp_path / "new.duckdb")]).exit_code == EXIT_ERROR
    workspace.open_workspace(tmp_path / "new.duckdb").close()
    assert CliRunner().invoke(main, ["reports", "--db", str(tmp_path / "new.duckdb")]).exit_code == EXIT_OK


def test_version_1_workspace_gets_deferred_steps(tmp_path: Path) -> None:
    """Migration 2: a version-1 workspace's reports.deferred_tables (it held steps, not tables)
    becomes deferred_steps, its values kept, and the deferred steps still run."""
    from nsight_analytics.cli import demo_input

    path = tmp_path / "w.duckdb"
    con = workspace.open_workspace(path)
    from nsight_analytics import api

    api.ingest(con, demo_input())
    con.close()
    with duckdb.connect(str(path)) as old:  # as version 1 left it
        old.execute("ALTER TABLE reports RENAME COLUMN deferred_steps TO deferred_tables")
        old.execute("UPDATE nsa_workspace SET schema_version = 1")
        (steps,) = old.execute("SELECT deferred_tables FROM reports").fetchone()
    assert steps
    res = CliRunner().invoke(main, ["query", "gaps", "--db", str(path), "--format", "csv"])  # reads cuda_api
    assert res.exit_code == EXIT_OK, res.output
    assert _version(path) == workspace.SCHEMA_VERSION
    with duckdb.connect(str(path), read_only=True) as new:
        cols = {
            r[0]
            for r in new.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = 'reports'"
            ).fetchall()
        }
        (left,) = new.execute("SELECT deferred_steps FROM reports").fetchone()
    assert "deferred_tables" not in cols
    assert (
        "cuda_api" in steps and "cuda_api" not in left and set(left) < set(steps)
    )  # gaps loaded what it reads


def test_version_2_workspace_gets_the_renamed_kind_columns(tmp_path: Path) -> None:
    """Migration 3: the columns that used `kind` for something other than the activity kind are
    renamed in place, their values kept: a version-2 workspace answers as a new one does."""
    from nsight_analytics import api
    from nsight_analytics.cli import demo_input

    fresh, old = tmp_path / "fresh.duckdb", tmp_path / "old.duckdb"
    for path in (fresh, old):
        con = workspace.open_workspace(path)
        api.ingest(con, demo_input())
        con.close()
    with duckdb.connect(str(old)) as con:  # as version 2 left it
        for table, was, now in workspace._RENAMED_3:
            con.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{now}" TO "{was}"')
        con.execute("UPDATE nsa_workspace SET schema_version = 2")
        assert con.execute("SELECT count(*) FROM memcpy WHERE copy_kind = 'HtoD'").fetchone()[0] > 0

    def answers(path: Path) -> list[list[str]]:
        out = []
        for args in (["query", "memcpy_summary"], ["reports"]):
            res = CliRunner().invoke(main, [*args, "--db", str(path), "--format", "csv"])
            assert res.exit_code == EXIT_OK, res.output
            out.append(
                [line.rsplit(",", 1)[0] if args == ["reports"] else line for line in res.output.splitlines()]
            )
        return out  # reports without ingested_at

    assert answers(old) == answers(fresh)
    assert "direction,src_memory,dst_memory" in answers(old)[0][0]
    assert _version(old) == workspace.SCHEMA_VERSION
    with duckdb.connect(str(old), read_only=True) as con:
        cols = set(con.execute("SELECT table_name, column_name FROM duckdb_columns()").fetchall())
    assert not {(t, was) for t, was, _ in workspace._RENAMED_3} & cols


def test_a_column_gone_from_a_table_is_added_back_when_a_reader_opens_it(tmp_path: Path) -> None:
    """The layout check reads each table's columns (pragma_table_info): a table that lacks a
    declared column is out of date, and a reader's open brings it up to date."""
    path = tmp_path / "w.duckdb"
    workspace.open_workspace(path).close()
    with duckdb.connect(str(path)) as con:
        con.execute("ALTER TABLE memcpy DROP COLUMN direction")
        con.execute('CREATE TABLE "it\'s a ""table"".x" (a INTEGER, "b c" VARCHAR)')  # a user's own
        con.execute('CREATE TABLE "x\'y.z" (a INTEGER)')
        con.execute("CREATE VIEW mine AS SELECT 1 AS one")
    with duckdb.connect(str(path), read_only=True) as con:
        assert workspace._out_of_date(con)
        assert ("memcpy", "direction") not in workspace._columns(con)
    workspace.open_workspace(path, read_only=True).close()  # upgraded in a short writable session
    with duckdb.connect(str(path), read_only=True) as con:
        assert not workspace._out_of_date(con)
        have = workspace._columns(con)
        assert ("memcpy", "direction") in have
        assert {(t, c) for t, c in have if t not in {s.name for s in schema.STORED}} == {
            ('it\'s a "table".x', "a"),
            ('it\'s a "table".x', "b c"),
            ("x'y.z", "a"),
        }
    with duckdb.connect(str(path)) as con:  # names pragma_table_info reads: no table with a `"`
        con.execute('DROP TABLE "it\'s a ""table"".x"')
        assert {(t, c) for t, c in workspace._columns(con) if t == "x'y.z"} == {("x'y.z", "a")}
