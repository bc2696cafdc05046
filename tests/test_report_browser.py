"""`nsa report` pages in a real browser: Debian's chromium, headless, through Selenium and the
system chromedriver (nothing is downloaded). For the demo, our captures and every shared real
export nsa reads: the page loads with no console error, every panel is there and drawn (or says
why its data is absent), the numbers in the page equal the library queries, the wheel zooms the
timeline and hovering an event names it. A screenshot of each page is kept in
$NSA_TEST_ARTIFACTS (default tests/artifacts/report/)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from report_cases import Built, Case, build, cases

import nsight_analytics as nsa
from conftest import ROOT
from fixtures.browser import CHROMEDRIVER, CHROMIUM, headless_chromium
from nsight_analytics import api, render

# chromium draws the page the same whatever Python wrote it: on README's Python only (.ci/run)
pytestmark = pytest.mark.one_python

ARTIFACTS = Path(os.environ.get("NSA_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts") / "report"
SINGLE_PANELS = {"findings", "timeline", "utilization", "top_kernels", "phases", "nvtx", "copies", "graphs",
                 "stalls", "speed_of_light", "occupancy", "roofline", "gpu_metrics", "memory", "energy",
                 "idle_stacks"}  # fmt: skip
DIFF_PANELS = {"verdict", "steps", "attribution", "kernels_changed", "metrics", "findings_changed", "timeline",
               "timeline1"}  # fmt: skip

PANELS_JS = """
return Array.from(document.querySelectorAll('section.panel')).map(p => ({
  name: p.dataset.panel, state: p.dataset.state,
  marks: p.querySelectorAll('svg .mark').length, rows: p.querySelectorAll('table.data tbody tr').length,
  cards: p.querySelectorAll('.finding').length, note: (p.querySelector('.note') || {}).textContent || '',
  canvas: Number((p.querySelector('.nsa-timeline') || {dataset: {}}).dataset.marks || 0)}));
"""
TABLE_JS = """
const t = document.querySelector(`table[data-table="${arguments[0]}"]`);
if (!t) return null;
return Array.from(t.querySelectorAll('tbody tr')).map(tr => Object.fromEntries(
  Array.from(tr.querySelectorAll('td')).map(td => [td.dataset.col, JSON.parse(td.dataset.value)])));
