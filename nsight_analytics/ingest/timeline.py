"""The GPU timeline (`gpu_timeline`): every kernel, memcpy, memset and CUDA graph execution of a
report in one table, each row with the running maxima of the ends of the activities before it on
its device, worked out once on first use and stored.

Those maxima cost one sort of the whole timeline (most of what `utilization`, `gaps`,
`sync_beyond_gpu` and `small_kernel_storms` spent); with them stored, an idle gap is a filter, a
union of intervals a plain sum (`nsa_union_ns`) and the busy time up to any instant one ASOF join.

Worked out from the workspace's own rows (no source file), for every report whose GPU activity
(kernel_rows, memcpy, memset, graph_executions) is not the one the stored timeline was made of:
its rows are counted and their start and end times summed per report on both sides, so a report
ingested, replaced or written by hand (tests, plugins) is worked out again on its next use,
whatever reader wrote it. A read-only connection (or a Parquet dataset) works it out into a TEMP
table for itself.

Each row's launch calls (api_calls, api_start_ns, api_end_ns, api_global_tid: the cuda_api rows
with its report, pid and correlation id) are worked out only for a query that reads them (its
contract reads `gpu_launches`, schema.COMPUTED): grouping the calls by key and joining them costs
a fraction of the sorts again, and the rules never read them. Until then api_calls is NULL; a
report whose rows lack them (an older nsa's timeline too) has them added when they are read and
its CUDA API calls are in the workspace: an UPDATE of those four columns from the grouped calls,
no second sort (a report whose GPU rows changed is worked out again whole, with them).

The run queries' communication kernels are flagged (comm: the kernels comm_ops holds, matched
only on the kernels of communication names) and compute's running maximum (the other kernels and
graph executions) kept beside the other maxima, likewise only for a query that reads them (its
contract reads `gpu_comm`): in the build's sort when that query works the timeline out, else
added to the stored rows (an UPDATE of those two columns, one window over the stored order).
Until then a report with comm_ops has them NULL; one without has them as they are (no flag, the
kernels' and graphs' maximum). The flagged rows' count and start times are compared with those
of the kernels comm_ops matches, so comm_ops rows added later are noticed.
Communication's own running maximum is left to the run queries, over its kernels alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import nullcontext

import duckdb

from .. import params
from ..timing import timed
from .pipeline import deferred_for, memory_cap, raised_limit, rollback

log = logging.getLogger(__name__)

TABLE = "gpu_timeline"

# The activities as the query macro nsa_gpu_activity lists them (rows without a start, or ending
# before they start, cannot be placed on a timeline), with its labels but for the kernels, which
# keep their name id (a million kernels share a few dozen names: no strings in their rows).
# comm: a kernel that comm_ops holds (same report, GPU, stream and start, as the run queries
# match them); `{kernels}` lists the kernels with that flag (_KERNELS), `{flag}` the others'
# (`, false`; none where the flag is not worked out: the build's sort carries no column for it).
_ACTIVITY = """
{kernels}
UNION ALL
SELECT report_id, device_id, 'memcpy', start_ns, end_ns, duration_ns, pid, stream_id, correlation_id, NULL,
       'memcpy ' || coalesce(direction, 'Unknown'){flag}
FROM memcpy WHERE start_ns IS NOT NULL AND end_ns >= start_ns {only}
UNION ALL
SELECT report_id, device_id, 'memset', start_ns, end_ns, duration_ns, pid, stream_id, correlation_id, NULL,
       'memset'{flag}
FROM memset WHERE start_ns IS NOT NULL AND end_ns >= start_ns {only}
UNION ALL
SELECT report_id, device_id, 'graph', start_ns, end_ns, duration_ns, pid, stream_id, correlation_id, NULL,
       'CUDA graph ' || coalesce(CAST(graph_id AS VARCHAR), '?'){flag}
FROM graph_executions WHERE start_ns IS NOT NULL AND end_ns >= start_ns {only}
"""
# The kernels of `{where}` with their flag `{comm}`: only the kernels of the streams that carry
# communication (a few of a GPU's streams) are matched against comm_ops; the others are false.
_KERNELS = """
SELECT report_id, device_id, 'kernel' AS kind, start_ns, end_ns, duration_ns, pid, stream_id,
       correlation_id, name_id, CAST(NULL AS VARCHAR) AS label{comm}
