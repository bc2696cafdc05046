"""`nsa report` without a browser: the page is one self-contained file, its embedded data and
its tables hold the export's numbers (computed here with sqlite3 on the export itself), the
level of detail keeps big timelines bounded, and the CLI writes the page or says what is wrong.
tests/test_report_browser.py loads the pages in chromium."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from csv import DictReader
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from report_cases import DEMO

import nsight_analytics as nsa
from conftest import realdata
from nsight_analytics import api, render
from nsight_analytics.cli import main
from nsight_analytics.units import metric, page_dur

COPY_KIND = {1: "HtoD", 2: "DtoH", 8: "DtoD"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    con = nsa.connect(tmp_path_factory.mktemp("report") / "w.duckdb")
    rid = nsa.ingest(con, DEMO).report_id
    yield con, rid
    con.close()


@pytest.fixture(scope="module")
def export() -> Any:
    db = sqlite3.connect(f"file:{DEMO}?mode=ro", uri=True)
    yield db
    db.close()


def _blob(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="nsa-data">(.*?)</script>', page, re.DOTALL)
    assert m
    return json.loads(m.group(1))


class _Tables(HTMLParser):
    """{table name: [{column: value}]} from the page's data-table / data-value attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.current: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("data-table"):
            self.current = a["data-table"]
            self.tables[self.current] = []
        elif tag == "tr" and self.current and self.tables[self.current] is not None:
            self.tables[self.current].append({})
        elif tag == "td" and self.current:
            self.tables[self.current][-1][str(a["data-col"])] = json.loads(str(a["data-value"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            if self.current and self.tables[self.current] and not self.tables[self.current][0]:
                self.tables[self.current].pop(0)  # the header row
            self.current = None


def tables(page: str) -> dict[str, list[dict[str, Any]]]:
    p = _Tables()
    p.feed(page)
    return p.tables


def _lane_events(lane: dict[str, Any]) -> list[tuple[int, int]]:
    """(start, duration) of a lane's exact events, starts decoded from their deltas."""
    out, t = [], 0
    for s, d in zip(lane["s"], lane["d"], strict=True):
        t += s
        out.append((t, d))
    return out


def test_page_is_self_contained_and_small(demo: Any) -> None:
    con, rid = demo
    page = render.render_html(api.report_data(con, rid))
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.IGNORECASE)
    assert not re.search(r"<link\b", page, re.IGNORECASE)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "@import" not in page and "url(http" not in page
    assert len(page.encode()) < 300_000  # 90 events, 15 NVTX ranges


def test_timeline_holds_every_kernel_and_copy_of_the_export(demo: Any, export: sqlite3.Connection) -> None:
    con, rid = demo
    tl = api.report_data(con, rid)["timeline"]
    lanes = {lane["kind"]: lane for lane in tl["lanes"] if lane["kind"] != "memcpy"}
    kernels = _lane_events(lanes["kernel"])
    want = export.execute(
        'SELECT start, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start'
    ).fetchall()
    assert [(tl["t0"] + s, d) for s, d in kernels] == [tuple(r) for r in want]
    names = {tl["names"][n] for n in lanes["kernel"]["n"]}
    assert names == {r[0] for r in export.execute(
        "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName")}  # fmt: skip
    assert {tl["apis"][a] for a in lanes["kernel"]["a"]} == {"cudaLaunchKernel"}
    first = export.execute(
        "SELECT min(start) FROM (SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
        "SELECT start FROM CUPTI_ACTIVITY_KIND_MEMCPY)"
    ).fetchone()[0]
    assert tl["t0"] == first
    for lane in (lane for lane in tl["lanes"] if lane["kind"] == "memcpy"):
        kind = lane["label"].rsplit(" ", 1)[1]
        code = {v: k for k, v in COPY_KIND.items()}[kind]
        count, nbytes = export.execute(
            "SELECT count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ?", [code]
        ).fetchone()
        assert (lane["count"], sum(lane["b"])) == (count, nbytes)


def test_tables_show_the_export_numbers(demo: Any, export: sqlite3.Connection) -> None:
    con, rid = demo
    shown = tables(render.render_html(api.report_data(con, rid)))
    kernels = dict(export.execute(
        'SELECT s.value, sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k '
        "JOIN StringIds s ON s.id = k.demangledName GROUP BY 1").fetchall())  # fmt: skip
    assert {r["name"]: r["total_ns"] for r in shown["top_kernels"]} == kernels
    copies: dict[str, int] = {}
    for r in shown["copies"]:
        copies[r["direction"]] = copies.get(r["direction"], 0) + r["bytes"]
    assert copies == {COPY_KIND[k]: b for k, b in export.execute(
        "SELECT copyKind, sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1")}  # fmt: skip


def test_copy_findings_are_pinned_on_the_longest_copy(demo: Any, export: sqlite3.Connection) -> None:
    """copy-dominated judged the steady state: it is pinned on the longest DtoH copy inside it,
    not on a longer one of start-up."""
    con, rid = demo
    data = api.report_data(con, rid)
    pinned = [f for f in data["findings"] if f["rule_id"] == "copy-dominated"]
    assert pinned
    a, b = pinned[0]["evidence"]["steady_start_ns"], pinned[0]["evidence"]["steady_end_ns"]
    longest = 'SELECT start, "end" - start FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2 {} ORDER BY 2 DESC LIMIT 1'
    start, dur = export.execute(longest.format('AND start >= ? AND "end" <= ?'), [a, b]).fetchone()
    assert export.execute(longest.format("")).fetchone()[0] < a  # the longest of all is start-up's
    assert pinned[0]["pin"] == {
        "s": start - data["timeline"]["t0"],
        "d": dur,
        "how": "longest copy of that kind",
    }


def test_level_of_detail_keeps_the_longest_events_and_bins_all(demo: Any, export: sqlite3.Connection) -> None:
    con, rid = demo
    full = api.report_data(con, rid)["timeline"]
    tl = api.report_data(con, rid, max_events=30)["timeline"]
    assert tl["events"] == full["events"] == 90
    assert tl["exact_events"] <= 30 + len(tl["lanes"])
    lane = next(lane for lane in tl["lanes"] if lane["kind"] == "kernel")
    durations = sorted((r[0] for r in export.execute('SELECT "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL')),
                       reverse=True)  # fmt: skip
    kept = sorted(lane["d"], reverse=True)
    assert kept == durations[: len(kept)] and len(kept) < len(durations)
    assert sum(lane["bins"]["c"]) == len(durations)
    assert sum(lane["bins"]["d"]) == sum(durations)


def test_level_of_detail_ranks_only_the_longest_durations_and_keeps_ties_by_start() -> None:
    """Each sampled lane keeps exactly its `quota` longest events (ties: earliest first), also
    where many share the durations around the cut."""
    from nsight_analytics.report import timeline

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE cuda_api (report_id INTEGER, pid INTEGER, correlation_id INTEGER, name VARCHAR)"
    )
    con.execute(
        "CREATE TABLE kernel_names (report_id INTEGER, name_id INTEGER, name VARCHAR, short_name VARCHAR)"
    )
    events = {  # lane key -> (start, duration): repeated durations, a spread, and a small lane
        "1": [(i * 10, [5, 5, 5, 7, 900, 901, 64, 65, 66, 0][i % 10]) for i in range(400)],
        "2": [(i * 7, (i * 7919) % 100_000) for i in range(300)],
        "3": [(i, 3) for i in range(5)],
    }
    values = ", ".join(f"('{k}', {s}, {d})" for k, rows in events.items() for s, d in rows)
    src = timeline.Activity(
        "WITH act AS (SELECT NULL::INTEGER AS rank, 1 AS report_id, 0 AS device_id, 1 AS kind, lane_key, "
        "start_ns::BIGINT AS start_ns, duration_ns::BIGINT AS duration_ns, 'memset' AS label, NULL::INTEGER AS "
        "name_id, NULL::BIGINT AS bytes, 1 AS pid, NULL::INTEGER AS correlation_id "
        f"FROM (VALUES {values}) AS v(lane_key, start_ns, duration_ns))",
        {},
    )
    got = timeline.activity_lanes(con, src, 100, {}, {})
    assert got is not None
    t0, _, total, lanes = got
    assert total == 705
    for lane in lanes:
        key = lane["label"].split()[4]
        want = sorted(events[key], key=lambda e: (-e[1], e[0]))[: lane["quota"]]
        starts = [sum(lane["s"][: i + 1]) + t0 for i in range(len(lane["s"]))]
        assert sorted(zip(starts, lane["d"], strict=True)) == sorted(want)
    assert [lane["quota"] for lane in lanes] == [400 * 100 // 705, 300 * 100 // 705, 1]


def test_nvtx_lanes_keep_the_longest_ranges_with_ties_by_thread_and_start() -> None:
    """The NVTX lanes keep the `limit` longest ranges (ties: pid, tid, start), also where many
    share the durations around the cut, a range ends before it starts, or all fit."""
    from nsight_analytics.report import timeline

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE nvtx_ranges (report_id INTEGER, pid INTEGER, tid INTEGER, start_ns BIGINT, end_ns BIGINT, "
        "duration_ns BIGINT, name VARCHAR)"
    )
    durations = [5, 5, 5, 7, 900, 901, 64, 65, 66, 0, -3, 1 << 40]
    ranges = [(1 + i % 2, 10 + i % 3, i * 10, durations[i % len(durations)], f"r{i % 4}") for i in range(500)]
    con.executemany(
        "INSERT INTO nvtx_ranges VALUES (1, ?, ?, ?, ?, ?, ?)",
        [(p, t, s, s + d, d, n) for p, t, s, d, n in ranges],
    )
    con.execute("INSERT INTO nvtx_ranges VALUES (2, 1, 10, 0, 999999, 999999, 'other report')")
    for limit in (1, 37, 100, 500, 1000):
        names: dict[str, int] = {}
        lanes = timeline.nvtx_lanes(con, 1, 0, names, limit=limit)
        got = set()
        for lane in lanes:
            pid, tid = (int(x) for x in lane["label"].split()[2::2])
            starts = [sum(lane["s"][: i + 1]) for i in range(len(lane["s"]))]
            got |= {
                (pid, tid, s, d, list(names)[n]) for s, d, n in zip(starts, lane["d"], lane["n"], strict=True)
            }
        want = sorted(ranges, key=lambda r: (-r[3], r[0], r[1], r[2]))[:limit]
        assert got == set(want), limit


def test_nvtx_lanes_give_each_range_its_nesting_depth_per_thread() -> None:
    """A range's level (`l`) is how many ranges of its thread enclose it (a range that starts
    where another ends is beside it, not inside); each thread is a lane of its own."""
    from nsight_analytics.report import timeline

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE nvtx_ranges (report_id INTEGER, pid INTEGER, tid INTEGER, start_ns BIGINT, end_ns BIGINT, "
        "duration_ns BIGINT, name VARCHAR)"
    )
    # (tid, start, end, name): on thread 1 step > fwd > {mm, add}, then bwd inside step, then
    # a range starting where step ends; thread 2 one range
    ranges = [(1, 100, 200, "step"), (1, 110, 150, "fwd"), (1, 120, 130, "mm"), (1, 130, 140, "add"),
              (1, 150, 190, "bwd"), (1, 200, 210, "next"), (2, 105, 300, "other")]  # fmt: skip
    con.executemany(
        "INSERT INTO nvtx_ranges VALUES (1, 7, ?, ?, ?, ?, ?)", [(t, a, b, b - a, n) for t, a, b, n in ranges]
    )
    names: dict[str, int] = {}
    lanes = timeline.nvtx_lanes(con, 1, 100, names)
    got = {
        lane["label"]: [(list(names)[n], lv) for n, lv in zip(lane["n"], lane["l"], strict=True)]
        for lane in lanes
    }
    assert got == {
        "NVTX pid 7 tid 1": [("step", 0), ("fwd", 1), ("mm", 2), ("add", 2), ("bwd", 1), ("next", 0)],
        "NVTX pid 7 tid 2": [("other", 0)],
    }
    assert [(lane["levels"], lane["count"]) for lane in lanes] == [(3, 6), (1, 1)]
    assert lanes[0]["s"] == [0, 10, 10, 10, 20, 50]  # from t0 = 100, delta-encoded


def test_memory_panel_keeps_each_stretchs_first_largest_value(tmp_path: Path) -> None:
    """The memory chart's lines (device and memory kind; a line's processes one after the
    other) thinned to about LINE_POINTS points each: every stretch of ceil(events / LINE_POINTS)
    events keeps its largest held value, the first where several tie, so the peak survives."""
    from importlib import import_module

    gather = import_module("nsight_analytics.report.gather")
    con = nsa.connect(tmp_path / "w.duckdb")
    # (device, pid, memory, events): 1,500 events of two processes on one line, a line of 601
    # (stretches of 2, the last alone), one of 40 (not thinned), host memory (no device)
    lines = [(0, 7, "device", 1000), (0, 8, "device", 500), (0, 7, "pinned", 601), (1, 7, "device", 40),
             (None, 7, "host", 700)]  # fmt: skip
    events, sizes = [], [4096, 4096, 512, 65536, 4096, 0, 300]  # allocs and frees of equal sizes tie
    for device, pid, memory, n in lines:
        for i in range(n):
            size = sizes[(i * 5 + pid) % len(sizes)]
            op = "free" if i % 3 == 2 else "alloc"
            events.append(
                (device, pid, memory, 1_000 + i * 10 + pid, op, size, size if op == "alloc" else -size)
            )
    con.executemany(
        "INSERT INTO memory_events (report_id, device_id, pid, memory, ts_ns, operation, bytes, delta_bytes) "
        "VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
        events,
    )
    # expected, from the rows above: held = running sum of delta_bytes per device, process and memory
    series: dict[tuple[Any, Any], list[tuple[int, int]]] = {}
    order = sorted({(d, p, m) for d, p, m, *_ in events}, key=lambda k: (k[0] is None, k[0] or 0, k[1], k[2]))
    for device, pid, memory in order:
        held, line = 0, series.setdefault((device, memory), [])
        for d, p, m, ts, _, _, delta in events:
            if (d, p, m) == (device, pid, memory):
                held += delta
                line.append((ts, held))
    want = []
    for (device, memory), pts in series.items():
        step = -(-len(pts) // gather.LINE_POINTS)
        for i in range(0, len(pts), step):
            stretch = pts[i : i + step]
            ts, held = next(p for p in stretch if p[1] == max(h for _, h in stretch))
            want.append({"device_id": device, "memory": memory, "ts_ns": ts, "held_bytes": held})
    got = gather._memory(con, 1)
    con.close()
    assert [(w["device_id"], w["memory"]) for w in want][:: gather.LINE_POINTS // 2] == [
        (g["device_id"], g["memory"]) for g in got
    ][:: gather.LINE_POINTS // 2]
    assert len(got) == 500 + 301 + 40 + 350
    assert got == want


def test_page_reuses_the_rules_query_results(demo: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's panels come from the rules' Context where a rule ran the same query with the
    same parameters: each (query, parameters) runs once for the rules and the page together."""
    from nsight_analytics import queries, report

    con, rid = demo
    api.report_data(con, rid)  # deferred data loaded before counting
    ran: list[tuple[str, str]] = []
    real = queries.run

    def counted(con: Any, name: str, params: dict[str, Any] | None = None, **kw: Any) -> Any:
        ran.append((name, json.dumps(params or {}, sort_keys=True, default=str)))
        return real(con, name, params, **kw)

    monkeypatch.setattr(queries, "run", counted)
    data = api.report_data(con, rid)
    assert sorted(set(ran)) == sorted(ran)
    steady = json.dumps({"phase": "steady", "report_id": rid}, sort_keys=True)
    assert ("utilization", steady) in ran and ("graph_launches", json.dumps({"report_id": rid})) in ran
    monkeypatch.undo()
    # the same page as each query run on its own
    assert data == report.gather(con, rid, api.findings(con, rid))


def test_ncu_report_draws_the_ncu_panels_and_no_timeline(tmp_path: Path) -> None:
    # `ncu -i REPORT --csv --page details` of a `--set full` report, committed with the tests
    # (tests/data/ncu/variants/manifest.tsv); its launches counted here with the csv module
    csv = Path(__file__).parent / "data" / "ncu" / "variants" / "details_plain.csv.gz"
    with gzip.open(csv, "rt", encoding="utf-8", newline="") as fh:
        launches = {r["ID"] for r in DictReader(fh) if r["Section Name"] == "GPU Speed Of Light Throughput"}
    assert launches
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        rid = nsa.ingest(con, csv).report_id
        page = render.render_html(api.report_data(con, rid))
    finally:
        con.close()
    state = dict(re.findall(r'data-panel="(\w+)" data-state="(\w+)"', page))
    assert (
        state["timeline"] == "absent" and state["speed_of_light"] == "drawn" and state["occupancy"] == "drawn"
    )
    sol = tables(page)["speed_of_light"]
    assert len(sol) == len(launches)
    assert {r["bound"] for r in sol} <= {"compute", "memory", "balanced", "latency"}


def test_cli_report_writes_the_page(tmp_path: Path) -> None:
    db, out = tmp_path / "w.duckdb", tmp_path / "r.html"
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", "--db", str(db), "-q", str(DEMO)]).exit_code == 0
    res = runner.invoke(main, ["report", "--db", str(db), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    res = runner.invoke(main, ["report", "--db", str(db), "--report", "7", "-o", str(out)])
    assert res.exit_code == 2 and "no report 7 in the workspace" in res.stderr
    res = runner.invoke(main, ["report", "--db", str(db), "-o", str(tmp_path / "missing" / "r.html")])
    assert res.exit_code == 2 and "does not exist" in res.stderr


def test_cli_report_asks_which_report(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    runner = CliRunner()
    con = nsa.connect(db)
    nsa.ingest(con, DEMO)
    nsa.ingest(con, Path(__file__).parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite")  # a second report
    con.close()
    res = runner.invoke(main, ["report", "--db", str(db), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "Error: the workspace holds 2 reports; choose one with --report ID (`nsa reports` lists them)."
    )


def test_cli_report_loads_only_the_drawn_reports_tables(tmp_path: Path) -> None:
    """`nsa report --report N` loads what the page reads for report N only: the workspace's other
    reports keep their deferred steps (a multi-report workspace does not pay for all of them)."""
    db = tmp_path / "w.duckdb"
    con = nsa.connect(db)
    first = nsa.ingest(con, DEMO).report_id
    other = nsa.ingest(con, Path(__file__).parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite").report_id
    sql = "SELECT report_id, deferred_steps FROM reports ORDER BY report_id"
    before = dict(con.execute(sql).fetchall())
    con.close()
    read = api.report_reads()
    assert all(set(steps) & read for steps in before.values())  # both have steps the page needs
    res = CliRunner().invoke(
        main, ["report", "--db", str(db), "--report", str(first), "-o", str(tmp_path / "r.html")]
    )
    assert res.exit_code == 0, res.output
    with duckdb.connect(str(db), read_only=True) as con:
        after = dict(con.execute(sql).fetchall())
    assert after[other] == before[other]
    assert not set(after[first]) & read


def test_demo_writes_its_report(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["demo", "--db", str(tmp_path / "demo.duckdb")])
    assert res.exit_code == 0, res.output
    page = tmp_path / "nsa-demo-report.html"
    assert f"Report: {page}\n" in res.output
    assert 'data-panel="timeline" data-state="drawn"' in page.read_text(encoding="utf-8")


def test_power_line_is_the_logged_power_over_the_timeline(tmp_path: Path, real_sqlite: Any) -> None:
    """The power chart: NVML readings whose UTC time falls in the GPU span, averaged per
    1/600 of it (CSV arithmetic here, aligned with the export's session start)."""
    export = real_sqlite("h100_nsys2025.3_train_fused_gpumetrics.sqlite")
    log = realdata("power", "h100_nvml_train_fused.csv")
    db = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    session = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    t0, t1 = db.execute(
        'SELECT min(start), max("end") FROM (SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL '
        'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMSET)'
    ).fetchone()
    db.close()
    width = (t1 - t0) // 600
    buckets: dict[int, list[float]] = {}
    for line in log.read_text().splitlines()[1:]:
        ts, _gpu, mw = (int(x) for x in line.split(",")[:3])
        if t0 <= ts - session <= t1:
            buckets.setdefault((ts - session - t0) // width, []).append(mw / 1000)
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        rid = nsa.ingest(con, export).report_id
        nsa.ingest(con, log)
        power = api.report_data(con, rid)["panels"]["power"]
    finally:
        con.close()
    assert len(power) == len(buckets) > 100
    want = [sum(v) / len(v) for _, v in sorted(buckets.items())]
    assert [p["power_w"] for p in power] == pytest.approx(want)


# --- a run's page (`nsa report --run`): the DDP captures of tests/data/ddp ------------------------

DDP = Path(__file__).parent / "data" / "ddp" / "nsys"
SLOW2 = sorted(DDP.glob("h200x4_nsys2025.3_ddp_w4_slow2_rank*.sqlite.gz"))  # rank 2 sleeps 8 ms a step
JOB = DDP / "h200x4_nsys2025.3_ddp_w4_job.sqlite.gz"  # one report, the 4 ranks as 4 processes
PID = "globalPid / 16777216 % 16777216"  # nsys packs the process id into globalPid
NCCL = "(SELECT value FROM StringIds WHERE id = k.demangledName) LIKE 'nccl%'"


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The slowed 4-rank run (one report a rank) and the 4-rank job (one report), ingested into one
    workspace; their exports unpacked for sqlite3; each run's page data."""
    if len(SLOW2) != 4 or not JOB.exists():
        pytest.skip(f"the DDP captures are not in {DDP}")
    folder = tmp_path_factory.mktemp("ddp")
    plain = {}
    for p in (*SLOW2, JOB):
        plain[p.name] = folder / p.name.removesuffix(".gz")
        with gzip.open(p) as src:
            plain[p.name].write_bytes(src.read())
    con = nsa.connect(folder / "w.duckdb")
    api.group_runs(con, [nsa.ingest(con, p).report_id for p in (*SLOW2, JOB)])  # as `nsa ingest` does
    runs = {name: rid for rid, name in con.execute("SELECT run_id, name FROM runs").fetchall()}
    data = {name: api.report_data(con, run=name) for name in runs}
    yield con, plain, data
    con.close()


def _sql(path: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(sql, args).fetchall()


def _session_offsets(plain: dict[str, Path]) -> dict[int, int]:
    """{rank: ns to add to its export's times}: the run's clock starts at the earliest session."""
    start = {int(re.search(r"_rank(\d)", name)[1]): _sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]  # type: ignore[index]
             for name, path in plain.items() if "_rank" in name}  # fmt: skip
    return {rank: s - min(start.values()) for rank, s in start.items()}


def _rank_events(tl: dict[str, Any], rank: int, kinds: tuple[str, ...]) -> list[tuple[int, int]]:
    """(run-clock start, duration) of a rank's exact events of these lane kinds, sorted."""
    return sorted((tl["t0"] + s, d) for lane in tl["lanes"] if lane.get("rank") == rank and lane["kind"] in kinds
                  for s, d in _lane_events(lane))  # fmt: skip


def test_run_page_draws_each_rank_on_the_run_clock(ddp: Any) -> None:
    """One lane group per rank file; each rank's kernels are its export's, shifted by the
    difference of its session start from the earliest one (sqlite3 on the exports)."""
    _, plain, data = ddp
    d = data["h200x4_nsys2025.3_ddp_w4_slow2"]
    tl, offsets = d["timeline"], _session_offsets(plain)
    assert [g["rank"] for g in tl["ranks"]] == [0, 1, 2, 3]
    assert {lane.get("rank") for lane in tl["lanes"]} == {0, 1, 2, 3}
    for g in tl["ranks"]:
        r = g["rank"]
        path = plain[SLOW2[r].name]
        assert g["label"].startswith(f"rank {r} · GPU {r} · report ") and SLOW2[r].name in g["label"]
        assert next(k for k in d["ranks"] if k["rank"] == r)["clock_offset_ns"] == offsets[r]
        first = _sql(path, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
        assert _rank_events(tl, r, ("kernel", "comm"))[0][0] == first + offsets[r]
        # per lane: the compute kernels of each stream, and the NCCL kernels in the communication lane
        lanes = {lane["label"]: lane["count"] for lane in tl["lanes"]
                 if lane.get("rank") == r and lane["kind"] in ("kernel", "comm")}  # fmt: skip
        want = {f"GPU {r} · stream {s} kernels": n for s, n in _sql(
            path, f"SELECT streamId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE NOT {NCCL} GROUP BY 1")}  # fmt: skip
        want[f"GPU {r} · communication"] = _sql(
            path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE {NCCL}"
        )[0][0]
        assert lanes == want
        comm = _sql(path, f'SELECT start + ?, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE {NCCL} ORDER BY 1',
                    offsets[r])  # fmt: skip
        assert _rank_events(tl, r, ("comm",)) == comm
    memcpy = sum(lane["count"] for lane in tl["lanes"] if lane["kind"] == "memcpy")
    assert memcpy == sum(
        _sql(plain[p.name], "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0] for p in SLOW2
    )


def test_run_page_of_one_report_draws_each_process_on_its_gpu(ddp: Any) -> None:
    """A run in one report: a rank is one process, drawn with only its kernels on its GPU."""
    _, plain, data = ddp
    d = data["h200x4_nsys2025.3_ddp_w4_job"]
    tl, path = d["timeline"], plain[JOB.name]
    for k in d["ranks"]:
        assert k["clock_offset_ns"] == 0 and k["pid"] is not None
        want = _sql(path, f'SELECT start, "end" - start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {PID} = ? '
                    "AND deviceId = ? ORDER BY 1, 2", k["pid"], k["device_id"])  # fmt: skip
        assert _rank_events(tl, k["rank"], ("kernel", "comm")) == sorted(want) and want
        assert {
            lane["device"] for lane in tl["lanes"] if lane.get("rank") == k["rank"] and lane["kind"] != "nvtx"
        } == {k["device_id"]}
        assert f"pid {k['pid']}" in next(g["label"] for g in tl["ranks"] if g["rank"] == k["rank"])


def test_run_page_lines_up_the_collectives(ddp: Any) -> None:
    """Each collective, matched across the rank files by its place among its rank's NCCL kernels
    of one stream, spans the first arrival to the last end; rank 2, which sleeps each step, is
    the last to arrive at most of them (the NCCL kernels of the exports, on the run's clock)."""
    _, plain, data = ddp
    d = data["h200x4_nsys2025.3_ddp_w4_slow2"]
    offsets = _session_offsets(plain)
    arrivals: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for r, p in enumerate(SLOW2):
        rows = _sql(plain[p.name], f'SELECT streamId, start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE {NCCL} '
                    "ORDER BY start")  # fmt: skip
        streams = list(dict.fromkeys(s for s, _, _ in rows))  # channels: streams in order of first use
        seen: dict[int, int] = {}
        for s, start, end in rows:
            seq = seen[s] = seen.get(s, -1) + 1
            arrivals.setdefault((streams.index(s), seq), []).append((start + offsets[r], end + offsets[r], r))
    want = []
    for ops in arrivals.values():
        first, last = min(a[0] for a in ops), max(a[0] for a in ops)
        last_rank = min(r for s, _, r in ops if s == last)
        want.append((first, last - first, max(a[1] for a in ops) - first, last_rank))
    c, t = d["timeline"]["collectives"], d["timeline"]["t0"]
    starts = [t + s for s, _ in _lane_events({"s": c["s"], "d": c["w"]})]
    assert sorted(zip(starts, c["w"], c["e"], c["last"], strict=True)) == sorted(want)
    assert c["total"] == len(want) == 241
    last = {r: sum(1 for w in want if w[3] == r) for r in range(4)}
    shown = {row["rank"]: row for row in tables(render.render_html(d))["arrivals"]}
    assert {r: row["arrived_last"] for r, row in shown.items()} == last
    assert max(last, key=last.__getitem__) == 2 and last[2] > 0.9 * len(want)
    view = d["timeline"]["view"]  # the page opens on the collectives
    assert (
        view[0] <= min(starts) - t and view[1] >= max(s + e for s, e in zip(starts, c["e"], strict=True)) - t
    )


def test_run_page_header_and_findings(ddp: Any) -> None:
    con, plain, data = ddp
    d = data["h200x4_nsys2025.3_ddp_w4_slow2"]
    page = render.render_html(d)
    source, unc = con.execute(
        "SELECT rank_source, clock_uncertainty_ns FROM runs WHERE name = 'h200x4_nsys2025.3_ddp_w4_slow2'"
    ).fetchone()
    summary = re.search(r'<p class="run-summary">(.*?)</p>', page, re.DOTALL)[1]  # type: ignore[index]
    text = unescape(re.sub(r"<[^>]+>", "", summary))
    assert text.startswith("h200x4_nsys2025.3_ddp_w4_slow2 (run ")
    assert f"world size 4, 4 ranks seen on 1 host; ranks found from {source}; " in text
    assert "clocks aligned on each report's session start" in text
    assert ("uncertainty not measured" if unc is None else f"uncertainty ± {page_dur(unc)} ") in text
    ranks = tables(page)["ranks"]
    assert [(r["rank"], r["file"], r["device_id"], r["clock_offset_ns"]) for r in ranks] == [
        (i, p.name, i, _session_offsets(plain)[i]) for i, p in enumerate(SLOW2)
    ]
    state = dict(re.findall(r'data-panel="(\w+)" data-state="(\w+)"', page))
    assert state == {"run": "drawn", "findings": "drawn", "timeline": "drawn", "collectives": "drawn"}
    # the findings: every report's, and the run rules' once
    rids = sorted({r["report_id"] for r in d["ranks"]})
    want = {(f.rule_id, f.report_id, f.message) for rid in rids for f in api.findings(con, rid)}
    assert {(f["rule_id"], f["report_id"], f["message"]) for f in d["findings"]} == want
    assert len(d["findings"]) == len(want)
    shown = re.findall(
        r'<(?:article class="finding[^"]*"|p class="same-(?:rule|saving)") data-rule="[^"]+" data-index="(\d+)"',
        page,
    )
    assert sorted(map(int, shown)) == list(range(len(want)))  # each on the page once
    assert all("pin" in f for f in d["findings"])


def test_run_page_level_of_detail(ddp: Any) -> None:
    con, _, data = ddp
    full = data["h200x4_nsys2025.3_ddp_w4_slow2"]["timeline"]
    tl = api.report_data(con, run="h200x4_nsys2025.3_ddp_w4_slow2", max_events=1000)["timeline"]
    assert tl["events"] == full["events"] and tl["exact_events"] <= 1000 + len(tl["lanes"])
    for lane in (lane for lane in tl["lanes"] if lane["kind"] != "nvtx"):
        assert lane["quota"] < lane["count"] or "bins" not in lane
        if "bins" in lane:
            assert sum(lane["bins"]["c"]) == lane["count"] and sum(lane["bins"]["d"]) == lane["busy_ns"]


def test_cli_report_run(tmp_path: Path) -> None:
    if len(SLOW2) != 4:
        pytest.skip(f"the DDP captures are not in {DDP}")
    db, out = tmp_path / "w.duckdb", tmp_path / "run.html"
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", "--db", str(db), "-q", *map(str, SLOW2)]).exit_code == 0
    res = runner.invoke(main, ["report", "--db", str(db), "--run", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert (
        "<title>nsa report: run h200x4_nsys2025.3_ddp_w4_slow2 (run 1, 4 of 4 ranks)</title>"
        in out.read_text()
    )
    res = runner.invoke(main, ["report", "--db", str(db), "--run", "7", "-o", str(out)])
    assert res.exit_code == 2 and "no run '7' in the workspace" in res.stderr
    res = runner.invoke(main, ["report", "--db", str(db), "--run", "1", "--report", "1", "-o", str(out)])
    assert res.exit_code == 2 and res.stderr.strip() == "Error: give one of --report, --diff and --run."


# --- one page, one story: the capture of issue 29 (its timeline, findings and panels agree) ------------------


@pytest.fixture(scope="module")
def foreach(tmp_path_factory: pytest.TempPathFactory, real_sqlite: Any) -> Any:
    """The foreach-AdamW training capture (start-up, 25 NVTX steps, backward on the autograd
    thread, GPU metrics): its export for sqlite3, the page's data and the page."""
    export = real_sqlite("h100_nsys2025.3_train_foreach_gpumetrics.sqlite")
    con = nsa.connect(tmp_path_factory.mktemp("foreach") / "w.duckdb")
    try:
        data = api.report_data(con, nsa.ingest(con, export).report_id)
    finally:
        con.close()
    db = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    yield db, data, render.render_html(data)
    db.close()


_ACTIVITY_SQL = """
    SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY
    UNION ALL SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY 1"""


def test_page_states_one_time_base(foreach: Any) -> None:
    """The timeline counts from the capture's start, as the findings and `nsa query` do: the
    page says so and gives the first GPU activity's time, which is the export's own."""
    db, data, page = foreach
    first = db.execute(f"SELECT min(start) FROM ({_ACTIVITY_SQL})").fetchone()[0]
    assert data["timeline"]["t0"] == first
    m = re.search(r'<p class="note time-base" data-t0="(\d+)">(.*?)</p>', page)
    assert m and int(m.group(1)) == first
    said = re.sub(r"<[^>]+>", "", m.group(2))
    assert "since the capture started" in said and f"from {first / 1e9:.3f} s" in said


def test_steady_state_idle_finding_is_pinned_on_a_steady_gap(foreach: Any) -> None:
    """gpu-idle judged the steady state: its pin is the longest idle gap inside it (the export's
    activity, sorted, with a running end), not the start-up gap that is longer than all."""
    db, data, _ = foreach
    idle = next(f for f in data["findings"] if f["rule_id"] == "gpu-idle")
    a, b = idle["evidence"]["steady_start_ns"], idle["evidence"]["steady_end_ns"]
    gaps, end = [], None
    for start, stop in db.execute(_ACTIVITY_SQL):
        if end is not None and start > end:
            gaps.append((start - end, end))
        end = stop if end is None else max(end, stop)
    longest = max(gaps)
    assert longest[1] < a  # the longest of the capture is start-up's
    d, s = max(g for g in gaps if a <= g[1] and g[1] + g[0] <= b)
    t0 = data["timeline"]["t0"]
    assert idle["pin"] == {"s": s - t0, "d": d, "how": "longest idle gap of the steady state"}


def test_nvtx_panel_counts_the_kernels_of_every_thread_of_the_process(foreach: Any) -> None:
    """`backward` runs its kernels from PyTorch's autograd thread: the panel's kernel time is the
    process-wide projection (a range join on the export), beside the range's own thread's."""
    db, _, page = foreach
    proc = "/ 16777216 % 16777216"
    sql = f"""
        SELECT sum(k."end" - k.start) FROM NVTX_EVENTS e
        LEFT JOIN StringIds s ON s.id = e.textId
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid {proc} = e.globalTid {proc}
             AND r.start BETWEEN e.start AND e."end" {{}}
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
             AND k.globalPid {proc} = r.globalTid {proc}
        WHERE e.eventType IN (59, 60) AND e."end" IS NOT NULL AND coalesce(e.text, s.value) = 'backward'"""
    process = db.execute(sql.format("")).fetchone()[0]
    own = db.execute(sql.format("AND r.globalTid = e.globalTid")).fetchone()[0]
    assert process > 1000 * own  # the launches are another thread's
    row = next(r for r in tables(page)["nvtx"] if r["name"] == "backward")
    assert (row["process_kernel_ns"], row["kernel_ns"]) == (process, own)


def test_values_are_written_in_human_units(foreach: Any) -> None:
    """GPU metrics in their unit with an SI prefix (the clocks in GHz, DRAM bandwidth in GB/s),
    never in exponent notation anywhere on the page."""
    _, _, page = foreach
    text = re.sub(r"<script.*?</script>", "", page, flags=re.DOTALL)
    assert not re.findall(r"\b\d+(\.\d+)?e[+-]\d+\b", text)
    charts = re.findall(r'aria-label="gpu metrics [^"]*".*?</svg>', page, re.DOTALL)
    assert any(" GHz" in c for c in charts) and any(" GB/s" in c for c in charts)
    assert not any(" hz" in c for c in charts)


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [(1.99e9, "hz", "1.99 GHz"), (1.68e11, "byte/s", "168 GB/s"), (42.25, "%", "42.2 %"), (6.77e7, "Avg", "67.7M Avg"),
     (34.3, "warp", "34.3 warp"), (2.5e12, "FLOP/s", "2.5 TFLOP/s"), (None, "W", "–")],
)  # fmt: skip
def test_metric_values_in_human_units(value: Any, unit: str, shown: str) -> None:
    assert metric(value, unit) == shown
