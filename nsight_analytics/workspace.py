"""The workspace: one DuckDB file holding many reports side by side.

DuckDB gives us the two guarantees users need: a transaction that was not committed is
invisible after a crash (its WAL is replayed only up to the last commit), and a second
process cannot open the file for writing while one holds it (an OS file lock). This module
turns DuckDB's lock and I/O errors into sentences that say what to do.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import duckdb

from . import config_files, params, schema
from .errors import WorkspaceError, os_problem
from .names import ENV_DB

log = logging.getLogger(__name__)

DEFAULT_DB = "nsa.duckdb"


MEMORY = ":memory:"


def resolve_db_path(db: str | os.PathLike[str] | None = None) -> Path:
    """--db wins, then $NSA_DB, then ./nsa.duckdb. A symbolic link loop or a name too long is
    refused here, the same on every Python (3.13's Path.resolve no longer raises on a loop)."""
    if db is None:
        db = os.environ.get(ENV_DB) or DEFAULT_DB
    path = Path(db).expanduser()
    try:
        os.stat(path)
    except OSError as exc:  # a path that does not exist yet is fine: the workspace is created
        problem = os_problem(exc)
        if problem is not None:
            raise WorkspaceError(problem) from exc
    return path.resolve()


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


# What a new workspace file holds besides the canonical tables (the query library's macros):
# `key` names that content (changes whenever it does), `fill` writes it into a connection.
Template = tuple[str, Callable[[duckdb.DuckDBPyConnection], object]]


def open_workspace(
    db: str | os.PathLike[str] | None = None,
    *,
    read_only: bool = False,
    standalone: bool = False,
    template: Template | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open (creating when writable) the workspace and make sure the canonical tables exist.

    The query library's macros are not installed here: the facade (api) does that, a layer up,
    and gives `template` for a new file, which is then a copy of a cached empty workspace with
    the tables and that content (see _copy_template). `:memory:` is a workspace in memory, as
    in DuckDB (not a file of that name). `standalone`: the caller is an nsa command, which runs
    no one else's SQL and opens the file nowhere else in its process (see STANDALONE)."""
    if db is not None and os.fspath(db) == MEMORY:
        con = params.connect(MEMORY)
        con.execute("SET asof_loop_join_threshold = 0")
        ensure_schema(con)
        return con
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
    _refuse_export(path)
    copied = template is not None and not read_only and _copy_template(path, template)
    if not read_only and not copied:
        _create(path)
    try:  # extensions are never downloaded (params.connect)
        con = _connect_waiting(path, read_only, standalone)
    except WorkspaceError as exc:
        cause = exc.__cause__
        if not copied or template is None or not isinstance(cause, duckdb.Error) or _is_lock_error(cause):
            raise
        # the cached copy is not a workspace this DuckDB opens (damaged): made anew, without it
        _remove_template(template[0])
        path.unlink(missing_ok=True)
        return open_workspace(path, standalone=standalone)
    # DuckDB runs an ASOF join as a nested loop when it guesses the probing side has under 64
    # rows; its guesses for CTEs and macros are often that low while the real side has
    # thousands (step windows, collectives): a 104M-row loop in rank_balance at 1M kernels.
    con.execute("SET asof_loop_join_threshold = 0")
    if not read_only:
        ensure_schema(con)
    elif _out_of_date(con) and os.access(path, os.W_OK):
        # Made by an older nsa: upgrade it once in a short writable session, then read.
        con.close()
        open_workspace(path, standalone=standalone).close()
        return open_workspace(path, read_only=True, standalone=standalone)
    return con


# The cached templates: an empty workspace (canonical tables, views, the library's macros) per
# library, layout and DuckDB version, made on the first new workspace and copied for the next
# ones, which then cost a file copy instead of creating ~40 tables and storing ~70 macros (DuckDB
# parsing ~245k characters of SQL, ~0.1 CPU-s). $NSA_CACHE_DIR names the folder; empty, no
# template is used.
ENV_CACHE = "NSA_CACHE_DIR"
_TEMPLATE = "workspace-{}.duckdb"
_KEEP_TEMPLATES = 4  # the newest: a few nsa versions side by side each keep theirs


def cache_dir() -> Path | None:
    """nsa's folder in the user's cache ($NSA_CACHE_DIR, else the platform's): None when
    $NSA_CACHE_DIR is empty or no home folder is known."""
    env = os.environ.get(ENV_CACHE)
    if env is not None:
        return Path(env).expanduser() if env else None
    try:
        if sys.platform == "win32":
            base = os.environ.get("LOCALAPPDATA")
            root = Path(base) if base else None
        elif sys.platform == "darwin":
            root = Path.home() / "Library" / "Caches"
        else:
            root = config_files.xdg_home("XDG_CACHE_HOME", ".cache")
    except RuntimeError:  # no home folder
        return None
    return root / "nsight-analytics" if root else None


def _template_path(key: str) -> Path | None:
    """The template of this content key, schema (tables, views, layout version) and DuckDB version."""
    folder = cache_dir()
    if folder is None:
        return None
    parts = [key, str(SCHEMA_VERSION), duckdb.__version__, STORAGE_VERSION, *(t.ddl() for t in schema.TABLES)]
    return folder / _TEMPLATE.format(hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32])


def _copy_template(path: Path, template: Template) -> bool:
    """Make the new workspace `path` a copy of the cached template (made first when missing);
    False, changing nothing, where the file exists, or the cache cannot be read or written
    (the caller then creates the workspace statement by statement)."""

    def copy(partial: Path) -> None:
        cached = _template_path(template[0])
        if cached is None:
            raise OSError("no cache folder ($NSA_CACHE_DIR empty, or no home folder)")
        if not cached.is_file():
            _make_template(cached, template[1])
        shutil.copyfile(cached, partial)

    return _placed(path, "template", copy, "without the cached template")


def _placed(path: Path, tag: str, write: Callable[[Path], object], otherwise: str) -> bool:
    """Make the new workspace `path` by `write`-ing a file under another name (`tag` and this
    process's id), then linking it: a concurrent `nsa ingest` to the same path sees either no file
    or a whole one, and the one that links second opens the first's. False, changing nothing,
    where the file (or a WAL of it) exists or it cannot be made (logged: `path` made `otherwise`)."""
    if path.exists() or path.with_name(path.name + ".wal").exists():
        return False
    partial = path.with_name(f"{path.name}.{tag}-{os.getpid()}")
    try:
        write(partial)
        os.link(partial, path)
    except (OSError, duckdb.Error) as exc:  # FileExistsError: another process made it first
        log.debug("new workspace %s made %s: %s", path, otherwise, exc)
        return False
    finally:
        partial.unlink(missing_ok=True)
        partial.with_name(partial.name + ".wal").unlink(missing_ok=True)
    return True


def _make_template(cached: Path, fill: Callable[[duckdb.DuckDBPyConnection], object]) -> None:
    """Write the template under a name of this process, then rename it: a reader never copies a
    partial one. The oldest templates beyond _KEEP_TEMPLATES go."""
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"{cached.stem}.partial-{os.getpid()}")
    try:
        _new_file(partial)
        con = params.connect(str(partial))
        try:
            ensure_schema(con)
            fill(con)
        finally:
            con.close()
        partial.replace(cached)
    finally:
        partial.unlink(missing_ok=True)
        partial.with_name(partial.name + ".wal").unlink(missing_ok=True)
    made = sorted(cached.parent.glob(_TEMPLATE.format("*")), key=_mtime, reverse=True)
    for old in made[_KEEP_TEMPLATES:]:
        old.unlink(missing_ok=True)


