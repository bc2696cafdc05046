"""The SQL query library: `queries/**/NAME.sql`, one query per file, found by glob.

Each file opens with a comment contract that this module parses once for everything that needs
it: `nsa query --list`, parameter binding, the docs and the test that checks a query's real
result columns against its declared ones.

    -- What the query answers (one or more lines).
    -- reads kernel_rows, memcpy, cuda_api
    -- param min_gap_ns BIGINT = 1000000: shortest gap reported (ns).
    -- col report_id INTEGER: workspace report id.

Parameters are DuckDB named parameters (`$min_gap_ns`), bound by DuckDB, never formatted into
SQL. The `-- reads` line names the canonical tables the query reads, directly or through the
shared macros: what must be materialised before it runs (tests/test_query_contracts.py checks
it against the SQL with `tables_read`). A query that reads columns worked out on first read
(schema.COMPUTED: the NVTX ranges' kernels) names their set there too:
`-- reads nvtx_ranges, nvtx_kernels`; readers of the table alone never wait for them. Files
whose name starts with `_` hold shared macros and are not queries.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import duckdb

from .errors import QueryError
from .params import sql as params_sql

_PARAM = re.compile(
    r"^--\s*param\s+(\w+)\s+([\w\[\]]+)\s*(?:=\s*([^:]+?))?\s*(?:\bone\s+of\s*\(([^)]*)\))?\s*:\s*(.*)$"
)
_COL = re.compile(r"^--\s*col\s+(\w+)\s+([\w\[\]()]+(?:\s*\(\s*\d+\s*,\s*\d+\s*\))?)\s*:\s*(.*)$")
_UNIT = re.compile(r"\((ns|byte|GB/s|%)(?=[),\s])")
_READS = re.compile(r"^--\s*reads\s+(\w+(?:\s*,\s*\w+)*)\s*$")
_USES = re.compile(r"\$(\w+)")
_INTEGER_TYPES = {"INTEGER", "BIGINT", "INT", "HUGEINT", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER"}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: str | None  # SQL literal as written, None when required
    doc: str
    allowed: tuple[str, ...] = ()  # `one of ('a', 'b')`: the only values it takes (NULL aside)

    @property
    def required(self) -> bool:
        """No default: the query cannot answer without it (`nsa query` says so)."""
        return self.default is None

    def convert(self, value: Any) -> Any:
        """CLI values arrive as text; turn them into what the declared type binds as, and
        check the value is one the parameter can mean (`allowed`, `lowest`)."""
        if isinstance(value, str):
            value = None if value.upper() == "NULL" else self._parse(value)
        if self.allowed and value is not None and str(value) not in self.allowed:
            nullable = self.default is not None and self.default.upper() == "NULL"
            choices = ", ".join([*self.allowed, *(["NULL"] if nullable else [])])
            raise QueryError(
                f"parameter {self.name} must be one of {choices}, got {value!r} ({self.doc.rstrip('.')})."
            )
        low = self.lowest()
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if low is not None and number and (math.isnan(value) or value < low):
            raise QueryError(
                f"parameter {self.name} must be {'at least 1' if low else '0 or more'}"
                f" ({self.doc.rstrip('.')}), got {value!r}."
            )
        return value

    def _parse(self, value: str) -> Any:
        t = self.type.upper()
        if t in _INTEGER_TYPES:
            try:
                number = int(value) if re.fullmatch(r"\s*[+-]?\d+\s*", value) else float(value)
                if isinstance(number, float) and not number.is_integer():
                    raise ValueError(value)
                return int(number)
            except (ValueError, OverflowError) as exc:
                raise QueryError(f"parameter {self.name} wants an integer, got {value!r}.") from exc
        if t in {"DOUBLE", "FLOAT", "REAL"} or t.startswith("DECIMAL"):
            try:
                return float(value)
            except ValueError as exc:
                raise QueryError(f"parameter {self.name} wants a number, got {value!r}.") from exc
        if t == "BOOLEAN":
            word = value.strip().lower()
            if word not in _TRUE | _FALSE:
                raise QueryError(f"parameter {self.name} wants true or false, got {value!r}.")
            return word in _TRUE
        return value

    def lowest(self) -> int | None:
        """The smallest value a numeric parameter takes, by naming convention: `top_*` counts
        are at least 1; `min_*`, `max_*`, `*_ns` and `*_pct` limits are 0 or more; others are
        unchecked (a report id that does not exist is the caller's check)."""
        if self.type.upper() not in _INTEGER_TYPES | {"DOUBLE", "FLOAT", "REAL"}:
            return None
        if self.name.startswith("top_"):
            return 1
        if self.name.startswith(("min_", "max_")) or self.name.endswith(("_ns", "_pct")):
            return 0
        return None

    def default_value(self) -> Any:
        if self.default is None or self.default.upper() == "NULL":
            return None
        return self.convert(self.default.strip("'\""))


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str

    @property
    def unit(self) -> str | None:
        """The unit the contract declares in parentheses: `(ns)`, `(byte)`, `(GB/s, 1e9 byte/s)`,
        `(% of peak)`; None for counts, ids and text."""
        m = _UNIT.search(self.doc)
        return m[1] if m else None


@dataclass(frozen=True)
class Query:
    name: str
    path: Path
    doc: str
    params: tuple[Param, ...]
    columns: tuple[Column, ...]
    sql: str
    reads: frozenset[str]  # canonical tables (and computed column sets) the `-- reads` line names

    @property
    def family(self) -> str:
        return self.path.parent.name

    @property
    def source(self) -> str:
        """Where the query is written: `queries/nsys/gaps.sql` for the library's, else its file."""
        root = query_root()
        if self.path.is_relative_to(root):
            return f"queries/{self.path.relative_to(root).as_posix()}"
        return str(self.path)

    def bind(self, values: dict[str, Any] | None = None) -> dict[str, Any]:
        values = dict(values or {})
        unknown = set(values) - {p.name for p in self.params}
        if unknown:
            known = ", ".join(p.name for p in self.params) or "none"
            raise QueryError(
                f"query {self.name} has no parameter {', '.join(sorted(unknown))}; its parameters: {known}."
            )
        missing = [p.name for p in self.params if p.required and p.name not in values]
        if missing:
            docs = "; ".join(
                f"{p.name} ({p.type}): {p.doc.rstrip('.')}" for p in self.params if p.name in missing
            )
            raise QueryError(
                f"query {self.name} needs {'parameters' if len(missing) > 1 else 'parameter'} "
                f"{', '.join(missing)}: {docs}; give each with -p NAME=VALUE (a table macro: "
                f"{self.name}({', '.join(f'{n} := ...' for n in missing)}))."
            )
        bound = {}
        for p in self.params:
            bound[p.name] = p.convert(values[p.name]) if p.name in values else p.default_value()
        used = set(_USES.findall(self.sql))
        return {k: v for k, v in bound.items() if k in used}

    def units(self) -> dict[str, str]:
        """Column name -> declared unit, for the columns that declare one."""
        return {c.name: c.unit for c in self.columns if c.unit}

    def tables(self) -> set[str]:
        """Canonical tables the query reads, directly or through the shared macros it calls:
        its contract's `-- reads` line (never a search of its SQL text)."""
        return set(self.reads)


def parse(path: Path, name: str | None = None) -> Query:
    text = path.read_text(encoding="utf-8")
    doc: list[str] = []
    params: list[Param] = []
    cols: list[Column] = []
    reads: list[str] | None = None
    body_start = 0
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if not s.startswith("--"):
            if s:
                body_start = i
                break
            continue
        if m := _READS.match(s):
            reads = [t.strip() for t in m[1].split(",")]
        elif m := _PARAM.match(s):
            allowed = tuple(v.strip().strip("'\"") for v in m[4].split(",")) if m[4] else ()
            param = Param(m[1], m[2], m[3].strip() if m[3] else None, m[5].strip(), allowed)
            if allowed and param.default not in (None, "NULL") and param.default.strip("'\"") not in allowed:
                raise QueryError(f"{path}: parameter {param.name}'s default is not one of its values.")
            params.append(param)
        elif m := _COL.match(s):
            cols.append(Column(m[1], m[2], m[3].strip()))
        elif not params and not cols:
            doc.append(s[2:].strip())
    sql = "\n".join(lines[body_start:]).strip().rstrip(";")
    qname = name or path.stem
    if not doc or not cols:
        raise QueryError(f"{path}: the contract needs a description and at least one `-- col` line.")
    if reads is None:
        raise QueryError(
            f"{path}: the contract needs a `-- reads table, ...` line naming the canonical tables "
            "the query reads (directly or through the shared macros)."
        )
    from .schema import BY_NAME, COMPUTED

    unknown_tables = [t for t in reads if t not in BY_NAME and t not in COMPUTED]
    if unknown_tables:
        raise QueryError(
            f"{path}: `-- reads` names {', '.join(unknown_tables)}, not canonical tables "
            f"(nor computed columns: {', '.join(COMPUTED)})."
        )
    declared = {p.name for p in params}
    missing = set(_USES.findall(sql)) - declared
    if missing:
        raise QueryError(f"{path}: uses undeclared parameters {sorted(missing)}.")
    return Query(qname, path, " ".join(doc), tuple(params), tuple(cols), sql, frozenset(reads))


def query_root() -> Path:
    """Where the .sql files are: the checkout's queries/, else the copy installed in the package."""
    checkout = Path(__file__).resolve().parent.parent / "queries"
    if checkout.is_dir():
        return checkout
    return Path(str(resources.files("nsight_analytics") / "sql"))


# Folders of a team's own queries (config `queries = [...]`, `--queries DIR`, plugins), after the
# library's: same contract, same macros, listed and run like the built-in ones.
_FOLDERS: list[Path] = []


def add_folder(folder: str | Path) -> None:
    """Add a folder of `.sql` queries (searched recursively) to the library. A query named like
    one already in it is an error when the library is next read (`library`)."""
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise QueryError(f"query folder {folder} is not a directory; give a folder of .sql files.")
    if path not in _FOLDERS and path != query_root().resolve():
        _FOLDERS.append(path)
        _forget()


def remove_folder(folder: str | Path) -> None:
    """Take an added folder out of the library again (a plugin whose queries do not parse)."""
    path = Path(folder).expanduser().resolve()
    if path in _FOLDERS:
        _FOLDERS.remove(path)
        _forget()


def folders() -> list[Path]:
    """The added query folders, in the order they were added."""
    return list(_FOLDERS)


def reset_folders() -> None:
    """Forget the added folders: the library is the built-in queries again."""
    _FOLDERS.clear()
    _forget()


def _forget() -> None:
    """Drop what was worked out from the folders (they changed)."""
    library.cache_clear()
    _macro_bodies.cache_clear()
    macro_sources.cache_clear()
    builtin_macros.cache_clear()


@cache
def library() -> dict[str, Query]:
    macro_sources()  # a team macro that replaces the library's is refused before anything runs
    found: dict[str, Query] = {}
    for root in (query_root(), *_FOLDERS):
        for path in sorted(root.rglob("*.sql")):
            if path.name.startswith("_"):
                continue
            q = parse(path)
            if q.name in found:
                first = found[q.name].path
                if root != query_root() and first.is_relative_to(query_root()):
                    raise QueryError(
                        f"{path}: query {q.name} has the name of a built-in query ({first}); "
                        "rename the file (a query's name is its file name)."
                    )
                raise QueryError(f"two queries named {q.name}: {first} and {path}.")
            found[q.name] = q
    return found


def get(name: str) -> Query:
    lib = library()
    key = name.split("/")[-1].removesuffix(".sql")
    if key not in lib:
        raise QueryError(f"no query named {name!r}; `nsa query --list` shows them: {', '.join(sorted(lib))}.")
    return lib[key]


def macro_files() -> list[Path]:
    """The shared macro files: the library's, then those of the added folders."""
    return [p for root in (query_root(), *_FOLDERS) for p in sorted(root.rglob("_*.sql"))]


_COMMENT = re.compile(r"--[^\n]*")
_STRING = re.compile(r"'[^']*'")
_STAR = re.compile(r"(?<!\()\*")  # `SELECT *`, `r.*`; not `count(*)`
_MACRO = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+)?MACRO\s+(\w+)", re.IGNORECASE)


