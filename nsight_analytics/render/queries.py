"""The query reference page, docs/queries.md, from the library's comment contracts."""

from __future__ import annotations

from .. import queries


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
