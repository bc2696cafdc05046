"""The Python API: the same functions the CLI calls."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb

from . import queries
from .ingest import IngestResult, ensure_loaded, ingest_file
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


def ingest_deferrable() -> tuple[str, ...]:
    from .ingest.nsys import DEFERRABLE

    return DEFERRABLE


def engine(db: str | os.PathLike[str] | None = None, read_only: bool = False) -> Any:
    """A SQLAlchemy engine on the workspace (duckdb-engine dialect), for pandas.read_sql & co."""
    from sqlalchemy import create_engine

    path = resolve_db_path(db)
    if not read_only:
        open_workspace(path).close()  # create it and its tables
    args = {"read_only": True} if read_only else {}
    return create_engine(f"duckdb:///{path}", connect_args=args)


def ingest(con: duckdb.DuckDBPyConnection, path: str | Path, **options: Any) -> IngestResult:
    """Ingest one nsys SQLite export or ncu CSV; see nsight_analytics.ingest.ingest_file."""
    return ingest_file(con, path, **options)


def query(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> duckdb.DuckDBPyRelation:
    """Run a library query by name with bound parameters; `.df()`, `.arrow()`, `.fetchall()`."""
    q = queries.get(name)
    needs = q.tables()
    if not _is_read_only(con):
        ensure_loaded(con, needs)
    return queries.run(con, name, params)


def _is_read_only(con: duckdb.DuckDBPyConnection) -> bool:
    try:
        return bool(con.execute("SELECT current_setting('access_mode') = 'read_only'").fetchone()[0])
    except duckdb.Error:
        return False
