"""The facade: everything the CLI does, as functions a notebook calls the same way.

This is the one place deferred data is materialised (`materialise`): an ingest may leave large,
rarely read tables in the source export, and a query, the rules or the user's SQL get them
loaded here, from what the query library declares it reads (`-- reads`), before they run; the
rules and the queries themselves never load anything. A workspace the user cannot write
(shared, CI cache, read-only file system) still answers: the deferred rows are read from the
source export into TEMP tables of that connection, which hide the stored ones and are not saved.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from . import params, queries, schema
from .errors import QueryError
from .ingest import IngestResult, all_readers, deferred_for, ensure_loaded, ingest_file
from .ingest.nsys import WORKED_OUT
from .statements import canonical_writes
from .workspace import ENV_DB, open_workspace, resolve_db_path

if TYPE_CHECKING:
    from .rules import Finding, Rule
    from .rules.config import Threshold

__all__ = [
    "ENV_DB",
    "WORKED_OUT",
    "IngestResult",
    "connect",
    "engine",
    "findings",
    "ingest",
    "materialise",
    "query",
    "reader",
    "reports",
    "rules",
    "schema_tables",
    "sql",
]


def _open(db: str | os.PathLike[str] | None, read_only: bool) -> duckdb.DuckDBPyConnection:
    """The workspace with the query library's TEMP macros (they exist per connection)."""
    con = open_workspace(db, read_only=read_only)
    queries.install_macros(con)
    return con


