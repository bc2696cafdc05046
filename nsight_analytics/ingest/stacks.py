"""Call stacks -> stack_frames, stacks, stack_events (issue 33: which line of code).

Where each capture keeps them:
- nsys `-s cpu`: COMPOSITE_EVENTS (one row per CPU sample: time, thread, state) and
  SAMPLING_CALLCHAINS (its frames, `id` = the sample's id, stackDepth 0 the leaf);
- nsys `--cudabacktrace`: CUPTI_ACTIVITY_KIND_RUNTIME.callchainId -> CUDA_CALLCHAINS;
- nsys OS runtime backtraces (calls over `--osrt-backtrace-threshold`): OSRT_API.callchainId ->
  OSRT_CALLCHAINS;
- nsys `--python-sampling` / `--python-backtrace=cuda`: NVTX_EVENTS rows of eventType 34 in the
  domains 'Python Periodic Sampling' and 'Python Backtrace on CUDA' (their eventType 75 rows name
  them), each an NVTX extended payload in binaryData laid out by NVTX_PAYLOAD_SCHEMAS / _ENTRIES:
  thread state (an enum, NVTX_PAYLOAD_ENUM_ENTRIES), frame count, then the frames (function and
  file as StringIds ids, line), innermost first. `nsys export` writes binaryData only with
  `--include-blobs=true`; without it the events keep their time and thread and lose the frames.
- PyTorch profiler `with_stack=True`: `python_function` events (cpu_ops), nested by time on their
  thread; an event's stack is its chain of enclosing frames (Kineto's `Python parent id`). Traces
  of PyTorch 1.8-1.12 have no such events: their ops carry a `Call stack` argument instead
  (cpu_ops.call_stack where the reader keeps it).

A CUDA call with both a native and a Python backtrace gets them as one stack on its python_cuda
event: the native frames from the CUDA runtime up to the interpreter's, then the Python frames.

Frames are deduplicated per report (one frame_id per kind, function, file, line and module) and
so are stacks (one stack_id per list of frames), so a million samples of one loop cost one stack.
"""

from __future__ import annotations

import re
import sqlite3
import struct
import sys
from collections.abc import Callable, Collection
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb

from .. import params, schema
from .sqlite_source import SQLITE_MAGIC, columns, open_attached

if TYPE_CHECKING:  # imported where used: ~0.1 s that every CLI command paid (issue 31)
    import pyarrow as pa  # type: ignore[import-untyped]  # ships no type information

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SAMPLES = "COMPOSITE_EVENTS"
NVTX = "NVTX_EVENTS"
STRINGS = "_nsa_strings"  # nsys.STRINGS, prepared by the reader before a load
# native backtraces: (chain letter, callchain table, the table whose rows point at them, its column)
NATIVE = (
    ("s", "SAMPLING_CALLCHAINS", SAMPLES, "id"),
    ("c", "CUDA_CALLCHAINS", RUNTIME, "callchainId"),
    ("o", "OSRT_CALLCHAINS", "OSRT_API", "callchainId"),
)
PYTHON_EVENT = 34  # NVTX eventType of nsys' Python samples and backtraces
PYTHON_DOMAINS = {"Python Periodic Sampling": "python_sample", "Python Backtrace on CUDA": "python_cuda"}
# ENUM_SAMPLING_THREAD_STATE (COMPOSITE_EVENTS.threadState)
THREAD_STATES = {
    0: "Unknown", 1: "Running", 2: "Interruptible", 3: "Uninterruptible", 4: "Stopped", 5: "Terminated",
    6: "Unscheduled", 7: "Waiting", 8: "OS runtime", 9: "Initialized", 10: "Transition",
}  # fmt: skip
TABLES = ("stack_frames", "stacks", "stack_events")


class Source(Protocol):
    """What the loader needs of an attached nsys export (ingest.nsys.Source)."""

    tables: dict[str, set[str]]
    alias: str

    def ref(self, table: str) -> str: ...

    def nvtx_domain_events(self, con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]: ...


# Library code, so that the user's own frame can be told apart. Python: files under site-packages
# or dist-packages, the standard library (lib/pythonX.Y/, frozen modules), built-ins (Kineto's
# `<built-in method ...>`); Kineto writes paths relative to sys.path, so there the first part of
# the path is checked against the standard library's modules and these packages.
LIBRARY_PACKAGES = (
    "torch", "torchvision", "torchaudio", "torchtext", "functorch", "triton", "numpy", "scipy", "pandas",
    "transformers", "accelerate", "deepspeed", "megatron", "apex", "xformers", "flash_attn", "vllm", "sglang",
    "datasets", "tokenizers", "safetensors", "einops", "lightning", "pytorch_lightning", "torchmetrics",
    "jax", "jaxlib", "flax", "tensorflow", "keras", "cupy", "numba", "onnx", "onnxruntime", "tqdm", "PIL",
    "typing_extensions", "nvtx", "cuda", "nvidia", "tensorrt", "torch_tensorrt", "timm", "peft", "trl",
    "huggingface_hub", "fsspec", "packaging", "setuptools", "pkg_resources", "wandb", "tensorboard", "_pytest",
    "pytest", "click", "yaml", "google", "absl", "hydra", "omegaconf", "ray", "dask",
)  # fmt: skip
STDLIB = tuple(sorted(getattr(sys, "stdlib_module_names", ())))
LIBRARY_PY = r"(^<|/(site|dist)-packages/|/lib/python[0-9.]*/|^python[0-9.]*/)"
# Native: system and vendor libraries (libc, the CUDA runtime and driver, libpython, torch's
# libraries), the kernel and the nsys injection libraries; what is left is the program's own code.
LIBRARY_NATIVE = (
    r"(^\[|^/(usr|lib|lib64|opt/nvidia|etc|bin|sbin)/|/(site|dist)-packages/|/cuda[^/]*/|/nsight[^/]*/"
    r"|/lib(c|m|dl|pthread|rt|stdc\+\+|gcc_s|cuda\w*|cupti\w*|cublas\w*|cudnn\w*|nccl|nvrtc\w*|nvToolsExt\w*"
    r"|nvJitLink\w*|cufft\w*|curand\w*|cusparse\w*|cusolver\w*|python[0-9.]*|torch\w*|c10\w*|ToolsInjection\w*"
    r"|InterceptorInjection\w*|unwind|z|ffi|numa|ibverbs|mpi\w*|ucp|ucs|uct|open-pal|open-rte)[.-][^/]*$)"
)
# Native functions that are a library's even inside the program's own binary: a statically linked
# CUDA runtime (`__cudart1050`, `cudaDeviceSynchronize`, `cuLaunchKernel`, nvcc's `__cudaRegister...`,
# cuda_runtime.h's templates `cudaError cudaLaunchKernel<char>(...)`)
# and the C start-up code (`_start`, `__libc_csu_init`); without this a CUDA C++ program's innermost
# "user" frame is the runtime's, not the line that called it.
LIBRARY_NATIVE_FUNCTION = (
    r"^(cudaError(_t)? )?(__cudart[0-9]*|__cuda[A-Za-z_]\w*|cuda[A-Z]\w*|cu[A-Z]\w*|_start|__libc_csu_\w+)"
    r"(\(|<|$)"
)