"""


@pytest.fixture(scope="module")
def driver():
    pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e .[test])")
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            pytest.skip(
                f"{path} not found: install Debian's {package} (apt-get install -y chromium chromium-driver)"
            )
    d = headless_chromium(page_load_timeout_s=120)
    yield d
    d.quit()


def _load(driver: Any, page: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.set_window_size(1400, 1000)
    driver.get(page.as_uri())
    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.id)
def test_report_page(case: Case, driver: Any, tmp_path: Path) -> None:
    for p in case.files:
        if not p.exists():
            pytest.skip(f"real data not available: {p} (tests expect ../shared/realdata beside the repo)")
    built = build(case, tmp_path)
    try:
        _load(driver, built.page)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        panels = {p["name"]: p for p in driver.execute_script(PANELS_JS)}
        assert set(panels) == (DIFF_PANELS if case.kind == "diff" else SINGLE_PANELS)
        for p in panels.values():
            if p["state"] == "drawn":
                assert p["marks"] + p["rows"] + p["cards"] + p["canvas"] > 0 or p["name"] == "findings", p
            else:
                assert p["note"].strip(), p
        if case.kind == "diff":
            _check_diff(driver, built)
        else:
            _check_numbers(driver, built, panels)
            _check_time_base(driver, built)
            _check_nvtx(driver, built)
            _check_phases(driver, built)
        _check_text_fits(driver)
        timelines = driver.execute_script("return window.nsaTimelines.filter(Boolean).length")
        if timelines:
            _check_zoom(driver)
            _check_hover(driver)
        _screenshot(driver, case.id)
    finally:
        built.con.close()  # type: ignore[attr-defined]


RUN_PANELS = {"run", "findings", "timeline", "collectives"}
SLOW2 = sorted(
    (ROOT / "tests" / "data" / "ddp" / "nsys").glob("h200x4_nsys2025.3_ddp_w4_slow2_rank*.sqlite.gz")
)
# per rank: its group header, then the pixel colour at the middle of its longest communication
# kernel and of its longest compute kernel, each shown alone on the canvas
RANK_LANES_JS = """
const t = window.nsaTimelines[0], ctx = t.canvas.getContext('2d'), dpr = window.devicePixelRatio || 1;
const groups = t.rows.filter(r => r.type === 'group').map(r => r.group.rank);
const pixel = (row) => {
  const l = row.lane; let i = 0; l.d.forEach((d, j) => { if (d > l.d[i]) i = j; });
  t.setView(l.start[i] - l.d[i] / 4, l.start[i] + l.d[i] * 1.25);
  const x = t.x(l.start[i] + l.d[i] / 2), y = row.y + row.h / 2;
  return Array.from(ctx.getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data.slice(0, 3));
};
const out = groups.map(rank => {
  const mine = t.rows.filter(r => r.type === 'lane' && r.lane.rank === rank);
  const comm = mine.find(r => r.lane.kind === 'comm'), compute = mine.find(r => r.lane.kind === 'kernel');
  return {rank: rank, lanes: mine.length, comm: pixel(comm), compute: pixel(compute)};
});
t.setView(t.tl.view[0], t.tl.view[1]);
return {groups: groups, ranks: out};
"""
# hover the middle of the wait of the collective whose ranks arrived furthest apart
COLLECTIVE_HOVER_JS = """
const t = window.nsaTimelines[0], c = t.tl.collectives, row = t.rows.find(r => r.type === 'collectives');
let i = 0; c.w.forEach((w, j) => { if (w > c.w[i]) i = j; });
t.setView(c.start[i] - c.e[i], c.start[i] + 2 * c.e[i]);
const r = t.canvas.getBoundingClientRect();
t.canvas.dispatchEvent(new MouseEvent('mousemove', {bubbles: true,
  clientX: r.left + t.x(c.start[i] + c.w[i] / 2), clientY: r.top + row.y + row.h / 2}));
