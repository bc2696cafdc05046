"""What every format's NVTX ranges get from the workspace alone, whichever tool wrote them: the
kernels each range launched (`fill_nvtx_kernels`, the deferred `nvtx_kernels` step) and the ranges
that are host waits (`WAIT_RANGES`)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import duckdb

from .. import params

# Host waits that explain a GPU idle gap better than "late launch": communication libraries' NVTX
# ranges (nsys' MPI/UCX tracing, NCCL and torch.distributed write them).
WAIT_RANGES = r"^(P?MPI_|nccl|ucp_|ucx_|UCX|shmem_|nvshmem|gloo|c10d::)"


# Each range's kernels: the report's launches (kernels joined to their CUDA API call) summed
# per call start and thread, as running totals; a range's share is the total at its end minus
# the total before its start. Two ASOF joins on the thread's one key, global_tid (one sorted
# pass each, not a join of every range with every launch), the first one forward: from the
# range's start to the thread's first launch at or after it, whose total before it is the
# total before the range. When that launch comes after the range's end (most ranges launch
# nothing: 4.34M of 5.03M at x300), the range is done; only the others go through the second
# join, to the last launch at or before their end. The process-wide share is the same on
# running totals per pid and call start (NVTX_PROCESS, from the same rows), but only for the
# ranges where it can differ: when the range's thread is the only one of its process that
# launches kernels, or the process launches none, it equals the same-thread share. A range that
# ends before it starts holds no launch. Needs cuda_api and kernel_rows of the report loaded
# first.
# NVTX_RUNNING (`{where}` picks the report) becomes the temp table _nsa_running, NVTX_PROCESS
# _nsa_running_process; NVTX_PASS then gives (src_row, kernels, kernel_ns) for the ranges of
# one chunk that launched any kernel, by `{key}` (PASSES: global_tid for the same-thread share,
# pid for the process-wide one), from `{keys}` (src_row, report_id, pid, global_tid, start_ns,
# end_ns per closed range of the chunk) and `{running}` (the running totals of the chunk's
# threads or processes: one row per key and start_ns, its launches and the totals up to them).
NVTX_RUNNING = """
WITH launches AS (
    SELECT c.report_id, c.pid, c.global_tid, c.start_ns, count(*) AS kernels, sum(k.duration_ns) AS kernel_ns
    FROM kernel_rows AS k
    JOIN cuda_api AS c ON c.report_id = k.report_id AND c.pid = k.pid AND c.correlation_id = k.correlation_id
    WHERE {where}
    GROUP BY ALL
)
SELECT
    report_id, pid, global_tid, start_ns, kernels, kernel_ns,
    sum(kernels) OVER w AS cum_kernels,
    sum(kernel_ns) OVER w AS cum_kernel_ns
FROM launches
WINDOW w AS (PARTITION BY report_id, global_tid ORDER BY start_ns ROWS UNBOUNDED PRECEDING)
"""
NVTX_PROCESS = """
SELECT
    report_id, pid, start_ns, kernels, kernel_ns,
    sum(kernels) OVER w AS cum_kernels,
    sum(kernel_ns) OVER w AS cum_kernel_ns
