"""The SQL query library: `queries/**/NAME.sql`, one query per file, found by glob.

Each file opens with a comment contract that this module parses once for everything that needs
it: `nsa query --list`, parameter binding, the docs and the test that checks a query's real
result columns against its declared ones.

    -- What the query answers (one or more lines).
    -- param min_gap_ns BIGINT = 1000000: shortest gap reported (ns).
    -- col report_id INTEGER: workspace report id.

Parameters are DuckDB named parameters (`$min_gap_ns`), bound by DuckDB, never formatted into
SQL. Files whose name starts with `_` hold shared macros and are not queries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from .errors import QueryError
from .params import sql as params_sql

_PARAM = re.compile(r"^--\s*param\s+(\w+)\s+([\w\[\]]+)\s*(?:=\s*([^:]+?))?\s*:\s*(.*)$")
_COL = re.compile(r"^--\s*col\s+(\w+)\s+([\w\[\]()]+(?:\s*\(\s*\d+\s*,\s*\d+\s*\))?)\s*:\s*(.*)$")
_USES = re.compile(r"\$(\w+)")


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: str | None  # SQL literal as written, None when required
    doc: str

    def convert(self, value: Any) -> Any:
        """CLI values arrive as text; turn them into what the declared type binds as."""
        if value is None or not isinstance(value, str):
            return value
        if value.upper() == "NULL":
            return None
        t = self.type.upper()
        try:
            if t in {"INTEGER", "BIGINT", "INT", "HUGEINT", "SMALLINT"}:
                return int(float(value)) if re.fullmatch(r"[\d.eE+-]+", value) else int(value)
            if t in {"DOUBLE", "FLOAT", "REAL"}:
                return float(value)
            if t == "BOOLEAN":
                return value.lower() in {"1", "true", "yes", "on"}
        except ValueError as exc:
            raise QueryError(f"parameter {self.name} wants a {self.type}, got {value!r}.") from exc
        return value

    def default_value(self) -> Any:
        if self.default is None or self.default.upper() == "NULL":
            return None
        return self.convert(self.default.strip("'\""))


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class Query:
    name: str
    path: Path
    doc: str
    params: tuple[Param, ...]
    columns: tuple[Column, ...]
    sql: str

    @property
    def family(self) -> str:
        return self.path.parent.name

    def bind(self, values: dict[str, Any] | None = None) -> dict[str, Any]:
        values = dict(values or {})
        unknown = set(values) - {p.name for p in self.params}
        if unknown:
            known = ", ".join(p.name for p in self.params) or "none"
            raise QueryError(
                f"query {self.name} has no parameter {', '.join(sorted(unknown))}; its parameters: {known}."
            )
        bound = {}
        for p in self.params:
            bound[p.name] = p.convert(values[p.name]) if p.name in values else p.default_value()
        used = set(_USES.findall(self.sql))
        return {k: v for k, v in bound.items() if k in used}

    def tables(self) -> set[str]:
        from .schema import BY_NAME

        return {t for t in BY_NAME if re.search(rf"\b{t}\b", self.sql)}


def parse(path: Path, name: str | None = None) -> Query:
    text = path.read_text(encoding="utf-8")
    doc: list[str] = []
    params: list[Param] = []
    cols: list[Column] = []
    body_start = 0
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if not s.startswith("--"):
            if s:
                body_start = i
                break
            continue
        if m := _PARAM.match(s):
            params.append(Param(m[1], m[2], m[3].strip() if m[3] else None, m[4].strip()))
        elif m := _COL.match(s):
            cols.append(Column(m[1], m[2], m[3].strip()))
        elif not params and not cols:
            doc.append(s[2:].strip())
    sql = "\n".join(lines[body_start:]).strip().rstrip(";")
    qname = name or path.stem
    if not doc or not cols:
        raise QueryError(f"{path}: the contract needs a description and at least one `-- col` line.")
    declared = {p.name for p in params}
    missing = set(_USES.findall(sql)) - declared
    if missing:
        raise QueryError(f"{path}: uses undeclared parameters {sorted(missing)}.")
    return Query(qname, path, " ".join(doc), tuple(params), tuple(cols), sql)


def query_root() -> Path:
    """Where the .sql files are: the checkout's queries/, else the copy installed in the package."""
    checkout = Path(__file__).resolve().parent.parent / "queries"
    if checkout.is_dir():
        return checkout
    return Path(str(resources.files("nsight_analytics") / "sql"))


@cache
def library() -> dict[str, Query]:
    found: dict[str, Query] = {}
    for path in sorted(query_root().rglob("*.sql")):
        if path.name.startswith("_"):
            continue
        q = parse(path)
        if q.name in found:
            raise QueryError(f"two queries named {q.name}: {found[q.name].path} and {path}.")
        found[q.name] = q
    return found


def get(name: str) -> Query:
    lib = library()
    key = name.split("/")[-1].removesuffix(".sql")
    if key not in lib:
        raise QueryError(f"no query named {name!r}; `nsa query --list` shows them: {', '.join(sorted(lib))}.")
    return lib[key]


def macro_files() -> list[Path]:
    return sorted(query_root().rglob("_*.sql"))


def macro_param_name(param: str, q: Query) -> str:
    """The name a parameter takes in the query's table macro.

    Inside a DuckDB macro a parameter shadows every column of the same name, so a parameter
    named like a column (`report_id`) is spelled without its `_id` in the macro:
    `SELECT * FROM gaps(report := 3, min_gap_ns := 100000)`.
    """
    from .schema import TABLES

    taken = {c.name for t in TABLES for c in t.cols} | {c.name for c in q.columns}
    if param not in taken:
        return param
    return param.removesuffix("_id") if param.endswith("_id") else f"p_{param}"


def install_macros(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Shared scalar macros, then one table macro per query: `SELECT * FROM gaps(min_gap_ns := 1e5)`.

    Macros are TEMP so read-only connections get them. Returns {query: error} for queries that
    could not become macros: one broken file must not take the workspace down with it;
    `nsa query NAME` still reports the real error, and the contract test requires this to be empty.
    """
    for path in macro_files():
        sql = path.read_text(encoding="utf-8")
        sql = re.sub(r"CREATE\s+(OR\s+REPLACE\s+)?MACRO", "CREATE OR REPLACE TEMP MACRO", sql, flags=re.I)
        con.execute(sql)
    failed: dict[str, str] = {}
    for q in library().values():
        names = {p.name: macro_param_name(p.name, q) for p in q.params}
        body = _USES.sub(lambda m: names[m[1]], q.sql)
        args = ", ".join(f"{names[p.name]} := {p.default or 'NULL'}" for p in q.params)
        try:
            con.execute(f"CREATE OR REPLACE TEMP MACRO {q.name}({args}) AS TABLE {body}")
        except duckdb.Error as exc:
            failed[q.name] = str(exc).splitlines()[0]
    return failed


def run(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> duckdb.DuckDBPyRelation:
    """Run a library query; the caller turns the relation into a DataFrame, Arrow or rows."""
    q = get(name)
    try:
        return params_sql(con, q.sql, q.bind(params))
    except duckdb.Error as exc:
        raise QueryError(f"query {q.name} failed: {str(exc).splitlines()[0]}") from exc
