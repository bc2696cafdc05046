"""PyTorch profiler (Kineto) traces as an input format.

Every expected number is plain arithmetic on the JSON in the test (json.load with Decimal
numbers, so microseconds turn into nanoseconds exactly), never nsa's own output. The ROCm and
torch 1.x variants are built here by code from the format Kineto writes (its ChromeTraceLogger
in libkineto/src/output_json.cpp: `ph`, `cat`, `pid`, `tid`, `ts`, `dur`, `args`; torch 1.8-1.10
spelled the categories `Operator`, `Kernel`, `Runtime`, `Memcpy`, `Memset`, wrote GPU threads
as `"tid": "stream 7"`, integer epoch microseconds and no `baseTimeNanoseconds`; ROCm builds
write the same categories with HIP names).
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from conftest import REALDATA, ROOT, realdata
from nsight_analytics import queries
from nsight_analytics.cli import EXIT_ERROR, main
from nsight_analytics.errors import InputError
from nsight_analytics.ingest.kineto.kineto import short_name
from nsight_analytics.ingest.kineto.kineto_events import to_ns
from rows import required_params

KINETO_DIR = REALDATA / "kineto"
OURS_DIR = ROOT / "tests" / "data" / "kineto"
SHARED = sorted(KINETO_DIR.glob("*.json.gz")) if KINETO_DIR.is_dir() else []
TRACES = SHARED + sorted(OURS_DIR.glob("*.json.gz"))
HOST_CATS = {"cpu_op", "user_annotation", "python_function", "operator"}
STEP = re.compile(r"^ProfilerStep#\d+$")


def load_json(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)


def cat(e: dict[str, Any]) -> str:
    return str(e.get("cat", "")).lower()


def expected_counts(trace: dict[str, Any]) -> dict[str, int]:
    """The rows each table must get, counted on the JSON."""
    ev = [e for e in trace["traceEvents"] if isinstance(e, dict)]
    x = Counter(cat(e) for e in ev if e.get("ph") == "X")
    steps = {
        e["name"]
        for e in ev
        if e.get("ph") == "X"
        and cat(e) in ("user_annotation", "cpu_op", "operator")
        and STEP.match(e["name"])
    }
    return {
        "kernels": x["kernel"],
        "memcpy": x["gpu_memcpy"] + x["memcpy"],
        "memset": x["gpu_memset"] + x["memset"],
        "cuda_api": x["cuda_runtime"] + x["cuda_driver"] + x["runtime"],
        "cpu_ops": sum(x[c] for c in HOST_CATS),
        "nvtx_ranges": x["user_annotation"]
        + sum(
            1 for e in ev if e.get("ph") == "X" and cat(e) in ("cpu_op", "operator") and STEP.match(e["name"])
        ),
        "memory_events": sum(1 for e in ev if e.get("ph") == "i" and e.get("name") == "[memory]"),
        "steps": len(steps),
    }


def table_counts(con: Any, rid: int) -> dict[str, int]:
    tables = ("kernels", "memcpy", "memset", "cuda_api", "cpu_ops", "nvtx_ranges", "memory_events", "steps")
    return {
        t: con.execute(f"SELECT count(*) FROM {t} WHERE report_id = ?", [rid]).fetchone()[0] for t in tables
    }


@pytest.fixture(scope="module")
def kineto_workspace(tmp_path_factory):
    """(connection, {file name: report_id}) with every shared and own Kineto trace: our own, in
    tests/data/kineto, without ../shared/realdata (tests about one shared trace skip then)."""
    if not TRACES:
        pytest.skip(f"no Kineto traces in {KINETO_DIR} nor in {OURS_DIR}")
    con = nsa.connect(tmp_path_factory.mktemp("kineto") / "w.duckdb")
    ids = {p.name: nsa.ingest(con, p).report_id for p in TRACES}
    yield con, ids
    con.close()


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_every_trace_ingests_with_the_counts_of_its_json(kineto_workspace, path: Path) -> None:
    con, ids = kineto_workspace
    rid = ids[path.name]
    trace = load_json(path)
    assert table_counts(con, rid) == expected_counts(trace)
    kind, start, rank, world = con.execute(
        "SELECT format, session_start_utc_ns, rank, world_size FROM reports WHERE report_id = ?", [rid]
    ).fetchone()
    info = trace.get("distributedInfo", {})
    assert (kind, rank, world) == ("kineto", info.get("rank"), info.get("world_size"))
    gpus = con.execute("SELECT count(*) FROM gpus WHERE report_id = ?", [rid]).fetchone()[0]
    assert gpus == len(trace.get("deviceProperties", []))
    flows = Counter(e["cat"] for e in trace["traceEvents"] if e.get("ph") == "s")
    got_flows = con.execute("SELECT category, count(*) FROM flow_links WHERE report_id = ? GROUP BY 1", [rid])
    assert dict(got_flows.fetchall()) == dict(flows)
    # GPU time: the sum of every kernel's `dur`, exactly
    total = sum(to_ns(e["dur"]) for e in trace["traceEvents"] if e.get("ph") == "X" and cat(e) == "kernel")
    got = con.execute("SELECT sum(duration_ns) FROM kernels WHERE report_id = ?", [rid]).fetchone()[0]
    assert got == total
    # every kernel's wall clock: session start + start_ns = baseTimeNanoseconds + ts * 1000, to the ns
    base = int(trace.get("baseTimeNanoseconds", 0))
    want = sorted(
        (int(e["args"]["correlation"]), base + int(Decimal(e["ts"]) * 1000), int(Decimal(e["dur"]) * 1000))
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and cat(e) == "kernel"
    )
    rows = con.execute(
        "SELECT correlation_id, start_ns + ?, duration_ns FROM kernels WHERE report_id = ? ORDER BY ALL",
        [start, rid],
    ).fetchall()
    assert [tuple(r) for r in rows] == want


def test_kernel_columns_of_sample_events(kineto_workspace) -> None:
    path = realdata("kineto", "hta_a100_rank0of2_nccl.json.gz")
    con, ids = kineto_workspace
    trace = load_json(path)
    kernels = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    for e in kernels[:: max(1, len(kernels) // 25)]:
        a = e["args"]
        row = con.execute(
            "SELECT device_id, stream_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, "
            "registers_per_thread, dynamic_smem_bytes, name FROM kernels WHERE report_id = ? AND correlation_id = ?",
            [ids[path.name], a["correlation"]],
        ).fetchall()
        assert row == [(a["device"], a["stream"], *a["grid"], *a["block"], a["registers per thread"],
                        a["shared memory"], e["name"])]  # fmt: skip


def test_copies_memory_and_host_rows_of_the_training_trace(kineto_workspace) -> None:
    path = realdata("kineto", "h100_torch2.11_train_foreach.json.gz")
    con, ids = kineto_workspace
    rid = ids[path.name]
    ev = load_json(path)["traceEvents"]
    # copy kinds and bytes per direction, from the event names
    want: Counter[tuple[str, str, str]] = Counter()
    nbytes: Counter[str] = Counter()
    for e in ev:
        if e.get("cat") == "gpu_memcpy":
            m = re.match(r"Memcpy (\w+) \((\w+) -> (\w+)\)", e["name"])
            assert m
            want[(m[1], m[2].lower(), m[3].lower())] += 1
            nbytes[m[1]] += e["args"]["bytes"]
    got = con.execute(
        "SELECT direction, src_memory, dst_memory, count(*) FROM memcpy WHERE report_id = ? GROUP BY ALL",
        [rid],
    ).fetchall()
    assert {(a, b, c): n for a, b, c, n in got} == dict(want)
    got_bytes = con.execute("SELECT direction, sum(bytes) FROM memcpy WHERE report_id = ? GROUP BY 1", [rid])
    assert dict(got_bytes.fetchall()) == dict(nbytes)
    # [memory] events: the allocator's bytes, the running totals, host vs device
    mem = [e["args"] for e in ev if e.get("name") == "[memory]"]
    dev = [a for a in mem if a["Device Type"] == 1]
    row = con.execute(
        "SELECT sum(delta_bytes) FILTER (WHERE memory = 'device'), count(*) FILTER (WHERE memory = 'device'), "
        "max(allocated_bytes) FILTER (WHERE device_id = 0), count(*) FILTER (WHERE operation = 'free') "
        "FROM memory_events WHERE report_id = ?",
        [rid],
    ).fetchone()
    assert row == (
        sum(a["Bytes"] for a in dev),
        len(dev),
        max(a["Total Allocated"] for a in dev),
        sum(1 for a in mem if a["Bytes"] < 0),
    )
    # cpu ops keep their shapes and ids
    op = next(e for e in ev if e.get("cat") == "cpu_op" and e["args"].get("Input Dims"))
    got_op = con.execute(
        "SELECT input_dims, external_id, sequence_number FROM cpu_ops WHERE report_id = ? AND external_id = ? "
        "AND name = ?",
        [rid, op["args"]["External id"], op["name"]],
    ).fetchone()
    assert json.loads(got_op[0]) == op["args"]["Input Dims"]
    assert got_op[1:] == (op["args"]["External id"], op["args"].get("Sequence number"))
    # steps are the ProfilerStep#N annotations, with their exact host time
    steps = sorted(
        (int(e["name"].split("#")[1]), to_ns(e["dur"]))
        for e in ev
        if e.get("cat") == "user_annotation" and STEP.match(e["name"])
    )
    got_steps = con.execute("SELECT number, duration_ns FROM steps WHERE report_id = ? ORDER BY 1", [rid])
    assert got_steps.fetchall() == steps


def test_short_names_follow_nsys() -> None:
    assert short_name(
        "void at::native::vectorized_elementwise_kernel<4, at::native::Foo<float>>(int, T2, T3)"
    ) == ("vectorized_elementwise_kernel")
    assert short_name("ampere_sgemm_128x64_tn") == "ampere_sgemm_128x64_tn"
    assert short_name(
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_128x1_tn_align8>(T1::Params)"
    ) == ("Kernel2")


# --- variants built by code -------------------------------------------------------------------


def rocm_trace() -> dict[str, Any]:
    """A torch 2.x ROCm trace: Kineto's categories with HIP names, no registers or shared memory,
    GPU 2 as `pid`, relative microseconds from `baseTimeNanoseconds`."""
    base = 1_700_000_000_000_000_000
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 77, "tid": 77, "ts": 10.0, "dur": 500.5},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 77, "tid": 77, "ts": 520.0, "dur": 480.25},
    ]  # fmt: skip
    for i in range(6):
        t = 20.0 + 160 * i
        ev += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 77, "tid": 77, "ts": t, "dur": 30.125,
             "args": {"External id": i + 1, "Input Dims": [[64, 64], [64, 64]]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 77, "tid": 77, "ts": t + 5, "dur": 8.5,
             "args": {"External id": i + 1, "correlation": 100 + i}},
            {"ph": "X", "cat": "kernel", "name": "Cijk_Ailk_Bljk_SB_MT64x64x16_SN_1LDSB0", "pid": 2, "tid": 0,
             "ts": t + 40.001, "dur": 12.333,
             "args": {"External id": i + 1, "device": 2, "stream": 0, "correlation": 100 + i,
                      "grid": [256, 1, 1], "block": [256, 1, 1]}},
        ]  # fmt: skip
    ev += [
        {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyWithStream", "pid": 77, "tid": 77, "ts": 990.0,
         "dur": 3.0, "args": {"correlation": 200}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 2, "tid": 0,
         "ts": 992.5, "dur": 2.5, "args": {"device": 2, "stream": 0, "correlation": 200, "bytes": 4096}},
    ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 2, "name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992}],
        "traceEvents": ev,
        "traceName": "rocm.json",
        "baseTimeNanoseconds": base,
    }


def torch1_trace() -> dict[str, Any]:
    """A torch 1.8-1.10 trace: `Operator` / `Runtime` / `Kernel` / `Memcpy` categories, string
    thread ids, `external id`, integer epoch microseconds and no baseTimeNanoseconds."""
    t0 = 1_635_202_069_792_700
    ev: list[dict[str, Any]] = []
    for step in range(3):
        s = t0 + 1000 * step
        ev.append({"ph": "X", "cat": "Operator", "name": f"ProfilerStep#{step + 5}", "pid": 31383,
                   "tid": "31383", "ts": s, "dur": 900, "args": {"Input dims": [], "External id": 10 * step}})  # fmt: skip
        for k in range(4):
            c = 1000 + 10 * step + k
            ev += [
                {"ph": "X", "cat": "Operator", "name": "aten::relu", "pid": 31383, "tid": "31383", "ts": s + 10 + 50 * k,
                 "dur": 40, "args": {"Input dims": [[32, 128]], "External id": 10 * step + k + 1,
                                     "Call stack": f"model.py({40 + k}): forward;train.py(88): step;train.py(120): <module>"}},
                {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 31383, "tid": "31383",
                 "ts": s + 20 + 50 * k, "dur": 6, "args": {"correlation": c, "external id": 10 * step + k + 1}},
                {"ph": "X", "cat": "Kernel", "name": "void at::native::vectorized_elementwise_kernel<4>(int)",
                 "pid": 0, "tid": "stream 7", "ts": s + 30 + 50 * k, "dur": 3,
                 "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": c,
                          "external id": 10 * step + k + 1, "registers per thread": 16, "shared memory": 0,
                          "grid": [99, 1, 1], "block": [128, 1, 1]}},
            ]  # fmt: skip
        ev.append({"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7",
                   "ts": s + 800, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 5000 + step, "bytes": 64}})  # fmt: skip
    return {"schemaVersion": 1, "traceEvents": ev}


@pytest.mark.parametrize("fast", [True, False], ids=["duckdb", "exact"])
def test_call_stack_of_old_traces_is_kept(tmp_path: Path, monkeypatch, fast: bool) -> None:
    """torch 1.8-1.12 `with_stack=True` wrote each op's Python stack as one `Call stack` string:
    it reaches cpu_ops.call_stack as written, from either event reader."""
    from nsight_analytics.ingest.kineto import kineto_scan

    trace = torch1_trace()
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    if not fast:
        monkeypatch.setattr(kineto_scan, "locate", lambda path: None)
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path).report_id
    want = sorted(
        (e["args"]["External id"], e["args"].get("Call stack"))
        for e in trace["traceEvents"]
        if e["cat"] == "Operator"
    )
    got = con.execute(
        "SELECT external_id, call_stack FROM cpu_ops WHERE report_id = ? ORDER BY ALL", [rid]
    ).fetchall()
    assert got == want
    assert sum(s is not None for _, s in got) == 12  # the relu ops; the steps have none
    con.close()


@pytest.mark.parametrize("build", [rocm_trace, torch1_trace], ids=["rocm", "torch1"])
@pytest.mark.parametrize("packed", [False, True], ids=["json", "gz"])
def test_variants_built_by_code(tmp_path: Path, build, packed: bool) -> None:
    trace = build()
    data = json.dumps(trace).encode()
    path = tmp_path / ("trace.pt.trace.json.gz" if packed else "trace.pt.trace.json")
    path.write_bytes(gzip.compress(data) if packed else data)
    con = nsa.connect(tmp_path / "w.duckdb")
    r = nsa.ingest(con, path)
    assert r.format == "kineto"
    counts = expected_counts(json.loads(data, parse_float=Decimal))
    assert table_counts(con, r.report_id) == counts
    assert counts["kernels"] > 0 and counts["steps"] > 0
    ev = trace["traceEvents"]
    first = min(Decimal(str(e["ts"])) for e in ev)
    base = trace.get("baseTimeNanoseconds", 0)
    k = next(e for e in ev if e["cat"].lower() == "kernel")
    row = con.execute(
        "SELECT k.start_ns, k.duration_ns, k.device_id, k.stream_id, k.pid, r.session_start_utc_ns "
        "FROM kernels AS k JOIN reports AS r USING (report_id) WHERE correlation_id = ?",
        [k["args"]["correlation"]],
    ).fetchone()
    assert row == (
        int((Decimal(str(k["ts"])) - first) * 1000),
        int(Decimal(str(k["dur"])) * 1000),
        k["args"]["device"],
        k["args"]["stream"],
        next(e["pid"] for e in ev if e["cat"].lower() in ("runtime", "cuda_runtime")),
        base + int(first * 1000),
    )
    # every query of the library runs on it
    for name in queries.library():
        nsa.query(con, name, **required_params(name)).fetchall()
    con.close()


# --- bad input --------------------------------------------------------------------------------


def _snapshot(con: Any) -> dict[str, int]:
    from nsight_analytics import schema

    return {t.name: con.execute(f'SELECT count(*) FROM "{t.name}"').fetchone()[0] for t in schema.STORED}


def test_truncated_and_foreign_json_are_refused_and_change_nothing(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(rocm_trace()))
    db = tmp_path / "w.duckdb"
    con = nsa.connect(db)
    nsa.ingest(con, good)
    before = _snapshot(con)
    cut = tmp_path / "cut.json"
    cut.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    with pytest.raises(InputError, match=r"cut.json is not a complete PyTorch profiler trace \(JSON error"):
        nsa.ingest(con, cut)
    cut_gz = tmp_path / "cut.json.gz"
    cut_gz.write_bytes(gzip.compress(cut.read_bytes()))
    with pytest.raises(InputError, match=r"cut.json.gz is not a complete PyTorch profiler trace"):
        nsa.ingest(con, cut_gz)
    chrome = tmp_path / "chrome.json"
    chrome.write_text(
        json.dumps({"traceEvents": [{"ph": "X", "name": "paint", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]})
    )
    with pytest.raises(
        InputError, match=r"chrome.json is a Chrome trace JSON that the PyTorch profiler did not write"
    ):
        nsa.ingest(con, chrome)
    other = tmp_path / "config.json"
    other.write_text(json.dumps({"name": "not a trace", "traceEventsCount": 3}))
    with pytest.raises(InputError, match=r"config.json is JSON, but not a PyTorch profiler trace"):
        nsa.ingest(con, other)
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [], "traceEvents": []}))
    with pytest.raises(InputError, match=r"empty.json is a PyTorch profiler trace with no events"):
        nsa.ingest(con, empty)
    assert _snapshot(con) == before
    con.close()
    # the CLI: one sentence, exit 2, no traceback
    res = CliRunner().invoke(main, ["ingest", "--db", str(db), str(cut)])
    assert res.exit_code == EXIT_ERROR
    assert "Traceback" not in res.output and "is not a complete PyTorch profiler trace" in res.output
    con = nsa.connect(db, load_deferred=False)  # the file as the failed ingest left it
    assert _snapshot(con) == before
    con.close()


def test_other_formats_are_not_claimed() -> None:
    from nsight_analytics.ingest import reader

    kineto = reader.by_name("kineto")
    assert kineto is not None
    assert not kineto.sniff(b"SQLite format 3\x00")
    assert not kineto.sniff(b'"ID","Process ID","Process Name","Host Name","Kernel Name"')
    assert not kineto.sniff(b'{"traceEvents": [{"ph": "X", "name": "paint", "cat": "blink"}]}')
    head = json.dumps(rocm_trace()).encode()
    if TRACES:
        with gzip.open(TRACES[0]) as fh:
            head = fh.read(1 << 20)
    assert [r.name for r in reader.all_readers() if r.sniff(head)] == ["kineto"]


# --- queries and findings ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(queries.library()))
def test_every_library_query_runs_on_kineto_reports(kineto_workspace, name: str) -> None:
    con, _ = kineto_workspace
    nsa.query(con, name, **required_params(name)).fetchall()


def _tiny(path: Path) -> int:
    return sum(
        1 for e in load_json(path)["traceEvents"] if e.get("cat") == "kernel" and to_ns(e["dur"]) < 10_000
    )


def test_findings_on_the_foreach_and_fused_pair(kineto_workspace) -> None:
    """foreach AdamW: the optimizer's hundreds of tiny kernels per step are the top finding;
    fused: gone. In the first foreach run (shared) the host ran ~10x slower between the
    optimizer's tiny kernels (median launch gap 20 us against 1-2 us in the rerun and under
    nsys): the launch gaps inside its storms (up to storm_max_gap_ns, 100 us, the boundary
    gpu-idle calls short gaps) leave the GPU idle about a quarter of the steady state, critical."""
    con, ids = kineto_workspace
    found = {name: nsa.findings(con, ids[name]) for name in ids if "torch2.11_train" in name}
    for name, fs in found.items():
        rules = [f.rule_id for f in fs]
        path = next(p for p in TRACES if p.name == name)
        if "fused" in name:
            assert "small-kernel-storm" not in rules, (name, rules)
            continue
        storm = next(f for f in fs if f.rule_id == "small-kernel-storm")
        assert storm.severity == ("warning" if "rerun" in name else "critical")
        assert f"{_tiny(path):,} tiny kernels" in storm.title
        assert "vectorized_elementwise_kernel" in storm.title
        # its GEMMs are FP32 (fp32-matmul, which may rank first); of the rest, the storm leads
        assert "fp32-matmul" in rules, rules
        assert next(r for r in rules if r != "fp32-matmul") == "small-kernel-storm", rules
