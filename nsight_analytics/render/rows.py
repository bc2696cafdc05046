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
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..rules.units import dur, size

if TYPE_CHECKING:
    import duckdb


def rate(gb_per_s: float) -> str:
    """GB/s with three significant digits, never in exponent notation (1,510 GB/s)."""
    return f"{gb_per_s:.3g} GB/s" if gb_per_s < 1000 else f"{gb_per_s:,.0f} GB/s"


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
    are the DuckDB column types when the rows came from DuckDB; `units` the declared unit of
    columns that have one (a query's contract: `ns`, `byte`, `GB/s`, `%`), which tables show
    in human units while csv and json keep the exact values."""

    columns: list[str]
    numeric: list[bool]
    rows: list[tuple[Any, ...]]
    types: list[str] | None = None
    units: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, rel: duckdb.DuckDBPyRelation | None, units: Mapping[str, str] | None = None) -> Result:
        """A DuckDB relation's rows (None, e.g. from a DDL statement, gives no rows)."""
        if rel is None:
            return cls([], [], [])
        types = [str(t) for t in rel.types]
        numeric = [t in _NUMERIC_TYPES or t.startswith("DECIMAL") for t in types]
        return cls(list(rel.columns), numeric, rel.fetchall(), types, dict(units or {}))

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


# Table cells in human units, by the unit a query's contract declares; csv and json keep base units.
_UNIT_CELL: dict[str, Callable[[float], str]] = {
    "ns": lambda v: dur(v, micro="µs"),
    "byte": size,
    "GB/s": lambda v: rate(v),
    "%": lambda v: f"{v:.1f}%",
}

# Columns of the library queries that hold kernel names (`top_names`: 'name (count); ...').
KERNEL_COLUMNS = frozenset({"name", "short_name", "before", "after", "top_name", "top_names", "kernel"})
_COUNT_SUFFIX = re.compile(r"^(.*?)(\s*\(\d[\d,]*\))$")


def short_kernel_name(name: str) -> str:
    """A demangled kernel name without its template arguments, argument list, return type and
    namespaces: `void at::native::vectorized_elementwise_kernel<(int)4, ...>(int, T2, T3)` ->
    `vectorized_elementwise_kernel`. Names that are not C++ signatures come back as they are."""
    if "<" not in name and "(" not in name:
        return name
    kept, depth = [], 0
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif not depth:
            kept.append(ch)
    words = "".join(kept).split()
    short = words[-1].rsplit("::", 1)[-1] if words else ""
    return short if re.fullmatch(r"[A-Za-z_~]\w*", short) else name


def _template_args(name: str) -> list[str]:
    """The outermost template's arguments of a demangled name, split at depth-1 commas."""
    start = name.find("<")
    if start < 0:
        return []
    args, depth, cur = [], 0, ""
    for ch in name[start + 1 :]:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*args, cur.strip()]


# template arguments that tell no kernel apart: scalar types and the containers of arguments
_PLAIN_TYPES = frozenset(
    {"float", "double", "int", "bool", "char", "half", "long", "unsigned", "short", "array", "tuple", "pair"}
)


def distinct_short_names(names: Sequence[str]) -> list[str]:
    """Short kernel names, with the first named template argument added where two different
    kernels would otherwise read the same: `vectorized_elementwise_kernel<FillFunctor>`."""
    shorts = [short_kernel_name(n) for n in names]
    seen: dict[str, set[str]] = {}
    for n, s in zip(names, shorts, strict=True):
        seen.setdefault(s, set()).add(n)
    out = []
    for n, s in zip(names, shorts, strict=True):
        if len(seen[s]) > 1:
            named = [short_kernel_name(a) for a in _template_args(n) if re.search(r"[A-Za-z_]", a)]
            named = [a for a in named if re.fullmatch(r"[A-Za-z_]\w*", a) and a not in _PLAIN_TYPES]
            s = f"{s}<{named[0]}>" if named else s
        out.append(s)
    return out


def _short_cell(column: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if column == "top_names":  # 'name (count); name (count)'
        parts = []
        for part in value.split("; "):
            m = _COUNT_SUFFIX.match(part)
            parts.append(short_kernel_name(m[1]) + m[2] if m else short_kernel_name(part))
        return "; ".join(parts)
    return short_kernel_name(value)


def _table_cell(value: Any, unit: str | None) -> str:
    if unit and isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number):
            return _UNIT_CELL[unit](number)
    return _cell(value)


def _header(name: str, width: int) -> str:
    """A column name broken after underscores into lines of at most `width` (or its longest
    part): `kernel_busy_ns` over a 7-wide column of numbers is `kernel_` / `busy_ns`."""
    parts = re.findall(r"[^_]+_*|_+", name) or [name]
    width = max(width, *(len(p) for p in parts))
    lines = [""]
    for p in parts:
        if lines[-1] and len(lines[-1]) + len(p) > width:
            lines.append("")
        lines[-1] += p
    return "\n".join(lines)


