"""Nsight Systems reports (`.nsys-rep`, `.qdrep`), read through the user's own nsys.

The report is exported with `nsys export --type sqlite` (nsys_cli.py) into the workspace's
export cache (export_cache.py), keyed by the report's SHA-256, and that export is read by the
nsys SQLite reader: the same tables, steps and deferral. The report row keeps the `.nsys-rep`
(its path, hash, de-duplication, --replace); a deferred step finds the cached export again, or
exports anew when the cache was removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from ... import params
from ..formats import NSYS_REP_MAGIC
from ..pipeline import content_hash_file
from ..reader import LoadResult, Progress, Reader, Source
from . import export_cache, nsys_cli
from .reader_sqlite import READER as SQLITE
from .reader_sqlite import Export, NsysSteps


@dataclass
class Report:
    """An `.nsys-rep` whose SQLite export is attached."""

    export: Export
    report: Path  # the .nsys-rep read, named in messages instead of the export


class NsysRepReader(NsysSteps, Reader[Report]):
    name = "nsys-rep"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(NSYS_REP_MAGIC)

    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> AbstractContextManager[Report]:
        """For callers outside the pipeline: the report's hash is computed here."""
        return self.open_source(con, path, Source(path, lambda: content_hash_file(path)))

    @contextmanager
    def open_source(self, con: duckdb.DuckDBPyConnection, path: Path, source: Source) -> Iterator[Report]:
        def make(out: Path) -> None:
            nsys_cli.export(path, out, source.progress)

        with (
            export_cache.export_of(con, source.content_hash(), make) as sqlite,
            SQLITE.open(con, sqlite) as export,
        ):
            yield Report(export, path)

    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: Report,
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        loaded = SQLITE.load(con, handle.export, report_id, defer, progress)
        sqlite = handle.export.path
        loaded.warnings = [
            w.replace(str(sqlite), str(handle.report)).replace(sqlite.name, handle.report.name)
            for w in loaded.warnings
        ]
        return loaded

    def steps_for(self, tables: Iterable[str]) -> list[str]:
        return SQLITE.steps_for(tables)

    def load_deferred(
        self, con: duckdb.DuckDBPyConnection, handle: Report | None, report_id: int, step: str
    ) -> int:
        return SQLITE.load_deferred(con, handle.export if handle else None, report_id, step)

    def clean(self, con: duckdb.DuckDBPyConnection) -> None:
        kept = params.execute(
            con,
            "SELECT coalesce(content_hash, sha256) FROM reports WHERE format = $format",
            {"format": self.name},
        ).fetchall()
        export_cache.prune(con, (key for (key,) in kept))


READER = NsysRepReader()
