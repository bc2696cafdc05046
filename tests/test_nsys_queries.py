"""nsys query library: tiny hand-built inputs give hand-computed rows; real exports agree with
independent computations (sqlite3 + Python) and, when installed, with `nsys stats`."""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import random
import shutil
import sqlite3
import statistics
import subprocess
from pathlib import Path

import pytest

import nsight_analytics as nsa
from conftest import NVTX_KERNEL_NS_SQL
from nsight_analytics.ingest.nsys import fill_nvtx_kernels
from rows import insert, union_within

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
NSYS = REALDATA / "nsys"
IDLE_GAPS = Path(__file__).resolve().parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite"
M = 1_000_000


def _real(name: str) -> Path:
    path = NSYS / name
    if not path.exists():
        pytest.skip(f"real data not available: {path} (tests expect ../shared/realdata beside the repo)")
    return path


def _insert(con, table: str, rows: list[dict]) -> None:
    insert(con, table, rows)


def _rows(con, name: str, **params) -> list[tuple]:
    return nsa.query(con, name, **params).fetchall()


def _k(rid, start, end, name, corr=None, dev=0, stream=7, pid=10):
    return dict(report_id=rid, device_id=dev, stream_id=stream, pid=pid, start_ns=start, end_ns=end,
                duration_ns=end - start, name=name, correlation_id=corr)  # fmt: skip


def _api(rid, start, end, name, corr=None, pid=10, tid=11):
    return dict(report_id=rid, pid=pid, tid=tid, global_tid=pid << 24 | tid, start_ns=start, end_ns=end,
                duration_ns=end - start, name=name, correlation_id=corr)  # fmt: skip


def _cp(rid, start, end, kind="HtoD", src="pinned", dst="device", nbytes=0, corr=None, dev=0, pid=10):
    return dict(report_id=rid, device_id=dev, stream_id=7, pid=pid, start_ns=start, end_ns=end,
                duration_ns=end - start, bytes=nbytes, copy_kind=kind, src_kind=src, dst_kind=dst,
                correlation_id=corr)  # fmt: skip


def _ms(rid, start, end, corr=None, dev=0, pid=10):
    return dict(report_id=rid, device_id=dev, stream_id=7, pid=pid, start_ns=start, end_ns=end,
                duration_ns=end - start, bytes=0, correlation_id=corr)  # fmt: skip


# --- golden tests on hand-built inputs ----------------------------------------------------------


def test_kernel_summary_golden(workspace) -> None:
    _insert(workspace, "kernels", [
        *(_k(1, 1000 * i, 1000 * i + d, "A") for i, d in enumerate([10, 40, 20, 30])),
        _k(1, 9000, 9100, "B"),
        _k(2, 0, 7, "A"),
    ])  # fmt: skip
    sd = statistics.stdev([10, 20, 30, 40])
    assert _rows(workspace, "kernel_summary") == [
        (1, "B", 1, 100, 100.0, 100.0, 100, 100, 0.0, 50.0),  # tie on total: fewer instances first
        (1, "A", 4, 100, 25.0, 25.0, 10, 40, pytest.approx(sd), 50.0),
        (2, "A", 1, 7, 7.0, 7.0, 7, 7, 0.0, 100.0),
    ]
    assert [r[1] for r in _rows(workspace, "kernel_summary", report_id=2)] == ["A"]


def test_utilization_golden(workspace) -> None:
    _insert(
        workspace, "kernels", [_k(1, 0, 100, "k1"), _k(1, 50, 150, "k2", stream=8), _k(1, 500, 600, "k3")]
    )
    _insert(workspace, "memcpy", [_cp(1, 140, 200), _cp(1, 300, 400)])
    _insert(workspace, "memset", [_ms(1, 400, 450), _ms(1, 10, 20, dev=1)])
    # kernels [0,150] u [500,600] = 250; copies 60 + 100 = 160; all [0,200] u [300,450] u [500,600] = 450;
    # kernels u copies = 400, so copies outside kernels = 150.
    assert _rows(workspace, "utilization") == [
        (1, 0, "run", 600, 250, 160, 450, 150, 150, 0),
        (1, 1, "run", 10, 0, 0, 10, 0, 0, 0),
    ]


