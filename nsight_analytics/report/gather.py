"""Gather the report page's panels from the library queries (the numbers `nsa query NAME`
prints), so the page and the CLI never disagree. A panel whose data the report lacks is
returned empty; the page then says it is absent instead of drawing an empty chart."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import duckdb

from .. import params, queries
from .flame import flames
from .pins import pin_findings
from .timeline import DEFAULT_MAX_EVENTS, gather_timeline
from .timeline import READS as TIMELINE_READS

if TYPE_CHECKING:
    from ..rules.context import Context

TOP_KERNELS = 25
TOP_NVTX = 30
TOP_NCU = 40  # ncu launches shown per panel (by duration)
LINE_POINTS = 600  # points per line of the GPU metrics and memory charts

PANEL_QUERIES = {
    "utilization": "utilization",
    "top_kernels": "kernel_summary",
    "phases": "phases",
    "nvtx": "nvtx_summary",
    "copies": "memcpy_summary",
    "graphs": "graph_launches",
    "stalls": "stalls",
    "speed_of_light": "speed_of_light",
    "occupancy": "occupancy",
    "roofline": "roofline",
    "energy": "energy",
}
OPTIONAL = ("gpu_metrics_timeline", "memory_timeline", "gpu_metrics_summary", "gap_stacks")


def reads() -> set[str]:
    """Canonical tables the page reads: its queries' `-- reads` plus the timeline's tables (and
    a run page's: its runs, ranks and communication kernels)."""
    needs = set(TIMELINE_READS) | queries.get("gaps").tables() | {"reports", "power_samples"}
    needs |= {"runs", "ranks", "comm_ops"}
    for name in (*PANEL_QUERIES.values(), *OPTIONAL):
        if name in queries.library():
            needs |= queries.get(name).tables()
    return needs


READS = frozenset(reads())


def gather(
    con: duckdb.DuckDBPyConnection,
    report_id: int,
    findings: Iterable[Any] = (),
    max_events: int = DEFAULT_MAX_EVENTS,
    context: Context | None = None,
) -> dict[str, Any]:
    """Everything the page shows for one report, JSON-able; `findings` are `Finding`s.
    `context`: the rules' Context that found them (on this report), whose query results the
    page reuses instead of running those queries again (utilization, graph_launches...)."""
    fmt, file = params.first_row(
        params.execute(
            con,
            "SELECT format, regexp_extract(source_path, '[^/]+$') FROM reports WHERE report_id = $rid",
            {"rid": report_id},
        )
    )
    panels: dict[str, Any] = {
        key: rows(con, name, report_id, context) for key, name in PANEL_QUERIES.items() if _known(name)
    }
    panels["top_kernels"] = sorted(panels.get("top_kernels", []), key=lambda r: -r["total_ns"])[:TOP_KERNELS]
    panels["nvtx"] = sorted(panels.get("nvtx", []), key=lambda r: -(r["total_ns"] or 0))[:TOP_NVTX]
    for key in ("stalls", "speed_of_light", "occupancy", "roofline"):
        panels[key] = _top_launches(panels.get(key, []))
    panels["energy"] = [r for r in panels.get("energy", []) if r.get("scope") == "run"]
    panels["utilization_steady"] = [
        *rows(con, "utilization", report_id, context, phase="startup"),
        *rows(con, "utilization", report_id, context, phase="steady"),
    ]
    timeline = gather_timeline(con, report_id, max_events)
    span = (timeline["t1"] - timeline["t0"]) if timeline else 0
    panels["gpu_metrics"] = _gpu_metrics(con, report_id, span)
    panels["memory"] = _memory(con, report_id)
    panels["power"] = _power(con, report_id, timeline)
    panels["idle_stacks"] = (
        flames(rows(con, "gap_stacks", report_id, context, top_n=None)) if _known("gap_stacks") else {}
    )
    found = [f.to_dict() for f in findings]
    if timeline:
        pin_findings(found, timeline, panels)
    return {"report_id": report_id, "format": fmt, "file": file, "timeline": timeline,
            "findings": found, "panels": panels}  # fmt: skip


def rows(
    con: duckdb.DuckDBPyConnection, name: str, report_id: int, context: Context | None = None, **extra: Any
) -> list[dict[str, Any]]:
    """A library query's rows as dicts with JSON-safe values (NaN and inf become None); through
    `context` (the rules' Context of this report), computed once for the rules and the page."""
    if context is not None and context.report_id == report_id:
        got = context.query(name, report_id, **extra)
        columns, records = got.columns, list(got)
    else:
        rel = queries.run(con, name, {"report_id": report_id, **extra})
        columns, records = tuple(rel.columns), rel.fetchall()
    return [{c: _safe(v) for c, v in zip(columns, r, strict=True)} for r in records]


def _known(name: str) -> bool:
    return name in queries.library()


def _safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_safe(x) for x in v]
    return str(v)


