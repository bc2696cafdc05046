"""Communication kernels (NCCL, RCCL, NVSHMEM) -> `comm_ops`, for every reader that writes kernels.

A kernel is communication when its name says so. The name is parsed once per distinct name of a
report (`kernel_names`: a few hundred names against a million kernel rows), the answers go into a
temp table, and one INSERT joins it to `kernel_rows`. Kineto traces add what the profiler
recorded about each collective (`Collective name`, element counts, `dtype`, group size, process
group), which the Kineto reader stages and hands over as a relation keyed by the kernel's
`source_row`.

NCCL has named its kernels three ways, and added a fourth family (releases approximate; the HTA
traces' NCCL 2.17.1 writes the second, tests/data/ddp's 2.28.9 the third):

- up to about 2.7: `ncclAllReduceRingLLKernel_sum_f32(ncclColl)` (collective, algorithm,
  protocol, reduction, type); `ncclSendRecvKernel_copy_i8`.
- then to 2.18: `ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)`
  (collective, algorithm, protocol, reduction, C++ type).
- 2.19 on: `ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)`,
  `ncclDevKernel_AllGather_RING_LL`, `ncclDevKernel_SendRecv`, `ncclDevKernel_Generic`
  (several collectives in one launch: the name cannot say which).
- 2.27 on, symmetric-memory kernels: `ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f32`.

What a name can be trusted for: NCCL compiles a kernel for a few (reduction, algorithm,
protocol) choices only and runs every other choice of the same collective (and type) through it,
dispatching on the work it is handed (src/device/generate.py `best_kernel`; before 2.19
"Only generate kernels for SUM" and for the LL protocol). So the collective is always right;
the type is right for reductions (2.19+ runs signed-integer sums on the unsigned kernel);
`Sum`, `LL` and, from 2.19, `RING` are usually the kernel's specialisation rather than what ran.
The copy and point-to-point kernels carry fixed filler (`Sum_int8_t`, SendRecv's `RING_SIMPLE`):
they move bytes, so their reduction, type, algorithm and protocol are left NULL.

RCCL (ROCm) keeps NCCL's kernel names: its kernels are library 'rccl' only when the name says
rccl (`..._rccl_bfloat16`), else they read as 'nccl'. NVSHMEM's are the `nvshmem*` kernels and its
on-stream collectives (`alltoall_on_stream_kernel<float>`, `barrier_on_stream_kernel_warp`),
with the collective taken from the name where it says one.

nsys exports also hold NCCL's own NVTX ranges (domain NCCL, `ncclAllReduce` with a payload of
count, type and communicator) when NCCL was built with NVTX; they are not read here yet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from .. import params, schema

# NCCL's collective words -> canonical `comm_ops.op`
COLLECTIVES = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "AllGatherV": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "ReduceScatterV": "reduce_scatter",
    "Reduce": "reduce",
    "Broadcast": "broadcast",
    "SendRecv": "send_recv",
    "AllToAll": "all_to_all",
    "Gather": "gather",
    "Scatter": "scatter",
}
REDUCTIONS = frozenset({"all_reduce", "reduce", "reduce_scatter"})
# NCCL's reduction words (any case) -> canonical `comm_ops.reduce_op`
REDUCE_OPS = {
    "sum": "sum",
    "prod": "prod",
    "min": "min",
    "max": "max",
    "minmax": "minmax",  # 2.19+: one kernel function for min and max
    "premulsum": "premulsum",
    "sumpostdiv": "sumpostdiv",
    "avg": "avg",  # the symmetric kernels' name for SumPostDiv
}
# Type words in kernel names -> canonical `comm_ops.dtype`: 2.19+ and the oldest names write the
# code itself; 2.8-2.18 the C++ type; RCCL its own bfloat16 and fp8 types (the same formats).
NAME_TYPES = {
    **{
        c: c
        for c in ("i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2")
    },
    "int8_t": "i8",
    "uint8_t": "u8",
    "int32_t": "i32",
    "uint32_t": "u32",
    "int64_t": "i64",
    "uint64_t": "u64",
    "half": "f16",
    "float": "f32",
    "double": "f64",
    "__nv_bfloat16": "bf16",
    "bfloat16": "bf16",
    "rccl_bfloat16": "bf16",
    "hip_bfloat16": "bf16",
    "__nv_fp8_e4m3": "f8e4m3",
    "__nv_fp8_e5m2": "f8e5m2",
    "rccl_float8": "f8e4m3",
    "rccl_bfloat8": "f8e5m2",
}
# Bytes per element of each dtype code.
ELEMENT_BYTES = {
    "bool": 1, "i8": 1, "u8": 1, "f8e4m3": 1, "f8e5m2": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1,
    "i16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "i32": 4, "u32": 4, "f32": 4, "c32": 4,
    "i64": 8, "u64": 8, "f64": 8, "c64": 8,
    "c128": 16,
}  # fmt: skip
# Kineto's `dtype` argument (c10::ScalarType's name) -> dtype code.
KINETO_DTYPES = {
    "Float": "f32",
    "Double": "f64",
    "Half": "f16",
    "BFloat16": "bf16",
    "Char": "i8",
    "Byte": "u8",
    "Short": "i16",
    "Int": "i32",
    "Long": "i64",
    "UInt16": "u16",
    "UInt32": "u32",
    "UInt64": "u64",
    "Bool": "bool",
    "ComplexHalf": "c32",
    "ComplexFloat": "c64",
    "ComplexDouble": "c128",
    "Float8_e4m3fn": "f8e4m3",
    "Float8_e5m2": "f8e5m2",
    "Float8_e4m3fnuz": "f8e4m3fnuz",
    "Float8_e5m2fnuz": "f8e5m2fnuz",
}
# PyTorch's collective names (record_param_comms' `Collective name`, `nccl:*` record_function
# names) without their variant suffixes and underscores -> canonical op.
TORCH_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "allgatherv": "all_gather",
    "reducescatter": "reduce_scatter",
    "reducescatterv": "reduce_scatter",
    "reduce": "reduce",
    "broadcast": "broadcast",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "send": "send",
    "recv": "recv",
    "recvanysource": "recv",
    "sendrecv": "send_recv",
    "barrier": "barrier",
    "gather": "gather",
    "scatter": "scatter",
}
# Variants of one collective (`_all_gather_base`, `reduce_scatter_tensor_coalesced`, `_reduce_oop`,
# `all_to_all_single`): the same data movement.
TORCH_SUFFIXES = ("_coalesced", "_base", "_oop", "_into_tensor", "_tensor", "_single", "_sparse")
# NVSHMEM name words -> op, first match wins (reducescatter before reduce; rdxn: its reduce-to-all).
NVSHMEM_OPS = (
    ("alltoall", "all_to_all"),
    ("barrier", "barrier"),
    ("sync", "barrier"),
    ("fcollect", "all_gather"),
    ("collect", "all_gather"),
    ("allgather", "all_gather"),
    ("broadcast", "broadcast"),
    ("bcast", "broadcast"),
    ("reducescatter", "reduce_scatter"),
    ("rdxn", "all_reduce"),
    ("reduce", "all_reduce"),
)

_TYPE = "|".join(sorted(map(re.escape, NAME_TYPES), key=len, reverse=True))
_REDOP = "|".join(sorted(REDUCE_OPS, key=len, reverse=True))
_COLL = "|".join(sorted(COLLECTIVES, key=len, reverse=True))
# up to 2.7: ncclAllReduceRingLLKernel_sum_f32, ncclSendRecvKernel_copy_i8
_GEN1 = re.compile(
    rf"^nccl(?P<coll>{_COLL})(?P<algo>Ring|Tree|CollNet)?(?P<proto>LL128|LL)?Kernel_(?P<redop>{_REDOP}|copy)_(?P<ty>{_TYPE})$"
)
# 2.8-2.18: ncclKernel_AllReduce_RING_LL_Sum_float
_GEN2 = re.compile(
    rf"^ncclKernel_(?P<coll>{_COLL})_(?P<algo>[A-Z_]+?)_(?P<proto>LL128|LL|SIMPLE)_(?P<redop>[A-Za-z]+)_(?P<ty>{_TYPE})$"
)
# 2.19+: ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclDevKernel_AllGather_RING_LL, ..._SendRecv, ..._Generic_1
_GEN3 = re.compile(
    rf"^ncclDevKernel(?:Debug)?_(?P<coll>{_COLL}|Generic)"
    rf"(?:_(?P<redop>[A-Za-z]+)_(?P<ty>{_TYPE}))?(?:_(?P<algo>[A-Z_]+?)_(?P<proto>LL128|LL|SIMPLE))?(?:_\d+)?$"
)
# 2.27+ symmetric memory: ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f32, ncclSymkDevKernel_AllGather_LL
_SYMMETRIC = re.compile(
    rf"^ncclSymk?DevKernel_(?P<coll>{_COLL})_(?P<algo>\w+?)(?:_(?P<redop>sum|avg)_(?P<ty>{_TYPE}))?(?:_profile)?$"
)
# MSCCL (NCCL and RCCL builds): mscclKernel_Sum_float_LL128, one kernel for every collective
_MSCCL = re.compile(
    rf"^mscclKernel_(?P<redop>[A-Za-z]+)_(?P<ty>{_TYPE})_(?P<proto>LL128|LL|Simple|SIMPLE)(?:_\w+)?$"
)
# Any other NCCL / RCCL kernel (a naming not seen yet): communication, collective unknown.
_OTHER_NCCL = re.compile(r"^(?:nccl|rccl|msccl)\w*Kernel", re.IGNORECASE)
_NVSHMEM = re.compile(r"nvshmem|_on_stream_kernel", re.IGNORECASE)


@dataclass(frozen=True)
class CommKernel:
    """What a communication kernel's name determines (None: the name does not say)."""

    library: str  # 'nccl', 'rccl' or 'nvshmem'
    op: str  # canonical collective, 'unknown' when the name cannot say
    reduce_op: str | None
    dtype: str | None
    algorithm: str | None
    protocol: str | None