def user_sql(kind: str, function: str, file: str, module: str) -> str:
    """SQL: is the frame the user's own code (not a library, the runtime or the kernel)?"""
    top = f"regexp_extract({file}, '^([A-Za-z0-9_]+)(\\.py)?(/|$)', 1)"
    names = ", ".join(params.literal(n) for n in (*STDLIB, *LIBRARY_PACKAGES))
    python = (
        f"{file} IS NOT NULL AND NOT starts_with({function}, '<built-in') "
        f"AND NOT regexp_matches({file}, {params.literal(LIBRARY_PY)}) "
        f"AND (starts_with({file}, '/') OR {top} NOT IN ({names}))"
    )
    native = (
        f"{module} IS NOT NULL AND NOT regexp_matches({module}, {params.literal(LIBRARY_NATIVE)}) "
        f"AND NOT regexp_matches(coalesce({function}, ''), {params.literal(LIBRARY_NATIVE_FUNCTION)})"
    )
    return f"CASE {kind} WHEN 'python' THEN {python} WHEN 'native' THEN {native} ELSE false END"


def _has(tables: dict[str, set[str]], table: str, *cols: str) -> bool:
    """Has the export the table `table` with the columns `cols`?"""
    return table in tables and set(cols) <= tables[table]


def _has_frames(tables: dict[str, set[str]], table: str) -> bool:
    """Has the export the callchain table `table` with the frame columns _stk_raw copies?"""
    return _has(tables, table, "id", "symbol", "stackDepth")


# The source of each native chain's events (NATIVE's chain letters)
NATIVE_SOURCES = {"s": "cpu_sample", "c": "cuda_call", "o": "osrt_call"}


def _native_events(tables: dict[str, set[str]]) -> set[str]:
    """The chain letters (NATIVE) whose events _events_sql reads: their table has the columns it
    reads and, for calls, the export has the callchain table they point at."""
    out = set()
    if _has(tables, SAMPLES, "id", "start", "globalTid"):
        out.add("s")
    if _has(tables, RUNTIME, "callchainId", "correlationId", "globalTid") and "CUDA_CALLCHAINS" in tables:
        out.add("c")
    if _has(tables, "OSRT_API", "callchainId") and "OSRT_CALLCHAINS" in tables:
        out.add("o")
    return out


def has_stacks(tables: dict[str, set[str]]) -> bool:
    """Does the export hold call stacks of any kind?"""
    native = any(_has_frames(tables, t) for _, t, _, _ in NATIVE)
    return native or (NVTX in tables and "eventType" in tables[NVTX] and "NVTX_PAYLOAD_SCHEMAS" in tables)


# The payload entries a Python domain's schemas name (_layout): without both, its events have no frames.
FRAME_ENTRIES = ("Frames", "Frames count")


def export_sources(tables: dict[str, set[str]], entries: Collection[str] | None = None) -> set[str]:
    """The stack sources whose events `load` can give frames (stack_events.source where stack_id
    is set), from the export's tables and columns and `entries`, the names in its
    NVTX_PAYLOAD_SCHEMA_ENTRIES (None: not read): a superset, since a table of the right shape
    may hold no row that points at frames. An event has frames only where its chain's table has
    the frame columns (_has_frames) or, for Python, where the payload schemas lay out frames
    (_layout) of blobs the export kept (binaryData)."""
    if not has_stacks(tables):
        return set()
    events = _native_events(tables)
    out = {NATIVE_SOURCES[c] for c, table, _, _ in NATIVE if c in events and _has_frames(tables, table)}
    python = _has(tables, NVTX, "eventType", "domainId", "start", "globalTid", "binaryData")
    python = python and {"NVTX_PAYLOAD_SCHEMAS", "NVTX_PAYLOAD_SCHEMA_ENTRIES"} <= set(tables)
    if python and (entries is None or set(FRAME_ENTRIES) <= set(entries)):
        out |= set(PYTHON_DOMAINS.values())
    return out


