"""Streaming the events of a PyTorch profiler (Kineto) trace into staging tables.

A training run's trace reaches gigabytes, so it is never loaded whole. `stage` has DuckDB's
JSON reader do it (kineto_scan.py) wherever that reads every value exactly; the Python reader
here is the reference and the rest: ijson yields one event at a time (numbers as Decimal, so
`ts` / `dur` stay exact), events are sorted into a handful of column batches by what they are,
and each batch goes into a TEMP staging table through Arrow. kineto.py turns the staging
tables into canonical rows with SQL.

Times: Kineto writes `ts` and `dur` in microseconds, floats with up to three decimals, relative
to `baseTimeNanoseconds` (absent before torch 2.0: then relative to the Unix epoch). They are
read as decimal text and multiplied by 1000 exactly (rounded half to even past the third
decimal), so no float ever touches a timestamp; staged times are ns relative to that base.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import duckdb
import ijson  # type: ignore[import-untyped]  # ships no type information

from ...errors import InputError
from . import kineto_scan

# Rows held in Python before a batch goes to DuckDB (all staging tables together).
BATCH = 50_000

# Kineto categories (any case; torch 1.8-1.10 spelled the first ones Operator, Kernel...) -> the category nsa stages them under
CATEGORIES = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "user_annotation",
    "python_function": "python_function",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "driver",
}
GPU_CATEGORIES = ("kernel", "memcpy", "memset")
HOST_CATEGORIES = ("cpu_op", "user_annotation", "python_function", "runtime", "driver")
FLOW_PHASES = ("s", "t", "f")

# Column types as DuckDB names, made Arrow types in flush: pyarrow is imported only there, since
# importing it costs ~0.1 s, which every CLI command paid when the readers were discovered.
_I64, _I32, _STR = "BIGINT", "INTEGER", "VARCHAR"
STAGING: dict[str, dict[str, str]] = {
    "_kin_gpu": {
        "idx": _I64, "category": _STR, "name_id": _I64, "pid": _I64, "tid": _I64, "ts": _I64, "dur": _I64,
        "device": _I32, "context": _I64, "stream": _I64, "correlation": _I64, "external_id": _I64,
        "grid_x": _I32, "grid_y": _I32, "grid_z": _I32, "block_x": _I32, "block_y": _I32, "block_z": _I32,
        "registers": _I32, "smem": _I64, "bytes": _I64,
    },
    "_kin_host": {
        "idx": _I64, "category": _STR, "name_id": _I64, "pid": _I64, "tid": _I64, "ts": _I64, "dur": _I64,
        "correlation": _I64, "external_id": _I64, "seq": _I64, "fwd_tid": _I64, "rf_id": _I64,
        "input_dims": _STR, "input_types": _STR, "flops": _I64, "call_stack": _STR,
    },
    "_kin_mem": {
        "idx": _I64, "pid": _I64, "tid": _I64, "ts": _I64, "bytes": _I64, "allocated": _I64,
        "reserved": _I64, "device_id": _I32, "device_type": _I32, "addr": _I64,
    },
    "_kin_flow": {"category": _STR, "flow_id": _I64, "ph": _STR, "pid": _I64, "tid": _I64, "ts": _I64},
    "_kin_meta": {"pid": _I64, "tid": _I64, "key": _STR, "value": _STR},
    # the collective arguments of kernels and of record_param_comms ops (kineto.COMM_ARGS)
    "_kin_comm": {
        "idx": _I64, "category": _STR, "external_id": _I64, "collective": _STR, "in_nelems": _I64,
        "out_nelems": _I64, "group_size": _I64, "dtype": _STR, "process_group": _STR,
    },
    "_kin_str": {"id": _I64, "name": _STR},
}  # fmt: skip
# The key of the arguments PyTorch records about a collective: on the NCCL kernel itself (recent
# releases), on the host `record_param_comms` op with the kernel's `External id` (older), or nowhere.
COLLECTIVE_KEY = "Collective name"
# torch 1.8-1.12 with `with_stack=True`: an op's Python stack, "file.py(88): fn;..." (kept raw).
CALL_STACK_KEY = "Call stack"
# Staged with a name id (a long kernel name is stored once); these views put the names back.
NAMED = {"_kin_gpu", "_kin_host"}
_DUCK = {_I64: "BIGINT", _I32: "INTEGER", _STR: "VARCHAR"}
_TRAILING_INT = re.compile(r"(-?\d+)\s*$")


@dataclass
class TraceMeta:
    """The trace's top-level keys other than traceEvents."""

    values: dict[str, Any] = field(default_factory=dict)

    @property
    def base_ns(self) -> int | None:
        return as_int(self.values.get("baseTimeNanoseconds"))

    @property
    def devices(self) -> list[dict[str, Any]]:
        props = self.values.get("deviceProperties")
        return [d for d in props if isinstance(d, dict)] if isinstance(props, list) else []

    @property
    def distributed(self) -> dict[str, Any]:
        info = self.values.get("distributedInfo")
        return info if isinstance(info, dict) else {}


