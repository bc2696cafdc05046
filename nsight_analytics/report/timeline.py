"""The timeline of the report page: one lane per device and stream (kernels, memsets, graph
executions), per device and copy direction (memcpy), per host thread (NVTX), with the idle gaps,
the steps and the findings laid over it.

Events are stored column-wise and delta-encoded (`s`: start minus the previous start, `d`:
duration, `n`: index into `names`, `a`: index into `apis`, the launch call), which keeps a
million kernels near 20 MB of JSON. Above `max_events` the page stays bounded by level of detail:
every lane keeps its longest events exactly (its share of the budget) and adds `bins`, the
count and summed duration of all its events per 1/BINS of the span, which the page draws where
exact events are missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from .. import params, queries

DEFAULT_MAX_EVENTS = 400_000
NVTX_MAX = 100_000
BINS = 2048
MAX_GAPS = 2000
MAX_STEPS = 5000
READS = {"kernels", "kernel_rows", "kernel_names", "memcpy", "memset", "graph_executions", "cuda_api"}
READS |= {"nvtx_ranges", "steps"}

_ACTIVITY = """
    WITH calls AS (
        SELECT pid, correlation_id, any_value(name) AS api FROM cuda_api
        WHERE report_id = $rid AND correlation_id IS NOT NULL GROUP BY ALL
    ), act AS (
        SELECT device_id, 0 AS kind, stream_id::VARCHAR AS lane_key, start_ns, duration_ns,
               coalesce(name, short_name, '?') AS label, NULL::BIGINT AS bytes, pid, correlation_id
        FROM kernels WHERE report_id = $rid
        UNION ALL
        SELECT device_id, 1, stream_id::VARCHAR, start_ns, duration_ns, 'memset', bytes, pid, correlation_id
        FROM memset WHERE report_id = $rid
        UNION ALL
        SELECT device_id, 2, stream_id::VARCHAR, start_ns, duration_ns,
               'graph ' || coalesce(graph_id::VARCHAR, '?'), NULL, pid, correlation_id
        FROM graph_executions WHERE report_id = $rid
        UNION ALL
        SELECT device_id, 3, coalesce(direction, '?'), start_ns, duration_ns,
               'memcpy ' || coalesce(direction, '?') || ' ' || coalesce(src_memory, '?') || ' -> '
               || coalesce(dst_memory, '?'), bytes, pid, correlation_id
        FROM memcpy WHERE report_id = $rid
    ), laned AS (
        SELECT dense_rank() OVER (ORDER BY device_id, kind, lane_key) - 1 AS lane, NULL::INTEGER AS rank,
               device_id, kind, lane_key, start_ns, greatest(duration_ns, 0) AS duration_ns, label,
               bytes, c.api
        FROM act LEFT JOIN calls c USING (pid, correlation_id)
        WHERE start_ns IS NOT NULL
    )
"""

# `kind` codes of the activity SQL; "comm" (communication kernels, comm_ops) only on run pages
KINDS = ("kernel", "memset", "graph", "memcpy", "comm")
LANE_NAMES = {"kernel": "kernels", "memset": "memsets", "graph": "graphs", "comm": "communication"}


@dataclass(frozen=True)
class Activity:
    """Where a timeline's events come from: SQL ending in a `laned` CTE (lane, rank, device_id,
    kind, lane_key, start_ns, duration_ns, label, bytes, api; one `), laned AS (` in it) and its
    parameters. One report's is `_ACTIVITY`; a run's (report/run.py) puts each rank's rows on
    the run's clock and numbers lanes rank by rank."""

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
    bounds = params.first_row(
        params.execute(
            con, src.sql + "SELECT min(start_ns), max(start_ns + duration_ns), count(*) FROM laned", src.args
        )
    )
    t0, t1, total = bounds
    if not total:
        return None
    t0, t1 = int(t0), max(int(t1), int(t0) + 1)
    lanes = _lanes(con, src, t0, t1, int(total), max_events)
    events = _events(con, src, t0, lanes, names, apis, int(total), max_events)
    for lane in lanes:
        lane.update(events.get(lane["id"], {}))
    return t0, t1, int(total), lanes


