"""`nsa summary`: one screen per report for people (what ran, how busy, where the time went),
or the same data as JSON."""

from __future__ import annotations

import json
import shutil
import textwrap
from typing import Any

from ..units import pct_of, rate, size, table_dur
from .rows import distinct_short_names, jsonable


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _device_line(d: dict[str, Any], label: str = "span") -> str:
    span = d["span_ns"] or 0
    return (
        f"  GPU {d['device_id']}: {label} {table_dur(span)}, busy {pct_of(d['any_busy_ns'], span)} "
        f"(kernels {pct_of(d['kernel_busy_ns'], span)}, copies {pct_of(d['copy_busy_ns'], span)}"
        + (f", graphs {pct_of(d['graph_busy_ns'], span)}" if d.get("graph_busy_ns") else "")
        + f"), idle {table_dur(d['idle_ns'])}"
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


# Matrix-math classes: their time is split by math precision (fp32 = no TF32/16-bit tensor cores).
_MATRIX = ("gemm", "attention", "conv")


def kernel_mix(rows: list[dict[str, Any]]) -> str:
    """'kernel time by class (steady state): gemm 64% (fp32 64%), attention 12% (fp32 12%),
    elementwise 11% (Triton 2.0%), ...': the report's kernel_classes rows, all devices together,
    classes under 0.5% folded into 'other classes' (shown from 0.05%); '' without kernels."""
    total = sum(r["kernel_ns"] for r in rows)
    if not total:
        return ""
    by_class: dict[str, int] = {}
    math: dict[str, dict[str, int]] = {}
    fused: dict[str, int] = {}
    for r in rows:
        c = r["kernel_class"]
        by_class[c] = by_class.get(c, 0) + r["kernel_ns"]
        if c in _MATRIX and r["math"]:
            m = math.setdefault(c, {})
            m[r["math"]] = m.get(r["math"], 0) + r["kernel_ns"]
        if r["fused"]:
            fused[c] = fused.get(c, 0) + r["kernel_ns"]
    parts, rest = [], 0
    for c, ns in sorted(by_class.items(), key=lambda kv: (-kv[1], kv[0])):
        if ns < 0.005 * total:
            rest += ns
            continue
        notes = [f"{p} {pct_of(n, total)}" for p, n in sorted(math.get(c, {}).items(), key=lambda kv: -kv[1])]
        if fused.get(c):
            notes.append(f"compiler-fused {pct_of(fused[c], total)}")
        parts.append(f"{c} {pct_of(ns, total)}" + (f" ({', '.join(notes)})" if notes else ""))
    if rest >= 0.0005 * total:
        parts.append(f"other classes {pct_of(rest, total)}")
    phase = "steady state" if any(r["phase"] == "steady" for r in rows) else "whole capture"
    return f"kernel time by class ({phase}): " + ", ".join(parts)


def to_text(reports: list[dict[str, Any]], width: int | None = None, wide: bool = False, top: int = 5) -> str:
    width = width or min(shutil.get_terminal_size((100, 24)).columns, 100)
    out: list[str] = []
    for r in reports:
        out.append(f"report {r['report_id']}  {r['file']}  ({r['format']})")
        if not r["devices"]:
            out.append("  no GPU timeline in this report (ncu reports: `nsa query speed_of_light`).")
        out += [_device_line(d) for d in r["devices"]]
        out += [_device_line(d, "steady") for d in r.get("steady", [])]
        mix = kernel_mix(r.get("kernel_classes", []))
        if mix:
            out += textwrap.wrap(mix, width, initial_indent="  ", subsequent_indent="    ")
        if r["top_kernels"]:
            rows = [[f"top kernels (of {r['kernel_count']:,} launches)", "GPU time", "share", "launches"]]
            names = [k["name"] for k in r["top_kernels"]]
            rows += [
                [name, table_dur(k["total_ns"]), f"{k['time_pct']:.1f}%", f"{k['instances']:,}"]
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
                    table_dur(c["total_ns"]),
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


def run_text(data: dict[str, Any], width: int | None = None) -> str:
    """`nsa summary --run`: the run, its ranks side by side, its collectives, its scaling."""
    width = width or min(shutil.get_terminal_size((100, 24)).columns, 100)
    run = data["run"]
    seen, world = run["ranks_seen"], run["world_size"]
    unc = run["clock_uncertainty_ns"]
    out = [f"run {run['run_id']}  {run['name']}"]
    out += textwrap.wrap(
        f"{seen} rank{'s' if seen != 1 else ''}" + (f" of {world}" if world and world != seen else "")
        + f" on {run['hosts']} host{'s' if run['hosts'] != 1 else ''}; ranks from {run['rank_source']}; clocks "
        f"aligned on {run['clock_source']}" + (f" (within {table_dur(unc)})" if unc else ""),
        width,
        initial_indent="  ",
        subsequent_indent="    ",
    )  # fmt: skip
    out += textwrap.wrap(
        "per steady step: step (median), compute, exposed communication, GPU idle, waits in collectives "
        "(means), late: arrival after the first rank (mean), last: share of collectives it came last to "
        "(`nsa runs --ranks` for reports and GPUs, `nsa query rank_balance` for every column)",
        width,
        initial_indent="  ",
        subsequent_indent="  ",
    )
    rows = [["rank", "step", "compute", "exposed", "idle", "waits", "late", "last"]]
    for r in data["ranks"]:
        rows.append(
            [
                f"{r['rank']}" + (f" (pid {r['pid']})" if r.get("pid") is not None else ""),
                *(table_dur(r[k]) if r.get(k) is not None else "-" for k in
                  ("step_ns", "compute_ns", "exposed_comm_ns", "idle_ns", "wait_ns", "late_ns")),
                "-" if r.get("last_share") is None else f"{100 * r['last_share']:.0f}%",
            ]
        )  # fmt: skip
    out += _columns(rows, width, 2)
    c = data["collectives"]
    if c["matched"]:
        ops = ", ".join(f"{op} {n:,}" for op, n in c["ops"].items())
        last = ", ".join(
            f"rank {k} {100 * v / c['matched']:.0f}%" for k, v in list(c["last_rank"].items())[:3]
        )
        text = (
            f"collectives: {c['matched']:,} matched across ranks ({ops}); arrival skew median "
            f"{table_dur(c['arrival_skew_ns'])}, max {table_dur(c['arrival_skew_max_ns'])}; end skew median "
            f"{table_dur(c['end_skew_ns'])}; last to arrive: {last}"
        )
        out += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="    ")
        out += textwrap.wrap(
            f"bus bandwidth (median): {c['busbw_gbps']:.1f} GB/s"
            if c["busbw_gbps"] is not None
            else "bus bandwidth: message sizes unknown (nsys kernel names do not carry them; PyTorch profiler "
            "traces do)",
            width,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    else:
        out.append("  collectives: none matched across ranks (one rank, or no communication kernels)")
    if data["scaling"]:
        rows = [["scaling (same program)", "ranks", "step", "throughput", "efficiency", "mode"]]
        for s in data["scaling"]:
            rows.append(
                [
                    f"run {s['run_id']} {s['run']}",
                    str(s["world_size"]),
                    table_dur(s["step_ns"]),
                    "-" if s["throughput"] is None else f"{s['throughput']:,.0f}/s",
                    "-" if s["efficiency"] is None else f"{100 * s['efficiency']:.0f}%",
                    str(s["mode"]),
                ]
            )
        out += _columns(rows, width, 2)
    out.append("")
    return "\n".join(line for line in out)


def render_run(data: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(jsonable(data), indent=2, ensure_ascii=False) + "\n"
    return run_text(data)