_OVERRIDE = r"^\s*--\s*override\s+{}\b"


@cache
def macro_sources() -> dict[str, tuple[Path, int]]:
    """Where each shared macro is defined: {name: (file, line)}. The added folders' macro files
    run after the library's, so a team macro named like a library macro (`nsa_gpu_activity`)
    would change every built-in query and rule that calls it, silently: that is refused unless
    its file says `-- override NAME`. Two team files defining one macro are refused too."""
    root = query_root().resolve()
    found: dict[str, tuple[Path, int]] = {}
    for path in macro_files():
        raw = path.read_text(encoding="utf-8")
        text = _COMMENT.sub("", raw)
        for m in _MACRO.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            first = found.get(m[1])
            if first is not None and first[0] != path and not path.resolve().is_relative_to(root):
                if not first[0].resolve().is_relative_to(root):
                    raise QueryError(
                        f"{path}:{line}: macro {m[1]} is defined in {first[0]}:{first[1]} as well; "
                        "keep one of the two."
                    )
                if not re.search(_OVERRIDE.format(re.escape(m[1])), raw, re.IGNORECASE | re.MULTILINE):
                    raise QueryError(
                        f"{path}:{line}: macro {m[1]} would replace the library's ({first[0]}:{first[1]}) "
                        f"in every built-in query and rule; rename it, or write `-- override {m[1]}` in "
                        "the file to replace it on purpose."
                    )
            found[m[1]] = (path, line)
    return found


