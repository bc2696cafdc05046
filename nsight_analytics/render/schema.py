"""The canonical tables (`nsa schema`): one row per column, or the docs/schema.md page."""

from __future__ import annotations

from collections.abc import Sequence

from .. import schema
from .rows import Result, render


def render_schema(tables: Sequence[schema.Table], fmt: str) -> str:
    if fmt == "markdown":
        return schema_page(tables) + "\n"
    rows = [
        {"table": t.name, "column": c.name, "type": c.type, "unit": c.unit, "meaning": c.doc}
        for t in tables
        for c in t.cols
    ]
    return render(Result.of_records(rows), fmt)


def schema_page(tables: Sequence[schema.Table]) -> str:
    """The schema reference page, docs/schema.md; a test checks the committed page equals this."""
    out = [
        "# Canonical tables",
        "",
        (
            "Generated from `nsight_analytics/schema.py` by `nsa schema --format markdown`; "
            "a test fails when this page and the code disagree."
        ),
        "",
        (
            "All times are nanoseconds relative to the capture session start; every table carries "
            "`report_id`, so many reports sit side by side. Columns an export lacks are NULL."
        ),
        "",
    ]
    for t in tables:
        out += [f"## `{t.name}`", "", t.doc, "", "| column | type | unit | meaning |", "|---|---|---|---|"]
        out += [f"| `{c.name}` | {c.type} | {c.unit} | {c.doc} |" for c in t.cols]
        out.append("")
    return "\n".join(out)
