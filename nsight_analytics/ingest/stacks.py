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
  thread; an event's stack is its chain of enclosing frames (Kineto's `Python parent id`).

Frames are deduplicated per report (one frame_id per kind, function, file, line and module) and
so are stacks (one stack_id per list of frames), so a million samples of one loop cost one stack.
"""

from __future__ import annotations

import re
import sqlite3
import struct
import sys
from collections.abc import Callable
from typing import Protocol

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]  # ships no type information

from .. import params, schema

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
DOMAIN_CREATE = 75
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
    r"|/lib(c|m|dl|pthread|rt|stdc\+\+|gcc_s|cuda\w*|cublas\w*|cudnn\w*|nccl|nvrtc\w*|nvToolsExt\w*"
    r"|nvJitLink\w*|cufft\w*|curand\w*|cusparse\w*|cusolver\w*|python[0-9.]*|torch\w*|c10\w*|ToolsInjection\w*"
    r"|InterceptorInjection\w*|unwind|z|ffi|numa|ibverbs|mpi\w*|ucp|ucs|uct|open-pal|open-rte)[.-][^/]*$)"
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
    native = f"{module} IS NOT NULL AND NOT regexp_matches({module}, {params.literal(LIBRARY_NATIVE)})"
    return f"CASE {kind} WHEN 'python' THEN {python} WHEN 'native' THEN {native} ELSE false END"


def has_stacks(tables: dict[str, set[str]]) -> bool:
    """Does the export hold call stacks of any kind?"""
    native = any(t in tables and {"id", "symbol", "stackDepth"} <= tables[t] for _, t, _, _ in NATIVE)
    return native or (NVTX in tables and "eventType" in tables[NVTX] and "NVTX_PAYLOAD_SCHEMAS" in tables)


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
    r, tables = src.ref, src.tables
    domains = {
        int(d): PYTHON_DOMAINS[str(name)]
        for d, name in con.execute(
            f"SELECT domainId, text FROM {r(NVTX)} WHERE eventType = {DOMAIN_CREATE} AND text IN "
            f"({', '.join(params.literal(n) for n in PYTHON_DOMAINS)})"
        ).fetchall()
        if d is not None
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
    rows = con.execute(
        f'SELECT schemaId, name, type, coalesce("offset", 0) FROM {ref("NVTX_PAYLOAD_SCHEMA_ENTRIES")} '
        f"WHERE domainId = {int(domain)}"
    ).fetchall()
    by_schema: dict[int, dict[str, tuple[int, int]]] = {}
    for schema_id, name, type_, offset in rows:
        by_schema.setdefault(int(schema_id), {})[str(name)] = (int(offset), int(type_))
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
    enum_sizes: dict[int, int] = {}
    states: dict[int, str] = {}
    if "NVTX_PAYLOAD_ENUMS" in tables:
        for sid, sz in con.execute(
            f"SELECT schemaId, size FROM {ref('NVTX_PAYLOAD_ENUMS')} WHERE domainId = {int(domain)}"
        ).fetchall():
            enum_sizes[int(sid)] = int(sz or 4)
    if "NVTX_PAYLOAD_ENUM_ENTRIES" in tables and "Thread state" in top:
        for value, name in con.execute(
            f"SELECT value, name FROM {ref('NVTX_PAYLOAD_ENUM_ENTRIES')} WHERE domainId = {int(domain)} "
            f"AND schemaId = {int(top['Thread state'][1])}"
        ).fetchall():
            states[int(value)] = str(name)
    return _Layout(top, frame, size, enum_sizes, states)


def _python_rows(con: duckdb.DuckDBPyConnection, src: Source) -> tuple[pa.Table, pa.Table]:
    """nsys' Python frames: (events, chains). An event: source, start, globalTid, thread state and
    the key of its chain (NULL when the export has no binaryData); a chain: key, depth, the
    function and file (StringIds ids) and line. Identical frame lists share one key."""
    tables = src.tables
    ev: dict[str, list[object]] = {"source": [], "start": [], "gtid": [], "state": [], "chain": []}
    ch: dict[str, list[int]] = {"chain": [], "depth": [], "fn": [], "file": [], "line": []}
    cols = tables.get(NVTX, set())
    if not {"eventType", "domainId", "start", "globalTid"} <= cols:
        return _arrow(ev, ch)
    layouts = _layouts(con, src)
    if not layouts:
        return _arrow(ev, ch)
    blob = "binaryData" if "binaryData" in cols else "NULL"
    domains = ", ".join(str(d) for d in layouts)
    # read with sqlite3: nsys declares binaryData TEXT, which DuckDB's SQLite reader refuses for a BLOB
    path = params.first_row(
        params.execute(con, "SELECT path FROM duckdb_databases() WHERE database_name = $a", {"a": src.alias})
    )[0]
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    cur = db.execute(
        f"SELECT domainId, start, globalTid, {blob} FROM {NVTX} "
        f"WHERE eventType = {PYTHON_EVENT} AND domainId IN ({domains})"
    )
    keys: dict[bytes, int] = {}
    while batch := cur.fetchmany(50_000):
        for domain, start, gtid, data in batch:
            source, layout = layouts[int(domain)]
            state, key = None, None
            if data is not None and layout is not None:
                data = bytes(data)
                base = struct.unpack_from("<Q", data, 24)[0] if len(data) >= 32 else 0
                if layout.state:
                    code = struct.unpack_from("<" + layout.state[1], data, base + layout.state[0])[0]
                    state = layout.states.get(code, str(code))
                n = struct.unpack_from("<" + layout.count[1], data, base + layout.count[0])[0]
                first = base + layout.frames
                raw = data[first : first + n * layout.size]
                key = keys.get(raw)
                if key is None:
                    key = keys[raw] = len(keys)
                    for depth in range(n):
                        at = first + depth * layout.size
                        fn, file, line = (
                            struct.unpack_from("<" + f, data, at + o)[0] for o, f in layout.fields
                        )
                        for k, v in zip(
                            ("chain", "depth", "fn", "file", "line"), (key, depth, fn, file, line)
                        ):
                            ch[k].append(v)
            for k, v in zip(ev, (source, start, gtid, state, key)):
                ev[k].append(v)
    db.close()
    return _arrow(ev, ch)


def _arrow(ev: dict[str, list[object]], ch: dict[str, list[int]]) -> tuple[pa.Table, pa.Table]:
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
    py_events, py_chains = _python_rows(con, src)
    con.register("_stk_py_events", py_events)
    con.register("_stk_py_chains", py_chains)
    try:
        # nsys writes `<module>` HTML-escaped
        python = (
            "SELECT 'p' AS chain, c.chain AS chain_id, c.depth, 'python' AS kind, "
            "replace(replace(replace(fs.value, '&lt;', '<'), '&gt;', '>'), '&amp;', '&') AS function, "
            "fi.value AS file, CAST(c.line AS INTEGER) AS line, NULL::VARCHAR AS module "
            f"FROM _stk_py_chains c LEFT JOIN {STRINGS} fs ON fs.id = c.fn LEFT JOIN {STRINGS} fi ON fi.id = c.file"
        )
        raw = [python]
        for letter, table, _, _ in NATIVE:
            cols = tables.get(table, set())
            if not {"id", "symbol", "stackDepth"} <= cols:
                continue
            kernel = "f.kernelMode = 1" if "kernelMode" in cols else "false"
            module = "fm.value" if "module" in cols else "NULL"
            mjoin = f" LEFT JOIN {STRINGS} fm ON fm.id = f.module" if "module" in cols else ""
            raw.append(
                f"SELECT '{letter}', f.id, f.stackDepth, CASE WHEN {kernel} THEN 'kernel' ELSE 'native' END, "
                f"fs.value, NULL, NULL, {module} FROM {ref(table)} f LEFT JOIN {STRINGS} fs ON fs.id = f.symbol{mjoin}"
            )
        con.execute("CREATE OR REPLACE TEMP TABLE _stk_raw AS " + "\nUNION ALL\n".join(raw))
        # the CUDA calls a Python backtrace may belong to, keyed by thread and start (a join with
        # the export's table inside the union would scan it once per row)
        calls = (
            "SELECT NULL::BIGINT AS globalTid, NULL::BIGINT AS start, NULL::BIGINT AS corr, NULL::BIGINT AS e"
        )
        if RUNTIME in tables and {"correlationId", "globalTid", "start"} <= tables[RUNTIME]:
            calls = (
                'SELECT globalTid, start, arg_max(correlationId, "end") AS corr, max("end") AS e '
                f"FROM {ref(RUNTIME)} WHERE start IN (SELECT start FROM _stk_py_events "
                "WHERE source = 'python_cuda') GROUP BY ALL"
            )
        con.execute(f"CREATE OR REPLACE TEMP TABLE _stk_calls AS {calls}")
        return _write(con, report_id, _events_sql(tables, ref))
    finally:
        con.unregister("_stk_py_events")
        con.unregister("_stk_py_chains")
        for t in ("_stk_raw", "_stk_calls", "_stk_frames", "_stk_chains", "_stk_ids"):
            con.execute(f"DROP TABLE IF EXISTS {t}")


def _events_sql(tables: dict[str, set[str]], r: Callable[[str], str]) -> str:
    """The stack events as (source, start_ns, end_ns, global_tid, chain, chain_id, thread_state,
    correlation_id)."""
    parts = []
    states = " ".join(f"WHEN {k} THEN '{v}'" for k, v in THREAD_STATES.items())
    if SAMPLES in tables and {"id", "start", "globalTid"} <= tables[SAMPLES]:
        state = f"CASE e.threadState {states} END" if "threadState" in tables[SAMPLES] else "NULL"
        parts.append(
            f"SELECT 'cpu_sample' AS source, e.start AS start_ns, NULL::BIGINT AS end_ns, e.globalTid AS global_tid, "
            f"'s' AS chain, e.id AS chain_id, {state} AS thread_state, NULL::BIGINT AS correlation_id "
            f"FROM {r(SAMPLES)} e"
        )
    cuda = RUNTIME in tables and {"callchainId", "correlationId", "globalTid"} <= tables[RUNTIME]
    if cuda and "CUDA_CALLCHAINS" in tables:
        parts.append(
            f"SELECT 'cuda_call', e.start, e.\"end\", e.globalTid, 'c', e.callchainId, NULL::VARCHAR, e.correlationId "
            f"FROM {r(RUNTIME)} e WHERE e.callchainId IS NOT NULL"
        )
    if "OSRT_API" in tables and "callchainId" in tables["OSRT_API"] and "OSRT_CALLCHAINS" in tables:
        parts.append(
            f"SELECT 'osrt_call', e.start, e.\"end\", e.globalTid, 'o', e.callchainId, NULL::VARCHAR, NULL::BIGINT "
            f"FROM {r('OSRT_API')} e WHERE e.callchainId IN (SELECT DISTINCT id FROM {r('OSRT_CALLCHAINS')})"
        )
    # a Python backtrace on CUDA is taken as the call starts: the runtime call of its thread that
    # starts at the same time (the outermost of nested duplicates: the last to end), in _stk_calls
    parts.append(
        "SELECT p.source, p.start, NULL::BIGINT, p.gtid, 'p', p.chain, p.state, NULL::BIGINT "
        "FROM _stk_py_events p WHERE p.source <> 'python_cuda'"
    )
    parts.append(
        "SELECT p.source, p.start, rt.e, p.gtid, 'p', p.chain, p.state, rt.corr FROM _stk_py_events p "
        "LEFT JOIN _stk_calls rt ON rt.globalTid = p.gtid AND rt.start = p.start WHERE p.source = 'python_cuda'"
    )
    names = "source, start_ns, end_ns, global_tid, chain, chain_id, thread_state, correlation_id"
    return f"SELECT * FROM ({' UNION ALL '.join(f'({p})' for p in parts)}) AS e({names})"


def _write(con: duckdb.DuckDBPyConnection, report_id: int, events: str) -> int:
    """Frames, stacks and events from _stk_raw (chain, chain_id, depth, kind, function, file, line,
    module) and the events' SELECT."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _stk_frames AS "
        "SELECT (row_number() OVER (ORDER BY kind, function, file, line, module) - 1)::BIGINT AS frame_id, * "
        "FROM (SELECT DISTINCT kind, function, file, line, module FROM _stk_raw)"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _stk_chains AS "
        "SELECT r.chain, r.chain_id, list(f.frame_id ORDER BY r.depth) AS frames "
        "FROM _stk_raw r JOIN _stk_frames f ON f.kind = r.kind AND f.function IS NOT DISTINCT FROM r.function "
        "AND f.file IS NOT DISTINCT FROM r.file AND f.line IS NOT DISTINCT FROM r.line "
        "AND f.module IS NOT DISTINCT FROM r.module GROUP BY r.chain, r.chain_id"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _stk_ids AS "
        "SELECT frames, (row_number() OVER (ORDER BY frames) - 1)::BIGINT AS stack_id "
        "FROM (SELECT DISTINCT frames FROM _stk_chains)"
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
        "AS INTEGER), unnest(frames) FROM _stk_ids",
        rid,
    )
    row = params.execute(
        con,
        f"INSERT INTO stack_events ({_cols('stack_events')}) "
        "SELECT $rid, e.source, e.start_ns, e.end_ns, (e.global_tid >> 24) & 16777215, e.global_tid & 16777215, "
        "e.global_tid, i.stack_id, e.thread_state, e.correlation_id "
        f"FROM ({events}) e LEFT JOIN _stk_chains c ON c.chain = e.chain AND c.chain_id = e.chain_id "
        "LEFT JOIN _stk_ids i ON i.frames = c.frames",
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
    return bool(row and row[0])


def load_kineto(con: duckdb.DuckDBPyConnection, report_id: int) -> int:
    """The `stacks` step of a PyTorch profiler trace, from its Python frames in cpu_ops: each
    `python_function` event becomes a stack event (source 'kineto_python') whose stack is the
    event and the frames enclosing it on its thread. Frames of one thread nest (Kineto records
    them from the interpreter's stack), so one pass in time order with a stack of open frames
    finds each one's parent."""
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
