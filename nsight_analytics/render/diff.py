"""`nsa diff` as text for a terminal (80 columns), Markdown for a pull-request comment, or JSON.

The JSON is `Diff.to_dict()` (plus the gate, when one was asked for), so
`Diff.from_dict(json.loads(text))` gives the result back.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Callable
from typing import Any

from ..diff.gate import Gate
from ..diff.model import Attribution, Diff, HostOpChange, Metric, Part, Side
from ..units import size, table_dur, table_signed
from . import diff_runs
from .rows import Result, distinct_short_names, jsonable, short_kernel_name
from .rows import to_markdown as rows_to_markdown

FORMATS = ("table", "json", "markdown")
WIDTH = 80
TOP_KERNELS = 10

METRIC_NAMES = {
    "step_time": "GPU step time (median)",
    "mean_step_time": "GPU step time (mean)",
    "host_step_time": "host step time (median)",
    "gpu_busy": "GPU busy per step",
    "exposed_copy": "exposed copies per step",
    "gpu_idle": "GPU idle per step",
    "kernels_per_step": "kernels per step",
    "memory_peak": "device memory peak",
    "energy_per_step": "energy per step",
}


def _value(unit: str, v: float | None) -> str:
    if v is None:
        return "-"
    if unit == "ns":
        return table_dur(v)
    if unit == "byte":
        return size(v)
    if unit == "J":
        return f"{v:.3g} J"
    return f"{v:,.0f}" if abs(v - round(v)) < 0.05 else f"{v:,.1f}"


def _change(m: Metric) -> str:
    if m.delta is None:
        return "-"
    if abs(m.delta) < (0.05 if m.unit == "count" else 0.5):
        return "0"
    if m.unit == "ns":
        text = table_signed(m.delta)
    elif m.unit == "byte":
        text = ("+" if m.delta >= 0 else "-") + size(abs(m.delta))
    else:
        text = ("+" if m.delta >= 0 else "-") + _value(m.unit, abs(m.delta))
    return text + (f" ({m.relative * 100:+.1f}%)" if m.relative is not None and m.delta else "")


def headline(d: Diff) -> str:
    """The verdict in one line: 'IMPROVEMENT: GPU step time -21.7% (-5.63 ms, 95% CI -24.6% .. -19.1%)',
    'SCALES AT 84% (weak scaling, 2 -> 4 ranks)'."""
    runs = diff_runs.headline(d)
    if runs is not None:
        return runs
    head = d.verdict.upper()
    c = d.step_change
    if c is None or not d.comparable:
        return head
    ci = (
        f"{c.confidence:.0%} CI {c.ci_relative[0] * 100:+.1f}% .. {c.ci_relative[1] * 100:+.1f}%"
        if c.ci_relative
        else f"{len(d.a.step_ns)} vs {len(d.b.step_ns)} steps: no {c.confidence:.0%} CI"
    )
    return f"{head}: GPU step time {c.relative * 100:+.1f}% ({table_signed(c.estimate_ns)}, {ci})"


def _side_lines(d: Diff) -> list[str]:
    out = []
    if d.run_a is not None and d.run_b is not None:
        return [f"A (before)  {diff_runs.run_line(d.run_a)}", f"B (after)   {diff_runs.run_line(d.run_b)}"]
    for label, side in (("A", d.a), ("B", d.b)):
        for i, (rid, f) in enumerate(zip(side.report_ids, side.files)):
            lead = f"{label} (before)" if label == "A" else f"{label} (after) "
            out.append(f"{lead if i == 0 else ' ' * len(lead)}  report {rid}  {f}")
    return out


def _wrap(text: str, indent: int, width: int = WIDTH) -> list[str]:
    pad = " " * indent
    return textwrap.wrap(text, width=width, initial_indent=pad, subsequent_indent=pad) or [pad]


def _cut_distinct(texts: list[str], width: int) -> list[str]:
    """`texts` cut to `width` with `…`: at the end (before a closing `<...>`, which tells kernels
    apart: `vectorized_elem…<AUnaryFunctor>`); where that would make two different texts read
    the same, in the middle; where even that would, around the first character that differs
    (`vectorized_e…addcdiv_cuda_kernel(…`); where even that would, not at all."""

    def end(t: str) -> str:
        if len(t) <= width:
            return t
        tail = t[t.find("<") :] if t.endswith(">") and "<" in t else ""  # what tells it apart
        if tail and width - 1 - len(tail) >= 8:
            return t[: width - 1 - len(tail)] + "…" + tail
        return t[: width - 1] + "…"

    def middle(t: str) -> str:
        head = (width - 1) // 2
        return t if len(t) <= width else t[:head] + "…" + t[len(t) - (width - 1 - head) :]

    def around(t: str, others: set[str]) -> str:
        first = max(len(os.path.commonprefix([t, o])) for o in others - {t})
        head = min(12, width // 3)
        if len(t) <= width or first < width - 1:
            return t if len(t) <= width else t[: width - 1] + "…"
        rest = t[first - 4 :]
        rest = rest if len(rest) <= width - head - 1 else rest[: width - head - 2] + "…"
        return t[:head] + "…" + rest

    out = [end(t) for t in texts]
    for cut in (lambda t, _: middle(t), around, lambda t, _: t):
        sources: dict[str, set[str]] = {}
        for t, o in zip(texts, out):
            sources.setdefault(o, set()).add(t)
        out = [cut(t, sources[o]) if len(sources[o]) > 1 else o for t, o in zip(texts, out)]
    return out


def _grid(rows: list[list[str]], indent: int = 2, width: int = WIDTH) -> list[str]:
    """Rows of cells: the first left-aligned (cut to fit, different ones kept different), the
    others right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rest = sum(widths[1:]) + 2 * (len(widths) - 1)
    first = max(min(widths[0], width - indent - rest - 2), 12)
    names = _cut_distinct([r[0] for r in rows], first)
    first = max(len(n) for n in names)
    out = []
    for r, name in zip(rows, names):
        cells = [name.ljust(first)] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        out.append((" " * indent + "  ".join(cells)).rstrip())
    return out


