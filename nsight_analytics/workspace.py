"""The workspace: one DuckDB file holding many reports side by side.

DuckDB gives us the two guarantees users need: a transaction that was not committed is
invisible after a crash (its WAL is replayed only up to the last commit), and a second
process cannot open the file for writing while one holds it (an OS file lock). This module
turns DuckDB's lock and I/O errors into sentences that say what to do.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import duckdb

from . import params, schema
from .errors import WorkspaceError

log = logging.getLogger(__name__)

DEFAULT_DB = "nsa.duckdb"
ENV_DB = "NSA_DB"


def resolve_db_path(db: str | os.PathLike[str] | None = None) -> Path:
    """--db wins, then $NSA_DB, then ./nsa.duckdb."""
    if db is None:
        db = os.environ.get(ENV_DB) or DEFAULT_DB
    return Path(db).expanduser().resolve()


ENV_LOCK_WAIT = "NSA_LOCK_WAIT"
DEFAULT_LOCK_WAIT_S = 10.0


def _is_lock_error(exc: duckdb.Error) -> bool:
    return "lock" in str(exc).lower()


def _lock_wait_s() -> float:
    try:
        return max(float(os.environ.get(ENV_LOCK_WAIT, DEFAULT_LOCK_WAIT_S)), 0.0)
    except ValueError:
        return DEFAULT_LOCK_WAIT_S


def _explain(exc: duckdb.Error, path: Path, read_only: bool = False, waited_s: float = 0.0) -> WorkspaceError:
    text = str(exc)
    if _is_lock_error(exc):
        holder = re.search(r"PID (\d+)", text)
        who = f" (process {holder.group(1)})" if holder else ""
        waited = f"nsa waited {waited_s:g} s; " if waited_s else ""
        longer = f"set {ENV_LOCK_WAIT}=SECONDS to wait longer"
        if read_only:  # readers share the file: only a writer (an ingest, nsa sql) holds it now
            return WorkspaceError(
                f"workspace {path} is being written by another process{who}, which keeps it locked "
                f"until it ends ({waited}{longer}); run again when it is done, or ingest into a "
                "separate workspace with --db next time to query this one meanwhile."
            )
        return WorkspaceError(
            f"workspace {path} is open in another process{who} (an ingest, a query or a notebook's "
            f"connection) and DuckDB lets only one process write it ({waited}{longer}); close it "
            "there or let it finish, then run again."
        )
    if "Permission denied" in text or "Read-only file system" in text:
        return WorkspaceError(
            f"cannot write the workspace {path}: permission denied; choose a writable path "
            f"with --db or ${ENV_DB}."
        )
    if "not a valid DuckDB database" in text or "Invalid Input Error" in text:
        return WorkspaceError(
            f"{path} is not an nsa workspace (not a DuckDB database file); choose another "
            f"path with --db or ${ENV_DB}."
        )
    reason = text.split(":", 1)[-1].strip() if ":" in text else text
    return WorkspaceError(
        f"cannot open the workspace {path} ({reason}); choose a writable path with --db or ${ENV_DB}."
    )


def open_workspace(
    db: str | os.PathLike[str] | None = None, *, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """Open (creating when writable) the workspace and make sure the canonical tables exist.

    The query library's macros are not installed here: the facade (api) does that, a layer up."""
    path = resolve_db_path(db)
    if read_only and not path.exists():
        raise WorkspaceError(
            f"no workspace at {path}; ingest a report first (`nsa ingest FILE`) or pass --db."
        )
    if not read_only:
        parent = path.parent
        if not parent.exists():
            raise WorkspaceError(f"cannot create the workspace {path}: folder {parent} does not exist.")
        if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise WorkspaceError(
                f"cannot write the workspace {path}: permission denied; choose a writable path "
                f"with --db or ${ENV_DB}."
            )
    con = _connect_waiting(path, read_only)
    # Nothing may ever be downloaded at run time (air-gapped clusters).
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    if not read_only:
        ensure_schema(con)
    elif needs_upgrade(con) or (_lacks_columns(con) and os.access(path, os.W_OK)):
        # Made by an older nsa: upgrade it once in a short writable session, then read.
        con.close()
        open_workspace(path).close()
        return open_workspace(path, read_only=True)
    return con


