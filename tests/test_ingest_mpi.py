"""A C++ MPI program captured with nsys 2025.3 (tests/data/README.md, `busy/mpi/`): its MPI calls
(nsys' MPI event tables, not NVTX ranges) become host waits, its CPU samples rows of cpu_samples.
Expected numbers come from plain sqlite3 on the gunzipped exports."""

from __future__ import annotations

import re
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

import nsight_analytics as nsa
from rows import gunzipped_sqlite

DATA = Path(__file__).resolve().parent / "data" / "busy" / "mpi"
RANKS = {r: DATA / f"h100_nsys2025.3_mpi_loop_rank{r}.sqlite.gz" for r in (0, 1)}
DEMO = Path(nsa.__file__).resolve().parent / "data" / "demo_pageable_h2d.sqlite"
MPI_TABLES = ("MPI_COLLECTIVES_EVENTS", "MPI_P2P_EVENTS", "MPI_START_WAIT_EVENTS", "MPI_OTHER_EVENTS")
ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[int, sqlite3.Connection]:
    folder = tmp_path_factory.mktemp("mpi")
    return {r: gunzipped_sqlite(path, folder) for r, path in RANKS.items()}


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory):
    """Both ranks ingested the default way (host tables deferred), then loaded on first use."""
    con = nsa.connect(tmp_path_factory.mktemp("ws") / "w.duckdb")
    ids = {r: nsa.ingest(con, path).report_id for r, path in RANKS.items()}
    nsa.api.materialise(con, {"host_waits", "cpu_samples", "nvtx_ranges"})
    yield con, ids
    con.close()


