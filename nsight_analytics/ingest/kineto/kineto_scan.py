"""The events of a PyTorch profiler (Kineto) trace, parsed by DuckDB's JSON reader.

DuckDB reads a top-level JSON array in parallel and streams it, but a trace is an object whose
`traceEvents` member holds the array. `locate` finds that array's bytes (the members before
it are parsed as they come, those after it from the end of the file), and `read_json` reads a
temporary copy of exactly those bytes. One statement turns each event into a typed row of the
TEMP table `_kin_ev` in the workspace's connection, with the conversions
kineto_events.py does in Python written as SQL macros, and TEMP views give kineto.py the
staging tables it reads (`_kin_gpu`, `_kin_host`, ...). The reader stages before the ingest's
transaction begins, so an event DuckDB rejects leaves nothing behind.

DuckDB parses numbers to doubles. A time (`ts`, `dur`) is kept only where the double gives
back the exact decimal Kineto wrote: integers, and values below 2^43 us (ulp < 0.001 us) with
three decimals, which is what every PyTorch release writes. A trace with a fractional time
beyond that, a member DuckDB rejects (an item that is not an object, a duplicate key) or bytes
`locate` cannot place is read by the exact Python reader instead (kineto_events.Stager): it
also gives the one-sentence error for a damaged file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from ... import params

# The trace's head is read in pieces of this size until the `traceEvents` member starts.
HEAD_BYTES = 1 << 16
HEAD_LIMIT = 1 << 26
# The members after the events: looked for in this many bytes at the end of the file.
TAIL_BYTES = 1 << 20
# Fractional times at or past 2^43 us do not survive a double to the nanosecond.
EXACT_US = 1 << 43

_WS = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder(parse_float=Decimal)


@dataclass
class Located:
    """Where the events array lies in the file, and the other top-level members."""

    start: int  # the array's `[`
    end: int  # one past its `]`
    head: dict[str, Any] = field(default_factory=dict)  # the members before the events
    tail: dict[str, Any] = field(default_factory=dict)  # and after them


def _skip(text: str, pos: int) -> int:
    """The position past the whitespace at `pos`."""
    m = _WS.match(text, pos)
    return m.end() if m else pos


class _Unplaced(ValueError):
    """The bytes do not have the shape `locate` reads."""


def _members(text: str, pos: int, stop_key: str | None) -> tuple[dict[str, Any], int]:
    """Object members `"key": value, ...` from `pos` (just past `{` or a `,`): up to the member
    named `stop_key` (its value's position is returned) or the closing `}` (one past it)."""
    out: dict[str, Any] = {}
    pos = _skip(text, pos)
    if text.startswith("}", pos) and stop_key is None:
        return out, pos + 1
    while True:
        if not text.startswith('"', pos):
            raise _Unplaced("a member name")
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise _Unplaced("a colon")
        pos = _skip(text, pos + 1)
        if key == stop_key:
            return out, pos
        out[key], pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if text.startswith("}", pos):
            if stop_key is not None:
                raise _Unplaced("no traceEvents")
            return out, pos + 1
        if not text.startswith(",", pos):
            raise _Unplaced("a comma")
        pos = _skip(text, pos + 1)


def _head(fh: Any) -> tuple[dict[str, Any], int]:
    """The members before `traceEvents` and the byte offset of its `[`."""
    size = HEAD_BYTES
    while True:
        fh.seek(0)
        raw = fh.read(size)
        text = raw.decode("utf-8", errors="surrogateescape")
        body = len(text) - len(text.lstrip("\ufeff \t\r\n"))
        if not text.startswith("{", body):
            raise _Unplaced("not an object")
        try:
            head, pos = _members(text, body + 1, "traceEvents")
        except (ValueError, IndexError) as exc:  # a member cut by the end of the piece
            if len(raw) < size or size >= HEAD_LIMIT:
                raise _Unplaced("no traceEvents") from exc
            size *= 4
            continue
        if not text.startswith("[", pos):
            raise _Unplaced("traceEvents is not an array")
        return head, len(text[:pos].encode("utf-8", errors="surrogateescape"))


def _tail(fh: Any, size: int, start: int) -> tuple[dict[str, Any], int]:
    """The members after the events and the offset one past the array's `]`: the earliest `]`
    after which the rest of the file reads as `, "key": value ... }` (a `]` that ends a later
    member's value comes after it)."""
    begin = max(start + 1, size - TAIL_BYTES)
    fh.seek(begin)
    raw = fh.read(size - begin)
    text = raw.decode("utf-8", errors="surrogateescape")
    found: tuple[dict[str, Any], int] | None = None
    members: dict[str, Any]
    at = len(text)
    while (at := text.rfind("]", 0, at)) >= 0:
        pos = _skip(text, at + 1)
        try:
            if text.startswith("}", pos):
                members, end = {}, pos + 1
            elif text.startswith(",", pos):
                members, end = _members(text, pos + 1, None)
            else:
                continue
        except (ValueError, IndexError):
            continue
        if _skip(text, end) == len(text):
            found = members, begin + len(text[: at + 1].encode("utf-8", errors="surrogateescape"))
    if found is None:
        raise _Unplaced("no end of traceEvents")
    return found


def locate(path: Path) -> Located | None:
    """The events array's bytes and the members around it; None when the file does not read
    as one object with a `traceEvents` array (the exact reader then decides)."""
    size = path.stat().st_size
    try:
        with path.open("rb") as fh:
            head, start = _head(fh)
            tail, end = _tail(fh, size, start)
    except _Unplaced:
        return None
    if "traceEvents" in tail:
        return None
    return Located(start, end, head, tail)


def _copy(src: Path, start: int, end: int, dst: str) -> None:
    """Write the bytes [start, end) of src to dst (a named pipe or a file): in the kernel where
    it can (copy_file_range: no pass through Python's buffers), else in pieces."""
    with src.open("rb") as fin, open(dst, "wb") as fout:
        left = end - start
        try:
            while left > 0:
                n = os.copy_file_range(
                    fin.fileno(), fout.fileno(), min(left, 1 << 30), start + (end - start - left)
                )
                if n <= 0:
                    break
                left -= n
        except (AttributeError, OSError):  # not Linux, or not between these two files
            pass
        fin.seek(end - left)
        while left > 0:
            chunk = fin.read(min(left, 1 << 22))
            if not chunk:
                break
            fout.write(chunk)
            left -= len(chunk)


def events_file(path: Path, where: Located, folder: str) -> str:
    """A file in `folder` that holds the events array alone (DuckDB reads a named pipe only by
    keeping what it has read in memory)."""
    target = os.path.join(folder, "events.json")
    _copy(path, where.start, where.end, target)
    return target


# The `args` members each kind of event stages, looked up in one json_extract per event (one
# parse of its arguments). Where a member has several spellings, the first one present wins (a
# JSON null counts as present, as dict.get has it). A collective's arguments are read later from
# the arguments kept whole for those few events (`comm_args`).
ARG_KEYS = {
    "gpu": (
        "device", "context", "stream", "correlation", "External id", "external id", "grid", "block",
        "registers per thread", "shared memory", "bytes", "Collective name",
    ),
    "host": (
        "correlation", "External id", "external id", "Sequence number", "Sequence Number", "seq",
        "Fwd thread id", "Fwd Thread Id", "Record function id", "Input Dims", "Input dims", "Input type",
        "Input types", "flops", "Flops", "Call stack", "Collective name",
    ),
    "mem": ("Bytes", "Total Allocated", "Total Reserved", "Device Id", "Device Type", "Addr"),
    "meta": ("name", "labels"),
}  # fmt: skip
COMM_KEYS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
)


