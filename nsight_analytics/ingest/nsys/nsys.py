"""nsys SQLite export -> canonical tables.

Every nsys schema from 2.x (2021, `EXPORT_META_DATA`) to 3.25 (2026, `META_DATA_EXPORT`) is read
by asking which tables and columns the file has and writing NULL for what it lacks: exports are
lazy (a table exists only when it has rows) and columns come and go between versions. Each
canonical table has one SELECT builder here; nothing else in nsa knows nsys table names.
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import duckdb

from ... import params, schema
from ...errors import InputError
from .. import stacks
from ..nvtx import WAIT_RANGES, NvtxSource, calls_of, fill_nvtx_kernels, ranges_of, sum_nvtx_totals
from ..nvtx import fill_nvtx_totals as nvtx_totals
from ..sqlite_source import EXPORT_HINT, open_attached
from ..steps import GRAPH_LAUNCH, STEP_HINT, fill_steps
from . import nsys_gpu_metrics

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
GRAPH_EVENTS = ("CUDA_GRAPH_EVENTS", "CUDA_GRAPH_NODE_EVENTS")
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
# nsys' MPI trace (`-t mpi`; 2025.3 checked) writes the calls to these tables, not as NVTX
# ranges; each has start, end, globalTid and textId (the function's name in StringIds).
MPI_TABLES = ("MPI_COLLECTIVES_EVENTS", "MPI_P2P_EVENTS", "MPI_START_WAIT_EVENTS", "MPI_OTHER_EVENTS")
SAMPLES = "COMPOSITE_EVENTS"  # CPU samples (`-s cpu`): one row per sample
CALLCHAINS = "SAMPLING_CALLCHAINS"  # their backtraces: one row per frame, stackDepth 0 the leaf
GPU = "TARGET_INFO_GPU"
PROCESSES = "PROCESSES"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

# CUPTI enum codes are stable across versions; exports carry ENUM_* tables with the same values,
# but lazy and trimmed exports may not, so the mapping lives here. Unknown codes stay visible.
COPY_KINDS = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM_HtoD", 12: "UVM_DtoH", 13: "UVM_DtoD",
}  # fmt: skip
MEM_KINDS = {
    0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device_static",
    6: "managed_static", 7: "unknown",
}  # fmt: skip
SYNC_TYPES = {
    0: "unknown", 1: "event_synchronize", 2: "stream_wait_event", 3: "stream_synchronize",
    4: "context_synchronize",
}  # fmt: skip
NVTX_RANGE_TYPES = {59: "push_pop", 60: "start_end"}
NVTX_DOMAIN_CREATE = 75

# pid and tid are packed in nsys' global ids; decimal literals because DuckDB reads 0xFFFFFF
# as `0 AS xFFFFFF`.
PID_OF = "(({0} >> 24) & 16777215)"
TID_OF = "({0} & 16777215)"

# Strings interned once per ingest: every name column joins this temp table.
STRINGS = "_nsa_strings"


def _case(expr: str, mapping: dict[int, str]) -> str:
    whens = " ".join(f"WHEN {code} THEN '{label}'" for code, label in mapping.items())
    return f"CASE {expr} {whens} ELSE 'code:' || CAST({expr} AS VARCHAR) END"


@dataclass
class Source:
    """What one export contains: {table: {columns}} of the attached SQLite file."""

    tables: dict[str, set[str]]
    alias: str = "src"
    # {table: {columns declared NOT NULL}}: a fallback for such a column is never read
    not_null: dict[str, set[str]] = field(default_factory=dict)
    # the NVTX domains' create events, once read (nvtx_domain_events)
    domain_events: list[tuple[Any, ...]] | None = None

    def has(self, table: str) -> bool:
        return table in self.tables

    def nvtx_domain_events(self, con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
        """The export's NVTX domain create events (type 75) as (domainId, globalTid, text,
        textId), read once per attached export: the ranges' copy names their domains from them
        and the stacks step finds its Python domains among them. SQLite picks the few out of
        the table: filtered in DuckDB, every row of NVTX_EVENTS would cross over."""
        if self.domain_events is None:
            self.domain_events = con.execute(
                f"SELECT * FROM {_domain_creates(self)} AS d0(a, b, c, d)"
            ).fetchall()
        return self.domain_events

    def col(self, table: str, name: str, alias: str) -> str:
        return f'{alias}."{name}"' if name in self.tables.get(table, ()) else "NULL"

    def ref(self, table: str) -> str:
        return f'{self.alias}."{table}"'


def _name(
    src: Source, table: str, id_col: str, alias: str, join_alias: str, field: str = "value"
) -> tuple[str, str]:
    """(expression, join clause) resolving a StringIds reference, or NULL when absent."""
    if id_col not in src.tables.get(table, ()):
        return "NULL", ""
    return (
        f"{join_alias}.{field}",
        f' LEFT JOIN {STRINGS} {join_alias} ON {join_alias}.id = {alias}."{id_col}"',
    )


def _select(columns: dict[str, str], table: str, frm: str) -> str:
    expected = schema.BY_NAME[table].col_names
    assert list(columns) == expected, (table, list(columns))
    body = ",\n  ".join(f'{expr} AS "{name}"' for name, expr in columns.items())
    return f"SELECT\n  {body}\n{frm}"


def _timing(src: Source, table: str, a: str) -> dict[str, str]:
    return {
        "start_ns": f"{a}.start",
        "end_ns": f'{a}."end"',
        "duration_ns": f'{a}."end" - {a}.start',
    }


def _device_side(src: Source, table: str, a: str) -> dict[str, str]:
    gpid = src.col(table, "globalPid", a)
    return {
        "report_id": "$rid",
        "device_id": src.col(table, "deviceId", a),
        "context_id": src.col(table, "contextId", a),
        "stream_id": src.col(table, "streamId", a),
        "pid": PID_OF.format(gpid) if gpid != "NULL" else "NULL",
        "global_pid": gpid,
        **_timing(src, table, a),
    }


def _host_side(src: Source, table: str, a: str) -> dict[str, str]:
    gtid = src.col(table, "globalTid", a)
    return {
        "report_id": "$rid",
        "pid": PID_OF.format(gtid) if gtid != "NULL" else "NULL",
        "tid": TID_OF.format(gtid) if gtid != "NULL" else "NULL",
        "global_tid": gtid,
        **_timing(src, table, a),
    }


def _name_id(src: Source, a: str) -> str:
    # The exports declare demangledName NOT NULL (all of nsys 2024.5-2026.2 here; trimmed ones may
    # not): shortName, its fallback, is then not read (each column read costs ~0.05 CPU s at 1M kernels).
    names = (
        ["demangledName"]
        if "demangledName" in src.not_null.get(KERNEL, ())
        else ["demangledName", "shortName"]
    )
    cols = [f'{a}."{c}"' for c in names if c in src.tables[KERNEL]]
    return f"coalesce({', '.join(cols)})" if len(cols) > 1 else (cols[0] if cols else "NULL")


def _launch(src: Source, a: str) -> dict[str, str]:
    t = KERNEL
    return {
        **{f"grid_{d}": src.col(t, f"grid{d.upper()}", a) for d in "xyz"},
        **{f"block_{d}": src.col(t, f"block{d.upper()}", a) for d in "xyz"},
        "registers_per_thread": src.col(t, "registersPerThread", a),
        "static_smem_bytes": src.col(t, "staticSharedMemory", a),
        "dynamic_smem_bytes": src.col(t, "dynamicSharedMemory", a),
        "launch_type": src.col(t, "launchType", a),
        "graph_node_id": src.col(t, "graphNodeId", a),
    }


def kernel_rows_sql(src: Source, launch: bool = True) -> str | None:
    """Kernels as integers only: names stay StringIds ids (kernel_names resolves them once per
    name, not per row). Without `launch`, the 10 launch-configuration columns are left NULL for
    kernel_launch_sql to fill: reading them from SQLite is half the cost of the copy."""
    if not src.has(KERNEL):
        return None
    t, a = KERNEL, "k"
    launch_cols = _launch(src, a) if launch else {c: "NULL" for c in _launch(src, a)}
    # graph_node_id always: the queries need it to tell graph kernels from launched ones
    launch_cols["graph_node_id"] = src.col(t, "graphNodeId", a)
    cols = {
        **_device_side(src, t, a),
        "name_id": _name_id(src, a),
        "correlation_id": src.col(t, "correlationId", a),
        **launch_cols,
        "source_row": f"{a}.rowid",
    }
    return _select(cols, "kernel_rows", f"FROM {src.ref(t)} {a}")


def kernel_launch_sql(src: Source) -> str | None:
    """Fill a report's deferred launch-configuration columns, matching rows on the SQLite rowid."""
    if not src.has(KERNEL):
        return None
    a = "k"
    launch = _launch(src, a)
    del launch["graph_node_id"]  # copied with the rows
    sets = ", ".join(f'"{c}" = s."{c}"' for c in launch)
    body = ", ".join(f'{expr} AS "{c}"' for c, expr in launch.items())
    return (
        f"UPDATE kernel_rows SET {sets} "
        f"FROM (SELECT {a}.rowid AS source_row, {body} FROM {src.ref(KERNEL)} {a}) AS s "
        "WHERE kernel_rows.report_id = $rid AND kernel_rows.source_row = s.source_row"
    )