@cache
def _macro_bodies() -> dict[str, str]:
    """Each shared macro's SQL, comments removed: {name: body}."""
    bodies: dict[str, str] = {}
    for path in macro_files():
        text = _COMMENT.sub("", path.read_text(encoding="utf-8"))
        starts = list(_MACRO.finditer(text))
        for m, nxt in zip(starts, [*starts[1:], None]):
            bodies[m[1]] = text[m.end() : nxt.start() if nxt else len(text)]
    return bodies


def tables_read(sql: str, *, exact: bool = True) -> set[str]:
    """Canonical tables a statement reads, and those of the shared macros it reads from,
    transitively; comments are left out. `exact`: only names after FROM or JOIN count (the
    library's own queries, where a column named like a table, nvtx_ranges.kernels, is no read);
    else every word does (users' SQL, which may list tables after commas). A computed column set
    (schema.COMPUTED) is read when its table is and the SQL names one of its columns outside
    string literals (users' SQL: or selects `*`)."""
    from .schema import BY_NAME, COMPUTED

    macros = _macro_bodies()
    tables: set[str] = set()
    todo, seen = [_COMMENT.sub("", sql)], set[str]()
    texts: list[str] = []
    pattern = r"\b(?:FROM|JOIN)\s+([A-Za-z_]\w*)" if exact else r"([A-Za-z_]\w*)"
    while todo:
        texts.append(todo.pop())
        words = set(re.findall(pattern, texts[-1], flags=re.IGNORECASE))
        tables |= {t for t in BY_NAME if t in words}
        for name in (words & set(macros)) - seen:
            seen.add(name)
            todo.append(macros[name])
    text = _STRING.sub("''", " ".join(texts))
    named = set(re.findall(r"[A-Za-z_]\w*", text))
    star = not exact and _STAR.search(text) is not None
    for computed, (table, columns) in COMPUTED.items():
        if table in tables and (star or named & set(columns)):
            tables.add(computed)
    return tables