def _paths(keys: tuple[str, ...]) -> str:
    return "[" + ", ".join(params.literal('$."' + k + '"') for k in keys) + "]"


def _pick(source: str, keys: tuple[str, ...], *wanted: str) -> str:
    """The first of `wanted` present in `source`, the json_extract of `keys`."""
    items = [f"{source}[{keys.index(k) + 1}]" for k in wanted]
    return items[0] if len(items) == 1 else f"coalesce({', '.join(items)})"


def _arg(template: str, cast: str = "", **by_kind: str | tuple[str, ...]) -> str:
    """`template` ("_kin_int({})") of the argument a kind names {kind: key or keys, the first
    present wins}, NULL for the other kinds: each kind's rows read only their own members."""
    whens = []
    for kind, keys in by_kind.items():
        wanted = (keys,) if isinstance(keys, str) else keys
        whens.append(
            f"WHEN {params.literal(kind)} THEN {template.format(_pick('a', ARG_KEYS[kind], *wanted))}"
        )
    expr = f"CASE kind {' '.join(whens)} END"
    return f"CAST({expr} AS {cast})" if cast else expr


# kineto_events.as_int, to_ns and _text on DuckDB's values: `j` is JSON text, `v` VARCHAR.
MACROS = r"""
CREATE OR REPLACE TEMP MACRO _kin_int(j) AS CASE
    WHEN j IS NULL THEN NULL
    WHEN starts_with(j, '"') THEN TRY_CAST(regexp_extract(json_extract_string(j, '$'), '(-?\d+)\s*$', 1) AS BIGINT)
    WHEN j = 'true' OR j = 'false' THEN NULL
    WHEN contains(j, '.') OR contains(j, 'e') OR contains(j, 'E')
        THEN TRY_CAST(trunc(TRY_CAST(j AS DECIMAL(38, 12))) AS BIGINT)
    ELSE TRY_CAST(j AS BIGINT) END;
CREATE OR REPLACE TEMP MACRO _kin_half_even(y) AS
    CAST(floor(y) + CASE WHEN y - floor(y) > 0.5 OR (y - floor(y) = 0.5 AND floor(y) % 2 <> 0) THEN 1 ELSE 0 END
         AS BIGINT);
CREATE OR REPLACE TEMP MACRO _kin_ns(v) AS CASE
    WHEN v IS NULL OR v = 'true' OR v = 'false' THEN NULL
    WHEN regexp_full_match(v, '-?[0-9]+(\.[0-9]{1,3})?')
        THEN TRY_CAST(split_part(v, '.', 1) || rpad(split_part(v, '.', 2), 3, '0') AS BIGINT)
    ELSE _kin_half_even(TRY_CAST(v AS DECIMAL(38, 12)) * 1000) END;
CREATE OR REPLACE TEMP MACRO _kin_inexact(v) AS
    (contains(v, '.') OR contains(v, 'e') OR contains(v, 'E')) AND v <> 'true' AND v <> 'false'
    AND abs(TRY_CAST(v AS DOUBLE)) >= {exact};
CREATE OR REPLACE TEMP MACRO _kin_text(j) AS CASE
    WHEN j IS NULL OR j = 'null' THEN NULL
    WHEN starts_with(j, '"') THEN json_extract_string(j, '$')
    WHEN j = 'true' THEN 'True' WHEN j = 'false' THEN 'False'
    ELSE CAST(j AS VARCHAR) END;
CREATE OR REPLACE TEMP MACRO _kin_dim(j, i) AS
    CASE WHEN json_array_length(j) = 3 THEN _kin_int(json_extract(j, '$[' || i || ']')) END;
"""
COLUMNS = (
    "{'ph': 'VARCHAR', 'cat': 'VARCHAR', 'name': 'VARCHAR', 'pid': 'JSON', 'tid': 'JSON', "
    "'ts': 'VARCHAR', 'dur': 'VARCHAR', 'id': 'JSON', 'args': 'JSON'}"
)
KINDS = ("gpu", "host", "mem", "flow", "meta", "trace")


