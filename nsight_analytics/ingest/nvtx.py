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
# NVTX_RUNNING (of report `{rid}`, from `{calls}`: its CUDA API calls as pid, global_tid,
# start_ns, correlation_id) becomes the temp table _nsa_running, NVTX_PROCESS
# _nsa_running_process; NVTX_PASS then gives (src_row, kernels, kernel_ns) for the ranges of
# one chunk that launched any kernel, by `{key}` (PASSES: global_tid for the same-thread share,
# pid for the process-wide one), from `{keys}` (src_row, pid, global_tid, start_ns, end_ns per
# closed range of the chunk) and `{running}` (the running totals of the chunk's threads or
# processes, all of one report: one row per key and start_ns, its launches and the totals up to
# them).
NVTX_RUNNING = """
WITH launches AS (
    SELECT k.report_id, c.pid, c.global_tid, c.start_ns, count(*) AS kernels, sum(k.duration_ns) AS kernel_ns
    FROM kernel_rows AS k
    JOIN ({calls}) AS c ON c.pid = k.pid AND c.correlation_id = k.correlation_id
    WHERE k.report_id = {rid}
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
# totals before the range (a sum of no durations is NULL: 0). Before that join, `near` may drop
# the ranges that start and end in one time bucket (2^NVTX_BUCKET ns of their key) where the key
# launches nothing, by a hash semi join (NVTX_NEAR): they hold no launch, and where ranges are
# many they are most of them (at x300, 2.7M of the 5.03M go; the ASOF sort of the rest is what
# the pass costs). The semi join hashes every launch, so it runs only where the ranges outnumber
# the launches (prune_pays): at tr250, 18,000 ranges beside 2.05M launches, it saved nothing.
NVTX_BUCKET = 16
NVTX_NEAR = """
SELECT * FROM r
WHERE r.start_ns >> {bucket} <> r.end_ns >> {bucket}
    OR (r.{key}, r.start_ns >> {bucket}) IN (SELECT DISTINCT (b.{key}, b.start_ns >> {bucket}) FROM running AS b)