def deferred_sources(con: duckdb.DuckDBPyConnection, report_id: int) -> set[str] | None:
    """The stack sources report `report_id`'s deferred stacks step could write (export_sources of
    its export's table listing and payload entries, read in milliseconds without running the
    step); None where that cannot be told so: the step is not deferred, the report is not an nsys
    SQLite export kept as a plain file (a gzip, an `.nsys-rep`, a Kineto trace), or the file is
    gone, unreadable or not the size and age it had at ingest (running the step then says what
    is wrong, as it would)."""
    row = params.execute(
        con,
        "SELECT format, source_path, size_bytes, source_mtime_ns, deferred_steps FROM reports "
        "WHERE report_id = $rid",
        {"rid": report_id},
    ).fetchone()
    if row is None:
        return None
    fmt, source, size, mtime, steps = row
    if fmt != "nsys" or "stack_events" not in (steps or ()):  # "nsys": reader_sqlite's name
        return None
    path = Path(source)
    try:
        stat = path.stat()
        if stat.st_size != size or mtime is None or stat.st_mtime_ns != mtime:
            return None
        with path.open("rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return None
        tables = columns(path)
        entries = None
        if "NVTX_PAYLOAD_SCHEMA_ENTRIES" in tables:  # a few rows per domain
            with closing(sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)) as db:
                names = ", ".join(f"'{n}'" for n in FRAME_ENTRIES)
                found = db.execute(
                    f"SELECT DISTINCT name FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE name IN ({names})"
                ).fetchall()
            entries = {str(n) for (n,) in found}
    except (OSError, sqlite3.Error):
        return None
    return export_sources(tables, entries)


def source_sql(src: Source) -> str | None:
    """What the `stacks` step reads (for the progress bar and the activity kind), or None when
    the export holds no stacks."""
    tables, ref = src.tables, src.ref
    if not has_stacks(tables):
        return None
    parts = [f"SELECT id FROM {ref(t)}" for _, t, _, _ in NATIVE if t in tables]
    if NVTX in tables and "NVTX_PAYLOAD_SCHEMAS" in tables:
        parts.append(f"SELECT eventType FROM {ref(NVTX)} WHERE eventType = {PYTHON_EVENT}")
    return "\nUNION ALL\n".join(parts)


# --- nsys -------------------------------------------------------------------------------------


_FMT = {1: "b", 2: "B", 3: "h", 4: "H", 5: "i", 6: "I", 7: "q", 8: "Q", 9: "q", 10: "Q", 11: "b", 12: "B",
        13: "h", 14: "H", 15: "i", 16: "I", 17: "q", 18: "Q", 80: "Q"}  # fmt: skip


class _Layout:
    """Where one Python domain's payload keeps the thread state, frame count and frames."""

    def __init__(self, entries: dict[str, tuple[int, int]], frame: dict[str, tuple[int, int]], size: int,
                 enum_sizes: dict[int, int], states: dict[int, str]) -> None:  # fmt: skip
        def fmt(type_: int) -> str:
            return _FMT.get(type_) or {1: "B", 2: "H", 4: "I", 8: "Q"}.get(enum_sizes.get(type_, 4), "I")

        self.state = (
            (entries["Thread state"][0], fmt(entries["Thread state"][1]))
            if "Thread state" in entries
            else None
        )
        self.count = (entries["Frames count"][0], fmt(entries["Frames count"][1]))
        self.frames = entries["Frames"][0]
        self.fields = [(frame[k][0], fmt(frame[k][1])) for k in ("Function", "File", "Line")]
        self.size = size
        self.states = states


def _layouts(con: duckdb.DuckDBPyConnection, src: Source) -> dict[int, tuple[str, _Layout | None]]:
    """domainId -> (source, layout) of the Python domains; layout None when it cannot be read."""
    tables = src.tables
    # the create events as the export's reader keeps them (read once, also for the ranges' copy)
    domains = {
        int(d): PYTHON_DOMAINS[name]
        for d, _, name, _ in src.nvtx_domain_events(con)
        if d is not None and isinstance(name, str) and name in PYTHON_DOMAINS
    }
    out: dict[int, tuple[str, _Layout | None]] = {}
    needed = {"NVTX_PAYLOAD_SCHEMAS", "NVTX_PAYLOAD_SCHEMA_ENTRIES"}
    for domain, source in domains.items():
        layout = None
        if needed <= set(tables):
            layout = _layout(con, src, domain)
        out[domain] = (source, layout)
    return out


def _layout(con: duckdb.DuckDBPyConnection, src: Source, domain: int) -> _Layout | None:
    ref, tables = src.ref, src.tables
    cols = tables.get("NVTX_PAYLOAD_SCHEMA_ENTRIES", set())
    enum_sizes: dict[int, int] = {}
    if "NVTX_PAYLOAD_ENUMS" in tables:
        for sid, sz in con.execute(
            f"SELECT schemaId, size FROM {ref('NVTX_PAYLOAD_ENUMS')} WHERE domainId = {int(domain)}"
        ).fetchall():
            enum_sizes[int(sid)] = int(sz or 4)
    # an entry's offset: the export's where it gives one (2025.3 leaves the first entry's NULL), else
    # laid out as the NVTX payload extension lays out a schema without offsets (natural alignment)
    offset_col = '"offset"' if "offset" in cols else "NULL"
    rows = con.execute(
        f"SELECT schemaId, name, type, {offset_col} "
        f"FROM {ref('NVTX_PAYLOAD_SCHEMA_ENTRIES')} WHERE domainId = {int(domain)}"
        + (" ORDER BY schemaId, idx" if "idx" in cols else "")
    ).fetchall()
    listed: dict[int, list[tuple[str, int, int | None]]] = {}
    for schema_id, name, type_, offset in rows:
        listed.setdefault(int(schema_id), []).append(
            (str(name), int(type_), None if offset is None else int(offset))
        )
    by_schema = {sid: _offsets(entries, listed, enum_sizes) for sid, entries in listed.items()}
    top = next((s for s in by_schema.values() if {"Frames", "Frames count"} <= set(s)), None)
    if top is None:
        return None
    frame = by_schema.get(top["Frames"][1])
    if frame is None or not {"Function", "File", "Line"} <= set(frame):
        return None
    size_row = con.execute(
        f"SELECT payloadSize FROM {ref('NVTX_PAYLOAD_SCHEMAS')} WHERE domainId = {int(domain)} "
        f"AND schemaId = {int(top['Frames'][1])}"
    ).fetchone()
    end = max(o + struct.calcsize(_FMT.get(t, "Q")) for o, t in frame.values())
    size = int(size_row[0]) if size_row and size_row[0] else (end + 7) // 8 * 8
    states: dict[int, str] = {}
    if "NVTX_PAYLOAD_ENUM_ENTRIES" in tables and "Thread state" in top:
        for value, name in con.execute(
            f"SELECT value, name FROM {ref('NVTX_PAYLOAD_ENUM_ENTRIES')} WHERE domainId = {int(domain)} "
            f"AND schemaId = {int(top['Thread state'][1])}"
        ).fetchall():
            states[int(value)] = str(name)
    return _Layout(top, frame, size, enum_sizes, states)


