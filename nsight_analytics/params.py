"""Run SQL with named parameters without handing Python values to DuckDB's client.

DuckDB's Python client imports pandas before it binds the first Python value (duckdb pull
request 18658), whatever the value's type: 0.35 s on the 2-core machine, more than most of our
queries take. So parameters travel as SQL text instead: each value becomes a typed literal
(`literal`). `execute` binds them to the statement's `$name` parameters through PREPARE /
EXECUTE. `sql`, which returns a relation, writes each literal in place of its `$name` instead,
at the `$` operators DuckDB's tokenizer finds (never in a string or comment): DuckDB runs a
relation of `EXECUTE` at once and stores its rows value by value, 5-8x the CPU of the query
itself for a query of many rows (memory_timeline's 408k rows: 0.4 -> 2.9 CPU-s), and runs it
again for a `.limit()` or a count; a SELECT stays a relation that runs as it is read, holding no
more than its own steps do. Strings are quoted the SQL way (a quote doubled); DuckDB's standard
strings have no backslash escapes, so nothing else can end one.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import duckdb

_USES = re.compile(r"\$([A-Za-z_]\w*)")
_names = itertools.count()


def literal(value: Any) -> str:
    """A SQL literal that DuckDB reads back as `value` (None, bool, int, float, str, datetime, lists)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"CAST({int(value)} AS {'BIGINT' if -(2**63) <= value < 2**63 else 'HUGEINT'})"
    if isinstance(value, float):
        text = repr(value) if math.isfinite(value) else ("'nan'" if math.isnan(value) else f"'{value}'")
        return f"CAST({text} AS DOUBLE)"
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("a SQL parameter cannot hold a NUL character")
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            raise ValueError("timestamps are passed as naive UTC")
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


# Nothing may ever be downloaded at run time (air-gapped clusters; the README promises it): DuckDB
# would otherwise fetch an extension it knows the moment a statement needs one (httpfs for a URL,
# or `INSTALL`, which `nsa sql` refuses). Set after connecting rather than as connect-time
# config: DuckDB refuses a second connection to a file with another config than the first (a
# notebook's own `duckdb.connect` beside nsa's). What DuckDB loads while connecting (its SQLite
# extension, for an SQLite file given as the database) the workspace refuses before it connects.
OFFLINE = ("autoinstall_known_extensions", "autoload_known_extensions")


def connect(
    database: str = ":memory:", read_only: bool = False, config: dict[str, str] | None = None
) -> duckdb.DuckDBPyConnection:
    """Every DuckDB connection nsa opens: `duckdb.connect` with extension autoload and
    autoinstall off (OFFLINE). `config`: connect-time settings, for a caller that knows no other
    connection to the file is open in the process (see OFFLINE)."""
    con = duckdb.connect(database, read_only=read_only, config=dict(config or {}))
    for setting in OFFLINE:
        con.execute(f"SET {setting} = false")
    return con