@pytest.mark.parametrize("seed", range(20))
def test_utilization_matches_interval_arithmetic(workspace, seed: int) -> None:
    # many rows starting together across kernels, copies and memsets (even starts, zero lengths),
    # overlapping streams, two devices: the unions do not depend on the order of tied rows
    rnd = random.Random(seed)
    acts: list[tuple[str, int, int, int]] = []
    for table, make in (("kernels", _k), ("memcpy", _cp), ("memset", _ms), ("graph_executions", _ms)):
        rows = []
        for _ in range(rnd.randint(0, 40)):
            dev, start = rnd.randint(0, 1), rnd.randint(0, 60) * 2
            end = start + rnd.choice([0, 2, rnd.randint(0, 30)])
            row = make(1, start, end, dev=dev) if table != "kernels" else make(1, start, end, "k", dev=dev)
            if table == "graph_executions":  # a CUDA graph replay: kernel time
                row = {k: v for k, v in row.items() if k != "bytes"} | {"graph_id": 1}
            rows.append(row)
            acts.append((table, dev, start, end))
        _insert(workspace, table, rows)
    expected = []
    for dev in sorted({a[1] for a in acts}):
        mine = [a for a in acts if a[1] == dev]

        def union(*tables: str, mine=mine) -> int:
            return union_within([(s, e) for t, _, s, e in mine if t in tables])

        kernel, copy = union("kernels", "graph_executions"), union("memcpy")
        kc = union("kernels", "graph_executions", "memcpy")
        busy = union("kernels", "memcpy", "memset", "graph_executions")
        span = max(e for *_, e in mine) - min(s for _, _, s, _ in mine)
        expected.append(
            (1, dev, "run", span, kernel, copy, busy, span - busy, kc - kernel, union("graph_executions"))
        )
    assert _rows(workspace, "utilization") == expected


def _gap_fixture(con) -> None:
    _insert(con, "kernels", [
        _k(1, 10 * M, 11 * M, "K1", corr=1),
        _k(1, 15 * M, 16 * M, "K2", corr=2),
        _k(1, 20 * M, 21 * M, "K4", corr=4),
        _k(1, 30 * M, 40 * M, "K6", corr=6),
        _k(1, 31 * M, 32 * M, "K7", corr=7, stream=8),
        _k(1, 42 * M, 43 * M, "K8", corr=8),  # no launch call recorded
        _k(1, 10 * M, 11 * M, "X", corr=1, dev=1, pid=20),
        _k(1, 13 * M, 14 * M, "Y", corr=2, dev=1, pid=20),
    ])  # fmt: skip
    _insert(con, "memcpy", [_cp(1, 16_500_000, 17 * M, corr=3)])
    _insert(con, "memset", [_ms(1, 25 * M, 26 * M, corr=5)])
    _insert(con, "cuda_api", [
        _api(1, 9 * M, 9_100_000, "cudaLaunchKernel", 1),
        _api(1, 14 * M, 14_100_000, "cudaLaunchKernel", 2),
        _api(1, 16_400_000, 17_100_000, "cudaMemcpy", 3),
        _api(1, 12 * M, 12_100_000, "cudaLaunchKernel", 4),
        _api(1, 17_200_000, 19_900_000, "cudaStreamSynchronize", tid=12),  # covers 2.7 of 3 ms
        _api(1, 18 * M, 18_100_000, "cudaMemsetAsync", 5),
        _api(1, 21 * M, 22 * M, "cudaDeviceSynchronize"),  # covers only 1 of 4 ms
        _api(1, 29 * M, 29_100_000, "cudaLaunchKernel", 6),
        _api(1, 29_200_000, 29_300_000, "cudaLaunchKernel", 7),
        _api(1, 9 * M, 9_100_000, "cudaLaunchKernel", 1, pid=20),
        _api(1, 12_500_000, 12_600_000, "cudaLaunchKernel", 2, pid=20),
    ])  # fmt: skip


