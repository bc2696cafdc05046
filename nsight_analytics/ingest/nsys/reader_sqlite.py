"""Nsight Systems SQLite exports (`nsys export --type sqlite`), every schema from 2021 to 2026.

The table builders live in nsys.py; this reader attaches the file, validates it and runs
them. The host-side tables, the launch configuration and the steps can be deferred to first use.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import duckdb

from ... import params
from ...errors import InputError
from ...timing import timed
from .. import comm, sqlite_source
from ..reader import LoadResult, Progress, Reader
from . import nsys

log = logging.getLogger(__name__)

# While copying: canonical tables promise no row order, and not keeping the export's order
# makes copies ~1.3x faster (benchmarks/README.md).
COPY_SETTINGS = {"preserve_insertion_order": "false"}


@dataclass
class Export:
    """An attached, validated export."""

    src: nsys.Source
    path: Path


class NsysSteps:
    """The deferred steps of the nsys tables (Reader's attributes), for every reader that reads an
    nsys SQLite export in the end: this one and the `.nsys-rep` reader."""

    deferrable: tuple[str, ...] = nsys.DEFERRABLE
    derived: tuple[str, ...] = nsys.DERIVED
    optional: tuple[str, ...] = nsys.OPTIONAL
    step_writes: ClassVar[dict[str, tuple[str, ...]]] = nsys.STEP_WRITES
    worked_out: tuple[str, ...] = nsys.WORKED_OUT


class NsysSqliteReader(NsysSteps, Reader[Export]):
    name = "nsys"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(sqlite_source.SQLITE_MAGIC)

    @contextmanager
    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[Export]:
        sqlite_source.check_sqlite_file(path)
        not_null: dict[str, set[str]] = {}
        src = nsys.Source(sqlite_source.attach(con, path, not_null=not_null), not_null=not_null)
        previous = _copy_settings(con)
        try:
            nsys.validate(src, path)
            yield Export(src, path)
        finally:
            _restore(con, previous)
            sqlite_source.detach(con)  # after the transaction: DuckDB refuses to detach inside it

    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: Export,
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        src, path = handle.src, handle.path
        steps = list(nsys.LOADERS)
        # Derived columns (the NVTX ranges' kernels) are computed on first read even after --full:
        # they need no source file, cost seconds at millions of ranges, and UPDATE rows by rowid,
        # which DuckDB does slowly on rows the same transaction inserted.
        defer = defer | set(nsys.DERIVED)
        deferred = [t for t in steps if t in defer and nsys.LOADERS[t][0](src) is not None]
        try:
            meta = nsys.metadata(con, src)
            nsys.prepare_strings(con, src)
            # A GPU copy or the memory events left for later still tell the report's activity
            # kinds: one row of each is asked for now (an export may hold a table of none).
            empty = [t for t in deferred if t in nsys.KIND_CHECKED and not _has_rows(con, src, t)]
            deferred = [t for t in deferred if t not in empty]
            rows: dict[str, int] = dict.fromkeys(empty, 0)
            launch = "kernel_launch" not in deferred  # else copied with the kernel rows
            copied = [t for t in steps if t not in deferred and t not in empty and t != "kernel_launch"]
            weights = _progress_weights(path, src, copied) if progress else {}
            done, total = 0, sum(weights.values())
            for table in steps:
                if progress:
                    progress(table, done, total)
                if table in copied:
                    with timed(log, f"ingest {path.name}: {table}"):
                        rows[table] = nsys.load_table(con, src, table, report_id, launch=launch)
                    done += weights.get(table, 0)
            with timed(log, f"ingest {path.name}: comm_ops"):
                rows["comm_ops"] = comm.load(con, report_id)  # from the kernels just copied
            con.execute(f"DROP TABLE IF EXISTS {nsys.STRINGS}")
        except duckdb.Error as exc:
            raise _read_error(path, exc) from exc
        if progress:
            progress("done", total, total)
        kinds = _activity_kinds(src, rows)
        if nsys.mpi_waits_sql(src) is not None:  # MPI traced; its calls reach host_waits with the steps
            kinds.append("mpi")
        if rows.get("memory_events") or "memory_events" in deferred:
            kinds.append("memory")
        if rows.get("comm_ops"):
            kinds.append("comm")
        result = LoadResult(
            # users know the kernels by the view's name
            rows={("kernels" if t == "kernel_rows" else t): n for t, n in rows.items()},
            activity_kinds=kinds,
            metadata=meta,
            deferred=deferred,
        )
        if not {"kernel", "memcpy", "memset", "graph"} & set(kinds):
            result.warnings.append(
                f"report {report_id} ({path.name}) has no kernel, memcpy or memset records: CUDA "
                "tracing was off or failed (for example an nsys too old for the driver), so nothing "
                "can be said about GPU use. Profile again with `nsys profile -t cuda` using a current nsys."
            )
        return result

    def steps_for(self, tables: Iterable[str]) -> list[str]:
        wanted = set(tables)
        if "kernels" in wanted:  # the view shows the launch columns kernel_rows may still lack
            wanted.add("kernel_launch")
        # The ranges' kernels (nvtx_ranges.kernels & co.) only for what names them (schema.COMPUTED):
        # working them out at 5M ranges costs more than copying the ranges. From the API calls.
        if "nvtx_kernels" in wanted:
            wanted |= {"nvtx_ranges", "cuda_api"}
        if "host_waits" in wanted:  # found with the steps, in one scan of the NVTX ranges
            wanted.add("steps")
        if wanted & set(nsys.STEP_WRITES["stack_events"]):  # frames, stacks and their events: one step
            wanted.add("stack_events")
        return [t for t in nsys.LOADERS if t in wanted]  # kernels and cuda_api before what derives from them

    def load_deferred(
        self, con: duckdb.DuckDBPyConnection, handle: Export | None, report_id: int, step: str
    ) -> int:
        """`handle` is None for the derived steps, which read only the workspace."""
        try:
            if handle is not None:
                nsys.prepare_strings(con, handle.src)
            with timed(log, f"report {report_id}: loaded deferred {step}"):
                n = nsys.load_table(con, handle.src if handle else nsys.Source({}), step, report_id)
            con.execute(f"DROP TABLE IF EXISTS {nsys.STRINGS}")
        except duckdb.Error as exc:
            where = handle.path if handle else Path(f"report {report_id}")
            raise _read_error(where, exc, f"could not be read for report {report_id}'s {step}") from exc
        return n


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


def _has_rows(con: duckdb.DuckDBPyConnection, src: nsys.Source, table: str) -> bool:
    """Does the export hold a row of the canonical table `table`? (One row read, not the table.)"""
    sql = nsys.LOADERS[table][0](src)
    if sql is None:
        return False
    return bool(params.first_row(params.execute(con, f"SELECT EXISTS ({sql})", {"rid": 0}))[0])


def _activity_kinds(src: nsys.Source, rows: dict[str, int]) -> list[str]:
    kinds = []
    for table, (builder, kind) in nsys.LOADERS.items():
        if kind is None:
            continue
        present = rows.get(table, 0) > 0 if table in rows else builder(src) is not None
        if present and kind not in kinds:
            kinds.append(kind)
    return kinds


def _read_error(path: Path, exc: duckdb.Error, failed: str = "could not be ingested") -> InputError:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "malformed" in text or "corrupt" in text or "not a database" in text:
        return InputError(f"{path} is damaged or truncated ({text}); copy or export it again.")
    return InputError(f"{path} {failed}: {text}")


READER = NsysSqliteReader()


_SOURCE_TABLE = re.compile(r'\bsrc\."(\w+)"')
_LOOKUPS = frozenset({nsys.STRINGS, "StringIds"})


def _progress_weights(path: Path, src: nsys.Source, steps: list[str]) -> dict[str, int]:
    """The work of each step for the progress bar: the rows of the export's tables its SELECT
    reads (their largest rowid, which SQLite answers without a scan), at least 1; all 1 when the
    file cannot be read that way."""
    reads = {t: set(_SOURCE_TABLE.findall(nsys.LOADERS[t][0](src) or "")) - _LOOKUPS for t in steps}
    sizes: dict[str, int] = {}
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            for name in set().union(*reads.values()) & set(src.tables):
                sizes[name] = int(db.execute(f'SELECT coalesce(max(rowid), 0) FROM "{name}"').fetchone()[0])
    except sqlite3.Error:
        return dict.fromkeys(steps, 1)
    return {t: max(1, sum(sizes.get(n, 0) for n in reads[t])) for t in steps}