def _lanes(
    con: duckdb.DuckDBPyConnection, src: Activity, t0: int, t1: int, total: int, max_events: int
) -> list[dict[str, Any]]:
    rows = params.execute(
        con,
        src.sql + "SELECT lane, rank, device_id, kind, lane_key, count(*), sum(duration_ns) "
        "FROM laned GROUP BY ALL ORDER BY lane",
        src.args,
    ).fetchall()
    lanes: list[dict[str, Any]] = []
    for lane, rank, device, kind, key, count, busy in rows:
        what = KINDS[kind]
        where = f"memcpy {key}" if what == "memcpy" else f"stream {key} {LANE_NAMES[what]}"
        if what == "comm":  # a run's communication kernels: one lane per GPU, whatever the stream
            where = LANE_NAMES[what]
        quota = count if total <= max_events else max(1, count * max_events // total)
        lanes.append(
            {
                "id": int(lane),
                "kind": what,
                "device": None if device is None else int(device),
                "label": f"GPU {device} · {where}",
                "count": int(count),
                "busy_ns": int(busy or 0),
                "quota": int(quota),
            }
        )
        if rank is not None:
            lanes[-1]["rank"] = int(rank)
    sampled = [lane for lane in lanes if lane["quota"] < lane["count"]]
    if sampled:
        bins = _bins(con, src, t0, t1)
        for lane in sampled:
            lane["bins"] = bins[lane["id"]]
    return lanes


def _bins(con: duckdb.DuckDBPyConnection, src: Activity, t0: int, t1: int) -> dict[int, dict[str, Any]]:
    """Per lane, the count and summed duration of its events by the bin their start falls in."""
    width = max(1, -(-(t1 - t0) // BINS))
    rows = params.execute(
        con,
        src.sql + "SELECT lane, least((start_ns - $t0) // $w, $last) AS b, count(*), sum(duration_ns) "
        "FROM laned GROUP BY ALL ORDER BY lane, b",
        {**src.args, "t0": t0, "w": width, "last": BINS - 1},
    ).fetchall()
    out: dict[int, dict[str, Any]] = {}
    for lane, b, count, busy in rows:
        col = out.setdefault(int(lane), {"w": width, "i": [], "c": [], "d": []})
        col["i"].append(int(b))
        col["c"].append(int(count))
        col["d"].append(int(busy))
    return out


def _events(
    con: duckdb.DuckDBPyConnection,
    src: Activity,
    t0: int,
    lanes: list[dict[str, Any]],
    names: dict[str, int],
    apis: dict[str, int],
    total: int,
    max_events: int,
) -> dict[int, dict[str, list[int]]]:
    """Exact events per lane: all of them, or each lane's longest `quota` when over budget."""
    keep = "" if total <= max_events else (
        "QUALIFY row_number() OVER (PARTITION BY lane ORDER BY duration_ns DESC, start_ns) "
        "<= (SELECT q FROM quota WHERE quota.lane = laned.lane)"
    )  # fmt: skip
    quota = ", ".join(f"({lane['id']}, {lane['quota']})" for lane in lanes)
    sql = src.sql.replace(
        "), laned AS (", "), quota(lane, q) AS (VALUES " + (quota or "(0, 0)") + "), laned AS ("
    )
    rel = params.execute(
        con,
        sql + f"SELECT * FROM (SELECT lane, start_ns - $t0 AS s, duration_ns, label, bytes, api "
        f"FROM laned {keep}) ORDER BY lane, s",
        {**src.args, "t0": t0},
    )
    out: dict[int, dict[str, list[int]]] = {}
    prev_lane, prev = -1, 0
    for lane, start, dur, label, nbytes, api in rel.fetchall():
        if lane != prev_lane:
            prev_lane, prev = lane, 0
            out[int(lane)] = {"s": [], "d": [], "n": [], "a": []}
        col = out[int(lane)]
        col["s"].append(int(start) - prev)
        prev = int(start)
        col["d"].append(int(dur))
        col["n"].append(names.setdefault(label, len(names)))
        col["a"].append(-1 if api is None else apis.setdefault(api, len(apis)))
        if nbytes is not None:
            col.setdefault("b", []).append(int(nbytes))
    for col in out.values():
        if "b" in col and len(col["b"]) != len(col["d"]):
            del col["b"]
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
    rows = params.execute(
        con,
        "SELECT pid, tid, start_ns, end_ns - start_ns, coalesce(name, '?') FROM ("
        "  SELECT * FROM nvtx_ranges WHERE report_id = $rid AND end_ns IS NOT NULL AND start_ns IS NOT NULL"
        f"{only}  ORDER BY end_ns - start_ns DESC LIMIT $lim"
        ") ORDER BY pid, tid, start_ns, end_ns DESC",
        {"rid": rid, "lim": limit, **({} if pid is None else {"pid": pid})},
    ).fetchall()
    threads: dict[tuple[Any, Any], dict[str, Any]] = {}
    stacks: dict[tuple[Any, Any], list[int]] = {}
    for proc, tid, start, dur, name in rows:
        key = (proc, tid)
        lane = threads.setdefault(
            key,
            {
                "kind": "nvtx",
                "label": f"NVTX pid {proc} tid {tid}",
                "s": [],
                "d": [],
                "n": [],
                "l": [],
                "prev": 0,
            },
        )
        stack = stacks.setdefault(key, [])
        while stack and stack[-1] <= start:
            stack.pop()
        lane["l"].append(len(stack))
        stack.append(int(start) + int(dur))
        lane["s"].append(int(start) - t0 - lane["prev"])
        lane["prev"] = int(start) - t0
        lane["d"].append(int(dur))
        lane["n"].append(names.setdefault(name, len(names)))
    out = []
    for i, lane in enumerate(threads.values()):
        lane.pop("prev")
        lane.update(id=f"nvtx{i}", count=len(lane["d"]), levels=max(lane["l"]) + 1)
        out.append(lane)
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
    """Idle gaps with their cause, the longest MAX_GAPS of those at least 1/2000 of the span."""
    rel = queries.run(con, "gaps", {"report_id": rid, "min_gap_ns": max(10_000, (t1 - t0) // 2000)})
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    rows.sort(key=lambda g: -int(g["gap_ns"]))
    return [
        {
            "device": g["device_id"],
            "s": int(g["gap_start_ns"]) - t0,
            "d": int(g["gap_ns"]),
            "cause": g["cause"],
            "detail": g["cause_detail"],
            "before": g["before"],
            "after": g["after"],
        }
        for g in rows[:MAX_GAPS]
    ]