FROM kernel_rows AS k WHERE start_ns IS NOT NULL AND end_ns >= start_ns {only} AND {where}
"""
# Compute's running maximum (the kernels but communication, and graph executions) in the same
# sort, for reports with communication kernels; for the others it is the kernels' and graphs'
# (NULL with the flag in reports with comm_ops where they are not worked out).
_COMPUTE_END = "CASE WHEN kind = 'graph' OR (kind = 'kernel' AND NOT comm) THEN end_ns END"
_COMPUTE = f"max({_COMPUTE_END}) OVER prev AS prev_compute_end_ns,"
_NO_COMM_COMPUTE = "greatest(prev_kernel_end_ns, prev_graph_end_ns)"
_COMM = """EXISTS (
    SELECT 1 FROM comm_ops AS c
    WHERE c.report_id = k.report_id AND c.device_id = k.device_id AND c.start_ns = k.start_ns
      AND c.stream_id IS NOT DISTINCT FROM k.stream_id
)"""

# One sort per device in (start_ns, end_ns) order for the running maxima (ROWS ... 1 PRECEDING:
# the rows before this one) and the last row of each start time; a second ordered pass for the
# running union. Rows tied on both start and end are in no particular order: every column a
# query reads gives the same answer whichever comes first.
_BUILD = """
INSERT INTO gpu_timeline BY NAME
WITH a AS ({activity}),
m AS (
    SELECT
        *,
        max(CASE WHEN kind = 'kernel' THEN end_ns END) OVER prev AS prev_kernel_end_ns,
        max(CASE WHEN kind = 'graph' THEN end_ns END) OVER prev AS prev_graph_end_ns,
        max(CASE WHEN kind IN ('memcpy', 'memset') THEN end_ns END) OVER prev AS prev_copy_end_ns,
        {compute}
        lead(start_ns) OVER ord IS DISTINCT FROM start_ns AS last_at_start,
        row_number() OVER ord AS seq
    FROM a
    WINDOW
        ord AS (PARTITION BY report_id, device_id ORDER BY start_ns, end_ns),
        prev AS (ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
p AS (SELECT *, greatest(prev_kernel_end_ns, prev_graph_end_ns, prev_copy_end_ns) AS prev_end_ns FROM m),
t AS (
    SELECT
        report_id, device_id, kind, start_ns, end_ns, duration_ns, pid, stream_id, correlation_id, name_id, label,
        prev_end_ns, prev_kernel_end_ns, prev_graph_end_ns, prev_copy_end_ns, {comm} AS comm,
        {compute_end} AS prev_compute_end_ns,
        CAST(sum(greatest(0, end_ns - greatest(start_ns, coalesce(prev_end_ns, start_ns)))) OVER (
            PARTITION BY report_id, device_id ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING
        ) AS BIGINT) AS busy_through_ns,
        greatest(end_ns, prev_end_ns) AS end_through_ns,
        last_at_start, seq
    FROM p
)
{select}
"""

# The rows as they are, or (LAUNCHES) with their launch calls: those of the same report, pid and
# correlation id, grouped by key after the sorts (which carry none of it), in a hash table probed
# by the activities. Only the calls of the activities' keys are grouped (_KEYS_OF: most
# calls launch no GPU work; DDP x85: 1.4M of 5.67M calls, each of a key of its own).
# Reports whose calls are still in their export get none (api_calls NULL).
_PLAIN = "SELECT * FROM t"
# The launch calls of each key (report, pid, correlation id): `{keys}` may narrow the calls further.
_CALLS = """
    SELECT report_id, pid, correlation_id, count(*) AS api_calls, min(start_ns) AS api_start_ns,
           max(end_ns) AS api_end_ns, arg_min(global_tid, start_ns) AS api_global_tid
    FROM cuda_api
    WHERE correlation_id IS NOT NULL {only} {keys}
    GROUP BY ALL
"""
# `keys`: the calls of the keys of `{rows}` (the activities being sorted, or the stored timeline)
_KEYS_OF = "AND (report_id, pid, correlation_id) IN (SELECT report_id, pid, correlation_id FROM {rows})"
_LINKED = """,
calls AS ({calls})
SELECT
    t.*,
    CASE WHEN {linked} THEN coalesce(c.api_calls, 0) END AS api_calls,
    c.api_start_ns, c.api_end_ns, c.api_global_tid
FROM t
LEFT JOIN calls AS c
    ON c.report_id = t.report_id AND c.pid = t.pid AND c.correlation_id = t.correlation_id
"""

# Per report: how many activities, and the sum of their start and end times, in the GPU tables
# and in the stored timeline. A report whose two sides differ is (re)worked out.
_SIGNATURE = """
SELECT report_id, sum(n) AS n, sum(t) AS t FROM (
    SELECT report_id, count(*) AS n, sum(start_ns) + sum(end_ns) AS t
    FROM kernel_rows WHERE start_ns IS NOT NULL AND end_ns >= start_ns {only} GROUP BY report_id
    UNION ALL
    SELECT report_id, count(*), sum(start_ns) + sum(end_ns)
    FROM memcpy WHERE start_ns IS NOT NULL AND end_ns >= start_ns {only} GROUP BY report_id
    UNION ALL
    SELECT report_id, count(*), sum(start_ns) + sum(end_ns)
    FROM memset WHERE start_ns IS NOT NULL AND end_ns >= start_ns {only} GROUP BY report_id
    UNION ALL
    SELECT report_id, count(*), sum(start_ns) + sum(end_ns)
    FROM graph_executions WHERE start_ns IS NOT NULL AND end_ns >= start_ns {only} GROUP BY report_id
)
GROUP BY report_id
"""
_STALE = """
WITH src AS ({source}),
have AS (
    SELECT report_id, count(*) AS n, sum(start_ns) + sum(end_ns) AS t, count(*) - count(api_calls) AS unlinked,
           count(*) - count(seq) > 0 AS unnumbered, {flagged}
    FROM gpu_timeline WHERE true {only} GROUP BY report_id
),
d AS (
    SELECT report_id, src.n IS DISTINCT FROM have.n OR src.t IS DISTINCT FROM have.t OR have.unnumbered AS changed,
           have.unlinked > 0 AND NOT {pending} AS link, {unflagged} AS flag
    FROM src FULL JOIN have USING (report_id) {comm}
)
SELECT report_id, changed, coalesce(link, false), coalesce(flag, false) FROM d
WHERE changed OR link OR flag
ORDER BY report_id
"""
# With the comm flag (COMM): a report's rows lack it, or its flagged kernels are not those that
# comm_ops now holds (their count and start times): comm_ops rows added or replaced after the flag
# was worked out. First against comm_ops' own rows (_OPS: one op per communication kernel, as
# ingest.comm writes them; a few percent of the kernels), then, for the reports where those
# differ, against the kernels comm_ops matches (_MATCHED: rows written by hand may hold ops of no
# kernel).
_FLAGGED = """count(*) - count(comm) AS unflagged, count(*) FILTER (WHERE comm) AS n_comm,
           sum(start_ns) FILTER (WHERE comm) AS t_comm"""
_UNFLAGGED = """have.unflagged > 0 OR coalesce(have.n_comm, 0) IS DISTINCT FROM coalesce(ops.n, 0)
               OR coalesce(have.t_comm, 0) IS DISTINCT FROM coalesce(ops.t, 0)"""
_OPS = """LEFT JOIN (
        SELECT report_id, count(*) AS n, sum(start_ns) AS t FROM comm_ops
        WHERE start_ns IS NOT NULL AND end_ns >= start_ns {only} GROUP BY report_id
    ) AS ops USING (report_id)"""
_MATCHED = """LEFT JOIN (
        SELECT k.report_id, count(*) AS n, sum(k.start_ns) AS t
        FROM (SELECT report_id, device_id, stream_id, start_ns FROM gpu_timeline WHERE kind = 'kernel' {only}) AS k
        SEMI JOIN (SELECT report_id, device_id, stream_id, start_ns FROM comm_ops WHERE true {only}) AS c
            ON c.report_id = k.report_id AND c.device_id = k.device_id AND c.start_ns = k.start_ns
           AND c.stream_id IS NOT DISTINCT FROM k.stream_id
        GROUP BY k.report_id
    ) AS ops USING (report_id)"""

# The launch calls added to the stored rows of reports whose GPU rows have not changed: every row
# unlinked (api_calls 0), then those with calls of their key linked (one group per key: a row
# matches at most one). Only the calls of keys in the timeline are grouped: most calls launch
# nothing (synchronisation, queries, allocations), and the UPDATE costs by the groups it joins.
_UNLINK = """
UPDATE gpu_timeline SET api_calls = 0, api_start_ns = NULL, api_end_ns = NULL, api_global_tid = NULL
WHERE true {only}
"""
_LINK = """
UPDATE gpu_timeline AS t
SET api_calls = c.api_calls, api_start_ns = c.api_start_ns, api_end_ns = c.api_end_ns, api_global_tid = c.api_global_tid
FROM ({calls}) AS c
WHERE c.report_id = t.report_id AND c.pid = t.pid AND c.correlation_id = t.correlation_id
"""
# The comm flag and compute's running maximum added to the stored rows of reports whose GPU rows
# have not changed: one window over each device's rows in their stored order (seq), the flag as
# the build works it out (`{comm}`, `{streams}`: _comm_streams).
_FLAG = """
UPDATE gpu_timeline AS t SET comm = f.comm, prev_compute_end_ns = f.prev_compute_end_ns
FROM (
    SELECT report_id, device_id, seq, comm,
           max({compute_end}) OVER (
               PARTITION BY report_id, device_id ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
           ) AS prev_compute_end_ns
    FROM (
        SELECT report_id, device_id, seq, kind, end_ns, {comm} AS comm
        FROM gpu_timeline AS k WHERE kind = 'kernel' AND {streams} {only}
        UNION ALL
        SELECT report_id, device_id, seq, kind, end_ns, false
        FROM gpu_timeline WHERE NOT (kind = 'kernel' AND coalesce({streams}, false)) {only}
    )
) AS f
WHERE f.report_id = t.report_id AND f.device_id IS NOT DISTINCT FROM t.device_id AND f.seq = t.seq
"""
_NO_FLAG = """
UPDATE gpu_timeline SET comm = false, prev_compute_end_ns = greatest(prev_kernel_end_ns, prev_graph_end_ns)
WHERE true {only}
"""


def _only(report_ids: list[int] | None) -> str:
    if report_ids is None:
        return ""
    return f"AND report_id IN ({', '.join(str(int(r)) for r in report_ids) or 'NULL'})"


# The GPU tables the timeline is worked out from.
_SOURCES = ("kernel_rows", "memcpy", "memset", "graph_executions")
# Each activity's launch calls (schema.COMPUTED): worked out only for what reads them, from the
# CUDA API calls (loaded first by api.materialise where the export still has them).
LAUNCHES = "gpu_launches"
LAUNCH_READS = ("cuda_api",)
# The communication flag and compute's running maximum (schema.COMPUTED), for what reads them.
COMM = "gpu_comm"

# A read-only connection remembers the reports it found up to date (a DuckDB variable: one per
# connection, gone with it), so that a query checks once, not in the reader, in materialise and
# again in queries.run. Sound only while nothing can change the rows: a read-only file locks
# writers out (other processes; this process cannot open it writable beside it) and the GPU
# tables are the stored ones (no TEMP copy of them, which this connection could write). With
# launch calls, a second variable: the reports whose rows have them (not those whose calls are
# still in the export, which this connection may load into TEMP tables); with the comm flag, a
# third.
_FRESH = "nsa_gpu_timeline_fresh"
_FRESH_LINKED = "nsa_gpu_timeline_linked"
_FRESH_FLAGGED = "nsa_gpu_timeline_flagged"
_ALL = "*"


def _frozen(con: duckdb.DuckDBPyConnection, variable: str = _FRESH) -> tuple[bool, str]:
    """(can the GPU rows not change while this connection is open, what it found up to date in
    `variable`: _FRESH, or _FRESH_LINKED / _FRESH_FLAGGED with the launch calls / the comm flag)."""
    read_only, temp, seen = params.first_row(
        con.execute(
            "SELECT current_setting('access_mode') = 'read_only', "
            f"(SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name IN {_SOURCES}), "
            f"coalesce(CAST(getvariable('{variable}') AS VARCHAR), '')"
        )
    )
    return bool(read_only) and not temp, str(seen)


def _known_fresh(seen: str, ids: list[int] | None) -> bool:
    if seen == _ALL:
        return True
    return ids is not None and bool(seen) and set(ids) <= {int(r) for r in seen.split(",")}


def _remember(
    con: duckdb.DuckDBPyConnection, seen: str, ids: list[int] | None, variable: str = _FRESH
) -> None:
    if ids is None:
        value = _ALL
    else:
        value = ",".join(str(r) for r in sorted(set(ids) | {int(r) for r in seen.split(",") if r}))
    con.execute(f"SET VARIABLE {variable} = '{value}'")  # digits and commas only


def stale(
    con: duckdb.DuckDBPyConnection,
    report_ids: Iterable[int] | None = None,
    launches: bool = False,
    comm: bool = False,
) -> list[int]:
    """The reports (of `report_ids`, default all) whose stored timeline is missing or out of date;
    with `launches`, also those whose rows lack their launch calls (LAUNCHES) though the calls are
    in the workspace; with `comm`, those whose rows lack the comm flag or whose flag is not
    comm_ops' (COMM)."""
    return sorted(_stale(con, report_ids, launches, comm))


def _stale(
    con: duckdb.DuckDBPyConnection, report_ids: Iterable[int] | None, launches: bool, comm: bool = False
) -> dict[int, tuple[bool, bool, bool]]:
    """stale's reports, each with (whether its GPU rows changed: worked out again whole, whether
    its launch calls are to be added, whether its comm flag is)."""
    ids = None if report_ids is None else [int(r) for r in report_ids]
    wanted = [_FRESH_LINKED if launches else _FRESH] + ([_FRESH_FLAGGED] if comm else [])
    states = [_frozen(con, v) for v in wanted]
    frozen = states[0][0]
    if frozen and all(_known_fresh(seen, ids) for _, seen in states):
        return {}
    pending = sorted(_reports_pending(con)) if launches else None
    todo = _signatures(con, ids, pending, _OPS if comm else None)
    recheck = sorted(r for r, (changed, _, flag) in todo.items() if flag and not changed)
    if recheck:  # comm_ops' rows are not the flagged kernels: are the kernels they match?
        exact = _signatures(con, recheck, pending, _MATCHED)
        todo.update({r: exact.get(r, (False, todo[r][1], False)) for r in recheck})
        todo = {r: parts for r, parts in todo.items() if any(parts)}
    if frozen and not todo:
        if not launches or _all_linked(con, ids):
            _remember(con, states[0][1], ids, wanted[0])
        if comm:
            _remember(con, states[-1][1], ids, _FRESH_FLAGGED)
    return todo


def _signatures(
    con: duckdb.DuckDBPyConnection, ids: list[int] | None, pending: list[int] | None, ops: str | None
) -> dict[int, tuple[bool, bool, bool]]:
    """_STALE of the reports `ids` (None: all), with the comm flag checked against `ops` (_OPS or
    _MATCHED; None: not checked)."""
    only = _only(ids)
    sql = _STALE.format(
        source=_SIGNATURE.format(only=only),
        only=only,
        pending=_in("report_id", pending),
        flagged=_FLAGGED if ops else "",
        unflagged=_UNFLAGGED if ops else "false",
        comm=ops.format(only=only) if ops else "",
    )
    return {
        int(r): (bool(changed), bool(link), bool(flag))
        for r, changed, link, flag in con.execute(sql).fetchall()
    }


def _all_linked(con: duckdb.DuckDBPyConnection, ids: list[int] | None) -> bool:
    """Have the up-to-date timelines of the reports `ids` (None: all) their launch calls, for
    good: none of them has its calls still in an export (which this connection may load)?"""
    pending = _reports_pending(con)
    return not pending or (ids is not None and not set(ids) & pending)


def _reports_pending(con: duckdb.DuckDBPyConnection) -> set[int]:
    """The reports whose CUDA API calls are still in their export (a deferred step): their
    timeline is worked out without launch calls (api_calls NULL), which are added once the calls
    are loaded."""
    return {int(rid) for rid, _, _ in deferred_for(con, {"cuda_api"})}


def _in(column: str, ids: list[int] | None) -> str:
    """SQL: is `column` one of `ids` (None: every report)?"""
    if ids is None:
        return "true"
    return f"{column} IN ({', '.join(map(str, ids))})" if ids else "false"


def _stored_table(con: duckdb.DuckDBPyConnection) -> bool:
    """Does this connection write gpu_timeline where it reads it: a writable workspace's stored
    table, or a TEMP copy made earlier (not a dataset's view, nor a read-only file)?"""
    kinds = {
        (bool(temp), str(kind))
        for temp, kind in params.execute(
            con,
            "SELECT temporary, 'table' FROM duckdb_tables() WHERE table_name = $t "
            "UNION ALL SELECT temporary, 'view' FROM duckdb_views() WHERE view_name = $t",
            {"t": TABLE},
        ).fetchall()
    }
    if (True, "table") in kinds:
        return True
    read_only = params.first_row(con.execute("SELECT current_setting('access_mode') = 'read_only'"))[0]
    return (False, "table") in kinds and not read_only


def ensure(
    con: duckdb.DuckDBPyConnection,
    report_ids: Iterable[int] | None = None,
    launches: bool = False,
    comm: bool = False,
) -> int:
    """Work out the timeline of every report (of `report_ids`, default all) whose stored one is
    missing or out of date, with `launches` its rows' launch calls too (LAUNCHES), with `comm`
    its comm flag and compute's running maximum (COMM); returns how many reports were worked out
    (or had their launch calls or flag added)."""
    ids = None if report_ids is None else [int(r) for r in report_ids]
    todo = _stale(con, ids, launches, comm)
    if not todo:
        return 0
    if not _stored_table(con):  # read-only file or dataset: this connection's own copy
        stored = params.first_row(con.execute("SELECT current_database()"))[0]
        cols = "* EXCLUDE (rowid)" if _has_rowid(con, stored) else "*"
        con.execute(f'CREATE TEMP TABLE {TABLE} AS SELECT {cols} FROM "{stored}".main.{TABLE}')
    which = ", ".join(str(r) for r in sorted(todo))
    done = f"report{'s' if len(todo) > 1 else ''} {which}: worked out gpu_timeline"
    if not any(changed for changed, _, _ in todo.values()):
        done += "'s " + " and ".join(
            what
            for what, wanted in (("launch calls", 1), ("comm flag", 2))
            if any(parts[wanted] for parts in todo.values())
        )
    # under the inputs' size, as the deferred steps: past it DuckDB spills its sort to disk
    with memory_cap(con, todo) as uncapped:
        try:
            with timed(log, done):
                own = _build(con, todo, launches, comm)
        except duckdb.OutOfMemoryException:
            # DuckDB spills most of the build past the cap, but at its edge an allocation can
            # still fail (seen once in eight launch-call builds of a 596 MB export): the build is
            # rolled back, so it runs once more under the limit the cap lowered (inside another
            # cap, `nsa report`'s, the one that cap lowered) rather than fail the query
            if params.in_transaction(con):  # the caller's, aborted by the failure
                raise
            log.info("gpu_timeline: out of memory under the inputs' size; worked out again without that cap")
            with raised_limit(con, uncapped) if uncapped else nullcontext(), timed(log, done):
                own = _build(con, todo, launches, comm)
    frozen, seen = _frozen(con)
    if frozen and own:  # this connection's TEMP copy, now up to date
        _remember(con, seen, ids)
        if launches and _all_linked(con, ids):
            _remember(con, _frozen(con, _FRESH_LINKED)[1], ids, _FRESH_LINKED)
        if comm:
            _remember(con, _frozen(con, _FRESH_FLAGGED)[1], ids, _FRESH_FLAGGED)
    return len(todo)


def _build(
    con: duckdb.DuckDBPyConnection,
    todo: dict[int, tuple[bool, bool, bool]],
    launches: bool,
    comm: bool = False,
) -> bool:
    """Replace the timeline rows of the reports `todo` whose GPU rows changed and, with
    `launches`, add the launch calls to the rows of the others that lack them, with `comm` their
    comm flag, in a transaction of its own when the caller has none (returns whether it had one;
    a failure rolls it back)."""
    changed = sorted(r for r, (whole, _, _) in todo.items() if whole)
    linked = sorted(r for r, (whole, link, _) in todo.items() if link and not whole) if launches else []
    flagged = sorted(r for r, (whole, _, flag) in todo.items() if flag and not whole) if comm else []
    own = not params.in_transaction(con)  # else the caller's transaction: its commit keeps the rows
    if own:
        con.execute("BEGIN TRANSACTION")
    try:
        if changed:
            only = _only(changed)
            con.execute(f"DELETE FROM {TABLE} WHERE true {only}")
            if launches:
                pending = sorted(_reports_pending(con))
                calls = _CALLS.format(only=only, keys=_KEYS_OF.format(rows="a"))
                select = _LINKED.format(calls=calls, linked=f"NOT {_in('t.report_id', pending)}")
            else:
                select = _PLAIN
            if comm:
                streams = _comm_streams(con, only)
                activity = _activity(streams, only)
                flag, compute_end = "comm", "prev_compute_end_ns" if streams else _NO_COMM_COMPUTE
            else:  # NULL in the reports with comm_ops, worked out on a run query's first use
                unflagged = _in("report_id", _comm_reports(con, only))
                streams = None
                activity = _ACTIVITY.format(
                    kernels=_KERNELS.format(comm="", only=only, where="true"), only=only, flag=""
                )
                flag = f"CASE WHEN {unflagged} THEN NULL ELSE false END"
                compute_end = f"CASE WHEN {unflagged} THEN NULL ELSE {_NO_COMM_COMPUTE} END"
            con.execute(
                _BUILD.format(
                    activity=activity,
                    select=select,
                    compute=_COMPUTE if streams else "",
                    compute_end=compute_end,
                    comm=flag,
                )
            )
        if linked:  # stale only for want of their launch calls, which are in the workspace
            only = _only(linked)
            con.execute(_UNLINK.format(only=only))
            con.execute(
                _LINK.format(
                    calls=_CALLS.format(only=only, keys=_KEYS_OF.format(rows=f"{TABLE} WHERE true {only}"))
                )
            )
        if flagged:  # stale only for want of their comm flag
            only = _only(flagged)
            streams = _comm_streams(con, only)
            con.execute(
                _NO_FLAG.format(only=only)
                if streams is None
                else _FLAG.format(streams=streams, comm=_COMM, compute_end=_COMPUTE_END, only=only)
            )
        if own:
            con.execute("COMMIT")
    except BaseException:
        if own:
            rollback(con)  # a failed COMMIT (full disk) has ended it: its error is the one to tell
        raise
    return own


def _comm_reports(con: duckdb.DuckDBPyConnection, only: str) -> list[int]:
    """The reports of `only` with comm_ops rows: their flag is left NULL by a build for what does
    not read it."""
    return [
        int(r)
        for (r,) in con.execute(f"SELECT DISTINCT report_id FROM comm_ops WHERE true {only}").fetchall()
    ]


def _comm_streams(con: duckdb.DuckDBPyConnection, only: str) -> str | None:
    """SQL: can a kernel of the reports `only` be one comm_ops holds? None where they have none.
    comm_ops lists the kernels of communication names (ingest.comm): a kernel of another name is
    never matched against it, unless some op's name is not a kernel name of its report (rows
    written by hand): then every kernel on a stream that carries communication is."""
    ids = {r for (r,) in con.execute(f"SELECT DISTINCT stream_id FROM comm_ops WHERE true {only}").fetchall()}
    if not ids:
        return None
    names = con.execute(
        f"""SELECT DISTINCT n.report_id, n.name_id, c.name IS NULL OR n.name_id IS NULL
        FROM (SELECT DISTINCT report_id, name FROM comm_ops WHERE true {only}) AS c
        LEFT JOIN kernel_names AS n ON n.report_id = c.report_id AND coalesce(n.name, n.short_name) = c.name"""
    ).fetchall()
    if names and not any(unnamed for _, _, unnamed in names):
        keys = ", ".join(str(int(r) * 2**32 + int(n)) for r, n, _ in names)
        return f"(report_id * {2**32} + name_id IN ({keys}))"
    listed = ", ".join(str(int(i)) for i in sorted(i for i in ids if i is not None))
    test = f"stream_id IN ({listed})" if listed else "false"
    return f"(stream_id IS NULL OR {test})" if None in ids else f"({test})"


def _activity(streams: str | None, only: str) -> str:
    """_ACTIVITY of the reports `only`, their kernels flagged comm or not (`streams`: those that
    carry communication, _comm_streams)."""
    if streams is None:
        kernels = _KERNELS.format(comm=", false AS comm", only=only, where="true")
    else:
        kernels = (
            _KERNELS.format(comm=f", {_COMM} AS comm", only=only, where=streams)
            + "UNION ALL"
            + _KERNELS.format(comm=", false AS comm", only=only, where=f"NOT coalesce({streams}, false)")
        )
    return _ACTIVITY.format(kernels=kernels, only=only, flag=", false")


def _has_rowid(con: duckdb.DuckDBPyConnection, database: str) -> bool:
    """A dataset's views carry a `rowid` column of their own (dataset.ROWID)."""
    return bool(
        params.execute(
            con,
            "SELECT 1 FROM duckdb_columns() WHERE database_name = $d AND table_name = $t AND column_name = 'rowid'",
            {"d": database, "t": TABLE},
        ).fetchall()
    )
