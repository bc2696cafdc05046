"""DuckDB's memory while a page is gathered.

A page reads most of a workspace (every kernel, copy and API call, the NVTX ranges), and DuckDB
keeps what it scanned in its buffer pool up to its memory limit (80 % of the machine by default),
so on a million-kernel workspace the process grows to several times what the page needs. Capped,
DuckDB evicts those blocks (they are read again from the workspace file when needed) and spills
the few large intermediates (the timeline's per-lane sort) to its temporary folder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from .. import params

MEMORY_LIMIT_BYTES = 256 << 20
_SCALE = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}  # fmt: skip


@contextmanager
def capped_memory(con: duckdb.DuckDBPyConnection, limit: int = MEMORY_LIMIT_BYTES) -> Iterator[None]:
    """DuckDB's memory limit lowered to `limit` (never raised) for the block, then restored."""
    previous = str(params.first_row(con.execute("SELECT current_setting('memory_limit')"))[0])
    m = re.fullmatch(r"([0-9.]+)\s*([KMGT]i?B|bytes)", previous)
    lower = m is None or float(m.group(1)) * _SCALE.get(m.group(2), 1) > limit
    if lower:
        con.execute(f"SET memory_limit = '{limit >> 20}MiB'")
    try:
        yield
    finally:
        if lower:
            con.execute(f"SET memory_limit = '{previous}'")