def to_table(res: Result, title: str | None = None, width: int | None = None, wide: bool = False) -> str:
    """A table for people: numbers in the unit their column declares, never broken over lines;
    kernel names shortened unless `wide`. Text columns fold to fit the terminal."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    units = [res.units.get(c) for c in res.columns]
    short = [not wide and c in KERNEL_COLUMNS for c in res.columns]
    cells = [
        [
            _table_cell(_short_cell(c, v) if s else v, u)
            for c, s, u, v in zip(res.columns, short, units, row, strict=True)
        ]
        for row in res.rows
    ]
    # The terminal's width ($COLUMNS wins); 160 when printing to a pipe or file.
    width = width or shutil.get_terminal_size((160, 24)).columns
    whole = res.numeric  # numbers stay whole; text folds
    number_widths = [
        max((len(r[i]) for r in cells), default=0) if keep else 0 for i, keep in enumerate(whole)
    ]
    headers = [str(c) for c in res.columns]
    if _min_table_width(headers, cells, whole) > width:
        return _records(headers, cells, title, width)
    natural = sum(max(len(h), max((len(r[i]) for r in cells), default=0)) + 3 for i, h in enumerate(headers))
    if natural + 1 > width:  # too wide: numeric columns keep their numbers whole, headers break
        headers = [_header(h, w) if n else h for h, w, n in zip(headers, number_widths, whole, strict=True)]
    # A number never folds: when even the narrowest text columns leave too little room, cells lose
    # their padding (the borders still part them), then the table grows wider than the terminal
    # rather than cut a number in two.
    content = sum(
        (max(w, *(len(line) for line in h.split("\n"))) if n else min(4, len(h)))
        for h, w, n in zip(headers, number_widths, whole, strict=True)
    )
    padding = 1 if content + 3 * len(headers) + 1 <= width else 0
    needed = content + (2 * padding + 1) * len(headers) + 1

    table = Table(title=title, show_lines=False, padding=(0, padding))
    for header, numeric, keep in zip(headers, res.numeric, whole, strict=True):
        table.add_column(Text(header), justify="right" if numeric else "left", overflow="fold", no_wrap=keep)
    for row in cells:
        # Text, not str: kernel names such as `[lambda() (instance 1)]` are not rich markup
        table.add_row(*(Text(c) for c in row))
    buf = io.StringIO()
    Console(file=buf, width=max(width, needed), force_terminal=False, color_system=None).print(table)
    if not res.rows:
        buf.write("(no rows)\n")
    return buf.getvalue()


# A text column narrower than this in a table is unreadable (a kernel name four letters a line).
_MIN_TEXT = 12


def _min_table_width(headers: list[str], cells: list[list[str]], whole: list[bool]) -> int:
    """The narrowest the table can be drawn readably: numbers whole, text columns folded to no
    less than _MIN_TEXT, cells without padding (as to_table draws a tight table)."""
    total = 1
    for i, (h, keep) in enumerate(zip(headers, whole, strict=True)):
        longest = max((len(r[i]) for r in cells), default=0)
        if keep:
            part = max([longest, *(len(p) for p in re.findall(r"[^_]+_*|_+", h))])
        else:
            part = min(max(longest, len(h)), _MIN_TEXT)
        total += part + 1
    return total


def _records(headers: list[str], cells: list[list[str]], title: str | None, width: int) -> str:
    """Rows too wide for the terminal, one block per row (psql's expanded display): a column's
    name, then its value; long values wrap under the value column, never through a number."""
    label = max((len(h) for h in headers), default=0)
    room = max(width - label - 2, 20)
    out: list[str] = []
    for n, row in enumerate(cells, 1):
        head = f"-[ {title + ': ' if title else ''}row {n} of {len(cells)} ]"
        out.append(head + "-" * max(width - len(head), 0))
        for h, value in zip(headers, row, strict=True):
            chunks = [value[i : i + room] for i in range(0, len(value), room)] or [""]
            out.append(f"{h:<{label}}  {chunks[0]}".rstrip())
            out += [" " * (label + 2) + c for c in chunks[1:]]
    if not cells:
        out.append(f"{title}\n(no rows)" if title else "(no rows)")
    return "\n".join(out) + "\n"


def _md_cell(value: Any) -> str:
    return _cell(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(res: Result) -> str:
    """A Markdown table (numbers right-aligned), as GitHub and most ticket systems show it."""
    lines = ["| " + " | ".join(_md_cell(c) for c in res.columns) + " |"]
    lines.append("|" + "|".join("---:" if n else "---" for n in res.numeric) + "|")
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in res.rows]
    return "\n".join(lines) + "\n"


def render(res: Result, fmt: str, title: str | None = None, wide: bool = False) -> str:
    """`res` in `fmt`; `wide` keeps full kernel names in a table (other formats always do)."""
    if fmt == "markdown":
        return to_markdown(res)
    if fmt == "json":
        return to_json(res) + "\n"
    if fmt == "csv":
        return to_csv(res)
    return to_table(res, title, wide=wide)