# The storage format of a new workspace file, written in its header, so that every connection
# opens it with DuckDB's defaults (a connect-time storage_compatibility_version would make a
# notebook's own `duckdb.connect` beside nsa's fail: another configuration, see params.OFFLINE).
# DuckDB's default is v1.0's, without the compression of later versions (DICT_FSST: a string
# column's dictionary, itself FSST-compressed), which stores the NVTX ranges' names for less CPU
# and room. nsa pins its DuckDB, so a workspace need not open in an older one; a file keeps the
# format it was made with.
STORAGE_VERSION = "v1.5.0"


def _new_file(path: Path) -> None:
    """Write the empty database `path` (which must not exist) in STORAGE_VERSION, through a
    connection of its own that is closed before anyone opens the file."""
    con = params.connect(MEMORY)
    try:
        con.execute(
            f"ATTACH {params.literal(str(path))} AS nsa_new (STORAGE_VERSION {params.literal(STORAGE_VERSION)})"
        )
        con.execute("DETACH nsa_new")
    finally:
        con.close()


def _create(path: Path) -> None:
    """Make the new workspace `path` an empty database in STORAGE_VERSION (_placed). Nothing where
    it exists; where it cannot be made, connecting then creates it in DuckDB's default format, or
    says what is wrong."""
    _placed(path, "new", _new_file, "in DuckDB's default storage format")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed meanwhile by another nsa
        return 0.0


