"""The canonical tables (`nsa schema`): one row per column, or the docs/schema.md page."""

from __future__ import annotations

from collections.abc import Sequence

from .. import schema
from .rows import Result, render


def render_schema(tables: Sequence[schema.Table], fmt: str) -> str:
    if fmt == "markdown":
        return schema.render_markdown() + "\n"
    rows = [
        {"table": t.name, "column": c.name, "type": c.type, "unit": c.unit, "meaning": c.doc}
        for t in tables
        for c in t.cols
    ]
    return render(Result.of_records(rows), fmt)
