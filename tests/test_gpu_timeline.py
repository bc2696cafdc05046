"""The stored GPU timeline (gpu_timeline): its running maxima checked against plain Python over the
same rows, worked out again when a report's GPU rows change, and read-only connections working it
out for themselves."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import duckdb
import pytest

import nsight_analytics as nsa
from nsight_analytics import api, params
from nsight_analytics.ingest import pipeline, timeline
from rows import insert, union_within

# device 0: two overlapping kernels, a memcpy and a memset inside a gap, a graph replay, rows tied
# on start (and on start and end), one row without a start and one ending before it starts;
# device 1: one kernel; a NULL device: one memcpy
KERNELS = [
    dict(report_id=1, device_id=0, pid=5, start_ns=0, end_ns=100, duration_ns=100, name="a"),
    dict(report_id=1, device_id=0, pid=5, start_ns=50, end_ns=150, duration_ns=100, name="b"),
    dict(report_id=1, device_id=0, pid=5, start_ns=400, end_ns=420, duration_ns=20, name="a"),
    dict(report_id=1, device_id=0, pid=5, start_ns=400, end_ns=420, duration_ns=20, name="b"),
    dict(report_id=1, device_id=0, pid=5, start_ns=400, end_ns=410, duration_ns=10, name="a"),
    dict(report_id=1, device_id=0, pid=5, start_ns=None, end_ns=900, duration_ns=None, name="a"),
    dict(report_id=1, device_id=0, pid=5, start_ns=950, end_ns=940, duration_ns=-10, name="a"),
    dict(report_id=1, device_id=1, pid=5, start_ns=10, end_ns=30, duration_ns=20, name="a"),
]
MEMCPY = [
    dict(report_id=1, device_id=0, pid=5, start_ns=200, end_ns=260, duration_ns=60, direction="HtoD"),
    dict(report_id=1, device_id=None, pid=5, start_ns=5, end_ns=6, duration_ns=1, direction="DtoH"),
]
MEMSET = [dict(report_id=1, device_id=0, pid=5, start_ns=250, end_ns=300, duration_ns=50)]
GRAPHS = [dict(report_id=1, device_id=0, pid=5, start_ns=500, end_ns=700, duration_ns=200, graph_id=3)]


def _fill(con) -> None:
    insert(con, "kernels", KERNELS)
    insert(con, "memcpy", MEMCPY)
    insert(con, "memset", MEMSET)
    insert(con, "graph_executions", GRAPHS)


def _expected() -> list[tuple]:
    """Every placeable row with the maxima of the rows before it (start, then end order; among
    rows tied on both, whichever order: their maxima are the same but for the tie itself)."""
    rows = [(r["device_id"], "kernel", r["start_ns"], r["end_ns"]) for r in KERNELS]
    rows += [(r["device_id"], "memcpy", r["start_ns"], r["end_ns"]) for r in MEMCPY]
    rows += [(r["device_id"], "memset", r["start_ns"], r["end_ns"]) for r in MEMSET]
    rows += [(r["device_id"], "graph", r["start_ns"], r["end_ns"]) for r in GRAPHS]
    rows = [r for r in rows if r[2] is not None and r[3] >= r[2]]
    out = []
    for dev, kind, s, e in rows:
        before = [r for r in rows if r[0] == dev and (r[2], r[3]) < (s, e)]

        def last(kinds: tuple[str, ...], before=before) -> int | None:
            ends = [r[3] for r in before if r[1] in kinds]
            return max(ends) if ends else None

        everything = last(("kernel", "memcpy", "memset", "graph"))
        through = [r for r in rows if r[0] == dev and r[2] <= s]
        out.append(
            (dev, kind, s, e, everything, last(("kernel",)), last(("graph",)), last(("memcpy", "memset")),
             union_within([(r[2], r[3]) for r in through]), max(r[3] for r in through))
        )  # fmt: skip
    return sorted(out, key=lambda r: (r[0] is None, r[0] or 0, r[2], r[3], r[1]))


def _placed_on(device: int) -> list[tuple[int, int]]:
    """(start, end) of every placeable row above on `device`."""
    return [(r["start_ns"], r["end_ns"]) for t in (KERNELS, MEMCPY, MEMSET, GRAPHS) for r in t
            if r["device_id"] == device and r["start_ns"] is not None and r["end_ns"] >= r["start_ns"]]  # fmt: skip


def _any_busy(con, device: int) -> int:
    """utilization's any_busy_ns of `device`."""
    return {r[1]: r[6] for r in nsa.query(con, "utilization").fetchall()}[device]


def _timeline(con) -> list[tuple]:
    # for rows tied on start_ns, the last one's running values cover them all: compare those
    return con.execute(
        "SELECT device_id, kind, start_ns, end_ns, prev_end_ns, prev_kernel_end_ns, prev_graph_end_ns, "
        "prev_copy_end_ns, max(busy_through_ns) OVER w, max(end_through_ns) OVER w FROM gpu_timeline "
        "WINDOW w AS (PARTITION BY report_id, device_id, start_ns) "
        "ORDER BY device_id NULLS LAST, start_ns, end_ns, kind"
    ).fetchall()