def execute(
    con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """`con.execute(sql, params)` for named `$name` parameters, without importing pandas."""
    if not params:
        return con.execute(sql)
    return con.execute(_prepared(con, sql, params))


def sql(
    con: duckdb.DuckDBPyConnection, statement: str, params: Mapping[str, Any] | None = None
) -> duckdb.DuckDBPyRelation:
    """`con.sql(statement, params=params)` for named parameters, without importing pandas: a
    relation that runs when read (the parameters as literals in the statement), so an error of
    the statement's own (DuckDB's `error()`, a conversion) comes when its rows are read."""
    if not params or not set(_USES.findall(statement)) & set(params):
        return con.sql(statement)
    return con.sql(_inlined(statement, params))


def _inlined(statement: str, params: Mapping[str, Any]) -> str:
    """The statement with each `$name` parameter of `params` replaced by its literal: only where
    DuckDB's tokenizer reads a `$` operator, so a `$name` in a string or comment stays as it is."""
    parts: list[str] = []
    end = 0
    for pos, kind in duckdb.tokenize(statement):
        match = _USES.match(statement, pos) if kind == duckdb.token_type.operator else None
        if match is None or match[1] not in params:
            continue
        parts += [statement[end:pos], f"({literal(params[match[1]])})"]
        end = match.end()
    return "".join(parts) + statement[end:]


def _prepared(con: duckdb.DuckDBPyConnection, statement: str, params: Mapping[str, Any]) -> str:
    """PREPARE the statement under a fresh name and return the EXECUTE that binds `params`.

    Each call prepares anew: a relation may run its EXECUTE again later, so names are never
    reused on a connection (a prepared statement costs a few KB until the connection closes)."""
    used = set(_USES.findall(statement))
    name = f"nsa_stmt_{next(_names)}"
    con.execute(f"PREPARE {name} AS {statement}")
    args = ", ".join(f"{k} := {literal(v)}" for k, v in params.items() if k in used)
    return f"EXECUTE {name}({args})"


def insert_rows(
    con: duckdb.DuckDBPyConnection, table: str, rows: Iterable[tuple[Any, ...]], chunk: int = 1000
) -> None:
    """`con.executemany(INSERT INTO table VALUES (?, ...), rows)` without importing pandas: the
    rows travel as SQL literals, `chunk` rows a statement."""
    batch: list[str] = []
    for row in rows:
        batch.append("(" + ", ".join(literal(v) for v in row) + ")")
        if len(batch) >= chunk:
            con.execute(f"INSERT INTO {table} VALUES {', '.join(batch)}")
            batch.clear()
    if batch:
        con.execute(f"INSERT INTO {table} VALUES {', '.join(batch)}")


@contextlib.contextmanager
def cleaned_up(*steps: Callable[[], object]) -> Iterator[None]:
    """Run the clean-up `steps` (statements that drop scratch tables or views) when the block
    ends. When the block fails, its own error is the one raised: the statement that failed
    aborted the transaction it ran in, which refuses every statement after it ("Current
    transaction is aborted"), and that error would hide the first, and with it an out-of-memory
    error that the loads run again past their memory cap; so each step then runs on its own, its
    error ignored (the rollback that follows removes what was made inside the transaction)."""
    try:
        yield
    except BaseException:
        for step in steps:
            with contextlib.suppress(duckdb.Error):
                step()
        raise
    for step in steps:
        step()


def dropped_after(con: duckdb.DuckDBPyConnection, *tables: str) -> contextlib.AbstractContextManager[None]:
    """cleaned_up by dropping the scratch `tables` (if they exist)."""
    return cleaned_up(*(functools.partial(con.execute, f"DROP TABLE IF EXISTS {t}") for t in tables))


def out_of_memory(exc: BaseException) -> bool:
    """DuckDB's out-of-memory error, or a failure caused by one (a library query's QueryError
    that names the query)."""
    return isinstance(exc, duckdb.OutOfMemoryException) or isinstance(
        exc.__cause__, duckdb.OutOfMemoryException
    )


_MEMORY_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
                 "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}  # fmt: skip


def limit_bytes(text: str) -> float | None:
    """DuckDB's memory_limit setting as bytes ('17.5 GiB'); None when it reads otherwise."""
    number, _, unit = text.strip().partition(" ")
    try:
        return float(number) * _MEMORY_UNITS[unit]
    except (ValueError, KeyError):
        return None


def memory_limit(con: duckdb.DuckDBPyConnection) -> str:
    """DuckDB's memory limit as it shows it ('1.8 GiB'), to give back to set_memory_limit."""
    return str(first_row(con.execute("SELECT current_setting('memory_limit')"))[0])


def set_memory_limit(con: duckdb.DuckDBPyConnection, shown: str) -> None:
    """Set DuckDB's memory limit back to one memory_limit read. DuckDB shows a limit rounded down
    ('2GB' shows '1.8 GiB') and setting the shown text gives a lower limit still ('1.7 GiB'), so a
    limit lowered and set back that way shrank on every capped call; this sets the smallest limit
    that shows the same text again (whole MiB for one shown in GiB), which holds from then on."""
    wanted = limit_bytes(shown)
    if wanted is None:  # not a size DuckDB shows ('-1', a word): as it was given
        con.execute(f"SET memory_limit = {literal(shown)}")
        return
    step = max(1, _MEMORY_UNITS[shown.split()[1]] >> 10)
    value = -(-int(wanted) // step) * step
    for _ in range(4):  # the first is enough for DuckDB 1.5's rounding; a later one may differ
        con.execute(f"SET memory_limit = '{value}B'")
        if memory_limit(con) == shown:
            return
        value += step


def in_transaction(con: duckdb.DuckDBPyConnection) -> bool:
    """Is a transaction of the caller's open on `con`? Outside one, two statements run in two
    transactions; inside, in the same. (A BEGIN to find out aborts the caller's transaction when it
    fails: "cannot start a transaction within a transaction" and every statement after it refused.)"""
    now = "SELECT current_transaction_id()"
    return bool(first_row(con.execute(now)) == first_row(con.execute(now)))


def first_row(cur: duckdb.DuckDBPyConnection | duckdb.DuckDBPyRelation) -> tuple[Any, ...]:
    """The one row a query that always returns one (an aggregate, a setting) returned."""
    row = cur.fetchone()
    if row is None:  # pragma: no cover - only for statements that always return a row
        raise AssertionError("the statement returned no row")
    return row
