"""Ingest: files in, one committed report (or nothing) out.

An ingest is one DuckDB transaction: the report row and all its canonical rows commit together,
so a killed ingest leaves no trace. Large, rarely needed tables (NVTX, OS runtime) can be
deferred: the report records them in `deferred_tables` and `ensure_loaded` copies them from the
source file, in its own transaction, the first time a query or a user needs them.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import cast

import duckdb

from .. import params, schema
from ..errors import InputError, NsaError
from ..timing import timed
from . import formats, nsys, sqlite_source

log = logging.getLogger(__name__)
Progress = Callable[[str, int, int], None]

REPORT_TABLES = [t.name for t in schema.STORED if t.name != "reports"]


@dataclass
class IngestResult:
    report_id: int
    path: Path
    kind: str
    status: str  # 'ingested', 'replaced' or 'unchanged'
    rows: dict[str, int] = field(default_factory=dict)
    deferred: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_HASH_WINDOW = 64 << 20


def sha256_file(path: Path) -> str:
    """Hash the file through memory-mapped windows: no copy into Python buffers, so about twice
    as fast as hashlib.file_digest on a 600 MB export (0.40 s against 0.44-0.76 s), and one
    64 MiB window at a time, so the mapped pages do not pile up in the process's memory."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        for offset in range(0, size, _HASH_WINDOW):
            length = min(_HASH_WINDOW, size - offset)
            with mmap.mmap(fh.fileno(), length, access=mmap.ACCESS_READ, offset=offset) as view:
                digest.update(view)
    return digest.hexdigest()


