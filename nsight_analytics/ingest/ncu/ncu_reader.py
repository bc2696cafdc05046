"""What the two Nsight Compute readers share (reader_csv.py, reader_rep.py): the whole input is
read, and so checked, in `open`, before the workspace is touched; `load` only inserts, with
nothing deferred (an ncu capture is small), and reports its rows the same way for both."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TypeVar

import duckdb

from ..reader import LoadResult, Progress, Reader


class Read(Protocol):
    """A parsed capture (ncu.NcuParsed, ncu_rep.NcuRep): what `load` reads of it besides its rows."""

    @property
    def tool_version(self) -> str | None: ...


H = TypeVar("H", bound=Read)

# What the summary names, in order: (label, table, named only when it has rows).
ROWS = (
    ("kernels", "ncu_kernels", False),
    ("metrics", "ncu_metrics", False),
    ("instances", "ncu_metric_instances", True),
    ("rules", "ncu_rules", False),
    ("section body rows", "ncu_section_text", True),
    ("source rows", "ncu_source", True),
)


class NcuReader(Reader[H]):
    @abstractmethod
    def read(self, path: Path) -> H:
        """The file parsed whole (InputError naming the file when it is not a usable capture)."""

    @abstractmethod
    def insert(self, con: duckdb.DuckDBPyConnection, handle: H, report_id: int) -> dict[str, int]:
        """Append the rows under `report_id` in the caller's transaction; rows per table."""

    @contextmanager
    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[H]:
        yield self.read(path)

    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: H,
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        if progress:
            progress(self.name, 0, 1)
        from .ncu import activity_kinds  # pandas, only when an ncu file is read

        counts = self.insert(con, handle, report_id)
        return LoadResult(
            rows={
                label: counts.get(table, 0)
                for label, table, optional in ROWS
                if counts.get(table) or not optional
            },
            activity_kinds=activity_kinds(counts),
            metadata={"tool_version": handle.tool_version},
            flags={"has_kernels": counts["ncu_kernels"] > 0},
        )
