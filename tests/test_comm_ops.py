"""`comm_ops`: communication kernels (NCCL, RCCL, NVSHMEM) filled at ingest, nsys and Kineto alike.

The name parser runs on a table of real kernel names of every NCCL generation (the captures' own
and NCCL's generated names); the ingests are checked against plain arithmetic on the inputs in
the test: the Kineto JSON read with json/gzip, the nsys exports with sqlite3, and a fixture
export whose kernels the test itself lays out.
"""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import fixtures.nsys_fixtures as fx
import nsight_analytics as nsa
from conftest import ROOT, realdata
from nsight_analytics.ingest.comm import CommKernel, collective_op, kineto_dtype, parse_kernel_name

# --- (a) the name parser ----------------------------------------------------------------------

# (kernel name as a profiler writes it) -> (library, op, reduce_op, dtype, algorithm, protocol).
# Copy (Broadcast, AllGather) and point-to-point kernels carry NCCL's fixed `Sum_int8_t` /
# `RING_SIMPLE` filler, so their reduction and type (and SendRecv's algorithm) are None.
NAMES: list[tuple[str, tuple[str, str, str | None, str | None, str | None, str | None] | None]] = [
    # up to NCCL 2.7 (collective + algorithm + protocol + Kernel_ + reduction + type code)
    ("ncclAllReduceRingLLKernel_sum_f32(ncclColl)", ("nccl", "all_reduce", "sum", "f32", "ring", "ll")),
    ("ncclAllReduceTreeLL128Kernel_sum_f16(ncclColl)", ("nccl", "all_reduce", "sum", "f16", "tree", "ll128")),
    ("ncclReduceScatterRingKernel_max_u8(ncclColl)", ("nccl", "reduce_scatter", "max", "u8", "ring", "simple")),
    ("ncclBroadcastRingLLKernel_copy_i8(ncclColl)", ("nccl", "broadcast", None, None, "ring", "ll")),
    ("ncclSendRecvKernel_copy_i8(ncclColl)", ("nccl", "send_recv", None, None, None, None)),
    # NCCL 2.8-2.18: ncclKernel_<Coll>_<ALGO>_<PROTO>_<Redop>_<C++ type> (the HTA traces: 2.17.1)
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     ("nccl", "all_reduce", "sum", "f32", "ring", "ll")),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     ("nccl", "send_recv", None, None, None, None)),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     ("nccl", "broadcast", None, None, "ring", "ll")),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t", ("nccl", "all_gather", None, None, "ring", "ll")),
    ("ncclKernel_AllReduce_TREE_LL_Sum___nv_bfloat16(ncclWorkElem)", ("nccl", "all_reduce", "sum", "bf16", "tree", "ll")),
    ("ncclKernel_ReduceScatter_RING_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)",
     ("nccl", "reduce_scatter", "sum", "f16", "ring", "ll")),
    ("ncclKernel_AllReduce_COLLNET_DIRECT_LL_Sum_double", ("nccl", "all_reduce", "sum", "f64", "collnet_direct", "ll")),
    ("ncclKernel_Reduce_RING_LL_Sum_uint64_t", ("nccl", "reduce", "sum", "u64", "ring", "ll")),
    ("ncclKernel_AllReduce_RING_LL_Sum_int32_t", ("nccl", "all_reduce", "sum", "i32", "ring", "ll")),
    ("ncclKernel_AllReduce_RING_LL_Sum_uint32_t", ("nccl", "all_reduce", "sum", "u32", "ring", "ll")),
    ("ncclKernel_AllReduce_RING_LL_Sum_int64_t", ("nccl", "all_reduce", "sum", "i64", "ring", "ll")),
    ("ncclKernel_AllReduce_RING_LL_Sum_uint8_t", ("nccl", "all_reduce", "sum", "u8", "ring", "ll")),
    # RCCL keeps NCCL's names; its own bfloat16 type says rccl
    ("ncclKernel_AllReduce_RING_LL_Sum_rccl_bfloat16(ncclDevComm*, unsigned long, ncclWork*)",
     ("rccl", "all_reduce", "sum", "bf16", "ring", "ll")),
    # NCCL 2.19+: nsys (tests/data/ddp, NCCL 2.28.9) and Kineto spell the parameter differently
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     ("nccl", "all_reduce", "sum", "f32", "ring", "ll")),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     ("nccl", "all_reduce", "sum", "f32", "ring", "ll")),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     ("nccl", "all_gather", None, None, "ring", "ll")),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     ("nccl", "broadcast", None, None, "ring", "ll")),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     ("nccl", "reduce_scatter", "sum", "bf16", "ring", "ll")),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", ("nccl", "send_recv", None, None, None, None)),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", ("nccl", "unknown", None, None, None, None)),
    ("ncclDevKernel_Generic_1", ("nccl", "unknown", None, None, None, None)),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", ("nccl", "unknown", None, None, None, None)),
    ("ncclDevKernel_AllReduce_Sum_f32_TREE_LL", ("nccl", "all_reduce", "sum", "f32", "tree", "ll")),
    ("ncclDevKernel_AllReduce_Sum_f32_TREE_LL128", ("nccl", "all_reduce", "sum", "f32", "tree", "ll128")),
    ("ncclDevKernel_AllReduce_Sum_f32_COLLNET_DIRECT_SIMPLE",
     ("nccl", "all_reduce", "sum", "f32", "collnet_direct", "simple")),
    ("ncclDevKernel_AllReduce_Sum_f16_COLLNET_CHAIN_SIMPLE",
     ("nccl", "all_reduce", "sum", "f16", "collnet_chain", "simple")),
    ("ncclDevKernel_AllReduce_Sum_f32_NVLS_SIMPLE", ("nccl", "all_reduce", "sum", "f32", "nvls", "simple")),
    ("ncclDevKernel_AllReduce_Sum_bf16_NVLS_TREE_SIMPLE", ("nccl", "all_reduce", "sum", "bf16", "nvls_tree", "simple")),
    ("ncclDevKernel_ReduceScatter_Sum_f8e4m3_PAT_SIMPLE", ("nccl", "reduce_scatter", "sum", "f8e4m3", "pat", "simple")),
    ("ncclDevKernel_AllGather_PAT_SIMPLE", ("nccl", "all_gather", None, None, "pat", "simple")),
    ("ncclDevKernel_AllReduce_Sum_f8e5m2_RING_LL", ("nccl", "all_reduce", "sum", "f8e5m2", "ring", "ll")),
    ("ncclDevKernel_AllReduce_Sum_u64_RING_LL", ("nccl", "all_reduce", "sum", "u64", "ring", "ll")),
    ("ncclDevKernel_AllReduce_MinMax_i32_NVLS_SIMPLE", ("nccl", "all_reduce", "minmax", "i32", "nvls", "simple")),
    ("ncclDevKernel_Reduce_Prod_f64_RING_LL", ("nccl", "reduce", "prod", "f64", "ring", "ll")),
    ("ncclDevKernel_AllReduce_PreMulSum_bf16_RING_LL", ("nccl", "all_reduce", "premulsum", "bf16", "ring", "ll")),
    ("ncclDevKernel_AllReduce_SumPostDiv_u32_RING_LL", ("nccl", "all_reduce", "sumpostdiv", "u32", "ring", "ll")),
    # NCCL 2.27+ symmetric-memory kernels: the algorithm as written
    ("ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f32(ncclSymkDevWorkArgs4K)",
     ("nccl", "all_reduce", "sum", "f32", "agxll_r", None)),
    ("ncclSymkDevKernel_ReduceScatter_LD_avg_bf16", ("nccl", "reduce_scatter", "avg", "bf16", "ld", None)),
    ("ncclSymkDevKernel_AllGather_LL_profile", ("nccl", "all_gather", None, None, "ll", None)),
    # NVSHMEM: the collective where the name says one
    ("void alltoall_on_stream_kernel<float>(int, float*, float const*, unsigned long)",
     ("nvshmem", "all_to_all", None, None, None, None)),
    ("barrier_on_stream_kernel_warp(int, int, int, long*, long*)", ("nvshmem", "barrier", None, None, None, None)),
    ("void nvshmemi_barrier_all_on_stream_kernel()", ("nvshmem", "barrier", None, None, None, None)),
    ("void fcollect_on_stream_kernel<int>(int, int*, int const*, unsigned long)",
     ("nvshmem", "all_gather", None, None, None, None)),
    ("void nvshmemi_init_array_kernel<int>(int*, int, int)", ("nvshmem", "unknown", None, None, None, None)),
    # not communication
    (("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
      "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"), None),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     None),
    ("ampere_sgemm_128x64_tn", None),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)",
     None),
    ("Memcpy HtoD (Pinned -> Device)", None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "want"), NAMES, ids=[n[:60] for n, _ in NAMES])
