"""Copy-bound timelines: running HtoD and DtoH side by side as a lever (copy-dominated, query
copy_directions), and one definition of copy busy time (utilization: memcpys and memsets).

Expected numbers come from plain SQL on the exports (CUPTI_ACTIVITY_KIND_MEMCPY copyKind 1 HtoD,
2 DtoH; the launching CUPTI_ACTIVITY_KIND_RUNTIME row by correlationId and process) and Python
interval arithmetic, never from nsa's output."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import duckdb
import pytest
from rules.build import MS, US, api, copy, kernel
from test_rules_cases import load_case

import nsight_analytics as nsa
from conftest import realdata
from nsight_analytics.api import findings
from nsight_analytics.rules import run_rules
from rows import gunzipped_sqlite, union_within

COPY_LOOP = Path(__file__).resolve().parent / "data" / "busy" / "nsys" / "h100_nsys2025.3_copy_loop.sqlite.gz"
PID = "globalPid / 16777216 % 16777216"


def _ingest(path: Path, tmp_path: Path) -> tuple[duckdb.DuckDBPyConnection, int]:
    con = nsa.connect(tmp_path / "w.duckdb")
    return con, nsa.ingest(con, path).report_id


def _directions(db: sqlite3.Connection, start: int, device: int = 0) -> dict[str, int]:
    """HtoD / DtoH busy, their overlap, and the serialised time of the copies starting at or after
    `start`: a copy ran while the next activity on its stream (same process and stream) was a copy
    the other way, already issued (its runtime call had returned)."""
    copies = db.execute(
        f'SELECT m.copyKind, m.start, m."end", m.streamId, m.{PID}, '
        '(SELECT min(r."end") FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = m.correlationId '
        "  AND r.globalTid / 16777216 % 16777216 = m.globalPid / 16777216 % 16777216) "
        "FROM CUPTI_ACTIVITY_KIND_MEMCPY m WHERE m.copyKind IN (1, 2) AND m.deviceId = ?",
        [device],
    ).fetchall()
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    other = [
        (None, *r, None)
        for t, where in (
            ("CUPTI_ACTIVITY_KIND_KERNEL", ""),
            ("CUPTI_ACTIVITY_KIND_MEMSET", ""),
            ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", ""),
            ("CUPTI_ACTIVITY_KIND_MEMCPY", "AND copyKind NOT IN (1, 2)"),
        )
        if t in have
        for r in db.execute(
            f'SELECT start, "end", streamId, {PID} FROM {t} WHERE deviceId = ? {where}', [device]
        )
    ]
    mine = [r for r in copies if r[1] >= start]
    htod = union_within([(s, e) for k, s, e, *_ in mine if k == 1])
    dtoh = union_within([(s, e) for k, s, e, *_ in mine if k == 2])
    both = htod + dtoh - union_within([(s, e) for _, s, e, *_ in mine])
    serial = []
    by_stream: dict[tuple[int, int], list[tuple]] = {}
    for r in copies + other:
        by_stream.setdefault((r[4], r[3]), []).append(r)
    for seq in by_stream.values():
        for prev, cur in itertools.pairwise(sorted(seq, key=lambda r: (r[1], r[2]))):
            if None not in (prev[0], cur[0], cur[5]) and prev[0] != cur[0] and prev[1] >= start:
                lo, hi = max(prev[1], cur[5]), min(prev[2], cur[1])
                if hi > lo:
                    serial.append((lo, hi))
    return {"htod": htod, "dtoh": dtoh, "both": both, "serialised": union_within(serial)}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3g} ms"


def test_copy_loop_names_the_two_directions(tmp_path: Path) -> None:
    db = gunzipped_sqlite(COPY_LOOP, tmp_path)
    # the capture as tests/data/README.md describes it: 20 + 20 pinned copies on one stream, the
    # directions never overlapping, kernels next to nothing
    n, streams, lo = db.execute(
        "SELECT count(*), count(DISTINCT streamId), min(start) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
        "WHERE copyKind IN (1, 2) AND srcKind IN (1, 2) AND dstKind IN (1, 2)"
    ).fetchone()
    assert (n, streams) == (40, 1)
    whole = _directions(db, lo)
    assert whole["both"] == 0 and whole["htod"] == pytest.approx(97.42e6, rel=1e-3)

    con, rid = _ingest(COPY_LOOP, tmp_path)
    try:
        found = findings(con, report_id=rid)
    finally:
        con.close()
    top = found[0]
    assert top.rule_id == "copy-dominated" and top.severity == "critical"
    # the steady state the finding names starts inside the loop, leaving most of it to judge
    start = top.evidence["steady_start_ns"]
    third_htod = db.execute(
        "SELECT start FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 ORDER BY start LIMIT 1 OFFSET 2"
    ).fetchone()[0]
    assert lo <= start <= third_htod
    want = _directions(db, start)
    saving = min(want["serialised"], min(want["htod"], want["dtoh"]) - want["both"])
    # the lever: tens of ms, bounded by the smaller direction, not the 28 us of compute overlap
    assert saving > 50 * MS
    assert saving <= min(want["htod"], want["dtoh"])
    assert top.est_savings_ns == pytest.approx(saving, abs=1)
    window = max(r[0] for r in db.execute('SELECT max("end") FROM CUPTI_ACTIVITY_KIND_MEMCPY')) - start
    assert top.est_savings_ns <= window
    assert top.evidence["lever"] == "directions"
    d = top.evidence["directions"]
    assert (d["htod_busy_ns"], d["dtoh_busy_ns"], d["both_busy_ns"], d["serialised_ns"]) == (
        want["htod"], want["dtoh"], want["both"], want["serialised"],
    )  # fmt: skip
    assert (d["copy_streams"], d["shared_streams"]) == (1, 1)
    assert top.evidence["overlap_savings_ns"] < 100 * US  # compute overlap: next to nothing
    assert "never overlap (one stream)" in top.title
    assert (
        f"HtoD and DtoH copies never overlap (one stream): put them on separate streams (each direction has "
        f"its own copy engine) to save up to {_ms(saving)}" in top.message
    )
    assert "separate streams" in top.recommendation and "pinned" not in top.recommendation


def test_copy_loop_copy_busy_counts_memsets(tmp_path: Path) -> None:
    db = gunzipped_sqlite(COPY_LOOP, tmp_path)

    def q(table: str) -> list[tuple[int, int]]:
        return [tuple(r) for r in db.execute(f'SELECT start, "end" FROM {table}')]

    kern, cp, ms = (
        q("CUPTI_ACTIVITY_KIND_KERNEL"),
        q("CUPTI_ACTIVITY_KIND_MEMCPY"),
        q("CUPTI_ACTIVITY_KIND_MEMSET"),
    )
    assert len(ms) == 20 and union_within(ms) > 0
    k_busy, c_busy, busy = union_within(kern), union_within(cp + ms), union_within(kern + cp + ms)
    assert c_busy > union_within(cp)  # the memsets add time the memcpys alone do not have
    con, rid = _ingest(COPY_LOOP, tmp_path)
    try:
        (row,) = nsa.query(con, "utilization", report_id=rid).fetchall()
        cols = [c[0] for c in nsa.query(con, "utilization", report_id=rid).description]
    finally:
        con.close()
    got = dict(zip(cols, row, strict=True))
    assert (got["kernel_busy_ns"], got["copy_busy_ns"], got["any_busy_ns"]) == (k_busy, c_busy, busy)
    # one definition: busy = kernels + copies (memory operations) while no kernel ran
    assert got["copy_only_ns"] == busy - k_busy == got["any_busy_ns"] - got["kernel_busy_ns"]


def test_pageable_copies_keep_pinning_as_the_lever(tmp_path: Path) -> None:
    path = realdata("nsys", "h100_nsys2025.3_pageable_h2d.sqlite")
    db = sqlite3.connect(path)
    con, rid = _ingest(path, tmp_path)
    try:
        found = findings(con, report_id=rid)
    finally:
        con.close()
    top = found[0]
    assert top.rule_id == "copy-dominated" and top.evidence["lever"] == "pinning"
    assert top.evidence["dominant"]["host_memory"] == "pageable"
    want = _directions(db, top.evidence["steady_start_ns"])
    # a pageable copy blocks the host until it is done: the next copy is issued after it ended,
    # so stream order holds nothing back and a second stream would not help
    assert want["htod"] > 0 and want["dtoh"] > 0
    assert top.evidence["directions"]["serialised_ns"] == want["serialised"] < 0.01 * want["dtoh"]
    assert top.evidence["direction_savings_ns"] == 0
    assert "separate streams" not in top.message + top.recommendation
    assert "pinned memory" in top.recommendation


def test_one_direction_has_no_direction_lever(tmp_path: Path) -> None:
    path = realdata("nsys", "h100x2_nsys2026.2_h2d_heavy.sqlite")
    db = sqlite3.connect(path)
    dtoh = db.execute(
        'SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2'
    ).fetchone()[0]
    con, rid = _ingest(path, tmp_path)
    try:
        found = findings(con, report_id=rid)
    finally:
        con.close()
    top = found[0]
    assert top.rule_id == "copy-dominated"
    # a few microseconds of DtoH against ~1 s of HtoD per GPU: nothing to run side by side
    assert dtoh < 10 * US
    assert top.evidence["direction_savings_ns"] == 0 and top.evidence["lever"] == "overlap"
    assert "separate streams" not in top.message + top.recommendation


# --- rows built by hand ---------------------------------------------------------------------------


def _loop(
    issue: str = "ahead", streams: tuple[int, int] = (7, 7), offset: int = 0, compute: bool = True
) -> dict[str, list[dict]]:
    """10 iterations of a 5 ms HtoD and a 5 ms DtoH, with a 5 us kernel between them (`compute`).
    issue='ahead': every copy issued at the start (async, pinned); 'late': each copy issued 1 us
    before it starts (a blocking cudaMemcpy per copy). streams: the HtoD and DtoH streams; offset:
    the DtoH start after its HtoD's start (0: after its end)."""
    rows: dict[str, list[dict]] = {"memcpy": [], "kernels": [], "cuda_api": []}
    t = 0
    for i in range(10):
        h = copy(t, 5 * MS, 250_000_000, "HtoD", corr=2 * i + 1) | {"stream_id": streams[0]}
        d_start = t + offset if offset else t + 5 * MS + 10 * US
        d = copy(d_start, 5 * MS, 250_000_000, "DtoH", corr=2 * i + 2) | {"stream_id": streams[1]}
        rows["memcpy"] += [h, d]
        if compute:
            rows["kernels"].append(kernel(t + 5 * MS, 5 * US))
        for c in (h, d):
            at = i * 10 * US if issue == "ahead" else c["start_ns"] - 2 * US
            rows["cuda_api"].append(api(at, 1 * US, "cudaMemcpyAsync" if issue == "ahead" else "cudaMemcpy",
                                        corr=c["correlation_id"]))  # fmt: skip
        t = d["end_ns"] + 10 * US
    return rows