def test_running_maxima_and_union_match_python(workspace) -> None:
    _fill(workspace)
    nsa.query(workspace, "utilization")  # works the timeline out
    got, want = _timeline(workspace), _expected()
    # rows tied on start and end: the maxima before each depend on which comes first
    ties = {
        (r[0], r[2], r[3]) for r in want if sum((w[0], w[2], w[3]) == (r[0], r[2], r[3]) for w in want) > 1
    }
    assert [r for r in got if (r[0], r[2], r[3]) not in ties] == [
        r for r in want if (r[0], r[2], r[3]) not in ties
    ]
    tied = [r for r in got if (r[0], r[2], r[3]) in ties]
    assert len(tied) == 2 and {r[4] for r in tied} == {410, 420}  # the first sees 410, the second its twin
    last = workspace.execute(
        "SELECT count(*) FILTER (WHERE last_at_start), count(DISTINCT (device_id, start_ns)) FROM gpu_timeline"
    ).fetchone()
    assert last[0] == last[1]


def test_seq_is_the_order_the_maxima_count(workspace) -> None:
    """seq numbers each device's rows 1, 2, ... in (start, end) order, and the running maxima of a
    row are those of the rows with a smaller seq, tied rows included (Python over the stored
    order); a timeline stored without seq (an older nsa's) is worked out again."""
    _fill(workspace)
    nsa.query(workspace, "utilization").fetchall()
    rows = workspace.execute(
        "SELECT device_id, seq, kind, start_ns, end_ns, prev_end_ns, prev_kernel_end_ns FROM gpu_timeline "
        "ORDER BY device_id NULLS LAST, seq"
    ).fetchall()
    for dev in {r[0] for r in rows}:
        mine = [r for r in rows if r[0] == dev]
        assert [r[1] for r in mine] == list(range(1, len(mine) + 1))
        assert [(r[3], r[4]) for r in mine] == sorted((r[3], r[4]) for r in mine)
        for i, r in enumerate(mine):
            ends = [b[4] for b in mine[:i]]
            kernel_ends = [b[4] for b in mine[:i] if b[2] == "kernel"]
            assert r[5] == (max(ends) if ends else None)
            assert r[6] == (max(kernel_ends) if kernel_ends else None)
    workspace.execute("UPDATE gpu_timeline SET seq = NULL")
    assert timeline.stale(workspace) == [1]
    nsa.query(workspace, "utilization").fetchall()
    assert workspace.execute("SELECT count(*) - count(seq) FROM gpu_timeline").fetchone() == (0,)


def _check_flag(rows, flagged) -> None:
    """Each row's comm flag is whether (report, GPU, start) is `flagged`, its prev_compute_end_ns
    the latest end of the kernels not flagged and the graph executions before it (Python)."""
    for rid, dev, kind, s, e, comm, prev_compute in rows:
        assert comm == ((rid, dev, s) in flagged)
        if (dev, s, e) == (0, 400, 420):
            continue  # tied on start and end: each sees the other or not, by which comes first
        before = [r for r in rows if r[:2] == (rid, dev) and (r[3], r[4]) < (s, e)]
        compute_ends = [
            r[4] for r in before if r[2] in ("kernel", "graph") and (r[0], r[1], r[3]) not in flagged
        ]
        assert prev_compute == (max(compute_ends) if compute_ends else None), (rid, dev, kind, s, e)


_FLAG_ROWS = (
    "SELECT report_id, device_id, kind, start_ns, end_ns, comm, prev_compute_end_ns FROM gpu_timeline"
)


@pytest.mark.parametrize("first", ["utilization", "comm_overlap"])
def test_communication_flag_and_compute_maximum_match_python(workspace, first) -> None:
    """A kernel that comm_ops holds (same report, GPU, stream and start) is flagged comm, with
    the running maximum of compute's ends (the other kernels and the graph executions) before each
    row (Python over the same rows); a report without communication kernels has none, its compute
    maximum the kernels' and graphs'. Worked out only for what reads them (gpu_comm): a timeline
    built first for another query (utilization) has them NULL in reports with comm_ops, and added
    on the first use of a run query; comm_ops rows added later are noticed."""
    _fill(workspace)
    # a kernel on a stream that carries communication (7) but not one comm_ops holds
    insert(workspace, "kernels", [dict(report_id=1, device_id=0, pid=5, stream_id=7, start_ns=600,
                                       end_ns=800, duration_ns=200, name="c")])  # fmt: skip
    report2 = [
        dict(r, report_id=2) for r in KERNELS if r["start_ns"] is not None and r["end_ns"] >= r["start_ns"]
    ]
    insert(workspace, "kernels", report2)
    insert(workspace, "graph_executions", [dict(r, report_id=2) for r in GRAPHS])
    # kernel b at 50 on device 0 communicates; the op at 400 is on another stream than the
    # kernels there (NULL), the one at 10 on another GPU: neither flags a kernel
    insert(
        workspace,
        "comm_ops",
        [
            dict(report_id=1, device_id=0, stream_id=None, pid=5, start_ns=50, end_ns=150, seq=0),
            dict(report_id=1, device_id=0, stream_id=7, pid=5, start_ns=400, end_ns=420, seq=1),
            dict(report_id=1, device_id=2, stream_id=None, pid=5, start_ns=10, end_ns=30, seq=2),
        ],
    )
    if first == "utilization":
        nsa.query(workspace, "utilization").fetchall()
        rows = workspace.execute(_FLAG_ROWS).fetchall()
        assert len(rows) == 11 + 7  # report 1: 7 kernels, 2 copies, a memset, a graph; report 2: 6 + 1
        assert {(r[0], r[5], r[6]) for r in rows if r[0] == 1} == {(1, None, None)}
        _check_flag([r for r in rows if r[0] == 2], set())
        assert timeline.stale(workspace) == []
        assert timeline.stale(workspace, comm=True) == [1]
    assert timeline.ensure(workspace, comm=True) == (1 if first == "utilization" else 2)
    rows = workspace.execute(_FLAG_ROWS).fetchall()
    assert len(rows) == 11 + 7
    _check_flag(rows, {(1, 0, 50)})
    assert timeline.stale(workspace, comm=True) == []
    # an op of report 2's kernel at 10 on device 1 (stream NULL), added after the flag
    insert(workspace, "comm_ops", [dict(report_id=2, device_id=1, stream_id=None, pid=5, start_ns=10,
                                        end_ns=30, seq=0)])  # fmt: skip
    assert timeline.stale(workspace) == []
    assert timeline.stale(workspace, comm=True) == [2]
    assert timeline.ensure(workspace, comm=True) == 1
    _check_flag(workspace.execute(_FLAG_ROWS).fetchall(), {(1, 0, 50), (2, 1, 10)})
    # a timeline stored without the flag (an older nsa's): added when it is read
    workspace.execute("UPDATE gpu_timeline SET comm = NULL, prev_compute_end_ns = NULL WHERE report_id = 2")
    assert timeline.stale(workspace) == []
    assert timeline.stale(workspace, comm=True) == [2]
    nsa.query(workspace, "comm_overlap", run_id=1).fetchall()
    _check_flag(workspace.execute(_FLAG_ROWS).fetchall(), {(1, 0, 50), (2, 1, 10)})