const out = [t.tip.textContent, c.last[i]]; t.tip.style.display = 'none'; return out;
"""


def test_run_page(driver: Any, tmp_path: Path) -> None:
    """The slowed 4-rank run's page: its panels drawn, one lane group per rank with its
    communication kernels in their colour and its compute kernels in theirs, and the collective
    the ranks reached furthest apart named with its last rank on hover."""
    if len(SLOW2) != 4:
        pytest.skip("the DDP captures of tests/data/ddp are not there")
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        api.group_runs(con, [nsa.ingest(con, p).report_id for p in SLOW2])
        page = tmp_path / "run.html"
        page.write_text(
            render.render_html(api.report_data(con, run="h200x4_nsys2025.3_ddp_w4_slow2")), "utf-8"
        )
        _load(driver, page)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        panels = {p["name"]: p for p in driver.execute_script(PANELS_JS)}
        assert set(panels) == RUN_PANELS and {p["state"] for p in panels.values()} == {"drawn"}
        assert (
            panels["timeline"]["canvas"] > 0
            and panels["run"]["rows"] == 4
            and panels["collectives"]["rows"] == 4
        )
        drawn = driver.execute_script(RANK_LANES_JS)
        assert drawn["groups"] == [0, 1, 2, 3]
        for r in drawn["ranks"]:
            assert r["lanes"] >= 3, r
            assert r["comm"] == [194, 24, 122], r  # the communication colour (timeline.js COMM)
            red, green, blue = r["compute"]
            assert blue > red and (red, green, blue) != (255, 255, 255), r  # a compute blue or teal
        shown, last = driver.execute_script(COLLECTIVE_HOVER_JS)
        assert f"last arrival: rank {last}" in shown and "first arrival: rank" in shown
        _check_zoom(driver)
        _check_hover(driver)
        driver.execute_script("const t = window.nsaTimelines[0]; t.setView(t.tl.view[0], t.tl.view[1]);")
        _screenshot(driver, "run-h200x4_ddp_w4_slow2")
    finally:
        con.close()


def _rows(driver: Any, name: str) -> list[dict[str, Any]]:
    return driver.execute_script(TABLE_JS, name) or []


def _query(con: Any, name: str, rid: int, **params: Any) -> list[dict[str, Any]]:
    rel = nsa.query(con, name, report_id=rid, **params)
    return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]


def _check_numbers(driver: Any, built: Built, panels: dict[str, dict[str, Any]]) -> None:
    con, rid = built.con, built.report_id
    kernels = _query(con, "kernel_summary", rid)
    shown = _rows(driver, "top_kernels")
    assert (panels["top_kernels"]["state"] == "drawn") == bool(kernels)
    want = sorted(kernels, key=lambda k: -k["total_ns"])[: len(shown)]
    assert sorted((r["name"], r["total_ns"], r["instances"]) for r in shown) == sorted(
        (k["name"], k["total_ns"], k["instances"]) for k in want
    )
    util = {(u["device_id"], u["phase"]): u for u in _query(con, "utilization", rid)}
    for r in _rows(driver, "utilization"):
        if r["phase"] == "run":
            u = util[(r["device_id"], "run")]
            assert (r["span_ns"], r["kernel_busy_ns"], r["idle_ns"]) == (
                u["span_ns"],
                u["kernel_busy_ns"],
                u["idle_ns"],
            )
    copies = _query(con, "memcpy_summary", rid)
    assert sorted((r["direction"], r["bytes"], r["total_ns"]) for r in _rows(driver, "copies")) == sorted(
        (c["direction"], c["bytes"], c["total_ns"]) for c in copies
    )
    cards = driver.execute_script(
        "return Array.from(document.querySelectorAll('.finding')).map(f => "
        "[f.dataset.rule, Array.from(f.querySelectorAll('.same-saving')).map(s => s.dataset.rule)])"
    )
    found = nsa.findings(con, rid)
    # one card per fix: a finding that names another of its report as the same saving is shown in its card
    # (the lower-ranked of the two is the one shown inside the other's card)
    pairs = [(i, j) for i, a in enumerate(found) for j, b in enumerate(found)
             if a.report_id == b.report_id and a.same_saving_as == b.rule_id]  # fmt: skip
    merged = {found[max(i, j)].rule_id for i, j in pairs}
    assert [c[0] for c in cards] == [f.rule_id for f in found if f.rule_id not in merged]
    assert sorted(r for c in cards for r in c[1]) == sorted(merged)
    _check_timeline_counts(driver, built)
    _check_metrics_and_power(driver, built, panels)
    for table, key, value in (("speed_of_light", "launch_id", "compute_pct"), ("occupancy", "launch_id", "achieved_pct"),
                              ("roofline", "launch_id", "flops")):  # fmt: skip
        expected = {(q[key], q.get("precision")): q[value] for q in _query(con, table, rid)}
        shown_rows = _rows(driver, table)
        assert (panels[table]["state"] == "drawn") == bool(shown_rows)
        for r in shown_rows:
            assert r[value] == pytest.approx(expected[(r[key], r.get("precision"))], nan_ok=True)
    assert len(_rows(driver, "stalls")) == sum(
        1
        for q in _query(con, "stalls", rid)
        if q["rank"] <= 3 and q["launch_id"] in _launches(driver, "stalls")
    )


def _check_metrics_and_power(driver: Any, built: Built, panels: dict[str, dict[str, Any]]) -> None:
    """GPU metrics are drawn when the report sampled them; the energy table is the `energy`
    query's run rows, and a power log beside the report draws its power line."""
    con, rid = built.con, built.report_id
    sampled = con.execute("SELECT count(*) FROM gpu_metrics WHERE report_id = ?", [rid]).fetchone()[0]  # type: ignore[attr-defined]
    assert (panels["gpu_metrics"]["state"] == "drawn") == bool(sampled)
    runs = [q for q in _query(con, "energy", rid) if q["scope"] == "run" and q["method"] != "no power log"]
    shown = _rows(driver, "energy")
    assert [(r["name"], r["energy_j"]) for r in shown] == [
        (q["name"], pytest.approx(q["energy_j"])) for q in runs
    ]
    if runs:
        assert panels["energy"]["state"] == "drawn" and panels["energy"]["marks"] > 0


