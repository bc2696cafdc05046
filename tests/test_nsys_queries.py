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
                duration_ns=end - start, bytes=nbytes, direction=kind, src_memory=src, dst_memory=dst,
                correlation_id=corr)  # fmt: skip


def _ms(rid, start, end, corr=None, dev=0, pid=10):
    return dict(report_id=rid, device_id=dev, stream_id=7, pid=pid, start_ns=start, end_ns=end,
                duration_ns=end - start, bytes=0, correlation_id=corr)  # fmt: skip


# --- hand-built inputs (the hand-computed goldens are data: tests/goldens/, tests/test_goldens.py) ---


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

        # memsets are memory operations: copy busy is the union of memcpys and memsets
        kernel, copy = union("kernels", "graph_executions"), union("memcpy", "memset")
        busy = union("kernels", "memcpy", "memset", "graph_executions")
        span = max(e for *_, e in mine) - min(s for _, _, s, _ in mine)
        expected.append(
            (1, dev, "run", span, kernel, copy, busy, span - busy, busy - kernel, union("graph_executions"))
        )
    assert _rows(workspace, "utilization") == expected


@pytest.mark.parametrize("seed", range(12))
def test_memcpy_summary_busy_matches_interval_arithmetic(workspace, seed: int) -> None:
    # groups of copies one after the other (ends in start order: the previous copy's end is the
    # running max), groups with copies inside longer ones (the running max is an earlier copy's),
    # ties on start and end, zero lengths; each copy launched by one call, blocking or not
    rnd = random.Random(seed)
    groups = [("HtoD", "pinned", "device"), ("DtoH", "device", "pageable"), ("DtoD", "device", "device")]
    copies, calls = [], []
    for dev in (0, 1):
        for kind, src, dst in groups:
            start, nested = rnd.randint(0, 20), rnd.random() < 0.5
            for _ in range(rnd.randint(0, 30)):
                last = copies[-1] if copies else None
                if nested and last and last["end_ns"] - last["start_ns"] > 2 and rnd.random() < 0.4:
                    # inside the previous copy: its end comes before the running max
                    s = rnd.randint(last["start_ns"], last["end_ns"] - 1)
                    e = rnd.randint(s, last["end_ns"] - 1)
                else:
                    s = start + rnd.choice([0, 1, 5, rnd.randint(0, 40)])
                    e = s + rnd.choice([0, 3, rnd.randint(0, 50)])
                    start = s
                corr = len(copies) + 1
                copies.append(
                    _cp(1, s, e, kind, src, dst, nbytes=rnd.randint(1, 9) * 100, corr=corr, dev=dev)
                )
                calls.append(_api(1, s - 1, s, rnd.choice(["cudaMemcpy", "cudaMemcpyAsync"]), corr))
    _insert(workspace, "memcpy", copies)
    _insert(workspace, "cuda_api", calls)
    span = {d: max(c["end_ns"] for c in copies if c["device_id"] == d) - min(c["start_ns"] for c in copies if c["device_id"] == d)
            for d in {c["device_id"] for c in copies}}  # fmt: skip
    expected = {}
    for (dev, kind, src, dst), mine in itertools.groupby(
        sorted(copies, key=lambda c: (c["device_id"], c["direction"], c["src_memory"], c["dst_memory"])),
        key=lambda c: (c["device_id"], c["direction"], c["src_memory"], c["dst_memory"]),
    ):
        mine = list(mine)
        busy = union_within([(c["start_ns"], c["end_ns"]) for c in mine])
        apis = {calls[c["correlation_id"] - 1]["name"] for c in mine}
        sync = sum(calls[c["correlation_id"] - 1]["name"] == "cudaMemcpy" for c in mine)
        total = sum(c["duration_ns"] for c in mine)
        expected[(dev, kind, src, dst)] = (
            len(mine), sum(c["bytes"] for c in mine), total, busy,
            pytest.approx(100.0 * busy / span[dev]) if span[dev] > 0 else None, sync, ",".join(sorted(apis)),
        )  # fmt: skip
    got = {tuple(r[1:5]): (*r[5:10], r[12], r[13]) for r in _rows(workspace, "memcpy_summary")}
    assert got == expected


def test_small_kernels_none_under_the_threshold(workspace) -> None:
    _insert(workspace, "kernels", [_k(1, 0, 2000, "a", 1), _k(1, 30_000, 35_000, "b", 2)])
    assert _rows(workspace, "small_kernels", max_kernel_ns=1000)[0][1:3] == (2, 0)


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
        # memsets are memory operations: copy busy is the union of memcpys and memsets
        k_busy, any_busy = _length(_merge(kern)), _length(_merge(everything))
        c_busy, copy_only = _length(_merge(cp + ms)), any_busy - k_busy
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