def test_reworked_when_the_rows_change(workspace) -> None:
    _fill(workspace)
    first = nsa.query(workspace, "utilization").fetchall()
    assert timeline.stale(workspace) == []
    insert(
        workspace,
        "kernels",
        [dict(report_id=1, device_id=0, pid=5, start_ns=300, end_ns=400, duration_ns=100, name="c")],
    )
    assert timeline.stale(workspace) == [1]
    second = {r[1]: r for r in nsa.query(workspace, "utilization").fetchall()}
    assert second[0][6] == {r[1]: r for r in first}[0][6] + 100  # any_busy_ns: [300, 400] was idle
    insert(
        workspace,
        "kernels",
        [dict(report_id=2, device_id=0, pid=5, start_ns=0, end_ns=7, duration_ns=7, name="a")],
    )
    assert timeline.stale(workspace) == [2]
    workspace.execute("UPDATE kernel_rows SET end_ns = 9 WHERE report_id = 2")  # same count, other times
    assert timeline.stale(workspace) == [2]
    assert nsa.query(workspace, "utilization", report_id=2).fetchall()[0][6] == 9
    workspace.execute("DELETE FROM kernel_rows WHERE report_id = 2")
    assert timeline.stale(workspace) == [2]  # rows of a report that has none left are dropped
    nsa.query(workspace, "utilization").fetchall()
    assert workspace.execute("SELECT count(*) FROM gpu_timeline WHERE report_id = 2").fetchone() == (0,)


def test_a_read_only_copy_works_it_out_for_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    _fill(con)
    want = nsa.query(con, "utilization").fetchall()
    con.execute("DELETE FROM gpu_timeline")  # as a workspace made before the table existed
    con.close()
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(tmp_path / "w.duckdb", folder / "w.duckdb")
    (folder / "w.duckdb").chmod(0o444)
    folder.chmod(0o555)
    if os.geteuid() == 0:  # root ignores the write bits: api.writable is told what a user would see
        real = api.writable
        monkeypatch.setattr(api, "writable", lambda db=None: real(db) and Path(db or "").parent != folder)
    try:
        ro = api.reader(folder / "w.duckdb", needs={"gpu_timeline"})
        try:
            assert nsa.query(ro, "utilization").fetchall() == want
            assert ro.execute("SELECT count(*) FROM w.main.gpu_timeline").fetchone() == (
                0,
            )  # the file: unchanged
        finally:
            ro.close()
    finally:
        folder.chmod(0o755)
    # a writable one stores it, for every later reader
    ro = api.reader(tmp_path / "w.duckdb", needs={"gpu_timeline"})
    try:
        assert ro.execute("SELECT count(*) FROM gpu_timeline").fetchone()[0] == 10
        assert nsa.query(ro, "utilization").fetchall() == want
    finally:
        ro.close()