"""
NVTX_PASS = """
WITH r AS ({keys}), running AS ({running}), near AS ({near}),
launching AS (
    SELECT
        r.src_row, r.{key}, r.end_ns,
        n.cum_kernels - n.kernels AS pre_kernels,
        coalesce(n.cum_kernel_ns, 0) - coalesce(n.kernel_ns, 0) AS pre_kernel_ns
    FROM near AS r
    ASOF JOIN running AS n ON n.{key} = r.{key} AND n.start_ns >= r.start_ns
    WHERE n.start_ns <= r.end_ns
)
SELECT l.src_row, e.cum_kernels - l.pre_kernels AS kernels, coalesce(e.cum_kernel_ns, 0) - l.pre_kernel_ns AS kernel_ns
FROM launching AS l
ASOF JOIN running AS e ON e.{key} = l.{key} AND l.end_ns >= e.start_ns
"""
NVTX_TEMP = ("_nsa_running", "_nsa_running_process", "_nsa_nvtx", "_nsa_nvtx_process", "_nsa_nvtx_keys")
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


def _nvtx_chunks(
    con: duckdb.DuckDBPyConnection, rid: int, key: str, chunk: int
) -> tuple[list[tuple[str, str]], int]:
    """Split the report's closed ranges that a pass works out (PASSES, by `key`:
    global_tid or pid) into parts of about `chunk` ranges, as (filter on `key`, filter on the
    rowid): whole keys grouped while they fit, a larger key cut at quantiles of its rowids.
    Returns the parts and how many ranges they hold."""
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
    return parts, sum(n for _, n in counts)


def _pass(con: duckdb.DuckDBPyConnection, rid: int, key: str, chunk: int) -> None:
    """Fill the temp table of PASSES[key] with (src_row, kernels, kernel_ns) of the report's
    closed ranges that launched any kernel, chunk by chunk (_nvtx_chunks)."""
    spec = PASSES[key]
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {spec.table} (src_row BIGINT, kernels BIGINT, kernel_ns BIGINT)"
    )
    within = f" AND {spec.ranges}" if spec.per_range else ""
    chunks, ranges = _nvtx_chunks(con, rid, key, chunk)
    if chunks and spec.build:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {spec.running} AS {spec.build}")
    prune = bool(chunks) and prune_pays(con, ranges, spec.running)
    for of_keys, of_rows in chunks:
        keys = (
            "SELECT rowid AS src_row, report_id, pid, global_tid, start_ns, end_ns FROM nvtx_ranges "
            f"WHERE report_id = {rid} AND end_ns IS NOT NULL AND {of_keys} AND {of_rows}{within}"
        )
        running = f"SELECT * FROM {spec.running} WHERE {of_keys}"
        con.execute(f"INSERT INTO {spec.table} {pass_sql(keys, running, key, prune)}")


def prune_pays(con: duckdb.DuckDBPyConnection, ranges: int, running: str) -> bool:
    """Does NVTX_NEAR's pruning pay in a pass over about `ranges` ranges (an upper bound will
    do) and the running totals of the temp table `running`? Only where the ranges outnumber the
    launches it hashes (a table's row count: no scan)."""
    return ranges > params.first_row(con.execute(f"SELECT count(*) FROM {running}"))[0]


def pass_sql(keys: str, running: str, key: str, prune: bool) -> str:
    """NVTX_PASS by `key` over the ranges `keys` and the running totals `running`, the ranges
    that cannot hold a launch dropped first when `prune` (NVTX_NEAR)."""
    near = NVTX_NEAR.format(key=key, bucket=NVTX_BUCKET) if prune else "SELECT * FROM r"
    return NVTX_PASS.format(keys=keys, running=running, key=key, near=near)


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
    try:
        con.execute(
            f"UPDATE nvtx_ranges SET {', '.join(f'{c} = 0' for c in KERNEL_COLS)} "
            f"WHERE {closed} AND ({' OR '.join(f'{c} IS NULL' for c in KERNEL_COLS)})"
        )
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _nsa_running AS {NVTX_RUNNING.format(rid=rid, calls=calls_of(rid))}"
        )
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
        _drop_temp(con)
    return int(total[0])