def _offsets(
    entries: list[tuple[str, int, int | None]],
    schemas: dict[int, list[tuple[str, int, int | None]]],
    enum_sizes: dict[int, int],
) -> dict[str, tuple[int, int]]:
    """name -> (offset, type) of one schema's entries, in their order: an entry without an offset
    (NULL, or an export without the column) starts at the first multiple of its alignment after the
    entry before it (a scalar's or enum's size; an embedded schema's largest member's)."""

    def align(type_: int) -> int:
        if type_ in schemas:
            return max((align(t) for _, t, _ in schemas[type_] if t != type_), default=8)
        if type_ in enum_sizes:
            return enum_sizes[type_]
        return struct.calcsize(_FMT.get(type_, "Q"))

    out: dict[str, tuple[int, int]] = {}
    end = 0
    for name, type_, offset in entries:
        width = align(type_)
        at = offset if offset is not None else -(-end // width) * width
        out[name] = (at, type_)
        end = at + width
    return out


def _python_rows(con: duckdb.DuckDBPyConnection, src: Source) -> tuple[pa.Table, pa.Table] | None:
    """nsys' Python frames: (events, chains). An event: source, start, globalTid, thread state and
    the key of its chain (NULL when the export has no binaryData); a chain: key, depth, the
    function and file (StringIds ids) and line. Identical frame lists share one key."""
    tables = src.tables
    ev: dict[str, list[object]] = {"source": [], "start": [], "gtid": [], "state": [], "chain": []}
    ch: dict[str, list[int]] = {"chain": [], "depth": [], "fn": [], "file": [], "line": []}
    cols = tables.get(NVTX, set())
    if not {"eventType", "domainId", "start", "globalTid"} <= cols:
        return None
    layouts = _layouts(con, src)
    if not layouts:
        return None
    blob = "binaryData" if "binaryData" in cols else "NULL"
    domains = ", ".join(str(d) for d in layouts)
    # read with sqlite3: nsys declares binaryData TEXT, which DuckDB's SQLite reader refuses for a BLOB
    db = open_attached(con, src.alias)
    cur = db.execute(
        f"SELECT domainId, start, globalTid, {blob} FROM {NVTX} "
        f"WHERE eventType = {PYTHON_EVENT} AND domainId IN ({domains})"
    )
    keys: dict[bytes, int] = {}
    # per row only the header is decoded; a list of frames is decoded the first time it is seen
    base_at = struct.Struct("<Q")
    decode = {
        d: (
            source,
            layout,
            struct.Struct("<" + layout.state[1]) if layout and layout.state else None,
            struct.Struct("<" + layout.count[1]) if layout else None,
        )
        for d, (source, layout) in layouts.items()
    }
    sources, starts, gtids, states, chains = ev["source"], ev["start"], ev["gtid"], ev["state"], ev["chain"]
    while batch := cur.fetchmany(50_000):
        for domain, start, gtid, data in batch:
            source, layout, state_at, count_at = decode[int(domain)]
            state, key = None, None
            if data is not None and layout is not None and count_at is not None:
                base = base_at.unpack_from(data, 24)[0] if len(data) >= 32 else 0
                if base + layout.frames > len(data):  # a payload shorter than its header: no frames
                    data = b""
            if data and layout is not None and count_at is not None:
                if state_at is not None and layout.state:
                    code = state_at.unpack_from(data, base + layout.state[0])[0]
                    state = layout.states.get(code, str(code))
                n = count_at.unpack_from(data, base + layout.count[0])[0]
                first = base + layout.frames
                raw = bytes(data[first : first + n * layout.size])
                if len(raw) == n * layout.size:  # else a layout this reader misread: no frames
                    key = keys.get(raw)
                    if key is None:
                        key = keys[raw] = len(keys)
                        _frames(ch, key, raw, n, layout)
            sources.append(source)
            starts.append(start)
            gtids.append(gtid)
            states.append(state)
            chains.append(key)
    db.close()
    return _arrow(ev, ch)


def _frames(ch: dict[str, list[int]], key: int, raw: bytes, n: int, layout: _Layout) -> None:
    """Append the n frames packed in `raw` to the chains' columns under `key`."""
    fields = [(o, struct.Struct("<" + f)) for o, f in layout.fields]
    for depth in range(n):
        at = depth * layout.size
        fn, file, line = (f.unpack_from(raw, at + o)[0] for o, f in fields)
        ch["chain"].append(key)
        ch["depth"].append(depth)
        ch["fn"].append(fn)
        ch["file"].append(file)
        ch["line"].append(line)


def _arrow(ev: dict[str, list[object]], ch: dict[str, list[int]]) -> tuple[pa.Table, pa.Table]:
    import pyarrow as pa

    events = pa.table(
        {
            "source": pa.array(ev["source"], pa.string()),
            "start": pa.array(ev["start"], pa.int64()),
            "gtid": pa.array(ev["gtid"], pa.int64()),
            "state": pa.array(ev["state"], pa.string()),
            "chain": pa.array(ev["chain"], pa.int64()),
        }
    )
    chains = pa.table({k: pa.array(v, pa.int64()) for k, v in ch.items()})
    return events, chains


def load(con: duckdb.DuckDBPyConnection, src: Source, report_id: int) -> int:
    """The `stacks` step of an nsys export: fills stack_frames, stacks and stack_events for one
    report; returns the stack events written. The reader has prepared the StringIds lookup."""
    tables, ref = src.tables, src.ref
    if not has_stacks(tables):
        return 0
    py = _python_rows(con, src)
    if py is None:  # no Python payloads (most exports): no Arrow, which would import pandas (~0.35 s)
        con.execute(
            "CREATE OR REPLACE TEMP VIEW _stk_py_events AS SELECT NULL::VARCHAR AS source, NULL::BIGINT AS start, "
            "NULL::BIGINT AS gtid, NULL::VARCHAR AS state, NULL::BIGINT AS chain WHERE false"
        )
        con.execute(
            "CREATE OR REPLACE TEMP VIEW _stk_py_chains AS SELECT NULL::BIGINT AS chain, NULL::BIGINT AS depth, "
            "NULL::BIGINT AS fn, NULL::BIGINT AS file, NULL::BIGINT AS line WHERE false"
        )
    else:
        con.register("_stk_py_events", py[0])
        con.register("_stk_py_chains", py[1])
    views = [
        partial(con.execute, f"DROP VIEW IF EXISTS {name}") if py is None else partial(con.unregister, name)
        for name in ("_stk_py_events", "_stk_py_chains")
    ]
    scratch = ("_stk_raw", "_stk_keys", "_stk_keymap", "_stk_calls", "_stk_frames", "_stk_chains", "_stk_ids")
    with params.cleaned_up(*views), params.dropped_after(con, *scratch):
        # the frames as StringIds ids (kind, a: function or symbol, b: file, line, m: module; -1 for
        # none), so that the millions of rows are matched on integers and only the distinct ones
        # are turned into text
        raw = [
            (
                "SELECT 'p' AS chain, chain AS chain_id, depth, 'python' AS kind, fn AS a, coalesce(file, -1) AS b, "
                "coalesce(CAST(line AS INTEGER), -1) AS line, -1 AS m FROM _stk_py_chains"
            )
        ]
        for letter, table, _, _ in NATIVE:
            if not _has_frames(tables, table):
                continue
            cols = tables[table]
            kernel = "kernelMode = 1" if "kernelMode" in cols else "false"
            module = "coalesce(module, -1)" if "module" in cols else "-1"
            raw.append(
                f"SELECT '{letter}', id, stackDepth, CASE WHEN {kernel} THEN 'kernel' ELSE 'native' END, "
                f"coalesce(symbol, -1), -1, -1, {module} FROM {ref(table)}"
            )
        con.execute("CREATE OR REPLACE TEMP TABLE _stk_raw AS " + "\nUNION ALL\n".join(raw))
        # nsys writes `<module>` HTML-escaped
        function = (
            "CASE WHEN k.kind = 'python' THEN replace(replace(replace(fs.value, '&lt;', '<'), '&gt;', '>'), "
            "'&amp;', '&') ELSE fs.value END"
        )
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _stk_keys AS SELECT k.*, k.kind AS kind_, {function} AS function, "
            "fi.value AS file, nullif(k.line, -1) AS line_, "
            f"fm.value AS module FROM (SELECT DISTINCT kind, a, b, line, m FROM _stk_raw) k "
            f"LEFT JOIN {STRINGS} fs ON fs.id = k.a LEFT JOIN {STRINGS} fi ON fi.id = k.b "
            f"LEFT JOIN {STRINGS} fm ON fm.id = k.m"
        )
        # the CUDA calls a Python backtrace may belong to, keyed by thread and start (a join with
        # the export's table inside the union would scan it once per row)
        calls = (
            "SELECT NULL::BIGINT AS globalTid, NULL::BIGINT AS start, NULL::BIGINT AS corr, NULL::BIGINT AS e, "
            "NULL::BIGINT AS native"
        )
        if RUNTIME in tables and {"correlationId", "globalTid", "start"} <= tables[RUNTIME]:
            # and the call's native backtrace (--cudabacktrace), which the Python one continues
            native = "NULL::BIGINT"
            if "callchainId" in tables[RUNTIME] and "CUDA_CALLCHAINS" in tables:
                native = 'arg_max(callchainId, "end")'
            calls = (
                f'SELECT globalTid, start, arg_max(correlationId, "end") AS corr, max("end") AS e, {native} AS native '
                f"FROM {ref(RUNTIME)} WHERE start IN (SELECT start FROM _stk_py_events "
                "WHERE source = 'python_cuda') GROUP BY ALL"
            )
        con.execute(f"CREATE OR REPLACE TEMP TABLE _stk_calls AS {calls}")
        return _write(con, report_id, _events_sql(tables, ref))


