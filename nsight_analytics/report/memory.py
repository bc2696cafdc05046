"""DuckDB's memory while a page is gathered.

A page reads most of a workspace (every kernel, copy and API call, the NVTX ranges), and DuckDB
keeps what it scanned in its buffer pool up to its memory limit (80 % of the machine by default),
so on a million-kernel workspace the process grows to several times what the page needs. Capped
at the drawn inputs' size, as the deferred steps and the rules are (`ingest.pipeline.memory_cap`),
DuckDB evicts those blocks (they are read again from the workspace file when needed) and spills
the large intermediates (the timeline's per-lane sort, the rules' windows) to its temporary
folder. A fixed cap below that (256 MiB) made the rules run out of memory on a 2M-kernel export.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import duckdb

from ..ingest.pipeline import memory_cap


@contextmanager
def capped_memory(con: duckdb.DuckDBPyConnection, report_ids: Iterable[int]) -> Iterator[None]:
    """DuckDB's memory limit lowered to the size of the `report_ids`' files (less what the
    process holds outside DuckDB, at least 256 MiB; never raised) for the block, then restored;
    with a folder to spill to (`ingest.pipeline.spill_folder`)."""
    with memory_cap(con, report_ids):
        yield
