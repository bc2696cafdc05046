"""The timeline of the report page: one lane per device and stream (kernels, memsets, graph
executions), per device and copy direction (memcpy), per host thread (NVTX), with the idle gaps,
the steps and the findings laid over it.

Events are stored column-wise and delta-encoded (`s`: start minus the previous start, `d`:
duration, `n`: index into `names`, `a`: index into `apis`, the launch call), about 25 bytes of
JSON an event. Above `max_events` the page stays bounded by level of detail: every lane keeps
its longest events exactly (its share of the budget) and adds `bins`, the count and summed
duration of all its events per 1/BINS of the span (a pixel column of the opened page), which the
page draws where exact events are missing. Both are worked out in SQL: only the kept events and
the bins reach Python, so a page of a million kernels costs what its budget does.

Times in the data are ns from the first GPU activity (`t0`, on the report's clock: ns since the
capture started, as the canonical tables and the findings give them); the page adds `t0` back to
every time it shows.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

import duckdb

from .. import params, queries
from ..errors import QueryError

log = logging.getLogger(__name__)

DEFAULT_MAX_EVENTS = 100_000
NVTX_MAX = 100_000
BINS = 2048
MAX_GAPS = 2000
GAP_ROWS = 200_000  # the most idle gaps matched to host calls for one page
PHASE_GAPS = 50
MAX_STEPS = 5000
# What the SQL below reads: the kernel rows without their launch configuration (the view
# `kernels` would wait for it, a deferred step the page never draws)
READS = {
    "kernel_rows",
    "kernel_names",
    "memcpy",
    "memset",
    "graph_executions",
    "cuda_api",
    "nvtx_ranges",
    "steps",
}

_ACTIVITY = """
    WITH act AS (
        SELECT NULL::INTEGER AS rank, report_id, device_id, 0 AS kind, stream_id::VARCHAR AS lane_key, start_ns,
               duration_ns, NULL::VARCHAR AS label, name_id, NULL::BIGINT AS bytes, pid, correlation_id
        FROM kernel_rows WHERE report_id = $rid
        UNION ALL
        SELECT NULL, report_id, device_id, 1, stream_id::VARCHAR, start_ns, duration_ns, 'memset', NULL, bytes, pid,
               correlation_id
        FROM memset WHERE report_id = $rid
        UNION ALL
        SELECT NULL, report_id, device_id, 2, stream_id::VARCHAR, start_ns, duration_ns,
               'graph ' || coalesce(graph_id::VARCHAR, '?'), NULL, NULL, pid, correlation_id
        FROM graph_executions WHERE report_id = $rid
        UNION ALL
        SELECT NULL, report_id, device_id, 3, coalesce(direction, '?'), start_ns, duration_ns,
               'memcpy ' || coalesce(direction, '?') || ' ' || coalesce(src_memory, '?') || ' -> '
               || coalesce(dst_memory, '?'), NULL, bytes, pid, correlation_id
        FROM memcpy WHERE report_id = $rid
    )
"""

# `kind` codes of the activity SQL; "comm" (communication kernels, comm_ops) only on run pages
KINDS = ("kernel", "memset", "graph", "memcpy", "comm")
LANE_NAMES = {"kernel": "kernels", "memset": "memsets", "graph": "graphs", "comm": "communication"}

# The lanes of an activity source, in page order: per rank, device, kind (a GPU's compute
# kernels, then its communication, memsets, graphs, copies) and stream or copy direction.
_LANES = """
    SELECT rank, device_id, kind, lane_key, count(*), sum(greatest(duration_ns, 0)), min(start_ns),
           max(start_ns + greatest(duration_ns, 0))
    FROM act WHERE start_ns IS NOT NULL
    GROUP BY rank, device_id, kind, lane_key
    ORDER BY rank, device_id, CASE kind WHEN 0 THEN 0 WHEN 4 THEN 1 ELSE kind + 1 END, lane_key