# every text of every chart: where it lies against its chart's bounds; and every number written in
# exponent notation anywhere on the page (1.99e+09)
FIT_JS = """
const out = [];
document.querySelectorAll('svg.chart').forEach(svg => {
  const w = svg.width.baseVal.value, h = svg.height.baseVal.value;
  svg.querySelectorAll('text').forEach(t => {
    const b = t.getBBox();
    if (b.x < -0.5 || b.x + b.width > w + 0.5 || b.y < -0.5 || b.y + b.height > h + 0.5)
      out.push([svg.getAttribute('aria-label'), t.textContent, b.x, b.x + b.width, w]);
  });
});
const exp = (document.body.innerText.match(/\\b\\d+(\\.\\d+)?e[+-]\\d+\\b/g) || []);
return [out, exp];
"""


def _check_text_fits(driver: Any) -> None:
    """Chart labels and legends lie inside their chart (nothing clipped left or right) and no
    value is printed in exponent notation."""
    clipped, exponents = driver.execute_script(FIT_JS)
    assert not clipped, clipped
    assert not exponents, exponents


def _check_time_base(driver: Any, built: Built) -> None:
    """One time base: the page says times are since the capture started and the timeline's axis,
    its range and the findings' windows all count from there (the canonical tables' start_ns,
    `nsa query`'s); a finding about the steady state is pinned inside it."""
    con, rid = built.con, built.report_id
    first, last = con.execute(  # type: ignore[attr-defined]
        "SELECT min(start_ns), max(end_ns) FROM (SELECT start_ns, end_ns FROM kernels WHERE report_id = $1 "
        "UNION ALL SELECT start_ns, end_ns FROM memcpy WHERE report_id = $1 UNION ALL SELECT start_ns, end_ns "
        "FROM memset WHERE report_id = $1 UNION ALL SELECT start_ns, end_ns FROM graph_executions WHERE report_id = $1)",
        [rid],
    ).fetchone()
    if first is None:
        return
    base, ticks, shown = driver.execute_script(
        "const t = window.nsaTimelines[0]; t.setView(t.full[0], t.full[1]);"
        "const n = document.querySelector('.time-base');"
        "return [[n.textContent, Number(n.dataset.t0)], JSON.parse(t.el.dataset.ticks),"
        "        t.el.parentNode.querySelector('.tl-range').textContent];"
    )
    assert "since the capture started" in base[0] and base[1] == first
    assert f"{first / 1e9:.3f} s" in base[0]
    assert shown.startswith(f"visible {first / 1e9:.6f} s")
    values = [float(t.split()[0]) * {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1}[t.split()[1]] for t in ticks]
    assert len(values) >= 3 and all(first - 1e6 <= v <= last + 1e6 for v in values), (ticks, first, last)
    data = driver.execute_script("return JSON.parse(document.getElementById('nsa-data').textContent).data")
    steady = [r for r in _query(con, "phases", rid) if r["phase"] == "steady"]
    for f in data["findings"]:
        pin, ev = f.get("pin"), f["evidence"]
        if pin and steady and ev.get("phase") == "steady":
            assert steady[0]["start_ns"] <= first + pin["s"] <= steady[0]["end_ns"], (f["rule_id"], pin)


def _check_nvtx(driver: Any, built: Built) -> None:
    """The NVTX panel's kernel time is nvtx_summary's, both projections (any thread of the
    process, and the range's own thread)."""
    want = {(q["domain"], q["name"]): q for q in _query(built.con, "nvtx_summary", built.report_id)}
    for r in _rows(driver, "nvtx"):
        q = want[(r["domain"], r["name"])]
        assert (r["total_ns"], r["process_kernel_ns"], r["kernel_ns"], r["process_kernels"]) == (
            q["total_ns"],
            q["process_kernel_ns"],
            q["kernel_ns"],
            q["process_kernels"],
        )


def _check_phases(driver: Any, built: Built) -> None:
    """The phases table is the `phases` query: where each phase starts and ends, since the capture started."""
    want = sorted(
        (q["phase"], q["start_ns"], q["end_ns"], q["duration_ns"])
        for q in _query(built.con, "phases", built.report_id)
    )
    shown = sorted(
        (r["phase"], r["start_ns"], r["end_ns"], r["duration_ns"]) for r in _rows(driver, "phases")
    )
    assert shown == want


