"""Nsight Compute reports (`.ncu-rep`), read through NVIDIA's ncu_report module (PyPI `ncu-report`).

The report is checked and read whole in `open` (ncu_rep.py), before the workspace is
touched; `load` only inserts. Nothing is deferred: a report of ten `--set full` launches reads
in a few seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from ..formats import NCU_REP_MAGIC
from ..reader import LoadResult, Progress, Reader

if TYPE_CHECKING:  # pandas and ncu_report load only when a report is read
    from .ncu_rep import NcuRep


class NcuRepReader(Reader["NcuRep"]):
    name = "ncu-rep"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(NCU_REP_MAGIC)

    @contextmanager
    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[NcuRep]:
        from .ncu_rep import read_report

        yield read_report(path)

    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: NcuRep,
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        if progress:
            progress("ncu-rep", 0, 1)
        from . import ncu, ncu_rep

        counts = ncu_rep.insert(con, handle, report_id)
        return LoadResult(
            rows={
                "kernels": counts["ncu_kernels"],
                "metrics": counts["ncu_metrics"],
                "instances": counts["ncu_metric_instances"],
                "rules": counts["ncu_rules"],
                "source rows": counts["ncu_source"],
            },
            activity_kinds=ncu.activity_kinds(counts),
            metadata={"tool_version": handle.tool_version},
            flags={"has_kernels": counts["ncu_kernels"] > 0},
        )


READER = NcuRepReader()