def _enum(values: Iterable[str]) -> str:
    return "ENUM(" + ", ".join(params.literal(v) for v in dict.fromkeys(values)) + ")"


def _category_case() -> str:
    from .kineto_events import CATEGORIES

    whens = " ".join(f"WHEN {params.literal(k)} THEN {params.literal(v)}" for k, v in CATEGORIES.items())
    return f"CASE lower(cat) {whens} END"


def _events_sql(source: str) -> str:
    """One row per event, a column per staged field. Fields of different kinds share a column
    where they mean the same (`bytes`, `device`), and a few columns hold one kind's field
    under another's name (see TABLES), so the table stays narrow: it holds every event."""
    from .kineto_events import CATEGORIES, FLOW_PHASES, GPU_CATEGORIES, HOST_CATEGORIES

    def within(values: tuple[str, ...]) -> str:
        return ", ".join(params.literal(v) for v in values)

    kind = (
        f"CASE WHEN ph = 'X' AND category IN ({within(GPU_CATEGORIES)}) THEN 'gpu' "
        f"WHEN ph = 'X' AND category IN ({within(HOST_CATEGORIES)}) THEN 'host' "
        "WHEN ph = 'i' AND name = '[memory]' THEN 'mem' "
        f"WHEN ph IN ({within(FLOW_PHASES)}) THEN 'flow' WHEN ph = 'M' THEN 'meta' "
        "WHEN ph = 'X' AND cat = 'Trace' THEN 'trace' END"
    )
    extract = " ".join(
        f"WHEN {params.literal(k)} THEN json_extract(args, {_paths(keys)})" for k, keys in ARG_KEYS.items()
    )
    integer, ext = "_kin_int({})", ("External id", "external id")
    dims = ", ".join(
        f"{_arg(f'_kin_dim({{}}, {i})', 'INTEGER', gpu=key)} AS {key}_{axis}"
        for key in ("grid", "block")
        for i, axis in enumerate("xyz")
    )
    collective = _arg("{} IS NOT NULL", gpu="Collective name", host="Collective name")
    return f"""
SELECT CAST(kind AS {_enum(KINDS)}) AS kind,
    CAST(CASE WHEN kind IN ('gpu', 'host') THEN category END AS {_enum(CATEGORIES.values())}) AS category,
    CASE WHEN kind = 'flow' THEN coalesce(cat, 'None') WHEN kind = 'meta' THEN coalesce(name, 'None')
        ELSE coalesce(name, '') END AS name,
    CAST(CASE WHEN kind = 'flow' THEN ph END AS {_enum(FLOW_PHASES)}) AS ph,
    _kin_int(pid) AS pid, _kin_int(tid) AS tid, _kin_ns(ts) AS ts, _kin_ns(dur) AS dur,
    _kin_inexact(ts) OR _kin_inexact(dur) AS inexact,
    CASE WHEN kind = 'flow' THEN _kin_int(id) ELSE {_arg(integer, gpu="correlation", host="correlation")} END
        AS correlation,
    {_arg(integer, "INTEGER", gpu="device", mem="Device Id")} AS device,
    {_arg(integer, gpu="context")} AS context, {_arg(integer, gpu="stream")} AS stream,
    {_arg(integer, gpu=ext, host=ext)} AS external_id,
    {dims},
    {_arg(integer, "INTEGER", gpu="registers per thread")} AS registers,
    {_arg(integer, gpu="shared memory")} AS smem, {_arg(integer, gpu="bytes", mem="Bytes")} AS bytes,
    {_arg(integer, host=("Sequence number", "Sequence Number", "seq"))} AS seq,
    {_arg(integer, host=("Fwd thread id", "Fwd Thread Id"))} AS fwd_tid,
    {_arg(integer, host="Record function id")} AS rf_id,
    {_arg("{}", "VARCHAR", host=("Input Dims", "Input dims"))} AS input_dims_json,
    {_arg("{}", "VARCHAR", host=("Input type", "Input types"))} AS input_types_json,
    {_arg(integer, host=("flops", "Flops"))} AS flops,
    {_arg("_kin_text({})", host="Call stack", meta=("name", "labels"))} AS text,
    CASE WHEN {collective} THEN args END AS comm_args,
    {_arg(integer, mem="Total Allocated")} AS allocated, {_arg(integer, mem="Total Reserved")} AS reserved,
    {_arg(integer, "INTEGER", mem="Device Type")} AS device_type, {_arg(integer, mem="Addr")} AS addr
FROM (
    SELECT *, CASE WHEN json_type(args) = 'OBJECT' THEN CASE kind {extract} END END AS a
    FROM (
        SELECT *, {kind} AS kind
        FROM (
            SELECT *, {_category_case()} AS category
            FROM read_json({params.literal(source)}, format = 'array', columns = {COLUMNS})
        )
    )
)
"""


