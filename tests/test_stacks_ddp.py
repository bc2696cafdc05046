"""Which line of code on a multi-rank capture: tests/data/stacks/ddp/ (fixtures/captures/stack_ddp.py
under torchrun on 2 GPUs, one nsys report per rank with Python sampling and backtraces). Rank 1 is a
straggler: it runs augment_batch() (pure Python, ~12 ms) before its forward and backward passes, so
rank 0 waits for it inside the gradient all-reduce. Expected lines come from the program's source
(ast); expected sample counts from the exports (sqlite3, the Python samples' NVTX payloads)."""

from __future__ import annotations

import ast
import gzip
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest

import nsight_analytics as nsa
from conftest import ROOT
from rows import union_within

DATA = ROOT / "tests" / "data" / "stacks" / "ddp"
PROGRAM = ROOT / "fixtures" / "captures" / "stack_ddp.py"
RANKS = [DATA / f"h200x2_nsys2025.3_stack_ddp_rank{r}.sqlite.gz" for r in (0, 1)]


def _body(function: str) -> set[int]:
    """The lines of the statements inside `function` of stack_ddp.py."""
    for node in ast.parse(PROGRAM.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return {n.lineno for n in ast.walk(node) if isinstance(n, ast.stmt) and n is not node}
    raise AssertionError(function)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stack_ddp")
    for gz in RANKS:
        with gzip.open(gz) as src, (tmp / gz.name.removesuffix(".gz")).open("wb") as dst:
            shutil.copyfileobj(src, dst)
    con = nsa.connect(tmp / "w.duckdb")
    reports = {r: nsa.ingest(con, tmp / gz.name.removesuffix(".gz")).report_id for r, gz in enumerate(RANKS)}
    nsa.make_run(con, list(reports.values()), "stack_ddp")  # as `nsa ingest` does for the rank files
    found = nsa.findings(con)
    yield con, reports, found, tmp
    con.close()


def _python_samples(path: Path, start: int, end: int) -> list[str | None]:
    """The innermost function of each Python sample (NVTX domain 'Python Periodic Sampling') taken in
    [start, end): payload = 32-byte header, u64 thread state id, u32 state, u32 frame count, then
    24-byte frames {u64 function, u64 file (StringIds), i32 line, pad}, innermost first."""
    db = sqlite3.connect(path)
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    (domain,) = db.execute(
        "SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'Python Periodic Sampling'"
    ).fetchone()
    out: list[str | None] = []
    for (blob,) in db.execute(
        "SELECT binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ? AND start >= ? AND start < ?",
        [domain, start, end],
    ):
        n = struct.unpack_from("<I", blob, 32 + 12)[0]
        out.append(strings[struct.unpack_from("<Q", blob, 32 + 16)[0]] if n else None)
    db.close()
    return out


def _steps(path: Path) -> dict[int, tuple[int, int]]:
    db = sqlite3.connect(path)
    rows = db.execute("SELECT text, start, \"end\" FROM NVTX_EVENTS WHERE text LIKE 'step %'").fetchall()
    db.close()
    return {int(t.split()[1]): (s, e) for t, s, e in rows}


def test_the_ranks_form_one_run(run) -> None:
    con, reports, _, _ = run
    ranks = con.execute("SELECT rank, report_id FROM ranks ORDER BY rank").fetchall()
    assert ranks == [(0, reports[0]), (1, reports[1])]


def test_straggler_names_augment_batch(run) -> None:
    """The straggler finding names rank 1 and the line of augment_batch its Python samples in its
    steady steps ran under, counted as the export's samples of that window."""
    con, reports, found, tmp = run
    late = [f for f in found if f.rule_id == "straggler-rank"]
    assert [(f.ranks, f.report_id) for f in late] == [([1], reports[1])]
    loc = late[0].evidence["location"]
    assert loc["function"] == "augment_batch" and loc["file"].endswith("stack_ddp.py")
    assert loc["line"] in _body("augment_batch")
    assert f"stack_ddp.py:{loc['line']} in augment_batch" in late[0].message
    # the window: rank 1's first steady step's start to its last step's end (steps from NVTX `step N`;
    # which step is the first steady one is the steady-state rule's, read from the workspace)
    (first,) = con.execute("SELECT first_step FROM nsa_steady(?)", [reports[1]]).fetchone()
    steps = _steps(tmp / RANKS[1].name.removesuffix(".gz"))
    start, end = steps[sorted(steps)[first]][0], max(e for _, e in steps.values())
    innermost = _python_samples(tmp / RANKS[1].name.removesuffix(".gz"), start, end)
    assert loc["of_samples"] == len(innermost)
    assert loc["samples"] == innermost.count("augment_batch")
    assert loc["samples"] >= 0.5 * loc["of_samples"]  # ~12 ms of its ~18 ms step


def test_gpu_idle_of_the_straggler_names_augment_batch(run) -> None:
    _, reports, found, _ = run
    idle = [f for f in found if f.rule_id == "gpu-idle" and f.report_id == reports[1]]
    assert len(idle) == 1
    loc = idle[0].evidence["location"]
    assert (loc["function"], loc["callers"]) == ("augment_batch", "load_batch < step < <module>")
    assert loc["line"] in _body("augment_batch")
    assert f"stack_ddp.py:{loc['line']} in augment_batch" in idle[0].message


def test_the_fast_rank_is_a_victim_not_augment_batch(run) -> None:
    """Rank 0 never runs augment_batch: its waiting is inside the all-reduce (exposed communication
    names rank 1), and its own GPU idle time (launch-bound host code) names a line of its steps, not
    the straggler's function."""
    _, reports, found, _ = run
    mine = [f for f in found if f.report_id == reports[0]]
    assert all("augment_batch" not in f.message for f in mine)
    exposed = [f for f in found if f.rule_id == "exposed-communication"]
    assert exposed and "waiting for straggler rank 1" in exposed[0].title
    idle = [f for f in mine if f.rule_id == "gpu-idle"]
    assert len(idle) == 1
    loc = idle[0].evidence["location"]
    assert loc["function"] == "step" and loc["line"] in _body("step")


def _rows(con, name: str, **params) -> list[dict]:
    cols = [c.name for c in nsa.queries.get(name).columns]
    return [dict(zip(cols, r)) for r in nsa.query(con, name, **params).fetchall()]


def test_gap_stacks_of_a_steady_step_names_augment_batch(run) -> None:
    """Step 5 of rank 1: its idle time (the GPU's idle intervals inside NVTX `step 5`, from the
    export) waited most on augment_batch's line, by Python samples."""
    con, reports, _, tmp = run
    path = tmp / RANKS[1].name.removesuffix(".gz")
    rows = _rows(con, "gap_stacks", report_id=reports[1], step=5, top_n=None)
    s0, s1 = _steps(path)[5]
    db = sqlite3.connect(path)
    acts = db.execute(
        'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, "end" FROM '
        'CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMSET'
    ).fetchall()
    db.close()
    idle = (s1 - s0) - union_within(acts, s0, s1)  # the step's time with no kernel, copy or memset
    assert {r["idle_ns"] for r in rows} == {idle}
    python = [r for r in rows if r["source"] == "python_sample"]
    top = python[0]
    assert top["user_function"] == "augment_batch" and top["user_line"] in _body("augment_batch")
    assert top["explained_ns"] >= 0.5 * idle  # ~12 ms of pure Python in a ~18 ms step


def test_gap_stacks_refuses_a_warm_up_step(run) -> None:
    """Step 0 (the first step: CUDA/NCCL start-up, several times a steady step) is not a steady
    step: one note row says why and names the step's span for hot_stacks."""
    con, reports, _, tmp = run
    s0, s1 = _steps(tmp / RANKS[1].name.removesuffix(".gz"))[0]
    rows = _rows(con, "gap_stacks", report_id=reports[1], step=0)
    assert len(rows) == 1 and rows[0]["source"] is None and rows[0]["idle_ns"] is None
    assert rows[0]["note"].startswith("step 0 is a warm-up step")
    assert f"hot_stacks with start_ns {s0} and end_ns {s1}" in rows[0]["note"]
    # the span it names holds the host's samples of that step
    hot = _rows(con, "hot_stacks", report_id=reports[1], start_ns=s0, end_ns=s1, source="python_sample")
    assert hot and hot[0]["samples"] > 0
