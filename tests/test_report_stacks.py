"""The report's flame graph of the idle time (report/flame.py, render/svg.py `flame`) on the
stack_loop captures of tests/data/stacks/: drawn from gap_stacks' rows (the numbers `nsa query
gap_stacks` prints), naming the program's line, and a one-line note where the capture has no stacks."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from test_stacks import KINETO, NOSTACKS, STACKS, _line_of

import nsight_analytics as nsa
from nsight_analytics import api
from nsight_analytics.render import html

FRAME = re.compile(
    r'<g class="frame" data-name="([^"]*)" data-kind="(\w+)" data-ns="(\d+)" data-where="([^"]*)">'
    r"<title>([^<]*)</title><rect class=\"mark\" x=\"([\d.]+)\" y=\"(\d+)\" width=\"([\d.]+)\""
)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("report_stacks")
    con = nsa.connect(tmp / "w.duckdb")
    out = {}
    for name, path in (("stacks", STACKS), ("nostacks", NOSTACKS), ("kineto", KINETO)):
        if path.suffix == ".gz" and path.name.endswith(".sqlite.gz"):
            plain = tmp / path.name.removesuffix(".gz")
            with gzip.open(path) as src, plain.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            path = plain
        rid = nsa.ingest(con, path).report_id
        out[name] = (rid, html.page(api.report_data(con, rid)))
    yield con, out
    con.close()


def _flames(page: str) -> dict[str, list[dict[str, Any]]]:
    """{source: [frame]} from the panel's SVG, each frame with its attributes and geometry."""
    out: dict[str, list[dict[str, Any]]] = {}
    for source, svg in re.findall(
        r'<div class="flame" data-source="(\w+)">(.*?)</svg></div>', page, re.DOTALL
    ):
        out[source] = [
            {"name": unescape(n), "kind": k, "ns": int(ns), "where": unescape(w), "tip": unescape(t),
             "x": float(x), "depth": int(y) // 18, "w": float(wd)}
            for n, k, ns, w, t, x, y, wd in FRAME.findall(svg)
        ]  # fmt: skip
    return out


def _blob(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="nsa-data">(.*?)</script>', page, re.DOTALL)
    assert m
    return json.loads(m.group(1))


def _leaves(node: dict[str, Any]) -> int:
    """The time of the frames nothing is below (each row of gap_stacks ends in one), added up."""
    own = node["ns"] - sum(c["ns"] for c in node["children"])
    return (own if node["kind"] != "idle" else 0) + sum(_leaves(c) for c in node["children"])


def _panel_state(page: str) -> str:
    return re.search(r'data-panel="idle_stacks" data-state="(\w+)"', page).group(1)  # type: ignore[union-attr]


def test_flame_graph_is_gap_stacks_as_a_tree(pages: Any) -> None:
    con, out = pages
    rid, page = out["stacks"]
    assert _panel_state(page) == "drawn"
    flames = _flames(page)
    assert set(flames) == {"python_sample", "cpu_sample"}
    cols = [c.name for c in nsa.queries.get("gap_stacks").columns]
    rows = [dict(zip(cols, r)) for r in nsa.query(con, "gap_stacks", report_id=rid, top_n=None).fetchall()]
    for source, frames in flames.items():
        mine = [r for r in rows if r["source"] == source]
        root = frames[0]
        assert (root["name"], root["kind"], root["depth"]) == ("idle time", "idle", 0)
        assert root["ns"] == mine[0]["idle_ns"]
        # the tree in the page's data: the row under the root holds every explained nanosecond, and
        # a frame's time is its children's and what it explains itself
        (tree,) = [t for t in _blob(page)["data"]["panels"]["idle_stacks"]["trees"] if t["source"] == source]
        explained = sum(r["explained_ns"] for r in mine)
        assert tree["explained_ns"] == sum(c["ns"] for c in tree["root"]["children"]) == explained
        assert _leaves(tree["root"]) == explained
        # the SVG draws frames at least half a pixel wide: the narrow ones only are left out
        drawn = sum(f["ns"] for f in frames if f["depth"] == 1)
        assert explained - drawn <= len(tree["root"]["children"]) * 0.5 * root["ns"] / 760
        # a user frame's time is what gap_stacks says its rows explain
        for f in frames:
            if f["kind"] == "user":
                line = int(f["where"].rsplit(":", 1)[1])
                assert f["ns"] <= sum(
                    r["explained_ns"]
                    for r in mine
                    if (r["user_function"], r["user_line"]) == (f["name"], line)
                )
    # the widest user frame of the Python samples is busy_python's loop line, under load_batch
    python = flames["python_sample"]
    top = max((f for f in python if f["kind"] == "user"), key=lambda f: f["ns"])
    assert top["name"] == "busy_python"
    assert top["where"] == f"captures/stack_loop.py:{_line_of('busy_python', 'acc += (i * i)')}"
    assert "stack_loop.py:" in top["tip"] and "% of the idle time" in top["tip"]
    above = [f for f in python if f["depth"] == top["depth"] - 1 and f["x"] <= top["x"] < f["x"] + f["w"]]
    assert [f["name"] for f in above] == ["load_batch"]
    # labels are inside the SVG: the page needs no script for them
    assert re.search(r"<text [^>]*>busy_python captures/stack_loop", page)


def test_kineto_flame_graph(pages: Any) -> None:
    _, out = pages
    _, page = out["kineto"]
    flames = _flames(page)
    assert list(flames) == ["kineto_python"]
    users = {f["name"] for f in flames["kineto_python"] if f["kind"] == "user"}
    assert {"busy_python", "load_batch"} <= users


def test_no_stacks_says_which_capture_options_add_them(pages: Any) -> None:
    _, out = pages
    _, page = out["nostacks"]
    assert _panel_state(page) == "absent"
    note = re.search(
        r'data-panel="idle_stacks" data-state="absent"><h2>[^<]*</h2><p class="note">([^<]*)</p>', page
    )
    assert note and "-s cpu --python-sampling=true" in unescape(note.group(1))
    assert '<div class="flame"' not in page


def test_a_report_without_gaps_or_stacks_names_the_options(tmp_path: Path) -> None:
    from report_cases import DEMO

    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        rid = nsa.ingest(con, DEMO).report_id
        page = html.page(api.report_data(con, rid))
    finally:
        con.close()
    assert _panel_state(page) == "absent"
    assert "-s cpu" in unescape(page.split('data-panel="idle_stacks"', 1)[1].split("</section>", 1)[0])
