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
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from report_cases import DEMO

import nsight_analytics as nsa
from conftest import realdata
from nsight_analytics import api, render
from nsight_analytics.cli import main

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
    con, rid = demo
    data = api.report_data(con, rid)
    start, dur = export.execute(
        'SELECT start, "end" - start FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2 ORDER BY 2 DESC LIMIT 1'
    ).fetchone()
    pinned = [f for f in data["findings"] if f["rule_id"] == "copy-dominated"]
    assert pinned and pinned[0]["pin"] == {"s": start - data["timeline"]["t0"], "d": dur,
                                           "how": "longest copy of that kind"}  # fmt: skip


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