def macro_param_name(param: str, q: Query) -> str:
    """The name a parameter takes in the query's table macro.

    Inside a DuckDB macro a parameter shadows every column of the same name, so a parameter
    named like a column (`report_id`) is spelled without its `_id` in the macro:
    `SELECT * FROM gaps(report := 3, min_gap_ns := 100000)`.
    """
    if param not in _schema_columns() and param not in {c.name for c in q.columns}:
        return param
    return param.removesuffix("_id") if param.endswith("_id") else f"p_{param}"


@cache  # asked for every parameter of every query when the library's macros are worked out
def _schema_columns() -> frozenset[str]:
    """The column names of the canonical tables."""
    from .schema import TABLES

    return frozenset(c.name for t in TABLES for c in t.cols)


def _macro_param(names: dict[str, str], m: re.Match[str]) -> str:
    return names[m[1]]


# The built-in library's macros are stored in a workspace nsa can write (CREATE MACRO, not TEMP),
# once per library version: creating them costs ~0.08 s of CPU, which every CLI process paid on
# open; finding them stored costs ~1 ms. This scalar macro holds what was stored, as JSON: the
# stamp (a hash of the statements and of the duckdb version), the macros' names (to drop the
# ones a later library no longer has) and the queries that could not become macros.
STAMP_MACRO = "nsa_library_stamp"