@dataclass
class Staged:
    """What the event pass saw: events per category, and the earliest time of the capture."""

    counts: dict[str, int] = field(default_factory=dict)
    profiler_start: int | None = None  # the `Trace` span (the profiling window), ns from the base


def to_ns(value: Any) -> int | None:
    """Microseconds (Decimal, int or numeric text) -> integer nanoseconds, exactly."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000
    try:
        us = value if isinstance(value, Decimal) else Decimal(str(value))
        return int((us * 1000).to_integral_value(ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError, OverflowError):
        return None


def as_int(value: Any) -> int | None:
    """An integer id or count: ints, integral Decimals, digits in text ('stream 7' -> 7)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (Decimal, float)):
        try:
            return int(value)
        except (ValueError, OverflowError, InvalidOperation):
            return None
    if isinstance(value, str):
        m = _TRAILING_INT.search(value)
        return int(m.group(1)) if m else None
    return None


def _arg(args: dict[str, Any], *names: str) -> Any:
    for n in names:
        if n in args:
            return args[n]
    return None


def _dims(value: Any) -> tuple[int | None, int | None, int | None]:
    if isinstance(value, list) and len(value) == 3:
        return as_int(value[0]), as_int(value[1]), as_int(value[2])
    return None, None, None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=_json_number, separators=(", ", ": "))


def _json_number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(type(value).__name__)


def json_error(path: Path, exc: Exception) -> InputError:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return InputError(
        f"{path} is not a complete PyTorch profiler trace (JSON error: {text}); the file is "
        "truncated or damaged: export it again with `prof.export_chrome_trace(path)`."
    )


def read_meta(path: Path) -> TraceMeta:
    """The top-level keys besides traceEvents. Most traces write them before the events; when
    `baseTimeNanoseconds` has not come by then, the scan goes on past the events for it."""
    meta = TraceMeta()
    where = kineto_scan.locate(path)
    if where is not None:
        meta.values.update(where.head)
        if "baseTimeNanoseconds" not in where.head:
            meta.values.update(where.tail)
        return meta
    key: str | None = None
    builder: ijson.ObjectBuilder | None = None
    seen_events = False
    with path.open("rb") as fh:
        for prefix, event, value in ijson.parse(fh, use_float=False):
            if prefix == "traceEvents" or prefix.startswith("traceEvents."):
                if not seen_events and "baseTimeNanoseconds" in meta.values:
                    return meta  # the events follow; everything needed is known
                seen_events = True
                continue
            if prefix == "":
                key = value if event == "map_key" else key
                continue
            if builder is None:
                builder = ijson.ObjectBuilder()
            builder.event(event, value)
            if prefix == key and event not in ("start_map", "start_array", "map_key"):
                meta.values[str(key)] = builder.value
                builder = None
    return meta