def kernel_names_sql(src: Source, rows: Sequence[int] = ()) -> str | None:
    """Each name id of the report's kernel_rows (copied first), its count, and the short and
    mangled ids of one of its rows, `rows` (one source_row per name id), read back from SQLite
    by rowid: a few dozen lookups instead of scanning a million rows again. A name id decides
    its short and mangled forms (checked on every real export)."""
    if not src.has(KERNEL):
        return None
    t, a = KERNEL, "r"
    ids = ", ".join(src.col(t, c, "k") for c in ("shortName", "mangledName"))
    lookup = (
        f"SELECT * FROM sqlite_query('{src.alias}', 'SELECT k.rowid, {ids} FROM \"{t}\" k "
        f"WHERE k.rowid IN ({', '.join(str(int(r)) for r in rows) or 'NULL'})') AS q(source_row, short_id, mangled_id)"
    )
    cols = {
        "report_id": "$rid",
        "name_id": f"{a}.name_id",
        "name": "dn.value",
        "short_name": "sn.value",
        "mangled_name": "mn.value",
        "kernels": f"{a}.n",
    }
    reps = (
        "(SELECT name_id, count(*) AS n, min(source_row) AS source_row FROM kernel_rows "
        "WHERE report_id = $rid GROUP BY name_id)"
    )
    joins = (
        f" LEFT JOIN ({lookup}) AS q ON CAST(q.source_row AS BIGINT) = {a}.source_row"
        f" LEFT JOIN {STRINGS} dn ON dn.id = {a}.name_id"
        f" LEFT JOIN {STRINGS} sn ON sn.id = CAST(q.short_id AS BIGINT)"
        f" LEFT JOIN {STRINGS} mn ON mn.id = CAST(q.mangled_id AS BIGINT)"
    )
    return _select(cols, "kernel_names", f"FROM {reps} {a}{joins}")


def _decoded(src: Source, table: str, col: str, a: str, mapping: dict[int, str]) -> str:
    expr = src.col(table, col, a)
    return "NULL" if expr == "NULL" else _case(expr, mapping)


def memcpy_sql(src: Source) -> str | None:
    if not src.has(MEMCPY):
        return None
    t, a = MEMCPY, "m"
    cols = {
        **_device_side(src, t, a),
        "bytes": src.col(t, "bytes", a),
        "direction": _decoded(src, t, "copyKind", a, COPY_KINDS),
        "src_memory": _decoded(src, t, "srcKind", a, MEM_KINDS),
        "dst_memory": _decoded(src, t, "dstKind", a, MEM_KINDS),
        "src_device_id": src.col(t, "srcDeviceId", a),
        "dst_device_id": src.col(t, "dstDeviceId", a),
        "correlation_id": src.col(t, "correlationId", a),
        "graph_node_id": src.col(t, "graphNodeId", a),
    }
    return _select(cols, "memcpy", f"FROM {src.ref(t)} {a}")


def memset_sql(src: Source) -> str | None:
    if not src.has(MEMSET):
        return None
    t, a = MEMSET, "m"
    cols = {
        **_device_side(src, t, a),
        "bytes": src.col(t, "bytes", a),
        "value": src.col(t, "value", a),
        "memory": _decoded(src, t, "memKind", a, MEM_KINDS),
        "correlation_id": src.col(t, "correlationId", a),
        "graph_node_id": src.col(t, "graphNodeId", a),
    }
    return _select(cols, "memset", f"FROM {src.ref(t)} {a}")


def cuda_api_sql(src: Source) -> str | None:
    if not src.has(RUNTIME):
        return None
    t, a = RUNTIME, "r"
    # api_name: the string without its version suffix (_v7000), computed once per string.
    name, join = _name(src, t, "nameId", a, "s", field="api_name")
    cols = {
        **_host_side(src, t, a),
        "name": name,
        "correlation_id": src.col(t, "correlationId", a),
        "return_value": src.col(t, "returnValue", a),
    }
    return _select(cols, "cuda_api", f"FROM {src.ref(t)} {a}{join}")


def graph_launches_sql(src: Source) -> str | None:
    """The export's CUDA graph launch calls as (global_tid, pid, start_ns, end_ns, correlation_id,
    name) for the graph steps (steps.fill_steps), read from the export: `cuda_api` may still be
    deferred when the steps are found."""
    if not src.has(RUNTIME) or "nameId" not in src.tables[RUNTIME]:
        return None
    t, a = RUNTIME, "r"
    host = _host_side(src, t, a)
    return (
        f"SELECT {host['global_tid']} AS global_tid, {host['pid']} AS pid, {a}.start AS start_ns, "
        f'{a}."end" AS end_ns, {src.col(t, "correlationId", a)} AS correlation_id, s.api_name AS name '
        f"FROM {src.ref(t)} {a} JOIN {STRINGS} s ON s.id = {a}.nameId "
        f"WHERE regexp_matches(s.api_name, {params.literal(GRAPH_LAUNCH)})"
    )