# a Python backtrace on CUDA whose call has a native backtrace too gets the two as one stack (chain
# 'm', id: the Python chain's key above the native chain's id)
MERGED = "p.chain IS NOT NULL AND rt.native IS NOT NULL"
# the interpreter's own frames in a native backtrace: where the Python frames take over
INTERPRETER = r"(^|/)(lib)?python[0-9.]*(d|m|dm)?(\.so[0-9.]*|\.dll|\.exe)?$"


def _merge(con: duckdb.DuckDBPyConnection) -> None:
    """Add to _stk_chains one chain per (Python backtrace, native backtrace) pair of a CUDA call:
    the native frames from the leaf (the CUDA runtime, libtorch...) up to the first frame of the
    Python interpreter, then the Python frames, innermost first. The interpreter's frames
    (_PyEval_EvalFrameDefault, Py_RunMain, main) are what the Python frames stand for."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _stk_pairs AS SELECT DISTINCT p.chain AS py, rt.native "
        "FROM _stk_py_events p JOIN _stk_calls rt ON rt.globalTid = p.gtid AND rt.start = p.start "
        f"WHERE p.source = 'python_cuda' AND {MERGED}"
    )
    con.execute(
        "INSERT INTO _stk_chains SELECT 'm', (x.py << 32) | x.native, "
        "list_concat(list_slice(n.frames, 1, coalesce(cut.depth, len(n.frames))), p.frames) "
        "FROM _stk_pairs x JOIN _stk_chains p ON p.chain = 'p' AND p.chain_id = x.py "
        "JOIN _stk_chains n ON n.chain = 'c' AND n.chain_id = x.native "
        "LEFT JOIN (SELECT r.chain_id, min(r.depth) AS depth FROM _stk_raw r JOIN _stk_keys k USING (kind, a, b, line, m) "
        f"WHERE r.chain = 'c' AND r.chain_id IN (SELECT native FROM _stk_pairs) "
        f"AND regexp_matches(k.module, {params.literal(INTERPRETER)}) GROUP BY 1) cut ON cut.chain_id = x.native"
    )
    con.execute("DROP TABLE _stk_pairs")


def _events_sql(tables: dict[str, set[str]], r: Callable[[str], str]) -> str:
    """The stack events as (source, start_ns, end_ns, global_tid, chain, chain_id, thread_state,
    correlation_id)."""
    parts = []
    events = _native_events(tables)
    states = " ".join(f"WHEN {k} THEN '{v}'" for k, v in THREAD_STATES.items())
    if "s" in events:
        state = f"CASE e.threadState {states} END" if "threadState" in tables[SAMPLES] else "NULL"
        parts.append(
            f"SELECT 'cpu_sample' AS source, e.start AS start_ns, NULL::BIGINT AS end_ns, e.globalTid AS global_tid, "
            f"'s' AS chain, e.id AS chain_id, {state} AS thread_state, NULL::BIGINT AS correlation_id "
            f"FROM {r(SAMPLES)} e"
        )
    if "c" in events:
        parts.append(
            f"SELECT 'cuda_call', e.start, e.\"end\", e.globalTid, 'c', e.callchainId, NULL::VARCHAR, e.correlationId "
            f"FROM {r(RUNTIME)} e WHERE e.callchainId IS NOT NULL"
        )
    if "o" in events:
        # the chains' ids from their frames that _stk_raw copied (chain 'o'), rather than from a
        # second scan of OSRT_CALLCHAINS (7.9M frames at tr250)
        chains = (
            "SELECT chain_id FROM _stk_raw WHERE chain = 'o'"
            if _has_frames(tables, "OSRT_CALLCHAINS")
            else f"SELECT DISTINCT id FROM {r('OSRT_CALLCHAINS')}"
        )
        parts.append(
            f"SELECT 'osrt_call', e.start, e.\"end\", e.globalTid, 'o', e.callchainId, NULL::VARCHAR, NULL::BIGINT "
            f"FROM {r('OSRT_API')} e WHERE e.callchainId IN ({chains})"
        )
    # a Python backtrace on CUDA is taken as the call starts: the runtime call of its thread that
    # starts at the same time (the outermost of nested duplicates: the last to end), in _stk_calls
    parts.append(
        "SELECT p.source, p.start, NULL::BIGINT, p.gtid, 'p', p.chain, p.state, NULL::BIGINT "
        "FROM _stk_py_events p WHERE p.source <> 'python_cuda'"
    )
    parts.append(
        f"SELECT p.source, p.start, rt.e, p.gtid, CASE WHEN {MERGED} THEN 'm' ELSE 'p' END, "
        f"CASE WHEN {MERGED} THEN (p.chain << 32) | rt.native ELSE p.chain END, p.state, rt.corr FROM _stk_py_events p "
        "LEFT JOIN _stk_calls rt ON rt.globalTid = p.gtid AND rt.start = p.start WHERE p.source = 'python_cuda'"
    )
    names = "source, start_ns, end_ns, global_tid, chain, chain_id, thread_state, correlation_id"
    return f"SELECT * FROM ({' UNION ALL '.join(f'({p})' for p in parts)}) AS e({names})"


def _write(con: duckdb.DuckDBPyConnection, report_id: int, events: str) -> int:
    """Frames, stacks and events from _stk_raw (chain, chain_id, depth and the frame's key: kind,
    a, b, line, m), _stk_keys (each key once with its text) and the events' SELECT."""
    # a frame is its text: ids numbered in the order of (kind, function, file, line, module)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _stk_frames AS "
        "SELECT (row_number() OVER (ORDER BY kind, function, file, line, module) - 1)::BIGINT AS frame_id, * "
        "FROM (SELECT DISTINCT kind_ AS kind, function, file, line_ AS line, module FROM _stk_keys)"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _stk_keymap AS SELECT k.kind, k.a, k.b, k.line, k.m, f.frame_id "
        "FROM _stk_keys k JOIN _stk_frames f ON f.kind = k.kind_ AND f.function IS NOT DISTINCT FROM k.function "
        "AND f.file IS NOT DISTINCT FROM k.file AND f.line IS NOT DISTINCT FROM k.line_ "
        "AND f.module IS NOT DISTINCT FROM k.module"
    )
    # each chain's frame ids in depth order: an ordered list() sorts per group and costs several
    # times more than sorting a list of (depth << 40 | frame_id) afterwards
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _stk_chains AS SELECT r.chain, r.chain_id, "
        "list_transform(list_sort(list((r.depth::BIGINT << 40) | f.frame_id)), x -> x & 1099511627775) AS frames "
        "FROM _stk_raw r JOIN _stk_keymap f USING (kind, a, b, line, m) GROUP BY r.chain, r.chain_id"
    )
    _merge(con)
    # a stack is its list of frames, numbered in the lists' order; each chain gets its stack's id
    # here, so that the events are matched to it on two integers
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _stk_ids AS SELECT chain, chain_id, frames, "
        "(dense_rank() OVER (ORDER BY frames) - 1)::BIGINT AS stack_id FROM _stk_chains"
    )
    rid = {"rid": report_id}
    user = user_sql("kind", "function", "file", "module")
    params.execute(
        con,
        f"INSERT INTO stack_frames ({_cols('stack_frames')}) SELECT $rid, frame_id, kind, function, file, line, "
        f"module, {user} FROM _stk_frames",
        rid,
    )
    params.execute(
        con,
        f"INSERT INTO stacks ({_cols('stacks')}) SELECT $rid, stack_id, CAST(generate_subscripts(frames, 1) - 1 "
        "AS INTEGER), unnest(frames) FROM (SELECT stack_id, any_value(frames) AS frames FROM _stk_ids "
        "GROUP BY stack_id)",
        rid,
    )
    row = params.execute(
        con,
        f"INSERT INTO stack_events ({_cols('stack_events')}) "
        "SELECT $rid, e.source, e.start_ns, e.end_ns, (e.global_tid >> 24) & 16777215, e.global_tid & 16777215, "
        "e.global_tid, i.stack_id, e.thread_state, e.correlation_id "
        f"FROM ({events}) e LEFT JOIN _stk_ids i ON i.chain = e.chain AND i.chain_id = e.chain_id",
        rid,
    ).fetchone()
    return int(row[0]) if row else 0