def _copy_dominated(rows: dict[str, list[dict]], tmp_path: Path):
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, rows)
        (f,) = run_rules(con, only=["copy-dominated"])
    finally:
        con.close()
    return f


def test_serialised_copies_save_the_smaller_direction(tmp_path: Path) -> None:
    f = _copy_dominated(_loop(compute=False), tmp_path)
    # 10 x 5 ms each way; every copy but the last ran with the next one (the other way) issued
    # behind it: 19 x 5 ms serialised (less 1 us: the first DtoH's call returned 1 us into the
    # first HtoD), so the smaller direction (50 ms) is the bound
    assert f.est_savings_ns == 50 * MS
    assert f.evidence["directions"]["serialised_ns"] == 19 * 5 * MS - 1 * US
    assert f.evidence["lever"] == "directions" and "never overlap (one stream)" in f.title
    assert "to save up to 50 ms, the smaller direction's (HtoD) copy time" in f.message


def test_a_kernel_between_upload_and_download_breaks_the_pair(tmp_path: Path) -> None:
    f = _copy_dominated(_loop(), tmp_path)
    # the download of step i waits for its kernel, not only the stream: only step i's DtoH with
    # step i+1's HtoD issued behind it counts, 9 x 5 ms
    assert f.evidence["directions"]["serialised_ns"] == f.est_savings_ns == 9 * 5 * MS
    assert f.evidence["lever"] == "directions"
    assert (
        "to save up to 45 ms: the time a copy ran with a copy the other way issued and waiting" in f.message
    )
    assert "(the smaller direction, HtoD, ran 50 ms)" in f.message