"""
# Each event with its lane's number and quota (the lanes travel as parameter lists, so the
# events are matched to them by a small hash join, never sorted to number them).
_LANED = """, lanes AS (
        SELECT unnest($lane) AS lane, unnest($l_rank)::INTEGER AS rank, unnest($l_device)::INTEGER AS device_id,
               unnest($l_kind)::INTEGER AS kind, unnest($l_key)::VARCHAR AS lane_key, unnest($l_quota) AS q,
               unnest($l_cut) AS c
    ), laned AS NOT MATERIALIZED (
        SELECT l.lane, l.q, l.c, a.report_id, a.start_ns, greatest(a.duration_ns, 0) AS duration_ns, a.label,
               a.name_id, a.bytes, a.pid, a.correlation_id
        FROM act AS a JOIN lanes AS l ON a.kind = l.kind AND a.rank IS NOT DISTINCT FROM l.rank
            AND a.device_id IS NOT DISTINCT FROM l.device_id AND a.lane_key IS NOT DISTINCT FROM l.lane_key
        WHERE a.start_ns IS NOT NULL
    )
"""
# The exact events: all, or each lane's `q` longest (`_LONGEST`); their launch calls are looked
# up for those alone, by correlation id. Kernels keep their name id (the page's names are looked
# up once per name, not once per event), other events their label. Only the events of each
# lane's longest durations are ranked: a histogram of durations (1/32 of an octave a bucket,
# counted with the bins, `_bins`) gives each lane's cut `c`, the shortest duration of the
# shortest bucket that with the longer ones holds `q` events; the events below it, which rank
# after all of those, are left out before the sort.
_LONGEST = """, kept AS (
        SELECT * FROM laned WHERE duration_ns >= c
        QUALIFY row_number() OVER (PARTITION BY lane ORDER BY duration_ns DESC, start_ns) <= q
    )
"""
_EVENTS = """, calls AS (
        SELECT report_id, pid, correlation_id, any_value(name) AS api FROM cuda_api
        WHERE correlation_id IN (SELECT correlation_id FROM kept)
        GROUP BY ALL
    )
    SELECT k.lane, k.start_ns - $t0 AS s, k.duration_ns AS d, k.label, k.report_id, k.name_id, k.bytes, c.api
    FROM kept AS k
    LEFT JOIN calls AS c ON c.report_id = k.report_id AND c.pid = k.pid AND c.correlation_id = k.correlation_id
    ORDER BY k.lane, s
"""


@dataclass(frozen=True)
class Activity:
    """Where a timeline's events come from: SQL ending in an `act` CTE (rank, report_id,
    device_id, kind, lane_key, start_ns, duration_ns, label, name_id, bytes, pid, correlation_id:
    `label` NULL for a kernel, named from kernel_names by `name_id`) and its parameters. One
    report's is `_ACTIVITY`; a run's (report/run.py) puts each rank's rows on the run's clock."""

    sql: str
    args: dict[str, Any]


def gather_timeline(
    con: duckdb.DuckDBPyConnection, rid: int, max_events: int = DEFAULT_MAX_EVENTS
) -> dict[str, Any] | None:
    """The timeline's lanes and overlays; None when the report has no GPU activity (ncu)."""
    names: dict[str, int] = {}
    apis: dict[str, int] = {}
    got = activity_lanes(con, Activity(_ACTIVITY, {"rid": rid}), max_events, names, apis)
    if got is None:
        return None
    t0, t1, total, lanes = got
    nvtx = nvtx_lanes(con, rid, t0, names)
    return {
        **timeline_dict(t0, t1, total, lanes, nvtx, max_events, names, apis),
        "steps": step_marks(con, rid, t0),
        "gaps": idle_gaps(con, rid, t0, t1),
    }


