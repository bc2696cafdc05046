"""`stream_gaps` against the export itself: per device and stream, the gaps between the GPU
work sorted by (start, end), each measured from the latest end before it, counted with sqlite3
and plain Python; and the rows in (report, device, stream, gap start) order, fetched whole or
in Arrow batches (as `nsa query` writes them)."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import ROOT

EXPORTS = [
    ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite",
    ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite",
]
WORK = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def export_gaps(path: Path, min_gap_ns: int) -> dict[tuple[int, int], list[int]]:
    """{(device, stream): [gap_ns, ...]} in time order, from the export's activity tables."""
    db = sqlite3.connect(path)
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    work = defaultdict(list)
    for table in WORK:
        if table in tables:
            rows = db.execute(f'SELECT deviceId, streamId, start, "end" FROM {table} WHERE "end" >= start')
            for device, stream, start, end in rows:
                work[device, stream].append((start, end))
    db.close()
    gaps: dict[tuple[int, int], list[int]] = {}
    for key, spans in work.items():
        spans.sort()
        latest, found = spans[0][1], []
        for start, end in spans[1:]:
            if start - latest >= max(min_gap_ns, 1):
                found.append(start - latest)
            latest = max(latest, end)
        gaps[key] = found
    return gaps


@pytest.mark.parametrize("min_gap_ns", [0, 5_000])
def test_gaps_per_stream_and_their_order(workspace, min_gap_ns: int) -> None:
    import nsight_analytics as nsa

    ids = {nsa.ingest(workspace, path).report_id: path for path in EXPORTS}
    eager = nsa.query(workspace, "stream_gaps", min_gap_ns=min_gap_ns).fetchall()
    batches = nsa.query(workspace, "stream_gaps", min_gap_ns=min_gap_ns).to_arrow_reader(1000)
    assert [tuple(r.values()) for b in batches for r in b.to_pylist()] == eager
    keys = [(r[0], r[1], r[2], r[3]) for r in eager]
    assert keys == sorted(keys)
    got: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for report_id, device_id, stream_id, _, _, gap_ns, *_ in eager:
        got[report_id, device_id, stream_id].append(gap_ns)
    want = {
        (rid, device, stream): found
        for rid, path in ids.items()
        for (device, stream), found in export_gaps(path, min_gap_ns).items()
        if found
    }
    assert dict(got) == want
    assert sum(len(v) for v in want.values()) > 10