FROM (SELECT report_id, pid, start_ns, sum(kernels) AS kernels, sum(kernel_ns) AS kernel_ns FROM _nsa_running GROUP BY ALL)
WINDOW w AS (PARTITION BY report_id, pid ORDER BY start_ns ROWS UNBOUNDED PRECEDING)
"""
# `n`: the first launch at or after the range's start; its totals less its own launches are the
# totals before the range (a sum of no durations is NULL: 0).
NVTX_PASS = """
WITH r AS ({keys}), running AS ({running}),
launching AS (
    SELECT
        r.src_row, r.report_id, r.{key}, r.end_ns,
        n.cum_kernels - n.kernels AS pre_kernels,
        coalesce(n.cum_kernel_ns, 0) - coalesce(n.kernel_ns, 0) AS pre_kernel_ns
    FROM r
    ASOF JOIN running AS n ON n.report_id = r.report_id AND n.{key} = r.{key} AND n.start_ns >= r.start_ns
    WHERE n.start_ns <= r.end_ns
)
SELECT l.src_row, e.cum_kernels - l.pre_kernels AS kernels, coalesce(e.cum_kernel_ns, 0) - l.pre_kernel_ns AS kernel_ns
FROM launching AS l
ASOF JOIN running AS e ON e.report_id = l.report_id AND e.{key} = l.{key} AND l.end_ns >= e.start_ns
"""
NVTX_TEMP = ("_nsa_running", "_nsa_running_process", "_nsa_nvtx", "_nsa_nvtx_process")
# Closed ranges per ASOF pass: the passes sort their ranges, so the memory they take grows with
# this, not with the report (at 5M ranges in one pass: ~1.5 GB).
NVTX_CHUNK = 1_000_000
KERNEL_COLS = ("kernels", "kernel_ns", "process_kernels", "process_kernel_ns")


@dataclass(frozen=True)
class Pass:
    """One share of the ranges' kernels: the temp table it fills, the running totals it reads
    (`running`, a temp table; `build`: its SQL when the pass must make it first) and the
    ranges it works out (`ranges`, a filter on nvtx_ranges): same-thread, those of threads that
    launch kernels; process-wide, those of processes where another thread than the range's
    launches kernels. `per_range`: the filter tells ranges of one key apart (it reads the
    range's global_tid), so each chunk applies it again; otherwise a chunk of whole keys already
    holds only ranges to work out."""

    table: str
    running: str
    ranges: str
    build: str | None = None
    per_range: bool = False


PASSES = {
    "global_tid": Pass("_nsa_nvtx", "_nsa_running", "global_tid IN (SELECT global_tid FROM _nsa_running)"),
    "pid": Pass(
        "_nsa_nvtx_process",
        "_nsa_running_process",
        """pid IN (SELECT pid FROM _nsa_running GROUP BY pid
        HAVING count(DISTINCT global_tid) > 1 OR min(global_tid) IS DISTINCT FROM nvtx_ranges.global_tid)""",
        build=NVTX_PROCESS,
        per_range=True,
    ),
}


def _nvtx_chunks(con: duckdb.DuckDBPyConnection, rid: int, key: str, chunk: int) -> list[tuple[str, str]]:
    """Split the report's closed ranges that a pass works out (PASSES, by `key`:
    global_tid or pid) into parts of about `chunk` ranges, as (filter on `key`, filter on the
    rowid): whole keys grouped while they fit, a larger key cut at quantiles of its rowids."""
    counts = con.execute(
        f"SELECT {key}, count(*) FROM nvtx_ranges WHERE report_id = {rid} AND end_ns IS NOT NULL "
        f"AND {PASSES[key].ranges} GROUP BY ALL ORDER BY 1"
    ).fetchall()
    parts: list[tuple[str, str]] = []
    group: list[int] = []
    size = 0
    for value, n in counts:
        if n > chunk:
            k = -(-n // chunk)
            cuts = params.literal([i / k for i in range(1, k)])
            bounds = params.first_row(
                con.execute(
                    f"SELECT quantile_disc(rowid, {cuts}) FROM nvtx_ranges "
                    f"WHERE report_id = {rid} AND end_ns IS NOT NULL AND {key} = {int(value)}"
                )
            )[0]
            edges = [None, *bounds, None]
            for lo, hi in pairwise(edges):
                rows = [f"rowid > {int(lo)}"] if lo is not None else []
                rows += [f"rowid <= {int(hi)}"] if hi is not None else []
                parts.append((f"{key} = {int(value)}", " AND ".join(rows) or "true"))
            continue
        if size + n > chunk and group:
            parts.append((f"{key} IN ({', '.join(map(str, group))})", "true"))
            group, size = [], 0
        group.append(int(value))
        size += n
    if group:
        parts.append((f"{key} IN ({', '.join(map(str, group))})", "true"))
    return parts


def _pass(con: duckdb.DuckDBPyConnection, rid: int, key: str, chunk: int) -> None:
    """Fill the temp table of PASSES[key] with (src_row, kernels, kernel_ns) of the report's
    closed ranges that launched any kernel, chunk by chunk (_nvtx_chunks)."""
    spec = PASSES[key]
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {spec.table} (src_row BIGINT, kernels BIGINT, kernel_ns BIGINT)"
    )
    within = f" AND {spec.ranges}" if spec.per_range else ""
    chunks = _nvtx_chunks(con, rid, key, chunk)
    if chunks and spec.build:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {spec.running} AS {spec.build}")
    for of_keys, of_rows in chunks:
        keys = (
            "SELECT rowid AS src_row, report_id, pid, global_tid, start_ns, end_ns FROM nvtx_ranges "
            f"WHERE report_id = {rid} AND end_ns IS NOT NULL AND {of_keys} AND {of_rows}{within}"
        )
        running = f"SELECT * FROM {spec.running} WHERE {of_keys}"
        con.execute(f"INSERT INTO {spec.table} {NVTX_PASS.format(keys=keys, running=running, key=key)}")


def fill_nvtx_kernels(con: duckdb.DuckDBPyConnection, report_id: int, chunk: int = NVTX_CHUNK) -> int:
    """Compute `kernels` / `kernel_ns` and `process_kernels` / `process_kernel_ns` of a report's
    NVTX ranges in the workspace from its CUDA API calls and kernels (both must be copied);
    returns the report's ranges. Matched on DuckDB rowids, so call it inside one transaction
    with nothing deleted in between. Closed ranges get 0 first (a constant, no join), then only
    the ranges that launched a kernel are written: at 5.03M ranges of which 0.69M launched, the
    others cost neither a row in the temp tables nor a joined update. The ASOF passes go by
    chunks of threads (processes) of about `chunk` closed ranges, which bounds their memory:
    in one pass, 5.03M ranges took ~1.5 GB; in chunks of 1M, ~0.25 GB each."""
    rid = int(report_id)
    closed = f"report_id = {rid} AND end_ns IS NOT NULL"
    where = f"k.report_id = {rid} AND c.report_id = {rid}"
    try:
        con.execute(
            f"UPDATE nvtx_ranges SET {', '.join(f'{c} = 0' for c in KERNEL_COLS)} "
            f"WHERE {closed} AND ({' OR '.join(f'{c} IS NULL' for c in KERNEL_COLS)})"
        )
        con.execute(f"CREATE OR REPLACE TEMP TABLE _nsa_running AS {NVTX_RUNNING.format(where=where)}")
        for key in PASSES:
            _pass(con, rid, key, chunk)
        # process-wide = same-thread first (right where no other thread launches), then the rest
        con.execute(
            "UPDATE nvtx_ranges SET kernels = p.kernels, kernel_ns = p.kernel_ns, "
            "process_kernels = p.kernels, process_kernel_ns = p.kernel_ns "
            "FROM _nsa_nvtx AS p WHERE nvtx_ranges.rowid = p.src_row"
        )
        con.execute(
            "UPDATE nvtx_ranges SET process_kernels = p.kernels, process_kernel_ns = p.kernel_ns "
            "FROM _nsa_nvtx_process AS p WHERE nvtx_ranges.rowid = p.src_row"
        )
        total = params.first_row(con.execute(f"SELECT count(*) FROM nvtx_ranges WHERE report_id = {rid}"))
    finally:
        for table in NVTX_TEMP:
            try:
                con.execute(f"DROP TABLE IF EXISTS {table}")
            except duckdb.Error:  # the transaction failed: its ROLLBACK drops them
                break
    return int(total[0])
