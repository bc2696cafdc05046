"""The report page's Nsight Compute panels: stall breakdown, speed of light, occupancy and
the roofline, from the ncu library queries (`stalls`, `speed_of_light`, `occupancy`, `roofline`)."""

from __future__ import annotations

from typing import Any

from ..units import metric, num, page_dur, page_percent
from . import svg
from .html_parts import Col, fmt_text, section, table

ABSENT = "No Nsight Compute data in this report (ncu reports only)."
MISSING = "This ncu report lacks the {what} metrics (profile with `ncu --set full`)."
TOP_REASONS = 6


def _launch(r: dict[str, Any]) -> str:
    return f"#{r['launch_id']} {r['name']}"


def ncu_sections(p: dict[str, Any], is_ncu: bool) -> list[str]:
    def absent(what: str) -> str:
        return MISSING.format(what=what) if is_ncu else ABSENT

    return [
        section("stalls", "Warp stalls (ncu)", _stalls(p.get("stalls", [])), absent("warp-stall")),
        section("speed_of_light", "Speed of light (ncu)", _sol(p.get("speed_of_light", [])),
                absent("speed-of-light")),
        section("occupancy", "Occupancy (ncu)", _occupancy(p.get("occupancy", [])), absent("occupancy")),
        section("roofline", "Roofline (ncu)", _roofline(p.get("roofline", [])), absent("roofline")),
    ]  # fmt: skip


def _stalls(rows: list[dict[str, Any]]) -> str | None:
    """Cycles per issued instruction by reason, the overall top reasons stacked, rest as 'other'."""
    if not rows:
        return None
    weight: dict[str, float] = {}
    for r in rows:
        weight[r["reason"]] = weight.get(r["reason"], 0) + (r["cycles_per_issue"] or 0)
    top = sorted(weight, key=lambda k: -weight[k])[:TOP_REASONS]
    launches: dict[str, dict[str, float]] = {}
    for r in rows:
        key = r["reason"] if r["reason"] in top else "other"
        cell = launches.setdefault(_launch(r), {})
        cell[key] = cell.get(key, 0) + (r["cycles_per_issue"] or 0)
    series = [*top, "other"]
    items = [(name, [v.get(s, 0) for s in series]) for name, v in list(launches.items())[:30]]
    chart = svg.hbars(items, series, "stalls", fmt=lambda v: f"{v:.3g} cycles/issue")
    cols: list[Col] = [("launch_id", "launch", fmt_text), ("name", "kernel", fmt_text), ("reason", "reason", fmt_text),
                       ("cycles_per_issue", "cycles/issue", num), ("share_pct", "share", page_percent)]  # fmt: skip
    first = [r for r in rows if r["rank"] is not None and r["rank"] <= 3]
    return chart + "<h3>Top 3 reasons per launch</h3>" + table(first, cols, "stalls")


def _sol(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    items = [(_launch(r), [r["compute_pct"] or 0, r["memory_pct"] or 0]) for r in rows[:30]]
    chart = svg.hbars(
        items,
        ["compute % of peak", "memory % of peak"],
        "speed of light",
        fmt=lambda v: f"{v:.1f} %",
        stacked=False,
        maximum=100,
    )
    cols: list[Col] = [("launch_id", "launch", fmt_text), ("name", "kernel", fmt_text), ("duration_ns", "duration", page_dur),
                       ("compute_pct", "compute", page_percent), ("memory_pct", "memory", page_percent), ("bound", "bound", fmt_text)]  # fmt: skip
    return chart + table(rows, cols, "speed_of_light")


def _occupancy(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    items = [(_launch(r), [r["achieved_pct"] or 0]) for r in rows[:30]]
    chart = svg.hbars(items, ["achieved occupancy"], "occupancy", fmt=lambda v: f"{v:.1f} %", maximum=100)
    cols: list[Col] = [("launch_id", "launch", fmt_text), ("name", "kernel", fmt_text),
                       ("theoretical_pct", "theoretical", page_percent), ("achieved_pct", "achieved", page_percent),
                       ("blocks_per_sm", "blocks/SM", num), ("limiter", "limited by", fmt_text)]  # fmt: skip
    return chart + table(rows, cols, "occupancy")


def _roofline(rows: list[dict[str, Any]]) -> str | None:
    """Each launch and precision against the DRAM roof of that precision's peak."""
    pts = [r for r in rows if (r["flops"] or 0) > 0 and (r["dram_intensity"] or 0) > 0]
    if not pts:
        return None
    roofs: dict[str, tuple[str, float, float]] = {}
    for r in pts:
        if r["peak_flops"] and r["peak_dram_bytes_per_s"] and r["precision"] not in roofs:
            roofs[r["precision"]] = (f"{r['precision']} / DRAM", r["peak_flops"], r["peak_dram_bytes_per_s"])
    colors = {k: svg.PALETTE[i] for i, k in enumerate(roofs)}
    points = [
        {"x": r["dram_intensity"], "y": r["flops"], "color": colors.get(r["precision"], "#e15759"),
         "tip": f"{_launch(r)} [{r['precision']}] {metric(r['flops'], 'FLOP/s')} at {num(r['dram_intensity'])} FLOP/B, "
                f"{r['limiter']} bound, {r['roof_pct'] or 0:.1f} % of roof"}
        for r in pts
    ]  # fmt: skip
    chart = svg.roofline(points, list(roofs.values()), "roofline")
    cols: list[Col] = [("launch_id", "launch", fmt_text), ("name", "kernel", fmt_text), ("precision", "precision", fmt_text),
                       ("flops", "FLOP/s", num), ("dram_intensity", "FLOP/byte (DRAM)", num),
                       ("limiter", "limiter", fmt_text), ("roof_pct", "% of roof", page_percent)]  # fmt: skip
    return chart + table(pts, cols, "roofline")
