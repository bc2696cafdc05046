"""Reading an nsys SQLite export from DuckDB without downloading anything.

DuckDB's `INSTALL sqlite` needs the internet. The `duckdb-extension-sqlite-scanner` wheel ships
the extension binary for the pinned duckdb version, so we LOAD it from site-packages. Measured
on a 593 MB export it copies tables 5x faster than Python's sqlite3 (see benchmarks/README.md).
"""

from __future__ import annotations

import os
import sqlite3
import struct
from contextlib import closing
from functools import cache
from pathlib import Path

import duckdb

from .. import params
from ..errors import InputError, NsaError

SQLITE_MAGIC = b"SQLite format 3\x00"
EXPORT_HINT = "export it with `nsys export --type sqlite report.nsys-rep`"


@cache
def extension_path() -> str:
    try:
        import duckdb_extension_sqlite_scanner as pkg
    except ImportError as exc:  # pragma: no cover - a broken install
        raise NsaError(
            "the package duckdb-extension-sqlite-scanner is missing; reinstall nsight-analytics "
            "(`pip install nsight-analytics`)."
        ) from exc
    folder = Path(pkg.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    found = sorted(folder.glob("sqlite_scanner*.duckdb_extension"))
    if not found:
        raise NsaError(
            f"no SQLite extension for duckdb {duckdb.__version__} in {folder}; install the "
            f"matching wheel: `pip install duckdb-extension-sqlite-scanner=={duckdb.__version__}`."
        )
    return str(found[0])


def load_extension(con: duckdb.DuckDBPyConnection) -> None:
    """LOAD the wheel's extension; DuckDB checks its signature unless the connection was made to
    skip that (workspace.STANDALONE: nsa's own commands)."""
    con.execute(f"LOAD '{extension_path()}'")


def check_sqlite_file(path: Path) -> None:
    """Reject missing, non-SQLite and truncated files before DuckDB sees them.

    A truncated export is the common failure (a copy that ran out of disk, an scp cut short);
    the SQLite header records the page count, so we can tell without reading the tables.
    """
    if not path.exists():
        raise InputError(f"{path}: no such file.")
    if path.is_dir():
        raise InputError(f"{path} is a folder; give the path of an exported .sqlite file.")
    size = path.stat().st_size
    try:
        with path.open("rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror}).") from exc
    if not header.startswith(SQLITE_MAGIC):
        if path.suffix == ".nsys-rep" or header[:4] == b"\x00\x00\x00\x00":
            raise InputError(f"{path} is not an SQLite file; {EXPORT_HINT}.")
        raise InputError(
            f"{path} is not an SQLite file nor an ncu CSV; for nsys, {EXPORT_HINT}; for ncu, "
            "`ncu --import report.ncu-rep --csv --page details > report.csv`."
        )
    if len(header) < 100:
        raise InputError(f"{path} is truncated (shorter than an SQLite header); export it again.")
    (page_size,) = struct.unpack(">H", header[16:18])
    page_size = 65536 if page_size == 1 else page_size
    (page_count,) = struct.unpack(">I", header[28:32])
    change_counter, valid_for = struct.unpack(">I", header[24:28])[0], struct.unpack(">I", header[92:96])[0]
    if change_counter == valid_for and page_count and size < page_size * page_count:
        raise InputError(
            f"{path} is truncated: {size} bytes where the SQLite header promises "
            f"{page_size * page_count}; copy or export it again."
        )


def attach(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    alias: str = "src",
    not_null: dict[str, set[str]] | None = None,
) -> dict[str, set[str]]:
    """Attach the export read-only and return {table: {columns}} of what it has; `not_null`, when
    given, receives {table: {columns declared NOT NULL}} (a reader may then skip a fallback column)."""
    load_extension(con)
    try:
        rows = _columns(path)
        con.execute(f"ATTACH '{_quote(str(path))}' AS {alias} (TYPE sqlite, READ_ONLY)")
    except sqlite3.DatabaseError as exc:
        _refuse_long_path(path)
        raise InputError(f"{path} cannot be read as SQLite ({exc}); {EXPORT_HINT}.") from exc
    except duckdb.Error as exc:
        _refuse_long_path(path)
        raise InputError(f"{path} cannot be read as SQLite ({_first_line(exc)}); {EXPORT_HINT}.") from exc
    tables: dict[str, set[str]] = {}
    for table, column, required in rows:
        tables.setdefault(table, set()).add(column)
        if required and not_null is not None:
            not_null.setdefault(table, set()).add(column)
    return tables


def columns(path: Path) -> dict[str, set[str]]:
    """{table: {columns}} of an SQLite file, without attaching it; sqlite3.DatabaseError when it
    cannot be read as SQLite."""
    tables: dict[str, set[str]] = {}
    for table, column, _ in _columns(path):
        tables.setdefault(table, set()).add(column)
    return tables


def _columns(path: Path) -> list[tuple[str, str, int]]:
    """(table, column, declared NOT NULL) of every table and view. The listing comes from sqlite3
    itself: DuckDB's information_schema over an attached file binds every table (1.1 s on a
    600 MB export), sqlite3 takes milliseconds."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)) as db:
        return db.execute(
            'SELECT m.name, p.name, p."notnull" FROM sqlite_master m, pragma_table_info(m.name) p '
            "WHERE m.type IN ('table', 'view')"
        ).fetchall()


# SQLite opens no file whose full path (symbolic links resolved) is this long or longer: its unix
# VFS takes 512 bytes, less room for a journal suffix. The export itself is fine.
SQLITE_MAX_PATH = 504


def open_attached(con: duckdb.DuckDBPyConnection, alias: str) -> sqlite3.Connection:
    """The export attached as `alias`, opened by sqlite3 itself (read-only, immutable), for what
    DuckDB's SQLite reader does slowly or refuses: a table's largest rowid (the reader scans the
    table for it), a BLOB column declared TEXT. The caller closes it."""
    path = params.first_row(
        params.execute(con, "SELECT path FROM duckdb_databases() WHERE database_name = $a", {"a": alias})
    )[0]
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _refuse_long_path(path: Path) -> None:
    """Say so when SQLite could not open the file because its path is too long for it."""
    full = len(os.fsencode(os.path.realpath(path)))
    if full >= SQLITE_MAX_PATH:
        raise InputError(
            f"{path}: SQLite cannot open a file whose full path is {SQLITE_MAX_PATH} bytes or longer "
            f"(this one: {full}, symbolic links resolved); the export is fine: move it, or make a "
            "hard link to it (`ln FILE /tmp/report.sqlite`, same disk), at a shorter path and ingest that."
        )


def detach(con: duckdb.DuckDBPyConnection, alias: str = "src") -> None:
    try:
        con.execute(f"DETACH {alias}")
    except duckdb.Error:
        pass


def _quote(text: str) -> str:
    return text.replace("'", "''")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
