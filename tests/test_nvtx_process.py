"""NVTX ranges around work other threads launch (nvtx_ranges.process_kernels) and PyTorch's
per-call range names folded under their base name (nvtx_ranges.base_name, nvtx_summary).

Expected numbers come from the exports themselves (plain sqlite3 range joins and a Python
regex) or from hand-built exports with hand-computed answers, never from nsa's own output."""

from __future__ import annotations

import gzip
import re
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

import nsight_analytics as nsa
from conftest import realdata
from fixtures import nsys_fixtures as fx
from nsight_analytics.ingest import ensure_loaded
from nsight_analytics.ingest.nvtx import fill_nvtx_kernels

FOREACH = "h100_nsys2025.3_train_foreach_gpumetrics.sqlite"
H2D = "h100x2_nsys2026.2_h2d_heavy.sqlite"

# Per closed NVTX range: the kernels whose launching API call started inside it, on the range's
# own thread (same globalTid) or on any thread of its process (same globalTid >> 24: pid and vm).
RANGE_KERNELS_SQL = """
    SELECT e.rowid, coalesce(e.text, s.value), e.start, e.globalTid,
        count(k.rowid), coalesce(sum(k."end" - k.start), 0)
    FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
    LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON {thread} AND r.start BETWEEN e.start AND e."end"
    LEFT JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
         AND k.globalPid / 16777216 = r.globalTid / 16777216
    WHERE e.eventType IN (59, 60) AND e."end" IS NOT NULL
    GROUP BY e.rowid"""
SAME_THREAD = "r.globalTid = e.globalTid"
SAME_PROCESS = "r.globalTid / 16777216 = e.globalTid / 16777216"


@pytest.fixture(scope="module")
def foreach_export(tmp_path_factory) -> Path:
    """The foreach training capture, decompressed once (it is kept gzipped in the real data)."""
    gz = realdata("nsys", FOREACH + ".gz")
    path = tmp_path_factory.mktemp("foreach") / FOREACH
    with gzip.open(gz, "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def _per_range(db: sqlite3.Connection, thread: str) -> dict[tuple[int, int], tuple[str, int, int]]:
    """{(start, globalTid): (name, kernels, kernel_ns)} for every closed range."""
    return {
        (st, gt): (n, c, ns) for _, n, st, gt, c, ns in db.execute(RANGE_KERNELS_SQL.format(thread=thread))
    }


def test_backward_on_the_main_thread_gets_the_autograd_threads_kernels(tmp_path, foreach_export) -> None:
    with sqlite3.connect(foreach_export) as db:
        same = _per_range(db, SAME_THREAD)
        proc = _per_range(db, SAME_PROCESS)
    assert len({k[0] for k in same}) == len(same)  # one range per start and thread: a key
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, foreach_export).report_id
    ensure_loaded(con, ["nvtx_ranges", "nvtx_kernels"])
    got = {
        (st, gt): (n, k, kns, pk, pkns)
        for st, gt, n, k, kns, pk, pkns in con.execute(
            "SELECT start_ns, global_tid, name, kernels, kernel_ns, process_kernels, process_kernel_ns "
            "FROM nvtx_ranges WHERE report_id = ? AND end_ns IS NOT NULL",
            [rid],
        ).fetchall()
    }
    assert got == {key: (*same[key], *proc[key][1:]) for key in same}

    def total(ranges: dict, name: str) -> tuple[int, int]:
        rows = [v for v in ranges.values() if v[0] == name]
        return sum(r[1] for r in rows), sum(r[2] for r in rows)

    # the numbers: nsys's same-thread view sees 25 of the 4,450 kernels (318 ms) that
    # ran inside the 25 backward ranges, launched by PyTorch's autograd thread
    assert total(same, "backward")[0] == 25
    kernels, kernel_ns = total(proc, "backward")
    assert kernels == 4450 and 318_000_000 <= kernel_ns < 319_000_000
    row = {r[2]: r for r in nsa.query(con, "nvtx_summary", report_id=rid).fetchall()}["backward"]
    cols = [d[0] for d in nsa.query(con, "nvtx_summary", report_id=rid).description]
    backward = dict(zip(cols, row))
    assert (backward["names"], backward["ranges"]) == (1, 25)
    assert (backward["kernels"], backward["kernel_ns"]) == total(same, "backward")
    assert (backward["process_kernels"], backward["process_kernel_ns"]) == (kernels, kernel_ns)
    # forward and optimizer run on the main thread: both views agree there
    for name in ("forward", "optimizer"):
        assert total(same, name) == total(proc, name) and total(same, name)[0] > 0
    con.close()