class _Hasher(threading.Thread):
    """Hash the file while DuckDB copies it: hashlib releases the GIL, so this is nearly free."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.digest = path, ""
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            self.digest = sha256_file(self.path)
        except OSError as exc:  # pragma: no cover - the file vanished mid-ingest
            self.error = exc

    def result(self) -> str:
        if self.ident is not None:  # started as a thread (else run() was called inline)
            self.join()
        if self.error is not None:
            raise InputError(f"{self.path}: cannot read the file ({self.error}).")
        return self.digest


def detect_kind(path: Path) -> str:
    """'nsys' or 'ncu', from the content: users rename files, and ncu writes .txt or .csv."""
    if not path.is_file():
        sqlite_source.check_sqlite_file(path)  # raises: missing file or a folder
    try:
        with path.open("rb") as fh:
            head = fh.read(65536)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc}).") from exc
    formats.refuse_unsupported(path, head)  # empty files, .nsys-rep, .ncu-rep, gzip, PyTorch traces
    if head.startswith(sqlite_source.SQLITE_MAGIC):
        sqlite_source.check_sqlite_file(path)
        return "nsys"
    from . import ncu

    # ncu's own failure logs go to the ncu reader too, which explains what went wrong.
    if b"==PROF==" in head or b"==ERROR==" in head or ncu.sniff_ncu(path):
        return "ncu"
    sqlite_source.check_sqlite_file(path)  # raises "not an SQLite file nor an ncu CSV"
    raise AssertionError("unreachable: check_sqlite_file accepted a non-SQLite file")


def _existing(con: duckdb.DuckDBPyConnection, sha: str, source: str, replace: bool) -> list[int]:
    where = "sha256 = $sha OR source_path = $source" if replace else "sha256 = $sha"
    values = {"sha": sha, "source": source}
    return [
        r[0] for r in params.execute(con, f"SELECT report_id FROM reports WHERE {where}", values).fetchall()
    ]


def delete_reports(con: duckdb.DuckDBPyConnection, report_ids: Iterable[int]) -> None:
    for rid in report_ids:
        for table in [*REPORT_TABLES, "reports"]:
            params.execute(con, f'DELETE FROM "{table}" WHERE report_id = $rid', {"rid": rid})


def ingest_file(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    *,
    replace: bool = False,
    defer: Iterable[str] = nsys.DEFERRABLE,
    progress: Progress | None = None,
) -> IngestResult:
    """Ingest one nsys SQLite export or ncu CSV into the workspace, all or nothing."""
    path = Path(path).expanduser().resolve()
    kind = detect_kind(path)
    # before any byte is read: a file rewritten during the ingest then fails the mtime check
    stat = path.stat()
    size = stat.st_size
    source = str(path)
    same_size = params.first_row(
        params.execute(con, "SELECT count(*) FROM reports WHERE size_bytes = $size", {"size": size})
    )[0]
    hasher = _Hasher(path)
    if same_size or replace:
        # A possible duplicate or a replacement: know the hash before copying anything.
        hasher.run()
        old = _existing(con, hasher.result(), source, replace)
        if old and not replace:
            return IngestResult(old[0], path, kind, "unchanged")
    else:
        # No report has this size, so none has this content: hash while copying.
        hasher.start()
    if kind == "nsys":
        return _ingest_nsys(con, path, stat, hasher, replace, set(defer), progress)
    return _ingest_ncu(con, path, stat, hasher, replace, progress)


def _begin(con: duckdb.DuckDBPyConnection, hasher: _Hasher, source: str, replace: bool) -> tuple[int, str]:
    """Inside the transaction: drop what --replace replaces, pick the report id.

    Without --replace, ingest_file has already returned for a duplicate.
    """
    old = _existing(con, hasher.result(), source, replace) if replace else []
    delete_reports(con, old)
    if len(old) == 1:
        return old[0], "replaced"
    rid = int(params.first_row(con.execute("SELECT coalesce(max(report_id), 0) + 1 FROM reports"))[0])
    return rid, "replaced" if old else "ingested"


def _insert_report(con: duckdb.DuckDBPyConnection, row: dict[str, object]) -> None:
    cols = schema.BY_NAME["reports"].col_names
    params.execute(
        con,
        f"INSERT INTO reports ({', '.join(cols)}) VALUES ({', '.join('$' + c for c in cols)})",
        {c: row.get(c) for c in cols},
    )


def _ingest_nsys(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    stat: os.stat_result,
    hasher: _Hasher,
    replace: bool,
    defer: set[str],
    progress: Progress | None,
) -> IngestResult:
    tables = sqlite_source.attach(con, path)
    src = nsys.Source(tables)
    previous = _copy_settings(con)
    try:
        nsys.validate(src, path)
        meta = nsys.metadata(con, src)
        steps = list(nsys.LOADERS)
        # Derived columns (the NVTX ranges' kernels) are computed on first use even after --full:
        # they need no source file, cost seconds at millions of ranges, and UPDATE rows by rowid,
        # which DuckDB does slowly on rows the same transaction inserted.
        defer = defer | set(nsys.DERIVED)
        deferred = [t for t in steps if t in defer and nsys.LOADERS[t][0](src) is not None]
        con.execute("BEGIN TRANSACTION")
        try:
            rid, status = _begin(con, hasher, str(path), replace)
            nsys.prepare_strings(con, src)
            rows: dict[str, int] = {}
            launch = "kernel_launch" not in deferred  # else copied with the kernel rows
            for i, table in enumerate(steps):
                if progress:
                    progress(table, i, len(steps))
                if table not in deferred and table != "kernel_launch":
                    with timed(log, f"ingest {path.name}: {table}"):
                        rows[table] = nsys.load_table(con, src, table, rid, launch=launch)
            sha = hasher.result()
            kinds = _activity_kinds(src, rows)
            _insert_report(
                con,
                {
                    "report_id": rid,
                    "kind": "nsys",
                    "source_path": str(path),
                    "sha256": sha,
                    "size_bytes": stat.st_size,
                    "source_mtime_ns": stat.st_mtime_ns,
                    "ingested_at": datetime.now(timezone.utc).replace(tzinfo=None),
                    "activity_kinds": kinds,
                    "has_kernels": "kernel" in kinds,
                    "has_memcpy": "memcpy" in kinds,
                    "has_cuda_api": "cuda_api" in kinds,
                    "has_nvtx": "nvtx" in kinds,
                    "deferred_tables": deferred,
                    **meta,
                },
            )
            con.execute(f"DROP TABLE IF EXISTS {nsys.STRINGS}")
            con.execute("COMMIT")
        except BaseException as exc:
            con.execute("ROLLBACK")
            if isinstance(exc, duckdb.Error):
                raise _read_error(path, exc) from exc
            raise
    finally:
        _restore(con, previous)
        sqlite_source.detach(con)
    if progress:
        progress("done", len(steps), len(steps))
    # users know the kernels by the view's name
    counts = {("kernels" if t == "kernel_rows" else t): n for t, n in rows.items()}
    result = IngestResult(rid, path, "nsys", status, counts, deferred)
    if not {"kernel", "memcpy", "memset", "graph"} & set(kinds):
        result.warnings.append(
            f"report {rid} ({path.name}) has no kernel, memcpy or memset records: CUDA "
            "tracing was off or failed (for example an nsys too old for the driver), so nothing "
            "can be said about GPU use. Profile again with `nsys profile -t cuda` using a current nsys."
        )
    return result


# While copying: canonical tables promise no row order, and not keeping the export's order
# makes copies ~1.3x faster. (A 1 GB memory_limit was tried for the largest step, the NVTX
# ranges' kernels: the same peak at 600 MB input, twice the time at 1.8 GB; benchmarks/README.md.)
COPY_SETTINGS = {"preserve_insertion_order": "false"}


def _copy_settings(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    previous = {
        k: str(params.first_row(con.execute(f"SELECT current_setting('{k}')"))[0]) for k in COPY_SETTINGS
    }
    for key, value in COPY_SETTINGS.items():
        con.execute(f"SET {key} = {value}")
    return previous


def _restore(con: duckdb.DuckDBPyConnection, previous: dict[str, str]) -> None:
    for key, value in previous.items():
        con.execute(f"SET {key} = {params.literal(value)}")


def _activity_kinds(src: nsys.Source, rows: dict[str, int]) -> list[str]:
    kinds = []
    for table, (builder, kind) in nsys.LOADERS.items():
        if kind is None:
            continue
        present = rows.get(table, 0) > 0 if table in rows else builder(src) is not None
        if present and kind not in kinds:
            kinds.append(kind)
    return kinds


def _read_error(path: Path, exc: duckdb.Error) -> InputError:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "malformed" in text or "corrupt" in text or "not a database" in text:
        return InputError(f"{path} is damaged or truncated ({text}); copy or export it again.")
    return InputError(f"{path} could not be ingested: {text}")


def _ingest_ncu(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    stat: os.stat_result,
    hasher: _Hasher,
    replace: bool,
    progress: Progress | None,
) -> IngestResult:
    from . import ncu

    con.execute("BEGIN TRANSACTION")
    try:
        rid, status = _begin(con, hasher, str(path), replace)
        sha = hasher.result()
        if progress:
            progress("ncu", 0, 1)
        info = ncu.load_ncu(con, path, rid)
        kinds = [str(k) for k in cast(list[str], info.get("activity_kinds", ["ncu_metrics"]))]
        _insert_report(
            con,
            {
                "report_id": rid,
                "kind": "ncu",
                "source_path": str(path),
                "sha256": sha,
                "size_bytes": stat.st_size,
                "source_mtime_ns": stat.st_mtime_ns,
                "tool_version": info.get("tool_version"),
                "ingested_at": datetime.now(timezone.utc).replace(tzinfo=None),
                "activity_kinds": kinds,
                "has_kernels": bool(info.get("kernels")),
                "has_memcpy": False,
                "has_cuda_api": False,
                "has_nvtx": False,
                "deferred_tables": [],
            },
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    rows = {k: int(cast(int, v)) for k, v in info.items() if k in ("kernels", "metrics", "rules")}
    return IngestResult(rid, path, "ncu", status, rows)


def deferred_for(con: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> list[tuple[int, str, str]]:
    """(report_id, source_path, table) still waiting to be copied, for the given tables, in the
    order they must be copied."""
    tables = set(tables)
    if "kernels" in tables:  # the view shows the launch columns kernel_rows may still lack
        tables.add("kernel_launch")
    if tables & {"nvtx_ranges", "nvtx_kernels"}:  # the ranges' kernels come from the API calls
        tables |= {"nvtx_ranges", "nvtx_kernels", "cuda_api"}
    if "host_waits" in tables:  # found with the steps, in one scan of the NVTX ranges
        tables.add("steps")
    wanted = [t for t in tables if t in nsys.LOADERS]
    if not wanted:
        return []
    rows = con.execute(
        "SELECT report_id, source_path, unnest(deferred_tables) AS t FROM reports "
        "WHERE len(deferred_tables) > 0"
    ).fetchall()
    todo = [(rid, src, t) for rid, src, t in rows if t in wanted]
    order = list(nsys.LOADERS)  # kernels and cuda_api before the steps derived from them
    return sorted(todo, key=lambda r: (r[0], order.index(r[2])))


def _source_unchanged(con: duckdb.DuckDBPyConnection, report_id: int, path: Path) -> bool:
    """Is the file still the one ingested as the report? Same size and mtime as at ingest: yes,
    without reading it (as make and rsync decide; hashing 600 MB costs ~0.4 s of CPU each time
    a deferred table is first used). Otherwise (touched, copied, or ingested before nsa kept
    the mtime) the SHA-256 of its bytes decides."""
    sha, size, mtime = params.first_row(
        params.execute(
            con,
            "SELECT sha256, size_bytes, source_mtime_ns FROM reports WHERE report_id = $rid",
            {"rid": report_id},
        )
    )
    try:
        stat = path.stat()
    except OSError:
        return False
    if stat.st_size != size:
        return False
    return (mtime is not None and stat.st_mtime_ns == mtime) or sha256_file(path) == sha


def ensure_loaded(
    con: duckdb.DuckDBPyConnection,
    tables: Iterable[str],
    progress: Progress | None = None,
) -> int:
    """Copy deferred tables from their source files (and compute derived columns); returns how
    many report tables were loaded."""
    todo = deferred_for(con, tables)
    for i, (rid, source, table) in enumerate(todo):
        if progress:
            progress(f"{table} (report {rid})", i, len(todo))
        path = Path(source)
        derived = table in nsys.DERIVED  # computed from the workspace: no source file needed
        if not derived and not _source_unchanged(con, rid, path):
            state = "is gone" if not path.exists() else "has changed since"
            if table in nsys.OPTIONAL:  # the answers fall back to the whole run, and say why
                log.warning(
                    "report %s's %s cannot be found: %s %s ingest; timeline findings judge its whole run "
                    "(re-ingest it with `nsa ingest --replace FILE`).",
                    rid,
                    table,
                    path,
                    state,
                )
                continue
            raise NsaError(
                f"report {rid}'s {table} were left in {path} at ingest, and that file {state}; "
                f"re-ingest it with `nsa ingest --replace --full FILE`."
            )
        src = nsys.Source({}) if derived else nsys.Source(sqlite_source.attach(con, path))
        previous = _copy_settings(con)
        try:
            con.execute("BEGIN TRANSACTION")
            try:
                if not derived:
                    nsys.prepare_strings(con, src)
                with timed(log, f"report {rid}: loaded deferred {table}"):
                    nsys.load_table(con, src, table, rid)
                params.execute(
                    con,
                    "UPDATE reports SET deferred_tables = list_filter(deferred_tables, x -> x != $done) "
                    "WHERE report_id = $rid",
                    {"done": table, "rid": rid},
                )
                con.execute(f"DROP TABLE IF EXISTS {nsys.STRINGS}")
                con.execute("COMMIT")
            except BaseException as exc:
                con.execute("ROLLBACK")
                if isinstance(exc, duckdb.Error):
                    raise _read_error(path, exc) from exc
                raise
        finally:
            _restore(con, previous)
            if not derived:
                sqlite_source.detach(con)
    return len(todo)