def test_copies_issued_late_gain_nothing_from_a_second_stream(tmp_path: Path) -> None:
    f = _copy_dominated(_loop("late"), tmp_path)
    assert f.evidence["directions"]["serialised_ns"] == 0
    assert f.evidence["direction_savings_ns"] == 0 and f.evidence["lever"] != "directions"
    assert "separate streams" not in f.message


def test_directions_already_side_by_side(tmp_path: Path) -> None:
    # DtoH on its own stream, starting 1 ms into each HtoD: 4 ms of each 5 ms overlap
    f = _copy_dominated(_loop(streams=(7, 8), offset=1 * MS), tmp_path)
    d = f.evidence["directions"]
    assert (d["both_busy_ns"], d["serialised_ns"], d["shared_streams"]) == (10 * 4 * MS, 0, 0)
    assert f.evidence["direction_savings_ns"] == 0
    assert "separate streams" not in f.message


def _serialised_reference(rows: dict[str, list[dict]]) -> int:
    """serialised_ns by its definition, in Python: each stream's copies and kernels in (start_ns,
    end_ns) order; a copy whose predecessor is a copy the other way, issued (its call returned)
    before that one ended, counts [max(prev start, issued), min(prev end, its start)]; the device's
    union of those."""
    issued: dict[int, int] = {}
    for a in rows["cuda_api"]:
        issued[a["correlation_id"]] = min(issued.get(a["correlation_id"], a["end_ns"]), a["end_ns"])
    items = [(c["start_ns"], c["end_ns"], c["direction"], c["correlation_id"]) for c in rows["memcpy"]]
    items += [(k["start_ns"], k["end_ns"], None, None) for k in rows["kernels"]]
    items.sort(key=lambda x: (x[0], x[1]))
    out = []
    for (ps, pe, pdir, _), (s, _e, d, corr) in itertools.pairwise(items):
        if d is None or pdir is None or pdir == d or corr not in issued:
            continue
        lo, hi = max(ps, issued[corr]), min(pe, s)
        if hi > lo:
            out.append((lo, hi))
    return union_within(out)