@pytest.mark.parametrize("chunk", [1, 7, 40])
def test_ranges_worked_out_in_small_chunks_match_the_export(tmp_path, foreach_export, chunk: int) -> None:
    """The ASOF passes go by chunks of threads (processes), a thread with more closed ranges than
    a chunk cut at quantiles of its rowids: every range gets the same counts whatever the cuts."""
    with sqlite3.connect(foreach_export) as db:
        same = _per_range(db, SAME_THREAD)
        proc = _per_range(db, SAME_PROCESS)
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, foreach_export).report_id
    ensure_loaded(con, ["nvtx_ranges", "cuda_api"])
    assert len(same) > 2 * chunk  # the ranges' thread is cut into parts
    con.execute("BEGIN TRANSACTION")
    assert (
        fill_nvtx_kernels(con, rid, chunk=chunk)
        == len(same) + con.execute("SELECT count(*) FROM nvtx_ranges WHERE end_ns IS NULL").fetchone()[0]
    )
    con.execute("COMMIT")
    got = {
        (st, gt): (n, k, kns, pk, pkns)
        for st, gt, n, k, kns, pk, pkns in con.execute(
            "SELECT start_ns, global_tid, name, kernels, kernel_ns, process_kernels, process_kernel_ns "
            "FROM nvtx_ranges WHERE report_id = ? AND end_ns IS NOT NULL",
            [rid],
        ).fetchall()
    }
    assert got == {key: (*same[key], *proc[key][1:]) for key in same}
    assert sum(v[1] for v in same.values()) < sum(v[1] for v in proc.values())  # the process pass ran
    unset = con.execute(
        "SELECT count(*) FROM nvtx_ranges WHERE end_ns IS NULL AND kernels IS NOT NULL"
    ).fetchone()[0]
    assert unset == 0  # open ranges stay NULL
    con.close()


# PyTorch emit_nvtx: `name`, then `, seq = N`, `, op_id = N`, `, sizes = [...]`, `, input_op_ids = [...]`
PYTORCH_NAME = re.compile(
    r"^(.*?)(?:, seq = \d+)?(?:, op_id = \d+)?(?:, sizes = \[.*\])?(?:, input_op_ids = \[.*\])?$"
)


def test_op_id_names_fold_under_their_base_name(tmp_path) -> None:
    path = realdata("nsys", H2D)
    with sqlite3.connect(path) as db:
        names = [n for (n,) in db.execute(
            "SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE e.eventType IN (59, 60)")]  # fmt: skip
    assert len(set(names)) == 16_582  # the count: one name per call
    ranges: dict[str, int] = defaultdict(int)
    full: dict[str, set[str]] = defaultdict(set)
    for n in names:
        base = PYTORCH_NAME.match(n).group(1)
        ranges[base] += 1
        full[base].add(n)
    assert len(ranges) < 200 and all(" = " not in b for b in ranges)
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path).report_id
    rows = nsa.query(con, "nvtx_summary", report_id=rid).fetchall()
    got = {r[2]: (r[3], r[4] + r[5]) for r in rows}  # name: (names, ranges + open_ranges)
    assert len(got) == len(rows)  # one row per base name (one domain)
    assert got == {b: (len(full[b]), ranges[b]) for b in ranges}
    assert sum(v[0] for v in got.values()) == 16_582
    # the full names stay queryable (in nvtx_ranges, which nvtx_summary did not need)
    nsa.api.materialise(con, {"nvtx_ranges"})
    (n,) = con.execute(
        "SELECT count(DISTINCT name) FROM nvtx_ranges WHERE report_id = ? AND base_name = 'aten::mm'", [rid]
    ).fetchone()
    assert n == len(full["aten::mm"]) > 1
    con.close()


# emit_nvtx with record_shapes: the lists run to the end of the name
WITH_SHAPES = "aten::mm, seq = 2, op_id = 11, sizes = [[2, 3], [3, 4]], input_op_ids = [(9, 0), (8, 0)]"


