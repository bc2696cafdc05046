"""Nsight Compute CSV exports (`ncu --csv`, `ncu -i REPORT --csv`): details, raw, summary and
source pages, under any print option (units, locale, metric names, instances, section body
text), with the app's own output around them.

The parser lives in ncu.py; the whole file is parsed (and so validated) in `open`,
before the workspace is touched. Nothing is deferred: ncu CSVs are small.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from ..reader import LoadResult, Progress, Reader
from .ncu_sniff import sniff_head

if TYPE_CHECKING:  # the parser imports pandas: only when an ncu file is read
    from .ncu import NcuParsed


class NcuCsvReader(Reader["NcuParsed"]):
    name = "ncu"

    def sniff(self, head: bytes) -> bool:
        return sniff_head(head)

    @contextmanager
    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[NcuParsed]:
        from .ncu import parse_ncu

        yield parse_ncu(path)

    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: NcuParsed,
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        if progress:
            progress("ncu", 0, 1)
        from . import ncu

        counts = ncu.insert_parsed(con, handle, report_id)
        return LoadResult(
            rows={
                "kernels": counts["ncu_kernels"],
                "metrics": counts["ncu_metrics"],
                "rules": counts["ncu_rules"],
                **{
                    label: counts[table]
                    for label, table in (
                        ("instances", "ncu_metric_instances"),
                        ("section body rows", "ncu_section_text"),
                        ("source rows", "ncu_source"),
                    )
                    if counts[table]
                },
            },
            activity_kinds=ncu.activity_kinds(counts),
            metadata={"tool_version": handle.tool_version},
            flags={"has_kernels": counts["ncu_kernels"] > 0},
        )


READER = NcuCsvReader()