# The staging tables of kineto_events.STAGING: views of `_kin_ev` (rowid: the event's index).
# A flow's category is in `name`, its id in `correlation`; a memory event's device in `device`;
# the Call stack of an op and the value of a metadata event in `text`.
TABLES = {
    "_kin_gpu": "SELECT rowid AS idx, CAST(category AS VARCHAR) AS category, name, pid, tid, ts, dur, device, "
    "context, stream, correlation, external_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, registers, "
    "smem, bytes FROM _kin_ev WHERE kind = 'gpu'",
    "_kin_host": "SELECT e.rowid AS idx, CAST(category AS VARCHAR) AS category, name, pid, tid, ts, dur, "
    "correlation, external_id, seq, fwd_tid, rf_id, d.text AS input_dims, t.text AS input_types, flops, "
    "e.text AS call_stack FROM _kin_ev AS e "
    "LEFT JOIN _kin_json AS d ON d.raw = e.input_dims_json LEFT JOIN _kin_json AS t ON t.raw = e.input_types_json "
    "WHERE kind = 'host'",
    "_kin_mem": "SELECT rowid AS idx, pid, tid, ts, bytes, allocated, reserved, device AS device_id, "
    "device_type, addr FROM _kin_ev WHERE kind = 'mem'",
    "_kin_flow": "SELECT name AS category, correlation AS flow_id, CAST(ph AS VARCHAR) AS ph, pid, tid, ts "
    "FROM _kin_ev WHERE kind = 'flow'",
    "_kin_meta": "SELECT pid, tid, name AS key, text AS value FROM _kin_ev WHERE kind = 'meta'",
    "_kin_comm": "SELECT idx, category, external_id, _kin_text(c[1]) AS collective, _kin_int(c[2]) AS in_nelems, "
    "_kin_int(c[3]) AS out_nelems, _kin_int(c[4]) AS group_size, _kin_text(c[5]) AS dtype, "
    "_kin_text(c[6]) AS process_group FROM (SELECT rowid AS idx, CAST(category AS VARCHAR) AS category, "
    f"external_id, json_extract(comm_args, {_paths(COMM_KEYS)}) AS c FROM _kin_ev WHERE comm_args IS NOT NULL)",
}