def _launches_across_threads(path: Path) -> None:
    """Process A (pid 100): main thread A1 and worker A2 both launch; process B (pid 200) launches
    at the same time on its own GPU work. Host starts in us: L1 A1 500 (6000 ns), L2 A1 1100
    (1000), L3 A2 1200 (2000), L4 A2 1300 (3000), L5 A1 1300 (100: same start as L4), L6 B 1400
    (5000), L7 A2 2000 (7000: at backward's end), L8 A2 2500 (4000)."""
    b = fx.ExportBuilder()
    b.gpu()
    a1 = b.process(100, "python")
    a2 = b.thread(100, 101, "pt_autograd_0")
    b1 = b.process(200, "other")
    us = 1_000
    launches = [(500, a1, 6000), (1100, a1, 1000), (1200, a2, 2000), (1300, a2, 3000),
                (1300, a1, 100), (1400, b1, 5000), (2000, a2, 7000), (2500, a2, 4000)]  # fmt: skip
    for host, gtid, dur in launches:
        b.launch_kernel(host * us, host * us + 50 * us, dur, "k", gtid=gtid)
    b.nvtx(1000 * us, 2000 * us, "backward", gtid=a1)
    b.nvtx(1050 * us, 1250 * us, "worker_step", gtid=a2)
    b.nvtx(1300 * us, 1300 * us + 10, "tie", gtid=a2)
    b.nvtx(1000 * us, 2000 * us, "b_range", gtid=b1)
    b.nvtx(1500 * us, None, "open", gtid=a1)
    b.nvtx(100, 200, "aten::mm, seq = 1, op_id = 10", gtid=b1)
    b.nvtx(300, 400, WITH_SHAPES, gtid=b1)
    b.nvtx(500, 600, "lr = 0.1", gtid=b1)
    b.nvtx(700, 800, "x, op_id = 3 then", gtid=b1)  # not a suffix: kept whole
    b.write(path)


def test_worker_thread_launches_count_for_the_process_not_for_other_processes(tmp_path) -> None:
    path = tmp_path / "threads.sqlite"
    _launches_across_threads(path)
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path).report_id
    ensure_loaded(con, ["nvtx_ranges", "nvtx_kernels"])
    got = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT name, base_name, kernels, kernel_ns, process_kernels, process_kernel_ns FROM nvtx_ranges"
        ).fetchall()
    }
    assert got == {
        # same thread: L2, L5; process A: L2, L3, L4, L5, L7 (L6 is process B's, L1 and L8 outside)
        "backward": ("backward", 2, 1100, 5, 13100),
        # same thread: L3; process: L2, L3
        "worker_step": ("worker_step", 1, 2000, 2, 3000),
        # starts at L4's and L5's start on two threads: both inside, only L4 on its thread
        "tie": ("tie", 1, 3000, 2, 3100),
        # B launches on one thread only: both views are L6
        "b_range": ("b_range", 1, 5000, 1, 5000),
        "open": ("open", None, None, None, None),
        "aten::mm, seq = 1, op_id = 10": ("aten::mm", 0, 0, 0, 0),
        WITH_SHAPES: ("aten::mm", 0, 0, 0, 0),
        "lr = 0.1": ("lr = 0.1", 0, 0, 0, 0),
        "x, op_id = 3 then": ("x, op_id = 3 then", 0, 0, 0, 0),
    }
    res = nsa.query(con, "nvtx_summary", report_id=rid)
    cols = [d[0] for d in res.description]
    rows = {r[2]: dict(zip(cols, r)) for r in res.fetchall()}
    assert {n: (r["names"], r["ranges"], r["open_ranges"]) for n, r in rows.items()} == {
        "backward": (1, 1, 0), "worker_step": (1, 1, 0), "tie": (1, 1, 0), "b_range": (1, 1, 0),
        "open": (1, 0, 1), "aten::mm": (2, 2, 0), "lr = 0.1": (1, 1, 0),
        "x, op_id = 3 then": (1, 1, 0),
    }  # fmt: skip
    projected = ("kernels", "kernel_ns", "process_kernels", "process_kernel_ns")
    assert [rows["backward"][c] for c in projected] == [2, 1100, 5, 13100]
    con.close()