def base_name(name: str) -> str:
    """The kernel's function name: no return type, template or parameter list."""
    name = name.strip().removeprefix("void ")
    for stop in "(<":
        cut = name.find(stop)
        if cut > 0:
            name = name[:cut]
    return name.strip().rsplit("::", 1)[-1]


def parse_kernel_name(name: str) -> CommKernel | None:
    """The communication kernel a name denotes, or None when it is no communication kernel."""
    low = name.lower()
    if "ccl" not in low and "nvshmem" not in low and "_on_stream_kernel" not in low:
        return None  # the common case, without a regex
    base = base_name(name)
    library = "rccl" if "rccl" in low else "nccl"
    for pattern in (_GEN3, _GEN2, _GEN1, _SYMMETRIC):
        m = pattern.match(base)
        if m:
            # up to 2.7 a kernel named for an algorithm without LL / LL128 ran the SIMPLE protocol
            simple = pattern is _GEN1 and m["algo"] is not None
            return _collective(library, m.groupdict(), "simple" if simple else None)
    m = _MSCCL.match(base)
    if m:
        return CommKernel(
            library, "unknown", _redop(m["redop"]), NAME_TYPES[m["ty"]], None, m["proto"].lower()
        )
    if _OTHER_NCCL.match(base):
        return CommKernel(library, "unknown", None, None, None, None)
    if _NVSHMEM.search(base):
        word = base.lower().replace("_", "")
        op = next((op for key, op in NVSHMEM_OPS if key in word), "unknown")
        return CommKernel("nvshmem", op, None, None, None, None)
    return None


