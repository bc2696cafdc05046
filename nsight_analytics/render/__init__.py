"""The one render layer: rows, findings, rules and the schema as table, CSV, JSON or Markdown.

Analysis code returns data (DuckDB relations, findings, dataclasses); only this package turns it
into text, and every command offers the same `--format` set (`FORMATS`).

    from nsight_analytics import render
    print(render.render(render.Result.of(relation), "markdown"))
"""

from __future__ import annotations

from ..rules.units import dur as duration
from .diff import render as render_diff
from .findings import render as render_findings
from .html import page as render_html
from .queries import queries_page
from .rows import FORMATS, Result, jsonable, render, to_csv, to_json, to_markdown, to_table
from .rules import render_rules
from .schema import render_schema, schema_page
from .summary import render as render_summary
from .summary import render_run as render_run_summary

__all__ = [
    "FORMATS",
    "Result",
    "duration",
    "jsonable",
    "queries_page",
    "render",
    "render_diff",
    "render_findings",
    "render_html",
    "render_rules",
    "render_run_summary",
    "render_schema",
    "render_summary",
    "schema_page",
    "to_csv",
    "to_json",
    "to_markdown",
    "to_table",
]