def test_a_range_counts_the_launches_at_its_edges_and_none_when_it_ends_before_it_starts(tmp_path) -> None:
    """Launches (host start in us, GPU ns): main thread A1 at 100 (1000), 200 (2000), 300 (4000);
    worker A2 of the same process at 150 (8000). Ranges on A1, answers by hand."""
    path = tmp_path / "edges.sqlite"
    b = fx.ExportBuilder()
    b.gpu()
    a1 = b.process(100, "python")
    a2 = b.thread(100, 101, "worker")
    us = 1_000
    for host, gtid, dur in [(100, a1, 1000), (200, a1, 2000), (300, a1, 4000), (150, a2, 8000)]:
        b.launch_kernel(host * us, host * us + 10, dur, "k", gtid=gtid)
    b.nvtx(110 * us, 190 * us, "between", gtid=a1)  # A1 launches before and after, none inside
    b.nvtx(200 * us, 300 * us, "edges", gtid=a1)  # both ends included
    b.nvtx(300 * us, 150 * us, "inverted", gtid=a1)  # ends before it starts: holds nothing
    b.nvtx(400 * us, 500 * us, "after_all", gtid=a1)
    b.nvtx(10 * us, 50 * us, "before_all", gtid=a1)
    b.write(path)
    con = nsa.connect(tmp_path / "w.duckdb")
    nsa.ingest(con, path)
    ensure_loaded(con, ["nvtx_ranges", "nvtx_kernels"])
    got = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT name, kernels, kernel_ns, process_kernels, process_kernel_ns FROM nvtx_ranges"
        ).fetchall()
    }
    assert got == {
        "between": (0, 0, 1, 8000),
        "edges": (2, 6000, 2, 6000),
        "inverted": (0, 0, 0, 0),
        "after_all": (0, 0, 0, 0),
        "before_all": (0, 0, 0, 0),
    }
    con.close()


@pytest.mark.parametrize("prune", [True, False])
@pytest.mark.parametrize("path", ["deferred", "ranges", "kernels"])
def test_ranges_within_one_time_bucket_keep_their_launches(
    tmp_path, monkeypatch, path: str, prune: bool
) -> None:
    """The passes drop ranges that start and end in one 2^NVTX_BUCKET-ns bucket where their key
    launches nothing, before the ASOF join, where that pays (prune_pays; here forced either
    way: the same answers). Launches (host start in ns, GPU ns), B the bucket:
    main thread A1 at 2B+100 (1000), 2B+5000 (2000), 5B+10 (4000); worker A2 of the same
    process at 7B+10 (8000). Ranges on A1 at the buckets' edges, answers by hand."""
    from nsight_analytics.ingest import nvtx
    from nsight_analytics.ingest.nvtx import NVTX_BUCKET

    monkeypatch.setattr(nvtx, "prune_pays", lambda con, ranges, running: prune)

    bucket = 1 << NVTX_BUCKET
    export = tmp_path / "buckets.sqlite"
    b = fx.ExportBuilder()
    b.gpu()
    a1 = b.process(100, "python")
    a2 = b.thread(100, 101, "worker")
    for host, gtid, dur in [(2 * bucket + 100, a1, 1000), (2 * bucket + 5000, a1, 2000),
                            (5 * bucket + 10, a1, 4000), (7 * bucket + 10, a2, 8000)]:  # fmt: skip
        b.launch_kernel(host, host + 5, dur, "k", gtid=gtid)
    spans = {
        "in_bucket": (2 * bucket + 50, 2 * bucket + 200),  # holds 2B+100
        "between_in_bucket": (2 * bucket + 200, 2 * bucket + 4000),  # the bucket launches, not here
        "whole_bucket": (2 * bucket, 3 * bucket - 1),  # both of bucket 2
        "quiet_bucket": (3 * bucket + 10, 3 * bucket + 500),
        "across": (4 * bucket + 100, 5 * bucket + 100),  # from a quiet bucket to 5B+10
        "to_the_edge": (4 * bucket + 100, 5 * bucket),  # up to bucket 5, not to its launch
        "ends_on_launch": (5 * bucket + 1, 5 * bucket + 10),
        "starts_on_launch": (5 * bucket + 10, 5 * bucket + 20),
        "worker_bucket": (7 * bucket, 7 * bucket + 100),  # only A2 launches there
        "inverted": (2 * bucket + 6000, 2 * bucket + 50),
    }
    for name, (start, end) in spans.items():
        b.nvtx(start, end, name, gtid=a1)
    b.write(export)
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    rid = nsa.ingest(con, export).report_id
    cols = "kernels, kernel_ns, process_kernels, process_kernel_ns"
    if path == "kernels":
        ensure_loaded(con, ["nvtx_ranges", "nvtx_kernels"])
        got = {r[0]: r[1:] for r in con.execute(f"SELECT name, {cols} FROM nvtx_ranges").fetchall()}
    else:
        if path == "ranges":
            ensure_loaded(con, ["nvtx_ranges"])
        got = {
            r[0]: r[1:]
            for r in nsa.query(con, "nvtx_summary", report_id=rid).select(f"name, {cols}").fetchall()
        }
    assert got == {
        "in_bucket": (1, 1000, 1, 1000),
        "between_in_bucket": (0, 0, 0, 0),
        "whole_bucket": (2, 3000, 2, 3000),
        "quiet_bucket": (0, 0, 0, 0),
        "across": (1, 4000, 1, 4000),
        "to_the_edge": (0, 0, 0, 0),
        "ends_on_launch": (1, 4000, 1, 4000),
        "starts_on_launch": (1, 4000, 1, 4000),
        "worker_bucket": (0, 0, 1, 8000),
        "inverted": (0, 0, 0, 0),
    }
    con.close()


