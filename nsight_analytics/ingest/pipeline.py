"""Ingest: files in, one committed report (or nothing) out, whatever the format.

The pipeline asks each reader (reader.py) whether it knows the file's content, decompresses a
`.gz` for it, hashes the file (its content key, `reports.content_hash`), and runs the reader's
load inside one DuckDB transaction that also writes the `reports` row: a killed ingest leaves
no trace. Large, rarely needed tables can be deferred: the report lists the steps in
`deferred_steps` and `ensure_loaded` runs them through the report's reader, each in its own
transaction, the first time they are needed.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from .. import params, schema
from ..errors import InputError, NsaError, SourceGoneError
from . import compressed, formats, reader
from .reader import LoadResult, Progress, Reader

log = logging.getLogger(__name__)
T = TypeVar("T")

# Tables holding a report's rows (reports itself aside); workspace tables such as nsa_workspace have none.
REPORT_TABLES = [t.name for t in schema.STORED if t.name != "reports" and "report_id" in t.col_names]
# reports columns the pipeline writes itself; a reader's LoadResult.metadata fills the others
_OWN_COLUMNS = {
    "report_id", "format", "source_path", "sha256", "content_hash", "size_bytes", "source_mtime_ns",
    "ingested_at", "activity_kinds", "deferred_steps",
}  # fmt: skip
# reports flag -> the activity kind that sets it (a reader's LoadResult.flags may set it too)
_FLAGS = {"has_kernels": "kernel", "has_memcpy": "memcpy", "has_cuda_api": "cuda_api", "has_nvtx": "nvtx"}


@dataclass
class IngestResult:
    report_id: int
    path: Path
    format: str  # reports.format: the reader's name
    status: str  # 'ingested', 'replaced' or 'unchanged'
    rows: dict[str, int] = field(default_factory=dict)
    deferred: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_HASH_WINDOW = 64 << 20
# A report's content key (reports.content_hash): its file's bytes hashed with xxHash's XXH3,
# 128 bits, written `xxh3_128-<32 hex digits>`. A quarter of SHA-256's CPU on a 600 MB export
# (0.1 against 0.4 s, most of the 0.1 the kernel paging the file in): the key tells a file seen
# before from a new one; it is no defence against a file forged to collide. Reports ingested
# before nsa kept content_hash have only `sha256` (SHA-256, hex): a file of their size is hashed
# that way too, so they are still recognised.
HASH_KIND = "xxh3_128"


def _digest(path: Path, digest: Any) -> str:
    """Hash the file through memory-mapped windows: no copy into Python buffers, so about twice
    as fast as hashlib.file_digest on a 600 MB export, and one 64 MiB window at a time, so the
    mapped pages do not pile up in the process's memory."""
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        for offset in range(0, size, _HASH_WINDOW):
            length = min(_HASH_WINDOW, size - offset)
            with mmap.mmap(fh.fileno(), length, access=mmap.ACCESS_READ, offset=offset) as view:
                digest.update(view)
    return str(digest.hexdigest())


def content_hash_file(path: Path) -> str:
    """The file's content key, as reports.content_hash holds it: `xxh3_128-<hex>`."""
    import xxhash  # only where a file is hashed: not on every CLI start

    return f"{HASH_KIND}-{_digest(path, xxhash.xxh3_128())}"


def sha256_file(path: Path) -> str:
    """SHA-256 of the file (hex): the key of the reports ingested before content_hash."""
    return _digest(path, hashlib.sha256())


class _Hasher(threading.Thread):
    """Hash the file while DuckDB copies it: the hash releases the GIL, so this is nearly free."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.digest = path, ""
        self.error: OSError | None = None
        self._sha256: str | None = None

    def run(self) -> None:
        try:
            self.digest = content_hash_file(self.path)
        except OSError as exc:  # pragma: no cover - the file vanished mid-ingest
            self.error = exc

    def result(self) -> str:
        if self.ident is not None:  # started as a thread (else run() was called inline)
            self.join()
        if self.error is not None:
            raise InputError(f"{self.path}: cannot read the file ({self.error}).")
        return self.digest

    def sha256(self) -> str:
        """SHA-256 of the file, computed once: only to compare with reports ingested before content_hash."""
        if self._sha256 is None:
            try:
                self._sha256 = sha256_file(self.path)
            except OSError as exc:  # pragma: no cover - the file vanished mid-ingest
                raise InputError(f"{self.path}: cannot read the file ({exc}).") from exc
        return self._sha256


@dataclass(frozen=True)
class Detected:
    reader: Reader[Any]
    gzip: bool  # the content is gzip-compressed; the reader reads what it decompresses to


def detect(path: Path) -> Detected:
    """The reader of the file, from its content: users rename files, and ncu writes .txt or .csv."""
    if not path.is_file():
        formats.refuse_unknown(path)  # raises: missing file or a folder
    try:
        with path.open("rb") as fh:
            head = fh.read(reader.SNIFF_BYTES)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc}).") from exc
    formats.refuse_unsupported(path, head)  # empty files, .ncu-rep, PyTorch traces
    if compressed.is_gzip(head):
        inner = compressed.gunzip_head(path, reader.SNIFF_BYTES)
        found = reader.sniff(inner) if inner else None
        if found is None:
            formats.refuse_compressed(path, inner)
        return Detected(found, gzip=True)
    found = reader.sniff(head)
    if found is None:
        formats.refuse_unknown(path)
    return Detected(found, gzip=False)


def detect_format(path: Path) -> str:
    """The format ('nsys', 'ncu', ...) the file would be ingested as: its reader's name."""
    return detect(path).reader.name


