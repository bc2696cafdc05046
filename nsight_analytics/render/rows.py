"""Rows as text: a table for humans, CSV, JSON or Parquet for machines, Markdown for documents.

Machine formats print nothing but data; JSON is an array of row objects, one per line. Rows of a
DuckDB relation are written by DuckDB itself (`copy_rows`, `stream_rows`: `COPY ... TO`), never
gathered in Python; a table fetches only the rows it shows (`head`). Results also come from
Python rows (`Result.of_records`). No pandas, whose import alone would double the time of a
quick `nsa query`.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import decimal
import io
import json
import math
import os
import re
import shutil
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..units import percent, rate, size, table_dur

if TYPE_CHECKING:
    import duckdb


# The one --format set of every command (findings also take `text`, their table for people).
FORMATS = ("table", "csv", "json", "markdown")
# Commands whose rows come from DuckDB (`nsa query`, `nsa sql`) also write Parquet files.
ROW_FORMATS = (*FORMATS, "parquet")
# Formats DuckDB writes itself, row batch by row batch.
COPY_FORMATS = ("csv", "json", "parquet")
# Rows a terminal table shows unless asked for more.
TABLE_ROWS = 50

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


# --- rows DuckDB writes itself ------------------------------------------------------------------


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _element_type(type_: str) -> str | None:
    """`DOUBLE` of a `DOUBLE[]` list or `DOUBLE[3]` array type; None for any other type."""
    m = re.fullmatch(r"(.+)\[\d*\]", type_)
    return m[1] if m else None


def _machine_cell(expr: str, type_: str, fmt: str, depth: int = 0) -> str:
    """SQL that gives a value as nsa's csv or json writes it (the conventions `to_csv` and
    `to_json` follow for Python rows): NaN as an empty cell (csv) or null, infinities as `inf` in
    csv and null in json, booleans as `True`/`False` in csv, decimals as doubles, timestamps in
    ISO form, lists in csv as `a;b`, structs and maps in csv as a JSON object."""
    t = type_.upper()
    if t in ("DOUBLE", "FLOAT", "REAL"):
        return f"CASE WHEN isnan({expr}) THEN NULL ELSE {expr} END" if fmt == "csv" else (
            f"CASE WHEN isfinite({expr}) THEN {expr} END"
        )  # fmt: skip
    if t.startswith("DECIMAL"):
        return f"CAST({expr} AS DOUBLE)"
    if t == "BOOLEAN" and fmt == "csv":
        return f"CASE WHEN {expr} THEN 'True' WHEN NOT {expr} THEN 'False' END"
    if t.startswith(("TIMESTAMP", "DATE", "TIME")):
        return f"replace(CAST({expr} AS VARCHAR), ' ', 'T')"
    element = _element_type(type_)
    if element is not None:
        v = f"nsa_v{depth}"
        inner = _machine_cell(v, element, fmt, depth + 1)
        if fmt == "json":
            return expr if inner == v else f"list_transform({expr}, {v} -> {inner})"
        return f"array_to_string(list_transform({expr}, {v} -> coalesce(CAST({inner} AS VARCHAR), '')), ';')"
    if t.startswith(("STRUCT", "MAP", "UNION")) and fmt == "csv":
        return f"CAST(to_json({expr}) AS VARCHAR)"
    return expr


def _machine_select(rel: duckdb.DuckDBPyRelation, fmt: str) -> str:
    """The SELECT, over the relation named `nsa_rows`, of its columns as `fmt` writes them
    (columns by position: a user's SQL may repeat a name, which JSON objects cannot)."""
    seen: dict[str, int] = {}
    parts = []
    for i, (name, type_) in enumerate(zip(rel.columns, rel.types, strict=True), 1):
        expr = f"#{i}" if fmt == "parquet" else _machine_cell(f"#{i}", str(type_), fmt)
        seen[name] = seen.get(name, 0) + 1
        alias = name if seen[name] == 1 else f"{name}_{seen[name]}"
        parts.append(f"{expr} AS {_quote(alias)}")
    return f"SELECT {', '.join(parts) or '*'} FROM nsa_rows"


_COPY_OPTIONS = {
    "csv": "FORMAT csv, HEADER true",
    "json": "FORMAT json, ARRAY true",
    "parquet": "FORMAT parquet",
}


def copy_rows(rel: duckdb.DuckDBPyRelation, fmt: str, path: str | os.PathLike[str]) -> None:
    """Write the relation's rows to `path` as csv, json (an array of row objects, one a line) or
    parquet, with DuckDB's own writer: no row passes through Python. The file is written in
    place; `nsight_analytics.outputs.write_atomic` gives it a temporary path to write."""
    if fmt not in _COPY_OPTIONS:
        raise ValueError(f"copy_rows writes {', '.join(_COPY_OPTIONS)}, not {fmt}")
    target = str(path).replace("'", "''")
    with _one_thread(rel) if fmt in _ONE_THREAD_FORMATS else contextlib.nullcontext():
        rel.query(
            "nsa_rows",
            f"COPY ({_machine_select(rel, fmt)}) TO '{target}' ({_COPY_OPTIONS[fmt]}, USE_TMP_FILE false)",
        )


# Formats whose COPY runs on one DuckDB thread (json): see _one_thread.
_ONE_THREAD_FORMATS = ("json",)


@contextlib.contextmanager
def _one_thread(rel: duckdb.DuckDBPyRelation) -> Iterator[None]:
    """DuckDB's threads set to 1 while the block runs, then back. A json COPY of ordered rows
    (an ORDER BY) writes them in order through one writer: with more threads, the rows a thread
    makes ahead of the one being written wait in memory as values, which the json writer does not
    spill (stream_gaps at 1M kernels, two long kernel names per row, failed with "Out of Memory"
    under the CLI's memory cap). csv keeps every thread: with one, its CPU at 1M kernels fell to
    0.39-0.72x on 2 cores, but a query's own work would lose its threads on a many-core machine."""
    threads = int(rel.query("nsa_rows", "SELECT current_setting('threads')").fetchall()[0][0])
    rel.query("nsa_rows", "SET threads = 1")
    try:
        yield
    finally:
        rel.query("nsa_rows", f"SET threads = {threads}")


def stream_rows(rel: duckdb.DuckDBPyRelation, fmt: str, out: IO[bytes]) -> None:
    """Write the relation's rows as csv or json into a binary stream (stdout) as DuckDB writes
    them: DuckDB's COPY writes into a named pipe from a second thread while this one copies the
    pipe into `out`, so no more than a pipe's worth of output is held at once and the first rows
    arrive before the last are written. Where there are no named pipes (Windows) the rows go
    through a temporary file instead.

    A reader that stops early (`| head`) raises BrokenPipeError here, after DuckDB has stopped."""
    if fmt not in ("csv", "json"):
        raise ValueError(f"stream_rows writes csv and json, not {fmt}")
    with tempfile.TemporaryDirectory(prefix="nsa-rows-") as tmp:
        pipe = Path(tmp) / f"rows.{fmt}"
        if not hasattr(os, "mkfifo"):
            copy_rows(rel, fmt, pipe)
            with pipe.open("rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
            return
        os.mkfifo(pipe, 0o600)
        # Both ends opened here: the read end without waiting for a writer, then a write end that
        # keeps the pipe open (a read sees the end of the rows only once every writer has closed)
        # until DuckDB is done, whether its COPY opened the pipe or failed before it could.
        read_fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
        hold_fd = os.open(pipe, os.O_WRONLY)
        os.set_blocking(read_fd, True)
        failed: list[BaseException] = []

        def write() -> None:
            try:
                copy_rows(rel, fmt, pipe)
            except BaseException as exc:  # noqa: BLE001 - raised again in the reading thread
                failed.append(exc)
            finally:
                os.close(hold_fd)

        writer = threading.Thread(target=write, name="nsa-copy", daemon=True)
        writer.start()
        try:
            with os.fdopen(read_fd, "rb", buffering=0) as src:
                while chunk := src.read(1 << 16):
                    out.write(chunk)
        finally:
            writer.join()  # closing the read end above makes a DuckDB still writing fail and stop
        if failed:
            raise failed[0]


def head(
    rel: duckdb.DuckDBPyRelation | None, limit: int | None, units: Mapping[str, str] | None = None
) -> tuple[Result, int]:
    """The relation's first `limit` rows (all with None) and how many rows it has in all: only the
    rows shown are fetched into Python; DuckDB counts the rest."""
    if rel is None or limit is None:
        res = Result.of(rel, units)
        return res, len(res.rows)
    res = Result.of(rel.limit(limit + 1), units)
    if len(res.rows) <= limit:
        return res, len(res.rows)
    count = rel.aggregate("count(*)").fetchone()
    total = int(count[0]) if count else len(res.rows)
    return Result(res.columns, res.numeric, res.rows[:limit], res.types, res.units), total


# Columns of identifiers: their numbers name something (a process, a report, a stream) and are
# shown as they are, without thousands separators (`pid 2138`, not `pid 2,138`).
_ID_NAMES = frozenset({"id", "pid", "tid", "global_tid", "correlation", "stream", "device", "context"})


def is_id_column(name: str) -> bool:
    n = name.lower()
    return n in _ID_NAMES or n.endswith(("_id", "_ids", "_pid", "_tid")) or n.startswith("correlation")


def _cell(value: Any, ident: bool = False) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v, ident) for v in value)
    value = value if isinstance(value, float) and math.isinf(value) else jsonable(value)  # tables say inf
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if ident else f"{value:,}"
    return str(value)


