"""Reference pages generated from code, so no test-less doc can drift from what ships.

docs/schema.md comes from `schema.render_markdown()` (`nsa schema --format markdown`);
docs/queries.md comes from the query contracts, here. `python -m nsight_analytics.docs`
rewrites both; tests/test_docs.py fails when a committed page differs from its generator.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import queries, schema


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


def render_queries_markdown() -> str:
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


def pages() -> dict[str, str]:
    """Every generated page, by path relative to the repository root, as committed."""
    return {
        "docs/schema.md": schema.render_markdown() + "\n",
        "docs/queries.md": render_queries_markdown() + "\n",
    }


def write(root: Path) -> list[Path]:
    written = []
    for rel, text in pages().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """`python -m nsight_analytics.docs [ROOT]`: rewrite the generated pages under ROOT.

    ROOT defaults to the checkout this module lives in (else the current folder), so the
    command does the same thing from any directory.
    """
    args = sys.argv[1:] if argv is None else argv
    checkout = Path(__file__).resolve().parents[1]
    root = Path(args[0]) if args else checkout if (checkout / "pyproject.toml").is_file() else Path.cwd()
    for path in write(root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