def test_gaps_golden(workspace) -> None:
    _gap_fixture(workspace)
    T = 10 << 24 | 11  # the launching thread's global_tid
    expected = [
        (1, 0, 11 * M, 15 * M, 4 * M, "K1", "K2", "late_launch", "cudaLaunchKernel", 10, "cudaLaunchKernel", 3 * M, None, T, "run"),
        (1, 0, 17 * M, 20 * M, 3 * M, "memcpy HtoD", "K4", "sync", "cudaStreamSynchronize", 10, "cudaLaunchKernel",
         -5 * M, 2_700_000, T, "run"),
        (1, 0, 21 * M, 25 * M, 4 * M, "K4", "memset", "unknown", None, 10, "cudaMemsetAsync", -3 * M, None, T, "run"),
        (1, 0, 26 * M, 30 * M, 4 * M, "memset", "K6", "late_launch", "cudaLaunchKernel", 10, "cudaLaunchKernel", 3 * M, None, T, "run"),
        (1, 0, 40 * M, 42 * M, 2 * M, "K6", "K8", "unknown", None, 10, None, None, None, None, "run"),  # K6 ends last, not K7
        (1, 1, 11 * M, 13 * M, 2 * M, "X", "Y", "late_launch", "cudaLaunchKernel", 20, "cudaLaunchKernel", 1_500_000, None,
         20 << 24 | 11, "run"),
    ]  # fmt: skip
    assert _rows(workspace, "gaps") == expected
    assert _rows(workspace, "gaps", min_gap_ns=3_500_000) == [expected[0], expected[2], expected[3]]
    assert _rows(workspace, "gaps", report_id=2) == []


def test_stream_gaps_golden(workspace) -> None:
    _insert(workspace, "kernels", [
        _k(1, 0, 10, "a", corr=1), _k(1, 20, 30, "b", corr=2), _k(1, 35, 40, "c", corr=3),
        _k(1, 100_040, 100_050, "d", corr=4), _k(1, 5, 50, "e", corr=5, stream=8), _k(1, 60, 70, "f", corr=6, stream=8),
    ])  # fmt: skip
    _insert(workspace, "cuda_api", [
        _api(1, -5, 0, "cudaLaunchKernel", 1), _api(1, 15, 16, "cudaLaunchKernel", 2),
        _api(1, 12, 13, "cudaLaunchKernel", 3), _api(1, 13, 14, "cudaLaunchKernel", 4),
    ])  # fmt: skip
    assert _rows(workspace, "stream_gaps") == [
        (1, 0, 7, 10, 20, 10, "a", "b", "cudaLaunchKernel", 5, "host_wait"),
        (1, 0, 7, 30, 35, 5, "b", "c", "cudaLaunchKernel", -18, "kernel_wait"),
        (1, 0, 7, 40, 100_040, 100_000, "c", "d", "cudaLaunchKernel", -27, "other"),
        (1, 0, 8, 50, 60, 10, "e", "f", None, None, "other"),
    ]
    assert len(_rows(workspace, "stream_gaps", min_gap_ns=11)) == 1
    assert [r[-1] for r in _rows(workspace, "stream_gaps", kernel_wait_ns=5)][1] == "other"


def test_memcpy_summary_golden(workspace) -> None:
    _insert(workspace, "memcpy", [
        _cp(1, 0, 100, src="pageable", nbytes=1000, corr=1),
        _cp(1, 50, 150, src="pageable", nbytes=1000, corr=2),
        _cp(1, 200, 250, kind="DtoH", src="device", dst="pinned", nbytes=500, corr=3),
    ])  # fmt: skip
    _insert(workspace, "kernels", [_k(1, 300, 400, "k")])
    _insert(workspace, "cuda_api", [
        _api(1, 0, 100, "cudaMemcpy", 1), _api(1, 40, 41, "cudaMemcpyAsync", 2), _api(1, 190, 191, "cudaMemcpyAsync", 3),
    ])  # fmt: skip
    assert _rows(workspace, "memcpy_summary") == [
        (
            1,
            0,
            "HtoD",
            "pageable",
            "device",
            2,
            2000,
            200,
            150,
            37.5,
            10.0,
            True,
            1,
            "cudaMemcpy,cudaMemcpyAsync",
        ),
        (1, 0, "DtoH", "device", "pinned", 1, 500, 50, 50, 12.5, 10.0, False, 0, "cudaMemcpyAsync"),
    ]


def test_small_kernels_golden(workspace) -> None:
    _insert(workspace, "kernels", [
        _k(1, 0, 2000, "a", 1), _k(1, 10_000, 12_000, "a", 2), _k(1, 20_000, 22_000, "a", 3),
        _k(1, 30_000, 35_000, "b", 4), _k(1, 100_000, 150_000, "c", 5),
    ])  # fmt: skip
    _insert(workspace, "cuda_api", [_api(1, 0, 3000, "cudaLaunchKernel", c) for c in range(1, 6)])
    row = _rows(workspace, "small_kernels")
    assert row == [
        (
            1,
            5,
            4,
            80.0,
            11000,
            pytest.approx(100 * 11 / 61),
            12000,
            4,
            0,
            pytest.approx(4 / 150e-6),
            "a (3); b (1)",
        )
    ]
    assert _rows(workspace, "small_kernels", top_n=1)[0][-1] == "a (3)"
    assert _rows(workspace, "small_kernels", max_kernel_ns=1000)[0][1:3] == (5, 0)


