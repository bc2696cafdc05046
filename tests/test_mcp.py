"""`nsa mcp`: a Model Context Protocol session with the SDK's own client over stdio (issue 34).

The server runs as a real `python -m nsight_analytics mcp --db W` subprocess; the client lists
its tools and resources, runs a library query, read-only SQL and the findings, and gets one
sentence back for mistakes. Expected numbers come from sqlite3 on the source export.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp", reason="the optional MCP SDK is not installed (pip install '.[mcp]')")

from mcp import Client, StdioServerParameters

DATA = Path(__file__).parent / "data"
SRC = DATA / "h100_nsys2025.3_idle_gaps.sqlite"
BEFORE = DATA / "h100_nsys2025.3_sync_loop_before.sqlite.gz"
AFTER = DATA / "h100_nsys2025.3_sync_loop_after.sqlite.gz"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("mcp") / "w.duckdb"
    subprocess.run(
        [sys.executable, "-m", "nsight_analytics", "ingest", str(SRC), "--db", str(db), "-q"], check=True
    )
    return db


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def _session(db: Path) -> dict[str, Any]:
    """One stdio session: everything the assertions need, gathered in one server process."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "nsight_analytics", "mcp", "--db", str(db)], cwd=str(db.parent)
    )
    out: dict[str, Any] = {}
    async with Client(params, read_timeout_seconds=120) as client:
        out["tools"] = {t.name: t for t in (await client.list_tools()).tools}
        out["resources"] = {str(r.uri) for r in (await client.list_resources()).resources}
        schema = await client.read_resource("nsa://schema")
        out["schema"] = "".join(getattr(c, "text", "") for c in schema.contents)
        out["reports"] = await client.call_tool("list_reports", {})
        out["count"] = await client.call_tool(
            "sql", {"statement": "SELECT count(*) AS n, sum(end_ns - start_ns) AS busy FROM kernels"}
        )
        out["summary"] = await client.call_tool(
            "query", {"name": "kernel_summary", "report_id": 1, "limit": 2}
        )
        out["findings"] = await client.call_tool("findings", {"report_id": 1, "top": 3})
        out["bad_query"] = await client.call_tool("query", {"name": "no_such_query"})
        out["bad_param"] = await client.call_tool("query", {"name": "gaps", "params": {"min_gap_ns": "soon"}})
        out["write"] = await client.call_tool("sql", {"statement": "DELETE FROM reports"})
        out["after_write"] = await client.call_tool("sql", {"statement": "SELECT count(*) AS n FROM reports"})
        out["ingest"] = [await client.call_tool("ingest", {"path": str(p)}) for p in (BEFORE, AFTER)]
        out["diff"] = await client.call_tool("diff", {"a": "2", "b": "3"})
        out["bad_diff"] = await client.call_tool("diff", {"a": "2", "b": "/etc/passwd"})
    return out


@pytest.fixture(scope="module")
def session(workspace: Path) -> dict[str, Any]:
    return asyncio.run(_session(workspace))


def test_tools_and_resources_are_listed(session: dict[str, Any]) -> None:
    tools = session["tools"]
    assert {"list_reports", "list_runs", "ingest", "query", "sql", "findings", "diff"} <= set(tools)
    assert tools["sql"].annotations.read_only_hint is True
    assert tools["ingest"].annotations.read_only_hint is False
    assert {"nsa://schema", "nsa://queries"} <= session["resources"]
    assert "## kernels" in session["schema"] or "kernels" in session["schema"].split("\n", 40)[-1]


def test_sql_and_query_answer_with_the_exports_numbers(session: dict[str, Any]) -> None:
    with sqlite3.connect(SRC) as src:
        n, busy = src.execute(
            'SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL'
        ).fetchone()
        top = src.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
            'GROUP BY s.value ORDER BY sum(k."end" - k.start) DESC LIMIT 1'
        ).fetchone()[0]
        kinds = src.execute("SELECT count(DISTINCT shortName) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    count = _text(session["count"])
    assert not session["count"].is_error
    assert f"| {n} |" in count.replace(",", "") and str(busy) in count.replace(",", "")
    summary = _text(session["summary"])
    assert f"| {top} |" in summary.replace(",", "")
    assert f"{kinds - 2} more rows of {kinds}" in summary  # bounded: two rows, and the rest counted
    assert "report 1" in _text(session["reports"]) or SRC.name in _text(session["reports"])


def test_findings_come_ranked_and_bounded(session: dict[str, Any]) -> None:
    text = _text(session["findings"])
    assert not session["findings"].is_error
    assert "gpu-idle" in text and "small-kernel-storm" in text
    assert text.index("gpu-idle") < text.index("small-kernel-storm")


def test_mistakes_are_one_sentence_and_change_nothing(session: dict[str, Any]) -> None:
    for key, words in (
        ("bad_query", "no_such_query"),
        ("bad_param", "min_gap_ns"),
        ("write", "reports"),
    ):
        res = session[key]
        assert res.is_error, key
        text = _text(res)
        assert words in text and "Traceback" not in text and len(text.splitlines()) == 1, text
    assert "| 1 |" in _text(session["after_write"])  # the refused DELETE removed nothing


def test_cli_without_the_sdk_says_how_to_install(workspace: Path, tmp_path: Path) -> None:
    """A Python without `mcp` gets one sentence and exit 2 (the SDK is hidden by a stub module)."""
    stub = tmp_path / "stub"
    (stub / "mcp").mkdir(parents=True)
    (stub / "mcp" / "__init__.py").write_text("raise ImportError('hidden for the test')\n")
    env = {"PYTHONPATH": str(stub), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(
        [sys.executable, "-m", "nsight_analytics", "mcp", "--db", str(workspace)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "pip install 'nsight-analytics[mcp]'" in res.stderr and "Traceback" not in res.stderr


def test_ingest_then_diff(session: dict[str, Any]) -> None:
    """The assistant ingests the before/after pair of the sync loop and asks what changed: the
    after program drops the per-step synchronise, so the verdict is an improvement."""
    first, second = (_text(r) for r in session["ingest"])
    assert first.startswith("report 2 (nsys") and second.startswith("report 3 (nsys")
    text = _text(session["diff"])
    assert not session["diff"].is_error, text
    assert "IMPROVEMENT" in text.splitlines()[0] or "IMPROVEMENT" in text[:400], text[:400]
    assert session["bad_diff"].is_error and "report ids" in _text(session["bad_diff"])