def _redop(word: str | None) -> str | None:
    return REDUCE_OPS.get(word.lower()) if word else None


def _collective(library: str, g: dict[str, str | None], default_protocol: str | None) -> CommKernel:
    coll = g["coll"] or ""
    if coll == "Generic":
        return CommKernel(library, "unknown", None, None, None, None)
    op = COLLECTIVES[coll]
    if op == "send_recv":  # one kernel for all point-to-point work: the rest is filler
        return CommKernel(library, op, None, None, None, None)
    algo = (g.get("algo") or "").lower() or None
    proto = (g.get("proto") or "").lower() or default_protocol
    if op not in REDUCTIONS:  # copies: their `Sum_int8_t` is filler
        return CommKernel(library, op, None, None, algo, proto)
    ty = g.get("ty")
    return CommKernel(library, op, _redop(g.get("redop")), NAME_TYPES[ty] if ty else None, algo, proto)


def collective_op(name: str) -> str | None:
    """The canonical op of a PyTorch collective name: record_param_comms' `Collective name`
    (`allreduce`, `_allgather_base`, `alltoall_base`, ...) or a `nccl:*` record_function name
    (`nccl:all_reduce`, `nccl:reduce_scatter_tensor_coalesced`, `nccl:send 0->1`); None for
    names that are no data movement (`wait`, `init`) or not known."""
    s = name.strip().lower()
    if ":" in s:
        s = s.split(":", 1)[1]
    words = s.split()
    s = words[0].strip("_") if words else ""
    changed = True
    while changed:
        changed = False
        for suffix in TORCH_SUFFIXES:
            if s.endswith(suffix) and len(s) > len(suffix):
                s, changed = s[: -len(suffix)], True
    return TORCH_OPS.get(s.replace("_", ""))


