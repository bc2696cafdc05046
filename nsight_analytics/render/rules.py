"""The rules and their thresholds (`nsa rules`): one table each for people, the rules only for
machines, and the Markdown reference tables."""

from __future__ import annotations

import inspect
import shutil
import textwrap
from collections.abc import Sequence

from ..rules.config import Threshold
from ..rules.model import Rule
from .rows import Result, render, to_table


def _rows(rules: Sequence[Rule], thresholds: Sequence[Threshold]) -> list[dict[str, str]]:
    defaults = {t.name: t.default for t in thresholds}
    return [
        {
            "rule": r.id,
            "reads": r.needs_text,
            "severity": " / ".join(r.severities),
            "scope": r.scope,
            "thresholds": ", ".join(f"{t}={defaults[t]}" for t in r.thresholds),
            "looks for": r.summary,
        }
        for r in rules
    ]


def _blocks(rows: list[dict[str, str]], width: int) -> str:
    """One block per rule for people: a table of six text columns folds every threshold name
    at 80 columns; a heading line and wrapped text read whole. A rule that judges a run (the
    ranks of a job together) says `per run` before what it looks for; the others judge each
    report."""
    out = ["rules", ""]
    for x in rows:
        out.append(f"{x['rule']}  ({x['severity']}; reads {x['reads']})")
        wrap = textwrap.TextWrapper(width=max(width, 40), initial_indent="  ", subsequent_indent="    ")
        out += wrap.wrap(("per run: " if x["scope"] == "run" else "") + x["looks for"])
        if x["thresholds"]:
            out += wrap.wrap("thresholds: " + x["thresholds"])
        out.append("")
    return "\n".join(out) + "\n"


def render_rules(
    rules: Sequence[Rule], thresholds: Sequence[Threshold], fmt: str, width: int | None = None
) -> str:
    """`nsa rules` in `fmt`; tables fit `width` (the terminal's by default)."""
    width = width or shutil.get_terminal_size((160, 24)).columns
    rows = _rows(rules, thresholds)
    if fmt == "markdown":
        lines = ["| rule | reads | severity | scope | thresholds | looks for |", "|---|---|---|---|---|---|"]
        lines += [
            f"| `{x['rule']}` | {x['reads']} | {x['severity']} | {x['scope']} | {x['thresholds']} | {x['looks for']} |"
            for x in rows
        ]
        lines += ["", "| threshold | default | unit | meaning |", "|---|---|---|---|"]
        lines += [f"| `{t.name}` | {t.default} | {t.unit} | {t.doc} |" for t in thresholds]
        return "\n".join(lines) + "\n"
    if fmt in ("json", "csv"):  # machine formats: the rules only (`nsa rules` tables show thresholds)
        return render(Result.of_records(rows), fmt)
    text = _blocks(rows, width)
    text += to_table(
        Result.of_records([{"threshold": t.name, "default": str(t.default), "unit": t.unit, "meaning": t.doc}
                           for t in thresholds]),
        "thresholds (change with --config FILE or --set name=value)",
    )  # fmt: skip
    return text


def explain_rule(r: Rule, thresholds: Sequence[Threshold], width: int | None = None) -> str:
    """`nsa rules --explain ID`: the rule's whole documentation (its check's docstring, or a rule
    file's summary, conditions and fix), what it reads and its thresholds with their values."""
    width = min(width or shutil.get_terminal_size((100, 24)).columns, 100)
    values = {t.name: t.default for t in thresholds}
    scope = "per run" if r.scope == "run" else "per report"
    out = [f"{r.id}  ({' / '.join(r.severities)}; reads {r.needs_text}; {scope})", ""]
    for para in inspect.cleandoc(r.check.__doc__ or "").split("\n\n"):
        lines = para.splitlines()
        if any(line.startswith((" ", "-", "*")) for line in lines[1:]):
            out += [*lines, ""]  # a list or an example: as written
        else:
            out += [*textwrap.wrap(" ".join(para.split()), width), ""]
    if r.queries:
        out += [f"Queries: {', '.join(r.queries)} (`nsa query --list NAME`).", ""]
    if r.declared:
        out.append("Thresholds (--set NAME=VALUE, or the settings file):")
        for t in r.declared:
            out += textwrap.wrap(
                f"{t.name} = {values.get(t.name, t.default)} ({t.unit}): {t.doc}",
                width,
                initial_indent="  ",
                subsequent_indent="      ",
            )
    return "\n".join(out).rstrip() + "\n"
