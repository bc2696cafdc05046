"""The SQLite exports nsa makes of `.nsys-rep` files, kept beside the workspace.

`nsys export` takes seconds to minutes, and a report's deferred tables are read from its export
long after the ingest, so the export is kept: `<workspace>.nsa-cache/<key>.sqlite`, keyed by
the report row's content_hash (`xxh3_128-<hex>`; the sha256 of a report ingested before nsa kept
content_hash). nsys writes to a `.partial-<pid>` name that is renamed once
it has finished, so a killed export never passes for a whole one. A workspace nsa cannot write
(read-only, in memory) gets a temporary export that lives as long as the reader needs it.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from ... import params

SUFFIX = ".nsa-cache"
_KEY = r"(?:[0-9a-f]{64}|xxh3_128-[0-9a-f]{32})"  # sha256 (reports before content_hash), content_hash
_EXPORT = re.compile(_KEY + r"\.sqlite")
_PARTIAL = re.compile(_KEY + r"\.partial-\d+\.sqlite")

Export = Callable[[Path], None]  # writes the export to the path it is given


def folder(con: duckdb.DuckDBPyConnection) -> tuple[Path | None, bool]:
    """`<workspace>.nsa-cache` (None for a workspace in memory), and whether nsa may write there
    (not through a read-only connection)."""
    path, read_only = params.first_row(
        con.execute("SELECT path, readonly FROM duckdb_databases() WHERE database_name = current_database()")
    )
    if not path:
        return None, False
    where = Path(f"{path}{SUFFIX}")
    return where, not read_only and os.access(where if where.exists() else where.parent, os.W_OK)


@contextmanager
def export_of(con: duckdb.DuckDBPyConnection, key: str, make: Export) -> Iterator[Path]:
    """The export keyed `key`: the cached one, or one `make` writes now. A new export that the
    caller's block fails with is removed: no report refers to it."""
    where, writable = folder(con)
    cached = where / f"{key}.sqlite" if where else None
    if cached and cached.is_file():
        yield cached
        return
    if cached is None or not writable:
        with tempfile.TemporaryDirectory(prefix="nsa-nsys-export-") as tmp:
            out = Path(tmp) / f"{key}.sqlite"
            make(out)
            yield out
        return
    new_folder = not cached.parent.exists()
    cached.parent.mkdir(exist_ok=True)
    _remove(cached.parent, _PARTIAL, keep=())  # left by a killed nsa: the workspace lock says none is running
    partial = cached.with_name(f"{key}.partial-{os.getpid()}.sqlite")
    try:
        try:
            make(partial)
            partial.replace(cached)
        finally:
            partial.unlink(missing_ok=True)
        yield cached
    except BaseException:
        cached.unlink(missing_ok=True)
        if new_folder:
            _remove_empty(cached.parent)
        raise


def prune(con: duckdb.DuckDBPyConnection, keep: Iterable[str]) -> None:
    """Remove the exports whose key is not in `keep` (their reports are gone), and the folder
    when nothing is left in it."""
    where, writable = folder(con)
    if where is None or not writable or not where.is_dir():
        return
    _remove(where, _EXPORT, keep={f"{k}.sqlite" for k in keep})
    _remove(where, _PARTIAL, keep=())
    _remove_empty(where)


def _remove(where: Path, names: re.Pattern[str], keep: Iterable[str]) -> None:
    kept = set(keep)
    for path in where.iterdir():
        if names.fullmatch(path.name) and path.name not in kept:
            path.unlink(missing_ok=True)


def _remove_empty(where: Path) -> None:
    try:
        where.rmdir()
    except OSError:
        pass  # not empty
