"""The two Kineto event readers: DuckDB's JSON reader (ingest/kineto_scan.py) and the exact
Python one (ingest/kineto_events.Stager) must give the same rows in every table.

The exact reader is the reference here (tests/test_kineto.py checks its numbers against the
JSON); the traces are built by code with the odd values real traces carry (string thread ids,
present-but-null keys, commas and non-ASCII in argument strings, members after the events)."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
from test_kineto import rocm_trace, torch1_trace

import nsight_analytics as nsa
from nsight_analytics.ingest.kineto import kineto_scan


def odd_trace() -> dict[str, Any]:
    """Values each reader must turn into the same rows, and members after the events (one with
    a `]` in it, baseTimeNanoseconds last as HTA's traces have it)."""
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": "Spans", "tid": "", "ts": 5.5, "dur": 900},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 9, "tid": 9, "ts": 10.0, "dur": 800.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 9, "tid": 9, "ts": "20.5", "dur": 1.0005,
         "args": {"External id": None, "external id": 3, "Input Dims": [[1, 2], [], [[3]]],
                  "Input type": ["c10::optional<int, int>", "é \"q\"", ""], "Sequence Number": 7, "Flops": 2.0}},
        {"ph": "X", "cat": "CPU_OP", "name": "ncclKernel ëh", "pid": 9, "tid": 10, "ts": 30, "dur": 2.0015,
         "args": {"External id": 4, "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024.0,
                  "Group size": "8", "dtype": "Float", "Process Group Name": 0, "Input dims": [[1.5, 2]]}},
        {"ph": "X", "cat": "python_function", "name": "f", "pid": 9, "tid": True, "ts": 35, "dur": True},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 40.25, "dur": 3,
         "args": {"correlation": 77, "External id": 4}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce(x)", "pid": 0, "tid": "stream 7", "ts": 50.125,
         "dur": 100.001, "args": {"device": 0, "stream": "stream 7", "correlation": 77.0, "External id": 4,
                                  "grid": [1, 2, 3], "block": [4, 5], "registers per thread": True,
                                  "shared memory": "1024", "Collective name": None}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": 200,
         "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 78, "bytes": 4096}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 9, "tid": 9, "ts": 300.0004, "s": "t",
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 1234, "Bytes": -512, "Total Allocated": 0,
                  "Total Reserved": 2048}},
        {"ph": "s", "id": 77, "pid": 9, "tid": 9, "ts": 40.25, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 77, "pid": 0, "tid": 7, "ts": 50.125, "bp": "e"},
        {"ph": "M", "name": "process_labels", "pid": 9, "tid": 0, "args": {"labels": "rank 0"}},
        {"ph": "M", "name": "thread_name", "pid": 9, "tid": 10, "args": {"name": None, "labels": "x"}},
        {"ph": "M", "name": "process_sort_index", "pid": 0, "tid": 0, "args": {"sort_index": 5}},
    ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "computeMajor": 9, "computeMinor": 0}],
        "traceEvents": ev,
        "traceLog": ["start]", ["]"], {"a": "]"}],
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


def _ingest(
    tmp_path: Path, trace_file: Path, name: str, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, bool]:
    used: list[bool] = []
    stage = kineto_scan.stage
    locate = kineto_scan.locate

    def spy(*args: Any) -> Any:
        got = stage(*args)
        used.append(got is not None)
        return got

    with monkeypatch.context() as m:
        m.setattr(kineto_scan, "stage", spy)
        if not fast:
            m.setattr(kineto_scan, "locate", lambda path: None)
        db = tmp_path / f"{name}.duckdb"
        con = nsa.connect(db)
        nsa.ingest(con, trace_file)
        con.close()
    assert locate is kineto_scan.locate
    return db, bool(used and used[0])