def tables(db: sqlite3.Connection) -> set[str]:
    return {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.mark.parametrize("rank", [0, 1])
def test_mpi_calls_are_host_waits(exports, ws, rank: int) -> None:
    db, (con, ids) = exports[rank], ws
    rid = ids[rank]
    calls: dict[str, tuple[int, int]] = {}
    for table in sorted(tables(db) & set(MPI_TABLES)):
        for name, n, ns in db.execute(
            f'SELECT s.value, count(*), sum(e."end" - e.start) FROM {table} e '
            "JOIN StringIds s ON s.id = e.textId GROUP BY 1"
        ):
            calls[name] = (n, ns)
    # the capture's MPI: 30 all-reduces, and MPI_Init / MPI_Finalize in MPI_OTHER_EVENTS
    assert set(calls) == {"MPI_Allreduce", "MPI_Init", "MPI_Finalize"} and calls["MPI_Allreduce"][0] == 30
    got = {
        name: (n, int(ns))
        for name, n, ns in con.execute(
            "SELECT name, count(*), sum(duration_ns) FROM host_waits WHERE report_id = ? AND source = 'mpi' "
            "GROUP BY 1",
            [rid],
        ).fetchall()
    }
    # set-up and tear-down are not waits of the loop
    assert got == {"MPI_Allreduce": calls["MPI_Allreduce"]}
    threads = set(
        db.execute(
            "SELECT DISTINCT globalTid, (globalTid >> 24) & 16777215, globalTid & 16777215 FROM MPI_COLLECTIVES_EVENTS"
        ).fetchall()
    )
    got_threads = set(
        con.execute(
            "SELECT DISTINCT global_tid, pid, tid FROM host_waits WHERE report_id = ? AND source = 'mpi'",
            [rid],
        ).fetchall()
    )
    assert got_threads == threads
    kinds = con.execute("SELECT activity_kinds FROM reports WHERE report_id = ?", [rid]).fetchone()[0]
    assert "mpi" in kinds and "cpu_samples" in kinds


def test_rank0_waits_in_the_allreduce(exports, ws) -> None:
    # rank 0 finishes its host work first and waits for rank 1 in every all-reduce
    totals = {}
    for rank, db in exports.items():
        (ns,) = db.execute(
            'SELECT sum(e."end" - e.start) FROM MPI_COLLECTIVES_EVENTS e JOIN StringIds s ON s.id = e.textId '
            "WHERE s.value = 'MPI_Allreduce'"
        ).fetchone()
        totals[rank] = ns
    assert totals[0] == 77_311_624 and totals[1] == 4_777_273  # tests/data/README.md: 77.312 / 4.777 ms
    con, ids = ws
    got = dict(
        con.execute(
            "SELECT report_id, sum(duration_ns) FROM host_waits WHERE name = 'MPI_Allreduce' GROUP BY 1"
        ).fetchall()
    )
    assert {r: int(got[ids[r]]) for r in ids} == totals


def _expected_samples(db: sqlite3.Connection) -> list[tuple]:
    """(tid, ts, leaf, leaf module, function, its module, its depth, frames) per sample, by Python."""
    frames: dict[int, list[tuple]] = {}
    for sid, depth, symbol, module, unresolved in db.execute(
        "SELECT c.id, c.stackDepth, s.value, m.value, c.unresolved FROM SAMPLING_CALLCHAINS c "
        "JOIN StringIds s ON s.id = c.symbol JOIN StringIds m ON m.id = c.module"
    ):
        frames.setdefault(sid, []).append((depth, symbol, module, unresolved))
    out = []
    for sid, ts, gtid in db.execute("SELECT id, start, globalTid FROM COMPOSITE_EVENTS"):
        chain = sorted(frames.get(sid, []))
        named = [f for f in chain if not f[3] and not f[1].startswith("[") and not ADDRESS.fullmatch(f[1])]
        first = named[0] if named else (None, None, None, None)
        leaf = chain[0] if chain else (None, None, None, None)
        symbols = [f[1] for f in chain] or None
        out.append((gtid & 0xFFFFFF, ts, leaf[1], leaf[2], first[1], first[2], first[0], symbols))
    return sorted(out, key=repr)


@pytest.mark.parametrize("rank", [0, 1])
def test_cpu_samples(exports, ws, rank: int) -> None:
    db, (con, ids) = exports[rank], ws
    rid = ids[rank]
    per_thread = dict(db.execute("SELECT globalTid & 16777215, count(*) FROM COMPOSITE_EVENTS GROUP BY 1"))
    assert sum(per_thread.values()) == (136, 153)[rank]  # tests/data/README.md
    got = dict(
        con.execute("SELECT tid, count(*) FROM cpu_samples WHERE report_id = ? GROUP BY 1", [rid]).fetchall()
    )
    assert got == per_thread
    rows = con.execute(
        "SELECT tid, ts_ns, leaf, leaf_module, function, function_module, function_depth, frames "
        "FROM cpu_samples WHERE report_id = ?",
        [rid],
    ).fetchall()
    assert sorted(rows, key=repr) == _expected_samples(db)


@pytest.mark.parametrize("rank", [0, 1])
def test_samples_say_what_host_work_ran(exports, ws, rank: int) -> None:
    # host_compute is inlined: every sample of the main thread inside an NVTX `host_work` range is in main
    db, (con, ids) = exports[rank], ws
    expected = Counter(
        sym
        for (sym,) in db.execute(
            "SELECT s.value FROM COMPOSITE_EVENTS c JOIN NVTX_EVENTS n ON n.globalTid = c.globalTid "
            "AND c.start BETWEEN n.start AND n.\"end\" AND n.text = 'host_work' "
            "JOIN SAMPLING_CALLCHAINS f ON f.id = c.id AND f.stackDepth = 0 JOIN StringIds s ON s.id = f.symbol"
        )
    )
    assert expected == Counter({"main": (30, 60)[rank]})  # tests/data/README.md
    got = Counter(
        dict(
            con.execute(
                "SELECT c.function, count(*) FROM cpu_samples c JOIN nvtx_ranges n ON n.report_id = c.report_id "
                "AND n.global_tid = c.global_tid AND c.ts_ns BETWEEN n.start_ns AND n.end_ns "
                "WHERE c.report_id = ? AND n.name = 'host_work' GROUP BY 1",
                [ids[rank]],
            ).fetchall()
        )
    )
    assert got == expected


def test_columns_that_vary(exports, tmp_path: Path) -> None:
    """Exports drop columns between versions: what is missing is NULL, the rest still read."""
    src = Path(exports[0].execute("PRAGMA database_list").fetchone()[2])
    path = tmp_path / "trimmed.sqlite"
    shutil.copy(src, path)
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE MPI_COLLECTIVES_EVENTS DROP COLUMN globalTid")
        db.execute("ALTER TABLE SAMPLING_CALLCHAINS DROP COLUMN unresolved")
        db.execute("ALTER TABLE SAMPLING_CALLCHAINS DROP COLUMN module")
        (mains,) = db.execute(
            "SELECT count(*) FROM SAMPLING_CALLCHAINS c JOIN StringIds s ON s.id = c.symbol "
            "WHERE c.stackDepth = 0 AND s.value = 'main'"
        ).fetchone()
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path, defer=()).report_id
    waits = con.execute(
        "SELECT count(*), count(pid), count(global_tid) FROM host_waits WHERE report_id = ? AND source = 'mpi'",
        [rid],
    ).fetchone()
    assert waits == (30, 0, 0)
    samples = con.execute(
        "SELECT count(*), count(leaf_module), count(*) FILTER (WHERE leaf = 'main' AND function = 'main') "
        "FROM cpu_samples WHERE report_id = ?",
        [rid],
    ).fetchone()
    assert samples == (136, 0, mains)
    con.close()