def test_kernel_name_parses_to_its_fields(name: str, want: tuple | None) -> None:
    assert parse_kernel_name(name) == (CommKernel(*want) if want else None)


@pytest.mark.parametrize(
    ("name", "op"),
    [
        # torch record_function names (`nccl:*`, the HTA traces' user annotations)
        ("nccl:all_reduce", "all_reduce"),
        ("nccl:_all_gather_base", "all_gather"),
        ("nccl:reduce_scatter_tensor_coalesced", "reduce_scatter"),
        ("nccl:all_to_all", "all_to_all"),
        ("nccl:broadcast", "broadcast"),
        ("nccl:send 0->1", "send"),
        ("nccl:recv 1<-0", "recv"),
        # Kineto `Collective name` values
        ("allreduce", "all_reduce"),
        ("allreduce_coalesced", "all_reduce"),
        ("allgather", "all_gather"),
        ("_allgather_base", "all_gather"),
        ("allgather_into_tensor_coalesced", "all_gather"),
        ("reduce_scatter", "reduce_scatter"),
        ("_reduce_scatter_base", "reduce_scatter"),
        ("reduce_scatter_tensor_coalesced", "reduce_scatter"),
        ("all_to_all", "all_to_all"),
        ("alltoall", "all_to_all"),
        ("alltoall_base", "all_to_all"),
        ("broadcast", "broadcast"),
        ("_broadcast_oop", "broadcast"),
        ("reduce", "reduce"),
        ("_reduce_oop", "reduce"),
        ("send", "send"),
        ("recv", "recv"),
        ("recvAnysource", "recv"),
        ("barrier", "barrier"),
        ("gather", "gather"),
        ("scatter", "scatter"),
        # not a data movement
        ("wait", None),
        ("init", None),
        ("", None),
    ],
)
def test_torch_collective_names(name: str, op: str | None) -> None:
    assert collective_op(name) == op