def _existing(
    con: duckdb.DuckDBPyConnection, hasher: _Hasher, size: int, source: str, replace: bool
) -> list[int]:
    """The reports of the file's content (and with `replace`, of its path). A report ingested
    before content_hash is matched on its SHA-256, computed only when one of the file's size exists."""
    old_style = params.first_row(
        params.execute(
            con,
            "SELECT count(*) FROM reports WHERE content_hash IS NULL AND sha256 IS NOT NULL "
            "AND coalesce(size_bytes, $size) = $size",
            {"size": size},
        )
    )[0]
    where = "content_hash = $key OR (content_hash IS NULL AND sha256 = $sha)"
    if replace:
        where += " OR source_path = $source"
    values = {"key": hasher.result(), "sha": hasher.sha256() if old_style else None, "source": source}
    return [
        r[0] for r in params.execute(con, f"SELECT report_id FROM reports WHERE {where}", values).fetchall()
    ]


def delete_reports(con: duckdb.DuckDBPyConnection, report_ids: Iterable[int]) -> None:
    """Inside the caller's transaction; after its commit, the caller runs clean_up."""
    for rid in report_ids:
        for table in [*REPORT_TABLES, "reports"]:
            params.execute(con, f'DELETE FROM "{table}" WHERE report_id = $rid', {"rid": rid})


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Undo the open transaction. When the COMMIT itself failed (a full disk) DuckDB has ended
    it already: the error to report is the commit's, not "no transaction is active"."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:  # ended already, or the database cannot go on: the first error tells
        pass


def clean_up(con: duckdb.DuckDBPyConnection) -> None:
    """After a commit that removed reports: each reader drops what it kept outside the workspace
    for them (the `.nsys-rep` exports)."""
    for rd in reader.all_readers():
        rd.clean(con)


@contextmanager
def _readable(path: Path, gzip: bool) -> Iterator[Path]:
    """The file a reader reads: `path` itself, or its decompressed content. Messages about the
    temporary copy name `path` instead."""
    if not gzip:
        yield path
        return
    with compressed.decompressed(path) as plain:
        try:
            yield plain
        except InputError as exc:
            raise InputError(str(exc).replace(str(plain), str(path))) from exc


def ingest_file(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    *,
    replace: bool = False,
    defer: Iterable[str] | None = None,
    progress: Progress | None = None,
    options: Mapping[str, str] | None = None,
) -> IngestResult:
    """Ingest one file, in any format a reader knows, plain or gzip-compressed, all or nothing.

    `defer`: the deferrable steps to leave for first use; None: all the reader's.
    `options`: what the user says about the file, for the readers that ask (`timezone`)."""
    path = Path(path).expanduser().resolve()
    found = detect(path)
    rd = found.reader
    # before any byte is read: a file rewritten during the ingest then fails the mtime check
    stat = path.stat()
    source = str(path)
    same_size = params.first_row(
        params.execute(con, "SELECT count(*) FROM reports WHERE size_bytes = $size", {"size": stat.st_size})
    )[0]
    hasher = _Hasher(path)
    if same_size or replace:
        # A possible duplicate or a replacement: know the hash before copying anything.
        hasher.run()
        old = _existing(con, hasher, stat.st_size, source, replace)
        if old and not replace:
            return IngestResult(old[0], path, rd.name, "unchanged")
    else:
        # No report has this size, so none has this content: hash while copying.
        hasher.start()
    wanted = set(rd.deferrable if defer is None else defer) & set(rd.deferrable)
    opened = reader.Source(path, hasher.result, progress, dict(options or {}))
    with _readable(path, found.gzip) as plain, rd.open_source(con, plain, opened) as handle:
        con.execute("BEGIN TRANSACTION")
        try:
            rid, status = _begin(con, hasher, stat.st_size, source, replace)
            loaded = rd.load(con, handle, rid, wanted, progress)
            _insert_report(con, _report_row(rd, rid, path, stat, hasher.result(), loaded))
            con.execute("COMMIT")
        except BaseException:
            rollback(con)
            raise
    if status == "replaced":
        clean_up(con)
    # the reader named the file it read: name the one the user gave
    shown = re.compile(f"{re.escape(str(plain))}|{re.escape(plain.name)}")
    warnings = [shown.sub(lambda m: source if m[0] == str(plain) else path.name, w) for w in loaded.warnings]
    return IngestResult(rid, path, rd.name, status, loaded.rows, loaded.deferred, warnings)