class Stager:
    """Sorts events into column batches and appends each full batch to its staging table."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.cols: dict[str, dict[str, list[Any]]] = {t: {c: [] for c in cols} for t, cols in STAGING.items()}
        self.staged = Staged()
        self.pending = 0
        self.names: dict[str, int] = {}
        for table, cols in STAGING.items():
            body = ", ".join(f'"{c}" {_DUCK[t]}' for c, t in cols.items())
            con.execute(f"CREATE OR REPLACE TEMP TABLE {_stored(table)} ({body})")
        for table in NAMED:
            con.execute(
                f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT t.*, s.name FROM {_stored(table)} AS t "
                "LEFT JOIN _kin_str AS s ON s.id = t.name_id"
            )

    def _name_id(self, name: str) -> int:
        found = self.names.get(name)
        if found is None:
            found = self.names[name] = len(self.names)
            self._row("_kin_str", id=found, name=name)
        return found

    def add(self, idx: int, ev: dict[str, Any]) -> None:
        ph = ev.get("ph")
        args = ev.get("args")
        args = args if isinstance(args, dict) else {}
        cat = ev.get("cat")
        category = CATEGORIES.get(cat.lower()) if isinstance(cat, str) else None
        if ph == "X" and category in GPU_CATEGORIES:
            self._gpu(idx, str(category), ev, args)
        elif ph == "X" and category in HOST_CATEGORIES:
            self._host(idx, str(category), ev, args)
        elif ph == "i" and ev.get("name") == "[memory]":
            self._memory(idx, ev, args)
        elif ph in FLOW_PHASES:
            self._row("_kin_flow", category=str(cat), flow_id=as_int(ev.get("id")), ph=ph,
                      pid=as_int(ev.get("pid")), tid=as_int(ev.get("tid")), ts=to_ns(ev.get("ts")))  # fmt: skip
        elif ph == "M":
            value = args.get("name", args.get("labels"))
            self._row("_kin_meta", pid=as_int(ev.get("pid")), tid=as_int(ev.get("tid")),
                      key=str(ev.get("name")), value=None if value is None else str(value))  # fmt: skip
        elif ph == "X" and cat == "Trace":
            ts = to_ns(ev.get("ts"))
            if ts is not None and (self.staged.profiler_start is None or ts < self.staged.profiler_start):
                self.staged.profiler_start = ts
            return
        else:
            return
        name = "memory" if ph == "i" else ("flow" if ph in FLOW_PHASES else category or "meta")
        self.staged.counts[name] = self.staged.counts.get(name, 0) + 1

    def _common(self, idx: int, category: str, ev: dict[str, Any]) -> dict[str, Any]:
        return {
            "idx": idx,
            "category": category,
            "name_id": self._name_id(str(ev.get("name", ""))),
            "pid": as_int(ev.get("pid")),
            "tid": as_int(ev.get("tid")),
            "ts": to_ns(ev.get("ts")),
            "dur": to_ns(ev.get("dur")),
        }

    def _gpu(self, idx: int, category: str, ev: dict[str, Any], args: dict[str, Any]) -> None:
        gx, gy, gz = _dims(args.get("grid"))
        bx, by, bz = _dims(args.get("block"))
        self._row(
            "_kin_gpu",
            **self._common(idx, category, ev),
            device=as_int(args.get("device")),
            context=as_int(args.get("context")),
            stream=as_int(args.get("stream")),
            correlation=as_int(args.get("correlation")),
            external_id=as_int(_arg(args, "External id", "external id")),
            grid_x=gx, grid_y=gy, grid_z=gz, block_x=bx, block_y=by, block_z=bz,
            registers=as_int(args.get("registers per thread")),
            smem=as_int(args.get("shared memory")),
            bytes=as_int(args.get("bytes")),
        )  # fmt: skip
        if COLLECTIVE_KEY in args:
            self._comm(idx, category, args)

    def _host(self, idx: int, category: str, ev: dict[str, Any], args: dict[str, Any]) -> None:
        self._row(
            "_kin_host",
            **self._common(idx, category, ev),
            correlation=as_int(args.get("correlation")),
            external_id=as_int(_arg(args, "External id", "external id")),
            seq=as_int(_arg(args, "Sequence number", "Sequence Number", "seq")),
            fwd_tid=as_int(_arg(args, "Fwd thread id", "Fwd Thread Id")),
            rf_id=as_int(_arg(args, "Record function id")),
            input_dims=_json_text(_arg(args, "Input Dims", "Input dims")),
            input_types=_json_text(_arg(args, "Input type", "Input types")),
            flops=as_int(_arg(args, "flops", "Flops")),
            call_stack=_text(args.get(CALL_STACK_KEY)),
        )
        if COLLECTIVE_KEY in args:
            self._comm(idx, category, args)

    def _comm(self, idx: int, category: str, args: dict[str, Any]) -> None:
        self._row(
            "_kin_comm",
            idx=idx,
            category=category,
            external_id=as_int(_arg(args, "External id", "external id")),
            collective=_text(args.get(COLLECTIVE_KEY)),
            in_nelems=as_int(args.get("In msg nelems")),
            out_nelems=as_int(args.get("Out msg nelems")),
            group_size=as_int(args.get("Group size")),
            dtype=_text(args.get("dtype")),
            process_group=_text(args.get("Process Group Name")),
        )

    def _memory(self, idx: int, ev: dict[str, Any], args: dict[str, Any]) -> None:
        self._row(
            "_kin_mem",
            idx=idx,
            pid=as_int(ev.get("pid")),
            tid=as_int(ev.get("tid")),
            ts=to_ns(ev.get("ts")),
            bytes=as_int(args.get("Bytes")),
            allocated=as_int(args.get("Total Allocated")),
            reserved=as_int(args.get("Total Reserved")),
            device_id=as_int(args.get("Device Id")),
            device_type=as_int(args.get("Device Type")),
            addr=as_int(args.get("Addr")),
        )

    def _row(self, table: str, **values: Any) -> None:
        cols = self.cols[table]
        for c, v in values.items():
            cols[c].append(v)
        self.pending += 1
        if self.pending >= BATCH:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa  # type: ignore[import-untyped]  # ships no type information

        arrow = {_I64: pa.int64(), _I32: pa.int32(), _STR: pa.string()}
        for table, cols in self.cols.items():
            if not next(iter(cols.values())):
                continue
            types = {c: arrow[t] for c, t in STAGING[table].items()}
            batch = pa.table({c: pa.array(v, type=types[c]) for c, v in cols.items()})
            self.con.register("_kin_batch", batch)
            try:
                self.con.execute(f"INSERT INTO {_stored(table)} SELECT * FROM _kin_batch")
            finally:
                self.con.unregister("_kin_batch")
            for v in cols.values():
                v.clear()
        self.pending = 0

    def drop(self) -> None:
        for table in STAGING:
            try:
                if table in NAMED:
                    self.con.execute(f"DROP VIEW IF EXISTS {table}")
                self.con.execute(f"DROP TABLE IF EXISTS {_stored(table)}")
            except duckdb.Error:  # the transaction failed: its ROLLBACK drops them
                break


def _stored(table: str) -> str:
    return f"{table}_rows" if table in NAMED else table


def events(path: Path) -> Iterator[dict[str, Any]]:
    """The trace's events, one at a time, numbers as Decimal."""
    with path.open("rb") as fh:
        yield from ijson.items(fh, "traceEvents.item", use_float=False)


