"""kernel_sequences against the export itself: runs of consecutive kernels on one stream counted
in plain Python over CUPTI_ACTIVITY_KIND_KERNEL, read with sqlite3 (not through nsa's tables)."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

import nsight_analytics as nsa

EXPORT = Path(__file__).parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite"


def _expected(length: int, min_count: int) -> list[tuple[str, int, int, int, float]]:
    """(sequence, length, occurrences, kernel_ns, avg_ns) in the query's order: every window of
    `length` consecutive kernels of a (device, stream) in (start, end) order, overlapping ones too."""
    db = sqlite3.connect(EXPORT)
    rows = db.execute(
        """SELECT k.deviceId, k.streamId, k.start, k."end", s.value
           FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS s ON s.id = k.demangledName
           ORDER BY k.deviceId, k.streamId, k.start, k."end" """
    ).fetchall()
    db.close()
    streams: dict[tuple[int, int], list[tuple[str, int]]] = defaultdict(list)
    for device, stream, start, end, name in rows:
        streams[device, stream].append((name, end - start))
    found: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0])
    for kernels in streams.values():
        for i in range(len(kernels) - length + 1):
            run = kernels[i : i + length]
            hit = found[tuple(name for name, _ in run)]
            hit[0] += 1
            hit[1] += sum(ns for _, ns in run)
    out = [(" -> ".join(names), length, n, ns, ns / n) for names, (n, ns) in found.items() if n >= min_count]
    return sorted(out, key=lambda r: (-r[2], -r[3], r[0]))


@pytest.mark.parametrize(("length", "min_count"), [(2, 2), (3, 2), (5, 1), (8, 3)])
def test_sequences_are_the_exports_runs_of_kernels(workspace, length: int, min_count: int) -> None:
    rid = nsa.ingest(workspace, EXPORT).report_id
    got = nsa.query(
        workspace, "kernel_sequences", report_id=rid, length=length, min_count=min_count
    ).fetchall()
    expected = _expected(length, min_count)
    assert expected, "the export has repeated runs of this length"
    assert [r[0] for r in got] == [rid] * len(got)
    assert [(s, n, occ, ns) for _, s, n, occ, ns, _ in got] == [r[:4] for r in expected]
    assert [avg for *_, avg in got] == pytest.approx([r[4] for r in expected])


def test_a_length_above_the_cap_is_read_as_8(workspace) -> None:
    """`length` is capped at 8 kernels: 50 gives the runs of 8."""
    rid = nsa.ingest(workspace, EXPORT).report_id
    capped = nsa.query(workspace, "kernel_sequences", report_id=rid, length=50, min_count=1).fetchall()
    assert {r[2] for r in capped} == {8}
    assert [(r[1], r[3], r[4]) for r in capped] == [r[:1] + r[2:4] for r in _expected(8, 1)]
