"""`nsa summary`: one screen per report for people (what ran, how busy, where the time went),
or the same data as JSON."""

from __future__ import annotations

import json
import shutil
from typing import Any

from ..rules.units import dur, size
from .rows import distinct_short_names, jsonable, rate


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _dur(ns: float | None) -> str:
    return dur(ns, micro="µs")


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _device_line(d: dict[str, Any], label: str = "span") -> str:
    span = d["span_ns"] or 0
    return (
        f"  GPU {d['device_id']}: {label} {_dur(span)}, busy {_pct(d['any_busy_ns'], span)} "
        f"(kernels {_pct(d['kernel_busy_ns'], span)}, copies {_pct(d['copy_busy_ns'], span)}"
        + (f", graphs {_pct(d['graph_busy_ns'], span)}" if d.get("graph_busy_ns") else "")
        + f"), idle {_dur(d['idle_ns'])}"
    )


def _columns(rows: list[list[str]], width: int, first: int) -> list[str]:
    """Rows of cells: the first column left-aligned and cut to fit, the others right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rest = sum(widths[1:]) + 2 * (len(widths) - 1)
    name_w = max(min(widths[0], width - first - rest - 2), 12)
    out = []
    for r in rows:
        cells = [_fit(r[0], name_w).ljust(name_w)] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        out.append(" " * first + "  ".join(cells).rstrip())
    return out


def to_text(reports: list[dict[str, Any]], width: int | None = None, wide: bool = False, top: int = 5) -> str:
    width = width or min(shutil.get_terminal_size((100, 24)).columns, 100)
    out: list[str] = []
    for r in reports:
        out.append(f"report {r['report_id']}  {r['file']}  ({r['format']})")
        if not r["devices"]:
            out.append("  no GPU timeline in this report (ncu reports: `nsa query speed_of_light`).")
        out += [_device_line(d) for d in r["devices"]]
        out += [_device_line(d, "steady") for d in r.get("steady", [])]
        if r["top_kernels"]:
            rows = [[f"top kernels (of {r['kernel_count']:,} launches)", "GPU time", "share", "launches"]]
            names = [k["name"] for k in r["top_kernels"]]
            rows += [
                [name, _dur(k["total_ns"]), f"{k['time_pct']:.1f}%", f"{k['instances']:,}"]
                for name, k in zip(
                    names if wide else distinct_short_names(names), r["top_kernels"], strict=True
                )
            ]
            out += _columns(rows, width, 2)
        if r["copies"]:
            shown, more = r["copies"][:top], len(r["copies"]) - top
            rows = [
                [
                    "copies" + (f" (top {top} of {len(r['copies'])})" if more > 0 else ""),
                    "bytes",
                    "time",
                    "rate",
                    "count",
                ]
            ]
            rows += [
                [
                    (f"GPU {c['device_id']} " if len(r["devices"]) > 1 else "")
                    + f"{c['direction']} {c['src_memory']} -> {c['dst_memory']}",
                    size(c["bytes"]),
                    _dur(c["total_ns"]),
                    rate(c["gb_per_s"]) if c["gb_per_s"] is not None else "-",
                    f"{c['copies']:,}",
                ]
                for c in shown
            ]
            out += _columns(rows, width, 2)
        out.append("")
    return "\n".join(out) if out else "No reports in the workspace.\n"


def render(reports: list[dict[str, Any]], fmt: str, wide: bool = False) -> str:
    if fmt == "json":
        return json.dumps(jsonable(reports), indent=2, ensure_ascii=False) + "\n"
    return to_text(reports, wide=wide)