def _statements(builtin: bool) -> tuple[list[str], list[tuple[str, str]]]:
    """(shared macro files' SQL, [(query, CREATE statement)]) of the built-in library (`builtin`)
    or of the added folders, as CREATE OR REPLACE MACRO statements without TEMP."""
    root = query_root().resolve()

    def ours(path: Path) -> bool:
        return path.resolve().is_relative_to(root) == builtin

    shared = [
        re.sub(
            r"CREATE\s+(OR\s+REPLACE\s+)?(TEMP\s+)?MACRO",
            "CREATE OR REPLACE MACRO",
            path.read_text(encoding="utf-8"),
            flags=re.IGNORECASE,
        )
        for path in macro_files()
        if ours(path)
    ]
    tables = []
    for q in library().values():
        if not ours(q.path):
            continue
        names = {p.name: macro_param_name(p.name, q) for p in q.params}
        body = _USES.sub(partial(_macro_param, names), q.sql)
        args = ", ".join(f"{names[p.name]} := {p.default or 'NULL'}" for p in q.params)
        tables.append((q.name, f"CREATE OR REPLACE MACRO {q.name}({args}) AS TABLE {body}"))
    return shared, tables


def _create(
    con: duckdb.DuckDBPyConnection, shared: list[str], tables: list[tuple[str, str]], temp: bool
) -> dict[str, str]:
    def kind(sql: str) -> str:
        return sql.replace("CREATE OR REPLACE MACRO", "CREATE OR REPLACE TEMP MACRO") if temp else sql

    for sql in shared:
        con.execute(kind(sql))
    failed: dict[str, str] = {}
    for name, sql in tables:
        try:
            con.execute(kind(sql))
        except duckdb.Error as exc:
            failed[name] = str(exc).splitlines()[0]
    return failed


