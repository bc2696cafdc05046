"""`nsa report`: one self-contained HTML page from `api.report_data` (no query runs here).

The page works offline and from a file: the styles and the timeline script (assets/) are
inlined, the data travels as one JSON block (`<script type="application/json" id="nsa-data">`),
the panels are static HTML tables and SVG charts (render/svg.py). Each panel is a
`<section class="panel" data-panel=NAME data-state="drawn"|"absent">`; table cells carry the
exact value they show in `data-value`, so a test (or a script) can read the numbers back.
docs/report.md describes the page and why it is built this way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from importlib import resources
from typing import Any

from ..units import metric, num, page_dur, page_percent, page_size, timestamp, unit_name
from . import svg
from .diff_panels import diff_sections
from .findings import grouped
from .html_parts import Col, fmt_text, section, table
from .ncu_panels import ncu_sections
from .run_panels import collectives_section, finding_where, run_legend, run_section, run_title


def _asset(name: str) -> str:
    return (resources.files("nsight_analytics.render") / "assets" / name).read_text(encoding="utf-8")


def page(data: dict[str, Any]) -> str:
    """The whole page for one report, for a diff (`data["diff"]` with both sides) or for a run
    (`data["run"]`: its ranks on one timeline)."""
    if "run" in data:
        title = run_title(data)
        sections = run_sections(data)
        payload = [data["timeline"]]
    elif "diff" in data:
        d = data["diff"]
        title = f"nsa diff: {', '.join(d['a']['files'])} → {', '.join(d['b']['files'])}"
        sections = diff_sections(d)
        for i, side in enumerate(data["sides"]):
            sections.append(timeline_section(side, i, f"Timeline {'AB'[i]}: {side['file']}"))
        payload = [s["timeline"] for s in data["sides"]]
    else:
        title = f"nsa report: {data['file']} (report {data['report_id']}, {data['format']})"
        sections = report_sections(data)
        payload = [data["timeline"]]
    rest = _without_timelines(data)
    blob = json.dumps({"timelines": payload, "data": rest}, separators=(",", ":"), default=str)
    blob = blob.replace("</", "<\\/")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_asset('report.css')}</style></head><body>"
        f"<header><h1>{escape(title)}</h1><nav>{_nav(sections)}</nav></header><main>{''.join(sections)}</main>"
        f'<script type="application/json" id="nsa-data">{blob}</script>'
        f"<script>{_asset('timeline.js')}</script></body></html>"
    )


def _without_timelines(data: dict[str, Any]) -> dict[str, Any]:
    """The data minus the timelines, which travel once, in `timelines`."""
    if "sides" in data:
        return {**data, "sides": [_without_timelines(side) for side in data["sides"]]}
    return {**data, "timeline": None}


def _nav(sections: list[str]) -> str:
    import re

    links = re.findall(
        r'id="panel-([\w-]+)" data-panel="[\w-]+" data-state="\w+"><h2>([^<]*)</h2>', "".join(sections)
    )
    return " · ".join(f'<a href="#panel-{k}">{t}</a>' for k, t in links)


def report_sections(data: dict[str, Any]) -> list[str]:
    p = data["panels"]
    out = [
        findings_section(data["findings"]),
        timeline_section(data, 0, "Timeline"),
        utilization_section(p.get("utilization", []), p.get("utilization_steady", [])),
        section("top_kernels", "Top kernels", _top_kernels(p.get("top_kernels", [])),
                "No kernels in this report."),
        section("phases", "Phases and steps", _phases(p.get("phases", []), data["timeline"]),
                "No GPU timeline, so no phases or steps."),
        section("nvtx", "NVTX ranges", _nvtx(p.get("nvtx", [])), "No NVTX ranges in this report."),
        section("copies", "Copies by direction and memory kind", _copies(p.get("copies", [])),
                "No memory copies in this report."),
        section("graphs", "CUDA graph launches", _graphs(p.get("graphs", [])), "No CUDA graph launches."),
        section("idle_stacks", "Call stacks behind the GPU's idle time", _idle_stacks(p.get("idle_stacks") or {}),
                _no_stacks(p.get("idle_stacks") or {})),
    ]  # fmt: skip
    ncu = ncu_sections(p, str(data["format"]).startswith("ncu"))
    out = [out[0], *ncu, *out[1:]] if data["timeline"] is None else out + ncu
    out += [
        section("gpu_metrics", "GPU metrics", _gpu_metrics(p.get("gpu_metrics", []), data["timeline"]),
                "No GPU metrics sampled (capture with nsys --gpu-metrics-devices)."),
        section("memory", "Memory held", _memory(p.get("memory", []), data["timeline"]),
                "No memory allocation events in this report."),
        section("energy", "Power and energy", _energy(p.get("energy", []), p.get("power", []), data["timeline"]),
                "No power log matches this report (nsa ingest a power log captured alongside)."),
    ]  # fmt: skip
    return out


def run_sections(data: dict[str, Any]) -> list[str]:
    """A run's page: the run and its ranks, its findings, the ranks' timeline, the arrivals."""
    return [
        run_section(data),
        findings_section(data["findings"], finding_where(data["ranks"])),
        timeline_section(data, 0, "Timeline: the ranks on the run's clock", run_legend(data)),
        collectives_section(data),
    ]


def findings_section(
    found: list[dict[str, Any]], where: Callable[[dict[str, Any]], str] | None = None
) -> str:
    """The findings' cards. `where(finding)`, when given (a run page), names what each is about
    (the rank and report, or the run), and one rule's findings on several reports share the card
    of the highest ranked, the others one line each in it."""
    if not found:
        return section("findings", "Findings", '<p class="ok">No findings: every rule passed.</p>')
    cards: list[tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]] = []
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for f, same in grouped(found, lambda d, name: d.get(name)):
        if where is not None and f.get("run_id") is None and f["rule_id"] in by_rule:
            by_rule[f["rule_id"]].append(f)
            continue
        cards.append((f, same, by_rule.setdefault(f["rule_id"], []) if f.get("run_id") is None else []))
    index = {id(f): i for i, f in enumerate(found)}  # the finding's place in the page's data
    return section(
        "findings", "Findings", "".join(_card(f, index, same, also, where) for f, same, also in cards)
    )


def _card(
    f: dict[str, Any],
    index: dict[int, int],
    same: list[dict[str, Any]],
    also: list[dict[str, Any]],
    where: Callable[[dict[str, Any]], str] | None,
) -> str:
    saving = "" if f["est_savings_ns"] is None else f" · could save {page_dur(f['est_savings_ns'])}"
    evidence = escape(json.dumps(f["evidence"], indent=1, default=str))
    return (
        f'<article class="finding sev-{f["severity"]}" data-rule="{escape(f["rule_id"])}" data-index="{index[id(f)]}">'
        f'<h3><span class="sev">{escape(f["severity"])}</span> {escape(f["title"])}'
        f"<small> {escape(f['rule_id'])}{saving}{'' if where is None else ' · ' + escape(where(f))}</small></h3>"
        f'<p>{escape(f["message"])}</p><p class="fix"><b>Fix:</b> {escape(f["recommendation"])}</p>'
        + "".join(
            f'<p class="same-saving" data-rule="{escape(g["rule_id"])}" data-index="{index[id(g)]}">Same saving, also found by '
            f"{escape(g['rule_id'])} [{escape(g['severity'])}]: {escape(g['title'])}. {escape(g['message'])}</p>"
            for g in same
        )
        + "".join(
            f'<p class="same-rule" data-rule="{escape(g["rule_id"])}" data-index="{index[id(g)]}">'
            f"Also on {escape(where(g) if where else '')} [{escape(g['severity'])}]: {escape(g['title'])} {_goto(g)}</p>"
            for g in also
        )
        + f"<details><summary>evidence</summary><pre>{evidence}</pre></details>{_goto(f)}</article>"
    )


def _goto(f: dict[str, Any]) -> str:
    pin = f.get("pin")
    if not pin:
        return ""
    return (
        f'<button class="goto" data-timeline="0" data-s="{pin["s"]}" data-d="{pin["d"]}">'
        f"show on timeline ({escape(pin['how'])})</button>"
    )


def timeline_section(data: dict[str, Any], index: int, title: str, before: str = "") -> str:
    """The timeline's panel: its tools, the canvas and a note on how its events are drawn;
    `before`: HTML put above the canvas (a run page's legend)."""
    tl = data.get("timeline")
    if not tl:
        ncu = str(data.get("format", "")).startswith("ncu")
        why = (
            "Nsight Compute profiles kernels one at a time: no timeline."
            if ncu
            else "No GPU activity in this report."
        )
        return section(f"timeline{index or ''}", title, None, why)
    sampled = tl["exact_events"] < tl["events"]
    clock = "the run's clock" if tl.get("ranks") else "the capture's clock"
    base = (
        f'<p class="note time-base" data-t0="{tl["t0"]}">Times are since the capture started ({clock}, '
        "as the findings and <code>nsa query</code> give them): the GPU activity drawn here runs from "
        f"{timestamp(tl['t0'])} to {timestamp(tl['t1'])}.</p>"
    )
    note = (
        f'<p class="note">{tl["events"]:,} events; the {tl["exact_events"]:,} longest are drawn exactly, the rest '
        f"as per-lane density bins (1/{tl['bins']} of the span).</p>"
        if sampled
        else f'<p class="note">{tl["events"]:,} events, all drawn exactly.</p>'
    )
    content = (
        f'<div class="tl-tools"><button data-act="in">zoom in</button><button data-act="out">zoom out</button>'
        f'<button data-act="reset">reset</button> <span class="tl-range"></span> '
        f'<span class="hint">wheel: zoom · drag: pan · hover: details</span></div>{before}'
        f'<div class="nsa-timeline" data-index="{index}"><canvas></canvas><div class="tip"></div></div>{base}{note}'
    )
    return section(f"timeline{index or ''}", title, content)


def utilization_section(run: list[dict[str, Any]], phases: list[dict[str, Any]]) -> str:
    rows = run + phases
    if not rows:
        return section("utilization", "Utilization", None, "No GPU activity in this report.")
    # busy = kernels + copies only (memcpys and memsets while no kernel ran): the bars add up to the span
    items = [
        (f"GPU {r['device_id']} · {r['phase']}", [r["kernel_busy_ns"], r["copy_only_ns"], r["idle_ns"]])
        for r in rows
    ]
    chart = svg.hbars(items, ["kernels", "copies only", "idle"], "utilization",
                      colors=("#4e79a7", "#f28e2b", "#dddddd"))  # fmt: skip
    cols: list[Col] = [("device_id", "GPU", fmt_text), ("phase", "phase", fmt_text), ("span_ns", "span", page_dur),
                       ("kernel_busy_ns", "kernel busy", page_dur), ("copy_busy_ns", "copy busy", page_dur),
                       ("copy_only_ns", "copy only", page_dur), ("idle_ns", "idle", page_dur)]  # fmt: skip
    return section("utilization", "Utilization (busy / copy / idle per device; start-up vs steady)",
                   chart + table(rows, cols, "utilization"))  # fmt: skip


def _top_kernels(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    chart = svg.hbars([(r["name"], [r["total_ns"]]) for r in rows], ["GPU time"], "top kernels")
    cols: list[Col] = [("name", "kernel", fmt_text), ("instances", "count", num), ("total_ns", "total", page_dur),
                       ("avg_ns", "mean", page_dur), ("max_ns", "max", page_dur), ("time_pct", "share", page_percent)]  # fmt: skip
    return chart + table(rows, cols, "top_kernels")


def _phases(rows: list[dict[str, Any]], timeline: dict[str, Any] | None) -> str | None:
    if not rows:
        return None
    cols: list[Col] = [("phase", "phase", fmt_text), ("start_ns", "starts at", timestamp), ("end_ns", "ends at", timestamp),
                       ("duration_ns", "duration", page_dur), ("steps", "steps", num),
                       ("source", "steps from", fmt_text)]  # fmt: skip
    steps = (timeline or {}).get("steps") or []
    chart = ""
    if steps:
        items = [(f"{s['name']}{'' if s['steady'] else ' (warm-up)'}", [s["d"]]) for s in steps[:60]]
        chart = f"<h3>Step durations{' (first 60)' if len(steps) > 60 else ''}</h3>" + svg.hbars(
            items, ["duration"], "steps"
        )
    return table(rows, cols, "phases") + chart


def _nvtx(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    chart = svg.hbars([(r["name"] or "?", [r["total_ns"] or 0]) for r in rows[:15]], ["time"], "nvtx")
    cols: list[Col] = [("domain", "domain", fmt_text), ("name", "range", fmt_text), ("ranges", "count", num),
                       ("total_ns", "total", page_dur), ("avg_ns", "mean", page_dur),
                       ("process_kernels", "kernels", num), ("process_kernel_ns", "kernel time", page_dur),
                       ("kernel_ns", "of it by the range's own thread", page_dur)]  # fmt: skip
    note = (
        '<p class="note">Kernel time: the GPU time of the kernels launched while the range was open by any '
        "thread of its process (nvtx_summary's process_kernel_ns; PyTorch launches backward's kernels from its "
        "autograd thread), and of those launched by the range's own thread (kernel_ns, as nsys counts).</p>"
    )
    return chart + note + table(rows, cols, "nvtx")


def _copies(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    label = [f"GPU {r['device_id']} {r['direction']} {r['src_memory']}→{r['dst_memory']}" for r in rows]
    chart = svg.hbars([(n, [r["total_ns"]]) for n, r in zip(label, rows, strict=True)], ["time"], "copies")
    cols: list[Col] = [("device_id", "GPU", fmt_text), ("direction", "direction", fmt_text), ("src_memory", "from", fmt_text),
                       ("dst_memory", "to", fmt_text), ("copies", "count", num), ("bytes", "bytes", page_size),
                       ("total_ns", "time", page_dur), ("gb_per_s", "GB/s", num), ("launch_apis", "calls", fmt_text)]  # fmt: skip
    return chart + table(rows, cols, "copies")


def _graphs(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    cols: list[Col] = [("graph_id", "graph", fmt_text), ("traced", "traced as", fmt_text), ("replays", "replays", num),
                       ("gpu_ns", "GPU time", page_dur), ("avg_replay_ns", "mean replay", page_dur),
                       ("launch_api_ns", "launch calls", page_dur)]  # fmt: skip
    return table(rows, cols, "graphs")


def _gpu_metrics(rows: list[dict[str, Any]], timeline: dict[str, Any] | None) -> str | None:
    if not rows:
        return None
    by_unit: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in rows:
        if r["average"] is None:
            continue
        name = f"GPU {r['device_id']} {r['metric']}"
        by_unit.setdefault(r["unit"] or "", {}).setdefault(name, []).append(
            (r["bucket_start_ns"], r["average"])
        )
    span = _span(timeline)
    charts = []
    for unit, series in by_unit.items():
        chart = svg.lines(dict(list(series.items())[:8]), f"gpu metrics {unit_name(unit)}",
                          y_fmt=lambda v, u=unit: metric(v, u if len(unit_name(u)) <= 6 else ""),  # a long unit: in the heading
                          x_range=span)  # fmt: skip
        if chart:
            charts.append(f"<h3>{escape(unit_name(unit) or 'value')}</h3>{chart}")
    return "".join(charts) or None


def _span(timeline: dict[str, Any] | None) -> tuple[float, float] | None:
    """The timeline's span (since the capture started, as every time on the page): the x range
    of every chart over time."""
    return (timeline["t0"], timeline["t1"]) if timeline else None


def _memory(rows: list[dict[str, Any]], timeline: dict[str, Any] | None) -> str | None:
    if not rows:
        return None
    series: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        series.setdefault(f"GPU {r['device_id']} {r['memory']}", []).append(
            (r["ts_ns"], r["held_bytes"] or 0)
        )
    return svg.lines(series, "memory held", y_fmt=page_size, x_range=_span(timeline)) or None


def _energy(
    rows: list[dict[str, Any]], power: list[dict[str, Any]], timeline: dict[str, Any] | None
) -> str | None:
    rows = [r for r in rows if r.get("method") != "no power log"]
    if not rows and not power:
        return None
    t0 = (timeline or {}).get("t0", 0)  # power's times are from the timeline's start
    series: dict[str, list[tuple[float, float]]] = {}
    for r in power:
        series.setdefault(f"log {r['log_id']} GPU {r['device_id']}", []).append(
            (t0 + r["ts_ns"], r["power_w"])
        )
    chart = (
        svg.lines(series, "power", y_fmt=lambda v: f"{v:.0f} W", x_range=_span(timeline)) if series else ""
    )
    cols: list[Col] = [("name", "window", fmt_text), ("energy_j", "energy (J)", num), ("avg_power_w", "power (W)", num),
                       ("coverage", "coverage", num), ("method", "method", fmt_text)]  # fmt: skip
    return chart + (table(rows, cols, "energy") if rows else "")


STACK_SOURCES = {
    "python_sample": "nsys Python samples",
    "cpu_sample": "nsys CPU samples (native frames)",
    "kineto_python": "PyTorch profiler Python frames",
    "kineto_callstack": "PyTorch profiler op call stacks",
}
NO_STACKS = (
    "No call stacks in this report: record them with nsys `-s cpu --python-sampling=true --cudabacktrace=all` "
    "(and `--python-backtrace=cuda`), or `torch.profiler.profile(with_stack=True)`."
)


def _idle_stacks(panel: dict[str, Any]) -> str | None:
    """One flame graph per stack source (report/flame.py), gap_stacks' rows as a tree."""
    trees = panel.get("trees") or []
    if not trees:
        return None
    out = [
        (
            '<p class="note">The stacks on the thread that launched the work ending each idle gap, sampled or '
            "recorded while the gap lasted (<code>nsa query gap_stacks</code>): the top row is the idle time, each "
            "frame below its caller, as wide as the idle time it explains; dark frames are the program's own code. "
            "Hover a frame for its file, line and time.</p>"
        )
    ]
    for tree in trees:
        name = STACK_SOURCES.get(tree["source"], tree["source"])
        share = tree["explained_ns"] / tree["idle_ns"] * 100 if tree["idle_ns"] else 0.0
        out.append(
            f"<h3>{escape(name)}: {escape(page_dur(tree['explained_ns']))} of {escape(page_dur(tree['idle_ns']))} "
            f"idle explained ({share:.0f} %)</h3>"
        )
        out.append(
            f'<div class="flame" data-source="{escape(tree["source"], quote=True)}">'
            + svg.flame(tree["root"], f"idle stacks {tree['source']}")
            + "</div>"
        )
    return "".join(out)


def _no_stacks(panel: dict[str, Any]) -> str:
    """gap_stacks' own note when it has one (it names the option), else the capture options."""
    return str(panel.get("note") or NO_STACKS)
