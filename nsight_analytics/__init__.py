"""nsight-analytics: answers from Nsight Systems and Nsight Compute exports.

The library is the product; the `nsa` CLI is a thin layer over these functions.

    import nsight_analytics as nsa
    con = nsa.connect()                       # DuckDB connection on ./nsa.duckdb (or $NSA_DB)
    nsa.ingest(con, "trace.sqlite")
    nsa.query(con, "gaps", min_gap_ns=100_000).df()
    con.sql("SELECT * FROM gaps(min_gap_ns := 100000)").df()   # the same, as a table macro
    nsa.findings(con)                         # ranked findings, as `nsa findings`
    run = nsa.make_run(con, [nsa.ingest(con, f).report_id for f in rank_files], "job")
    nsa.query(con, "comm_overlap", run_id=run).df()   # the ranks of a multi-GPU job as one run

The facade's functions are imported on first use (PEP 562 `__getattr__`): importing the package,
as every `nsa` command does, loads neither DuckDB nor the readers.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from .errors import InputError, NsaError, QueryError, WorkspaceError

if TYPE_CHECKING:
    from .api import connect, diff, engine, findings, group_runs, ingest, make_run, query, query_run

__version__ = "0.1.0"

# Names this package takes from the facade (`api`).
_FACADE = ("connect", "diff", "engine", "findings", "group_runs", "ingest", "make_run", "query", "query_run")


def __getattr__(name: str) -> Any:
    if name in _FACADE:
        from . import api

        globals().update({n: getattr(api, n) for n in _FACADE})
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_FACADE})


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # The first import of the `diff` subpackage binds it here, which would hide the facade's
        # `nsa.diff(con, a, b)`; the subpackage stays `nsight_analytics.diff` in sys.modules.
        if name in _FACADE and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "InputError",
    "NsaError",
    "QueryError",
    "WorkspaceError",
    "__version__",
    "connect",
    "diff",
    "engine",
    "findings",
    "group_runs",
    "ingest",
    "make_run",
    "query",
    "query_run",
]