def _remove_template(key: str) -> None:
    cached = _template_path(key)
    if cached is not None:
        try:
            cached.unlink(missing_ok=True)
        except OSError:
            pass


def _refuse_export(path: Path) -> None:
    """An input given as the workspace (`--db report.sqlite`): say what it is and what to run,
    before DuckDB reads it (it would look for its SQLite extension)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except OSError:
        return  # missing (to be created) or unreadable: connecting says which
    if head != b"SQLite format 3\x00":
        return
    try:
        uri = f"file:{path}?mode=ro&immutable=1"
        with closing(sqlite3.connect(uri, uri=True)) as db:
            nsys = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'StringIds'").fetchone() is not None
    except sqlite3.Error:
        nsys = False
    what = "an nsys SQLite export" if nsys else "an SQLite database"
    raise WorkspaceError(
        f"{path} is {what}, not an nsa workspace: ingest it into one with "
        f"`nsa ingest {path} --db WORKSPACE.duckdb`, then give that workspace to --db."
    )


# An nsa command's connection: DuckDB's SQLite extension, which nsa loads from its wheel in
# site-packages (ingest.sqlite_source), is loaded without DuckDB's signature check, which hashes
# the 35 MB file on every LOAD (0.11 s of CPU per ingest, a tenth of copying 1M kernels). Only
# where no one else's SQL can run (`nsa sql` refuses LOAD) and the file is opened nowhere else in
# the process: DuckDB refuses a second connection to a file with another configuration, so a
# notebook's connections keep DuckDB's defaults (params.OFFLINE). Where one is open all the same
# (a command run inside a test beside an open connection), the defaults are used.
STANDALONE = {"allow_unsigned_extensions": "true"}
_OTHER_CONFIG = "different configuration"


def _connect_waiting(path: Path, read_only: bool, standalone: bool = False) -> duckdb.DuckDBPyConnection:
    """Connect; while another process holds the file's lock (an ingest a few seconds long),
    retry for up to $NSA_LOCK_WAIT seconds before saying who holds it and what to do."""
    deadline = time.monotonic() + _lock_wait_s()
    pause = 0.05
    config = STANDALONE if standalone else None
    while True:
        try:
            return params.connect(str(path), read_only=read_only, config=config)
        except duckdb.Error as exc:
            if config is not None and _OTHER_CONFIG in str(exc):
                config = None  # opened in this process already, with DuckDB's defaults
                continue
            left = deadline - time.monotonic()
            if not _is_lock_error(exc) or left <= 0:
                raise _explain(exc, path, read_only, _lock_wait_s() if _is_lock_error(exc) else 0) from exc
            if pause == 0.05:
                log.info("workspace %s is locked by another process; waiting up to %.0f s", path, left)
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.5)


# The workspace layout's version, stored in `nsa_workspace`. Added tables and columns need no
# new version (ensure_schema adds what schema.py declares; older reports have NULLs / no rows
# there until ingested again with --replace). Anything else (a rename, a moved column, a
# recomputed value) bumps SCHEMA_VERSION and registers MIGRATIONS[new_version]: a function
# that brings a workspace of the previous version up to it, run inside ensure_schema's
# transaction, oldest first.
SCHEMA_VERSION = 4


def _deferred_steps_column(con: duckdb.DuckDBPyConnection) -> None:
    """2: reports.deferred_tables holds the deferred steps (kernel_launch, nvtx_kernels, steps),
    not tables: renamed deferred_steps."""
    con.execute("ALTER TABLE reports RENAME COLUMN deferred_tables TO deferred_steps")


# 3: `kind` is the activity kind only (reports.activity_kinds, the GPU activity's kind); the
# columns that used the word for something else say what they hold.
_RENAMED_3 = (
    ("reports", "kind", "format"),
    ("memcpy", "copy_kind", "direction"),
    ("memcpy", "src_kind", "src_memory"),
    ("memcpy", "dst_kind", "dst_memory"),
    ("memset", "mem_kind", "memory"),
    ("memory_events", "memory_kind", "memory"),
    ("nvtx_ranges", "range_kind", "range_api"),
    ("ncu_section_text", "kind", "entry"),
    ("ncu_source", "kind", "granularity"),
    ("flow_links", "kind", "category"),
)


def _one_meaning_of_kind(con: duckdb.DuckDBPyConnection) -> None:
    """3: columns named `kind` (or `*_kind`) for something other than the activity kind renamed."""
    have = _columns(con)
    for table, old, new in _RENAMED_3:
        if (table, old) in have and (table, new) not in have:
            con.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{old}" TO "{new}"')


# The nsys readers' step that works out nvtx_totals; other formats (Kineto) write it at ingest.
_NVTX_TOTALS_FORMATS = ("nsys", "nsys-rep")


def _nvtx_totals(con: duckdb.DuckDBPyConnection) -> None:
    """4: nvtx_summary reads nvtx_totals, not nvtx_ranges. nsys reports with NVTX ranges get the
    deferred step that works it out on first use; the other reports with ranges in the
    workspace (their kernels worked out at ingest) get their rows now, as
    ingest.nvtx.sum_nvtx_totals writes them."""
    formats = ", ".join(f"'{f}'" for f in _NVTX_TOTALS_FORMATS)
    con.execute(
        "UPDATE reports SET deferred_steps = list_append(coalesce(deferred_steps, []), 'nvtx_totals') "
        f"WHERE has_nvtx AND format IN ({formats}) AND NOT list_contains(coalesce(deferred_steps, []), 'nvtx_totals')"
    )
    con.execute(
        "INSERT INTO nvtx_totals SELECT report_id, domain, coalesce(base_name, name), count(DISTINCT name), "
        "count(end_ns), count(*) - count(end_ns), sum(duration_ns), avg(duration_ns), median(duration_ns), "
        "min(duration_ns), max(duration_ns), coalesce(sum(kernels), 0), coalesce(sum(kernel_ns), 0), "
        "coalesce(sum(process_kernels), 0), coalesce(sum(process_kernel_ns), 0) FROM nvtx_ranges "
        f"WHERE report_id IN (SELECT report_id FROM reports WHERE format NOT IN ({formats})) "
        "AND report_id NOT IN (SELECT report_id FROM nvtx_totals) "
        "GROUP BY report_id, domain, coalesce(base_name, name)"
    )


MIGRATIONS: dict[int, Callable[[duckdb.DuckDBPyConnection], None]] = {
    2: _deferred_steps_column,
    3: _one_meaning_of_kind,
    4: _nvtx_totals,
}


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create missing tables, columns and views, and run the migrations a workspace of an older
    version needs, all in one transaction (a failed upgrade leaves the workspace as it was).
    A workspace already up to date is only read: no transaction to commit on every open."""
    have = _columns(con)
    if stored_version(con, have) == SCHEMA_VERSION and not _missing(have) and not _stale_views(con):
        return
    con.execute("BEGIN TRANSACTION")
    try:
        version = stored_version(con)
        for table in schema.STORED:
            con.execute(table.ddl())
        for step in range(version + 1, SCHEMA_VERSION + 1):
            if version and step in MIGRATIONS:
                MIGRATIONS[step](con)
        for name, col in _missing(_columns(con)):
            con.execute(f'ALTER TABLE "{name}" ADD COLUMN "{col.name}" {col.type}')
        for view in _stale_views(con):
            _create_view(con, view)
        con.execute("DELETE FROM nsa_workspace")
        con.execute(
            f"INSERT INTO nsa_workspace VALUES ({int(SCHEMA_VERSION)})"
        )  # a literal: binding imports pandas
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def _missing(have: set[tuple[str, str]]) -> list[tuple[str, schema.Col]]:
    """(table, column) that schema.py declares and the workspace lacks, of the stored tables."""
    return [(t.name, c) for t in schema.STORED for c in t.cols if (t.name, c.name) not in have]