def _method(d: Diff) -> str:
    runs = diff_runs.method(d)
    if d.scaling is not None and runs is not None:
        return runs
    c = d.step_change
    n = f"{len(d.a.step_ns)} vs {len(d.b.step_ns)} steady steps"
    stat = f"{c.statistic}, {n}" if c else n
    return (
        f"{stat}. Step times are GPU-side: from the first GPU start of the work launched in a step "
        "to the next step's (warm-up steps left out); shifts under "
        f"{d.noise_floor:.0%} are noise." + (f" {runs}" if runs else "")
    )


def _parts(parts: list[Part], remainder: float, total: float, title: str) -> list[str]:
    rows = [[title, "A", "B", "change"]]
    details = []
    for p in parts:
        rows.append([p.name, table_dur(p.a_ns), table_dur(p.b_ns), table_signed(p.delta_ns)])
        details.append(p.detail)
    rows.append(["remainder (parts not listed)", "", "", table_signed(remainder)])
    rows.append(["total", "", "", table_signed(total)])
    lines = _grid(rows)
    out = [lines[0]]
    for i, line in enumerate(lines[1:]):
        out.append(line)
        if i < len(details) and details[i]:
            out += _wrap(details[i], 6)
    return out


def _host_ops(a: Attribution) -> list[str]:
    """The host ops of the step's thread, medians per step: host time, and the change of the
    GPU idle time under them."""
    rows = [["by host op (medians per step)", "A", "B", "change", "GPU idle"]]
    for o in a.by_host_op:
        rows.append(
            [
                o.name,
                table_dur(o.a_ns),
                table_dur(o.b_ns),
                table_signed(o.delta_ns),
                table_signed(o.idle_delta_ns),
            ]
        )
    return _grid(rows)


def _host_records(ops: list[HostOpChange]) -> list[dict[str, Any]]:
    return [
        {"host op": o.name, "A (median)": table_dur(o.a_ns), "B (median)": table_dur(o.b_ns), "change": table_signed(o.delta_ns),
         "GPU idle under it": f"{table_dur(o.a_idle_ns)} -> {table_dur(o.b_idle_ns)} ({table_signed(o.idle_delta_ns)})",
         "mean A -> B": f"{table_dur(o.a_mean_ns)} -> {table_dur(o.b_mean_ns)}"}
        for o in ops
    ]  # fmt: skip


_CALLED = re.compile(r"(?<!\w)(?!operator\b)([A-Za-z_]\w*)\s*\(")  # a function a functor is a lambda of
_ANONYMOUS = re.compile(r"(<unnamed>|\(anonymous namespace\))::")
_NAMESPACE = re.compile(r"\b\w+::")
_SPACE = re.compile(r"\s*([,<>()&*])\s*")
_CAST = re.compile(r"\((?:unsigned |signed )?\w+\)(?=-?\d)")


