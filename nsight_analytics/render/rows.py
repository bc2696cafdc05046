"""Rows as text: a table for humans, CSV or JSON for machines, Markdown for documents.

Machine formats print nothing but data; JSON is an array of row objects. Results come straight
from DuckDB (`Result.of(relation)`) or from Python rows (`Result.of_records`): no pandas, whose
import alone would double the time of a quick `nsa query`.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

# The one --format set of every command (findings also take `text`, their table for people).
FORMATS = ("table", "csv", "json", "markdown")

_NUMERIC_TYPES = {
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE",
}  # fmt: skip


# Types whose Python values the csv module already writes as nsa does (None as an empty cell).
_CSV_AS_IS = _NUMERIC_TYPES - {"FLOAT", "DOUBLE"} | {"VARCHAR", "BOOLEAN"}


@dataclass(frozen=True)
class Result:
    """Column names, which columns are numbers (right-aligned in tables), and the rows; `types`
    are the DuckDB column types when the rows came from DuckDB."""

    columns: list[str]
    numeric: list[bool]
    rows: list[tuple[Any, ...]]
    types: list[str] | None = None

    @classmethod
    def of(cls, rel: duckdb.DuckDBPyRelation | None) -> Result:
        """A DuckDB relation's rows (None, e.g. from a DDL statement, gives no rows)."""
        if rel is None:
            return cls([], [], [])
        types = [str(t) for t in rel.types]
        numeric = [t in _NUMERIC_TYPES or t.startswith("DECIMAL") for t in types]
        return cls(list(rel.columns), numeric, rel.fetchall(), types)

    @classmethod
    def of_records(cls, records: Sequence[dict[str, Any]]) -> Result:
        columns: list[str] = []
        for r in records:
            columns += [k for k in r if k not in columns]
        rows = [tuple(r.get(c) for c in columns) for r in records]
        numeric = [
            any(v is not None for v in col)
            and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in col)
            for col in (zip(*rows, strict=True) if rows else [() for _ in columns])
        ]
        return cls(columns, numeric, rows)

    def records(self) -> list[dict[str, Any]]:
        return [{c: jsonable(v) for c, v in zip(self.columns, row, strict=True)} for row in self.rows]


def jsonable(value: Any) -> Any:
    """A JSON-ready value: NaN and infinities -> None (JSON has no such numbers, and a bare
    `Infinity` breaks strict parsers), dates as ISO text, decimals as floats, structs as objects."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else None
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return str(value)  # timedelta, UUID, bytes...


def to_json(res: Result) -> str:
    return json.dumps(res.records(), indent=2, ensure_ascii=False)


def _csv_cell(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return value  # csv writes inf, as for DOUBLE columns
    if isinstance(value, (list, tuple)):  # `a;b;c`, so the CSV stays one value per cell
        return ";".join(str(_csv_cell(v)) for v in value)
    value = jsonable(value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else value


def _not_nan(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def to_csv(res: Result) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(res.columns)
    # Converting only the columns that need it: 16k rows of nvtx_summary in 0.03 s, not 0.18 s.
    types = res.types or [""] * len(res.columns)
    convert = [
        None if t in _CSV_AS_IS else _not_nan if t in ("DOUBLE", "FLOAT") else _csv_cell for t in types
    ]
    if not any(convert):
        w.writerows(res.rows)
    else:
        w.writerows([v if c is None else c(v) for c, v in zip(convert, row, strict=True)] for row in res.rows)
    return buf.getvalue()


def _cell(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    value = value if isinstance(value, float) and math.isinf(value) else jsonable(value)  # tables say inf
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def to_table(res: Result, title: str | None = None, width: int | None = None) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_lines=False)
    for col, numeric in zip(res.columns, res.numeric, strict=True):
        table.add_column(Text(str(col)), justify="right" if numeric else "left", overflow="fold")
    for row in res.rows:
        # Text, not str: kernel names such as `[lambda() (instance 1)]` are not rich markup
        table.add_row(*(Text(_cell(v)) for v in row))
    buf = io.StringIO()
    # The terminal's width ($COLUMNS wins); 160 when printing to a pipe or file.
    width = width or shutil.get_terminal_size((160, 24)).columns
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(table)
    if not res.rows:
        buf.write("(no rows)\n")
    return buf.getvalue()


def _md_cell(value: Any) -> str:
    return _cell(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(res: Result) -> str:
    """A Markdown table (numbers right-aligned), as GitHub and most ticket systems show it."""
    lines = ["| " + " | ".join(_md_cell(c) for c in res.columns) + " |"]
    lines.append("|" + "|".join("---:" if n else "---" for n in res.numeric) + "|")
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in res.rows]
    return "\n".join(lines) + "\n"


def render(res: Result, fmt: str, title: str | None = None) -> str:
    if fmt == "markdown":
        return to_markdown(res)
    if fmt == "json":
        return to_json(res) + "\n"
    if fmt == "csv":
        return to_csv(res)
    return to_table(res, title)