def _stored(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    """What the workspace's stamp macro says, or None (no stamp, or not JSON)."""
    try:
        row = con.execute(f"SELECT {STAMP_MACRO}()").fetchone()
        return dict(json.loads(row[0])) if row else None
    except (duckdb.Error, ValueError, TypeError):
        return None


def _writable_file(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(
        "SELECT path, readonly FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    return bool(row and row[0] and not row[1])


class Builtin(NamedTuple):
    """The built-in library's macros: shared files' SQL, (query, CREATE statement) per query,
    and their stamp (a hash of both and of the duckdb version)."""

    shared: list[str]
    tables: list[tuple[str, str]]
    stamp: str


@cache  # every workspace opened reads it (a reader that loads deferred tables opens three): ~6 ms each
def builtin_macros() -> Builtin:
    macro_sources()  # a team macro that replaces the library's is refused before anything runs
    shared, tables = _statements(builtin=True)
    stamp = hashlib.sha256("\x00".join([duckdb.__version__, *shared, *(s for _, s in tables)]).encode())
    return Builtin(shared, tables, stamp.hexdigest())


def install_macros(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Shared scalar macros, then one table macro per query: `SELECT * FROM gaps(min_gap_ns := 1e5)`.

    The built-in library's are stored in the workspace when nsa can write it (see STAMP_MACRO),
    and read from there while the library is unchanged; otherwise (read only, a stamp of another
    library, a Parquet dataset, a workspace in memory) they are TEMP, for this connection only,
    and hide any stored ones. The added folders' are always TEMP, after the library's: a team
    macro that overrides a library macro hides the stored one. Returns {query: error} for queries
    that could not become macros: one broken file must not take the workspace down with it;
    `nsa query NAME` still reports the real error, and the contract test requires this to be empty.
    """
    shared, tables, stamp = builtin_macros()
    stored = _stored(con)
    if stored is not None and stored.get("stamp") == stamp:
        failed = dict(stored.get("failed") or {})
    elif _writable_file(con):
        failed = _store(con, shared, tables, stamp, stored)
    else:
        failed = _create(con, shared, tables, temp=True)
    team_shared, team_tables = _statements(builtin=False)
    return failed | _create(con, team_shared, team_tables, temp=True)


def _store(
    con: duckdb.DuckDBPyConnection,
    shared: list[str],
    tables: list[tuple[str, str]],
    stamp: str,
    stored: dict[str, Any] | None,
) -> dict[str, str]:
    """Store the built-in macros and their stamp in the workspace, in one transaction; when that
    fails (a full disk), TEMP macros instead."""
    con.execute("BEGIN TRANSACTION")
    try:
        previous = set((stored or {}).get("names") or ())  # the previous library's
        # a new workspace has none to drop: listing DuckDB's functions costs ~0.025 s of CPU
        kinds = (
            con.execute(
                "SELECT DISTINCT function_name, function_type FROM duckdb_functions() "
                "WHERE database_name = current_database() AND schema_name = 'main' "
                "AND function_type IN ('macro', 'table_macro')"
            ).fetchall()
            if previous
            else []
        )
        for name, kind in kinds:
            if name in previous:
                con.execute(f'DROP MACRO {"TABLE " if kind == "table_macro" else ""}"{name}"')
        failed = _create(con, shared, tables, temp=False)
        names = sorted(
            set(_MACRO.findall(_COMMENT.sub("", "\n".join(shared)))) | ({n for n, _ in tables} - set(failed))
        )
        text = json.dumps({"stamp": stamp, "names": names, "failed": failed})
        con.execute(f"CREATE OR REPLACE MACRO {STAMP_MACRO}() AS {_literal(text)}")
        con.execute("COMMIT")
        return failed
    except duckdb.Error:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        return _create(con, shared, tables, temp=True)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def run(
    con: duckdb.DuckDBPyConnection,
    name: str,
    params: dict[str, Any] | None = None,
    *,
    materialised: bool = False,
) -> duckdb.DuckDBPyRelation:
    """Run a library query; the caller turns the relation into a DataFrame, Arrow or rows.
    `materialised`: the caller has just run api.materialise for the query's tables (the GPU
    timeline is up to date: not checked again). The relation runs as it is read (params.sql)."""
    q = get(name)
    bound = q.bind(params)
    # worked out on first use, whoever runs the query (the rules' engine too)
    if "gpu_timeline" in q.reads and not materialised:
        from .ingest import timeline

        timeline.ensure(
            con,
            None if bound.get("report_id") is None else [bound["report_id"]],
            launches=timeline.LAUNCHES in q.reads,
            comm=timeline.COMM in q.reads,
        )
    try:
        return params_sql(con, q.sql, bound)
    except duckdb.Error as exc:
        raise QueryError(f"query {q.name} failed: {str(exc).splitlines()[0]}") from exc