def _differences(old: Path, new: Path) -> dict[str, tuple[int, int]]:
    """Rows of each table in one workspace and not the other (EXCEPT ALL both ways)."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{old}' AS o (READ_ONLY)")
    con.execute(f"ATTACH '{new}' AS n (READ_ONLY)")
    tables = [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'o' AND schema_name = 'main'"
        ).fetchall()
    ]
    out = {}
    for t in tables:
        cols = "* EXCLUDE (ingested_at)" if t == "reports" else "*"  # the time of the ingest
        a = con.execute(
            f'SELECT count(*) FROM (SELECT {cols} FROM o."{t}" EXCEPT ALL SELECT {cols} FROM n."{t}")'
        ).fetchone()
        b = con.execute(
            f'SELECT count(*) FROM (SELECT {cols} FROM n."{t}" EXCEPT ALL SELECT {cols} FROM o."{t}")'
        ).fetchone()
        if a and b and (a[0] or b[0]):
            out[t] = (a[0], b[0])
    con.close()
    assert len(tables) > 20
    return out


@pytest.mark.parametrize("build", [odd_trace, rocm_trace, torch1_trace], ids=["odd", "rocm", "torch1"])
def test_duckdb_and_python_readers_give_the_same_rows(tmp_path: Path, monkeypatch, build) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(build(), indent=1))
    old, used_old = _ingest(tmp_path, path, "old", False, monkeypatch)
    new, used_new = _ingest(tmp_path, path, "new", True, monkeypatch)
    assert (used_old, used_new) == (False, True)
    assert _differences(old, new) == {}


def _ns(us: str) -> int:
    return int((Decimal(us) * 1000).to_integral_value(ROUND_HALF_EVEN))


def test_odd_values_as_the_json_has_them(tmp_path: Path) -> None:
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(odd_trace()))
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path).report_id
    # origin: the `Trace` span at 5.5 us; times in ns, half to even past the third decimal
    op = con.execute(
        "SELECT start_ns, duration_ns, external_id, sequence_number, input_dims, input_types, flops FROM cpu_ops "
        "WHERE report_id = ? AND name = 'aten::cat'",
        [rid],
    ).fetchone()
    assert op == (
        _ns("20.5") - _ns("5.5"),
        _ns("1.0005"),
        None,  # "External id" is there (null): "external id" is not read
        7,
        json.dumps([[1, 2], [], [[3]]]),
        json.dumps(["c10::optional<int, int>", 'é "q"', ""]),
        2,
    )
    k = con.execute(
        "SELECT stream_id, grid_x, grid_z, block_x, registers_per_thread, dynamic_smem_bytes, correlation_id "
        "FROM kernel_rows WHERE report_id = ?",
        [rid],
    ).fetchone()
    assert k == (7, 1, 3, None, None, 1024, 77)
    mem = con.execute("SELECT ts_ns, bytes FROM memory_events WHERE report_id = ?", [rid]).fetchone()
    assert mem == (_ns("300.0004") - _ns("5.5"), 512)
    con.close()


def test_times_past_double_precision_are_read_exactly(tmp_path: Path, monkeypatch) -> None:
    """2^43 us and more with decimals: a double cannot tell 9000000000000.123 from .124 apart
    to the nanosecond, so the exact reader reads the trace."""
    trace = rocm_trace()
    for e in trace["traceEvents"]:
        e["ts"] = Decimal(9000000000000) + Decimal(str(e["ts"]))
    path = tmp_path / "late.json"
    text = json.dumps(trace, default=str)
    for e in trace["traceEvents"]:  # numbers, not strings, as Kineto writes them
        text = text.replace(f'"ts": "{e["ts"]}"', f'"ts": {e["ts"]}')
    path.write_text(text)
    db, used = _ingest(tmp_path, path, "late", True, monkeypatch)
    assert not used
    con = nsa.connect(db)
    k = next(e for e in trace["traceEvents"] if e["cat"] == "kernel")
    first = min(e["ts"] for e in trace["traceEvents"])
    got = con.execute(
        "SELECT start_ns FROM kernel_rows WHERE correlation_id = ?", [k["args"]["correlation"]]
    ).fetchone()
    assert got == (_ns(str(k["ts"])) - _ns(str(first)),)
    con.close()


def test_locate_reads_the_members_around_the_events(tmp_path: Path) -> None:
    trace = odd_trace()
    path = tmp_path / "t.json"
    path.write_text("\ufeff " + json.dumps(trace, indent=2) + "\n")
    where = kineto_scan.locate(path)
    assert where is not None
    data = path.read_bytes()
    assert json.loads(data[where.start : where.end]) == trace["traceEvents"]
    assert where.head == {"schemaVersion": 1, "deviceProperties": trace["deviceProperties"]}
    assert where.tail == {"traceLog": trace["traceLog"], "baseTimeNanoseconds": trace["baseTimeNanoseconds"]}
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": {"a": 1}}))
    assert kineto_scan.locate(path) is None
    path.write_bytes(data[: len(data) // 2])
    assert kineto_scan.locate(path) is None


def test_rows_go_to_duckdb_as_literals() -> None:
    """params.insert_rows: what the readers hand DuckDB without its client binding Python values
    (which imports pandas); more rows than one statement takes, quotes, NULLs, non-ASCII."""
    from nsight_analytics import params

    con = duckdb.connect()
    con.execute("CREATE TABLE t (i BIGINT, s VARCHAR, f DOUBLE)")
    rows = [(i, None if i % 7 == 0 else f"it's {i} ë\n", i / 4) for i in range(2_503)]
    params.insert_rows(con, "t", rows, chunk=1_000)
    params.insert_rows(con, "t", [])
    assert con.execute("SELECT * FROM t ORDER BY i").fetchall() == rows


@pytest.mark.parametrize(
    ("threads", "size_mb", "cap"),
    [(2, 100, "128.0 MiB"), (2, 1_000, "250.0 MiB"), (4, 100, "256.0 MiB"), (2, 8_000, "1.0 GiB")],
)
def test_staging_memory_cap(threads: int, size_mb: int, cap: str) -> None:
    """A quarter of the trace's size, at least 64 MiB a DuckDB thread (and 128 MiB), at most 1 GiB;
    a lower limit already set stays."""
    from nsight_analytics.ingest.kineto import reader

    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    previous = reader._limit_memory(con, (size_mb << 20) // 4)
    assert con.execute("SELECT current_setting('memory_limit')").fetchone() == (cap,)
    con.execute("SET memory_limit = '100MiB'")
    assert reader._limit_memory(con, 1 << 30) == "100.0 MiB"
    assert con.execute("SELECT current_setting('memory_limit')").fetchone() == ("100.0 MiB",)
    assert previous != cap