def test_small_kernel_storms_golden(workspace) -> None:
    _insert(workspace, "kernels", [
        *(_k(1, 5000 * i, 5000 * i + 1000, "t") for i in range(5)),  # a storm: 5 x 1 us, 4 us apart
        _k(1, 30_000, 80_000, "big"),
        _k(1, 90_000, 91_000, "t"), _k(1, 91_500, 92_500, "t"),  # only 2 before a long pause
        _k(1, 200_000, 201_000, "t"),
    ])  # fmt: skip
    # idle: the four 4 us pauses between the five storm kernels
    assert _rows(workspace, "small_kernel_storms", min_kernels=3) == [
        (
            1,
            0,
            0,
            21_000,
            21_000,
            5,
            5000,
            pytest.approx(100 * 5 / 21),
            1000.0,
            pytest.approx(5 / 21e-6),
            "t",
            16_000,
        ),
    ]
    assert _rows(workspace, "small_kernel_storms", min_kernels=3, max_busy_pct=20.0) == []
    assert _rows(workspace, "small_kernel_storms") == []  # default min_kernels 100
    # a copy inside a pause is GPU activity: 1 us less idle
    _insert(workspace, "memcpy", [_cp(1, 2000, 3000)])
    assert _rows(workspace, "small_kernel_storms", min_kernels=3)[0][-1] == 15_000


def test_nvtx_summary_golden(workspace) -> None:
    def r(start, end, name, domain=None, tid=11):
        return dict(report_id=1, pid=10, tid=tid, global_tid=10 << 24 | tid, start_ns=start, end_ns=end,
                    duration_ns=None if end is None else end - start, name=name, domain=domain)  # fmt: skip

    _insert(workspace, "nvtx_ranges", [
        r(0, 1000, "outer"), r(100, 500, "inner"), r(600, 700, "inner"), r(0, 50, "inner", "d1"), r(800, None, "open"),
    ])  # fmt: skip
    _insert(workspace, "kernels", [_k(1, 5000, 5000 + d, "k", corr=c) for c, d in
                                   [(1, 10), (2, 20), (3, 40), (4, 80), (5, 160), (6, 320)]])  # fmt: skip
    _insert(workspace, "cuda_api", [
        _api(1, 100, 101, "cudaLaunchKernel", 1),  # at inner's start: inside
        _api(1, 550, 551, "cudaLaunchKernel", 2),
        _api(1, 700, 701, "cudaLaunchKernel", 3),  # at inner's end: inside
        _api(1, 200, 201, "cudaLaunchKernel", 4, tid=12),  # another thread
        _api(1, 1000, 1001, "cudaLaunchKernel", 5), _api(1, 1000, 1002, "cudaLaunchKernel", 6),  # same start
    ])  # fmt: skip
    fill_nvtx_kernels(workspace, 1)  # what copying the ranges computes
    # names (1 each), then ..., kernels, kernel_ns (same thread), process_kernels, process_kernel_ns
    # (any thread of pid 10: the tid 12 launch at 200 falls in outer and in inner [100, 500])
    assert _rows(workspace, "nvtx_summary") == [
        (1, None, "outer", 1, 1, 0, 1000, 1000.0, 1000.0, 1000, 1000, 5, 550, 6, 630),
        (1, None, "inner", 1, 2, 0, 500, 250.0, 250.0, 100, 400, 2, 50, 3, 130),
        (1, "d1", "inner", 1, 1, 0, 50, 50.0, 50.0, 50, 50, 0, 0, 0, 0),
        (1, None, "open", 1, 0, 1, None, None, None, None, None, 0, 0, 0, 0),
    ]