# Table cells in human units, by the unit a query's contract declares; csv and json keep base units.
_UNIT_CELL: dict[str, Callable[[float], str]] = {
    "ns": table_dur,
    "byte": size,
    "GB/s": rate,
    "%": lambda v: percent(v, space=False),
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


# Template arguments and words that tell kernels apart last, if at all: scalar types, containers,
# namespaces of every ATen kernel, the words of lambda names.
_PLAIN_TYPES = frozenset(
    {"float", "double", "int", "bool", "char", "half", "long", "unsigned", "short", "array", "tuple", "pair"}
)
_NOISE = _PLAIN_TYPES | frozenset(
    {"void", "const", "at", "native", "std", "c10", "cuda", "detail", "unnamed", "anonymous", "lambda",
     "instance", "operator", "size_t", "signed", "volatile"}
)  # fmt: skip
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+")


def _tokens(name: str, short: str) -> list[str]:
    """The words of a demangled name other than its short name, each once: names of types and
    functions first, then plain words (types, namespaces), then numbers, each in name order."""
    words = list(dict.fromkeys(t for t in _TOKEN.findall(name) if t != short))

    def rank(t: str) -> int:
        return 2 if t.isdigit() else 1 if t in _NOISE or re.fullmatch(r"T\d+", t) else 0

    return sorted(words, key=rank)


def _tags(short: str, members: list[str]) -> dict[str, str]:
    """For different kernels with one short name, the fewest words of each (in `_tokens` order,
    leaving out the words all of them share) that no other one starts with; a number where even
    all the words do not tell them apart."""
    words = {m: _tokens(m, short) for m in members}
    common = set.intersection(*(set(w) for w in words.values()))
    keys = {m: [w for w in words[m] if w not in common] for m in members}
    tags = {}
    for i, m in enumerate(members, 1):
        key = keys[m]
        for n in range(1, len(key) + 1):
            if all(keys[o][:n] != key[:n] for o in members if o != m):
                tags[m] = ", ".join(key[:n])
                break
        else:
            tags[m] = ", ".join([*key, f"#{i}"])
    return tags


def distinct_short_names(names: Sequence[str]) -> list[str]:
    """Short kernel names that stay distinct: where two different kernels would read the same,
    the words that tell them apart are added, `vectorized_elementwise_kernel<FillFunctor>`,
    `Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nt_align1>`. The same name always gets the
    same short name."""
    shorts = [short_kernel_name(n) for n in names]
    groups: dict[str, dict[str, None]] = {}
    for n, s in zip(names, shorts, strict=True):
        groups.setdefault(s, {})[n] = None
    tags: dict[str, str] = {}
    for s, members in groups.items():
        if len(members) > 1:
            tags.update(_tags(s, list(members)))
    return [f"{s}<{tags[n]}>" if n in tags else s for n, s in zip(names, shorts, strict=True)]


def _short_column(column: str, values: Sequence[Any]) -> list[Any]:
    """A kernel column's cells with short names, distinct within the column; `top_names` cells
    ('name (count); name (count)') name by name."""

    def parts(value: str) -> list[tuple[str, str]]:
        if column != "top_names":
            return [(value, "")]
        out = []
        for part in value.split("; "):
            m = _COUNT_SUFFIX.match(part)
            out.append((m[1], m[2]) if m else (part, ""))
        return out

    split = [parts(v) if isinstance(v, str) else None for v in values]
    names = list(dict.fromkeys(n for p in split if p for n, _ in p))
    short = dict(zip(names, distinct_short_names(names), strict=True))
    return [
        v if p is None else "; ".join(short[n] + count for n, count in p)
        for v, p in zip(values, split, strict=True)
    ]


def _table_cell(value: Any, unit: str | None, ident: bool = False) -> str:
    if unit and isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number):
            return _UNIT_CELL[unit](number)
    return _cell(value, ident)


