"""The report page of a run (docs/runs.md): every rank's GPU work on the run's clock, one lane
group per rank, communication kernels apart from compute, and the collectives lined up across
the ranks, so the rank that arrives last is seen arriving last.

A rank's rows are its report's (of its process on its GPU when `ranks.pid` is set), shifted by
`ranks.clock_offset_ns`. The lanes go through the same level of detail as one report's
(timeline.py); the collectives overlay is one entry per collective matched across ranks (same
channel and seq in `collectives`): first arrival, last arrival and last end, at most
MAX_COLLECTIVES of them (those whose ranks arrived furthest apart when there are more).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import duckdb

from .. import params
from .pins import pin_findings
from .timeline import (
    DEFAULT_MAX_EVENTS,
    MAX_GAPS,
    NVTX_MAX,
    Activity,
    activity_lanes,
    idle_gaps,
    nvtx_lanes,
    step_marks,
    timeline_dict,
)

MAX_COLLECTIVES = 20_000

# The ranks' GPU activity on the run's clock. kind 4 is a kernel that comm_ops holds (same
# report, GPU, stream and start, as the run queries' nsa_rank_activity matches them), all of a
# GPU's in one lane (timeline.py orders the lanes rank by rank: a GPU's compute kernels per
# stream, its communication, memsets, graphs, copies).
_RUN_ACTIVITY = """
    WITH rk AS (
        SELECT rank, report_id, pid AS rank_pid, device_id AS rank_device, coalesce(clock_offset_ns, 0) AS off
        FROM ranks WHERE run_id = $run
    ), comm AS (
        SELECT DISTINCT report_id, device_id, stream_id, start_ns FROM comm_ops
        WHERE report_id IN (SELECT report_id FROM rk)
    ), raw AS (
        SELECT k.report_id, k.device_id, CASE WHEN c.start_ns IS NULL THEN 0 ELSE 4 END AS kind,
               CASE WHEN c.start_ns IS NULL THEN k.stream_id::VARCHAR END AS lane_key, k.start_ns, k.duration_ns,
               NULL::VARCHAR AS label, k.name_id, NULL::BIGINT AS bytes, k.pid, k.correlation_id
        FROM kernel_rows AS k
        LEFT JOIN comm AS c ON c.report_id = k.report_id AND c.device_id = k.device_id
            AND c.start_ns = k.start_ns AND c.stream_id IS NOT DISTINCT FROM k.stream_id
        WHERE k.report_id IN (SELECT report_id FROM rk)
        UNION ALL
        SELECT report_id, device_id, 1, stream_id::VARCHAR, start_ns, duration_ns, 'memset', NULL, bytes, pid,
               correlation_id
        FROM memset WHERE report_id IN (SELECT report_id FROM rk)
        UNION ALL
        SELECT report_id, device_id, 2, stream_id::VARCHAR, start_ns, duration_ns,
               'graph ' || coalesce(graph_id::VARCHAR, '?'), NULL, NULL, pid, correlation_id
        FROM graph_executions WHERE report_id IN (SELECT report_id FROM rk)
        UNION ALL
        SELECT report_id, device_id, 3, coalesce(direction, '?'), start_ns, duration_ns,
               'memcpy ' || coalesce(direction, '?') || ' ' || coalesce(src_memory, '?') || ' -> '
               || coalesce(dst_memory, '?'), NULL, bytes, pid, correlation_id
        FROM memcpy WHERE report_id IN (SELECT report_id FROM rk)
    ), act AS (
        SELECT rk.rank, a.report_id, a.device_id, a.kind, a.lane_key, a.start_ns + rk.off AS start_ns, a.duration_ns,
               a.label, a.name_id, a.bytes, a.pid, a.correlation_id
        FROM raw AS a
        JOIN rk ON rk.report_id = a.report_id
            AND (rk.rank_pid IS NULL
                 OR (a.pid = rk.rank_pid AND a.device_id IS NOT DISTINCT FROM coalesce(rk.rank_device, a.device_id)))
    )
"""

# The collectives matched on two ranks or more: each rank's op on its own GPU (of two with the
# same channel and seq, the earlier), as queries/runs' nsa_collective_ranks takes them (`c`), and
# per collective its first and last arrival, last end and the ranks that arrived first and last.
_MATCHED = """
    WITH c AS (
        SELECT c.channel, c.seq, c.rank, c.op, c.start_ns, c.end_ns
        FROM collectives AS c
        JOIN ranks AS r ON r.run_id = c.run_id AND r.rank = c.rank
        WHERE c.run_id = $run AND c.start_ns IS NOT NULL AND c.end_ns >= c.start_ns
          AND (r.device_id IS NULL OR c.device_id = r.device_id)
        QUALIFY row_number() OVER (PARTITION BY c.channel, c.seq, c.rank ORDER BY c.start_ns) = 1
    ), m AS (
        SELECT *, min(start_ns) OVER one AS first_ns, max(start_ns) OVER one AS last_ns,
               max(end_ns) OVER one AS last_end_ns, count(*) OVER one AS n
        FROM c WINDOW one AS (PARTITION BY channel, seq)
    ), per AS (
        SELECT channel, seq, any_value(op) AS op, any_value(n) AS ranks, any_value(first_ns) AS first_ns,
               any_value(last_ns) AS last_ns, any_value(last_end_ns) AS end_ns,
               min(rank) FILTER (WHERE start_ns = first_ns) AS first_rank,
               min(rank) FILTER (WHERE start_ns = last_ns) AS last_rank
        FROM m WHERE n >= 2
        GROUP BY channel, seq
    )