# Some nsys 2022.x exports record a runtime call twice, one row nested inside the other on the
# same thread with the same correlation id (`cudaMemcpy` around `cudaMemcpy_v3020`): joined to
# the GPU work they issued, every copy or kernel would count twice. The inner row goes; rows with
# the same interval keep the first. Only (thread, correlation id) pairs seen twice are examined.
def _nested_duplicates(table: str, rows: str) -> str:
    """The DELETE of the inner rows of calls recorded twice (see above) from `table`'s `rows` (a
    condition on its columns): it looks at one thread and correlation id at a time."""
    return f"""
DELETE FROM {table} WHERE {rows} AND rowid IN (
    WITH dup AS (
        SELECT global_tid, correlation_id FROM {table}
        WHERE {rows} AND correlation_id IS NOT NULL AND correlation_id <> 0
        GROUP BY ALL HAVING count(*) > 1
    ),
    c AS (
        SELECT a.rowid AS rid_, a.global_tid, a.correlation_id, a.start_ns, a.end_ns
        FROM {table} AS a SEMI JOIN dup USING (global_tid, correlation_id)
        WHERE {rows}
    )
    SELECT i.rid_ FROM c AS i JOIN c AS o
        ON o.global_tid = i.global_tid AND o.correlation_id = i.correlation_id AND o.rid_ <> i.rid_
        AND o.start_ns <= i.start_ns AND o.end_ns >= i.end_ns
        AND (o.start_ns < i.start_ns OR o.end_ns > i.end_ns OR o.rid_ < i.rid_)
)
"""


NESTED_DUPLICATES = _nested_duplicates("cuda_api", "report_id = $rid")


def graph_executions_sql(src: Source) -> str | None:
    if not src.has(GRAPH_TRACE):
        return None
    t, a = GRAPH_TRACE, "g"
    cols = {
        **_device_side(src, t, a),
        "graph_id": src.col(t, "graphId", a),
        "graph_exec_id": src.col(t, "graphExecId", a),
        "correlation_id": src.col(t, "correlationId", a),
    }
    return _select(cols, "graph_executions", f"FROM {src.ref(t)} {a}")


def graph_events_sql(src: Source) -> str | None:
    parts = []
    for t in GRAPH_EVENTS:
        if not src.has(t):
            continue
        a = "e"
        name, join = _name(src, t, "nameId", a, "s")
        cols = {
            **_host_side(src, t, a),
            "name": name,
            **{
                c: src.col(t, raw, a)
                for c, raw in (
                    ("graph_id", "graphId"),
                    ("original_graph_id", "originalGraphId"),
                    ("graph_exec_id", "graphExecId"),
                    ("graph_node_id", "graphNodeId"),
                    ("original_graph_node_id", "originalGraphNodeId"),
                )
            },
        }
        parts.append(_select(cols, "graph_events", f"FROM {src.ref(t)} {a}{join}"))
    return "\nUNION ALL\n".join(parts) or None


def sync_events_sql(src: Source) -> str | None:
    if not src.has(SYNC):
        return None
    t, a = SYNC, "y"
    cols = {
        **_device_side(src, t, a),
        "sync_type": _decoded(src, t, "syncType", a, SYNC_TYPES),
        "correlation_id": src.col(t, "correlationId", a),
        "event_id": src.col(t, "eventId", a),
    }
    return _select(cols, "sync_events", f"FROM {src.ref(t)} {a}")


# Per-call suffixes of PyTorch's emit_nvtx names, in the order it appends them (`, seq = N`,
# `, op_id = N`, then the `, sizes = [...]` and `, input_op_ids = [...]` lists, which run to
# the end): 'aten::to, seq = 12, op_id = 345' -> 'aten::to'. Every one contains ' = ', so
# the regex runs only on names that do (all 16,782 ranges of a real FSDP capture, under 16,582
# distinct names; none in a capture with hand-written ranges).
NVTX_SUFFIXES = r"(, (seq|op_id) = [0-9]+|, (sizes|input_op_ids) = \[.*)+$"


def base_name_sql(name: str) -> str:
    """SQL for an NVTX range name without its per-call suffixes (NVTX_SUFFIXES)."""
    stripped = f"regexp_replace({name}, '{NVTX_SUFFIXES}', '')"
    return f"CASE WHEN contains({name}, ' = ') THEN {stripped} ELSE {name} END"


def _domain_columns(src: Source) -> str:
    """NVTX_EVENTS' columns of a domain's create event: domainId, globalTid, text, textId (NULL
    where the export lacks one)."""
    have = src.tables.get(NVTX, set())
    return ", ".join(f'"{c}"' if c in have else "NULL" for c in ("domainId", "globalTid", "text", "textId"))


def _domain_creates(src: Source) -> str:
    """The export's NVTX domain create events (_domain_columns), picked out by SQLite."""
    create = f'SELECT {_domain_columns(src)} FROM "{NVTX}" WHERE eventType = {NVTX_DOMAIN_CREATE}'
    return f"sqlite_query('{src.alias}', {params.literal(create)})"


def _nvtx_domains_sql(src: Source, keys: str | None = None) -> str | None:
    """The export's NVTX domains as (domain_id, pid, name): a domain's name is the text of its
    create event (type 75) in the same process. SQLite picks the few create events out of the
    table: filtered in DuckDB, every row of NVTX_EVENTS would cross over a second time; once
    read (Source.nvtx_domain_events), from those rows, and None when there are none (every
    range's domain is NULL: no join). With `keys`, from the create events among that table of
    NVTX_EVENTS' name columns instead."""
    have = src.tables[NVTX]
    rows = f"{_domain_creates(src)} AS d0(domain_id, gtid, text, text_id)"
    if keys is not None:
        rows = f"(SELECT {_domain_columns(src)} FROM {keys} WHERE eventType = {NVTX_DOMAIN_CREATE}) AS d0(domain_id, gtid, text, text_id)"
    elif src.domain_events is not None:
        if not src.domain_events:
            return None
        # as SQL literals (a text holding NUL, which no literal can: read from the export again)
        if not any(isinstance(v, str) and "\x00" in v for e in src.domain_events for v in e):
            read = ", ".join("(" + ", ".join(params.literal(v) for v in e) + ")" for e in src.domain_events)
            rows = f"(VALUES {read}) AS d0(domain_id, gtid, text, text_id)"
    # untyped in SQLite when the export lacks the column: cast after the fact
    pid = PID_OF.format("CAST(d0.gtid AS BIGINT)") if "globalTid" in have else "NULL"
    text = "CAST(d0.text AS VARCHAR)" if "text" in have else "NULL"
    text_id = "ds.value" if "textId" in have else "NULL"
    join = f" LEFT JOIN {STRINGS} ds ON ds.id = CAST(d0.text_id AS BIGINT)" if "textId" in have else ""
    return (
        f"(SELECT CAST(d0.domain_id AS BIGINT) AS domain_id, {pid} AS pid, "
        f"any_value(coalesce({text}, {text_id})) AS name FROM {rows}{join} GROUP BY ALL)"
    )


