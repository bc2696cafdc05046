"""PyTorch profiler (Kineto) traces: from the staging tables (kineto_events.py) to canonical rows.

The timeline: time 0 is the start of the profiling window (Kineto's `PyTorch Profiler` trace
span), else the earliest event; `reports.session_start_utc_ns` is `baseTimeNanoseconds` plus
that offset. Identity: Kineto has no nsys-style global keys, so `global_pid` is the pid and
`global_tid` is pid * 2^24 + tid (the nsys encoding); GPU rows carry the host pid of the CUDA
API call that launched them (same correlation id), so every nsys join works on them.
docs/kineto.md maps each Kineto field to its column.
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from ... import params, schema
from .. import comm
from ..nvtx import WAIT_RANGES, fill_nvtx_kernels, sum_nvtx_totals
from ..steps import fill_steps
from .kineto_events import Staged, TraceMeta

TID_SHIFT = 1 << 24
# Kineto memcpy / memset names, as CUPTI spells the kinds: `Memcpy HtoD (Pinned -> Device)`.
MEMORY_KINDS = {
    "Pageable": "pageable",
    "Pinned": "pinned",
    "Device": "device",
    "Array": "array",
    "Managed": "managed",
    "Device Static": "device_static",
    "Managed Static": "managed_static",
    "Unknown": "unknown",
}
COPY_KIND = r"^Memcpy ([A-Za-z_]+)"
SRC_KIND = r"\(([^)]*?) -> "
DST_KIND = r" -> ([^)]*)\)"
MEMSET_KIND = r"^Memset \(([^)]*)\)"
# c10::DeviceType of `[memory]` events: 0 CPU, 1 CUDA, 6 HIP (ROCm builds report 1 too).
DEVICE_TYPES = {0: "host", 1: "device", 6: "device"}


def _memory_case(expr: str) -> str:
    whens = " ".join(f"WHEN {params.literal(k)} THEN {params.literal(v)}" for k, v in MEMORY_KINDS.items())
    return f"CASE {expr} {whens} WHEN '' THEN NULL ELSE lower({expr}) END"


def _setup(con: duckdb.DuckDBPyConnection, staged: Staged) -> int:
    """Temp tables every insert shares: the origin, the main host pid, each launch's host pid."""
    row = params.first_row(
        con.execute(
            "SELECT min(t) FROM (SELECT min(ts) AS t FROM _kin_gpu UNION ALL SELECT min(ts) FROM _kin_host "
            "UNION ALL SELECT min(ts) FROM _kin_mem)"
        )
    )
    first = row[0]
    candidates = [v for v in (first, staged.profiler_start) if v is not None]
    origin = min(candidates) if candidates else 0
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _kin_main AS SELECT coalesce((SELECT mode(pid) FROM _kin_host "
        "WHERE pid IS NOT NULL), (SELECT mode(pid) FROM _kin_mem WHERE pid IS NOT NULL)) AS pid"
    )
    # one trace is one process's profiler: correlation ids are unique in it
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _kin_launch AS SELECT correlation, any_value(pid) AS pid, "
        "any_value(tid) AS tid FROM _kin_host WHERE category IN ('runtime', 'driver') AND correlation IS NOT NULL "
        "GROUP BY correlation"
    )
    return int(origin)


def _insert(con: duckdb.DuckDBPyConnection, table: str, select: str, values: Mapping[str, object]) -> int:
    cols = ", ".join(f'"{c}"' for c in schema.BY_NAME[table].col_names)
    row = params.execute(con, f'INSERT INTO "{table}" ({cols}) {select}', values).fetchone()
    return int(row[0]) if row else 0


# The GPU rows' shared columns: DEVICE_TIMELINE of schema.py.
GPU_COLUMNS = """
    $rid, coalesce(g.device, g.pid), g.context, coalesce(g.stream, g.tid),
    coalesce(l.pid, (SELECT pid FROM _kin_main)), coalesce(l.pid, (SELECT pid FROM _kin_main)),
    g.ts - $origin, g.ts + coalesce(g.dur, 0) - $origin, coalesce(g.dur, 0)"""
GPU_FROM = "FROM _kin_gpu AS g LEFT JOIN _kin_launch AS l USING (correlation) WHERE g.category = '{category}'"
HOST_COLUMNS = f"""
    $rid, h.pid, h.tid, h.pid * {TID_SHIFT} + h.tid,
    h.ts - $origin, h.ts + coalesce(h.dur, 0) - $origin, coalesce(h.dur, 0)"""


def short_name(name: str) -> str:
    """nsys's short form of a demangled kernel name: no return type, namespaces, template or
    function arguments (`void at::native::foo<4>(int)` -> `foo`)."""
    name = name.replace("(anonymous namespace)", "<unnamed>")  # as nsys spells it
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch in "<(" and depth == 0 and i > 0 and not name.startswith("<unnamed>", i):
            cut = i
            break
        depth += ch in "<("
        depth -= ch in ">)"
    head = name[:cut].strip()
    head = head.replace("<unnamed>", "").rsplit("::", 1)[-1]
    return head.rsplit(" ", 1)[-1] or name


