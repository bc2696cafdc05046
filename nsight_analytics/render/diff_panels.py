"""The report page's diff view, from `Diff.to_dict()`: the verdict and its checks, the steady
step-time distributions of A and B, the attribution waterfalls (by cause and by NVTX
phase) and the host ops of the step's thread, the kernels that changed, the metrics and the
findings that came or went."""

from __future__ import annotations

from html import escape
from typing import Any

from ..diff.model import severity_shown
from ..units import num, page_dur
from . import svg
from .html_parts import Col, fmt_text, section, table

TOP_KERNELS = 30


def _rel(v: Any) -> str:
    return "–" if v is None else f"{v * 100:+.1f} %"


def diff_sections(d: dict[str, Any]) -> list[str]:
    return [
        section("verdict", "Verdict", _verdict(d)),
        section("steps", "Steady step times, A and B", _steps(d), "Neither side has steps to compare."),
        section("attribution", "Where the step time went", _attribution(d.get("attribution")),
                "No attribution: the sides are not comparable or have no steps."),
        section("kernels_changed", "Kernels changed (per steady step)", _kernels(d.get("kernels", [])),
                "No kernel changed."),
        section("metrics", "Metrics", _metrics(d.get("metrics", [])), "No metric both sides have."),
        section("findings_changed", "Findings, A to B", _findings(d.get("findings", [])),
                "No findings on either side."),
    ]  # fmt: skip


def _verdict(d: dict[str, Any]) -> str:
    sc = d.get("step_change")
    change = ""
    if sc:
        ci = sc.get("ci_ns") or [None, None]
        change = (
            f"<p>Step time change (B − A, {escape(sc['statistic'])}): <b>{page_dur(sc['estimate_ns'])}</b> "
            f"({_rel(sc['relative'])}), {sc['confidence'] * 100:.0f} % interval {page_dur(ci[0])} … {page_dur(ci[1])}, "
            f"p = {sc['p_value']:.3g}"
            + (f"; about {sc['steps_needed']} steady steps a side would resolve it"
               if d["verdict"] == "inconclusive" and sc.get("steps_needed") else "")
            + "</p>"
        )  # fmt: skip
    cols: list[Col] = [("name", "check", fmt_text), ("ok", "ok", fmt_text), ("detail", "detail", fmt_text)]
    return (
        f'<p class="verdict" data-verdict="{escape(d["verdict"])}"><b>{escape(d["verdict"])}</b>: '
        f"{escape(d['reason'])}</p>{change}" + table(d.get("checks", []), cols, "checks")
    )


def _steps(d: dict[str, Any]) -> str | None:
    a, b = d["a"].get("step_ns") or [], d["b"].get("step_ns") or []
    if not a and not b:
        return None
    rows = [
        {"side": side, "steps": len(s["step_ns"] or []), "median_step_ns": s["median_step_ns"],
         "mean_step_ns": s["mean_step_ns"], "warmup_steps": s["warmup_steps"]}
        for side, s in (("A", d["a"]), ("B", d["b"]))
    ]  # fmt: skip
    cols: list[Col] = [("side", "side", fmt_text), ("steps", "steady steps", num),
                       ("median_step_ns", "median", page_dur), ("mean_step_ns", "mean", page_dur),
                       ("warmup_steps", "warm-up left out", num)]  # fmt: skip
    return svg.histograms({"A (before)": a, "B (after)": b}, "step distributions") + table(
        rows, cols, "steps"
    )


def _attribution(att: dict[str, Any] | None) -> str | None:
    if not att:
        return None
    out = ["".join(f"<p>{escape(line)}</p>" for line in att.get("summary", []))]
    for key, rest, title in (("by_cause", "cause_remainder_ns", "By cause"),
                             ("by_phase", "phase_remainder_ns", "By NVTX phase")):  # fmt: skip
        parts = [(p["name"], p["delta_ns"]) for p in att.get(key, [])]
        if att.get(rest):
            parts.append(("(rest)", att[rest]))
        if parts:
            out.append(f"<h3>{title}: {page_dur(att['total_ns'])} in all</h3>" + svg.waterfall(parts, title))
            cols: list[Col] = [("name", "part", fmt_text), ("a_ns", "A", page_dur), ("b_ns", "B", page_dur),
                               ("delta_ns", "B − A", page_dur), ("detail", "detail", fmt_text)]  # fmt: skip
            out.append(table(att.get(key, []), cols, f"attribution_{key}"))
    if att.get("by_host_op"):
        cols = [("name", "host op", fmt_text), ("a_ns", "A (median)", page_dur), ("b_ns", "B (median)", page_dur),
                ("delta_ns", "B − A", page_dur), ("idle_delta_ns", "GPU idle under it, B − A", page_dur),
                ("a_mean_ns", "A (mean)", page_dur), ("b_mean_ns", "B (mean)", page_dur)]  # fmt: skip
        out.append(
            "<h3>By host op of the step's thread (medians per step)</h3>"
            + svg.waterfall([(o["name"], o["delta_ns"]) for o in att["by_host_op"]], "host ops")
            + table(att["by_host_op"], cols, "attribution_by_host_op")
        )
    return "".join(out) or None


def _kernels(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: -abs(r["delta_ns"]))[:TOP_KERNELS]
    cols: list[Col] = [("status", "status", fmt_text), ("name", "kernel", fmt_text), ("a_count", "A count", num),
                       ("b_count", "B count", num), ("a_ns", "A time", page_dur), ("b_ns", "B time", page_dur),
                       ("delta_ns", "B − A", page_dur)]  # fmt: skip
    return svg.waterfall([(r["name"], r["delta_ns"]) for r in rows[:15]], "kernels changed") + table(
        rows, cols, "kernels_changed"
    )


def _metrics(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    cols: list[Col] = [("name", "metric", fmt_text), ("unit", "unit", fmt_text), ("a", "A", num),
                       ("b", "B", num), ("relative", "change", _rel)]  # fmt: skip
    return table(rows, cols, "metrics")


def _findings(rows: list[dict[str, Any]]) -> str | None:
    if not rows:
        return None
    rows = [{**r, "severity": severity_shown(r["status"], r.get("a_severity"), r["severity"])} for r in rows]
    cols: list[Col] = [("status", "status", fmt_text), ("severity", "severity", fmt_text),
                       ("rule_id", "rule", fmt_text), ("title", "title", fmt_text)]  # fmt: skip
    return table(rows, cols, "findings_changed")
