"""Nsight Compute CSV exports (`ncu --csv`, `ncu -i REPORT --csv`): details, raw, summary and
source pages, under any print option (units, locale, metric names, instances, section body
text), with the app's own output around them.

The parser lives in ncu.py; the whole file is parsed (and so validated) in `open`,
before the workspace is touched. Nothing is deferred: ncu CSVs are small.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from .ncu_reader import NcuReader
from .ncu_sniff import sniff_head

if TYPE_CHECKING:  # the parser imports pandas: only when an ncu file is read
    from .ncu import NcuParsed


class NcuCsvReader(NcuReader["NcuParsed"]):
    name = "ncu"

    def sniff(self, head: bytes) -> bool:
        return sniff_head(head)

    def read(self, path: Path) -> NcuParsed:
        from .ncu import parse_ncu

        return parse_ncu(path)

    def insert(self, con: duckdb.DuckDBPyConnection, handle: NcuParsed, report_id: int) -> dict[str, int]:
        from .ncu import insert_parsed

        return insert_parsed(con, handle, report_id)


READER = NcuCsvReader()