def _kernel_names(names: list[str]) -> list[str]:
    """Short kernel names that tell different kernels apart (`distinct_short_names`); where two
    still read the same (functors that are lambdas: `vectorized_elementwise_kernel<4, ...
    lerp_scalar_kernel(...)::[lambda...]>`), the short name with the first function its template
    arguments name (`vectorized_elementwise_kernel<lerp_scalar_kernel>`); else the name without
    namespaces, casts and argument list (`reduce_kernel<512,1,ReduceOp<float,MeanOps<...>...>>`)."""
    plain = [_ANONYMOUS.sub("", n) for n in names]  # never tells two kernels apart
    shorts = distinct_short_names(plain)
    for fallback in (_named_function, _compact):
        sources: dict[str, set[str]] = {}
        for n, s in zip(plain, shorts):
            sources.setdefault(s, set()).add(n)
        shorts = [fallback(n, s) if len(sources[s]) > 1 else s for n, s in zip(plain, shorts)]
    return shorts


def _named_function(name: str, short: str) -> str:
    start = name.find("<")
    found = _CALLED.search(name, start) if start >= 0 else None
    return f"{short_kernel_name(name)}<{found[1]}>" if found else short


def _compact(name: str, short: str) -> str:
    start = name.find("<")
    if start < 0:
        return name
    depth, end = 0, len(name)
    for i in range(start, len(name)):  # the outer template's closing `>`
        depth += (name[i] == "<") - (name[i] == ">")
        if depth == 0:
            end = i + 1
            break
    args = _SPACE.sub(r"\1", _CAST.sub("", _NAMESPACE.sub("", name[start:end])))
    return short_kernel_name(name) + args


def _kernel_rows(d: Diff, top: int) -> list[list[str]]:
    """The kernels that changed most; a name starts with `+` when added, `-` when removed."""
    ks = d.kernels[:top]
    names = _kernel_names([k.name for k in d.kernels])[:top]  # distinct among all, listed or not
    mark = {"added": "+", "removed": "-", "changed": " "}
    rows = [["  kernel", "A n", "B n", "A time", "B time", "change"]]
    for k, name in zip(ks, names):
        rows.append(
            [f"{mark[k.status]} {name}", _count(k.a_count), _count(k.b_count), table_dur(k.a_ns), table_dur(k.b_ns),
             table_signed(k.delta_ns)]
        )  # fmt: skip
    return rows


def _count(n: float) -> str:
    return f"{n:,.0f}" if abs(n - round(n)) < 0.05 else f"{n:,.1f}"


def _counts(d: Diff) -> str:
    n = {s: sum(k.status == s for k in d.kernels) for s in ("added", "removed", "changed")}
    return f"{n['added']} added, {n['removed']} removed, {n['changed']} in both"


def _finding_lines(d: Diff) -> list[str]:
    out = []
    for f in d.findings:
        savings = f.b_savings_ns if f.status != "resolved" else f.a_savings_ns
        est = f" (est. savings {table_dur(savings)})" if savings else ""
        out += _wrap(f"{f.status:<10} [{f.severity_shown}] {f.rule_id}: {f.title}{est}", 2)
    return out


def to_text(d: Diff, gate: Gate | None = None, top: int = TOP_KERNELS) -> str:
    out = ["nsa diff", *_side_lines(d), "", headline(d)]
    out += _wrap(d.reason, 2)
    if d.comparable and not d.same_run:
        out += _wrap(_method(d), 2)
    out += ["", "Checks"] if d.checks else []
    for c in d.checks:
        status = "ok" if c.ok and not c.warning else "note" if c.ok else "FAIL"
        lead = f"  {status:<4} {c.name:<8} "
        out += textwrap.wrap(c.detail, width=WIDTH, initial_indent=lead, subsequent_indent=" " * len(lead))
    a = d.attribution
    if a is not None:
        out += [
            "",
            f"Where the step time went (mean GPU step {table_dur(d.a.mean_step_ns)} -> {table_dur(d.b.mean_step_ns)})",
        ]
        for line in a.summary:
            out += _wrap(line, 2)
        out += _parts(a.by_phase, a.phase_remainder_ns, a.total_ns, "by phase (NVTX range)")
        out += [""]
        out += _parts(a.by_cause, a.cause_remainder_ns, a.total_ns, "by cause")
        if a.by_host_op:
            out += ["", *_host_ops(a)]
    out += diff_runs.text_sections(d, _grid, _wrap)
    if d.metrics:
        out += ["", "Per steady step"]
        rows = [["metric", "A", "B", "change"]]
        rows += [
            [METRIC_NAMES.get(m.name, m.name), _value(m.unit, m.a), _value(m.unit, m.b), _change(m)]
            for m in d.metrics
        ]
        out += _grid(rows)
    if d.kernels:
        out += ["", f"Kernels per step (names normalised across tools): {_counts(d)}"]
        out.append("  (+ added in B, - removed)")
        out += _grid(_kernel_rows(d, top))
        if len(d.kernels) > top:
            out.append(f"  ... {len(d.kernels) - top} more (--format json lists every kernel)")
    if d.findings:
        n = {s: sum(f.status == s for f in d.findings) for s in ("resolved", "new", "persisting")}
        out += ["", f"Findings: {n['resolved']} resolved, {n['new']} new, {n['persisting']} persisting"]
        out += _finding_lines(d)
    if gate is not None:
        out += ["", *_wrap(gate.message, 0)]
    return "\n".join(out) + "\n"