def _stale_views(con: duckdb.DuckDBPyConnection) -> list[schema.Table]:
    """The views that are missing or older than schema.py's: DuckDB stores a view's SQL
    rewritten (parentheses added, functions in capitals), so each view nsa creates carries the
    hash of the text it was made from as its comment (_create_view); a view from before that is
    compared by its text."""
    views = {
        name: (sql, comment)
        for name, sql, comment in con.execute(
            "SELECT view_name, sql, comment FROM duckdb_views() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND NOT internal"
        ).fetchall()
    }
    stale = []
    for view in schema.VIEWS:
        sql, comment = views.get(view.name, ("", None))
        if comment != _view_stamp(view) and _bare(view.view) not in _bare(sql or ""):
            stale.append(view)
    return stale


def _view_stamp(view: schema.Table) -> str:
    return "nsa:" + hashlib.sha256(view.ddl().encode()).hexdigest()[:16]


def _create_view(con: duckdb.DuckDBPyConnection, view: schema.Table) -> None:
    con.execute(view.ddl())
    con.execute(f"COMMENT ON VIEW \"{view.name}\" IS '{_view_stamp(view)}'")


def stored_version(con: duckdb.DuckDBPyConnection, have: set[tuple[str, str]] | None = None) -> int:
    """The workspace's layout version: 0 for a new (empty) one. Raises WorkspaceError for one
    this nsa cannot bring up to date: made by a newer nsa, or by a pre-release nsa (reports
    but no version). `have`: the workspace's (table, column) pairs, when the caller read them."""
    tables = {t for t, _ in (_columns(con) if have is None else have)}
    if "nsa_workspace" in tables:
        row = con.execute("SELECT max(schema_version) FROM nsa_workspace").fetchone()
        version = int(row[0]) if row and row[0] is not None else 0
    elif "reports" in tables:
        version = -1
    else:
        return 0
    if version < 0:
        raise WorkspaceError(
            f"workspace {_path(con)} was made by a pre-release nsa (it has no layout version); ingest the "
            "reports again into a new workspace (another --db path)."
        )
    if version > SCHEMA_VERSION:
        raise WorkspaceError(
            f"workspace {_path(con)} has layout version {version}, newer than this nsa's {SCHEMA_VERSION}; "
            "upgrade nsa (pip install -U nsight-analytics) to open it."
        )
    return version