@pytest.mark.parametrize(
    ("dtype", "code"),
    [("Float", "f32"), ("BFloat16", "bf16"), ("Half", "f16"), ("Double", "f64"), ("Int", "i32"),
     ("Long", "i64"), ("Byte", "u8"), ("Char", "i8"), ("Float8_e4m3fn", "f8e4m3"), ("Quux", None), (None, None)],
)  # fmt: skip
def test_kineto_dtypes(dtype: str | None, code: str | None) -> None:
    assert kineto_dtype(dtype) == code


# --- (b) Kineto: the HTA traces ------------------------------------------------------------------

HTA = ["hta_a100_rank0of2_nccl.json.gz", "hta_rank0of128_nccl.json.gz", "hta_rank1of128_nccl.json.gz"]
# Written out for the test from the traces' values: ScalarType name -> (dtype code, bytes);
# Collective name -> op; the NCCL 2.17 kernel names -> (op, dtype the name gives).
SIZES = {"Float": ("f32", 4), "Long": ("i64", 8), "BFloat16": ("bf16", 2), "Half": ("f16", 2)}
OPS = {"allreduce": "all_reduce", "broadcast": "broadcast", "allgather": "all_gather", "barrier": "barrier"}
KERNEL_OPS = {
    "ncclKernel_AllReduce_RING_LL_Sum_float": ("all_reduce", "f32"),
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t": ("broadcast", None),
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t": ("send_recv", None),
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL": ("all_reduce", "f32"),
}
ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name")


