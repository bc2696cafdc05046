"""Findings on real nsys exports; expected numbers come from plain sqlite3 SQL on the files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import nsight_analytics as nsa
from conftest import realdata
from nsight_analytics.api import findings


def _run(path: Path, tmp_path: Path):
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        rid = nsa.ingest(con, path).report_id
        return findings(con, report_id=rid)
    finally:
        con.close()


def _span(db: sqlite3.Connection, device: int) -> int:
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    parts = [
        f'SELECT min(start), max("end") FROM {t} WHERE deviceId = ?'
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
        if t in tables
    ]
    rows = [db.execute(p, [device]).fetchone() for p in parts]
    return max(r[1] for r in rows if r[1]) - min(r[0] for r in rows if r[0])


def test_h2d_heavy(tmp_path: Path) -> None:
    path = realdata("nsys", "h100x2_nsys2026.2_h2d_heavy.sqlite")
    db = sqlite3.connect(path)
    # pinned (srcKind 1) HtoD (copyKind 1) time over the GPU span, both devices together
    htod = db.execute(
        'SELECT sum("end" - start), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY '
        "WHERE copyKind = 1 AND srcKind = 1"
    ).fetchone()
    span = _span(db, 0) + _span(db, 1)
    avg_tiny = db.execute(
        'SELECT avg("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName '
        "WHERE s.value = 'vectorized_elementwise_kernel'"
    ).fetchone()[0]
    found = _run(path, tmp_path)
    top = found[0]
    assert top.rule_id == "copy-dominated"
    dom = top.evidence["dominant"]
    assert (dom["direction"], dom["host_memory"]) == ("HtoD", "pinned")
    assert htod[0] / span == pytest.approx(0.95, abs=0.01)
    assert dom["share"] == pytest.approx(htod[0] / span, abs=0.005)  # copies do not overlap here
    assert dom["bytes"] == htod[1]
    small = next(f for f in found if f.rule_id == "small-kernel-storm")
    first = small.evidence["top_kernels"][0]
    assert first["short_name"] == "vectorized_elementwise_kernel"
    assert avg_tiny == pytest.approx(1700, rel=0.05)
    assert first["avg_ns"] == pytest.approx(avg_tiny, rel=1e-6)
    assert "vectorized_elementwise_kernel" in small.message and "1.68 us" in small.message
    # host-sync names one process (two here, both blocked in cudaStreamSynchronize); its
    # estimate is that process's blocked time beyond GPU work, the figure its message quotes
    sync = next(f for f in found if f.rule_id == "host-sync")
    pid = sync.evidence["pid"]
    blocked = db.execute(
        'SELECT sum(r."end" - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId '
        "WHERE s.value LIKE 'cudaStreamSynchronize%' AND r.globalTid / 16777216 % 16777216 = ?",
        [pid],
    ).fetchone()[0]
    assert sync.evidence["blocked_ns"] == blocked
    assert sync.est_savings_ns == sync.evidence["beyond_gpu_ns"] < blocked


def test_pageable_h2d(tmp_path: Path) -> None:
    # h100_nsys2025.3_pageable_h2d.sqlite, byte for byte: the bundled demo export ships in the package
    path = Path(__file__).resolve().parents[1] / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"
    db = sqlite3.connect(path)
    # the steady state: batch_0 (239 ms against a 125 ms median) is warm-up, so from batch_1 on
    durations = dict(
        db.execute("SELECT text, \"end\" - start FROM NVTX_EVENTS WHERE text LIKE 'batch_%'").fetchall()
    )
    assert durations["batch_0"] > 1.5 * sorted(durations.values())[len(durations) // 2]
    steady = db.execute("SELECT start FROM NVTX_EVENTS WHERE text = 'batch_1'").fetchone()[0]
    # DtoH (copyKind 2) into pageable memory (dstKind 0), started in the steady state
    ns, nbytes = db.execute(
        'SELECT sum("end" - start), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY '
        "WHERE copyKind = 2 AND dstKind = 0 AND start >= ?",
        [steady],
    ).fetchone()
    span = _span(db, 0) - (
        steady - db.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0]
    )
    found = _run(path, tmp_path)
    cd = next(f for f in found if f.rule_id == "copy-dominated")
    assert found[0] is cd
    dom = cd.evidence["dominant"]
    assert (dom["direction"], dom["host_memory"]) == ("DtoH", "pageable")
    assert nbytes / ns == pytest.approx(1.35, abs=0.02)
    assert dom["gb_per_s"] == pytest.approx(nbytes / ns, rel=1e-6)
    assert dom["share"] == pytest.approx(ns / span, abs=0.005)
    assert ns / span == pytest.approx(0.78, abs=0.01)
    assert "1.35 GB/s" in cd.title and "pageable" in cd.title and "steady state" in cd.message
    pg = next(f for f in found if f.rule_id == "pageable-memcpy")
    assert pg.severity == "critical"
    assert (
        pg.evidence["copies"]
        == db.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE (srcKind = 0 OR dstKind = 0) AND start >= ?",
            [steady],
        ).fetchone()[0]
    )
    # the pinning saving, by hand: the file's only pinned copies (HtoD, srcKind 1) set the rate
    # for both directions; each pageable copy group would take bytes / that rate instead
    pin_b, pin_ns = db.execute(
        'SELECT sum(bytes), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY '
        "WHERE (srcKind = 1 OR dstKind = 1) AND start >= ?",
        [steady],
    ).fetchone()
    groups = db.execute(
        'SELECT sum(bytes), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY '
        "WHERE (srcKind = 0 OR dstKind = 0) AND start >= ? GROUP BY copyKind",
        [steady],
    ).fetchall()
    saving = sum(ns_ - b / (pin_b / pin_ns) for b, ns_ in groups)
    assert pg.est_savings_ns == pytest.approx(saving, abs=2)
    # copy-dominated offers the same pinning win and says it is not additional
    assert cd.est_savings_ns == pg.est_savings_ns
    assert "same saving as the pageable-memcpy finding, not in addition" in cd.message


def test_no_cuda(tmp_path: Path) -> None:
    found = _run(realdata("nsys", "h100_nsys2022.4_no_cuda_nvtx_osrt.sqlite"), tmp_path)
    assert [(f.rule_id, f.severity) for f in found] == [("no-gpu-activity", "warning")]


def test_fresh_h100_capture_with_known_idle_gaps(tmp_path: Path) -> None:
    """tests/data/h100_nsys2025.3_idle_gaps.sqlite: host sleeps (late launches) and a main thread
    blocked in cudaStreamSynchronize while a host callback sleeps (see tests/data/README.md)."""
    path = Path(__file__).parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite"
    db = sqlite3.connect(path)
    # Independent sort-and-merge of GPU activity, then the gaps of >= 100 us that one
    # cudaStreamSynchronize call overlaps for at least 90% of their length.
    rows = sorted(
        db.execute(
            'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL '
            'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY'
        ).fetchall()
    )
    gaps, end = [], rows[0][1]
    for s, e in rows[1:]:
        if s - end >= 100_000:
            gaps.append((end, s))
        end = max(end, e)
    syncs = db.execute(
        'SELECT r.start, r."end" FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n '
        "ON n.id = r.nameId WHERE n.value LIKE 'cudaStreamSynchronize%'"
    ).fetchall()
    covered = [g for g in gaps if any(min(b, g[1]) - max(a, g[0]) >= 0.9 * (g[1] - g[0]) for a, b in syncs)]
    assert len(covered) == 3  # the three clean 30 ms host-callback waits
    sync_ns = sum(b - a for a, b in covered)

    found = _run(path, tmp_path)
    idle = next(f for f in found if f.rule_id == "gpu-idle")
    assert idle.evidence["dominant_cause"] == "late_launch"
    assert idle.evidence["idle_by_cause_ns"]["sync"] == pytest.approx(sync_ns, rel=0.05)
    assert "cudaStreamSynchronize" in idle.message
    storm = next(f for f in found if f.rule_id == "small-kernel-storm")
    assert "vectorized_elementwise_kernel x3,000" in storm.message  # the 3000 mul_ launches