def load_kernels(con: duckdb.DuckDBPyConnection, rid: int, origin: int) -> int:
    names = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT name FROM _kin_gpu WHERE category = 'kernel' ORDER BY name"
        ).fetchall()
    ]
    con.execute("CREATE OR REPLACE TEMP TABLE _kin_names (name_id BIGINT, name VARCHAR, short_name VARCHAR)")
    params.insert_rows(con, "_kin_names", [(i, n, short_name(n)) for i, n in enumerate(names)])
    v = {"rid": rid, "origin": origin}
    n = _insert(
        con,
        "kernel_rows",
        f"SELECT {GPU_COLUMNS}, nm.name_id, g.correlation, g.grid_x, g.grid_y, g.grid_z, g.block_x, g.block_y, "
        "g.block_z, g.registers, NULL, g.smem, NULL, NULL, g.idx "
        "FROM _kin_gpu AS g LEFT JOIN _kin_launch AS l USING (correlation) "
        "JOIN _kin_names AS nm ON nm.name = g.name WHERE g.category = 'kernel'",
        v,
    )
    _insert(
        con,
        "kernel_names",
        "SELECT $rid, nm.name_id, nm.name, nm.short_name, NULL, count(*) FROM _kin_names AS nm "
        "JOIN _kin_gpu AS g ON g.name = nm.name AND g.category = 'kernel' GROUP BY ALL",
        {"rid": rid},
    )
    return n


# What the profiler recorded about each kernel's collective (staged by kineto_events.Stager), as
# comm.load takes it: the kernel's own arguments first (recent torch), then those of the
# record_param_comms op with the kernel's External id (older releases), field by field.
COMM_ARGS = """
SELECT g.idx AS source_row,
    coalesce(k.collective, h.collective) AS collective,
    coalesce(k.dtype, h.dtype) AS dtype,
    coalesce(k.in_nelems, h.in_nelems) AS in_nelems,
    coalesce(k.out_nelems, h.out_nelems) AS out_nelems,
    coalesce(k.group_size, h.group_size) AS group_size,
    coalesce(k.process_group, h.process_group) AS process_group
FROM _kin_gpu AS g
LEFT JOIN (SELECT * FROM _kin_comm WHERE category = 'kernel') AS k ON k.idx = g.idx
LEFT JOIN (
    SELECT DISTINCT ON (external_id) * FROM _kin_comm
    WHERE category <> 'kernel' AND external_id IS NOT NULL ORDER BY external_id, idx
) AS h ON h.external_id = g.external_id
WHERE g.category = 'kernel' AND (k.idx IS NOT NULL OR h.idx IS NOT NULL)
"""


def load_copies(con: duckdb.DuckDBPyConnection, rid: int, origin: int) -> dict[str, int]:
    v = {"rid": rid, "origin": origin}
    src, dst = (
        _memory_case(f"regexp_extract(g.name, '{SRC_KIND}', 1)"),
        _memory_case(f"regexp_extract(g.name, '{DST_KIND}', 1)"),
    )
    direction = f"nullif(regexp_extract(g.name, '{COPY_KIND}', 1), '')"
    memcpy = _insert(
        con,
        "memcpy",
        f"SELECT {GPU_COLUMNS}, g.bytes, coalesce({direction}, 'Unknown'), {src}, {dst}, "
        f"coalesce(g.device, g.pid), coalesce(g.device, g.pid), g.correlation, NULL "
        f"{GPU_FROM.format(category='memcpy')}",
        v,
    )
    memory = _memory_case(f"regexp_extract(g.name, '{MEMSET_KIND}', 1)")
    memset = _insert(
        con,
        "memset",
        f"SELECT {GPU_COLUMNS}, g.bytes, NULL, {memory}, g.correlation, NULL {GPU_FROM.format(category='memset')}",
        v,
    )
    return {"memcpy": memcpy, "memset": memset}


def load_host(con: duckdb.DuckDBPyConnection, rid: int, origin: int) -> dict[str, int]:
    v = {"rid": rid, "origin": origin}
    api = _insert(
        con,
        "cuda_api",
        f"SELECT {HOST_COLUMNS}, h.name, h.correlation, NULL FROM _kin_host AS h "
        "WHERE h.category IN ('runtime', 'driver')",
        v,
    )
    ops = _insert(
        con,
        "cpu_ops",
        f"SELECT {HOST_COLUMNS}, h.name, h.category, h.external_id, h.seq, h.fwd_tid, h.rf_id, h.input_dims, "
        "h.input_types, h.flops, h.call_stack FROM _kin_host AS h "
        "WHERE h.category IN ('cpu_op', 'user_annotation', 'python_function')",
        v,
    )
    # record_function ranges (and ProfilerStep#N, a cpu_op before torch 2.0) are the trace's NVTX
    nvtx = _insert(
        con,
        "nvtx_ranges",
        f"SELECT {HOST_COLUMNS}, h.name, h.name, NULL, 'push_pop', NULL, NULL, NULL, NULL, NULL "
        "FROM _kin_host AS h WHERE h.category = 'user_annotation' "
        "OR (h.category = 'cpu_op' AND h.name LIKE 'ProfilerStep#%')",
        v,
    )
    return {"cuda_api": api, "cpu_ops": ops, "nvtx_ranges": nvtx}