def _path(con: duckdb.DuckDBPyConnection) -> str:
    row = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    return str(row[0]) if row and row[0] else "(in memory)"


def _out_of_date(con: duckdb.DuckDBPyConnection) -> bool:
    """Something this nsa declares is missing, or the layout version is older: read only,
    queries would fail on it. ensure_schema brings it up to date."""
    have = _columns(con)
    if _missing(have):
        return True
    return stored_version(con, have) < SCHEMA_VERSION


def _columns(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str]]:
    """(table, column) of every table in the workspace (not its views: nothing checks theirs).
    Each table's pragma_table_info rather than duckdb_columns(), which works out the columns of
    every view first, DuckDB's own catalogs' included (~0.015 s of CPU on each open)."""
    tables = con.execute(
        "SELECT database_name, table_name FROM duckdb_tables() "
        "WHERE database_name = current_database() AND schema_name = 'main'"
    ).fetchall()
    if any('"' in db + name for db, name in tables):  # a name pragma_table_info cannot parse
        return {
            (name, col)
            for name, col in con.execute(
                "SELECT table_name, column_name FROM duckdb_columns() "
                "WHERE database_name = current_database() AND schema_name = 'main'"
            ).fetchall()
            if name in {t for _, t in tables}
        }
    each = [
        f"SELECT {params.literal(name)}, name FROM pragma_table_info({params.literal(qualified)})"
        for db, name in tables
        for qualified in [f'"{db}".main."{name}"']
    ]
    return set(con.execute(" UNION ALL ".join(each)).fetchall()) if each else set()


def _bare(sql: str) -> str:
    """SQL without whitespace and quotes: DuckDB stores a view's text re-quoted on one line."""
    return re.sub(r'[\s"]', "", sql)
