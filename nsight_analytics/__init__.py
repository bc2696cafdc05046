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
"""

from __future__ import annotations

# The subpackage first: importing it later would rebind `nsight_analytics.diff` to the package,
# and `nsa.diff(con, a, b)` is the facade's function.
from . import diff as _diff_package  # noqa: F401
from .api import connect, diff, engine, findings, group_runs, ingest, make_run, query, query_run
from .errors import InputError, NsaError, QueryError, WorkspaceError

__version__ = "0.1.0"
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