def _cols(table: str) -> str:
    return ", ".join(f'"{c}"' for c in schema.BY_NAME[table].col_names)


# --- PyTorch profiler ---------------------------------------------------------------------------

# `stack_loop.py(48): load_batch`, `torch/nn/modules/module.py(1783): _call_impl`
KINETO_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
# `<built-in method mul_ of Tensor object at 0x7fea3c0bbcf0>`: one frame for every tensor
OBJECT_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>$")


def has_kineto_frames(con: duckdb.DuckDBPyConnection, report_id: int) -> bool:
    row = params.execute(
        con,
        "SELECT count(*) FROM (SELECT 1 FROM cpu_ops WHERE report_id = $rid AND category = 'python_function' LIMIT 1)",
        {"rid": report_id},
    ).fetchone()
    if row and row[0]:
        return True
    if not _has_call_stack(con):
        return False
    row = params.execute(
        con,
        "SELECT count(*) FROM (SELECT 1 FROM cpu_ops WHERE report_id = $rid AND call_stack IS NOT NULL LIMIT 1)",
        {"rid": report_id},
    ).fetchone()
    return bool(row and row[0])


def _has_call_stack(con: duckdb.DuckDBPyConnection) -> bool:
    """Does cpu_ops keep Kineto's `Call stack` argument (column call_stack)?"""
    row = con.execute(
        "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'cpu_ops' AND column_name = 'call_stack' "
        "AND NOT internal"
    ).fetchone()
    return bool(row and row[0])