def _header_parts(name: str) -> list[str]:
    return re.findall(r"[^_]+_*|_+", name) or [name]


def _header(name: str, width: int) -> str:
    """A column name broken after underscores into lines of at most `width` (or its longest
    part), never inside a word: `kernel_busy_ns` over a 7-wide column of numbers is `kernel_` /
    `busy_ns`."""
    parts = _header_parts(name)
    width = max(width, *(len(p) for p in parts))
    lines = [""]
    for p in parts:
        if lines[-1] and len(lines[-1]) + len(p) > width:
            lines.append("")
        lines[-1] += p
    return "\n".join(lines)


# A text column narrower than this in a table is unreadable (a kernel name four letters a line).
_MIN_TEXT = 12


def _narrowest(header: str, cells: Sequence[str], whole: bool) -> int:
    """The narrowest a column can be drawn readably: numbers whole, text folded to no less
    than _MIN_TEXT, the header broken after underscores but never inside a word."""
    longest = max((len(c) for c in cells), default=0)
    word = max(len(p) for p in _header_parts(header))
    return max(longest if whole else min(max(longest, len(header)), _MIN_TEXT), word)


def _fitting(narrowest: Sequence[int], width: int) -> int:
    """How many columns, first to last (the query contract's order: most important first), fit
    in `width` drawn without padding (each column and the table's edge take one border)."""
    used, n = 1, 0
    for w in narrowest:
        if n and used + w + 1 > width:
            break
        used, n = used + w + 1, n + 1
    return n