def _begin(
    con: duckdb.DuckDBPyConnection, hasher: _Hasher, size: int, source: str, replace: bool
) -> tuple[int, str]:
    """Inside the transaction: drop what --replace replaces, pick the report id.

    Without --replace, ingest_file has already returned for a duplicate.
    """
    old = _existing(con, hasher, size, source, replace) if replace else []
    delete_reports(con, old)
    if len(old) == 1:
        return old[0], "replaced"
    rid = int(params.first_row(con.execute("SELECT coalesce(max(report_id), 0) + 1 FROM reports"))[0])
    return rid, "replaced" if old else "ingested"


def _report_row(
    rd: Reader[Any], rid: int, path: Path, stat: os.stat_result, key: str, loaded: LoadResult
) -> dict[str, object]:
    unknown = (set(loaded.metadata) | set(loaded.flags)) - set(schema.BY_NAME["reports"].col_names)
    clash = set(loaded.metadata) & _OWN_COLUMNS
    if unknown or clash:
        raise NsaError(f"the {rd.name} reader sets reports columns it may not: {sorted(unknown | clash)}")
    kinds = list(loaded.activity_kinds)
    return {
        **loaded.metadata,
        **{flag: kind in kinds for flag, kind in _FLAGS.items()},
        **loaded.flags,
        "report_id": rid,
        "format": rd.name,
        "source_path": str(path),
        "sha256": None,  # reports ingested before content_hash have it
        "content_hash": key,
        "size_bytes": stat.st_size,
        "source_mtime_ns": stat.st_mtime_ns,
        "ingested_at": datetime.now(timezone.utc).replace(tzinfo=None),
        "activity_kinds": kinds,
        "deferred_steps": list(loaded.deferred),
    }


def _insert_report(con: duckdb.DuckDBPyConnection, row: dict[str, object]) -> None:
    cols = schema.BY_NAME["reports"].col_names
    params.execute(
        con,
        f"INSERT INTO reports ({', '.join(cols)}) VALUES ({', '.join('$' + c for c in cols)})",
        {c: row.get(c) for c in cols},
    )


def deferred_for(
    con: duckdb.DuckDBPyConnection, tables: Iterable[str], report_ids: Iterable[int] | None = None
) -> list[tuple[int, str, str]]:
    """(report_id, source_path, step) still waiting to run before `tables` can be read (of the
    reports `report_ids`, default all), in the order they must run."""
    tables = set(tables)
    only = None if report_ids is None else set(report_ids)
    rows = con.execute(
        "SELECT report_id, format, source_path, deferred_steps FROM reports "
        "WHERE len(deferred_steps) > 0 ORDER BY report_id"
    ).fetchall()
    todo = []
    for rid, fmt, source, steps in rows:
        if only is not None and rid not in only:
            continue
        rd = reader.by_name(fmt)
        if rd is None:
            raise NsaError(f"report {rid} is a {fmt} report, and this nsa has no reader for {fmt} files.")
        todo += [(rid, source, step) for step in rd.steps_for(tables) if step in steps]
    return todo


def _source_unchanged(con: duckdb.DuckDBPyConnection, report_id: int, path: Path) -> bool:
    """Is the file still the one ingested as the report? Same size and mtime as at ingest: yes,
    without reading it (as make and rsync decide; hashing 600 MB costs ~0.4 s of CPU each time
    a deferred table is first used). Otherwise (touched, copied, or ingested before nsa kept
    the mtime) the hash of its bytes decides: content_hash, or for a report ingested before
    nsa kept it, sha256."""
    key, sha, size, mtime = params.first_row(
        params.execute(
            con,
            "SELECT content_hash, sha256, size_bytes, source_mtime_ns FROM reports WHERE report_id = $rid",
            {"rid": report_id},
        )
    )
    try:
        stat = path.stat()
    except OSError:
        return False
    if stat.st_size != size:
        return False
    if mtime is not None and stat.st_mtime_ns == mtime:
        return True
    return content_hash_file(path) == key if key is not None else sha256_file(path) == sha


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return compressed.is_gzip(fh.read(len(compressed.GZIP_MAGIC)))