def _connect_waiting(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """Connect; while another process holds the file's lock (an ingest a few seconds long),
    retry for up to $NSA_LOCK_WAIT seconds before saying who holds it and what to do."""
    deadline = time.monotonic() + _lock_wait_s()
    pause = 0.05
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            left = deadline - time.monotonic()
            if not _is_lock_error(exc) or left <= 0:
                raise _explain(exc, path, read_only, _lock_wait_s() if _is_lock_error(exc) else 0) from exc
            if pause == 0.05:
                log.info("workspace %s is locked by another process; waiting up to %.0f s", path, left)
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.5)


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create missing tables and views, and bring a workspace made by an older nsa up to date:
    columns a newer nsa declares are added (NULL in existing rows: those exports were read
    without them), and a `kernels` table with names on every row becomes kernel_rows."""
    con.execute("BEGIN TRANSACTION")
    if needs_upgrade(con):
        _kernels_table_to_rows(con)
    before = {t for t, _ in _columns(con)}
    for table in schema.STORED:
        con.execute(table.ddl())
    if "reports" in before:
        # nsys reports ingested by an nsa that did not read these: from their source on first use
        for new_table in ("graph_executions", "graph_events", "steps"):  # steps: host_waits too
            if new_table not in before:
                params.execute(
                    con,
                    "UPDATE reports SET deferred_tables = list_append(deferred_tables, $t) "
                    "WHERE kind = 'nsys' AND NOT list_contains(deferred_tables, $t)",
                    {"t": new_table},
                )
    have = _columns(con)
    for table in schema.STORED:
        for col in table.cols:
            if (table.name, col.name) not in have:
                con.execute(f'ALTER TABLE "{table.name}" ADD COLUMN "{col.name}" {col.type}')
    nvtx = {c for t, c in have if t == "nvtx_ranges"}
    if "name" in nvtx and not {"kernels", "process_kernels"} <= nvtx:
        _defer_nvtx_kernels(con)
    if "name" in nvtx and "base_name" not in nvtx:
        from .ingest.nsys import base_name_sql  # the expression the copy uses

        con.execute(f"UPDATE nvtx_ranges SET base_name = {base_name_sql('name')}")
    views = dict(
        con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND NOT internal"
        ).fetchall()
    )
    for view in schema.VIEWS:
        if _bare(view.view) not in _bare(views.get(view.name) or ""):  # missing, or older
            con.execute(view.ddl())
    con.execute("COMMIT")


def _defer_nvtx_kernels(con: duckdb.DuckDBPyConnection) -> None:
    """NVTX ranges copied by an nsa that did not store each range's kernels (or only the
    same-thread ones, not process_kernels): computed on the ranges' next use, like for a new
    report whose ranges were just copied."""
    con.execute(
        "UPDATE reports SET deferred_tables = list_append(deferred_tables, 'nvtx_kernels') "
        "WHERE report_id IN (SELECT DISTINCT report_id FROM nvtx_ranges) "
        "AND NOT list_contains(deferred_tables, 'nvtx_kernels')"
    )


def _lacks_columns(con: duckdb.DuckDBPyConnection) -> bool:
    """A table or column this nsa declares is missing (an older nsa made the workspace): read
    only, queries would fail on it (nvtx_summary on nvtx_ranges.base_name) or see ranges whose
    kernels an older nsa did not compute; ensure_schema adds it and defers what must be computed."""
    have = _columns(con)
    return any((t.name, c.name) not in have for t in schema.STORED for c in t.cols)


def _columns(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str]]:
    """(table, column) of every table and view in the workspace."""
    return set(
        con.execute(
            "SELECT table_name, column_name FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name = 'main'"
        ).fetchall()
    )


def _bare(sql: str) -> str:
    """SQL without whitespace and quotes: DuckDB stores a view's text re-quoted on one line."""
    return re.sub(r'[\s"]', "", sql)


def needs_upgrade(con: duckdb.DuckDBPyConnection) -> bool:
    """True for a workspace whose `kernels` is still a table (nsa before kernel_rows)."""
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = 'kernels'"
    ).fetchone()
    return bool(row and row[0])


def _kernels_table_to_rows(con: duckdb.DuckDBPyConnection) -> None:
    """Move the rows of an old `kernels` table to kernel_rows, naming each distinct name with
    an id of its own (the export's StringIds ids were not kept), and rebuild kernel_names."""
    have = _columns(con)
    cols = {c for t, c in have if t == "kernels"}
    old_names = {c for t, c in have if t == "kernel_names"}
    if "mangled_name" in old_names and "name_id" not in old_names:
        mangled = "(SELECT min(o.mangled_name) FROM kernel_names o WHERE o.report_id = k.report_id AND o.name = k.name)"
    elif "mangled_name" in cols:
        mangled = "min(k.mangled_name)"
    else:
        mangled = "NULL"
    con.execute(
        "CREATE TEMP TABLE _nsa_upgrade_names AS SELECT report_id, "
        "row_number() OVER (PARTITION BY report_id ORDER BY name) AS name_id, name, short_name, "
        f"mangled_name, kernels FROM (SELECT k.report_id, k.name, min(k.short_name) AS short_name, "
        f"{mangled} AS mangled_name, count(*) AS kernels FROM kernels k GROUP BY k.report_id, k.name)"
    )
    rows = schema.BY_NAME["kernel_rows"]
    con.execute("DROP TABLE IF EXISTS kernel_names")
    con.execute(rows.ddl())
    con.execute(schema.BY_NAME["kernel_names"].ddl())
    picked = ", ".join(
        "n.name_id" if c == "name_id" else (f"k.{c}" if c in cols else "NULL") for c in rows.col_names
    )
    con.execute(
        f"INSERT INTO kernel_rows SELECT {picked} FROM kernels k JOIN _nsa_upgrade_names n "
        "ON n.report_id = k.report_id AND n.name IS NOT DISTINCT FROM k.name"
    )
    con.execute("INSERT INTO kernel_names BY NAME SELECT * FROM _nsa_upgrade_names")
    con.execute("DROP TABLE kernels")
    con.execute("DROP TABLE _nsa_upgrade_names")


def next_report_id(con: duckdb.DuckDBPyConnection) -> int:
    return int(params.first_row(con.execute("SELECT coalesce(max(report_id), 0) + 1 FROM reports"))[0])
