"""The query reference page, docs/queries.md, from the library's comment contracts."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterable

from .. import queries
from ..units import clip


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary(doc: str) -> str:
    """The contract's headline: its text up to the first ': ' or '. ' outside parentheses."""
    depth = 0
    for i, ch in enumerate(doc):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch in ".:" and doc[i + 1 : i + 2] in {" ", ""}:
            return doc[:i] + "."
    return doc


def queries_page() -> str:
    """The query reference page, docs/queries.md: one section per query, from its contract."""
    lib = queries.library()
    out = [
        "# Query library",
        "",
        (
            "Generated from the comment contracts of `queries/**/*.sql` by "
            "`python -m nsight_analytics.docs`; a test fails when this page and the code disagree."
        ),
        "",
        (
            "Run a query with `nsa query NAME -p name=value`, from Python with "
            "`nsa.query(con, NAME, name=value)`, or as a table macro in SQL on any connection from "
            "`nsa.connect()` or `nsa.engine()`: `SELECT * FROM NAME(name := value)`. In SQL a parameter "
            "named like a column drops its `_id` (`report_id` is `report :=`), because a DuckDB macro "
            "parameter hides the column of the same name; the `in SQL` column says. Parameters left out "
            "take their default."
        ),
        "",
        "| query | family | answers |",
        "|---|---|---|",
    ]
    for q in lib.values():
        out.append(f"| [`{q.name}`](#{q.name}) | {q.family} | {_cell(summary(q.doc))} |")
    out.append("")
    for q in lib.values():
        out += [f"## `{q.name}`", "", f"`queries/{q.family}/{q.path.name}`", "", q.doc, ""]
        out += ["Reads " + ", ".join(f"`{t}`" for t in sorted(q.tables())) + ".", ""]
        if q.params:
            out += ["| parameter | in SQL | type | default | meaning |", "|---|---|---|---|---|"]
            for p in q.params:
                default = f"`{p.default}`" if p.default is not None else "required"
                in_sql = queries.macro_param_name(p.name, q)
                out.append(f"| `{p.name}` | `{in_sql}` | {p.type} | {_cell(default)} | {_cell(p.doc)} |")
            out.append("")
        out += ["| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{c.name}` | {c.type} | {_cell(c.doc)} |" for c in q.columns]
        out.append("")
    return "\n".join(out)


def query_headline(q: queries.Query) -> str:
    """What a query answers, in its first words (`nsa query --list`, shell completion)."""
    return summary(q.doc)


def _width(width: int | None) -> int:
    """The terminal's width ($COLUMNS wins), 160 in a pipe, as tables are."""
    return max(width or shutil.get_terminal_size((160, 24)).columns, 40)


def query_index(lib: Iterable[queries.Query], width: int | None = None) -> str:
    """`nsa query --list`: one line per query, its name and headline cut to the width, under a
    line naming its family (the input the query reads: nsys, ncu, torch...)."""
    qs = list(lib)
    width = _width(width)
    name_w = max((len(q.name) for q in qs), default=0)
    lines: list[str] = []
    family = None
    for q in qs:
        if q.family != family:
            family = q.family
            lines.append(f"{family}:")
        lines.append(f"  {q.name:<{name_w}}  {clip(query_headline(q), width - name_w - 4)}".rstrip())
    lines.append(
        clip(
            f"{len(qs)} queries; `nsa query --list NAME` shows one's parameters and columns.",
            width,
        )
    )
    return "\n".join(lines) + "\n"


def _param_line(p: queries.Param) -> str:
    default = "required" if p.required else f"default {p.default}"
    allowed = f"; one of {', '.join(p.allowed)}" if p.allowed else ""
    return f"{p.name} ({p.type}, {default}{allowed}): {p.doc}"


def query_contract(q: queries.Query, width: int | None = None) -> str:
    """`nsa query --list NAME`: the query's whole contract, wrapped to the width."""
    width = min(_width(width), 100)

    def para(text: str, indent: str = "", hang: str = "") -> list[str]:
        return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=hang or indent) or [indent]

    out = [f"{q.name} ({q.family}: {q.source})", ""]
    out += [*para(q.doc), ""]
    out += [*para("Reads " + ", ".join(sorted(q.tables())) + "."), ""]
    if q.params:
        out.append(f"Parameters (nsa query {q.name} -p NAME=VALUE):")
        for p in q.params:
            out += para(_param_line(p), "  ", "      ")
        out.append("")
    out.append("Columns:")
    for c in q.columns:
        out += para(f"{c.name} ({c.type}): {c.doc}", "  ", "      ")
    return "\n".join(out) + "\n"