def _md_table(records: list[dict[str, Any]]) -> str:
    return rows_to_markdown(Result.of_records(records))


def _md_files(side: Side) -> str:
    return ", ".join(f"`{f}` (report {r})" for r, f in zip(side.report_ids, side.files))


def _md_sides(d: Diff) -> list[str]:
    if d.run_a is not None and d.run_b is not None:
        return [f"A (before): {diff_runs.run_line(d.run_a)}  ", f"B (after): {diff_runs.run_line(d.run_b)}"]
    return [f"A (before): {_md_files(d.a)}  ", f"B (after): {_md_files(d.b)}"]


def to_markdown(d: Diff, gate: Gate | None = None, top: int = TOP_KERNELS) -> str:
    """A pull-request comment: the verdict first, the evidence in collapsible sections."""
    out = [f"### nsa diff: {headline(d)}", ""]
    out += [*_md_sides(d), "", d.reason, ""]
    if gate is not None:
        out += [f"**{gate.message}**", ""]
    if d.comparable and not d.same_run:
        out += [f"_{_method(d)}_", ""]
    out += diff_runs.markdown_sections(d, _md_table)
    if d.metrics:
        out.append(
            _md_table(
                [
                    {"per steady step": METRIC_NAMES.get(m.name, m.name), "A": _value(m.unit, m.a),
                     "B": _value(m.unit, m.b), "change": _change(m)}
                    for m in d.metrics
                ]
            )
        )  # fmt: skip
    if d.checks:
        out += ["<details><summary>Checks</summary>", ""]
        out.append(
            _md_table(
                [{"check": c.name, "ok": "yes" if c.ok else "no", "detail": c.detail} for c in d.checks]
            )
        )
        out += ["</details>", ""]
    a = d.attribution
    if a is not None:
        out += ["<details open><summary>Where the step time went</summary>", ""]
        if a.summary:
            out += [" ".join(a.summary), ""]
        rows = [
            {
                "phase": p.name,
                "A": table_dur(p.a_ns),
                "B": table_dur(p.b_ns),
                "change": table_signed(p.delta_ns),
                "what changed": p.detail,
            }
            for p in a.by_phase
        ]
        rows.append({"phase": "remainder", "change": table_signed(a.phase_remainder_ns)})
        rows.append({"phase": "**total**", "change": table_signed(a.total_ns)})
        out.append(_md_table(rows))
        causes = [
            {
                "cause": p.name,
                "A": table_dur(p.a_ns),
                "B": table_dur(p.b_ns),
                "change": table_signed(p.delta_ns),
            }
            for p in a.by_cause
        ]
        out += [_md_table(causes)]
        if a.by_host_op:
            out.append(_md_table(_host_records(a.by_host_op)))
        out += ["</details>", ""]
    if d.kernels:
        out += [f"<details><summary>Kernels: {_counts(d)}</summary>", ""]
        rows_k = _kernel_rows(d, top)
        out.append(_md_table([dict(zip(rows_k[0], r)) for r in rows_k[1:]]))
        out += ["</details>", ""]
    if d.findings:
        out += ["<details><summary>Findings</summary>", ""]
        out.append(
            _md_table(
                [
                    {"status": f.status, "rule": f.rule_id, "severity": f.severity_shown, "finding": f.title,
                     "savings A": table_dur(f.a_savings_ns) if f.a_savings_ns else "",
                     "savings B": table_dur(f.b_savings_ns) if f.b_savings_ns else ""}
                    for f in d.findings
                ]
            )
        )  # fmt: skip
        out += ["</details>", ""]
    return "\n".join(out)


def to_json(d: Diff, gate: Gate | None = None) -> str:
    data = d.to_dict()
    if gate is not None:
        data["gate"] = {"metric": gate.metric, "threshold_pct": gate.threshold_pct, "failed": gate.failed,
                        "message": gate.message}  # fmt: skip
    return json.dumps(jsonable(data), indent=2, ensure_ascii=False) + "\n"


def render(d: Diff, fmt: str, gate: Gate | None = None) -> str:
    renderers: dict[str, Callable[[], str]] = {
        "table": lambda: to_text(d, gate),
        "markdown": lambda: to_markdown(d, gate),
        "json": lambda: to_json(d, gate),
    }
    return renderers[fmt]()
