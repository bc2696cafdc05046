"""Findings as text for a performance engineer, Markdown for a ticket, JSON or CSV for machines."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..rules.model import Finding
from ..units import dur
from .rows import Result, jsonable
from .rows import to_csv as rows_to_csv

F = TypeVar("F")

# `text` (also spelled `table`, the name every other command gives its human format)
FORMATS = ("text", "table", "csv", "json", "markdown")


def _savings(f: Finding) -> str:
    return f"est. savings {dur(f.est_savings_ns)}" if f.est_savings_ns is not None else "no savings estimate"


def grouped(findings: Sequence[F], field: Callable[[F, str], Any] = getattr) -> list[tuple[F, list[F]]]:
    """Findings in rank order, each with the lower-ranked findings of the same report that
    estimate the same saving (`same_saving_as`, either way round): one fix, shown once.
    `field(finding, name)` reads a field: getattr for `Finding`s, item access for their dicts."""
    taken: set[int] = set()
    groups: list[tuple[F, list[F]]] = []
    for i, f in enumerate(findings):
        if i in taken:
            continue
        same = [
            j
            for j, g in enumerate(findings)
            if j > i
            and j not in taken
            and field(g, "report_id") == field(f, "report_id")
            and (
                field(g, "same_saving_as") == field(f, "rule_id")
                or field(f, "same_saving_as") == field(g, "rule_id")
            )
        ]
        taken.update(same)
        groups.append((f, [findings[j] for j in same]))
    return groups


def to_text(findings: list[Finding], reports: dict[int, str] | None = None, width: int = 100) -> str:
    if not findings:
        return "No findings: no rule fired on the selected reports.\n"
    reports = reports or {}
    out = []
    groups = grouped(findings)
    for i, (f, same) in enumerate(groups, 1):
        where = f"report {f.report_id}" + (f" ({reports[f.report_id]})" if f.report_id in reports else "")
        head = f"{i}. [{f.severity.upper()}] {f.title}"
        out.append(textwrap.fill(head, width=width, subsequent_indent=" " * (len(str(i)) + 2)))
        out.append(textwrap.fill(f"{f.rule_id} | {where} | {_savings(f)}", width, initial_indent="   ",
                                 subsequent_indent="     "))  # fmt: skip
        for para, lead in ((f.message, "   "), ("Fix: " + f.recommendation, "   ")):
            out.append(textwrap.fill(para, width=width, initial_indent=lead, subsequent_indent=lead))
        for g in same:
            head = f"Same saving, also found by {g.rule_id} [{g.severity.upper()}]: {g.title}. {g.message}"
            out.append(textwrap.fill(head, width=width, initial_indent="   + ", subsequent_indent="     "))
        out.append("")
    counts = {s: sum(f.severity == s for f, _ in groups) for s in ("critical", "warning", "info")}
    merged = len(findings) - len(groups)
    also = (
        f" ({merged} more finding{'s' if merged > 1 else ''} shown with the one it repeats)" if merged else ""
    )
    out.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) + also + ".")
    return "\n".join(out) + "\n"


def to_markdown(findings: list[Finding], reports: dict[int, str] | None = None) -> str:
    if not findings:
        return "No findings.\n"
    reports = reports or {}
    out = ["# Findings", ""]
    for i, (f, same) in enumerate(grouped(findings), 1):
        where = reports.get(f.report_id, f"report {f.report_id}")
        out += [
            f"## {i}. {f.title}",
            "",
            f"**{f.severity}** · `{f.rule_id}` · report {f.report_id} ({where}) · {_savings(f)}",
            "",
            f.message,
            "",
            f"**Fix:** {f.recommendation}",
            "",
        ]
        for g in same:
            out += [f"*Same saving, also found by `{g.rule_id}` ({g.severity}):* {g.title}. {g.message}", ""]
    return "\n".join(out)


def to_json(findings: list[Finding]) -> str:
    # NaN and infinities as null: JSON has no such numbers
    return json.dumps(jsonable([f.to_dict() for f in findings]), indent=2, ensure_ascii=False) + "\n"


def to_csv(findings: list[Finding], reports: dict[int, str] | None = None) -> str:
    """One row per finding, ranked; the evidence as one JSON object per cell."""
    reports = reports or {}
    rows = [
        {
            "rank": i,
            "severity": f.severity,
            "rule_id": f.rule_id,
            "report_id": f.report_id,
            "file": reports.get(f.report_id),
            "title": f.title,
            "est_savings_ns": f.est_savings_ns,
            "message": f.message,
            "recommendation": f.recommendation,
            "evidence": f.evidence,
        }
        for i, f in enumerate(findings, 1)
    ]
    return rows_to_csv(Result.of_records(rows))


def _text_width() -> int:
    """Paragraphs as wide as the terminal, up to 100 columns (100 in a pipe)."""
    return max(min(shutil.get_terminal_size((100, 24)).columns, 100), 40)


def render(findings: list[Finding], fmt: str, reports: dict[int, str] | None = None) -> str:
    renderers: dict[str, Callable[[], str]] = {
        "text": lambda: to_text(findings, reports, _text_width()),
        "table": lambda: to_text(findings, reports, _text_width()),
        "csv": lambda: to_csv(findings, reports),
        "markdown": lambda: to_markdown(findings, reports),
        "json": lambda: to_json(findings),
    }
    return renderers[fmt]()