def connect(
    db: str | os.PathLike[str] | None = None, read_only: bool = False, load_deferred: bool = True
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection on the workspace with every canonical table and library query.

    Library queries are table macros: `SELECT * FROM gaps(min_gap_ns := 100000)`. A writable
    connection first copies tables an ingest deferred (NVTX, OS runtime), so plain SQL sees
    every row; read-only connections can run beside other readers but not beside a writer, and
    load deferred tables (into TEMP tables) only when `query`, `findings` or `sql` need them.
    """
    con = _open(db, read_only=read_only)
    if load_deferred and not read_only:
        materialise(con, ingest_deferrable())
    return con


def writable(db: str | os.PathLike[str] | None = None) -> bool:
    """Can this user write the workspace file (and the folder DuckDB writes its WAL in)?"""
    path = resolve_db_path(db)
    if not path.exists():
        return True  # to be created: opening it writable says what is wrong, if anything
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def reader(
    db: str | os.PathLike[str] | None = None,
    needs: Iterable[str] | None = None,
    check: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A read-only connection for answering questions, so several can run side by side.

    When a needed table was deferred at ingest, a short writable session stores it first (or,
    when the workspace cannot be written, the read-only connection reads it from the source
    export); `check` runs before that, so a request it rejects changes nothing.
    """
    con = _open(db, read_only=True)
    try:
        if check is not None:
            check(con)
        needs = set(needs or ())
        if not (needs and deferred_for(con, needs)):
            return con
        if not writable(db):
            materialise(con, needs)
            return con
    except BaseException:
        con.close()
        raise
    con.close()
    writer = _open(db, read_only=False)
    try:
        materialise(writer, needs)
    finally:
        writer.close()
    return _open(db, read_only=True)


# Canonical tables each deferred step writes (a step named like a table writes that table).
_STEP_WRITES = {
    "kernel_launch": ("kernel_rows",),
    "nvtx_kernels": ("nvtx_ranges",),
    "steps": ("steps", "host_waits"),
}


def materialise(con: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> int:
    """Load the deferred data `tables` depend on, for every report; returns the steps loaded.

    The one place loading happens. A writable connection stores the rows in the workspace; a
    read-only one reads them from the source exports into TEMP tables (copies of the stored
    tables plus the deferred rows) that hide the stored tables for this connection only.
    When a source export is gone, the error says which report and file `nsa ingest --full`
    needs.
    """
    tables = set(tables)
    todo = deferred_for(con, tables)
    if not todo:
        return 0
    if is_read_only(con):
        temp = {
            name
            for row in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
            for name in row
        }
        shadow = {"reports"} | {w for _, _, step in todo for w in _STEP_WRITES.get(step, (step,))}
        stored = params.first_row(con.execute("SELECT current_database()"))[0]
        for name in sorted(shadow - temp):
            con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{stored}".main."{name}"')
    return ensure_loaded(con, tables)


def tables_needed(sql: str) -> set[str]:
    """Canonical tables a statement reads, directly or through library query macros (their
    declared `-- reads`)."""
    words = set(re.findall(r"[A-Za-z_]\w*", sql))
    needs = queries.tables_read(sql, exact=False)
    for name, q in queries.library().items():
        if name in words:
            needs |= q.tables()
    return needs


def ingest_deferrable() -> tuple[str, ...]:
    """Every step some reader can leave to first use (`nsa ingest` defers them unless --full)."""
    steps: list[str] = []
    for rd in all_readers():
        steps += [s for s in rd.deferrable if s not in steps]
    return tuple(steps)


def engine(db: str | os.PathLike[str] | None = None, read_only: bool = False) -> Any:
    """A SQLAlchemy engine on the workspace (duckdb-engine dialect), for pandas.read_sql & co.

    Every DBAPI connection is opened by `_open`, the code path `connect()` uses, so it
    has the same DuckDB configuration (a different one, such as duckdb-engine's own user-agent
    setting, makes DuckDB refuse a second connection in a process that already holds one) and
    the TEMP query macros, which exist per connection. Connections are not pooled: an engine
    kept in a notebook must not hold the workspace lock against `nsa ingest` in a terminal.
    Read-only connections on a workspace that cannot be written each read the deferred tables
    from the source exports (TEMP tables), as `reader` does.
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
        con = _open(path, read_only=read_only)
        if read_only:
            materialise(con, ingest_deferrable())  # a workspace that cannot be written: TEMP tables
        return ConnectionWrapper(con)

    return create_engine(f"duckdb:///{path}", creator=open_dbapi, poolclass=NullPool)


def ingest(con: duckdb.DuckDBPyConnection, path: str | Path, **options: Any) -> IngestResult:
    """Ingest one nsys SQLite export or ncu CSV; see nsight_analytics.ingest.ingest_file."""
    return ingest_file(con, path, **options)


def query(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> duckdb.DuckDBPyRelation:
    """Run a library query by name with bound parameters; `.df()`, `.to_arrow_table()`, `.fetchall()`."""
    q = queries.get(name)
    q.bind(params)  # a rejected parameter must not copy deferred tables first
    materialise(con, q.tables())
    return queries.run(con, name, params)


def library() -> list[queries.Query]:
    """The library queries and their contracts, in `nsa query --list` order."""
    return list(queries.library().values())


def get_query(name: str) -> queries.Query:
    return queries.get(name)


def sql(
    con: duckdb.DuckDBPyConnection, statement: str, allow_writes: bool = False
) -> duckdb.DuckDBPyRelation | None:
    """Run your own SQL after materialising what it reads; writes to nsa's canonical tables are
    refused (QueryError) unless `allow_writes`."""
    if not allow_writes:
        refuse_canonical_writes(statement)
    materialise(con, tables_needed(statement))  # only what this statement reads
    return con.sql(statement)


def refuse_canonical_writes(statement: str) -> None:
    """Raise QueryError when the statement writes to one of nsa's canonical tables (a
    `DELETE FROM reports` would leave the report's rows in every other table)."""
    writes = canonical_writes(statement)
    if writes:
        verb, table = writes[0]
        raise QueryError(
            f"{verb} on {table} is refused: nsa maintains {table}, and changing it by hand leaves "
            "the workspace inconsistent; write to a table of your own (CREATE TABLE mine AS ...), "
            "or pass --allow-writes if you mean it."
        )


def reports(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
    """The reports in the workspace, one row each."""
    return con.sql(
        "SELECT report_id, kind, tool_version, schema_version, activity_kinds, "
        "regexp_extract(source_path, '[^/]+$') AS file, ingested_at FROM reports ORDER BY report_id"
    )


def report_names(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """{report_id: file name}, for naming reports in findings."""
    rows = con.execute("SELECT report_id, regexp_extract(source_path, '[^/]+$') FROM reports").fetchall()
    return {int(r): str(n) for r, n in rows}


def rules() -> list[Rule]:
    """Every rule, in the order `nsa rules` lists them."""
    from .rules import rules as registered

    return registered()


def thresholds() -> list[Threshold]:
    """Every rule threshold with its default, unit and meaning."""
    from .rules import DEFAULTS

    return list(DEFAULTS.values())


def rules_config(config_path: str | Path | None = None, sets: Iterable[str] = ()) -> dict[str, Any]:
    """Thresholds from a TOML file and `name=value` overrides (`nsa findings --config/--set`)."""
    from .rules.config import load_config, parse_overrides

    return load_config(config_path, parse_overrides(list(sets)))


def parse_assignments(pairs: Iterable[str], option: str, example: str) -> dict[str, str]:
    """`name=value` pairs of a command-line option, checked."""
    from .rules.config import parse_assignments as parse

    return parse(list(pairs), option, example)


def rules_reads(only: Iterable[str] | None = None) -> set[str]:
    """The canonical tables the rules read: the union of what their queries declare
    (`-- reads`) and the tables each rule declares it reads outside them (`Rule.reads`)."""
    needs: set[str] = set()
    for r in rules():
        if only is None or r.id in set(only):
            needs |= set(r.reads)
            for name in r.queries:
                needs |= queries.get(name).tables()
    return needs


def findings(
    con: duckdb.DuckDBPyConnection,
    report_id: int | None = None,
    config: dict[str, Any] | None = None,
    only: list[str] | None = None,
) -> list[Finding]:
    """Ranked findings for one report (or all), after materialising what the rules read."""
    from .rules import run_rules

    require_reports(con, [report_id])
    materialise(con, rules_reads(only))
    return run_rules(con, report_id=report_id, config=config, only=only)


def summary(
    con: duckdb.DuckDBPyConnection, report_id: int | None = None, top: int = 5
) -> list[dict[str, Any]]:
    """One screen per report: the GPU timeline's span, busy and idle time per device, the `top`
    kernels by GPU time and the copies by direction (whole capture; `nsa query` for the rest).
    Plain data in base units (ns, bytes), one dict per report."""
    require_reports(con, [report_id])
    util = _by_report(query(con, "utilization", report_id=report_id))
    kernels = _by_report(query(con, "kernel_summary", report_id=report_id))
    copies = _by_report(query(con, "memcpy_summary", report_id=report_id))
    wanted = "" if report_id is None else f" WHERE report_id = {int(report_id)}"
    rows = con.execute(
        "SELECT report_id, kind, regexp_extract(source_path, '[^/]+$') FROM reports" + wanted + " ORDER BY 1"
    ).fetchall()
    return [
        {
            "report_id": rid,
            "file": file,
            "kind": kind,
            "devices": util.get(rid, []),
            "top_kernels": kernels.get(rid, [])[:top],
            "kernel_count": sum(k["instances"] for k in kernels.get(rid, [])),
            "copies": sorted(copies.get(rid, []), key=lambda c: -c["total_ns"]),
        }
        for rid, kind, file in rows
    ]


def _by_report(rel: duckdb.DuckDBPyRelation) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rel.fetchall():
        record = dict(zip(rel.columns, row, strict=True))
        out.setdefault(int(record["report_id"]), []).append(record)
    return out


def severities() -> tuple[str, ...]:
    from .rules import SEVERITIES

    return tuple(SEVERITIES)


def schema_tables() -> list[schema.Table]:
    """The canonical tables and views, documented column by column."""
    return list(schema.TABLES)


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