def load_memory(con: duckdb.DuckDBPyConnection, rid: int, origin: int) -> int:
    kinds = " ".join(f"WHEN {k} THEN '{v}'" for k, v in DEVICE_TYPES.items())
    return _insert(
        con,
        "memory_events",
        "SELECT $rid, CASE WHEN m.device_type = 0 OR m.device_id < 0 THEN NULL ELSE m.device_id END, "
        "m.pid, m.pid, m.tid, m.ts - $origin, CASE WHEN m.bytes >= 0 THEN 'alloc' ELSE 'free' END, "
        "abs(m.bytes), m.bytes, m.addr, "
        f"CASE m.device_type {kinds} ELSE 'device_type:' || CAST(m.device_type AS VARCHAR) END, "
        "m.allocated, m.reserved, NULL FROM _kin_mem AS m",
        {"rid": rid, "origin": origin},
    )


def load_flows(con: duckdb.DuckDBPyConnection, rid: int, origin: int) -> int:
    """One row per flow id: its start (`s`) and its end (`f`)."""
    return _insert(
        con,
        "flow_links",
        "SELECT $rid, s.category, s.flow_id, s.pid, s.tid, s.ts - $origin, f.pid, f.tid, f.ts - $origin "
        "FROM (SELECT * FROM _kin_flow WHERE ph = 's') AS s "
        "LEFT JOIN (SELECT category, flow_id, any_value(pid) AS pid, any_value(tid) AS tid, min(ts) AS ts "
        "FROM _kin_flow WHERE ph = 'f' GROUP BY ALL) AS f USING (category, flow_id)",
        {"rid": rid, "origin": origin},
    )


def load_gpus(con: duckdb.DuckDBPyConnection, rid: int, meta: TraceMeta) -> int:
    from .kineto_events import as_int

    rows = []
    for d in meta.devices:
        major, minor = as_int(d.get("computeMajor")), as_int(d.get("computeMinor"))
        cc = f"{major}.{minor}" if major is not None and minor is not None else None
        rows.append(
            (rid, as_int(d.get("id")), d.get("name"), None, as_int(d.get("numSms")),
             as_int(d.get("totalGlobalMem")), None, None, cc)
        )  # fmt: skip
    params.insert_rows(con, f"gpus ({', '.join(schema.BY_NAME['gpus'].col_names)})", rows)
    return len(rows)


def load_processes(con: duckdb.DuckDBPyConnection, rid: int) -> int:
    """The host processes (GPU rows' pids are device numbers), named by their metadata events."""
    return _insert(
        con,
        "processes",
        "SELECT $rid, p.pid, p.pid, (SELECT any_value(value) FROM _kin_meta AS m "
        "WHERE m.pid = p.pid AND m.key = 'process_name') "
        "FROM (SELECT DISTINCT pid FROM _kin_host WHERE pid IS NOT NULL "
        "UNION SELECT DISTINCT pid FROM _kin_mem WHERE pid IS NOT NULL) AS p",
        {"rid": rid},
    )


def load_markers(con: duckdb.DuckDBPyConnection, rid: int) -> int:
    """Host waits and steps from the report's ranges, as the nsys reader finds them."""
    ranges = (
        "SELECT global_tid, pid, start_ns, end_ns, name FROM nvtx_ranges "
        f"WHERE report_id = {int(rid)} AND end_ns IS NOT NULL"
    )
    cols = ", ".join(c for c in schema.BY_NAME["host_waits"].col_names if c != "source")
    params.execute(
        con,
        f"INSERT INTO host_waits ({cols}, source) SELECT {cols}, 'nvtx' FROM nvtx_ranges "
        f"WHERE report_id = $rid AND end_ns IS NOT NULL AND regexp_matches(name, {params.literal(WAIT_RANGES)})",
        {"rid": rid},
    )
    return fill_steps(con, rid, ranges)


def load_all(con: duckdb.DuckDBPyConnection, rid: int, meta: TraceMeta, staged: Staged) -> dict[str, int]:
    """Every canonical table of one trace, from the staging tables; returns rows per table."""
    origin = _setup(con, staged)
    rows = {"kernels": load_kernels(con, rid, origin)}
    rows["comm_ops"] = comm.load(con, rid, COMM_ARGS)
    rows |= load_copies(con, rid, origin)
    rows |= load_host(con, rid, origin)
    rows["memory_events"] = load_memory(con, rid, origin)
    rows["flow_links"] = load_flows(con, rid, origin)
    rows["gpus"] = load_gpus(con, rid, meta)
    rows["processes"] = load_processes(con, rid)
    if rows["nvtx_ranges"]:
        fill_nvtx_kernels(con, rid)
        sum_nvtx_totals(con, rid)  # nvtx_summary's rows
    rows["steps"] = load_markers(con, rid)
    for table in ("_kin_main", "_kin_launch", "_kin_names"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    rows["origin"] = origin
    return rows