def _nvtx_parts(src: Source, keys: str | None = None) -> tuple[dict[str, str], str]:
    """The nvtx_ranges columns of NVTX_EVENTS as SQL (the kernels aside) and their FROM; with
    `keys`, from that table of NVTX_EVENTS' name columns (NVTX_KEYS) instead of the ranges."""
    t, a = NVTX, "n"
    text_id, join = _name(src, t, "textId", a, "s")
    text = src.col(t, "text", a)
    name = f"coalesce({text}, {text_id})"
    domain, djoin = "NULL", ""
    gtid = src.col(t, "globalTid", a)
    domains = _nvtx_domains_sql(src, keys) if "domainId" in src.tables[t] else None
    if domains is not None:
        pid_match = f" AND d.pid IS NOT DISTINCT FROM {PID_OF.format(gtid)}" if gtid != "NULL" else ""
        djoin = f" LEFT JOIN {domains} d ON d.domain_id = {a}.domainId{pid_match}"
        domain = "d.name"
    types = ", ".join(str(k) for k in NVTX_RANGE_TYPES)
    cols = {
        **_host_side(src, t, a),
        "name": name,
        "base_name": base_name_sql(name),
        "domain": domain,
        "range_api": _case(f"{a}.eventType", NVTX_RANGE_TYPES),
        "category": src.col(t, "category", a),
    }
    if keys is not None:
        return cols, f"FROM {keys} {a}{join}{djoin}"
    return cols, f"FROM {src.ref(t)} {a}{join}{djoin} WHERE {a}.eventType IN ({types})"


def nvtx_ranges_sql(src: Source) -> str | None:
    if not src.has(NVTX):
        return None
    cols, frm = _nvtx_parts(src)
    # the nvtx_kernels step: fill_nvtx_kernels (../nvtx.py)
    cols |= {"kernels": "NULL", "kernel_ns": "NULL", "process_kernels": "NULL", "process_kernel_ns": "NULL"}
    return _select(cols, "nvtx_ranges", frm)


# The export's kernel launch calls for the nvtx_totals step while cuda_api is still deferred:
# the runtime calls whose correlation id one of the report's kernels has, less the inner row of
# a call recorded twice (as NESTED_DUPLICATES does to cuda_api, on these rows only).
LAUNCH_CALLS = "_nsa_launch_calls"
NESTED_LAUNCHES = _nested_duplicates(LAUNCH_CALLS, "true")


def _deferred_steps(con: duckdb.DuckDBPyConnection, report_id: int) -> set[str] | None:
    """The report's steps still deferred; None at ingest, before its reports row is written."""
    row = con.execute(f"SELECT deferred_steps FROM reports WHERE report_id = {int(report_id)}").fetchone()
    return None if row is None else set(row[0] or ())


def fill_nvtx_totals(con: duckdb.DuckDBPyConnection, src: Source, report_id: int) -> int:
    """The `nvtx_totals` step (nvtx.fill_nvtx_totals): the ranges from the export while
    nvtx_ranges is deferred, which then is never written; else from nvtx_ranges (summed when
    their kernels are worked out already). The launch calls likewise: cuda_api once copied,
    else only the export's calls that launched a kernel. At ingest (--full: no reports row yet)
    the ranges and calls are copied, their kernels not (nvtx_kernels stays deferred)."""
    rid = int(report_id)
    steps = _deferred_steps(con, rid)
    pending = {"nvtx_kernels"} if steps is None else steps
    if not pending & {"nvtx_ranges", "nvtx_kernels"}:
        return sum_nvtx_totals(con, rid)
    source = ranges_of(rid)
    if "nvtx_ranges" in pending:
        rows = _export_rows(con, src, NVTX)
        source = _export_ranges(src, rows) if _names_repeat(con, src, rows) else _export_named(src, rows)
    calls = calls_of(rid)
    with params.dropped_after(con, LAUNCH_CALLS):
        if "cuda_api" in pending:
            con.execute(
                f"CREATE OR REPLACE TEMP TABLE {LAUNCH_CALLS} "
                "(pid BIGINT, global_tid BIGINT, start_ns BIGINT, end_ns BIGINT, correlation_id BIGINT)"
            )
            if src.has(RUNTIME) and "correlationId" in src.tables[RUNTIME]:
                host = _host_side(src, RUNTIME, "r")
                con.execute(
                    f"INSERT INTO {LAUNCH_CALLS} SELECT {host['pid']}, {host['global_tid']}, "
                    f"{host['start_ns']}, {host['end_ns']}, r.correlationId FROM {src.ref(RUNTIME)} r "
                    f"WHERE r.correlationId IN (SELECT correlation_id FROM kernel_rows WHERE report_id = {rid})"
                )
                con.execute(NESTED_LAUNCHES)
            calls = f"SELECT pid, global_tid, start_ns, correlation_id FROM {LAUNCH_CALLS}"
        return nvtx_totals(con, rid, source, calls)


# NVTX_EVENTS' columns that name a range (with its thread's pid, its domain): nvtx_totals groups
# the export's ranges by them as they are and looks names up once per distinct key.
NVTX_KEY_COLUMNS = ("globalTid", "domainId", "textId", "text")


def _export_rows(con: duckdb.DuckDBPyConnection, src: Source, table: str) -> int:
    """At least the rows of the export's `table`: its largest rowid, which SQLite answers
    without a scan (DuckDB's SQLite reader scans the table for it: 2.1 s at 5M rows); when
    SQLite cannot say, more rows than any export holds."""
    try:
        with closing(open_attached(con, src.alias)) as db:
            return int(db.execute(f'SELECT coalesce(max(rowid), 0) FROM "{table}"').fetchone()[0])
    except sqlite3.Error:
        return 2**62


# Rows of NVTX_EVENTS sampled to tell whether the ranges' names repeat, at random rowids (a fixed
# seed: the same choice every time; evenly spaced ones alias with a period in the rows, a tiled
# export's).
NAME_SAMPLE = 1000


