"""nsys ingest on every real export, checked against plain SQL on the SQLite file itself."""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

import nsight_analytics as nsa
from conftest import NSYS_FILES, ROOT

# The bundled demo export (byte for byte ../shared/realdata/nsys/h100_nsys2025.3_pageable_h2d.sqlite,
# shipped in the package): the ingest behaviours below that need no particular file run on it.
DEMO = ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"
# the checks of every real export
REAL = pytest.mark.skipif(not NSYS_FILES, reason="../shared/realdata/nsys is absent")

# CUPTI codes, written out by hand from CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind.
COPY = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEM = {0: "pageable", 1: "pinned", 2: "device", 4: "managed"}


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory):
    con = nsa.connect(tmp_path_factory.mktemp("ws") / "w.duckdb")
    ids = {}
    for path in NSYS_FILES:
        ids[path.name] = nsa.ingest(con, path, defer=()).report_id
    yield con, ids
    con.close()


def sq(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(sql).fetchall()


def has_table(path: Path, table: str) -> bool:
    return bool(sq(path, f"SELECT 1 FROM sqlite_master WHERE type='table' AND name='{table}'"))


def columns(path: Path, table: str) -> set[str]:
    return {r[1] for r in sq(path, f"PRAGMA table_info({table})")}


TABLES = {
    "kernels": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
    "cuda_api": "CUPTI_ACTIVITY_KIND_RUNTIME",
    "sync_events": "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "osrt_api": "OSRT_API",
}


@REAL
@pytest.mark.parametrize("path", NSYS_FILES, ids=lambda p: p.stem)
def test_row_counts_and_times(ws, path: Path) -> None:
    con, ids = ws
    rid = ids[path.name]
    for canonical, raw in TABLES.items():
        expected = (
            sq(path, f'SELECT count(*), coalesce(sum("end" - start), 0) FROM {raw}')[0]
            if has_table(path, raw)
            else (0, 0)
        )
        got = con.execute(
            f"SELECT count(*), coalesce(sum(duration_ns), 0) FROM {canonical} WHERE report_id = ?", [rid]
        ).fetchone()
        assert (got[0], int(got[1])) == expected, canonical


@REAL
@pytest.mark.parametrize("path", NSYS_FILES, ids=lambda p: p.stem)
def test_kernel_names_and_pids(ws, path: Path) -> None:
    con, ids = ws
    rid = ids[path.name]
    if not has_table(path, TABLES["kernels"]):
        assert con.execute("SELECT count(*) FROM kernels WHERE report_id = ?", [rid]).fetchone()[0] == 0
        return
    expected = Counter(
        name
        for (name,) in sq(
            path,
            "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName",
        )
    )
    got = Counter(n for (n,) in con.execute("SELECT name FROM kernels WHERE report_id = ?", [rid]).fetchall())
    assert got == expected
    if "globalPid" in columns(path, TABLES["kernels"]):
        pids = {
            g >> 24 & 0xFFFFFF
            for (g,) in sq(path, "SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")
        }
    else:
        pids = {None}  # the trimmed export has no process column: NULL, never invented
    got_pids = {
        p for (p,) in con.execute("SELECT DISTINCT pid FROM kernels WHERE report_id = ?", [rid]).fetchall()
    }
    assert got_pids == pids


@REAL
@pytest.mark.parametrize("path", NSYS_FILES, ids=lambda p: p.stem)
def test_kernel_names_table(ws, path: Path) -> None:
    # one row per distinct (demangled, short, mangled) name, with its kernel count
    con, ids = ws
    rid = ids[path.name]
    got = con.execute(
        "SELECT name, short_name, mangled_name, kernels FROM kernel_names WHERE report_id = ? ORDER BY ALL",
        [rid],
    ).fetchall()
    if not has_table(path, TABLES["kernels"]):
        assert got == []
        return
    cols = columns(path, TABLES["kernels"])
    mangled = "(SELECT value FROM StringIds WHERE id = k.mangledName)" if "mangledName" in cols else "NULL"
    expected = sq(
        path,
        f"""
        SELECT coalesce((SELECT value FROM StringIds WHERE id = k.demangledName),
                        (SELECT value FROM StringIds WHERE id = k.shortName)),
               (SELECT value FROM StringIds WHERE id = k.shortName), {mangled}, count(*)
        FROM CUPTI_ACTIVITY_KIND_KERNEL k GROUP BY 1, 2, 3""",
    )
    key = lambda r: tuple("" if v is None else str(v) for v in r)
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert sum(r[3] for r in got) == sq(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]


@REAL
@pytest.mark.parametrize("path", NSYS_FILES, ids=lambda p: p.stem)
def test_memcpy_bytes_per_kind(ws, path: Path) -> None:
    con, ids = ws
    rid = ids[path.name]
    if not has_table(path, TABLES["memcpy"]):
        return
    src_col = "srcKind" if "srcKind" in columns(path, TABLES["memcpy"]) else "NULL"
    expected = {
        (COPY[k], MEM.get(s) if s is not None else None): b
        for k, s, b in sq(
            path, f"SELECT copyKind, {src_col}, sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1, 2"
        )
    }
    got = {
        (k, s): int(b)
        for k, s, b in con.execute(
            "SELECT direction, src_memory, sum(bytes) FROM memcpy WHERE report_id = ? GROUP BY 1, 2", [rid]
        ).fetchall()
    }
    assert got == expected


@REAL
@pytest.mark.parametrize("path", NSYS_FILES, ids=lambda p: p.stem)
def test_api_names_lose_version_suffix(ws, path: Path) -> None:
    con, ids = ws
    rid = ids[path.name]
    expected = Counter(
        re.sub(r"_v\d+$", "", name)
        for (name,) in sq(
            path, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId"
        )
    )
    got = Counter(
        n for (n,) in con.execute("SELECT name FROM cuda_api WHERE report_id = ?", [rid]).fetchall()
    )
    assert got == expected


@REAL
@pytest.mark.parametrize("path", NSYS_FILES, ids=lambda p: p.stem)
def test_nvtx_names(ws, path: Path) -> None:
    con, ids = ws
    rid = ids[path.name]
    if not has_table(path, "NVTX_EVENTS"):
        return
    text_id = "s.value" if "textId" in columns(path, "NVTX_EVENTS") else "NULL"
    join = "LEFT JOIN StringIds s ON s.id = n.textId" if text_id != "NULL" else ""
    expected = Counter(
        (name, (g >> 24) & 0xFFFFFF)
        for name, g in sq(
            path,
            f"SELECT coalesce(n.text, {text_id}), n.globalTid FROM NVTX_EVENTS n {join} WHERE n.eventType IN (59, 60)",
        )
    )
    got = Counter(con.execute("SELECT name, pid FROM nvtx_ranges WHERE report_id = ?", [rid]).fetchall())
    assert got == expected


@REAL
def test_report_rows_tell_what_was_captured(ws) -> None:
    con, ids = ws
    rows = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT report_id, format, tool_version, schema_version, has_kernels, has_memcpy, has_nvtx FROM reports"
        ).fetchall()
    }
    old = ids.get("h100_nsys2022.4_no_cuda_nvtx_osrt.sqlite")
    if old:
        assert rows[old] == ("nsys", "2022.4.2.1", "3.0.0", False, False, True)
    heavy = ids.get("h100x2_nsys2026.2_h2d_heavy.sqlite")
    if heavy:
        assert rows[heavy] == ("nsys", "2026.2.1.210", "3.25.0", True, True, True)