def kineto_dtype(value: str | None) -> str | None:
    """Kineto's `dtype` argument (`Float`, `BFloat16`, ...) as a dtype code; None when unknown."""
    return KINETO_DTYPES.get(value.strip()) if value else None


# The profiler's arguments per kernel row, when the reader has none: no rows.
NO_ARGS = (
    "SELECT NULL::BIGINT AS source_row, NULL::VARCHAR AS collective, NULL::VARCHAR AS dtype, "
    "NULL::BIGINT AS in_nelems, NULL::BIGINT AS out_nelems, NULL::BIGINT AS group_size, "
    "NULL::VARCHAR AS process_group WHERE false"
)

# comm_ops rows of one report.
# channel: the process group when recorded; else the process group recorded for the other ops of
# the same stream (PyTorch gives each group its own stream), for kernels whose arguments the
# profiler missed; else the stream numbered by first use among its process's communication
# streams (stream ids differ between ranks, the order in which a rank starts using its
# communicators does not).
# seq: order in the channel on the process, 0 at the channel's first op with recorded arguments.
# A Kineto window starts at the same step on every rank, so that op is the same collective on
# every rank; the kernels before it were launched before the window and are still running, a
# number that differs between ranks (3, 1, 4 and 4 on the four ranks of tests/data/ddp's ddp_w4):
# they count back, -1 being the collective just before. Without recorded arguments (nsys) seq
# counts from 0.
# message_bytes: nccl-tests' size, the larger of input and output (all_gather's output,
# reduce_scatter's input: the whole buffer) times the element size.
INSERT = """
WITH c AS (
    SELECT k.report_id, k.device_id, k.context_id, k.stream_id, k.pid, k.global_pid,
           k.start_ns, k.end_ns, k.duration_ns, k.correlation_id,
           n.name, n.library, coalesce(o.op, n.op) AS op, n.reduce_op,
           coalesce(d.dtype, n.dtype) AS dtype, n.algorithm, n.protocol,
           a.in_nelems, a.out_nelems, greatest(a.in_nelems, a.out_nelems) * d.element_bytes AS message_bytes,
           a.group_size, nullif(a.process_group, '') AS process_group
    FROM kernel_rows AS k
    JOIN _nsa_comm_names AS n ON n.name_id = k.name_id
    LEFT JOIN ({args}) AS a ON a.source_row = k.source_row
    LEFT JOIN _nsa_comm_ops AS o ON o.collective = a.collective
    LEFT JOIN _nsa_comm_dtypes AS d ON d.kineto = a.dtype
    WHERE k.report_id = $rid
),
streams AS (
    SELECT pid, device_id, stream_id,
           row_number() OVER (PARTITION BY pid ORDER BY min(start_ns), device_id, stream_id) AS n,
           CASE WHEN count(DISTINCT process_group) = 1 THEN max(process_group) END AS stream_group
    FROM c GROUP BY pid, device_id, stream_id
),
ch AS (
    SELECT c.*,
           coalesce('pg ' || coalesce(c.process_group, s.stream_group), 'stream ' || CAST(s.n AS VARCHAR)) AS channel
    FROM c JOIN streams AS s ON s.pid IS NOT DISTINCT FROM c.pid
        AND s.device_id IS NOT DISTINCT FROM c.device_id AND s.stream_id IS NOT DISTINCT FROM c.stream_id
),
numbered AS (
    SELECT ch.*, row_number() OVER (
        PARTITION BY pid, channel ORDER BY start_ns, end_ns, correlation_id, device_id, stream_id
    ) AS n
    FROM ch
)
SELECT {cols},
    n - coalesce(min(n) FILTER (WHERE process_group IS NOT NULL) OVER (PARTITION BY pid, channel), 1) AS seq
FROM numbered
"""
TEMP = ("_nsa_comm_names", "_nsa_comm_ops", "_nsa_comm_dtypes")