def _names_repeat(con: duckdb.DuckDBPyConnection, src: Source, rows: int) -> bool:
    """Do the export's ranges (at most `rows`) share their name columns (NVTX_KEY_COLUMNS) so
    much that grouping by them first (_export_ranges) leaves under an eighth as many keys as
    ranges? Where names repeat (hand-written ranges, a tiled export), the keys are few; where each
    call has its own name (PyTorch's emit_nvtx numbers every op: 16,582 names of 16,782 ranges in
    a real capture) there are as many keys as ranges, and the keys' lists of durations and their
    fold cost more than naming every range (_export_named: at 5M such ranges, 36.8 against 17.4
    CPU-s and 2.36 against 0.90 GB). Estimated from NAME_SAMPLE rows read by sqlite3 (at random
    rowids): k keys give n sampled ranges about n^2 / 2k pairs of equal keys. Small exports,
    and any the sample cannot be read from, keep the keys."""
    have = src.tables[NVTX]
    present = [f'"{c}"' for c in NVTX_KEY_COLUMNS if c in have]
    if rows <= 4 * NAME_SAMPLE or not present or "eventType" not in have:
        return True
    ids = ", ".join(map(str, random.Random(0).sample(range(1, rows + 1), NAME_SAMPLE)))
    types = ", ".join(str(k) for k in NVTX_RANGE_TYPES)
    try:
        with closing(open_attached(con, src.alias)) as db:
            sample = db.execute(
                f'SELECT {", ".join(present)} FROM "{NVTX}" WHERE rowid IN ({ids}) AND eventType IN ({types})'
            ).fetchall()
    except sqlite3.Error:
        return True
    pairs = sum(n * (n - 1) // 2 for n in Counter(sample).values())
    # keys ~ len(sample)^2 / (2 pairs) < rows / 8
    return 4 * len(sample) ** 2 < pairs * rows


def _export_scan(src: Source) -> tuple[str, str, str, str]:
    """The export's NVTX ranges as fill_nvtx_totals' sources read them: (table, alias, the range
    event types, the FROM ... WHERE clause of the ranges)."""
    t, a = NVTX, "n"
    types = ", ".join(str(k) for k in NVTX_RANGE_TYPES)
    return t, a, types, f"FROM {src.ref(t)} {a} WHERE {a}.eventType IN ({types})"


def _export_spans(host: dict[str, str], a: str, of: str) -> str:
    """The ranges' threads and times (NvtxSource.spans) from the export's rows `of`."""
    return (
        f"SELECT {a}.rowid AS src_row, {host['pid']} AS pid, {host['global_tid']} AS global_tid, "
        f"{host['start_ns']} AS start_ns, {host['end_ns']} AS end_ns {of}"
    )


def _export_named(src: Source, rows: int) -> NvtxSource:
    """fill_nvtx_totals' source: the export's NVTX_EVENTS (at most `rows`) named range by range
    as the nvtx_ranges copy names them (_nvtx_parts), summed in one aggregation by domain and base
    name (a resolved source); for ranges whose names hardly repeat (_names_repeat)."""
    t, a, _, of = _export_scan(src)
    cols, frm = _nvtx_parts(src)
    host = _host_side(src, t, a)
    named = ", ".join(f"{cols[c]} AS {c}" for c in ("domain", "name", "base_name"))
    return NvtxSource(
        ranges=(
            f"SELECT {a}.rowid AS src_row, {named}, {host['end_ns']} AS end_ns, "
            f"{host['duration_ns']} AS duration_ns {frm}"
        ),
        keys=(),
        named="",
        spans=_export_spans(host, a, of),
        size=f"SELECT {int(rows)}",
        threads=f"SELECT DISTINCT {host['pid']} AS pid, {host['global_tid']} AS global_tid {of}",
        resolved=True,
    )


def _export_ranges(src: Source, rows: int) -> NvtxSource:
    """fill_nvtx_totals' source: the export's NVTX_EVENTS (at most `rows`), read where they
    are. The domains' create events come with the ranges, as keys of their own (their eventType
    one of the key columns): their names are looked up in the keys (_nvtx_domains_sql), not in
    one more pass over the table, and `named` leaves them out."""
    t, a, types, of = _export_scan(src)
    present = [c for c in NVTX_KEY_COLUMNS if c in src.tables[t]]
    scanned = of
    if "domainId" in src.tables[t]:
        present.append("eventType")
        scanned = f"FROM {src.ref(t)} {a} WHERE {a}.eventType IN ({types}, {NVTX_DOMAIN_CREATE})"
    keys = [f'{a}."{c}"' for c in present] or ["NULL AS no_key"]
    cols, frm = _nvtx_parts(src, "_nsa_nvtx_keys")
    host = _host_side(src, t, a)
    names = ", ".join(f"{cols[c]} AS {c}" for c in ("domain", "name", "base_name"))
    return NvtxSource(
        ranges=(
            f"SELECT {a}.rowid AS src_row, {', '.join(keys)}, {host['pid']} AS pid, "
            f"{host['global_tid']} AS global_tid, {host['end_ns']} AS end_ns, "
            f"{host['duration_ns']} AS duration_ns {scanned}"
        ),
        keys=tuple(f'"{c}"' for c in present) or ("no_key",),
        named=f"SELECT {names}, {a}.* {frm} WHERE {a}.eventType IN ({types})"
        if "eventType" in present
        else f"SELECT {names}, {a}.* {frm}",
        spans=_export_spans(host, a, of),
        size=f"SELECT {int(rows)}",
    )


def osrt_api_sql(src: Source) -> str | None:
    if not src.has(OSRT):
        return None
    t, a = OSRT, "o"
    name, join = _name(src, t, "nameId", a, "s")
    cols = {**_host_side(src, t, a), "name": name}
    return _select(cols, "osrt_api", f"FROM {src.ref(t)} {a}{join}")


# A backtrace frame with a name: resolved, not an address (`0x7fc4e38ac2ec`) and not one of the
# entries nsys adds (`[Broken backtraces]`, `[Unknown]`).
NAMED_FRAME = (
    "coalesce({unresolved}, 0) = 0 AND NOT starts_with({symbol}, '[') "
    "AND NOT regexp_full_match({symbol}, '0x[0-9a-fA-F]+')"
)


def cpu_samples_sql(src: Source) -> str | None:
    """The CPU samples with their backtraces folded into each row: one GROUP BY over the frames
    and one join to the samples, linear in the export's rows."""
    t, a = SAMPLES, "c"
    if not src.has(t) or not {"id", "start"} <= src.tables[t]:
        return None
    gtid = src.col(t, "globalTid", a)
    chain = dict.fromkeys(
        ("leaf", "leaf_module", "function", "function_module", "function_depth", "frames"), "NULL"
    )
    join = ""
    cc = CALLCHAINS
    if src.has(cc) and {"id", "symbol", "stackDepth"} <= src.tables[cc]:
        module, mjoin = _name(src, cc, "module", "f", "fm")
        named = NAMED_FRAME.format(unresolved=src.col(cc, "unresolved", "f"), symbol="fs.value")
        frames = (
            f"SELECT f.id, f.stackDepth AS depth, fs.value AS symbol, CAST({module} AS VARCHAR) AS module, "
            f"{named} AS named FROM {src.ref(cc)} f LEFT JOIN {STRINGS} fs ON fs.id = f.symbol{mjoin}"
        )
        chains = (
            "SELECT id, arg_min(symbol, depth) AS leaf, arg_min(module, depth) AS leaf_module, "
            "arg_min(symbol, depth) FILTER (WHERE named) AS function, "
            "arg_min(module, depth) FILTER (WHERE named) AS function_module, "
            "min(depth) FILTER (WHERE named) AS function_depth, list(symbol ORDER BY depth) AS frames "
            f"FROM ({frames}) GROUP BY id"
        )
        join = f" LEFT JOIN ({chains}) ch ON ch.id = {a}.id"
        chain = {c: f"ch.{c}" for c in chain}
    cols = {
        "report_id": "$rid",
        "pid": PID_OF.format(gtid) if gtid != "NULL" else "NULL",
        "tid": TID_OF.format(gtid) if gtid != "NULL" else "NULL",
        "global_tid": gtid,
        "ts_ns": f"{a}.start",
        **chain,
    }
    return _select(cols, "cpu_samples", f"FROM {src.ref(t)} {a}{join}")


# Host waits that explain a GPU idle gap better than "late launch": communication libraries'
# NVTX ranges (WAIT_RANGES, ../nvtx.py) and OS runtime calls that block a thread.
MPI_RANGES = r"^P?MPI_"
WAIT_CALLS = (
    "sleep", "usleep", "nanosleep", "clock_nanosleep", "pthread_cond_wait", "pthread_cond_timedwait",
    "pthread_cond_clockwait", "sem_wait", "sem_timedwait", "sem_clockwait", "pthread_join", "waitpid", "wait",
    "wait4", "waitid", "futex", "pthread_mutex_lock", "pthread_mutex_timedlock", "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock", "pthread_spin_lock", "poll", "ppoll", "select", "pselect", "pselect6",
    "epoll_wait", "epoll_pwait", "recv", "recvfrom", "recvmsg", "read", "pread", "pread64", "readv", "fread",
    "accept", "accept4", "connect",
)  # fmt: skip
_WAIT_NAMES = ", ".join(params.literal(c) for c in WAIT_CALLS)  # an IN list


def osrt_waits_sql(src: Source) -> str | None:
    """host_waits rows of the blocking OS runtime calls (WAIT_CALLS)."""
    if not src.has(OSRT):
        return None
    t, a = OSRT, "o"
    name, join = _name(src, t, "nameId", a, "s")
    cols = {**_host_side(src, t, a), "name": name, "source": "'osrt'"}
    return _select(cols, "host_waits", f"FROM {src.ref(t)} {a}{join} WHERE {name} IN ({_WAIT_NAMES})")


# The MPI calls that block the thread until communication completes: blocking collectives,
# blocking sends and receives, probes, waits and RMA synchronisation. Not the set-up and
# tear-down in MPI_OTHER_EVENTS (MPI_Init, MPI_Finalize, MPI_Comm_*), the non-blocking starts
# (MPI_Isend, MPI_Iallreduce, MPI_*_init, MPI_Start) nor the tests (MPI_Test*): they return at once.
MPI_WAITS = (
    r"^P?MPI_(Allgatherv?|Allreduce|Alltoall[vw]?|Barrier|Bcast|Exscan|Gatherv?|Reduce|Reduce_scatter"
    r"(_block)?|Scan|Scatterv?|Neighbor_(allgatherv?|alltoall[vw]?)|Send|Bsend|Rsend|Ssend|Recv|Mrecv"
    r"|Sendrecv(_replace)?|Probe|Mprobe|Wait(all|any|some)?|Win_(fence|wait|complete|lock(_all)?|unlock(_all)?"
    r"|flush(_all|_local|_local_all)?))$"
)


def mpi_waits_sql(src: Source) -> str | None:
    """host_waits rows of the blocking MPI calls (MPI_WAITS) in every MPI table the export has."""
    parts = []
    for t in MPI_TABLES:
        if not src.has(t) or "textId" not in src.tables[t]:
            continue
        a = "m"
        name, join = _name(src, t, "textId", a, "s")
        cols = {**_host_side(src, t, a), "name": name, "source": "'mpi'"}
        where = f'WHERE {a}."end" IS NOT NULL AND regexp_matches({name}, {params.literal(MPI_WAITS)})'
        parts.append(_select(cols, "host_waits", f"FROM {src.ref(t)} {a}{join} {where}"))
    return "\nUNION ALL\n".join(parts) or None


def gpus_sql(src: Source) -> str | None:
    if not src.has(GPU):
        return None
    t, a = GPU, "g"
    major, minor = src.col(t, "computeMajor", a), src.col(t, "computeMinor", a)
    cc = (
        "NULL" if "NULL" in (major, minor) else f"CAST({major} AS VARCHAR) || '.' || CAST({minor} AS VARCHAR)"
    )
    cols = {
        "report_id": "$rid",
        "device_id": f"coalesce({src.col(t, 'cuDevice', a)}, {src.col(t, 'id', a)})",
        "name": src.col(t, "name", a),
        "bus_location": src.col(t, "busLocation", a),
        "sm_count": src.col(t, "smCount", a),
        "total_memory_bytes": src.col(t, "totalMemory", a),
        "memory_bandwidth_bps": src.col(t, "memoryBandwidth", a),
        "clock_rate_hz": src.col(t, "clockRate", a),
        "compute_capability": cc,
    }
    return _select(cols, "gpus", f"FROM {src.ref(t)} {a}")


def processes_sql(src: Source) -> str | None:
    if not src.has(PROCESSES):
        return None
    t, a = PROCESSES, "p"
    cols = {
        "report_id": "$rid",
        "pid": src.col(t, "pid", a),
        "global_pid": src.col(t, "globalPid", a),
        "name": src.col(t, "name", a),
    }
    return _select(cols, "processes", f"FROM {src.ref(t)} {a}")


# NVTX ranges that may be steps or host waits: the one scan of NVTX_EVENTS the `steps` step makes.
MARK_WORDS = STEP_HINT + "|" + WAIT_RANGES


def marker_ranges_sql(src: Source) -> str | None:
    """The export's closed NVTX ranges whose names may be steps or waits, as (report_id, pid,
    tid, global_tid, start_ns, end_ns, duration_ns, name), for fill_markers; when the export has
    no NVTX but has kernels, a query of no rows (the steps then come from the kernel pattern)."""
    if not src.has(NVTX):
        if not src.has(KERNEL) and not src.has(OSRT) and not any(src.has(t) for t in MPI_TABLES):
            return None
        return (
            "SELECT NULL::INTEGER AS report_id, NULL::BIGINT AS pid, NULL::BIGINT AS tid, NULL::BIGINT AS global_tid, "
            "0::BIGINT AS start_ns, 0::BIGINT AS end_ns, 0::BIGINT AS duration_ns, ''::VARCHAR AS name WHERE false"
        )
    t, a = NVTX, "n"
    text_id, join = _name(src, t, "textId", a, "s")
    name = f"coalesce({src.col(t, 'text', a)}, {text_id})"
    types = ", ".join(str(k) for k in NVTX_RANGE_TYPES)
    cols = {**_host_side(src, t, a), "name": name}
    body = ",\n  ".join(f'{expr} AS "{c}"' for c, expr in cols.items())
    return (
        f"SELECT {body} FROM {src.ref(t)} {a}{join} "
        f'WHERE {a}.eventType IN ({types}) AND {a}."end" IS NOT NULL AND regexp_matches({name}, {params.literal(MARK_WORDS)})'
    )


# The same ranges from the workspace's nvtx_ranges, once copied (the copy has the same rows:
# NVTX_RANGE_TYPES, their names resolved the same way): `nsa findings` after `nsa ingest` copies
# the ranges first, and the steps then read them there rather than scan the export again.
WORKSPACE_MARKS = f"""
SELECT report_id, pid, tid, global_tid, start_ns, end_ns, duration_ns, name
FROM nvtx_ranges
WHERE report_id = {{rid}} AND end_ns IS NOT NULL AND regexp_matches(name, {params.literal(MARK_WORDS)})
"""


def _copied(con: duckdb.DuckDBPyConnection, report_id: int, table: str) -> bool:
    """Are the report's rows of `table` (nvtx_ranges, osrt_api) in the workspace already (its step
    has run)? At ingest, where the report's row is not written yet: when it holds any of them."""
    rid = int(report_id)
    steps = _deferred_steps(con, rid)
    if steps is None:
        return bool(params.first_row(con.execute(f"SELECT EXISTS (FROM {table} WHERE report_id = {rid})"))[0])
    return table not in steps


# The blocking OS runtime calls (osrt_waits_sql) from the workspace's osrt_api, once copied: `nsa
# report` copies the calls before its steps, which then filter them there rather than scan the
# export's (7.4M at tr250) again.
WORKSPACE_OSRT_WAITS = f"""
SELECT {{cols}} FROM osrt_api WHERE report_id = $rid AND name IN ({_WAIT_NAMES})
"""


def fill_markers(con: duckdb.DuckDBPyConnection, src: Source, report_id: int) -> int:
    """The `steps` step: one scan of the NVTX ranges fills `host_waits` (communication ranges, and
    the blocking MPI and OS runtime calls) and `steps`; returns the steps found. The ranges come
    from the workspace when copied already (WORKSPACE_MARKS), else from the export."""
    marks = marker_ranges_sql(src)
    if marks is None:
        return 0
    if src.has(NVTX) and _copied(con, report_id, "nvtx_ranges"):
        marks = WORKSPACE_MARKS.format(rid=int(report_id))
    rid = {"rid": report_id}
    # CREATE TABLE AS cannot be prepared: the report id goes in as a literal
    con.execute(f"CREATE OR REPLACE TEMP TABLE _nsa_marks AS {marks.replace('$rid', str(int(report_id)))}")
    with params.dropped_after(con, "_nsa_marks"):
        cols = ", ".join(c for c in schema.BY_NAME["host_waits"].col_names if c != "source")
        mpi = mpi_waits_sql(src)
        ranges = f"regexp_matches(name, {params.literal(WAIT_RANGES)})"
        if mpi:  # the MPI calls are in the MPI tables: NVTX ranges named like them would count twice
            ranges += f" AND NOT regexp_matches(name, {params.literal(MPI_RANGES)})"
        sql = f"INSERT INTO host_waits ({cols}, source) SELECT {cols}, 'nvtx' FROM _nsa_marks WHERE {ranges}"
        params.execute(con, sql)
        names = schema.BY_NAME["host_waits"].col_names
        cols = ", ".join(f'"{c}"' for c in names)
        osrt = osrt_waits_sql(src)
        if osrt and _copied(con, report_id, "osrt_api"):
            osrt = WORKSPACE_OSRT_WAITS.format(
                cols=", ".join("'osrt'" if c == "source" else f'"{c}"' for c in names)
            )
        for waits in (mpi, osrt):
            if waits:
                params.execute(con, f"INSERT INTO host_waits ({cols}) {waits}", rid)
        return fill_steps(
            con,
            report_id,
            "SELECT global_tid, pid, start_ns, end_ns, name FROM _nsa_marks",
            graph_launches_sql(src),
        )


def _memory_events_sql(src: Source) -> str | None:
    """memory_events' SELECT (nsys_memory.py, which builds it with this module's helpers)."""
    from . import nsys_memory

    return nsys_memory.memory_events_sql(src)


# GPU activity no query of the library reads (graph node events, synchronisations), copied on
# first use like the host-side tables; a report's activity kinds still say what it holds
# (reader_sqlite.load asks the export for one row of each). The copies, memsets and graph
# executions stay at ingest: the GPU timeline is made of them, and it answers (utilization, gaps,
# gpu-idle) from the workspace alone once the export is gone.
GPU_COPIES = ("graph_events", "sync_events")

# Canonical table -> (SELECT builder, activity kind it evidences; None: no activity of its own).
LOADERS: dict[str, tuple[Callable[[Source], str | None], str | None]] = {
    "kernel_rows": (kernel_rows_sql, "kernel"),
    "kernel_names": (kernel_names_sql, "kernel"),
    "kernel_launch": (kernel_launch_sql, "kernel"),
    "memcpy": (memcpy_sql, "memcpy"),
    "memset": (memset_sql, "memset"),
    "graph_executions": (graph_executions_sql, "graph"),
    "graph_events": (graph_events_sql, "graph"),
    "cuda_api": (cuda_api_sql, "cuda_api"),
    "sync_events": (sync_events_sql, "sync"),
    "nvtx_ranges": (nvtx_ranges_sql, "nvtx"),
    "nvtx_kernels": (nvtx_ranges_sql, "nvtx"),
    "nvtx_totals": (nvtx_ranges_sql, "nvtx"),
    "osrt_api": (osrt_api_sql, "osrt"),
    "cpu_samples": (cpu_samples_sql, "cpu_samples"),
    "stack_events": (stacks.source_sql, "stacks"),  # writes stack_frames, stacks, stack_events
    "gpus": (gpus_sql, "gpu_info"),
    "processes": (processes_sql, "processes"),
    "steps": (marker_ranges_sql, None),  # fills host_waits too
    "gpu_metrics": (nsys_gpu_metrics.source_sql, "gpu_metrics"),
    "memory_events": (_memory_events_sql, None),  # its activity kind, "memory": reader_sqlite.load
}

# Copied on first use (see ingest.ensure_loaded), so `nsa ingest` pays only for the GPU
# timeline: the host-side tables, the largest in most exports (1.7M API calls and 5M NVTX rows
# at 1M kernels), and the kernels' launch configuration (10 of their 21 columns, no query in
# the library reads them); the GPU activity no query reads (GPU_COPIES); the CPU samples with
# their backtraces; the steps and the host waits, found by one scan of the NVTX ranges (and of
# the MPI and OS runtime calls); the GPU metrics samples (2.2M rows for a 9 s capture at 10 kHz:
# 5.7 s); the GPU memory events, which only the memory queries and rules read (408k rows of a
# 2M-kernel export: 0.5 s of CPU, a sixth of its ingest). Measured in benchmarks/README.md.
DEFERRABLE = (
    "kernel_launch",
    *GPU_COPIES,
    "cuda_api",
    "nvtx_ranges",
    "nvtx_kernels",
    "nvtx_totals",
    "osrt_api",
    "cpu_samples",
    "stack_events",
    "steps",
    "gpu_metrics",
    "memory_events",
)
# Deferred tables an ingest still asks the export for one row of: their activity kinds tell what
# the report holds (reader_sqlite.load).
KIND_CHECKED = (*GPU_COPIES, "memory_events")
# Steps that derive columns from tables already in the workspace: they need no source file, and
# run only for what reads their columns (schema.COMPUTED), not for every reader of the table.
DERIVED = ("nvtx_kernels",)
# Found on first use from the source; when the source is gone, the answers do without them (the
# timeline rules judge the whole run and say why) instead of failing.
OPTIONAL = ("steps",)
# Worked out on first use rather than copied: the ingest message does not list them.
WORKED_OUT = (*DERIVED, "nvtx_totals", "steps")
# The tables a deferred step writes, where not the one named like the step.
STEP_WRITES = {
    "kernel_launch": ("kernel_rows",),
    "nvtx_kernels": ("nvtx_ranges",),
    "steps": ("steps", "host_waits"),
    "stack_events": stacks.TABLES,
}


def validate(src: Source, path: object) -> None:
    """Refuse SQLite files that are not nsys exports, with the command that makes one."""
    if not any(src.has(m) for m in META_TABLES) and not src.has("StringIds"):
        raise InputError(
            f"{path} is an SQLite database but not an nsys export (no META_DATA_EXPORT or "
            f"StringIds table); {EXPORT_HINT}."
        )
    activity = [t for t in (KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, NVTX, OSRT) if src.has(t)]
    if not activity:
        raise InputError(
            f"{path} is an nsys export with no activity records at all (no CUDA, NVTX or OS "
            "runtime tables): the capture recorded nothing. Profile again with "
            "`nsys profile -t cuda,nvtx,osrt` and export with `nsys export --type sqlite`."
        )


def metadata(con: duckdb.DuckDBPyConnection, src: Source) -> dict[str, object]:
    meta: dict[str, str] = {}
    for table in META_TABLES:
        if src.has(table):
            rows = con.execute(f"SELECT name, value FROM {src.ref(table)}").fetchall()
            meta.update({str(k): str(v) for k, v in rows})
    start = None
    if "utcEpochNs" in src.tables.get("TARGET_INFO_SESSION_START_TIME", ()):
        row = con.execute(
            f"SELECT min(utcEpochNs) FROM {src.ref('TARGET_INFO_SESSION_START_TIME')}"
        ).fetchone()
        start = row[0] if row else None
    return {
        "tool_version": meta.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
        "session_start_utc_ns": start,
        **job_identity(con, src),
    }


# The variables launchers set in each rank's environment: torchrun / torch.distributed, Slurm,
# Open MPI, MPICH / Intel MPI (PMI), MVAPICH2. The first one present wins.
RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
WORLD_VARS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")
LOCAL_VARS = (
    "LOCAL_RANK",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "MV2_COMM_WORLD_LOCAL_RANK",
)


def job_identity(con: duckdb.DuckDBPyConnection, src: Source) -> dict[str, object]:
    """The host name and, when nsys profiled one rank of a job, its rank, local rank and world
    size, read from the profiled environment nsys records (TARGET_INFO_SYSTEM_ENV `Hostname`
    and `DeviceEnvironment`); only these variables are read. Empty when the export lacks them."""
    if not src.has("TARGET_INFO_SYSTEM_ENV") or not {"name", "value"} <= set(
        src.tables["TARGET_INFO_SYSTEM_ENV"]
    ):
        return {}
    rows = con.execute(
        f"SELECT name, value FROM {src.ref('TARGET_INFO_SYSTEM_ENV')} "
        "WHERE name IN ('Hostname', 'DeviceEnvironment')"
    ).fetchall()
    values = {str(k): str(v) for k, v in rows if v is not None}
    env: dict[str, str] = {}
    for item in values.get("DeviceEnvironment", "").split(";"):
        key, sep, value = item.partition("=")
        if sep and key in {*RANK_VARS, *WORLD_VARS, *LOCAL_VARS}:
            env[key] = value

    def first(names: tuple[str, ...]) -> int | None:
        for n in names:
            if env.get(n, "").strip().isdigit():
                return int(env[n])
        return None

    out: dict[str, object] = {"host": values.get("Hostname") or None}
    rank = first(RANK_VARS)
    if rank is not None:
        out.update(
            rank=rank, world_size=first(WORLD_VARS), local_rank=first(LOCAL_VARS), rank_source="environment"
        )
    return out


def prepare_strings(con: duckdb.DuckDBPyConnection, src: Source) -> None:
    con.execute(f"DROP TABLE IF EXISTS {STRINGS}")
    if src.has("StringIds"):
        con.execute(
            f"CREATE TEMP TABLE {STRINGS} AS SELECT id, value, "
            f"regexp_replace(value, '_v[0-9]+$', '') AS api_name FROM {src.ref('StringIds')}"
        )
    else:
        con.execute(f"CREATE TEMP TABLE {STRINGS} (id BIGINT, value VARCHAR, api_name VARCHAR)")


def load_table(
    con: duckdb.DuckDBPyConnection, src: Source, table: str, report_id: int, launch: bool = True
) -> int:
    """Copy one canonical table for one report; returns rows written (0 when the export lacks it).

    Two steps are not tables: `kernel_launch` fills the launch columns of rows `kernel_rows`
    copied without them (launch=False), `nvtx_kernels` computes nvtx_ranges.kernels/kernel_ns
    and their process_ forms."""
    if table == "kernel_launch":
        sql = kernel_launch_sql(src)
        row = params.execute(con, sql, {"rid": report_id}).fetchone() if sql else None
        return int(row[0]) if row else 0
    if table == "nvtx_kernels":
        return fill_nvtx_kernels(con, report_id)
    if table == "nvtx_totals":
        return fill_nvtx_totals(con, src, report_id)
    if table == "steps":
        return fill_markers(con, src, report_id)
    if table == "gpu_metrics":
        return nsys_gpu_metrics.load(con, src, report_id)
    if table == "stack_events":
        return stacks.load(con, src, report_id)
    if table == "kernel_rows":
        sql = kernel_rows_sql(src, launch)
    elif table == "kernel_names":  # after kernel_rows: one row of each name for SQLite to look up
        reps = params.execute(
            con,
            "SELECT min(source_row) FROM kernel_rows WHERE report_id = $rid GROUP BY name_id",
            {"rid": report_id},
        ).fetchall()
        sql = kernel_names_sql(src, [r[0] for r in reps if r[0] is not None])
    else:
        if table == "nvtx_ranges" and src.has(NVTX) and "domainId" in src.tables[NVTX]:
            src.nvtx_domain_events(con)  # the copy names the domains from them (_nvtx_domains_sql)
        sql = LOADERS[table][0](src)
    if sql is None:
        return 0
    cols = ", ".join(f'"{c}"' for c in schema.BY_NAME[table].col_names)
    row = params.execute(con, f'INSERT INTO "{table}" ({cols}) {sql}', {"rid": report_id}).fetchone()
    n = int(row[0]) if row else 0
    if table == "cuda_api" and n:
        row = params.execute(con, NESTED_DUPLICATES, {"rid": report_id}).fetchone()
        n -= int(row[0]) if row else 0
    return n