def scan(con: duckdb.DuckDBPyConnection, path: Path) -> tuple[kineto_scan.Scanned, Staged] | None:
    """The staging tables as DuckDB's JSON reader gives them (kineto_scan.py), or None where it
    does not read every value exactly. Called outside a transaction (see kineto_scan.stage)."""
    where = kineto_scan.locate(path)
    scanned = None if where is None else kineto_scan.stage(con, path, where)
    if scanned is None:
        return None
    views, counts, start = scanned
    return views, Staged(counts=counts, profiler_start=start)


def stage(con: duckdb.DuckDBPyConnection, path: Path) -> tuple[Stager | kineto_scan.Scanned, Staged]:
    """One pass over the events into the staging tables; InputError for a damaged trace.
    DuckDB's JSON reader does it where it reads the events exactly (`scan`), this module's
    Python reader where it does not (`read_exactly`)."""
    return scan(con, path) or read_exactly(con, path)


def read_exactly(con: duckdb.DuckDBPyConnection, path: Path) -> tuple[Stager, Staged]:
    """The staging tables from this module's exact Python reader; InputError for a damaged trace."""
    stager = Stager(con)
    try:
        for idx, ev in enumerate(events(path)):
            if isinstance(ev, dict):
                stager.add(idx, ev)
        stager.flush()
    except ijson.JSONError as exc:
        stager.drop()
        raise json_error(path, exc) from exc
    return stager, stager.staged