def load_kineto(con: duckdb.DuckDBPyConnection, report_id: int) -> int:
    """The `stacks` step of a PyTorch profiler trace: its `python_function` events (PyTorch 1.13
    on) and the `Call stack` argument of its ops (older traces); returns the events written."""
    written = _kineto_python(con, report_id)
    if _has_call_stack(con):
        written += _kineto_call_stacks(con, report_id)
    return written


def _kineto_call_stacks(con: duckdb.DuckDBPyConnection, report_id: int) -> int:
    """Ops of PyTorch 1.8-1.12 traces recorded with `with_stack=True` carry their Python stack as
    one string (torch/csrc/profiler/util.cpp, stacksToStr of callstackStr): frames
    `file(line): function` joined and ended by ';', innermost first, the line the one running
    (not the def line as in `python_function` names). Each op becomes a stack event (source
    'kineto_callstack'); frame and stack ids continue after those of the Python events."""
    rid = {"rid": report_id}
    # (CREATE ... AS cannot be prepared: the ids are integers written into the SQL)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _stk_cs AS SELECT pid, tid, global_tid, start_ns, end_ns, "
        f"call_stack FROM cpu_ops WHERE report_id = {int(report_id)} AND call_stack IS NOT NULL"
    )
    with params.dropped_after(con, "_stk_cs", "_stk_cs_ids", "_stk_cs_rows", "_stk_cs_frames"):
        first = params.first_row(
            params.execute(
                con,
                "SELECT (SELECT coalesce(max(frame_id) + 1, 0) FROM stack_frames WHERE report_id = $rid), "
                "(SELECT coalesce(max(stack_id) + 1, 0) FROM stacks WHERE report_id = $rid)",
                rid,
            )
        )
        f0, s0 = int(first[0]), int(first[1])
        # each distinct string once: its frames, split and parsed in SQL
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _stk_cs_ids AS SELECT call_stack, "
            f"{s0} + row_number() OVER (ORDER BY call_stack) - 1 AS stack_id, "
            "list_filter(list_transform(string_split(trim(call_stack, '\"'), ';'), x -> trim(x)), x -> x <> '') "
            "AS parts FROM (SELECT DISTINCT call_stack FROM _stk_cs)"
        )
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _stk_cs_rows AS SELECT stack_id, "
            "CAST(generate_subscripts(parts, 1) - 1 AS INTEGER) AS depth, unnest(parts) AS frame "
            "FROM _stk_cs_ids"
        )
        pattern = params.literal(KINETO_FRAME.pattern)
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _stk_cs_frames AS SELECT frame, "
            f"{f0} + row_number() OVER (ORDER BY frame) - 1 AS frame_id, "
            f"CASE WHEN regexp_matches(frame, {pattern}) THEN regexp_extract(frame, {pattern}, 3) "
            "ELSE frame END AS function, "
            f"CASE WHEN regexp_matches(frame, {pattern}) THEN regexp_extract(frame, {pattern}, 1) END AS file, "
            f"CASE WHEN regexp_matches(frame, {pattern}) THEN CAST(regexp_extract(frame, {pattern}, 2) AS INTEGER) "
            "END AS line FROM (SELECT DISTINCT frame FROM _stk_cs_rows)"
        )
        user = user_sql("'python'", "function", "file", "NULL")
        params.execute(
            con,
            f"INSERT INTO stack_frames ({_cols('stack_frames')}) SELECT $rid, frame_id, 'python', function, file, "
            f"line, NULL, {user} FROM _stk_cs_frames",
            rid,
        )
        params.execute(
            con,
            f"INSERT INTO stacks ({_cols('stacks')}) SELECT $rid, r.stack_id, r.depth, f.frame_id "
            "FROM _stk_cs_rows r JOIN _stk_cs_frames f USING (frame)",
            rid,
        )
        row = params.execute(
            con,
            f"INSERT INTO stack_events ({_cols('stack_events')}) SELECT $rid, 'kineto_callstack', e.start_ns, "
            "e.end_ns, e.pid, e.tid, e.global_tid, i.stack_id, NULL, NULL FROM _stk_cs e "
            "JOIN _stk_cs_ids i USING (call_stack) WHERE len(i.parts) > 0",
            rid,
        ).fetchone()
        return int(row[0]) if row else 0


