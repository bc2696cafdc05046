"""launch_delay (queries/torch/launch_delay.sql): kernels joined to the CUDA API calls that launched
them. Hand-built rows give hand-computed statistics (a call that launched nothing, a key held by two
calls, a kernel without its call); a real export agrees with sqlite3 + Python on the export."""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path

import pytest

import nsight_analytics as nsa
from rows import insert

NSYS = Path(__file__).resolve().parents[1].parent / "shared" / "realdata" / "nsys"


def _kernel(cid: int, name: str, start: int, end: int, pid: int = 7) -> dict:
    return {"report_id": 1, "device_id": 0, "stream_id": 7, "pid": pid, "correlation_id": cid, "name": name,
            "start_ns": start, "end_ns": end, "duration_ns": end - start}  # fmt: skip


def _call(cid: int | None, name: str, start: int, end: int, pid: int = 7) -> dict:
    return {"report_id": 1, "pid": pid, "tid": 70, "correlation_id": cid, "name": name, "start_ns": start,
            "end_ns": end, "duration_ns": end - start}  # fmt: skip


def test_launch_delay_hand_built(workspace) -> None:
    con = workspace
    insert(con, "kernels", [
        _kernel(1, "gemm", 1_000, 1_500),      # call 100..300: delay 700, cpu 200, gpu 500
        _kernel(2, "gemm", 2_000, 2_050),      # calls 1_900..1_950 and 1_800..1_990 (one key): 1_800..1_990
        _kernel(3, "relu", 3_000, 3_010),      # call 2_990..3_200 ends after the kernel starts: delay 0
        _kernel(4, "relu", 4_000, 4_100),      # no launch call: left out
        _kernel(5, "relu", 5_000, 5_100, pid=8),  # call of another process with the same id: left out
    ])  # fmt: skip
    insert(con, "cuda_api", [
        _call(1, "cudaLaunchKernel", 100, 300),
        _call(2, "cudaLaunchKernel", 1_900, 1_950),
        _call(2, "cudaLaunchKernel", 1_800, 1_990),
        _call(3, "cudaLaunchKernel", 2_990, 3_200),
        _call(5, "cudaLaunchKernel", 4_900, 4_950),  # pid 7: no kernel of its key
        _call(9, "cudaMemcpyAsync", 10, 20),  # launched no kernel
        _call(None, "cudaStreamSynchronize", 30, 40),
    ])  # fmt: skip
    got = nsa.query(con, "launch_delay", delay_cutoff_ns=100).fetchall()
    # gemm: delays 700 and 10 (2_000 - 1_990), cpu 200 and 190, gpu 500 and 50 (shorter than its call)
    # relu: one kernel, delay 0 (3_000 - 3_200 < 0), cpu 210, gpu 10: shorter than its call
    assert got == [
        (1, "gemm", 2, 195.0, 275.0, 355.0, 355.0, 700, 1, 1),
        (1, "relu", 1, 210.0, 10.0, 0.0, 0.0, 0, 1, 0),
    ]


def test_launch_delay_matches_sqlite(workspace) -> None:
    path = NSYS / "h100_nsys2025.3_transformer_train.sqlite"
    if not path.exists():
        pytest.skip(f"real data not available: {path} (tests expect ../shared/realdata beside the repo)")
    rid = nsa.ingest(workspace, path).report_id
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    calls: dict[tuple[int, int], tuple[int, int]] = {}
    for pid, cid, start, end in src.execute(
        'SELECT (globalTid >> 24) & 16777215, correlationId, start, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME '
        "WHERE correlationId IS NOT NULL"
    ):
        lo, hi = calls.get((pid, cid), (start, end))
        calls[(pid, cid)] = (min(lo, start), max(hi, end))
    per_name: dict[str, list[tuple[int, int, int]]] = {}
    for name, pid, cid, start, end in src.execute(
        'SELECT s.value, (k.globalPid >> 24) & 16777215, k.correlationId, k.start, k."end" '
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"
    ):
        if (pid, cid) in calls:
            lo, hi = calls[(pid, cid)]
            per_name.setdefault(name, []).append((hi - lo, end - start, max(start - hi, 0)))
    got = {r[1]: r for r in nsa.query(workspace, "launch_delay", report_id=rid).fetchall()}
    assert set(got) == set(per_name) and len(got) > 10
    for name, rows in per_name.items():
        cpu, gpu, delay = zip(*rows)
        _, _, launches, avg_cpu, avg_gpu, avg_delay, med_delay, max_delay, short, outliers = got[name]
        assert (launches, max_delay) == (len(rows), max(delay))
        assert (avg_cpu, avg_gpu, avg_delay) == pytest.approx((statistics.mean(cpu), statistics.mean(gpu),
                                                              statistics.mean(delay)))  # fmt: skip
        assert med_delay == pytest.approx(statistics.median(delay))
        assert short == sum(g < c for c, g, _ in rows)
        assert outliers == sum(d > 100_000 for d in delay)