def test_an_export_without_mpi_or_samples(tmp_path: Path) -> None:
    with sqlite3.connect(f"file:{DEMO}?mode=ro", uri=True) as db:
        assert not tables(db) & {*MPI_TABLES, "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS"}
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, DEMO, defer=()).report_id
    assert con.execute("SELECT count(*) FROM cpu_samples").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM host_waits WHERE source = 'mpi'").fetchone()[0] == 0
    kinds = con.execute("SELECT activity_kinds FROM reports WHERE report_id = ?", [rid]).fetchone()[0]
    assert "mpi" not in kinds and "cpu_samples" not in kinds
    con.close()


def test_every_mpi_table_and_only_blocking_calls(exports, tmp_path: Path) -> None:
    """Point-to-point, start/wait and other calls written into a copy of rank 0's export (the table
    shapes of nsys 2025.3): the calls that block for communication are waits, the rest are not."""
    src = Path(exports[0].execute("PRAGMA database_list").fetchone()[2])
    path = tmp_path / "p2p.sqlite"
    shutil.copy(src, path)
    gtid = exports[0].execute("SELECT globalTid FROM MPI_COLLECTIVES_EVENTS LIMIT 1").fetchone()[0]
    calls = {
        "MPI_P2P_EVENTS": ["MPI_Send", "MPI_Recv", "MPI_Isend", "MPI_Irecv", "MPI_Sendrecv"],
        "MPI_START_WAIT_EVENTS": ["MPI_Wait", "MPI_Waitall", "MPI_Start"],
        "MPI_OTHER_EVENTS": ["MPI_Barrier", "MPI_Comm_rank", "MPI_Test", "MPI_Probe"],
    }
    blocking = {"MPI_Send", "MPI_Recv", "MPI_Sendrecv", "MPI_Wait", "MPI_Waitall", "MPI_Barrier", "MPI_Probe"}
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE MPI_P2P_EVENTS (start INTEGER NOT NULL, end INTEGER, globalTid INTEGER, textId INTEGER, "
            "commHandle INTEGER, tag INTEGER, remoteRank INTEGER, size INTEGER, requestHandle INTEGER)"
        )
        db.execute(
            "CREATE TABLE MPI_START_WAIT_EVENTS (start INTEGER NOT NULL, end INTEGER, globalTid INTEGER, "
            "textId INTEGER, requestHandle INTEGER)"
        )
        (next_id,) = db.execute("SELECT max(id) + 1 FROM StringIds").fetchone()
        t = 10_000_000_000  # after the capture: no step or gap moves
        ids = {}
        for table, names in calls.items():
            for name in names:
                ids[name] = next_id
                db.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (next_id, name))
                db.execute(
                    f'INSERT INTO {table} (start, "end", globalTid, textId) VALUES (?, ?, ?, ?)',
                    (t, t + 1000, gtid, next_id),
                )
                next_id, t = next_id + 1, t + 2000
        # an unfinished call has no end: not a wait with a length
        db.execute(
            'INSERT INTO MPI_P2P_EVENTS (start, "end", globalTid, textId) VALUES (?, NULL, ?, ?)',
            (t, gtid, ids["MPI_Recv"]),
        )
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path, defer=()).report_id
    got = Counter(
        n
        for (n,) in con.execute(
            "SELECT name FROM host_waits WHERE report_id = ? AND source = 'mpi'", [rid]
        ).fetchall()
    )
    assert got == Counter({"MPI_Allreduce": 30, **dict.fromkeys(blocking, 1)})
    con.close()
