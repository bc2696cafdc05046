"""Nsight Compute reports (`.ncu-rep`), read through NVIDIA's ncu_report module (PyPI `ncu-report`).

The report is checked and read whole in `open` (ncu_rep.py), before the workspace is
touched; `load` only inserts. Nothing is deferred: a report of ten `--set full` launches reads
in a few seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from ..formats import NCU_REP_MAGIC
from .ncu_reader import NcuReader

if TYPE_CHECKING:  # pandas and ncu_report load only when a report is read
    from .ncu_rep import NcuRep


class NcuRepReader(NcuReader["NcuRep"]):
    name = "ncu-rep"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(NCU_REP_MAGIC)

    def read(self, path: Path) -> NcuRep:
        from .ncu_rep import read_report

        return read_report(path)

    def insert(self, con: duckdb.DuckDBPyConnection, handle: NcuRep, report_id: int) -> dict[str, int]:
        from .ncu_rep import insert

        return insert(con, handle, report_id)


READER = NcuRepReader()