def _drop_temp(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the passes' TEMP tables (NVTX_TEMP)."""
    for table in NVTX_TEMP:
        try:
            con.execute(f"DROP TABLE IF EXISTS {table}")
        except duckdb.Error:  # the transaction failed: its ROLLBACK drops them
            break


def calls_of(report_id: int) -> str:
    """The report's CUDA API calls in the workspace, as NVTX_RUNNING reads them."""
    return (
        f"SELECT pid, global_tid, start_ns, correlation_id FROM cuda_api WHERE report_id = {int(report_id)}"
    )


# nvtx_totals: the nvtx_summary columns per domain and base name, in two aggregations. The first
# (NVTX_KEYS) goes over every range of `{ranges}` (src_row, the raw name columns `{keys}`, pid,
# global_tid, end_ns and duration_ns) with the kernels of the ranges that launched any
# (_nsa_nvtx by src_row), grouped by the raw name columns as they are (a domain id and a text,
# or a string id, per thread) and the range's thread: no name is looked up there. A range that
# launched nothing adds nothing; process-wide, a key counts its own thread's kernels until the
# process pass, when it runs, replaces them (see fill_nvtx_totals). The second (NVTX_FOLD)
# resolves the names, domains and base names of those few keys (16,782 for 5.03M ranges at
# x300) and folds them per domain and base name; the median and the mean come from the keys'
# lists of durations, so they are those of the ranges themselves.
NVTX_KEYS = """
SELECT
    {keys}, r.pid, r.global_tid,
    count(r.end_ns) AS ranges,
    count(*) - count(r.end_ns) AS open_ranges,
    sum(r.duration_ns) AS total_ns,
    min(r.duration_ns) AS min_ns,
    max(r.duration_ns) AS max_ns,
    list(r.duration_ns) FILTER (WHERE r.duration_ns IS NOT NULL) AS durations,
    sum(t.kernels) AS kernels,
    sum(t.kernel_ns) AS kernel_ns,
    sum(t.kernels) AS process_kernels,
    sum(t.kernel_ns) AS process_kernel_ns
FROM ({ranges}) AS r
LEFT JOIN _nsa_nvtx AS t ON t.src_row = r.src_row
GROUP BY {keys}, r.pid, r.global_tid
"""
# `{named}`: the rows of _nsa_nvtx_keys with their domain, name and base_name.
NVTX_FOLD = """
SELECT
    report_id, domain, name, names, ranges, open_ranges, total_ns, list_avg(durations) AS avg_ns,
    list_median(durations) AS median_ns, min_ns, max_ns, kernels, kernel_ns, process_kernels, process_kernel_ns
FROM (
    SELECT
        {rid} AS report_id,
        k.domain,
        coalesce(k.base_name, k.name) AS name,
        count(DISTINCT k.name) AS names,
        sum(k.ranges) AS ranges,
        sum(k.open_ranges) AS open_ranges,
        sum(k.total_ns) AS total_ns,
        flatten(list(k.durations)) AS durations,
        min(k.min_ns) AS min_ns,
        max(k.max_ns) AS max_ns,
        coalesce(sum(k.kernels), 0) AS kernels,
        coalesce(sum(k.kernel_ns), 0) AS kernel_ns,
        coalesce(sum(k.process_kernels), 0) AS process_kernels,
        coalesce(sum(k.process_kernel_ns), 0) AS process_kernel_ns
    FROM ({named}) AS k
    GROUP BY k.domain, coalesce(k.base_name, k.name)
)
"""
# The same in one aggregation of ranges whose names are resolved (`{ranges}`: domain, name,
# base_name, end_ns, duration_ns and the four kernel columns of each range of report `{rid}`):
# nvtx_ranges whose kernels are worked out already (Kineto traces, or an nsys report after the
# nvtx_kernels step), or joined to the passes' kernels (NVTX_RANGE_KERNELS).
NVTX_TOTALS_OF_RANGES = """
SELECT
    {rid} AS report_id, domain, coalesce(base_name, name), count(DISTINCT name), count(end_ns),
    count(*) - count(end_ns), sum(duration_ns), avg(duration_ns), median(duration_ns),
    min(duration_ns), max(duration_ns), coalesce(sum(kernels), 0), coalesce(sum(kernel_ns), 0),
    coalesce(sum(process_kernels), 0), coalesce(sum(process_kernel_ns), 0)
FROM ({ranges})
GROUP BY domain, coalesce(base_name, name)
"""
# `{ranges}` (src_row, domain, name, base_name, end_ns, duration_ns) with the kernels of the
# ranges that launched any, as NVTX_KEYS sums them.
NVTX_RANGE_KERNELS = """
SELECT
    r.domain, r.name, r.base_name, r.end_ns, r.duration_ns, t.kernels, t.kernel_ns,
    coalesce(p.kernels, t.kernels) AS process_kernels, coalesce(p.kernel_ns, t.kernel_ns) AS process_kernel_ns
FROM ({ranges}) AS r
LEFT JOIN _nsa_nvtx AS t ON t.src_row = r.src_row
LEFT JOIN _nsa_nvtx_process AS p ON p.src_row = r.src_row
"""
TOTALS_COLS = (
    "report_id", "domain", "name", "names", "ranges", "open_ranges", "total_ns", "avg_ns", "median_ns",
    "min_ns", "max_ns", "kernels", "kernel_ns", "process_kernels", "process_kernel_ns",
)  # fmt: skip


def sum_nvtx_totals(con: duckdb.DuckDBPyConnection, report_id: int) -> int:
    """Fill nvtx_totals of a report from its nvtx_ranges, kernels worked out; returns rows."""
    rid = int(report_id)
    ranges = f"SELECT * FROM nvtx_ranges WHERE report_id = {rid}"
    return _insert_totals(con, rid, NVTX_TOTALS_OF_RANGES.format(rid=rid, ranges=ranges))


def _insert_totals(con: duckdb.DuckDBPyConnection, rid: int, sql: str) -> int:
    """Replace the report's nvtx_totals rows by those of `sql` (TOTALS_COLS); returns rows."""
    con.execute(f"DELETE FROM nvtx_totals WHERE report_id = {rid}")
    row = con.execute(f"INSERT INTO nvtx_totals ({', '.join(TOTALS_COLS)}) {sql}").fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class NvtxSource:
    """Where fill_nvtx_totals reads a report's ranges. `ranges`: src_row, the raw name columns
    `keys`, pid, global_tid, end_ns and duration_ns (end_ns - start_ns) of each range; `named`:
    the rows of _nsa_nvtx_keys (one per distinct `keys` and thread, NVTX_KEYS) with their domain,
    name and base_name added; `spans`: src_row, pid, global_tid, start_ns, end_ns of each range
    (the same src_row). Each may read the export itself. `resolved`: `ranges` holds src_row,
    domain, name, base_name, end_ns and duration_ns (the workspace's ranges), so one aggregation
    by domain and base name (NVTX_TOTALS_OF_RANGES) replaces the keys and their fold, and
    `threads` gives pid and global_tid of every thread with a range. `size`: SQL of one number,
    at least the rows of `spans`, known without reading them (it decides prune_pays)."""

    ranges: str
    keys: tuple[str, ...]
    named: str
    spans: str
    size: str
    threads: str = ""
    resolved: bool = False


# The process pass: the ranges (`s`) of processes where a thread other than the range's launches.
LAUNCHERS = "SELECT pid, count(DISTINCT global_tid) AS threads, min(global_tid) AS only_tid FROM _nsa_running GROUP BY pid"
OTHERS = "l.threads > 1 OR l.only_tid IS DISTINCT FROM s.global_tid"
OTHER_LAUNCHERS = f"JOIN ({LAUNCHERS}) AS l ON l.pid = s.pid"


def fill_nvtx_totals(con: duckdb.DuckDBPyConnection, report_id: int, source: NvtxSource, calls: str) -> int:
    """Fill nvtx_totals of a report without writing its ranges anywhere (`source`); the
    kernels come from `calls` (the report's CUDA API calls: pid, global_tid, start_ns,
    correlation_id) and the workspace's kernel_rows, by the same running totals and ASOF
    passes as fill_nvtx_kernels (NVTX_PASS) but in one pass each, and summed per name rather
    than written back. `spans` is read once by the same-thread pass and `ranges` once by the
    keys (NVTX_KEYS), so a range costs one row of the pass's sort and one of the aggregation,
    nothing stored. The keys name the threads with a range: the process pass runs only when one
    of them can count differently process-wide (a thread of a launching process other than its
    one launching thread; a single-threaded launcher's ranges count the same both ways), on
    `ranges` once more, keyed by the raw name columns (a key's ranges are all of one thread, so
    all or none are in the pass, and a range that launched on its own thread launched
    process-wide too: the pass's sum per key replaces the key's own-thread one). A resolved
    source (the workspace's ranges, ranges_of) is summed by src_row instead. Returns the rows
    written."""
    rid = int(report_id)
    closed = f"SELECT * FROM ({source.spans}) AS s WHERE s.end_ns IS NOT NULL"
    same = f"{closed} AND s.global_tid IN (SELECT global_tid FROM _nsa_running)"
    size = int(params.first_row(con.execute(source.size))[0])
    try:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _nsa_running AS {NVTX_RUNNING.format(rid=rid, calls=calls)}"
        )
        _pass_table(con, rid, "_nsa_nvtx", same, size, "_nsa_running", "global_tid")
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _nsa_nvtx_process (src_row BIGINT, kernels BIGINT, kernel_ns BIGINT)"
        )
        if source.resolved:
            process = f"SELECT s.* FROM ({closed}) AS s {OTHER_LAUNCHERS} WHERE {OTHERS}"
            if _other_launchers(con, source.threads):
                _pass_table(con, rid, "_nsa_nvtx_process", process, size, "_nsa_running_process", "pid")
            ranges = NVTX_RANGE_KERNELS.format(ranges=source.ranges)
            return _insert_totals(con, rid, NVTX_TOTALS_OF_RANGES.format(rid=rid, ranges=ranges))
        keys = ", ".join(source.keys)
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _nsa_nvtx_keys AS {NVTX_KEYS.format(keys=keys, ranges=source.ranges)}"
        )
        if _other_launchers(con, "SELECT pid, global_tid FROM _nsa_nvtx_keys"):
            process = (
                f"SELECT {_key_of(source.keys, 's')} AS src_row, s.pid, s.global_tid, "
                f"s.end_ns - s.duration_ns AS start_ns, s.end_ns FROM ({source.ranges}) AS s {OTHER_LAUNCHERS} "
                f"WHERE s.end_ns IS NOT NULL AND ({OTHERS})"
            )
            _pass_table(
                con, rid, "_nsa_nvtx_process", process, size, "_nsa_running_process", "pid", summed=True
            )
            con.execute(
                "UPDATE _nsa_nvtx_keys AS k SET process_kernels = p.kernels, process_kernel_ns = p.kernel_ns "
                f"FROM _nsa_nvtx_process AS p WHERE p.src_row IS NOT DISTINCT FROM {_key_of(source.keys, 'k')}"
            )
        return _insert_totals(con, rid, NVTX_FOLD.format(rid=rid, named=source.named))
    finally:
        _drop_temp(con)