def to_table(
    res: Result,
    title: str | None = None,
    width: int | None = None,
    wide: bool = False,
    total: int | None = None,
) -> str:
    """A table for people: numbers in the unit their column declares, ids without separators,
    never broken over lines; kernel names shortened (and kept distinct) unless `wide`. Text
    columns fold to fit the terminal; columns that do not fit even then are left out, the last
    first, and a line under the table names them. With `wide`, every column and every full name,
    as one block per row if the table cannot fit. `total`: rows of the result in all, when `res`
    holds only the first ones (a line says how many more there are)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    headers = [str(c) for c in res.columns]
    units = [res.units.get(c) for c in headers]
    idents = [is_id_column(c) for c in headers]
    values: list[Sequence[Any]] = list(zip(*res.rows, strict=True)) if res.rows else [() for _ in headers]
    if not wide:
        values = [
            _short_column(c, col) if c in KERNEL_COLUMNS else col
            for c, col in zip(headers, values, strict=True)
        ]
    columns = [[_table_cell(v, u, i) for v in col] for col, u, i in zip(values, units, idents, strict=True)]
    # The terminal's width ($COLUMNS wins); 160 when printing to a pipe or file.
    width = width or shutil.get_terminal_size((160, 24)).columns
    whole = list(res.numeric)  # numbers stay whole; text folds
    order = list(range(len(headers)))
    same = []  # an id the same in every row (one report, one device) is said once, above the table
    if not wide and len(res.rows) > 1:
        same = [i for i in order if idents[i] and len(set(columns[i])) == 1 and columns[i][0]]
        order = [i for i in order if i not in same]
        if same:
            said = ", ".join(f"{headers[i]} {columns[i][0]}" for i in same)
            title = f"{title} ({said} in every row)" if title else f"{said} in every row"
    narrowest = {i: _narrowest(headers[i], columns[i], whole[i]) for i in order}
    if not wide:
        order = order[: _fitting([narrowest[i] for i in order], width)]
    notes = []
    left = [h for i, h in enumerate(headers) if i not in order and i not in same]
    if left:
        notes.append(
            f"{len(left)} more column{'s' if len(left) > 1 else ''} than fit in {width} columns: "
            f"{', '.join(left)}; all of them: --wide, or --format csv."
        )
    if total is not None and total > len(res.rows):
        notes.append(
            f"{len(res.rows):,} of {total:,} rows shown; all of them: --all, or --format csv -o FILE."
        )
    note = "".join(textwrap.fill(n, width, break_on_hyphens=False) + "\n" for n in notes)
    rows = [[columns[i][r] for i in order] for r in range(len(res.rows))]
    least = [narrowest[i] for i in order]
    shown = [headers[i] for i in order]
    if wide and 1 + sum(w + 1 for w in least) > width:
        return _records(shown, rows, title, width) + note
    natural = sum(max(len(headers[i]), *(len(c) for c in columns[i]), 0) + 3 for i in order)
    if natural + 1 > width:  # too wide: headers break after underscores
        shown = [_header(h, w) for h, w in zip(shown, least, strict=True)]
    # A number never folds and a header never breaks inside a word: when even the narrowest
    # columns leave too little room, cells lose their padding (the borders still part them).
    padding = 1 if sum(least) + 3 * len(shown) + 1 <= width else 0
    needed = sum(least) + (2 * padding + 1) * len(shown) + 1

    table = Table(title=title, show_lines=False, padding=(0, padding))
    for i, header, w in zip(order, shown, least, strict=True):
        table.add_column(
            Text(header),
            justify="right" if whole[i] else "left",
            overflow="fold",
            no_wrap=whole[i],
            min_width=w,
        )
    for row in rows:
        # Text, not str: kernel names such as `[lambda() (instance 1)]` are not rich markup
        table.add_row(*(Text(c) for c in row))
    buf = io.StringIO()
    Console(file=buf, width=max(width, needed), force_terminal=False, color_system=None).print(table)
    if not res.rows:
        buf.write("(no rows)\n")
    return buf.getvalue() + note


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


def _md_cell(value: Any, ident: bool = False) -> str:
    return _cell(value, ident).replace("|", "\\|").replace("\n", " ")


def to_markdown(res: Result) -> str:
    """A Markdown table (numbers right-aligned), as GitHub and most ticket systems show it."""
    idents = [is_id_column(c) for c in res.columns]
    lines = ["| " + " | ".join(_md_cell(c) for c in res.columns) + " |"]
    lines.append("|" + "|".join("---:" if n else "---" for n in res.numeric) + "|")
    lines += [
        "| " + " | ".join(_md_cell(v, i) for v, i in zip(row, idents, strict=True)) + " |" for row in res.rows
    ]
    return "\n".join(lines) + "\n"


def render(
    res: Result, fmt: str, title: str | None = None, wide: bool = False, total: int | None = None
) -> str:
    """`res` in `fmt`; `wide` keeps full kernel names in a table (other formats always do), and
    `total` is the number of rows in all when `res` holds only the first ones (tables say so)."""
    if fmt == "markdown":
        return to_markdown(res)
    if fmt == "json":
        return to_json(res) + "\n"
    if fmt == "csv":
        return to_csv(res)
    return to_table(res, title, wide=wide, total=total)