def _launches(driver: Any, table: str) -> set[int]:
    return {r["launch_id"] for r in _rows(driver, table)}


def _check_timeline_counts(driver: Any, built: Built) -> None:
    """The events the timeline holds, per kind, are the rows of the canonical tables."""
    counts = driver.execute_script(
        "const t = window.nsaTimelines[0]; if (!t) return null; const c = {};"
        "t.tl.lanes.forEach(l => { c[l.kind] = (c[l.kind] || 0) + l.count; }); return c;"
    )
    con, rid = built.con, built.report_id
    tables = {"kernel": "kernels", "memcpy": "memcpy", "memset": "memset", "graph": "graph_executions"}
    expected = {
        kind: n
        for kind, table in tables.items()
        if (n := con.execute(f"SELECT count(*) FROM {table} WHERE report_id = ?", [rid]).fetchone()[0])  # type: ignore[attr-defined]
    }
    if counts is None:
        assert not expected
        return
    counts.pop("nvtx", None)
    assert counts == expected


def _check_diff(driver: Any, built: Built) -> None:
    d = built.data["diff"]
    result = nsa.diff(built.con, built.ids[0], built.ids[1])
    verdict = driver.execute_script("return document.querySelector('.verdict').dataset.verdict")
    assert verdict == result.verdict == d["verdict"]
    by_key = {k.name: k for k in result.kernels}
    for r in _rows(driver, "kernels_changed"):
        assert r["delta_ns"] == pytest.approx(by_key[r["name"]].delta_ns)
    if result.attribution:
        shown = _rows(driver, "attribution_by_cause")
        assert [(r["name"], r["delta_ns"]) for r in shown] == [
            (p.name, p.delta_ns) for p in result.attribution.by_cause
        ]


def _check_zoom(driver: Any) -> None:
    """A wheel turn over the middle of the timeline narrows the visible range around it."""
    before, after, label = driver.execute_script(
        "const t = window.nsaTimelines.filter(Boolean)[0], c = t.canvas, r = c.getBoundingClientRect();"
        "const before = t.view.slice(), text = t.el.parentNode.querySelector('.tl-range').textContent;"
        "c.dispatchEvent(new WheelEvent('wheel', {deltaY: -600, bubbles: true, cancelable: true,"
        "  clientX: r.left + 230 + (r.width - 230) / 2, clientY: r.top + 30}));"
        "return [before, [Number(t.el.dataset.viewA), Number(t.el.dataset.viewB)],"
        "        text !== t.el.parentNode.querySelector('.tl-range').textContent];"
    )
    assert after[1] - after[0] < 0.5 * (before[1] - before[0])
    assert before[0] <= after[0] < after[1] <= before[1]
    assert label
    driver.execute_script(
        "const t = window.nsaTimelines.filter(Boolean)[0]; t.setView(t.full[0], t.full[1]);"
    )


def _check_hover(driver: Any) -> None:
    """Hovering the longest event of the first lane shows its name, duration and launch call."""
    shown, name, api = driver.execute_script(
        "const t = window.nsaTimelines.filter(Boolean)[0];"
        "const row = t.rows.find(r => r.type === 'lane' && r.lane.d.length), l = row.lane;"
        "let i = 0; l.d.forEach((d, j) => { if (d > l.d[i]) i = j; });"
        "t.setView(l.start[i] - l.d[i], l.start[i] + 2 * l.d[i] + 1000);"
        "const r = t.canvas.getBoundingClientRect();"
        "t.canvas.dispatchEvent(new MouseEvent('mousemove', {bubbles: true,"
        "  clientX: r.left + t.x(l.start[i] + l.d[i] / 2), clientY: r.top + row.y + row.h / 2}));"
        "const api = l.a && l.a[i] >= 0 ? t.tl.apis[l.a[i]] : null;"
        "const out = [t.tip.textContent, t.tl.names[l.n[i]], api]; t.tip.style.display = 'none'; t.setView(t.full[0], t.full[1]); return out;"
    )
    assert name in shown
    if api:
        assert f"launch call {api}" in shown


def _screenshot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(int(height) + 120, 9000))
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