def test_serialised_pairs_with_kernels_at_the_copies_edges(tmp_path: Path) -> None:
    # copies the other way back to back on one stream, all issued early: every pair would count,
    # but a kernel that starts with a copy and ends after it comes after it in (start, end) order,
    # and one that starts with a copy and ends before it (2 us, or nothing) comes before it: each
    # breaks a pair the other way at the copy's edge (ties of start broken by end)
    rows: dict[str, list[dict]] = {"memcpy": [], "kernels": [], "cuda_api": []}
    t, corr = 0, 0
    for i in range(12):
        for kind in ("HtoD", "DtoH"):
            corr += 1
            c = copy(t, 1 * MS, 1_000_000, kind, corr=corr)
            rows["memcpy"].append(c)
            rows["cuda_api"].append(api(corr * US, 1 * US, "cudaMemcpyAsync", corr=corr))
            if kind == "DtoH" and i % 4 == 1:
                rows["kernels"].append(kernel(t, 1 * MS + 3 * US))  # after this DtoH, before the next HtoD
            if kind == "DtoH" and i % 4 == 2:
                rows["kernels"].append(kernel(t, 0))  # between the HtoD and this DtoH
            if kind == "HtoD" and i % 4 == 3:
                rows["kernels"].append(kernel(t, 2 * US))  # between the DtoH before and this HtoD
            t += 1 * MS
    want = _serialised_reference(rows)
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, rows)
        (got,) = nsa.query(con, "copy_directions").fetchall()
    finally:
        con.close()
    assert 0 < want < 23 * MS  # 23 pairs, 9 of them broken
    assert got[6] == want