def _other_launchers(con: duckdb.DuckDBPyConnection, threads: str) -> bool:
    """Does `threads` (pid, global_tid) hold one whose ranges the process pass can change? If
    so, make that pass's running totals (_nsa_running_process)."""
    other = params.first_row(
        con.execute(f"SELECT count(*) FROM ({threads}) AS s {OTHER_LAUNCHERS} WHERE {OTHERS}")
    )[0]
    if other:
        con.execute(f"CREATE OR REPLACE TEMP TABLE _nsa_running_process AS {NVTX_PROCESS}")
    return bool(other)


def _key_of(keys: tuple[str, ...], alias: str) -> str:
    """The raw name columns `keys` of `alias` as one value (a struct)."""
    return "{" + ", ".join(f"'k{i}': {alias}.{c}" for i, c in enumerate(keys)) + "}"


def _pass_table(
    con: duckdb.DuckDBPyConnection,
    rid: int,
    table: str,
    spans: str,
    size: int,
    running: str,
    key: str,
    summed: bool = False,
) -> None:
    """Make `table` (src_row, kernels, kernel_ns) of the ranges of `spans` (src_row, pid,
    global_tid, start_ns, end_ns of closed ranges; at most `size`) that launched any kernel, by
    NVTX_PASS on `key` over the temp table `running`; `summed`: several ranges share a src_row,
    summed."""
    keys = f"SELECT src_row, {rid} AS report_id, pid, global_tid, start_ns, end_ns FROM ({spans})"
    sql = pass_sql(keys, f"SELECT * FROM {running}", key, prune_pays(con, size, running))
    if summed:
        sql = f"SELECT src_row, sum(kernels) AS kernels, sum(kernel_ns) AS kernel_ns FROM ({sql}) GROUP BY src_row"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {sql}")


def ranges_of(report_id: int) -> NvtxSource:
    """fill_nvtx_totals' source: the report's nvtx_ranges, their names as they are."""
    of = f"FROM nvtx_ranges WHERE report_id = {int(report_id)}"
    return NvtxSource(
        ranges=f"SELECT rowid AS src_row, domain, name, base_name, end_ns, duration_ns {of}",
        keys=("domain", "name", "base_name"),
        named="SELECT * FROM _nsa_nvtx_keys",
        spans=f"SELECT rowid AS src_row, pid, global_tid, start_ns, end_ns {of}",
        size=f"SELECT count(*) {of}",
        threads=f"SELECT DISTINCT pid, global_tid {of}",
        resolved=True,
    )


def fill_nvtx_totals_of_ranges(con: duckdb.DuckDBPyConnection, report_id: int) -> int:
    """fill_nvtx_totals from the report's nvtx_ranges and cuda_api in the workspace, whether or
    not the ranges' kernels are worked out."""
    rid = int(report_id)
    return fill_nvtx_totals(con, rid, ranges_of(rid), calls_of(rid))