@pytest.mark.parametrize("path", ["deferred", "ranges", "kernels"])
@pytest.mark.parametrize(("ranges", "launches", "pruned"), [(5, 3, True), (4, 3, False), (2, 6, False)])
def test_the_bucket_pruning_runs_only_where_ranges_outnumber_launches(
    tmp_path, monkeypatch, path: str, ranges: int, launches: int, pruned: bool
) -> None:
    """NVTX_NEAR's semi join hashes every launch: the passes run it only where the ranges
    outnumber the launches. Thread A1 launches `launches` kernels two buckets apart, and its
    `ranges` ranges lie one bucket apart, every other one around a launch while there is one;
    worker A2 of the same process launches one kernel more, so the process pass runs too. Each
    pass (same thread, process) asked once, with the same answer."""
    from nsight_analytics.ingest import nvtx
    from nsight_analytics.ingest.nvtx import NVTX_BUCKET

    bucket = 1 << NVTX_BUCKET
    asked: list[bool] = []
    pass_sql = nvtx.pass_sql

    def recorded(keys: str, running: str, key: str, prune: bool) -> str:
        asked.append(prune)
        return pass_sql(keys, running, key, prune)

    monkeypatch.setattr(nvtx, "pass_sql", recorded)
    export = tmp_path / "gate.sqlite"
    b = fx.ExportBuilder()
    b.gpu()
    a1 = b.process(100, "python")
    a2 = b.thread(100, 101, "worker")
    for i in range(launches):
        b.launch_kernel(2 * i * bucket + 100, 2 * i * bucket + 105, 1000, "k", gtid=a1)
    b.launch_kernel(2 * launches * bucket + 100, 2 * launches * bucket + 105, 1000, "k", gtid=a2)
    held = 0
    for i in range(ranges):
        start = i * bucket + 50  # even i: around launch i/2 while there is one
        holds = i % 2 == 0 and i // 2 < launches
        held += holds
        b.nvtx(start, start + 100, f"r{i}", gtid=a1)
    b.write(export)
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    rid = nsa.ingest(con, export).report_id
    if path == "kernels":
        ensure_loaded(con, ["nvtx_ranges", "nvtx_kernels"])
        got = con.execute("SELECT sum(kernels), sum(process_kernels) FROM nvtx_ranges").fetchone()
    else:
        if path == "ranges":
            ensure_loaded(con, ["nvtx_ranges"])
        got = (
            nsa.query(con, "nvtx_summary", report_id=rid)
            .aggregate("sum(kernels), sum(process_kernels)")
            .fetchone()
        )
    # both passes' running totals hold the process's launches + 1 rows (one start each)
    assert asked == [pruned, pruned]
    assert tuple(got) == (held, held)
    con.close()