def test_sync_calls_golden(workspace) -> None:
    _insert(workspace, "cuda_api", [
        _api(1, 0, 10, "cudaLaunchKernel", 1),
        _api(1, 100, 200, "cudaStreamSynchronize"), _api(1, 300, 600, "cudaStreamSynchronize", tid=12),
        _api(1, 700, 750, "cudaMemcpy"), _api(1, 800, 1800, "cudaMemcpyAsync"), _api(1, 1900, 1920, "cudaMemset"),
        _api(1, 1950, 2000, "cudaStreamWaitEvent"), _api(1, 10, 20, "cuCtxSynchronize", pid=20),
        _api(1, 1200, 1300, "cudaStreamSynchronize_ptsz"), _api(1, 1300, 1400, "cudaStreamSynchronizeX"),
    ])  # fmt: skip
    assert _rows(workspace, "sync_calls") == [
        (1, 10, "cudaStreamSynchronize", "synchronize", 2, 400, 200.0, 300, 2, 20.0),
        (1, 10, "cudaStreamSynchronize_ptsz", "synchronize", 1, 100, 100.0, 100, 1, 5.0),
        (1, 10, "cudaMemcpy", "memcpy", 1, 50, 50.0, 50, 1, 2.5),
        (1, 10, "cudaMemset", "memset", 1, 20, 20.0, 20, 1, 1.0),
        (1, 20, "cuCtxSynchronize", "synchronize", 1, 10, 10.0, 10, 1, 0.5),
    ]


# --- real exports vs independent computations ---------------------------------------------------