# DuckDB's memory limit while a deferred step runs: the report file's size less what the
# process holds outside DuckDB's buffer pool (Python, the extension, SQLite's page cache), at
# least MEMORY_FLOOR, and never above the limit already set. Past it DuckDB writes its sorts
# and joins to a temporary file beside the workspace instead of growing (the first NVTX use of
# a 596 MB export: 1.6 GB of resident memory without the limit, 0.52 GB with it). Workspaces
# in memory keep DuckDB's limit: they have no folder of their own to spill to.
MEMORY_OUTSIDE = 256 << 20
MEMORY_FLOOR = 256 << 20


def spill_folder(con: duckdb.DuckDBPyConnection) -> str | None:
    """Make sure DuckDB has a folder to spill to under a memory cap; returns it.

    DuckDB's temporary folder is `WORKSPACE.tmp` beside the workspace, made on first use and
    removed when the connection closes. Where it cannot be made (a read-only workspace in a
    folder the user cannot write), a folder of the system's temporary directory is used instead,
    which DuckDB likewise makes and removes; a folder DuckDB has used already stays."""
    folder = params.first_row(con.execute("SELECT current_setting('temp_directory')"))[0]
    if not folder:
        return None
    path = Path(str(folder))
    where = path if path.is_dir() else path.parent
    if os.access(where, os.W_OK | os.X_OK):
        return str(path)
    other = Path(tempfile.gettempdir()) / f"nsa-{os.getpid()}-{id(con):x}.tmp"
    try:
        con.execute(f"SET temp_directory = {params.literal(str(other))}")
    except duckdb.Error:  # used already: DuckDB keeps it
        return str(path)
    return str(other)


# per connection (by id), while a memory_cap holds the limit lowered: the limit it lowered
_UNCAPPED: dict[int, str] = {}


@contextmanager
def memory_cap(con: duckdb.DuckDBPyConnection, report_ids: Iterable[int]) -> Iterator[str | None]:
    """DuckDB's memory limit while work on `report_ids` runs: their files' size together, less
    MEMORY_OUTSIDE (see above). Yields the limit it lowered (to go back to for work that does not
    fit under the cap), None when it left the limit as it was - or, inside another cap on the same
    connection that already holds the limit at or under this one (`nsa report`'s cap around the
    rules' own), the limit that outer cap lowered."""
    size = params.first_row(
        params.execute(
            con,
            "SELECT sum(size_bytes) FROM reports WHERE list_contains($rids, report_id)",
            {"rids": list(report_ids)},
        )
    )[0]
    previous = params.memory_limit(con)
    on_disk = params.first_row(
        con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()")
    )[0]
    cap = max(MEMORY_FLOOR, int(size or 0) - MEMORY_OUTSIDE)
    now = params.limit_bytes(previous)
    spill_folder(con)  # under the cap (this one or a lower one) DuckDB spills: somewhere it can write
    if on_disk is None or (now is not None and now <= cap):
        yield _UNCAPPED.get(id(con))
        return
    con.execute(f"SET memory_limit = '{cap}B'")
    outermost = id(con) not in _UNCAPPED
    if outermost:
        _UNCAPPED[id(con)] = previous
    try:
        yield previous
    finally:
        params.set_memory_limit(con, previous)
        if outermost:
            del _UNCAPPED[id(con)]


@contextmanager
def raised_limit(con: duckdb.DuckDBPyConnection, limit: str) -> Iterator[None]:
    """DuckDB's memory limit at `limit` (one a memory_cap lowered) for the work inside, then back."""
    capped = params.memory_limit(con)
    params.set_memory_limit(con, limit)
    try:
        yield
    finally:
        params.set_memory_limit(con, capped)