def test_worked_out_inside_the_callers_transaction(workspace) -> None:
    """A query on rows the caller changed in a transaction of its own sees them, and the caller's
    transaction goes on (a BEGIN to find out whether one is open aborted it: every later statement
    read "Current transaction is aborted"); its ROLLBACK takes the timeline back with the rows."""
    _fill(workspace)
    dev0 = _placed_on(0)
    copies = {(r["start_ns"], r["end_ns"]) for t in (MEMCPY, MEMSET) for r in t}
    busy = _any_busy(workspace, 0)
    assert busy == union_within(dev0)
    workspace.execute("BEGIN TRANSACTION")
    workspace.execute("DELETE FROM memcpy")
    workspace.execute("DELETE FROM memset")
    inside = _any_busy(workspace, 0)
    assert inside == union_within([iv for iv in dev0 if iv not in copies]) < busy
    assert workspace.execute(
        "SELECT count(*) FROM gpu_timeline WHERE kind IN ('memcpy', 'memset')"
    ).fetchone() == (0,)
    workspace.execute("ROLLBACK")
    assert _any_busy(workspace, 0) == busy
    assert workspace.execute("SELECT count(*) FROM gpu_timeline WHERE kind = 'memset'").fetchone() == (1,)


def test_utilization_is_the_python_union(workspace) -> None:
    _fill(workspace)
    got = {r[1]: r for r in nsa.query(workspace, "utilization").fetchall()}
    dev0 = _placed_on(0)
    assert got[0][3] == 700 and got[0][6] == union_within(dev0)  # span_ns, any_busy_ns


def test_a_dataset_carries_it_and_an_older_one_works_it_out(tmp_path: Path) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    _fill(con)
    insert(con, "reports", [dict(report_id=1, format="nsys", source_path="a.sqlite", sha256="ab")])
    want = nsa.query(con, "utilization").fetchall()
    con.execute("DELETE FROM gpu_timeline")  # export works it out first
    con.close()
    api.export(tmp_path / "ds", db=tmp_path / "w.duckdb")
    assert list((tmp_path / "ds" / "gpu_timeline").rglob("*.parquet"))
    ds = api.connect(tmp_path / "ds")
    try:
        assert timeline.stale(ds) == []
        assert nsa.query(ds, "utilization").fetchall() == want
    finally:
        ds.close()
    shutil.rmtree(tmp_path / "ds" / "gpu_timeline")  # as written by an nsa without the table
    ds = api.connect(tmp_path / "ds")
    try:
        assert timeline.stale(ds) == [1]
        assert nsa.query(ds, "utilization").fetchall() == want  # worked out into a TEMP table
    finally:
        ds.close()


def test_worked_out_under_the_inputs_size_as_the_deferred_steps(tmp_path: Path, monkeypatch) -> None:
    # A real export shipped with the tests; small, so the cap is the floor (256 MiB). DuckDB's
    # limit while the timeline is built is read from inside the build's timing block.
    from contextlib import contextmanager

    export = Path(__file__).parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite"
    con = api.connect(tmp_path / "w.duckdb", load_deferred=False)
    api.ingest(con, export)
    before = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    seen: list[float | None] = []

    @contextmanager
    def spy(log, what):
        seen.append(params.limit_bytes(con.execute("SELECT current_setting('memory_limit')").fetchone()[0]))
        yield

    monkeypatch.setattr(timeline, "timed", spy)
    assert timeline.ensure(con) == 1
    cap = max(pipeline.MEMORY_FLOOR, export.stat().st_size - pipeline.MEMORY_OUTSIDE)
    assert len(seen) == 1 and seen[0] is not None and seen[0] <= cap
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == before