def load_trace(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def expected_ops(trace: dict[str, Any]) -> dict[int, tuple]:
    """correlation id -> (op, dtype, in, out, message_bytes, group_size, process_group, channel, seq)
    for every NCCL kernel of a trace, by hand: the kernel's args, else those of the
    record_param_comms op with its External id, else the name; channel and seq as the schema says."""
    events = trace["traceEvents"]
    host = {e["args"]["External id"]: e["args"] for e in events if e.get("name") == "record_param_comms"}
    kernels = sorted(
        (e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
        key=lambda e: (e["ts"], e["args"]["correlation"]),
    )
    rows = {}
    for e in kernels:
        a = e["args"]
        own = {k: a[k] for k in ARGS if k in a}
        rec = host.get(a.get("External id"), {}) if "Collective name" not in a else {}
        got = {k: own.get(k, rec.get(k)) for k in ARGS}
        name_op, name_dtype = KERNEL_OPS[e["name"].split("(")[0]]
        op = OPS[got["Collective name"]] if got["Collective name"] else name_op
        dtype, size = SIZES[got["dtype"]] if got["dtype"] else (name_dtype, None)
        n_in, n_out = got["In msg nelems"], got["Out msg nelems"]
        nbytes = max(n_in, n_out) * size if size else None
        rows[a["correlation"]] = [op, dtype, n_in, n_out, nbytes, got["Group size"], got["Process Group Name"],
                                  (a["device"], a["stream"]), e]  # fmt: skip
    # channel: the process group, else the group of the stream's other kernels, else the stream by first use
    stream_groups: dict[tuple, set] = defaultdict(set)
    for r in rows.values():
        if r[6] is not None:
            stream_groups[r[7]].add(r[6])
    first_use: list[tuple] = []
    for r in rows.values():
        if r[7] not in first_use:
            first_use.append(r[7])
    for r in rows.values():
        groups = stream_groups[r[7]]
        group = r[6] if r[6] is not None else (next(iter(groups)) if len(groups) == 1 else None)
        r[7] = f"pg {group}" if group is not None else f"stream {first_use.index(r[7]) + 1}"
    # seq: 0 at the channel's first kernel with recorded arguments, counting back before it
    by_channel: dict[str, list] = defaultdict(list)
    for r in rows.values():
        by_channel[r[7]].append(r)
    for ops in by_channel.values():
        first = next((i for i, r in enumerate(ops) if r[6] is not None), 0)
        for i, r in enumerate(ops):
            r[8] = i - first
    return {c: tuple(r) for c, r in rows.items()}


COMM_SQL = (
    "SELECT correlation_id, op, dtype, in_nelems, out_nelems, message_bytes, group_size, process_group, "
    "channel, seq FROM comm_ops WHERE report_id = ?"
)


def got_ops(con: Any, rid: int) -> dict[int, tuple]:
    return {r[0]: tuple(r[1:]) for r in con.execute(COMM_SQL, [rid]).fetchall()}


@pytest.fixture(scope="module")
def hta_workspace(tmp_path_factory):
    paths = [realdata("kineto", name) for name in HTA]
    con = nsa.connect(tmp_path_factory.mktemp("comm") / "w.duckdb")
    results = {p.name: nsa.ingest(con, p) for p in paths}
    yield con, results
    con.close()


@pytest.mark.parametrize("name", HTA)
def test_kineto_comm_ops_are_the_traces_nccl_kernels(hta_workspace, name: str) -> None:
    con, results = hta_workspace
    trace = load_trace(realdata("kineto", name))
    want = expected_ops(trace)
    result = results[name]
    assert result.rows["comm_ops"] == len(want)
    assert got_ops(con, result.report_id) == want
    kinds = con.execute(
        "SELECT activity_kinds FROM reports WHERE report_id = ?", [result.report_id]
    ).fetchone()[0]
    assert "comm" in kinds
    # the rows are the kernels themselves: same times, streams and names as `kernels`
    same = con.execute(
        "SELECT count(*) FROM comm_ops AS c JOIN kernels AS k USING (report_id, correlation_id, start_ns, "
        "end_ns, stream_id, device_id, pid, name) WHERE c.report_id = ?",
        [result.report_id],
    ).fetchone()[0]
    assert same == len(want)


def test_kineto_a100_trace_numbers(hta_workspace) -> None:
    """The 2-rank A100 trace (torch records the args on the kernels): its 21 NCCL kernels are 15
    all_reduce of Float and 6 broadcast (4 Float, 2 Long), all in process group '0' of 2 ranks."""
    con, results = hta_workspace
    trace = load_trace(realdata("kineto", HTA[0]))
    kernels = [
        e["args"] for e in trace["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")
    ]
    by_op = Counter((OPS[a["Collective name"]], SIZES[a["dtype"]][0]) for a in kernels)
    total = sum(max(a["In msg nelems"], a["Out msg nelems"]) * SIZES[a["dtype"]][1] for a in kernels)
    rid = results[HTA[0]].report_id
    got = con.execute(
        "SELECT op, dtype, count(*) FROM comm_ops WHERE report_id = ? GROUP BY ALL", [rid]
    ).fetchall()
    assert {(op, dt): n for op, dt, n in got} == dict(by_op)
    assert sum(by_op.values()) == 21
    row = con.execute(
        "SELECT sum(message_bytes), min(group_size), max(group_size), count(DISTINCT channel), min(seq), max(seq) "
        "FROM comm_ops WHERE report_id = ?",
        [rid],
    ).fetchone()
    assert row == (total, 2, 2, 1, 0, 20)


def test_kineto_128_rank_traces_have_no_args(hta_workspace) -> None:
    """The 128-rank traces record no collective arguments: the op is the kernel name's (SendRecv),
    sizes are unknown, and the channel is the stream, numbered by first use."""
    con, results = hta_workspace
    for name in HTA[1:]:
        trace = load_trace(realdata("kineto", name))
        kernels = sorted(
            (e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
            key=lambda e: e["ts"],
        )
        streams = list(dict.fromkeys(e["args"]["stream"] for e in kernels))
        want = Counter(f"stream {streams.index(e['args']['stream']) + 1}" for e in kernels)
        got = con.execute(
            "SELECT channel, count(*), count(message_bytes), count(process_group), min(op), max(op) "
            "FROM comm_ops WHERE report_id = ? GROUP BY 1",
            [results[name].report_id],
        ).fetchall()
        assert {c: n for c, n, *_ in got} == dict(want)
        assert {tuple(r[2:]) for r in got} == {(0, 0, "send_recv", "send_recv")}


def _rewrite(src: Path, dst: Path, keep_kernel_args: bool, keep_host_args: bool) -> None:
    trace = load_trace(src)
    for e in trace["traceEvents"]:
        a = e.get("args", {})
        if (e.get("cat") == "kernel" and not keep_kernel_args) or (
            e.get("name") == "record_param_comms" and not keep_host_args
        ):
            for k in ARGS + ("Process Group Description", "Process Group Ranks"):
                a.pop(k, None)
    with gzip.open(dst, "wt", encoding="utf-8") as fh:
        json.dump(trace, fh)


def test_kineto_args_of_record_param_comms_when_the_kernel_has_none(tmp_path) -> None:
    """Older torch releases record the arguments on the host `record_param_comms` op only, joined to the
    kernel by External id: the A100 trace without its kernels' arguments gives the same rows; without
    any arguments, what the kernel names say."""
    src = realdata("kineto", HTA[0])
    con = nsa.connect(tmp_path / "w.duckdb")
    host_only, bare = tmp_path / "host_only.json.gz", tmp_path / "bare.json.gz"
    _rewrite(src, host_only, keep_kernel_args=False, keep_host_args=True)
    _rewrite(src, bare, keep_kernel_args=False, keep_host_args=False)
    full = expected_ops(load_trace(src))
    rid = nsa.ingest(con, host_only).report_id
    assert got_ops(con, rid) == expected_ops(load_trace(host_only)) == full
    rid = nsa.ingest(con, bare).report_id
    got = got_ops(con, rid)
    assert got == expected_ops(load_trace(bare))
    assert {(r[0], r[1], r[4], r[7]) for r in got.values()} == {
        ("all_reduce", "f32", None, "stream 1"),
        ("broadcast", None, None, "stream 1"),
    }
    assert sorted(r[8] for r in got.values()) == list(range(len(full)))
    con.close()


# --- (c) nsys: a fixture export with NCCL kernels of two generations on two streams ---------------

OLD = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
NEW = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)"
GEMM = "void gemm_kernel<float>(float const*, float*, int)"


def _comm_export(path: Path, schema: str) -> list[tuple[int, int, int, str]]:
    """Two ranks' processes in one report (pids 100 and 200, devices 0 and 1). Each launches a
    compute kernel on stream 7 and NCCL kernels on streams 21 (used first: 'stream 1') and 13
    ('stream 2'), interleaved in time. Returns (pid, stream, gpu start, name) of each kernel."""
    b = fx.ExportBuilder(schema)
    laid: list[tuple[int, int, int, str]] = []
    for pid, device in ((100, 0), (200, 1)):
        b.gpu(device)
        gtid = b.process(pid, f"rank{device}")
        t = fx.T0 + 1_000 * pid  # the ranks' clocks differ
        plan = [(7, GEMM), (21, NEW), (13, OLD), (21, NEW), (7, GEMM), (13, OLD), (13, OLD), (21, NEW)]
        for i, (stream, name) in enumerate(plan):
            start = t + i * 50_000
            short = name.split("(")[0] if name.startswith("nccl") else "gemm_kernel"
            b.launch_kernel(
                start - 10_000, start, 20_000, name, gtid=gtid, stream=stream, device=device, short=short
            )
            laid.append((pid, stream, start, name))
    b.write(path)
    return laid


@pytest.mark.parametrize("schema", ["3.20.3", "2.x"])
def test_nsys_comm_ops_of_a_fixture_export(tmp_path, schema: str) -> None:
    path = tmp_path / f"comm_{schema}.sqlite"
    laid = _comm_export(path, schema)
    con = nsa.connect(tmp_path / "w.duckdb")
    result = nsa.ingest(con, path)
    nccl = [k for k in laid if k[3] != GEMM]
    assert result.rows["comm_ops"] == len(nccl) == 12
    # channel: the stream by first use within the process; seq: order within the channel
    want = set()
    for pid in (100, 200):
        mine = sorted(k for k in nccl if k[0] == pid)
        order = list(dict.fromkeys(k[1] for k in sorted(mine, key=lambda k: k[2])))
        seen: Counter[int] = Counter()
        for _, stream, start, name in sorted(mine, key=lambda k: k[2]):
            op, dtype = ("all_reduce", "f32") if name == OLD else ("all_gather", None)
            want.add((pid, stream, start, name, op, dtype, f"stream {order.index(stream) + 1}", seen[stream]))
            seen[stream] += 1
    got = con.execute(
        "SELECT pid, stream_id, start_ns, name, op, dtype, channel, seq FROM comm_ops WHERE report_id = ?",
        [result.report_id],
    ).fetchall()
    assert set(got) == want
    assert {(pid, s, ch) for pid, s, _, _, _, _, ch, _ in want} == {
        (100, 21, "stream 1"), (100, 13, "stream 2"), (200, 21, "stream 1"), (200, 13, "stream 2")
    }  # fmt: skip
    fields = con.execute(
        "SELECT DISTINCT name, library, reduce_op, algorithm, protocol, message_bytes, group_size, process_group "
        "FROM comm_ops ORDER BY name"
    ).fetchall()
    assert fields == [
        (NEW, "nccl", None, "ring", "ll", None, None, None),
        (OLD, "nccl", "sum", "ring", "ll", None, None, None),
    ]
    kinds = con.execute("SELECT activity_kinds FROM reports").fetchone()[0]
    assert "comm" in kinds
    con.close()


def test_nsys_export_without_nccl_has_no_comm_ops(tmp_path) -> None:
    path = tmp_path / "healthy.sqlite"
    fx.healthy(path)
    con = nsa.connect(tmp_path / "w.duckdb")
    result = nsa.ingest(con, path)
    assert result.rows["comm_ops"] == 0
    kinds = con.execute("SELECT activity_kinds FROM reports").fetchone()[0]
    assert "comm" not in kinds and "kernel" in kinds
    con.close()


# --- the DDP captures of tests/data/ddp (H200, NCCL 2.28.9, torch 2.11) -----------------------------

DDP = ROOT / "tests" / "data" / "ddp"
DDP_NSYS = sorted((DDP / "nsys").glob("*.sqlite.gz"))
DDP_KINETO = sorted((DDP / "kineto").glob("*/rank*.json.gz"))
NCCL_KERNELS_SQL = """
    SELECT k.globalPid / 16777216 % 16777216 AS pid, substr(s.value, 1, instr(s.value || '(', '(') - 1), count(*)
    FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
    WHERE s.value LIKE 'nccl%' GROUP BY 1, 2"""
DDP_OPS = {"ncclDevKernel_AllReduce_Sum_f32_RING_LL": "all_reduce", "ncclDevKernel_AllGather_RING_LL": "all_gather",
           "ncclDevKernel_Broadcast_RING_LL": "broadcast"}  # fmt: skip


@pytest.fixture(scope="module")
def ddp_workspace(tmp_path_factory):
    if not DDP_NSYS and not DDP_KINETO:
        pytest.skip(f"no DDP captures in {DDP}")
    con = nsa.connect(tmp_path_factory.mktemp("ddp") / "w.duckdb")
    ids = {str(p.relative_to(DDP)): nsa.ingest(con, p).report_id for p in [*DDP_NSYS, *DDP_KINETO]}
    yield con, ids
    con.close()


@pytest.mark.parametrize("path", DDP_NSYS, ids=lambda p: p.name.split("_nsys2025.3_")[-1])
def test_ddp_nsys_comm_ops_are_the_exports_nccl_kernels(ddp_workspace, tmp_path, path: Path) -> None:
    con, ids = ddp_workspace
    plain = tmp_path / path.name.removesuffix(".gz")
    with gzip.open(path) as src, plain.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    with sqlite3.connect(f"file:{plain}?mode=ro", uri=True) as db:
        want = Counter({(pid, DDP_OPS[name]): n for pid, name, n in db.execute(NCCL_KERNELS_SQL)})
    rid = ids[str(path.relative_to(DDP))]
    got = con.execute(
        "SELECT pid, op, count(*) FROM comm_ops WHERE report_id = ? GROUP BY ALL", [rid]
    ).fetchall()
    assert Counter({(pid, op): n for pid, op, n in got}) == want
    assert (sum(want.values()) > 0) == ("_w1_" not in path.name)  # one GPU: NCCL launches nothing
    # every process numbers its ops 0, 1, ... in each channel
    gaps = con.execute(
        "SELECT pid, channel FROM comm_ops WHERE report_id = ? GROUP BY ALL HAVING min(seq) <> 0 OR "
        "max(seq) <> count(*) - 1",
        [rid],
    ).fetchall()
    assert gaps == []


def test_ddp_nsys_ranks_of_a_run_have_the_same_collectives(ddp_workspace) -> None:
    """One report per rank: every rank of a run sees each (channel, seq) once, with the same op."""
    con, ids = ddp_workspace
    runs: dict[str, list[int]] = defaultdict(list)
    for key, rid in ids.items():
        if key.startswith("nsys/") and "_rank" in key:
            runs[key.split("_nsys2025.3_")[1].rsplit("_rank", 1)[0]].append(rid)
    assert runs, "no per-rank nsys captures"
    for tag, rids in runs.items():
        if len(rids) == 1:
            continue
        rows = con.execute(
            "SELECT channel, seq, count(DISTINCT report_id), count(DISTINCT op) FROM comm_ops "
            f"WHERE report_id IN ({', '.join(map(str, rids))}) GROUP BY ALL"
        ).fetchall()
        assert {(n, ops) for _, _, n, ops in rows} == {(len(rids), 1)}, tag


@pytest.mark.parametrize("path", DDP_KINETO, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_ddp_kineto_comm_ops(ddp_workspace, path: Path) -> None:
    con, ids = ddp_workspace
    trace = load_trace(path)
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    assert {e["name"].split("(")[0] for e in kernels} <= {"ncclDevKernel_AllReduce_Sum_f32_RING_LL"}
    want = expected_ops(trace)
    rid = ids[str(path.relative_to(DDP))]
    assert got_ops(con, rid) == want
    # 48 collectives recorded on every rank (the profiled steps), seq 0..47 in process group '0'
    recorded = sum(1 for e in kernels if "Collective name" in e["args"])
    world = trace["distributedInfo"]["world_size"]
    assert recorded == (48 if world > 1 else 0)
    if world > 1:
        seqs = sorted(r[8] for r in want.values() if r[8] >= 0)
        assert seqs == list(range(48))


@pytest.mark.parametrize("tag", ["ddp_w2", "ddp_w4", "ddp_w4_slow2"])
def test_ddp_kineto_same_seq_is_the_same_collective_on_every_rank(tag: str) -> None:
    """Why seq counts from the first kernel with recorded arguments: the ranks' windows open with
    3, 1, 4 and 4 (ddp_w4) kernels launched before them, yet a collective ends within microseconds
    on every rank. With seq as the schema defines it, the same seq ends within 150 us on all ranks
    (wall clock: baseTimeNanoseconds + ts + dur), under half the time between two collectives."""
    paths = sorted((DDP / "kineto" / tag).glob("rank*.json.gz"))
    if len(paths) < 2:
        pytest.skip(f"no {tag} traces in {DDP}")
    ends: dict[int, list[int]] = defaultdict(list)
    gaps = []
    for path in paths:
        trace = load_trace(path)
        base = int(trace["baseTimeNanoseconds"])
        mine = sorted((r[8], base + round((r[9]["ts"] + r[9]["dur"]) * 1000)) for r in _with_events(trace))
        gaps += [b[1] - a[1] for a, b in itertools.pairwise(mine)]
        for seq, end in mine:
            ends[seq].append(end)
    spread = max(max(e) - min(e) for e in ends.values() if len(e) > 1)
    assert spread < min(150_000, min(gaps) / 2)
    assert sum(1 for e in ends.values() if len(e) == len(paths)) >= 48  # the 48 recorded, at least


def _with_events(trace: dict[str, Any]) -> list[tuple]:
    """expected_ops' rows with the kernel event itself after them."""
    events = {e["args"]["correlation"]: e for e in trace["traceEvents"] if e.get("cat") == "kernel"}
    return [(*row, events[c]) for c, row in expected_ops(trace).items()]
