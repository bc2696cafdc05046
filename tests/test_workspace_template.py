"""A new workspace file is a copy of an empty one cached per library version (issue 31: creating
the tables and storing the query macros statement by statement cost every `nsa ingest` into a new
workspace ~0.12 CPU-s): made on the first new workspace, copied for the next, made again for
another library, and never needed: without a usable cache the workspace is created as before."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import duckdb
import pytest

import nsight_analytics as nsa
from nsight_analytics import queries, workspace

EXPORT = Path(__file__).parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(workspace.ENV_CACHE, str(folder))
    return folder


def _templates(cache: Path) -> list[Path]:
    return sorted(cache.glob("workspace-*.duckdb")) if cache.is_dir() else []


def _no_store(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the macro stores (a workspace made statement by statement stores them)."""
    stores: list[int] = []
    real = queries._store

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        stores.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(queries, "_store", counted)
    return stores


def _kernels(db: Path) -> tuple[int, list[tuple]]:
    con = nsa.connect(db)
    try:
        report = nsa.ingest(con, EXPORT).report_id
        rows = nsa.query(con, "kernel_summary").fetchall()
    finally:
        con.close()
    return report, sorted(rows, key=repr)


def _export_kernels() -> int:
    with sqlite3.connect(f"file:{EXPORT}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0])


def test_the_second_new_workspace_is_a_copy(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nsa.connect(tmp_path / "first.duckdb").close()
    assert len(_templates(cache)) == 1
    stores = _no_store(monkeypatch)
    report, rows = _kernels(tmp_path / "second.duckdb")
    assert stores == [] and len(_templates(cache)) == 1  # copied: no macro stored, no new template
    assert report == 1 and sum(r[2] for r in rows) == _export_kernels()  # instances per name
    raw = duckdb.connect(str(tmp_path / "second.duckdb"), read_only=True)  # plain DuckDB
    try:
        assert raw.execute("SELECT current_database()").fetchone() == ("second",)
        stamp = raw.execute(f"SELECT {queries.STAMP_MACRO}()").fetchone()[0]
        assert queries.builtin_macros().stamp in stamp
        assert raw.execute("SELECT max(schema_version) FROM nsa_workspace").fetchone() == (
            workspace.SCHEMA_VERSION,
        )
    finally:
        raw.close()


def test_the_same_rows_as_a_workspace_made_without_it(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nsa.connect(tmp_path / "warm.duckdb").close()
    copied = _kernels(tmp_path / "copied.duckdb")
    monkeypatch.setenv(workspace.ENV_CACHE, "")  # empty: no template
    stores = _no_store(monkeypatch)
    assert _kernels(tmp_path / "made.duckdb") == copied and stores == [1]


def test_another_library_gets_its_own_template(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nsa.connect(tmp_path / "a.duckdb").close()
    real = queries.builtin_macros
    for n in range(1, 6):  # five other libraries: the four newest templates are kept
        monkeypatch.setattr(queries, "builtin_macros", lambda n=n: real()._replace(stamp=f"other-{n}"))
        con = nsa.connect(tmp_path / f"other{n}.duckdb")
        try:
            stamp = con.execute(f"SELECT {queries.STAMP_MACRO}()").fetchone()[0]
        finally:
            con.close()
        assert f'"other-{n}"' in stamp
    assert len(_templates(cache)) == 4


def test_no_usable_cache_makes_the_workspace_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    for where in (str(blocker / "cache"), ""):  # cannot be made; turned off
        monkeypatch.setenv(workspace.ENV_CACHE, where)
        db = tmp_path / f"w{len(where)}.duckdb"
        report, rows = _kernels(db)
        assert report == 1 and sum(r[2] for r in rows) == _export_kernels()
    assert not (blocker / "cache").exists()


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG rule is for other systems")
def test_the_cache_folder_follows_the_xdg_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(workspace.ENV_CACHE, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert workspace.cache_dir() == tmp_path / "xdg" / "nsight-analytics"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # ignored, as the rule says
    assert workspace.cache_dir() == tmp_path / "home" / ".cache" / "nsight-analytics"
    monkeypatch.setenv(workspace.ENV_CACHE, str(tmp_path / "mine"))  # nsa's own variable wins
    assert workspace.cache_dir() == tmp_path / "mine"


def test_a_damaged_template_is_made_again(cache: Path, tmp_path: Path) -> None:
    nsa.connect(tmp_path / "a.duckdb").close()
    (template,) = _templates(cache)
    template.write_bytes(b"DUCK" * 1000)
    report, rows = _kernels(tmp_path / "b.duckdb")
    assert report == 1 and sum(r[2] for r in rows) == _export_kernels()
    assert not template.exists()  # removed; the next new workspace makes it again
    nsa.connect(tmp_path / "c.duckdb").close()
    assert _templates(cache) == [template] and template.stat().st_size > 4000


def test_an_existing_workspace_is_not_replaced(cache: Path, tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    _kernels(db)
    con = nsa.connect(db)
    try:
        assert con.execute("SELECT count(*) FROM reports").fetchone() == (1,)
    finally:
        con.close()


def test_the_library_macros_worked_out_once_are_worked_out_again_when_a_folder_changes(
    tmp_path: Path,
) -> None:
    """builtin_macros is kept per process (every workspace opened reads it), but a query folder
    added later is still checked: a team macro named like a library macro is refused."""
    first = queries.builtin_macros()
    assert queries.builtin_macros() is first
    team = tmp_path / "team"
    team.mkdir()
    (team / "_macros.sql").write_text("CREATE MACRO nsa_gpu_activity(rid) AS TABLE SELECT 1 AS x;\n")
    queries.add_folder(team)
    try:
        with pytest.raises(queries.QueryError, match="would replace the library's"):
            queries.builtin_macros()
    finally:
        queries.reset_folders()
    assert queries.builtin_macros().stamp == first.stamp


def _storage(db: Path) -> str:
    """The storage format DuckDB reads from the file's header, through a plain connection."""
    with duckdb.connect(str(db), read_only=True) as raw:
        return str(
            raw.execute(
                "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()"
            ).fetchone()[0]
        )


@pytest.mark.parametrize("cached", [True, False])
def test_a_new_workspace_stores_strings_as_dict_fsst_and_opens_beside_plain_duckdb(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    """New files, copied from the template or made statement by statement, have the storage
    format of workspace.STORAGE_VERSION in their header (DuckDB's default is v1.0's, without
    DICT_FSST), with no connect-time setting: a notebook's own duckdb.connect opens beside
    nsa.connect. The file is made under another name, which does not stay behind."""
    if not cached:
        monkeypatch.setenv(workspace.ENV_CACHE, "")
    db = tmp_path / "w.duckdb"
    con = nsa.connect(db)
    try:
        with duckdb.connect(str(db)) as own:
            assert own.execute("SELECT count(*) FROM reports").fetchone() == (0,)
            own.execute("CREATE TABLE strings AS SELECT 'name ' || (i % 100) AS s FROM range(200000) r(i)")
        con.execute("CHECKPOINT")
        kinds = {
            r[0] for r in con.execute("SELECT compression FROM pragma_storage_info('strings')").fetchall()
        }
    finally:
        con.close()
    assert "DICT_FSST" in kinds
    assert _storage(db) == "v1.5.0+"
    assert sorted(p.name for p in tmp_path.iterdir()) == (["cache", "w.duckdb"] if cached else ["w.duckdb"])


def test_a_workspace_made_in_the_default_format_keeps_it(cache: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.duckdb"
    duckdb.connect(str(old)).close()  # DuckDB's default format, as every workspace made before
    report, rows = _kernels(old)
    assert report == 1 and sum(r[2] for r in rows) == _export_kernels()
    assert _storage(old) == "v1.0.0+"


def test_a_new_file_that_cannot_be_made_in_that_format_is_made_as_before(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(workspace.ENV_CACHE, "")
    monkeypatch.setattr(workspace, "STORAGE_VERSION", "v0.0.1")  # a version DuckDB refuses
    db = tmp_path / "w.duckdb"
    report, rows = _kernels(db)
    assert report == 1 and sum(r[2] for r in rows) == _export_kernels()
    assert _storage(db) == "v1.0.0+"
    assert [p.name for p in tmp_path.iterdir()] == ["w.duckdb"]  # nothing left of the attempt