def test_a_build_out_of_memory_under_the_cap_runs_again_without_it(workspace, monkeypatch) -> None:
    # DuckDB spills most of the build past the cap, but an allocation at its edge can still fail
    # (seen once in eight launch-call builds of a 596 MB export, not reproducible on demand): the
    # first build here fails as that one did, rolled back; the second, outside the cap, gives the
    # rows an undisturbed build gives
    tries: list[str | None] = []
    build = timeline._build

    def failing_once(con, todo, *wanted):
        if not tries:
            tries.append(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
            raise duckdb.OutOfMemoryException("could not allocate block of size 256.0 KiB")
        tries.append(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        return build(con, todo, *wanted)

    _fill(workspace)
    workspace.execute("SET memory_limit = '2GB'")
    with monkeypatch.context() as m:
        m.setattr(timeline, "_build", failing_once)
        assert timeline.ensure(workspace) == 1
    capped, uncapped = tries
    assert capped != uncapped == workspace.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    got = _timeline(workspace)
    workspace.execute("DELETE FROM gpu_timeline")
    assert timeline.ensure(workspace) == 1
    assert _timeline(workspace) == got


def test_a_build_out_of_memory_inside_another_cap_runs_again_past_both(workspace, monkeypatch) -> None:
    # `nsa report` and `nsa query` hold a cap of their own around the first timeline use: the
    # second build goes past it too, to the limit that outer cap lowered
    tries: list[str] = []
    build = timeline._build

    def failing_once(con, todo, *wanted):
        tries.append(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        if len(tries) == 1:
            raise duckdb.OutOfMemoryException("could not allocate block of size 256.0 KiB")
        return build(con, todo, *wanted)

    _fill(workspace)
    workspace.execute("SET memory_limit = '2GiB'")  # shown as set: '2GB' shows as a rounded '1.8 GiB'
    before = workspace.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    with monkeypatch.context() as m:
        m.setattr(timeline, "_build", failing_once)
        with pipeline.memory_cap(workspace, [1]):
            capped = workspace.execute("SELECT current_setting('memory_limit')").fetchone()[0]
            assert timeline.ensure(workspace) == 1
            assert workspace.execute("SELECT current_setting('memory_limit')").fetchone()[0] == capped
    assert tries == [capped, before] and capped != before


class _Formats(str):
    """An SQL template of timeline.py (_SIGNATURE: a staleness scan of the GPU tables; _BUILD: a
    sort of the timeline) counting how often it is formatted into a statement."""

    calls = 0

    def format(self, *args, **kwargs) -> str:  # type: ignore[override]
        self.calls += 1
        return str(self).format(*args, **kwargs)


def test_one_staleness_scan_per_query_and_none_on_a_frozen_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    _fill(con)
    scans = _Formats(timeline._SIGNATURE)
    monkeypatch.setattr(timeline, "_SIGNATURE", scans)
    want = nsa.query(con, "utilization").fetchall()
    assert scans.calls == 1  # materialise's, not again in queries.run
    nsa.query(con, "utilization").fetchall()
    assert scans.calls == 2  # a writable connection may have changed the rows: checked again
    con.close()
    scans.calls = 0
    ro = api.reader(tmp_path / "w.duckdb", needs={"gpu_timeline"})  # as `nsa query` opens it
    try:
        assert api.query(ro, "utilization").fetchall() == want
        assert scans.calls == 1  # the reader's check: materialise and queries.run trust it
        assert api.query(ro, "small_kernel_storms").fetchall() == []
        assert scans.calls == 1  # nothing can write the file while it is open read-only
        # a TEMP copy of a GPU table (this connection can write it): checked every time
        ro.execute("CREATE TEMP TABLE memset AS SELECT * FROM w.main.memset")
        ro.execute("UPDATE memset SET end_ns = end_ns + 1000")
        assert timeline.stale(ro) == [1]
        assert scans.calls == 2
    finally:
        ro.close()


def test_storm_top_name_ties_go_to_the_first_seen_and_pauses_to_their_storm(workspace) -> None:
    # max_kernel_ns=10, max_gap_ns=5, min_kernels=2. Storm 1: 'b' [0, 3], 'a' [5, 8] (one each:
    # 'b' came first, though 'a' sorts first); a 91 ns kernel [9, 100] ends it. Storm 2: 'c'
    # [12, 14] and 'a' [12, 15]: same start, 'c' ends first so is seen first. Pauses of the
    # device: (3, 5) inside storm 1's window [0, 8]; (8, 9) starts in it but ends after it.
    k = dict(report_id=1, device_id=0, pid=5)
    insert(
        workspace,
        "kernels",
        [
            dict(k, start_ns=0, end_ns=3, duration_ns=3, name="b"),
            dict(k, start_ns=5, end_ns=8, duration_ns=3, name="a"),
            dict(k, start_ns=9, end_ns=100, duration_ns=91, name="big"),
            dict(k, start_ns=12, end_ns=14, duration_ns=2, name="c"),
            dict(k, start_ns=12, end_ns=15, duration_ns=3, name="a"),
        ],
    )
    rows = nsa.query(
        workspace, "small_kernel_storms", max_kernel_ns=10, max_gap_ns=5, min_kernels=2, max_busy_pct=100.0
    ).fetchall()
    # report, device, start, end, window, kernels, busy, busy_pct, avg, launches/s, top_name, idle
    assert [(r[2], r[3], r[5], r[6], r[10], r[11]) for r in rows] == [
        (0, 8, 2, 6, "b", 2),  # busy: 3 + 3; idle: the pause (3, 5) only
        (12, 15, 2, 2, "c", 0),  # busy: 'c' 2, 'a' adds nothing past the big kernel's end (100)
    ]


def test_storm_between_other_activities(workspace) -> None:
    # max_kernel_ns=10, max_gap_ns=5, min_kernels=3. A 50 ns kernel [0, 50] is a break; a memcpy
    # [52, 54] comes before the storm's first kernel (its pause (50, 52) is not the storm's); the
    # storm: 'a' [55, 57] (5 ns after the big kernel: no pause break), a memcpy [59, 60], 'b'
    # [61, 63], 'b' [64, 66]; a 30 ns kernel [70, 100] ends it. Then 'a' [101, 103] and two memcpys
    # [104, 105], [106, 107] before a 92 ns kernel: three rows, one kernel, no storm.
    k = dict(report_id=1, device_id=0, pid=5)
    insert(
        workspace,
        "kernels",
        [
            dict(k, start_ns=0, end_ns=50, duration_ns=50, name="big"),
            dict(k, start_ns=55, end_ns=57, duration_ns=2, name="a"),
            dict(k, start_ns=61, end_ns=63, duration_ns=2, name="b"),
            dict(k, start_ns=64, end_ns=66, duration_ns=2, name="b"),
            dict(k, start_ns=70, end_ns=100, duration_ns=30, name="big"),
            dict(k, start_ns=101, end_ns=103, duration_ns=2, name="a"),
            dict(k, start_ns=108, end_ns=200, duration_ns=92, name="big"),
        ],
    )
    insert(
        workspace,
        "memcpy",
        [
            dict(k, start_ns=s, end_ns=e, duration_ns=e - s)
            for s, e in ((52, 54), (59, 60), (104, 105), (106, 107))
        ],
    )
    rows = nsa.query(
        workspace, "small_kernel_storms", max_kernel_ns=10, max_gap_ns=5, min_kernels=3, max_busy_pct=100.0
    ).fetchall()
    # start, end, kernels, busy (2 + 2 + 2), top name, idle: pauses (57, 59), (60, 61), (63, 64)
    assert [(r[2], r[3], r[5], r[6], r[10], r[11]) for r in rows] == [(55, 66, 3, 6, "b", 4)]


def test_storm_thresholds_left_null(workspace) -> None:
    # Three 2 ns kernels [0, 2], [4, 6], [1000, 1002]: the third starts 994 ns after the second
    # ended. No size threshold (max_kernel_ns NULL): no kernel is tiny, so no storm. No pause
    # threshold (max_gap_ns NULL): no pause ends a storm, so all three are one; with a 5 ns one,
    # the third stands alone and two are too few.
    k = dict(report_id=1, device_id=0, pid=5, name="a")
    insert(workspace, "kernels", [dict(k, start_ns=s, end_ns=s + 2, duration_ns=2) for s in (0, 4, 1000)])

    def storms(**params: object) -> list[tuple[object, ...]]:
        rows = nsa.query(
            workspace, "small_kernel_storms", min_kernels=3, max_busy_pct=100.0, **params
        ).fetchall()
        return [(r[2], r[3], r[5], r[6]) for r in rows]  # start, end, kernels, busy

    assert storms(max_kernel_ns=None, max_gap_ns=5000) == []
    assert storms(max_kernel_ns=10, max_gap_ns=None) == [(0, 1002, 3, 6)]
    assert storms(max_kernel_ns=10, max_gap_ns=5) == []


def test_storm_names_and_pauses_of_the_kept_storms_only(workspace) -> None:
    # max_kernel_ns=10, max_gap_ns=5, min_kernels=2. Storm 1: 'a' [0, 2], 'a' [2, 4]: busy 4 of
    # its 4 ns window (100 %). A 95 ns kernel [5, 100] ends it. Storm 2: 'b' [103, 105], 'c'
    # [109, 110], 'c' [114, 115]: busy 2 + 1 + 1 = 4 of 12 ns (33 %), idle (105, 109) and
    # (110, 114); the pause before 'b' (100, 103) is not its own. At max_busy_pct 50 only storm 2
    # is kept, with its own top name and pauses.
    k = dict(report_id=1, device_id=0, pid=5)
    insert(
        workspace,
        "kernels",
        [
            dict(k, start_ns=s, end_ns=e, duration_ns=e - s, name=n)
            for s, e, n in (
                (0, 2, "a"),
                (2, 4, "a"),
                (5, 100, "big"),
                (103, 105, "b"),
                (109, 110, "c"),
                (114, 115, "c"),
            )
        ],
    )

    def storms(max_busy_pct: float) -> list[tuple[object, ...]]:
        rows = nsa.query(
            workspace,
            "small_kernel_storms",
            max_kernel_ns=10,
            max_gap_ns=5,
            min_kernels=2,
            max_busy_pct=max_busy_pct,
        ).fetchall()
        return [(r[2], r[3], r[5], r[6], r[10], r[11]) for r in rows]  # start, end, kernels, busy, top, idle

    assert storms(50.0) == [(103, 115, 3, 4, "c", 8)]
    assert storms(100.0) == [(0, 4, 2, 4, "a", 0), (103, 115, 3, 4, "c", 8)]


def test_launch_calls_match_the_exports_own_join(tmp_path: Path) -> None:
    # The launch columns (worked out only for what reads them) against nsys' own tables: each
    # kernel's CUDA API call with the same correlation id in the same process (pid = bits 24-47
    # of globalTid / globalPid), summed in SQLite.
    import sqlite3

    export = Path(__file__).parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite"
    src = sqlite3.connect(export)
    try:
        want = src.execute(
            'SELECT count(*), sum(r.start), sum(r."end"), sum(r.globalTid) '
            "FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r "
            "ON r.correlationId = k.correlationId "
            "AND (r.globalTid >> 24) & 16777215 = (k.globalPid >> 24) & 16777215"
        ).fetchone()
        kernels = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    finally:
        src.close()
    con = api.connect(tmp_path / "w.duckdb", load_deferred=False)
    api.ingest(con, export)  # cuda_api left in the export
    linked = (
        "SELECT count(*) FILTER (WHERE api_calls > 0), sum(api_start_ns), sum(api_end_ns), "
        "sum(api_global_tid), count(api_calls) FROM gpu_timeline WHERE kind = 'kernel'"
    )
    nsa.query(con, "utilization").fetchall()  # the timeline alone: no launch calls, cuda_api not loaded
    assert con.execute(linked).fetchone() == (0, None, None, None, 0)
    assert timeline.stale(con) == [] and timeline.stale(con, launches=True) == []  # calls still in the export
    rows = nsa.query(con, "launch_delay").fetchall()  # loads cuda_api, works the launch calls out
    assert con.execute(linked).fetchone() == (*want, kernels)
    assert sum(r[2] for r in rows) == want[0]  # launches
    assert timeline.stale(con, launches=True) == []


def _three_launches(con) -> None:
    """Kernel 1 launched by two calls, kernel 2 by none, kernel 3 in another process than its call."""
    k = dict(report_id=1, device_id=0, duration_ns=10, name="a")
    insert(
        con,
        "kernels",
        [
            dict(k, pid=5, correlation_id=1, start_ns=100, end_ns=110),
            dict(k, pid=5, correlation_id=2, start_ns=200, end_ns=210),
            dict(k, pid=6, correlation_id=3, start_ns=300, end_ns=310),
        ],
    )
    c = dict(report_id=1, pid=5, name="cudaLaunchKernel")
    insert(
        con,
        "cuda_api",
        [
            dict(c, correlation_id=1, start_ns=10, end_ns=20, global_tid=None),
            dict(c, correlation_id=1, start_ns=30, end_ns=60, global_tid=77),
            dict(c, correlation_id=3, start_ns=40, end_ns=50, global_tid=78),
        ],
    )


def test_launch_calls_of_an_older_timeline_are_worked_out_when_read(workspace) -> None:
    _three_launches(workspace)
    nsa.query(workspace, "utilization").fetchall()
    workspace.execute("UPDATE gpu_timeline SET api_calls = NULL")  # as an nsa before the columns left it
    assert timeline.stale(workspace) == [] and timeline.stale(workspace, launches=True) == [1]
    # launches 1, avg_cpu_ns 50 (10 to 60), delay 100 - 60
    assert [r[2:6] for r in nsa.query(workspace, "launch_delay").fetchall()] == [(1, 50.0, 10.0, 40.0)]
    assert workspace.execute(
        "SELECT correlation_id, api_calls, api_start_ns, api_end_ns, api_global_tid "
        "FROM gpu_timeline ORDER BY start_ns"
    ).fetchall() == [(1, 2, 10, 60, 77), (2, 0, None, None, None), (3, 0, None, None, None)]


def test_launch_calls_are_added_to_a_stored_timeline_without_sorting_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    _three_launches(con)
    builds = _Formats(timeline._BUILD)
    monkeypatch.setattr(timeline, "_BUILD", builds)
    linked = "SELECT * FROM gpu_timeline ORDER BY start_ns"
    nsa.query(con, "utilization").fetchall()  # the timeline alone
    assert builds.calls == 1 and timeline.stale(con, launches=True) == [1]
    want = [(1, 50.0, 10.0, 40.0)]  # launches 1, avg_cpu_ns 50 (10 to 60), delay 100 - 60
    assert [r[2:6] for r in nsa.query(con, "launch_delay").fetchall()] == want
    assert builds.calls == 1  # the launch calls added to the stored rows: no second sort
    assert con.execute(
        "SELECT correlation_id, api_calls, api_start_ns, api_end_ns, api_global_tid FROM gpu_timeline ORDER BY start_ns"
    ).fetchall() == [(1, 2, 10, 60, 77), (2, 0, None, None, None), (3, 0, None, None, None)]
    added = con.execute(linked).fetchall()
    con.execute("DELETE FROM gpu_timeline")
    assert timeline.ensure(con, launches=True) == 1 and builds.calls == 2
    assert con.execute(linked).fetchall() == added  # as a build with them from the start
    # a stored timeline without them, read through a read-only file: added to this connection's
    # copy, then known to be there (no staleness scan per query)
    con.execute(
        "UPDATE gpu_timeline SET api_calls = NULL, api_start_ns = NULL, api_end_ns = NULL, api_global_tid = NULL"
    )
    con.close()
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(tmp_path / "w.duckdb", folder / "w.duckdb")
    if os.geteuid() == 0:  # root ignores the write bits: api.writable is told what a user would see
        real = api.writable
        monkeypatch.setattr(api, "writable", lambda db=None: real(db) and Path(db or "").parent != folder)
    (folder / "w.duckdb").chmod(0o444)
    folder.chmod(0o555)
    try:
        ro = api.reader(folder / "w.duckdb", needs={"gpu_timeline", "gpu_launches"})
        try:
            scans = _Formats(timeline._SIGNATURE)
            monkeypatch.setattr(timeline, "_SIGNATURE", scans)
            assert [r[2:6] for r in api.query(ro, "launch_delay").fetchall()] == want
            assert [r[2:6] for r in api.query(ro, "launch_delay").fetchall()] == want
            assert scans.calls == 0  # the reader's materialise found them added: trusted since
            assert ro.execute(linked).fetchall() == added and builds.calls == 2
            assert ro.execute("SELECT count(api_calls) FROM w.main.gpu_timeline").fetchone() == (
                0,
            )  # the file
        finally:
            ro.close()
    finally:
        folder.chmod(0o755)


def test_gaps_edges_of_rows_tied_at_the_gap_end(workspace) -> None:
    # device 0, min_gap_ns=1000: 'z' [0, 100]; at 2000 four rows start ('x' ends first, at
    # 2005); at 5000 'b', a memcpy and 'a' start and end together (a kernel before a memcpy,
    # 'a' before 'b'); at 8000 'solo' alone; at 9500 a memcpy alone
    k = dict(report_id=1, device_id=0, pid=5)
    kernels = [
        dict(k, start_ns=0, end_ns=100, duration_ns=100, name="z"),
        dict(k, start_ns=2000, end_ns=2010, duration_ns=10, name="b"),
        dict(k, start_ns=2000, end_ns=2010, duration_ns=10, name="a"),
        dict(k, start_ns=2000, end_ns=2005, duration_ns=5, name="x"),
        dict(k, start_ns=5000, end_ns=5010, duration_ns=10, name="b"),
        dict(k, start_ns=5000, end_ns=5010, duration_ns=10, name="a"),
        dict(k, start_ns=8000, end_ns=8100, duration_ns=100, name="solo"),
    ]
    copies = [
        dict(k, start_ns=2000, end_ns=2010, duration_ns=10, direction="HtoD"),
        dict(k, start_ns=5000, end_ns=5010, duration_ns=10, direction="HtoD"),
        dict(k, start_ns=9500, end_ns=9550, duration_ns=50, direction="HtoD"),
    ]
    insert(workspace, "kernels", kernels)
    insert(workspace, "memcpy", copies)
    # the reference: idle stretches of the union; the row after a gap is the first of those
    # starting at its end in (end, kind, label) order, the one before the least label ending at its start
    rows = [(r["start_ns"], r["end_ns"], "kernel", r["name"]) for r in kernels]
    rows += [(r["start_ns"], r["end_ns"], "memcpy", "memcpy HtoD") for r in copies]
    islands: list[list[int]] = []
    for s, e in sorted((s, e) for s, e, _, _ in rows):
        if islands and s <= islands[-1][1]:
            islands[-1][1] = max(islands[-1][1], e)
        else:
            islands.append([s, e])
    expected = []
    for (_, gap_start), (gap_end, _) in itertools.pairwise(islands):
        if gap_end - gap_start >= 1000:
            after = min((e, kind, label) for s, e, kind, label in rows if s == gap_end)[2]
            before = min(label for _, e, _, label in rows if e == gap_start)
            expected.append((gap_start, gap_end, before, after))
    got = nsa.query(workspace, "gaps", min_gap_ns=1000).fetchall()
    assert expected == [
        (100, 2000, "z", "x"),
        (2010, 5000, "a", "a"),
        (5010, 8000, "a", "solo"),
        (8100, 9500, "solo", "memcpy HtoD"),
    ]
    assert [(r[2], r[3], r[5], r[6]) for r in got] == expected


def test_gaps_labels_of_two_reports_kernels_copies_and_unnamed(workspace) -> None:
    # gaps carry kernel names as numbers through the joins and the sort: the names of two reports
    # (each numbered in its own report), a copy's label against kernel names ending with it, and
    # kernels without a name ('(unnamed kernel)') or with only a short name
    kernels = [
        # report 1: 'zz' and a memcpy end together at 100 ('memcpy HtoD' < 'zz'); 'm' then alone
        dict(report_id=1, device_id=0, pid=5, start_ns=0, end_ns=100, duration_ns=100, name="zz"),
        dict(report_id=1, device_id=0, pid=5, start_ns=5000, end_ns=5100, duration_ns=100, name="m"),
        # an unnamed kernel and 'b' end together at 9000; then a kernel with only a short name
        dict(report_id=1, device_id=0, pid=5, start_ns=8000, end_ns=9000, duration_ns=1000),
        dict(report_id=1, device_id=0, pid=5, start_ns=8500, end_ns=9000, duration_ns=500, name="b"),
        dict(report_id=1, device_id=0, pid=5, start_ns=12000, end_ns=12100, duration_ns=100, short_name="sn"),
        # report 2: its own names, 'a' and 'zz' ending together (its 'zz' is another name id)
        dict(report_id=2, device_id=0, pid=7, start_ns=0, end_ns=300, duration_ns=300, name="zz"),
        dict(report_id=2, device_id=0, pid=7, start_ns=200, end_ns=300, duration_ns=100, name="a"),
        dict(report_id=2, device_id=0, pid=7, start_ns=4000, end_ns=4100, duration_ns=100, name="c"),
        dict(report_id=2, device_id=0, pid=7, start_ns=9000, end_ns=9050, duration_ns=50),
    ]
    copies = [
        dict(report_id=1, device_id=0, pid=5, start_ns=50, end_ns=100, duration_ns=50, direction="HtoD")
    ]
    insert(workspace, "kernels", kernels)
    insert(workspace, "memcpy", copies)
    workspace.execute("INSERT INTO reports (report_id, source_path) VALUES (1, 'one'), (2, 'two')")

    def label(r: dict) -> str:
        return (
            "memcpy HtoD" if "direction" in r else r.get("name") or r.get("short_name") or "(unnamed kernel)"
        )

    expected = []
    for rid in (1, 2):
        rows = [(r["start_ns"], r["end_ns"], label(r)) for r in kernels + copies if r["report_id"] == rid]
        ends = sorted(rows)
        for (_, e0, _), (s1, _, _) in itertools.pairwise(ends):
            if s1 - e0 >= 1000:
                before = min(lab for _, e, lab in rows if e == e0)
                after = min((e, lab) for s, e, lab in rows if s == s1)[1]
                expected.append((rid, e0, s1, before, after))
    assert expected == [
        (1, 100, 5000, "memcpy HtoD", "m"),
        (1, 5100, 8000, "m", "(unnamed kernel)"),
        (1, 9000, 12000, "(unnamed kernel)", "sn"),
        (2, 300, 4000, "a", "c"),
        (2, 4100, 9000, "c", "(unnamed kernel)"),
    ]
    got = nsa.query(workspace, "gaps", min_gap_ns=1000).fetchall()
    assert [(r[0], r[2], r[3], r[5], r[6]) for r in got] == expected
