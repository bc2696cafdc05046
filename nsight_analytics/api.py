"""The Python API: the same functions the CLI calls."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb

from . import params, queries
from .errors import QueryError
from .ingest import IngestResult, deferred_for, ensure_loaded, ingest_file
from .workspace import open_workspace, resolve_db_path


def connect(
    db: str | os.PathLike[str] | None = None, read_only: bool = False, load_deferred: bool = True
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection on the workspace with every canonical table and library query.

    Library queries are table macros: `SELECT * FROM gaps(min_gap_ns := 100000)`. A writable
    connection first copies tables an ingest deferred (NVTX, OS runtime), so plain SQL sees
    every row; read-only connections can run beside other readers but not beside a writer.
    """
    con = open_workspace(db, read_only=read_only)
    if load_deferred and not read_only:
        ensure_loaded(con, ingest_deferrable())
    return con


def reader(
    db: str | os.PathLike[str] | None = None,
    needs: set[str] | None = None,
    check: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A read-only connection for answering questions, so several can run side by side.

    When a needed table was deferred at ingest, a short writable session copies it first;
    `check` runs before that, so a request it rejects changes nothing in the workspace.
    """
    con = open_workspace(db, read_only=True)
    if check is not None:
        try:
            check(con)
        except BaseException:
            con.close()
            raise
    if needs and deferred_for(con, needs):
        con.close()
        writer = open_workspace(db)
        try:
            ensure_loaded(writer, needs)
        finally:
            writer.close()
        con = open_workspace(db, read_only=True)
    return con


def tables_needed(sql: str) -> set[str]:
    """Canonical tables a statement reads, directly or through library query macros."""
    words = set(re.findall(r"[A-Za-z_]\w*", sql))
    needs = queries.tables_read(sql, exact=False)
    for name, q in queries.library().items():
        if name in words:
            needs |= q.tables()
    return needs


def ingest_deferrable() -> tuple[str, ...]:
    from .ingest.nsys import DEFERRABLE

    return DEFERRABLE


def engine(db: str | os.PathLike[str] | None = None, read_only: bool = False) -> Any:
    """A SQLAlchemy engine on the workspace (duckdb-engine dialect), for pandas.read_sql & co.

    Every DBAPI connection is opened by `open_workspace`, the code path `connect()` uses, so it
    has the same DuckDB configuration (a different one, such as duckdb-engine's own user-agent
    setting, makes DuckDB refuse a second connection in a process that already holds one) and
    the TEMP query macros, which exist per connection. Connections are not pooled: an engine
    kept in a notebook must not hold the workspace lock against `nsa ingest` in a terminal.
    """
    from duckdb_engine import ConnectionWrapper
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    path = resolve_db_path(db)
    # Create the workspace and copy deferred tables once, so plain SQL sees every row.
    (reader(path, needs=set(ingest_deferrable())) if read_only else connect(path)).close()

    def open_dbapi() -> ConnectionWrapper:
        # duckdb-engine's DBAPI connection wraps the duckdb one; it forwards attribute access
        # and keeps the raw connection as `_ConnectionWrapper__c`.
        return ConnectionWrapper(open_workspace(path, read_only=read_only))

    return create_engine(f"duckdb:///{path}", creator=open_dbapi, poolclass=NullPool)


def ingest(con: duckdb.DuckDBPyConnection, path: str | Path, **options: Any) -> IngestResult:
    """Ingest one nsys SQLite export or ncu CSV; see nsight_analytics.ingest.ingest_file."""
    return ingest_file(con, path, **options)


def query(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> duckdb.DuckDBPyRelation:
    """Run a library query by name with bound parameters; `.df()`, `.to_arrow_table()`, `.fetchall()`."""
    q = queries.get(name)
    q.bind(params)  # a rejected parameter must not copy deferred tables first
    if not is_read_only(con):
        ensure_loaded(con, q.tables())
    return queries.run(con, name, params)


def require_reports(con: duckdb.DuckDBPyConnection, report_ids: Iterable[int | None]) -> None:
    """Raise QueryError unless every report id given (None: all reports) is in the workspace."""
    for rid in report_ids:
        if rid is None:
            continue
        found = params.execute(con, "SELECT count(*) FROM reports WHERE report_id = $rid", {"rid": rid})
        if not params.first_row(found)[0]:
            raise QueryError(f"no report {rid} in the workspace; `nsa reports` lists them.")


def is_read_only(con: duckdb.DuckDBPyConnection) -> bool:
    try:
        return bool(params.first_row(con.execute("SELECT current_setting('access_mode') = 'read_only'"))[0])
    except duckdb.Error:
        return False