def past_the_cap(
    con: duckdb.DuckDBPyConnection, uncapped: str | None, work: Callable[[], T], what: str, cannot: str
) -> T:
    """`work()` under a memory_cap that yielded `uncapped`. Out of memory there (rolled back by
    the work itself: a transaction of its own, or nothing written), it runs once more under the
    limit the cap lowered, since DuckDB spills most work past the cap but not all of it (a
    window's partition, an allocation at the edge). Out of memory past that too, or without a
    cap, one NsaError says so: `what` needed more than the limit, where DuckDB spills, and
    `cannot` (what that means for the user), not DuckDB's internal message."""
    try:
        return work()
    except (duckdb.OutOfMemoryException, NsaError) as exc:
        if not params.out_of_memory(exc):
            raise
        if uncapped is None:
            raise _over_the_limit(con, what, cannot, exc) from exc
    log.info("%s: out of memory under the inputs' size; run again under %s", what, uncapped)
    with raised_limit(con, uncapped):
        try:
            return work()
        except (duckdb.OutOfMemoryException, NsaError) as exc:
            if not params.out_of_memory(exc):
                raise
            raise _over_the_limit(con, what, cannot, exc) from exc


def _over_the_limit(con: duckdb.DuckDBPyConnection, what: str, cannot: str, exc: BaseException) -> NsaError:
    """One sentence: `what` needed more than DuckDB's memory limit, which, and what to do."""
    folder = params.first_row(con.execute("SELECT current_setting('temp_directory')"))[0]
    return NsaError(
        f"{what} needed more than DuckDB's memory limit of {params.memory_limit(con)}; what does not fit "
        f"is written to {folder or 'a temporary folder'}: free disk space there. With room there, "
        f"{cannot}: please report it. ({str(exc.__cause__ or exc).strip().splitlines()[0]})"
    )


def ensure_loaded(
    con: duckdb.DuckDBPyConnection,
    tables: Iterable[str],
    progress: Progress | None = None,
    report_ids: Iterable[int] | None = None,
) -> int:
    """Run the deferred steps `tables` need (for `report_ids`, default every report), through
    each report's reader; returns how many report steps ran."""
    todo = deferred_for(con, tables, report_ids)
    # A source is decompressed and opened (attached) once for all of its report's steps: todo is
    # in report order, and `nsa findings` after `nsa ingest` runs several steps of one report.
    with ExitStack() as files:
        plain, plain_of = Path(), None
        handle: Any = None
        unchanged: dict[int, bool] = {}  # per report: its file checked once for all of its steps
        for i, (rid, source, step) in enumerate(todo):
            if progress:
                progress(f"{step} (report {rid})", i, len(todo))
            fmt, key = params.first_row(
                params.execute(
                    con,
                    "SELECT format, coalesce(content_hash, sha256) FROM reports WHERE report_id = $rid",
                    {"rid": rid},
                )
            )
            rd = reader.by_name(fmt)
            assert rd is not None  # deferred_for checked
            path = Path(source)
            derived = step in rd.derived  # computed from the workspace: no source file needed
            if not derived and rid not in unchanged:
                unchanged[rid] = _source_unchanged(con, rid, path)
            if not derived and not unchanged[rid]:
                state = "is gone" if not path.exists() else "has changed since"
                if step in rd.optional:  # the answers fall back to the whole run, and say why
                    log.warning(
                        "report %s's %s cannot be found: %s %s; timeline findings judge its whole "
                        "run (re-ingest it with `nsa ingest --replace FILE`).",
                        rid,
                        step,
                        path,
                        "is gone" if not path.exists() else "has changed since ingest",
                    )
                    continue
                raise SourceGoneError(
                    f"report {rid}'s {step} were left in {path} at ingest, and that file {state}; "
                    f"re-ingest it with `nsa ingest --replace --full FILE`."
                )
            if not derived and plain_of != rid:
                files.close()  # the previous report's source: detached, its decompressed copy gone
                plain, plain_of = files.enter_context(_readable(path, _is_gzip(path))), rid
                handle = files.enter_context(
                    rd.open_source(con, plain, reader.Source(path, partial(str, key), progress))
                )
            with memory_cap(con, [rid]) as uncapped:
                # DuckDB spills most of a copy past the cap, not all of it (a 452 MB export of CPU
                # samples with stacks: out of memory at the 256 MiB floor)
                past_the_cap(
                    con,
                    uncapped,
                    partial(_load_step, con, rd, None if derived else handle, rid, step),
                    f"report {rid}'s {step}",
                    "they cannot be loaded from a report this large yet",
                )
    return len(todo)


def _load_step(con: duckdb.DuckDBPyConnection, rd: Reader, handle: Any, rid: int, step: str) -> None:
    """One deferred step of a report, and its name off the report's list, in one transaction."""
    con.execute("BEGIN TRANSACTION")
    try:
        rd.load_deferred(con, handle, rid, step)
        params.execute(
            con,
            "UPDATE reports SET deferred_steps = list_filter(deferred_steps, x -> x != $done) WHERE report_id = $rid",
            {"done": step, "rid": rid},
        )
        con.execute("COMMIT")
    except BaseException:
        rollback(con)
        raise