def timeline_dict(
    t0: int,
    t1: int,
    total: int,
    lanes: list[dict[str, Any]],
    nvtx: list[dict[str, Any]],
    max_events: int,
    names: dict[str, int],
    apis: dict[str, int],
) -> dict[str, Any]:
    """The part of the timeline's data every page shares: its span, GPU and NVTX lanes, name tables."""
    return {
        "t0": t0,
        "t1": t1,
        "events": total,
        "exact_events": sum(len(lane.get("d", [])) for lane in lanes),
        "max_events": max_events,
        "bins": BINS,
        "lanes": lanes + nvtx,
        "names": list(names),
        "apis": list(apis),
    }


def activity_lanes(
    con: duckdb.DuckDBPyConnection,
    src: Activity,
    max_events: int,
    names: dict[str, int],
    apis: dict[str, int],
) -> tuple[int, int, int, list[dict[str, Any]]] | None:
    """(t0, t1, events, lanes with their exact events and bins) of an activity source; None
    when it has no event. `names` and `apis` collect the labels and launch calls the lanes index."""
    groups = params.execute(con, src.sql + _LANES, src.args).fetchall()
    total = sum(int(g[4]) for g in groups)
    if not total:
        return None
    t0 = min(int(g[6]) for g in groups)
    t1 = max(max(int(g[7]) for g in groups), t0 + 1)
    lanes = [_lane(i, g, total, max_events) for i, g in enumerate(groups)]
    args = {
        **src.args,
        "lane": [lane["id"] for lane in lanes],
        "l_rank": [g[0] for g in groups],
        "l_device": [g[1] for g in groups],
        "l_kind": [g[2] for g in groups],
        "l_key": [g[3] for g in groups],
        "l_quota": [lane["quota"] for lane in lanes],
        "l_cut": [0] * len(lanes),  # every event of a lane kept whole
    }
    sql = src.sql + _LANED
    sampled = [lane for lane in lanes if lane["quota"] < lane["count"]]
    if sampled:
        bins, cuts = _bins(con, sql, args, t0, t1, sampled)
        for lane in sampled:
            lane["bins"] = bins[lane["id"]]
        args["l_cut"] = [cuts.get(lane["id"], 0) for lane in lanes]
    events = _events(con, sql, args, t0, names, apis, keep=bool(sampled))
    for lane in lanes:
        lane.update(events.get(lane["id"], {}))
    return t0, t1, total, lanes


