"""The report page of a run (`report.gather_run`'s data): what the run is and how its ranks were
found and aligned, the legend of the ranks' timeline, and who arrives last at the collectives.
html.py puts them around the findings and the timeline."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from html import escape
from typing import Any

from ..units import num, page_dur, page_percent
from . import svg
from .html_parts import Col, fmt_text, section, table

# The run timeline's colours (assets/timeline.js draws with the same)
COMM = "#c2187a"
COMPUTE = ("hsl(205,55%,42%)", "hsl(235,45%,58%)", "hsl(180,50%,38%)")
COPY = "#f28e2b"
MEMSET = "#8c8c8c"
WAIT = "rgba(194,24,122,0.85)"
AFTER = "rgba(194,24,122,0.3)"
CLOCKS = {
    "session start": "clocks aligned on each report's session start (one host's clock)",
    "collective ends": "clocks aligned on the ends of the collectives matched across ranks",
    "one report": "one report, one clock",
}


def run_title(data: dict[str, Any]) -> str:
    run = data["run"]
    return (
        f"nsa report: run {run['name']} (run {run['run_id']}, "
        f"{run['ranks_seen']} of {run['world_size'] or '?'} ranks)"
    )


def ranks_text(ranks: Iterable[int]) -> str:
    """'rank 3', 'ranks 0 and 2', 'ranks 0-7' (three or more in a row)."""
    rs = sorted(set(ranks))
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) >= 3 and rs[-1] - rs[0] == len(rs) - 1:
        return f"ranks {rs[0]}-{rs[-1]}"
    return "ranks " + ", ".join(map(str, rs[:-1])) + f" and {rs[-1]}"


def finding_where(ranks: list[dict[str, Any]]) -> Callable[[dict[str, Any]], str]:
    """What a finding of a run page is about: the run (a run rule's, with the ranks it names),
    or the rank(s) of its report."""

    def where(f: dict[str, Any]) -> str:
        if f.get("run_id") is not None:
            return "the run" + (f", {ranks_text(f['ranks'])}" if f.get("ranks") else "")
        mine = [r["rank"] for r in ranks if r["report_id"] == f["report_id"]]
        return f"{ranks_text(mine)} (report {f['report_id']})" if mine else f"report {f['report_id']}"

    return where


def run_section(data: dict[str, Any]) -> str:
    run, ranks = data["run"], data["ranks"]
    unc = run["clock_uncertainty_ns"]
    if run["clock_source"] == "one report":
        uncertainty = "no uncertainty"
    elif unc is None:
        uncertainty = "uncertainty not measured (no collectives were matched when the run was made)"
    else:
        uncertainty = f"uncertainty ± {page_dur(unc)} (the spread of the matched collectives' ends)"
    clock = CLOCKS.get(str(run["clock_source"]), f"clocks: {run['clock_source']}")
    hosts = run["hosts"]
    summary = (
        f'<p class="run-summary"><b>{escape(str(run["name"]))}</b> (run {run["run_id"]}): '
        f"world size {run['world_size'] or '?'}, {run['ranks_seen']} ranks seen"
        f"{'' if hosts is None else f' on {hosts} host' + ('s' if hosts != 1 else '')}; "
        f"ranks found from {escape(str(run['rank_source']))}; {escape(clock)}, {escape(uncertainty)}.</p>"
    )
    cols: list[Col] = [
        ("rank", "rank", fmt_text), ("local_rank", "local rank", fmt_text), ("host", "host", fmt_text),
        ("report_id", "report", fmt_text), ("file", "file", fmt_text), ("pid", "process", fmt_text),
        ("device_id", "GPU", fmt_text), ("rank_source", "rank from", fmt_text),
        ("clock_offset_ns", "clock offset", _offset), ("kernels", "kernels", num),
        ("comm_kernels", "of them communication", num),
    ]  # fmt: skip
    return section("run", "Run", summary + table(ranks, cols, "ranks"))


def _offset(v: Any) -> str:
    return "–" if v is None else ("+" if v >= 0 else "−") + page_dur(abs(v))


def run_legend(data: dict[str, Any]) -> str:
    tl = data.get("timeline") or {}
    sw = '<span class="sw" style="background:{}"></span>{}'
    items = [
        sw.format(f"linear-gradient(90deg,{','.join(COMPUTE)})", "compute kernels (colour by name)"),
        sw.format(COMM, "communication kernels"),
        sw.format(COPY, "copies"),
        sw.format(MEMSET, "memsets"),
    ]
    if tl.get("collectives"):
        items.append(
            sw.format(f"linear-gradient(90deg,{WAIT} 50%,{AFTER} 50%)", "collective: first → last arrival, then to the last end")
        )  # fmt: skip
    note = (
        " · opened on the collectives; <i>reset</i> shows the whole capture" if tl.get("collectives") else ""
    )
    return f'<p class="legend">{" ".join(items)}{note}</p>'


def collectives_section(data: dict[str, Any]) -> str:
    p = data["panels"]
    arrivals, summary = p.get("arrivals") or [], p.get("collectives") or {}
    absent = (
        "No collective matched across ranks: comm_ops holds no communication kernels of these "
        "ranks with the same channel and seq on two ranks or more."
    )
    if not arrivals or not summary.get("collectives"):
        return section("collectives", "Collectives: who arrives last", None, absent)
    n = summary["collectives"]
    last = max(arrivals, key=lambda a: (a["arrived_last"], -a["rank"]))
    others = sum(a["wait_ns"] for a in arrivals if a["rank"] != last["rank"])
    text = (
        f'<p class="note-strong">{n:,} collectives matched across {len(arrivals)} ranks '
        f"({escape(', '.join(summary['ops']))}; channels {escape(', '.join(summary['channels']))}). "
        f"<b>Rank {last['rank']}</b> arrived last at {last['arrived_last']:,} of {last['collectives']:,} "
        f"({page_percent(100 * (last['arrived_last_share'] or 0))}), on average {page_dur(last['mean_late_ns'])} "
        f"after the first rank; the other ranks waited {page_dur(others)} in all inside collectives for the last "
        "one to arrive.</p>"
    )
    if summary.get("drawn", n) < n:
        text += (
            f'<p class="note">The timeline draws the {summary["drawn"]:,} collectives whose ranks '
            "arrived furthest apart.</p>"
        )
    chart = svg.hbars(
        [(f"rank {a['rank']}", [a["arrived_last"]]) for a in arrivals], ["arrived last"], "arrivals",
        fmt=lambda v: f"{v:,.0f} collectives", colors=(COMM,),
    )  # fmt: skip
    cols: list[Col] = [
        ("rank", "rank", fmt_text), ("collectives", "collectives", num),
        ("arrived_last", "arrived last", num), ("arrived_last_share", "share", _share),
        ("mean_late_ns", "arrives after the first (mean)", page_dur),
        ("wait_ns", "waited for the last (total)", page_dur),
    ]  # fmt: skip
    return section(
        "collectives", "Collectives: who arrives last", text + chart + table(arrivals, cols, "arrivals")
    )


def _share(v: Any) -> str:
    return page_percent(None if v is None else 100 * v)