"""
_COLLECTIVES = _MATCHED + "SELECT * FROM per"
# Per rank: how often it arrived last, how late after the first rank it arrived (mean), and how
# long it waited inside collectives for the last rank (summed).
_ARRIVALS = (
    _MATCHED
    + """
    SELECT c.rank, count(*) AS collectives, count(*) FILTER (WHERE c.rank = p.last_rank) AS arrived_last,
           avg(c.start_ns - p.first_ns) AS mean_late_ns, sum(p.last_ns - c.start_ns) AS wait_ns
    FROM c JOIN per AS p USING (channel, seq)
    GROUP BY c.rank ORDER BY c.rank
"""
)


def gather_run(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    findings: Iterable[Any] = (),
    max_events: int = DEFAULT_MAX_EVENTS,
) -> dict[str, Any]:
    """Everything the run page shows, JSON-able; `findings` are `Finding`s of the run's reports
    and of the run itself."""
    run = _run(con, run_id)
    ranks = _ranks(con, run_id)
    timeline = _timeline(con, run_id, ranks, max_events)
    found = [f.to_dict() for f in findings]
    if timeline:
        _pin(found, timeline, ranks)
        for r in ranks:
            lanes = [lane for lane in timeline["lanes"] if lane.get("rank") == r["rank"]]
            r["kernels"] = sum(lane["count"] for lane in lanes if lane["kind"] in ("kernel", "comm"))
            r["comm_kernels"] = sum(lane["count"] for lane in lanes if lane["kind"] == "comm")
    collectives = _collectives(con, run_id, timeline["t0"] if timeline else 0)
    if timeline and collectives["overlay"]:
        timeline["collectives"] = collectives["overlay"]
        timeline["view"] = _opening_view(collectives["overlay"], timeline["t1"] - timeline["t0"])
    return {"run": run, "ranks": ranks, "report_ids": sorted({r["report_id"] for r in ranks}),
            "timeline": timeline, "findings": found,
            "panels": {"arrivals": collectives["arrivals"], "collectives": collectives["summary"]}}  # fmt: skip


def _run(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, Any]:
    return _records(
        con,
        "SELECT run_id, name, world_size, ranks_seen, hosts, rank_source, clock_source, clock_uncertainty_ns "
        "FROM runs WHERE run_id = $run",
        run_id,
    )[0]


def _ranks(con: duckdb.DuckDBPyConnection, run_id: int) -> list[dict[str, Any]]:
    return _records(
        con,
        "SELECT k.rank, k.local_rank, k.host, k.report_id, regexp_extract(r.source_path, '[^/]+$') AS file, "
        "k.pid, k.device_id, k.rank_source, coalesce(k.clock_offset_ns, 0) AS clock_offset_ns "
        "FROM ranks AS k JOIN reports AS r USING (report_id) WHERE k.run_id = $run ORDER BY k.rank",
        run_id,
    )


def _records(con: duckdb.DuckDBPyConnection, sql: str, run_id: int) -> list[dict[str, Any]]:
    cur = params.execute(con, sql, {"run": run_id})
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def _timeline(
    con: duckdb.DuckDBPyConnection, run_id: int, ranks: list[dict[str, Any]], max_events: int
) -> dict[str, Any] | None:
    """The ranks' lanes on the run's clock, each rank's NVTX threads and idle gaps, and the
    first rank's steps; None when no rank has GPU activity."""
    names: dict[str, int] = {}
    apis: dict[str, int] = {}
    got = activity_lanes(con, Activity(_RUN_ACTIVITY, {"run": run_id}), max_events, names, apis)
    if got is None:
        return None
    t0, t1, total, lanes = got
    nvtx: list[dict[str, Any]] = []
    gaps: list[dict[str, Any]] = []
    per_rank = max(1, NVTX_MAX // max(1, len(ranks)))
    for r in ranks:
        local_t0 = t0 - r["clock_offset_ns"]  # the run's start on this rank's report clock
        for i, lane in enumerate(nvtx_lanes(con, r["report_id"], local_t0, names, r["pid"], per_rank)):
            lane.update(id=f"r{r['rank']}nvtx{i}", rank=r["rank"])
            nvtx.append(lane)
        for g in idle_gaps(con, r["report_id"], local_t0, local_t0 + (t1 - t0)):
            if r["pid"] is None or r["device_id"] is None or g["device"] == r["device_id"]:
                gaps.append({**g, "rank": r["rank"]})
    gaps.sort(key=lambda g: -g["d"])
    first = ranks[0] if ranks else None
    steps = step_marks(con, first["report_id"], t0 - first["clock_offset_ns"], first["pid"]) if first else []
    return {
        **timeline_dict(t0, t1, total, lanes, nvtx, max_events, names, apis),
        "steps": steps,
        "steps_label": f"steps · rank {first['rank']}" if first else "steps",
        "gaps": gaps[:MAX_GAPS],
        "ranks": [_rank_header(r) for r in ranks],
    }


def _rank_header(r: dict[str, Any]) -> dict[str, Any]:
    """What a rank's lane group says of it: `rank N · GPU d · report R (file) · pid`."""
    where = f"GPU {r['device_id']}" if r["device_id"] is not None else "GPU ?"
    proc = f" · pid {r['pid']}" if r["pid"] is not None else ""
    label = f"rank {r['rank']} · {where} · report {r['report_id']} ({r['file']}){proc}"
    return {"rank": r["rank"], "label": label, "offset_ns": r["clock_offset_ns"]}


def _collectives(con: duckdb.DuckDBPyConnection, run_id: int, t0: int) -> dict[str, Any]:
    """The overlay (column-wise, ns from the timeline's start, ordered by first arrival), the
    per-rank arrivals and a summary of the matched collectives."""
    rows = params.execute(con, _COLLECTIVES, {"run": run_id}).fetchall()
    total = len(rows)
    if total > MAX_COLLECTIVES:  # keep those whose ranks arrived furthest apart
        rows = sorted(rows, key=lambda r: -(r[5] - r[4]))[:MAX_COLLECTIVES]
    rows.sort(key=lambda r: (r[4], r[0], r[1]))
    ops: dict[str, int] = {}
    channels: dict[str, int] = {}
    overlay: dict[str, Any] = {"s": [], "w": [], "e": [], "first": [], "last": [], "n": [],
                               "op": [], "ch": [], "seq": [], "ops": [], "channels": []}  # fmt: skip
    prev = 0
    for channel, seq, op, n, first_ns, last_ns, end_ns, first_rank, last_rank in rows:
        s = int(first_ns) - t0
        overlay["s"].append(s - prev)  # delta-encoded, as the lanes' starts
        prev = s
        overlay["w"].append(int(last_ns) - int(first_ns))  # first to last arrival
        overlay["e"].append(int(end_ns) - int(first_ns))  # first arrival to last end
        overlay["first"].append(int(first_rank))
        overlay["last"].append(int(last_rank))
        overlay["n"].append(int(n))
        overlay["op"].append(ops.setdefault(str(op or "?"), len(ops)))
        overlay["ch"].append(channels.setdefault(str(channel), len(channels)))
        overlay["seq"].append(int(seq))
    overlay["ops"], overlay["channels"], overlay["total"] = list(ops), list(channels), total
    arrivals = _records(con, _ARRIVALS, run_id)
    for a in arrivals:
        a["mean_late_ns"] = None if a["mean_late_ns"] is None else float(a["mean_late_ns"])
        a["wait_ns"] = int(a["wait_ns"] or 0)
        a["arrived_last_share"] = a["arrived_last"] / a["collectives"] if a["collectives"] else None
    summary = {"collectives": total, "drawn": len(rows), "channels": list(channels), "ops": list(ops)}
    return {"overlay": overlay if rows else None, "arrivals": arrivals, "summary": summary}


def _opening_view(overlay: dict[str, Any], span: int) -> list[int]:
    """Where the page opens: the collectives, first arrival to last end, with a margin (a capture's
    start-up, before the first collective, is often most of its span)."""
    start, first, last = 0, None, 0
    for s, e in zip(overlay["s"], overlay["e"], strict=True):
        start += s
        first = start if first is None else first
        last = max(last, start + e)
    first = first or 0
    margin = max(1000, (last - first) // 50)
    return [max(0, first - margin), min(span, last + margin)]


def _pin(found: list[dict[str, Any]], timeline: dict[str, Any], ranks: list[dict[str, Any]]) -> None:
    """Pin each finding on the lanes of its report's ranks: pins.py reads evidence on the
    report's clock, so it sees the run's timeline from that report's clock (its ranks' lanes
    and gaps, t0 shifted back by the report's offset)."""
    for rid in {f["report_id"] for f in found}:
        mine = [r for r in ranks if r["report_id"] == rid]
        on = {r["rank"] for r in mine}
        offset = mine[0]["clock_offset_ns"] if mine else 0
        view = {
            "t0": timeline["t0"] - offset,
            "t1": timeline["t1"] - offset,
            "lanes": [lane for lane in timeline["lanes"] if lane.get("rank") in on],
            "gaps": [g for g in timeline["gaps"] if g["rank"] in on],
        }
        pin_findings([f for f in found if f["report_id"] == rid], view, {})
