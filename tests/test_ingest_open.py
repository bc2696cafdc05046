"""What opening a workspace and finding a report's reader cost: an up-to-date workspace is only
read (no transaction on every open), a view changed by a newer nsa is still made again, and the
reader of a report is found without importing every format's reader; `nsa ingest` loads DuckDB's
SQLite extension without its signature check, a notebook's connection with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from conftest import ROOT
from nsight_analytics import api, cli, params, schema, workspace
from nsight_analytics.ingest import reader, sqlite_source

WRITES = ("BEGIN", "CREATE", "INSERT", "DELETE", "ALTER", "COMMENT", "DROP", "UPDATE")


class _Recording:
    """A connection that records the statements run through it."""

    def __init__(self, con: duckdb.DuckDBPyConnection, seen: list[str]) -> None:
        self._con, self._seen = con, seen

    def execute(self, sql: str, *args: Any) -> Any:
        self._seen.append(sql.strip())
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def _statements_of_open(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = params.connect
    monkeypatch.setattr(workspace.params, "connect", lambda *a, **k: _Recording(real(*a, **k), seen))
    workspace.open_workspace(path).close()
    monkeypatch.setattr(workspace.params, "connect", real)
    return seen


def test_an_up_to_date_workspace_is_opened_without_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.duckdb"
    first = _statements_of_open(path, monkeypatch)
    assert any(s.startswith("CREATE TABLE") for s in first)  # a new workspace is made
    again = _statements_of_open(path, monkeypatch)
    assert [s for s in again if s.upper().startswith(WRITES)] == []
    with duckdb.connect(str(path), read_only=True) as con:
        views = {
            r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
        }
    assert views == {v.name for v in schema.VIEWS}


def test_a_view_from_another_nsa_is_made_again(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    workspace.open_workspace(path).close()
    view = schema.VIEWS[0]
    with duckdb.connect(str(path)) as con:  # as an older nsa left it: another definition, no comment
        con.execute(f'CREATE OR REPLACE VIEW "{view.name}" AS SELECT 1 AS only_column')
    workspace.open_workspace(path).close()
    with duckdb.connect(str(path), read_only=True) as con:
        cols = [r[0] for r in con.execute(f'DESCRIBE "{view.name}"').fetchall()]
    assert cols == view.col_names


def _in_fresh_python(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    ).stdout.strip()


def test_a_reader_is_found_without_importing_the_other_formats() -> None:
    out = _in_fresh_python(
        "import sys\n"
        "from nsight_analytics.ingest import reader\n"
        "rd = reader.by_name('nsys')\n"
        "others = sorted(m for m in sys.modules if m.startswith('nsight_analytics.ingest.') and "
        "m.split('.')[2] in ('kineto', 'ncu', 'power'))\n"
        "print(rd.name, others)\n"
    )
    assert out == "nsys []"


def test_every_reader_is_found_by_its_name_first() -> None:
    # by_name before anything listed every reader, in a fresh process, for each name; then the
    # same objects as the full discovery
    out = _in_fresh_python(
        "from nsight_analytics.ingest import reader\n"
        "names = ['nsys', 'nsys-rep', 'ncu', 'ncu-rep', 'kineto', 'nvml', 'nvidia-smi', 'none']\n"
        "found = {n: reader.by_name(n) for n in names}\n"
        "every = {r.name: r for r in reader.all_readers()}\n"
        "print(sorted(every), all(found[n] is every.get(n) for n in names))\n"
    )
    assert (
        out == str(sorted(["kineto", "ncu", "ncu-rep", "nsys", "nsys-rep", "nvidia-smi", "nvml"])) + " True"
    )


def test_a_registered_reader_is_found_before_the_packages() -> None:
    nsys = reader.by_name("nsys")
    assert nsys is not None

    class Mine(type(nsys)):  # type: ignore[misc]
        pass

    mine = Mine()
    reader.register(mine)
    try:
        assert reader.by_name("nsys") is mine
    finally:
        reader.unregister("nsys")
    assert reader.by_name("nsys") is nsys


def _unchecked(con: duckdb.DuckDBPyConnection) -> bool:
    """Does the connection load extensions without DuckDB's signature check?"""
    return bool(params.first_row(con.execute("SELECT current_setting('allow_unsigned_extensions')"))[0])


def test_only_a_standalone_open_skips_the_signature_check(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with workspace.open_workspace(path) as con:  # a notebook's: DuckDB's defaults
        assert not _unchecked(con)
        with duckdb.connect(str(path)) as own:  # so the user's own connection opens beside it
            assert own.execute("SELECT count(*) FROM reports").fetchone() == (0,)
    with workspace.open_workspace(path, standalone=True) as con:
        assert _unchecked(con)
    # opened in the process already: the defaults, no error
    with duckdb.connect(str(path)), workspace.open_workspace(path, standalone=True) as con:
        assert not _unchecked(con)


def test_nsa_ingest_loads_the_sqlite_extension_unchecked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    real = sqlite_source.load_extension

    def spy(con: duckdb.DuckDBPyConnection) -> None:
        seen.append(_unchecked(con))
        real(con)

    monkeypatch.setattr(sqlite_source, "load_extension", spy)
    export = ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite"
    result = CliRunner().invoke(cli.main, ["ingest", "-q", str(export), "--db", str(tmp_path / "cli.duckdb")])
    assert result.exit_code == 0, result.output
    con = api.connect(tmp_path / "api.duckdb")  # a notebook's ingest: checked
    try:
        api.ingest(con, export)
    finally:
        con.close()
    assert seen == [True, False]
