"""The one render layer: rows, findings, rules and the schema as table, CSV, JSON or Markdown.

Analysis code returns data (DuckDB relations, findings, dataclasses); only this package turns it
into text, and every command offers the same `--format` set (`FORMATS`).

    from nsight_analytics import render
    print(render.render(render.Result.of(relation), "markdown"))

Each name is imported from its module on first use (PEP 562 `__getattr__`): `nsa --help` reads
`FORMATS` without loading the HTML page's modules or DuckDB.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..outputs import write_atomic
    from ..units import dur as duration
    from .diff import render as render_diff
    from .findings import render as render_findings
    from .html import page as render_html
    from .queries import queries_page, query_contract, query_headline, query_index
    from .rows import (
        COPY_FORMATS,
        FORMATS,
        ROW_FORMATS,
        Result,
        copy_rows,
        head,
        jsonable,
        render,
        stream_rows,
        to_csv,
        to_json,
        to_markdown,
        to_table,
    )
    from .rules import explain_rule, render_rules
    from .schema import render_schema, schema_page
    from .summary import render as render_summary
    from .summary import render_run as render_run_summary

# name -> (module, its name there)
_NAMES = {
    "COPY_FORMATS": (".rows", "COPY_FORMATS"),
    "FORMATS": (".rows", "FORMATS"),
    "ROW_FORMATS": (".rows", "ROW_FORMATS"),
    "Result": (".rows", "Result"),
    "copy_rows": (".rows", "copy_rows"),
    "duration": ("..units", "dur"),
    "explain_rule": (".rules", "explain_rule"),
    "head": (".rows", "head"),
    "jsonable": (".rows", "jsonable"),
    "queries_page": (".queries", "queries_page"),
    "query_contract": (".queries", "query_contract"),
    "query_headline": (".queries", "query_headline"),
    "query_index": (".queries", "query_index"),
    "render": (".rows", "render"),
    "render_diff": (".diff", "render"),
    "render_findings": (".findings", "render"),
    "render_html": (".html", "page"),
    "render_rules": (".rules", "render_rules"),
    "render_run_summary": (".summary", "render_run"),
    "render_schema": (".schema", "render_schema"),
    "render_summary": (".summary", "render"),
    "schema_page": (".schema", "schema_page"),
    "stream_rows": (".rows", "stream_rows"),
    "to_csv": (".rows", "to_csv"),
    "to_json": (".rows", "to_json"),
    "to_markdown": (".rows", "to_markdown"),
    "to_table": (".rows", "to_table"),
    "write_atomic": ("..outputs", "write_atomic"),  # every file nsa writes appears whole or not at all
}


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _NAMES[name]
    value = getattr(import_module(module, __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES})


__all__ = [
    "COPY_FORMATS",
    "FORMATS",
    "ROW_FORMATS",
    "Result",
    "copy_rows",
    "duration",
    "explain_rule",
    "head",
    "jsonable",
    "queries_page",
    "query_contract",
    "query_headline",
    "query_index",
    "render",
    "render_diff",
    "render_findings",
    "render_html",
    "render_rules",
    "render_run_summary",
    "render_schema",
    "render_summary",
    "schema_page",
    "stream_rows",
    "to_csv",
    "to_json",
    "to_markdown",
    "to_table",
    "write_atomic",
]