def _top_launches(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the TOP_NCU longest ncu launches (all rows of each), in launch order."""
    durations: dict[int, float] = {}
    for r in records:
        durations[r["launch_id"]] = max(durations.get(r["launch_id"], 0), r.get("duration_ns") or 0)
    keep = set(sorted(durations, key=lambda k: -durations[k])[:TOP_NCU])
    return [r for r in records if r["launch_id"] in keep]


def _gpu_metrics(con: duckdb.DuckDBPyConnection, report_id: int, span_ns: int) -> list[dict[str, Any]]:
    if not _known("gpu_metrics_timeline"):
        return []
    bucket = max(1000, span_ns // LINE_POINTS) if span_ns else 10_000_000
    return rows(con, "gpu_metrics_timeline", report_id, bucket_ns=bucket)


def _memory(con: duckdb.DuckDBPyConnection, report_id: int) -> list[dict[str, Any]]:
    """Bytes held over time per device and memory kind, thinned to about LINE_POINTS per line
    (the largest value of each stretch is kept, so the peak survives)."""
    if not _known("memory_timeline"):
        return []
    # Thinned in SQL: a report's events can number in the millions, and only ~LINE_POINTS a line
    # reach Python. A line's points are its events in the query's order (`n`: their position in
    # it), cut into stretches of ceil(events / LINE_POINTS); each stretch keeps its first largest.
    rel = queries.run(con, "memory_timeline", {"report_id": report_id})
    rows = rel.query(
        "m",
        "WITH e AS (SELECT device_id, memory, ts_ns, held_bytes, row_number() OVER () AS n FROM m),"
        " s AS (SELECT *, min(n) OVER line AS line,"
        f"  (row_number() OVER (line ORDER BY n) - 1) // ((count(*) OVER line + {LINE_POINTS - 1}) // {LINE_POINTS})"
        "  AS stretch FROM e WINDOW line AS (PARTITION BY device_id, memory))"
        " SELECT device_id, memory, ts_ns, held_bytes FROM s"
        " QUALIFY row_number() OVER (PARTITION BY line, stretch ORDER BY coalesce(held_bytes, 0) DESC, n) = 1"
        " ORDER BY line, stretch",
    ).fetchall()
    keys = ("device_id", "memory", "ts_ns", "held_bytes")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def _power(
    con: duckdb.DuckDBPyConnection, report_id: int, timeline: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Power drawn over the timeline's span, from every power log whose UTC times fall in it
    (each log and device a line, averaged into about LINE_POINTS buckets); the `energy` query
    says which log belongs to which GPU, this only draws what was logged meanwhile."""
    if not timeline or "power_samples" not in _tables(con):
        return []
    span = timeline["t1"] - timeline["t0"]
    rel = params.execute(
        con,
        "SELECT p.report_id AS log_id, p.device_id, min(p.ts_utc_ns - r.session_start_utc_ns) - $t0 AS ts_ns,"
        " avg(p.power_w) AS power_w FROM power_samples p, reports r"
        " WHERE r.report_id = $rid AND p.power_w IS NOT NULL"
        " AND p.ts_utc_ns - r.session_start_utc_ns BETWEEN $t0 AND $t1"
        " GROUP BY 1, 2, (p.ts_utc_ns - r.session_start_utc_ns - $t0) // $w ORDER BY 1, 2, 3",
        {"rid": report_id, "t0": timeline["t0"], "t1": timeline["t1"], "w": max(1, span // LINE_POINTS)},
    )
    return [dict(zip(["log_id", "device_id", "ts_ns", "power_w"], r, strict=True)) for r in rel.fetchall()]


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