def load(con: duckdb.DuckDBPyConnection, report_id: int, args: str = NO_ARGS) -> int:
    """Write the `comm_ops` rows of one report from its `kernel_rows` and `kernel_names` (both
    written first); returns the rows written. `args`: a SELECT of the profiler's arguments per
    kernel row (source_row, collective, dtype, in_nelems, out_nelems, group_size, process_group),
    their values as the profiler wrote them (Kineto's `Collective name`, `dtype`, ...)."""
    names = params.execute(
        con,
        "SELECT name_id, coalesce(name, short_name) FROM kernel_names WHERE report_id = $rid",
        {"rid": report_id},
    ).fetchall()
    parsed = []
    for name_id, name in names:
        kernel = parse_kernel_name(name) if name else None
        if kernel is not None:
            parsed.append((name_id, name, kernel.library, kernel.op, kernel.reduce_op, kernel.dtype,
                           kernel.algorithm, kernel.protocol))  # fmt: skip
    if not parsed:
        return 0
    with params.dropped_after(con, *TEMP, "_nsa_comm_args"):
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _nsa_comm_names (name_id BIGINT, name VARCHAR, library VARCHAR, "
            "op VARCHAR, reduce_op VARCHAR, dtype VARCHAR, algorithm VARCHAR, protocol VARCHAR)"
        )
        params.insert_rows(con, "_nsa_comm_names", parsed)  # as literals: binding would import pandas
        con.execute(f"CREATE OR REPLACE TEMP TABLE _nsa_comm_args AS {args}")
        collectives = con.execute(
            "SELECT DISTINCT collective FROM _nsa_comm_args WHERE collective IS NOT NULL"
        ).fetchall()
        con.execute("CREATE OR REPLACE TEMP TABLE _nsa_comm_ops (collective VARCHAR, op VARCHAR)")
        ops = [(c, collective_op(c)) for (c,) in collectives]
        params.insert_rows(con, "_nsa_comm_ops", ops)
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _nsa_comm_dtypes (kineto VARCHAR, dtype VARCHAR, element_bytes INTEGER)"
        )
        params.insert_rows(
            con, "_nsa_comm_dtypes", [(k, code, ELEMENT_BYTES[code]) for k, code in KINETO_DTYPES.items()]
        )
        cols = schema.BY_NAME["comm_ops"].col_names
        select = INSERT.format(
            args="SELECT * FROM _nsa_comm_args", cols=", ".join(c for c in cols if c != "seq")
        )
        quoted = ", ".join(f'"{c}"' for c in cols)
        row = params.execute(con, f"INSERT INTO comm_ops ({quoted}) {select}", {"rid": report_id}).fetchone()
    return int(row[0]) if row else 0
