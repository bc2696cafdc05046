"""The interface every input format implements, and the registry that finds them.

A reader recognises its files from their content, checks them (one-sentence InputError), and
writes canonical rows; the pipeline (pipeline.py) owns everything around that: detection across
readers, `.gz`, hashing, the transaction, --replace and the `reports` row. Readers are found by
discovery: every `reader` or `reader_*` module of a format package (`nsight_analytics/ingest/nsys/`,
`ncu/`, `kineto/`, `power/`) that defines `READER` is one; code outside the package (a plugin, a
test) adds one with `register`. docs/readers.md has the steps.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import duckdb

Progress = Callable[[str, int, int], None]
Handle = TypeVar("Handle")


@dataclass(frozen=True)
class Source:
    """What the pipeline knows of the file a reader opens, beyond the path `open` gets."""

    path: Path  # the file the user gave: the `.gz` when the reader reads its content
    # the report's content key (of `path`'s bytes): reports.content_hash, or the sha256 of a report
    # ingested before content_hash; may wait for the hash
    content_hash: Callable[[], str]
    progress: Progress | None = None
    # what the user told `nsa ingest` about the file (`timezone`: of nvidia-smi's local timestamps)
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass
class LoadResult:
    """What one load wrote: the pipeline turns it into the `reports` row and the user's summary."""

    rows: dict[str, int] = field(default_factory=dict)  # rows per table, as the user knows them
    activity_kinds: list[str] = field(default_factory=list)  # reports.activity_kinds
    # reports columns the reader knows: tool_version, schema_version, session_start_utc_ns
    metadata: dict[str, object] = field(default_factory=dict)
    deferred: list[str] = field(default_factory=list)  # steps left for load_deferred
    # has_kernels & co. where the activity kinds alone do not say (ncu's kernels are no `kernel` activity)
    flags: dict[str, bool] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class Reader(ABC, Generic[Handle]):
    """One input format.

    `open` is the validation: it reads what it must (attaches an SQLite file, parses a CSV) and
    raises InputError naming the file and what to do, before the workspace is touched. Its
    handle then serves `load`, which runs inside the pipeline's transaction and must only write
    rows under the given report id; and `load_deferred`, for the steps `load` left to first use.
    """

    name: str  # reports.format
    # Steps `load` may leave for first use, in the order they must run.
    deferrable: tuple[str, ...] = ()
    # Deferred steps computed from the workspace alone: they need no source file (handle None).
    derived: tuple[str, ...] = ()
    # Deferred steps whose answers can do without them when the source file is gone.
    optional: tuple[str, ...] = ()
    # The canonical tables each deferred step writes, where not the one named like the step.
    step_writes: ClassVar[dict[str, tuple[str, ...]]] = {}
    # Deferred steps that work something out rather than copy rows (not "copied on first use").
    worked_out: tuple[str, ...] = ()

    @abstractmethod
    def sniff(self, head: bytes) -> bool:
        """Is this the reader's format? `head` is the (decompressed) file's first SNIFF_BYTES.
        Readers must not claim each other's files: content, never the file name, decides."""

    @abstractmethod
    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> AbstractContextManager[Handle]:
        """Validate `path` and hold what load needs (an attached database, parsed rows)."""

    @abstractmethod
    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: Handle,
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        """Write the report's canonical rows; `defer` says which deferrable steps to leave."""

    def open_source(
        self, con: duckdb.DuckDBPyConnection, path: Path, source: Source
    ) -> AbstractContextManager[Handle]:
        """`open` as the pipeline calls it. A reader that converts the file first (an `.nsys-rep`
        through nsys) overrides this to key what it keeps by the report's hash and show progress."""
        return self.open(con, path)

    def clean(self, con: duckdb.DuckDBPyConnection) -> None:
        """Remove what the reader keeps outside the workspace for reports that are gone; the
        pipeline calls it after a commit that removed reports."""

    def steps_for(self, tables: Iterable[str]) -> list[str]:
        """The deferred steps that must run before `tables` can be read, in running order."""
        wanted = set(tables)
        return [s for s in self.deferrable if s in wanted]

    def load_deferred(
        self, con: duckdb.DuckDBPyConnection, handle: Handle | None, report_id: int, step: str
    ) -> int:
        """Run one deferred step inside the pipeline's transaction; returns rows written."""
        raise NotImplementedError(f"the {self.name} reader defers nothing")


SNIFF_BYTES = 4 << 20  # ncu's CSV may follow megabytes of the application's own output

_REGISTERED: dict[str, Reader[Any]] = {}


def register(reader: Reader[Any]) -> Reader[Any]:
    """Add a reader defined outside nsight_analytics/ingest's format packages (a plugin, a test);
    a reader of the same name is replaced."""
    _REGISTERED[reader.name] = reader
    return reader


def unregister(name: str) -> None:
    _REGISTERED.pop(name, None)


_INGEST = __package__ or "nsight_analytics.ingest"


def reader_modules() -> list[str]:
    """The modules that may define a reader: `reader` and `reader_*` of each format package
    (nsys/, ncu/, ...), in name order; listed without importing the formats' other modules."""
    ingest = importlib.import_module(_INGEST)
    names = []
    for fmt in sorted(m.name for m in pkgutil.iter_modules(ingest.__path__) if m.ispkg):
        names += _package_modules(fmt)
    return names


def _package_modules(fmt: str) -> list[str]:
    """The reader modules of the format package `fmt` (nsys/, ...), in name order."""
    package = importlib.import_module(f"{_INGEST}.{fmt}")
    return [
        f"{package.__name__}.{module}"
        for module in sorted(m.name for m in pkgutil.iter_modules(package.__path__))
        if module == "reader" or module.startswith("reader_")
    ]


def _readers_in(modules: Iterable[str]) -> dict[str, Reader[Any]]:
    found: dict[str, Reader[Any]] = {}
    for name in modules:
        reader = getattr(importlib.import_module(name), "READER", None)
        if isinstance(reader, Reader):
            found[reader.name] = reader
    return found


def _discovered() -> dict[str, Reader[Any]]:
    return _readers_in(reader_modules())


_PACKAGE_READERS: dict[str, dict[str, Reader[Any]]] = {}


def _package_readers(fmt: str) -> dict[str, Reader[Any]]:
    """The readers of the format package `fmt` alone ({} when there is none of that name)."""
    if fmt not in _PACKAGE_READERS:
        is_package = fmt.isidentifier() and importlib.util.find_spec(f"{_INGEST}.{fmt}") is not None
        _PACKAGE_READERS[fmt] = _readers_in(_package_modules(fmt)) if is_package else {}
    return _PACKAGE_READERS[fmt]


_DISCOVERED: dict[str, Reader[Any]] | None = None


def all_readers() -> list[Reader[Any]]:
    """Every reader: the package's own (by module name), then registered ones."""
    global _DISCOVERED
    if _DISCOVERED is None:
        _DISCOVERED = _discovered()
    return list({**_DISCOVERED, **_REGISTERED}.values())


def by_name(name: str) -> Reader[Any] | None:
    """The reader called `name`: a registered one, else the package's own, looked for first in
    the format package named like it (`nsys-rep` in nsys/), so that a query on nsys reports
    imports neither the Kineto, ncu nor power readers (~0.04 s of CPU per command)."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if _DISCOVERED is None:
        found = _package_readers(name.split("-")[0]).get(name)
        if found is not None:
            return found
    return next((r for r in all_readers() if r.name == name), None)


def sniff(head: bytes) -> Reader[Any] | None:
    return next((r for r in all_readers() if r.sniff(head)), None)