def _kineto_python(con: duckdb.DuckDBPyConnection, report_id: int) -> int:
    """Kineto's Python frames in cpu_ops: each
    `python_function` event becomes a stack event (source 'kineto_python') whose stack is the
    event and the frames enclosing it on its thread. Frames of one thread nest (Kineto records
    them from the interpreter's stack), so one pass in time order with a stack of open frames
    finds each one's parent."""
    import pyarrow as pa

    cur = params.execute(
        con,
        "SELECT pid, tid, global_tid, start_ns, end_ns, name FROM cpu_ops "
        "WHERE report_id = $rid AND category = 'python_function' AND end_ns IS NOT NULL "
        "ORDER BY global_tid, pid, tid, start_ns, end_ns DESC",
        {"rid": report_id},
    )
    frames: dict[str, int] = {}  # name -> frame id
    sites: dict[tuple[int, int], int] = {}  # (parent site or -1, frame) -> site (a stack)
    site_frames: list[tuple[int, int]] = []  # site -> (parent site, frame)
    out: dict[str, list[object]] = {k: [] for k in ("pid", "tid", "gtid", "start", "end", "stack")}
    thread: tuple[object, object, object] | None = None
    open_: list[tuple[int, int]] = []  # (end_ns, site) of the enclosing frames
    while batch := cur.fetchmany(100_000):
        for pid, tid, gtid, start, end, name in batch:
            if (gtid, pid, tid) != thread:
                thread, open_ = (gtid, pid, tid), []
            while open_ and open_[-1][0] <= start:  # ended before this one starts
                open_.pop()
            while open_ and open_[-1][0] < end:  # overlaps without nesting: treat as a sibling
                open_.pop()
            frame = frames.setdefault(OBJECT_ADDRESS.sub(">", str(name)), len(frames))
            key = (open_[-1][1] if open_ else -1, frame)
            site = sites.get(key)
            if site is None:
                site = sites[key] = len(site_frames)
                site_frames.append(key)
            open_.append((end, site))
            for k, v in zip(out, (pid, tid, gtid, start, end, site)):
                out[k].append(v)
    frame_rows: dict[str, list[object]] = {"frame_id": [], "function": [], "file": [], "line": []}
    for name, fid in frames.items():
        m = KINETO_FRAME.match(name)
        frame_rows["frame_id"].append(fid)
        frame_rows["function"].append(m.group(3) if m else name)
        frame_rows["file"].append(m.group(1) if m else None)
        frame_rows["line"].append(int(m.group(2)) if m else None)
    stack_rows: dict[str, list[int]] = {"stack_id": [], "depth": [], "frame_id": []}
    for site in range(len(site_frames)):
        depth, at = 0, site
        while at >= 0:
            parent, frame = site_frames[at]
            stack_rows["stack_id"].append(site)
            stack_rows["depth"].append(depth)
            stack_rows["frame_id"].append(frame)
            depth, at = depth + 1, parent
    tables = {
        "_stk_k_frames": pa.table(
            {
                "frame_id": pa.array(frame_rows["frame_id"], pa.int64()),
                "function": pa.array(frame_rows["function"], pa.string()),
                "file": pa.array(frame_rows["file"], pa.string()),
                "line": pa.array(frame_rows["line"], pa.int32()),
            }
        ),
        "_stk_k_stacks": pa.table({k: pa.array(v, pa.int64()) for k, v in stack_rows.items()}),
        "_stk_k_events": pa.table({k: pa.array(v, pa.int64()) for k, v in out.items()}),
    }
    for name, table in tables.items():
        con.register(name, table)
    try:
        rid = {"rid": report_id}
        user = user_sql("'python'", "function", "file", "NULL")
        params.execute(
            con,
            f"INSERT INTO stack_frames ({_cols('stack_frames')}) SELECT $rid, frame_id, 'python', function, file, "
            f"line, NULL, {user} FROM _stk_k_frames",
            rid,
        )
        params.execute(
            con,
            f"INSERT INTO stacks ({_cols('stacks')}) SELECT $rid, stack_id, depth, frame_id FROM _stk_k_stacks",
            rid,
        )
        row = params.execute(
            con,
            f"INSERT INTO stack_events ({_cols('stack_events')}) SELECT $rid, 'kineto_python', start, \"end\", pid, "
            "tid, gtid, stack, NULL, NULL FROM _stk_k_events",
            rid,
        ).fetchone()
    finally:
        for name in tables:
            con.unregister(name)
    return int(row[0]) if row else 0