def test_reingest_is_a_noop_and_replace_keeps_the_id(tmp_path: Path) -> None:
    path = DEMO
    con = nsa.connect(tmp_path / "w.duckdb")
    first = nsa.ingest(con, path)
    again = nsa.ingest(con, path)
    assert (again.status, again.report_id) == ("unchanged", first.report_id)
    assert con.execute("SELECT count(*) FROM reports").fetchone()[0] == 1
    replaced = nsa.ingest(con, path, replace=True)
    assert (replaced.status, replaced.report_id) == ("replaced", first.report_id)
    # The file's kernels once (sqlite3: SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL), not twice.
    ((kernels,),) = sq(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert kernels > 0
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == kernels


def test_deferred_steps_load_on_first_query(tmp_path: Path) -> None:
    path = DEMO
    (expected,) = sq(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)")[0]
    con = nsa.connect(tmp_path / "w.duckdb")
    r = nsa.ingest(con, path)
    assert "nvtx_ranges" in r.deferred
    assert con.execute("SELECT count(*) FROM nvtx_ranges").fetchone()[0] == 0
    con.close()
    con = nsa.connect(tmp_path / "w.duckdb")  # a writable connect() completes deferred tables
    assert con.execute("SELECT count(*) FROM nvtx_ranges").fetchone()[0] == expected
    assert con.execute("SELECT deferred_steps FROM reports").fetchone()[0] == []


def _deferred(con) -> list[str]:
    return con.execute("SELECT deferred_steps FROM reports").fetchone()[0]


def test_gpu_events_no_query_reads_wait_for_first_use(tmp_path: Path) -> None:
    """The synchronisations (and graph node events) are copied on first use; the copies, which
    the GPU timeline is made of, at ingest. The report says from the start that it holds both."""
    path = DEMO
    copies = sq(path, 'SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY')[0]
    (syncs,) = sq(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")[0]
    assert copies[0] > 0 and syncs > 0
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    try:
        r = nsa.ingest(con, path)
        assert "sync_events" in r.deferred and "memcpy" not in r.deferred
        kinds, has_memcpy = con.execute("SELECT activity_kinds, has_memcpy FROM reports").fetchone()
        assert {"kernel", "memcpy", "sync"} <= set(kinds) and has_memcpy
        assert con.execute("SELECT count(*), sum(duration_ns) FROM memcpy").fetchone() == copies
        assert con.execute("SELECT count(*) FROM sync_events").fetchone()[0] == 0
        assert nsa.query(con, "utilization").fetchall()  # the GPU timeline: nothing deferred needed
        assert "sync_events" in _deferred(con)
    finally:
        con.close()
    con = nsa.connect(tmp_path / "w.duckdb")  # a writable connect() completes deferred tables
    assert con.execute("SELECT count(*) FROM sync_events").fetchone()[0] == syncs
    con.close()


def test_an_empty_deferred_gpu_table_is_no_activity(tmp_path: Path) -> None:
    """An export may hold a table of no rows: a deferred GPU table asks for one row, so the
    report's activity kinds are those of a full ingest."""
    src = tmp_path / "no_syncs.sqlite"
    src.write_bytes(DEMO.read_bytes())
    db = sqlite3.connect(src)
    with db:
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    db.close()
    assert has_table(src, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    got = {}
    for defer in (None, ()):
        con = nsa.connect(tmp_path / f"w{defer is None}.duckdb", load_deferred=False)
        try:
            r = nsa.ingest(con, src, defer=defer)
            if defer is None:  # the empty table is not left for later
                assert "sync_events" not in r.deferred
            got[defer] = con.execute("SELECT activity_kinds, has_memcpy, has_kernels FROM reports").fetchone()
        finally:
            con.close()
    assert got[None] == got[()]
    assert "sync" not in got[None][0] and got[None][1:] == (True, True)


LAUNCH = {
    "grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ", "block_x": "blockX", "block_y": "blockY",
    "block_z": "blockZ", "registers_per_thread": "registersPerThread", "static_smem_bytes": "staticSharedMemory",
    "dynamic_smem_bytes": "dynamicSharedMemory", "launch_type": "launchType", "graph_node_id": "graphNodeId",
}  # fmt: skip


def _launch_rows(con, rid: int) -> Counter:
    cols = ", ".join(["start_ns", "end_ns", "correlation_id", *LAUNCH])
    return Counter(con.execute(f"SELECT {cols} FROM kernels WHERE report_id = ?", [rid]).fetchall())


def _sqlite_launch_rows(path: Path) -> Counter:
    have = columns(path, TABLES["kernels"])
    picked = ", ".join(
        f'"{c}"' if c in have else "NULL" for c in ["start", "end", "correlationId", *LAUNCH.values()]
    )
    return Counter(sq(path, f"SELECT {picked} FROM CUPTI_ACTIVITY_KIND_KERNEL"))


@REAL
@pytest.mark.parametrize(
    "path", [p for p in NSYS_FILES if has_table(p, TABLES["kernels"])], ids=lambda p: p.stem
)
def test_launch_columns_full_and_deferred(ws, path: Path, tmp_path: Path) -> None:
    # --full copies the launch configuration with the rows; the default ingest leaves it NULL
    # in kernel_rows and fills it, row for row, the first time `kernels` is read
    con, ids = ws
    expected = _sqlite_launch_rows(path)
    assert _launch_rows(con, ids[path.name]) == expected
    lazy = nsa.connect(tmp_path / "lazy.duckdb", load_deferred=False)
    rid = nsa.ingest(lazy, path).report_id
    assert lazy.execute("SELECT deferred_steps FROM reports").fetchone()[0][0] == "kernel_launch"
    assert lazy.execute("SELECT count(*) FROM kernel_rows WHERE grid_x IS NOT NULL").fetchone()[0] == 0
    from nsight_analytics.ingest import ensure_loaded

    assert ensure_loaded(lazy, nsa.api.tables_needed("SELECT grid_x FROM kernels")) == 1
    assert _launch_rows(lazy, rid) == expected
    assert "kernel_launch" not in lazy.execute("SELECT deferred_steps FROM reports").fetchone()[0]
    lazy.close()


def _domain_export(path: Path, columns: str) -> None:
    """An NVTX-only export whose domains are named through StringIds (no `text` column): two
    processes reuse domain id 1 under different names; one range per process and domain, and
    one in the default domain (0)."""
    cols = columns.split()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        db.executemany(
            "INSERT INTO StringIds VALUES (?, ?)", [(1, "io"), (2, "math"), (3, "load"), (4, "step")]
        )
        db.execute(f"CREATE TABLE NVTX_EVENTS ({', '.join(f'{c} INTEGER' for c in cols)})")
        rows = []
        for pid, domain_name in ((100, 1), (200, 2)):
            gtid = (pid << 24) | 7
            rows += [
                dict(start=1, end=None, eventType=75, textId=domain_name, globalTid=gtid, domainId=1),
                dict(start=10, end=20, eventType=59, textId=3, globalTid=gtid, domainId=1),
                dict(start=30, end=40, eventType=60, textId=4, globalTid=gtid, domainId=0),
            ]
        for r in rows:
            db.execute(f"INSERT INTO NVTX_EVENTS VALUES ({', '.join('?' * len(cols))})", [r[c] for c in cols])


@pytest.mark.parametrize(
    "columns", ["start end eventType textId globalTid domainId", "start end eventType textId domainId"]
)
def test_nvtx_domains_by_string_id(tmp_path: Path, columns: str) -> None:
    path = tmp_path / "domains.sqlite"
    _domain_export(path, columns)
    by_thread = "globalTid" in columns
    # A domain is named by its create event in the same process (or anywhere, without thread ids).
    pid = "(n.globalTid >> 24) & 16777215" if by_thread else "NULL"
    same = "AND (d.globalTid >> 24) = (n.globalTid >> 24)" if by_thread else ""
    expected = Counter(
        sq(
            path,
            f"SELECT s.value, {pid}, (SELECT min(ds.value) FROM NVTX_EVENTS d JOIN StringIds ds ON ds.id = d.textId "
            f"WHERE d.eventType = 75 AND d.domainId = n.domainId {same}) "
            "FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN (59, 60)",
        )
    )
    if not by_thread:  # one domain id, two create events: either name, the same for every range of it
        assert {d for _, _, d in expected} == {"io", None}
    con = nsa.connect(tmp_path / "w.duckdb")
    nsa.ingest(con, path, defer=())
    got = Counter(con.execute("SELECT name, pid, domain FROM nvtx_ranges").fetchall())
    con.close()
    if by_thread:
        assert got == expected
    else:
        assert sorted((n, d is None) for n, _, d in got) == sorted((n, d is None) for n, _, d in expected)


@pytest.mark.parametrize("creates", [True, False])
def test_nvtx_domains_on_first_use(tmp_path: Path, creates: bool) -> None:
    """The ranges copied on first use name their domains from the create events, read once for
    the export (names as SQL literals there: one holds a quote); an export that creates no
    domain gives every range a NULL domain (the copy then joins nothing)."""
    path = tmp_path / "domains_text.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        db.execute(
            "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, "
            "textId INTEGER, globalTid INTEGER, domainId INTEGER)"
        )
        rows = []
        for pid, domain_name in ((100, "it's io"), (200, "math")):
            gtid = (pid << 24) | 7
            if creates:
                rows.append((1, None, 75, domain_name, None, gtid, 1))
            rows += [(10, 20, 59, f"load {pid}", None, gtid, 1), (30, 40, 60, "step", None, gtid, 0)]
        db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    expected = Counter(
        sq(
            path,
            "SELECT n.text, (SELECT min(d.text) FROM NVTX_EVENTS d WHERE d.eventType = 75 "
            "AND d.domainId = n.domainId AND (d.globalTid >> 24) = (n.globalTid >> 24)) "
            "FROM NVTX_EVENTS n WHERE n.eventType IN (59, 60)",
        )
    )
    assert {d for _, d in expected} == ({"it's io", "math", None} if creates else {None})
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    nsa.ingest(con, path)
    assert "nvtx_ranges" in con.execute("SELECT deferred_steps FROM reports").fetchone()[0]
    from nsight_analytics.ingest import ensure_loaded

    assert ensure_loaded(con, {"nvtx_ranges"}) == 1
    got = Counter(con.execute("SELECT name, domain FROM nvtx_ranges").fetchall())
    con.close()
    assert got == expected