def _sqlite(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _merge(intervals) -> list[tuple[int, int]]:
    """Sort-and-merge: the union of [start, end] intervals as disjoint islands."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _length(islands) -> int:
    return sum(e - s for s, e in islands)


KERNEL_FILES = [
    "h100_nsys2025.3_pageable_h2d.sqlite", "h100_nsys2025.3_transformer_train.sqlite",
    "h100x2_nsys2026.2_h2d_heavy.sqlite", "h100x2_nsys2026.2_train_before.sqlite", "h200_nsys2024.6_nvfuser.sqlite",
    "minimal_columns_nsys2026.1.sqlite", "tiny_nsys2026.1.sqlite",
]  # fmt: skip


@pytest.mark.parametrize("name", KERNEL_FILES)
def test_kernel_summary_matches_sqlite(nsys_real_workspace, name: str) -> None:
    con, ids = nsys_real_workspace
    path = _real(name)
    src = _sqlite(path)
    durations: dict[str, list[int]] = {}
    for n, d in src.execute(
        'SELECT s.value, k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName'
    ):
        durations.setdefault(n, []).append(d)
    grand = sum(sum(v) for v in durations.values())
    got = {r[1]: r for r in _rows(con, "kernel_summary", report_id=ids[name])}
    assert set(got) == set(durations)
    for n, ds in durations.items():
        _, _, inst, total, avg, med, mn, mx, sd, pct = got[n]
        assert (inst, total, mn, mx) == (len(ds), sum(ds), min(ds), max(ds))
        assert avg == pytest.approx(statistics.mean(ds))
        assert med == pytest.approx(statistics.median(ds))
        assert sd == pytest.approx(statistics.stdev(ds) if len(ds) > 1 else 0.0)
        assert pct == pytest.approx(100 * sum(ds) / grand)


def test_utilization_h2d_heavy(nsys_real_workspace) -> None:
    con, ids = nsys_real_workspace
    name = "h100x2_nsys2026.2_h2d_heavy.sqlite"
    src = _sqlite(_real(name))
    rows = {r[1]: r for r in _rows(con, "utilization", report_id=ids[name])}
    copies = {
        r[1]: r
        for r in _rows(con, "memcpy_summary", report_id=ids[name])
        if r[2:5] == ("HtoD", "pinned", "device")
    }
    assert sorted(rows) == [0, 1]
    for dev in (0, 1):

        def q(table, where="", dev=dev):
            return [tuple(r) for r in src.execute(
                f'SELECT start, "end" FROM {table} WHERE deviceId = ? {where}', [dev])]  # fmt: skip

        kern, cp, ms = (
            q("CUPTI_ACTIVITY_KIND_KERNEL"),
            q("CUPTI_ACTIVITY_KIND_MEMCPY"),
            q("CUPTI_ACTIVITY_KIND_MEMSET"),
        )
        pinned_h2d = q("CUPTI_ACTIVITY_KIND_MEMCPY", "AND copyKind = 1 AND srcKind = 1")
        everything = kern + cp + ms
        span = max(e for _, e in everything) - min(s for s, _ in everything)
        k_busy, c_busy, any_busy = _length(_merge(kern)), _length(_merge(cp)), _length(_merge(everything))
        copy_only = _length(_merge(kern + cp)) - k_busy
        assert rows[dev][2:] == ("run", span, k_busy, c_busy, any_busy, span - any_busy, copy_only, 0)
        h2d = _length(_merge(pinned_h2d))
        assert copies[dev][8] == h2d
        # the README's description of this capture: pinned HtoD ~95% of the span, kernels ~2%, idle small
        assert 0.93 < h2d / span < 0.97
        assert 0.015 < k_busy / span < 0.03
        assert (span - any_busy) / span < 0.01


def test_gaps_transformer_match_python_merge(nsys_real_workspace) -> None:
    con, ids = nsys_real_workspace
    name = "h100_nsys2025.3_transformer_train.sqlite"
    src = _sqlite(_real(name))
    intervals = [tuple(r) for t in ("KERNEL", "MEMCPY", "MEMSET")
                 for r in src.execute(f'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_{t}')]  # fmt: skip
    islands = _merge(intervals)
    expected = [(a[1], b[0]) for a, b in itertools.pairwise(islands) if b[0] - a[1] >= 1_000_000]
    got = _rows(con, "gaps", report_id=ids[name])
    assert [(r[2], r[3]) for r in got] == expected
    assert all(r[4] == r[3] - r[2] for r in got)
    assert {r[7] for r in got} <= {"sync", "late_launch", "unknown"}
    # the 6.6 s start-up gap (data loading before training) is the biggest
    assert max(r[4] for r in got) == max(b - a for a, b in expected) > 6_000_000_000


def test_gaps_idle_fixture_causes(tmp_path) -> None:
    """The capture made for this test: 40.5 ms host sleeps and 30.3 ms waits in cudaStreamSynchronize."""
    if not IDLE_GAPS.exists():
        pytest.skip(f"test capture missing: {IDLE_GAPS}")
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, IDLE_GAPS).report_id
    got = _rows(con, "gaps", report_id=rid)
    sleeps = [r for r in got if 40_000_000 < r[4] < 41_000_000]
    # the launching thread slept through each of them: OS runtime sleep calls, read with sqlite3
    src = _sqlite(IDLE_GAPS)
    naps = src.execute(
        'SELECT o.start, o."end", s.value FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId '
        "WHERE s.value LIKE '%sleep%'"
    ).fetchall()
    for r in sleeps:
        covering = [n for a, b, n in naps if 2 * (min(b, r[3]) - max(a, r[2])) >= r[4]]
        assert covering and (r[7], r[8]) == ("host_wait", covering[0])
    assert len(sleeps) == 5
    waits = [r for r in got if 30_000_000 < r[4] < 31_000_000]
    assert len(waits) == 3
    assert {(r[7], r[8]) for r in waits} == {("sync", "cudaStreamSynchronize")}
    storms = _rows(con, "small_kernel_storms", report_id=rid)
    assert sum(r[5] for r in storms) >= 2500  # most of the 3000 tiny mul_ kernels
    con.close()


def _idle_in_storms(gaps: list[tuple], storms: list[tuple], max_gap_ns: int) -> dict[int, int]:
    """Per device, the reference: every gap of the `gaps` query up to max_gap_ns whose window is
    the storm starting last at or before it, if it ends inside that window."""
    out: dict[int, int] = {}
    for dev in {s[1] for s in storms}:
        st = sorted((s[2], s[3]) for s in storms if s[1] == dev)
        starts = [s for s, _ in st]
        total = 0
        for g in gaps:
            if g[1] == dev and g[4] <= max_gap_ns:
                i = bisect.bisect_right(starts, g[2]) - 1
                total += g[4] if i >= 0 and g[3] <= st[i][1] else 0
        out[dev] = total
    return out


@pytest.mark.parametrize(
    "max_kernel_ns, max_gap_ns, min_kernels", [(10_000, 50_000, 5), (100_000, 200_000, 3)]
)
def test_storm_idle_matches_the_gaps_query(tmp_path, max_kernel_ns, max_gap_ns, min_kernels) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    checked = 0
    for path in [
        IDLE_GAPS,
        NSYS / "h100_nsys2025.3_transformer_train.sqlite",
        NSYS / "h100x2_nsys2026.2_train_before.sqlite",
    ]:
        if not path.exists():
            continue
        rid = nsa.ingest(con, path).report_id
        storms = _rows(con, "small_kernel_storms", report_id=rid, max_kernel_ns=max_kernel_ns,
                       max_gap_ns=max_gap_ns, min_kernels=min_kernels, max_busy_pct=100.0)  # fmt: skip
        got: dict[int, int] = {}
        for s in storms:
            got[s[1]] = got.get(s[1], 0) + s[-1]
        expected = _idle_in_storms(_rows(con, "gaps", report_id=rid, min_gap_ns=1), storms, max_gap_ns)
        assert got == expected
        checked += sum(expected.values()) > 0
    if not checked:
        pytest.skip("no capture with storms available")
    con.close()


def test_nvtx_summary_matches_sqlite(nsys_real_workspace) -> None:
    con, ids = nsys_real_workspace
    name = "h100x2_nsys2026.2_h2d_heavy.sqlite"
    src = _sqlite(_real(name))
    expected = {n: (c, t) for n, c, t in src.execute(
        'SELECT coalesce(e.text, s.value), count(*), sum(e."end" - e.start) FROM NVTX_EVENTS e '
        'LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60) AND e."end" IS NOT NULL GROUP BY 1')}  # fmt: skip
    # rows are per base name (PyTorch's `, op_id = N` suffixes stripped): fold the export's full
    # names the same way, by hand (tests/test_nvtx_process.py checks the folding itself)
    base = {n: n.split(", op_id = ")[0].split(", seq = ")[0] for n in expected}
    folded: dict[str, list[int]] = {}
    for n, (c, t) in expected.items():
        acc = folded.setdefault(base[n], [0, 0])
        acc[0] += c
        acc[1] += t
    got: dict[str, list[int]] = {}
    for r in _rows(con, "nvtx_summary", report_id=ids[name]):
        acc = got.setdefault(r[2], [0, 0])
        acc[0] += r[4]
        acc[1] += r[6] or 0
    assert {n: tuple(v) for n, v in got.items()} == {n: tuple(v) for n, v in folded.items()}
    # kernel projection, independently: a SQLite range join on the file itself
    (proj,) = src.execute(NVTX_KERNEL_NS_SQL).fetchone()
    assert sum(r[12] for r in _rows(con, "nvtx_summary", report_id=ids[name])) == proj > 0


# --- nsys stats, when installed (Debian: apt-get install nsight-systems, 2022.4) ----------------


def test_kernel_summary_matches_nsys_stats(nsys_real_workspace, tmp_path) -> None:
    nsys = shutil.which("nsys")
    if nsys is None:
        pytest.skip("nsys is not installed (Debian bookworm non-free: apt-get install nsight-systems)")
    con, ids = nsys_real_workspace
    name = "h100_nsys2025.3_transformer_train.sqlite"
    copy = tmp_path / name
    shutil.copy(_real(name), copy)
    out = None
    for report in ("cuda_gpu_kern_sum", "gpukernsum"):  # renamed after 2022.4
        proc = subprocess.run([nsys, "stats", "-r", report, "--format", "csv", "-o", "-", str(copy)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        if proc.returncode == 0 and "Total Time" in proc.stdout:
            out = proc.stdout
            break
    if out is None:
        pytest.skip("this nsys cannot summarise kernels of the export")
    body = out[out.index("Time (%)") :]
    table = list(csv.DictReader(io.StringIO(body)))
    # 2022.4's gpukernsum splits a name by grid/block; sum its rows back per name
    stats: dict[str, dict[str, float]] = {}
    for r in table:
        s = stats.setdefault(r["Name"], {"total": 0, "n": 0, "min": float("inf"), "max": 0, "rows": 0})
        s["total"] += int(r["Total Time (ns)"])
        s["n"] += int(r["Instances"])
        s["min"] = min(s["min"], int(r["Min (ns)"]))
        s["max"] = max(s["max"], int(r["Max (ns)"]))
        s["rows"] += 1
        s.update(med=float(r["Med (ns)"]), sd=float(r["StdDev (ns)"]))
    got = {r[1]: r for r in _rows(con, "kernel_summary", report_id=ids[name])}
    assert set(got) == set(stats)
    for n, s in stats.items():
        _, _, inst, total, _avg, med, mn, mx, sd, _ = got[n]
        assert (inst, total, mn, mx) == (s["n"], s["total"], s["min"], s["max"])
        if s["rows"] == 1:  # one grid/block config: nsys's median and stddev are the whole name's
            assert med == pytest.approx(s["med"], abs=0.051)
            assert sd == pytest.approx(s["sd"], abs=0.051)