def _lane(i: int, group: tuple[Any, ...], total: int, max_events: int) -> dict[str, Any]:
    rank, device, kind, key, count, busy = group[:6]
    what = KINDS[kind]
    where = f"memcpy {key}" if what == "memcpy" else f"stream {key} {LANE_NAMES[what]}"
    if what == "comm":  # a run's communication kernels: one lane per GPU, whatever the stream
        where = LANE_NAMES[what]
    quota = count if total <= max_events else max(1, count * max_events // total)
    lane = {"id": i, "kind": what, "device": None if device is None else int(device),
            "label": f"GPU {device} · {where}", "count": int(count), "busy_ns": int(busy or 0),
            "quota": int(quota)}  # fmt: skip
    if rank is not None:
        lane["rank"] = int(rank)
    return lane


def _bins(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    args: dict[str, Any],
    t0: int,
    t1: int,
    which: list[dict[str, Any]],
) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
    """Per lane of `which`, the count and summed duration of its events by the bin their start
    falls in, and its cut (`_LONGEST`): both from one pass over the events, the bins and the
    histogram of durations as two grouping sets."""
    width = max(1, -(-(t1 - t0) // BINS))
    rows = params.execute(
        con,
        sql + "SELECT lane, b, h, count(*) AS c, sum(duration_ns) AS d, min(duration_ns) AS shortest FROM ("
        f"  SELECT lane, least((start_ns - $t0) // $w, $last) AS b, {_BUCKET.format(d='duration_ns')} AS h, duration_ns"
        "  FROM laned WHERE list_contains($which, lane)"
        ") GROUP BY GROUPING SETS ((lane, b), (lane, h)) ORDER BY lane, b, h",
        {**args, "t0": t0, "w": width, "last": BINS - 1, "which": [lane["id"] for lane in which]},
    ).fetchall()
    binned = [r for r in rows if r[2] is None]  # the (lane, b) set: h left out
    out: dict[int, dict[str, Any]] = {}
    for lane, (a, n) in _runs([r[0] for r in binned]).items():
        part = binned[a : a + n]
        out[lane] = {
            "w": width,
            "i": [r[1] for r in part],
            "c": [r[3] for r in part],
            "d": [int(r[4]) for r in part],
        }
    buckets: dict[int, list[tuple[float, int, int]]] = {}
    for lane, b, h, c, _, shortest in rows:
        if b is None:  # the (lane, h) set
            buckets.setdefault(lane, []).append((h, c, shortest))
    cuts = {lane["id"]: _cut(buckets[lane["id"]], lane["quota"]) for lane in which}
    return out, {lane: cut for lane, cut in cuts.items() if cut is not None}


# A histogram bucket of durations: 1/32 of an octave (`_cut`).
_BUCKET = "floor(log2({d} + 1) * 32)"


def _cut(buckets: list[tuple[float, int, int]], quota: int) -> int | None:
    """Of a histogram of durations (bucket `_BUCKET`, events, shortest duration in it), the
    shortest duration of the shortest bucket that with the longer ones holds `quota` events:
    every event shorter ranks after `quota` others by duration. None: all of them hold fewer."""
    above = 0
    for _, n, shortest in sorted(buckets, reverse=True):
        above += n
        if above >= quota:
            return int(shortest)
    return None


def _runs(values: list[Any]) -> dict[Any, tuple[int, int]]:
    """{value: (offset, length)} of the runs of equal values in a sorted column."""
    out: dict[Any, tuple[int, int]] = {}
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            out[values[start]] = (start, i - start)
            start = i
    return out


def _codes(values: list[Any], table: dict[str, int]) -> list[int | None]:
    """The values as indexes into `table` (added to it in order of first use); None stays None."""
    return [None if v is None else table.setdefault(v, len(table)) for v in values]


def _kernel_names(
    con: duckdb.DuckDBPyConnection, report_ids: list[Any], name_ids: list[Any]
) -> dict[tuple[int, int], str]:
    """{(report_id, name_id): name} of the kernels among the events."""
    ids = sorted({r for r, n in zip(report_ids, name_ids, strict=True) if n is not None})
    rows = params.execute(
        con,
        "SELECT report_id, name_id, coalesce(name, short_name, '?') FROM kernel_names "
        "WHERE list_contains($ids, report_id)",
        {"ids": ids},
    ).fetchall()
    return {(int(r), int(n)): str(name) for r, n, name in rows}


def _events(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    args: dict[str, Any],
    t0: int,
    names: dict[str, int],
    apis: dict[str, int],
    keep: bool,
) -> dict[int, dict[str, list[int]]]:
    """Exact events per lane (`s` delta-encoded): all of them, or each lane's longest `quota`."""
    kept = _LONGEST if keep else ", kept AS (SELECT * FROM laned)"
    rows = params.execute(con, sql + kept + _EVENTS, {**args, "t0": t0}).fetchall()
    # column-wise: lane, s, d, label, report_id, name_id, bytes, api
    lane_col, start, dur, label_col, rid_col, name_col, bytes_col, api_col = (
        list(c) for c in (zip(*rows, strict=True) if rows else [()] * 8)
    )
    del rows
    kernels = _kernel_names(con, rid_col, name_col)
    labels = _codes(label_col, names)
    label = [
        names.setdefault(kernels.get((r, k), "?"), len(names)) if code is None else code
        for code, r, k in zip(labels, rid_col, name_col, strict=True)
    ]
    api = [-1 if a is None else a for a in _codes(api_col, apis)]
    out: dict[int, dict[str, list[int]]] = {}
    for lane, (a, n) in _runs(lane_col).items():
        s = start[a : a + n]
        col = {"s": [x - y for x, y in zip(s, [0, *s[:-1]], strict=True)],
               "d": dur[a : a + n], "n": label[a : a + n], "a": api[a : a + n]}  # fmt: skip
        nbytes = bytes_col[a : a + n]
        if n and None not in nbytes:
            col["b"] = nbytes
        out[int(lane)] = col
    return out


def nvtx_lanes(
    con: duckdb.DuckDBPyConnection,
    rid: int,
    t0: int,
    names: dict[str, int],
    pid: int | None = None,
    limit: int = NVTX_MAX,
) -> list[dict[str, Any]]:
    """NVTX ranges per host thread (of process `pid` when given), with their nesting depth
    (`l`); the longest `limit`. Starts are from `t0` on the report's clock."""
    only = "" if pid is None else " AND pid = $pid"
    # only the ranges in the longest durations' buckets are read with their names and sorted: a
    # histogram of the durations (1/32 of an octave a bucket, as the GPU lanes') gives the shortest
    # bucket that with the longer ones holds `limit` ranges, and every range shorter than it ranks
    # after all of those. The cut travels as a literal on the stored `duration_ns` (end_ns -
    # start_ns), so the scan drops the shorter ranges before it reads their names (a subquery's
    # cut, or one on `end_ns - start_ns`, is applied after every name was read)
    ranges = f"FROM nvtx_ranges WHERE report_id = $rid AND end_ns IS NOT NULL AND start_ns IS NOT NULL{only}"
    args = {"rid": rid, "lim": limit, **({} if pid is None else {"pid": pid})}
    hist = params.execute(
        con,
        f"SELECT {_BUCKET.format(d='greatest(duration_ns, 0)')}, count(*), min(duration_ns) {ranges} GROUP BY 1",
        args,
    ).fetchall()
    cut = _cut(hist, limit)
    rows = params.execute(
        con,
        f"SELECT pid, tid, start_ns, d, name FROM ("
        f"  SELECT pid, tid, start_ns, duration_ns AS d, coalesce(name, '?') AS name {ranges}"
        f"{'' if cut is None else ' AND duration_ns >= $cut'}"
        "   ORDER BY d DESC, pid, tid, start_ns LIMIT $lim"
        ") ORDER BY pid, tid, start_ns, d DESC",
        {**args, **({} if cut is None else {"cut": int(cut)})},
    ).fetchall()
    # rows come thread by thread (ordered by pid, tid, start): each thread's lane in one pass,
    # its open ranges' ends on a stack for the nesting depth
    out: list[dict[str, Any]] = []
    for (proc, tid), thread in itertools.groupby(rows, key=lambda r: (r[0], r[1])):
        s: list[int] = []
        d: list[int] = []
        n: list[int] = []
        depth: list[int] = []
        stack: list[int] = []
        prev = 0
        for _, _, start, dur, name in thread:
            while stack and stack[-1] <= start:
                stack.pop()
            depth.append(len(stack))
            stack.append(start + dur)
            s.append(start - t0 - prev)
            prev = start - t0
            d.append(dur)
            n.append(names.setdefault(name, len(names)))
        out.append({"kind": "nvtx", "label": f"NVTX pid {proc} tid {tid}", "s": s, "d": d, "n": n, "l": depth,
                    "id": f"nvtx{len(out)}", "count": len(d), "levels": max(depth) + 1})  # fmt: skip
    return out


def step_marks(
    con: duckdb.DuckDBPyConnection, rid: int, t0: int, pid: int | None = None
) -> list[dict[str, Any]]:
    """The report's steps (of process `pid` when given), from `t0` on the report's clock."""
    only = "" if pid is None else " AND pid = $pid"
    rows = params.execute(
        con,
        f"SELECT step, name, start_ns - $t0, duration_ns, steady FROM steps WHERE report_id = $rid{only} "
        "ORDER BY start_ns LIMIT $lim",
        {"rid": rid, "t0": t0, "lim": MAX_STEPS, **({} if pid is None else {"pid": pid})},
    ).fetchall()
    seen: set[int] = set()
    out = []
    for step, name, start, dur, steady in rows:
        if step in seen:  # one mark per step (several GPUs or ranks repeat it)
            continue
        seen.add(step)
        out.append({"step": step, "name": name, "s": int(start), "d": int(dur or 0), "steady": bool(steady)})
    return out


def idle_gaps(con: duckdb.DuckDBPyConnection, rid: int, t0: int, t1: int) -> list[dict[str, Any]]:
    """Idle gaps with their cause, longest first: the longest MAX_GAPS of those at least 1/2000
    of the span, and per device each phase's (start-up, steady) longest PHASE_GAPS of at least 10 us, so a
    finding about the steady state is pinned on the steady state's gaps, not start-up's. Each
    gap drawn is matched to the host's calls (`gaps`), so where more than GAP_ROWS gaps last
    10 us, the phases' longest are chosen among those of at least 100 us, 1 ms... (the
    shortest such length that leaves at most GAP_ROWS), and where even those do not fit in
    DuckDB's memory limit, among those of at least 1/2000 of the span, a warning says so."""
    floor = max(10_000, (t1 - t0) // 2000)  # ints: the relation's SQL takes no parameters
    shortest = _shortest_gap(con, rid, floor)
    try:
        return _idle_gaps(con, rid, t0, shortest, floor)
    except (duckdb.OutOfMemoryException, QueryError) as exc:
        if not params.out_of_memory(exc):
            raise
        limit = params.memory_limit(con)
        log.warning(
            "report %s: its idle gaps of at least %.3f ms did not fit in DuckDB's memory limit of %s; "
            "the timeline shows those of at least %.3f ms (`nsa query gaps` lists them all).",
            rid,
            shortest / 1e6,
            limit,
            floor / 1e6,
        )
        return _idle_gaps(con, rid, t0, floor, floor)


def _shortest_gap(con: duckdb.DuckDBPyConnection, rid: int, floor: int) -> int:
    """The shortest gap length (10 us, 100 us, ... up to `floor`) of which the report has at
    most GAP_ROWS gaps, counted on the GPU timeline alone."""
    from ..ingest import timeline as gpu_timeline  # worked out here as `gaps` would

    gpu_timeline.ensure(con, [rid])
    cuts = [10_000 * 10**i for i in range(12) if 10_000 * 10**i < floor] + [floor]
    counts = params.first_row(
        params.execute(
            con,
            "SELECT "
            + ", ".join(f"count(*) FILTER (WHERE d >= {c})" for c in cuts)
            + " FROM (SELECT start_ns - prev_end_ns AS d FROM gpu_timeline WHERE report_id = $rid)",
            {"rid": rid},
        )
    )
    return next((c for c, n in zip(cuts, counts, strict=True) if n <= GAP_ROWS), floor)


def _idle_gaps(
    con: duckdb.DuckDBPyConnection, rid: int, t0: int, shortest: int, floor: int
) -> list[dict[str, Any]]:
    rel = queries.run(con, "gaps", {"report_id": rid, "min_gap_ns": shortest})
    rows = rel.query(
        "g",
        "SELECT device_id, gap_start_ns, gap_ns, cause, cause_detail, before, after, phase FROM g "
        f"QUALIFY (gap_ns >= {floor} AND row_number() OVER (ORDER BY gap_ns DESC, gap_start_ns) <= {MAX_GAPS}) "
        f"OR row_number() OVER (PARTITION BY device_id, phase ORDER BY gap_ns DESC, gap_start_ns) <= {PHASE_GAPS} "
        "ORDER BY gap_ns DESC, gap_start_ns",
    ).fetchall()
    keys = ("device", "s", "d", "cause", "detail", "before", "after", "phase")
    return [dict(zip(keys, (r[0], int(r[1]) - t0, int(r[2]), *r[3:]), strict=True)) for r in rows]