# What `stage` leaves in the connection besides the views.
_STORED = ("_kin_ev", "_kin_json")
_MACROS = re.findall(r"MACRO (_kin_\w+)", MACROS)


class Scanned:
    """The staging views in the workspace's connection; drop() removes them and what they read
    (as kineto_events.Stager.drop)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def drop(self) -> None:
        try:
            for view in TABLES:
                self.con.execute(f"DROP VIEW IF EXISTS {view}")
            for table in _STORED:
                self.con.execute(f"DROP TABLE IF EXISTS {table}")
            for macro in _MACROS:
                self.con.execute(f"DROP MACRO IF EXISTS {macro}")
        except duckdb.Error:  # the transaction failed: its ROLLBACK drops them
            pass


def _json_texts(con: duckdb.DuckDBPyConnection) -> None:
    """`Input Dims` / `Input type` as kineto_events._json_text writes them, once per distinct value."""
    from .kineto_events import _json_text

    raws = [
        raw
        for (raw,) in con.execute(
            "SELECT input_dims_json FROM _kin_ev WHERE kind = 'host' AND input_dims_json IS NOT NULL UNION "
            "SELECT input_types_json FROM _kin_ev WHERE kind = 'host' AND input_types_json IS NOT NULL"
        ).fetchall()
    ]
    con.execute("CREATE OR REPLACE TEMP TABLE _kin_json (raw VARCHAR, text VARCHAR)")
    params.insert_rows(con, "_kin_json", [(r, _json_text(json.loads(r, parse_float=Decimal))) for r in raws])


def stage(
    con: duckdb.DuckDBPyConnection, path: Path, where: Located
) -> tuple[Scanned, dict[str, int], int | None] | None:
    """The staging views of the trace at `path` in `con`, the events per kind and the profiling
    window's start; None (nothing left behind) when DuckDB cannot read the events exactly.
    Run outside a transaction: a rejected event then fails its own statement only."""
    folder = tempfile.mkdtemp(prefix="nsa-kineto-")
    scanned = Scanned(con)
    try:
        con.execute(MACROS.replace("{exact}", str(EXACT_US)))
        source = events_file(path, where, folder)
        con.execute(f"CREATE OR REPLACE TEMP TABLE _kin_ev AS {_events_sql(source)}")
        Path(source).unlink()
        if params.first_row(con.execute("SELECT count(*) FILTER (WHERE inexact) FROM _kin_ev"))[0]:
            scanned.drop()
            return None
        _json_texts(con)
        counts: dict[str, int] = {}
        for kind, category, n in con.execute(
            "SELECT kind, category, count(*) FROM _kin_ev "
            "WHERE kind IN ('gpu', 'host', 'mem', 'flow', 'meta') GROUP BY ALL"
        ).fetchall():
            name = {"mem": "memory", "flow": "flow", "meta": "meta"}.get(kind, category)
            counts[name] = counts.get(name, 0) + int(n)
        start = params.first_row(con.execute("SELECT min(ts) FROM _kin_ev WHERE kind = 'trace'"))[0]
        for view, sql in TABLES.items():
            con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {sql}")
    except duckdb.Error:
        scanned.drop()
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return scanned, counts, None if start is None else int(start)
