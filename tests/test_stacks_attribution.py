"""Which line of code: launch_stacks, hot_stacks and the findings that name a line (gpu-idle,
small-kernel-storm, host-sync, startup), on the stack_loop captures of tests/data/stacks/
(fixtures/captures/stack_loop.py) and on rule cases (tests/rules/cases.py). Expected lines come
from the program's source (ast); expected counts from the exports (sqlite3, JSON)."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest
from rules.cases import CASES
from test_rules_cases import load_case
from test_stacks import KINETO, NOSTACKS, STACKS, _line_of, _source_lines

import nsight_analytics as nsa
from nsight_analytics.rules import run_rules
from nsight_analytics.rules.stacks import KINETO_HINT, NSYS_HINT

LOCATED = [c for c in CASES if "location" in c]


@pytest.mark.parametrize("case", LOCATED, ids=[c["id"] for c in LOCATED])
def test_rule_case_names_the_line(case: dict, tmp_path: Path) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, case["rows"])
        found = run_rules(con, config=case.get("config"), only=case["rules"])
    finally:
        con.close()
    assert [(f.rule_id, f.severity) for f in found] == case["expect"]
    f = found[0]
    assert {k: f.evidence["location"][k] for k in case["location"]} == case["location"]
    assert f.evidence["location"]["file"] == "/home/u/train.py"
    assert f.evidence["location"]["callers"] == "main"
    for words in case["says"]:
        assert words in f"{f.title} {f.message}", (words, f.title, f.message)
    assert NSYS_HINT not in f.recommendation


def test_rule_case_without_stacks_gives_the_hint_once(tmp_path: Path) -> None:
    """The same rows without stacks: no location, and the capture option said on one finding."""
    cases = {c["id"]: c for c in CASES}
    rows = dict(cases["storm-critical"]["rows"])
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, rows)
        found = run_rules(con, only=["small-kernel-storm", "host-sync"], config={"sync_share_info": 0.0})
    finally:
        con.close()
    assert {f.rule_id for f in found} == {"small-kernel-storm"}
    assert all("location" not in f.evidence for f in found)
    assert sum(NSYS_HINT in f.recommendation for f in found) == 1


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attribution")
    plain = {}
    for name, gz in (("stacks", STACKS), ("nostacks", NOSTACKS)):
        plain[name] = tmp / gz.name.removesuffix(".gz")
        with gzip.open(gz) as src, plain[name].open("wb") as dst:
            shutil.copyfileobj(src, dst)
    con = nsa.connect(tmp / "w.duckdb")
    ids = {name: nsa.ingest(con, path).report_id for name, path in plain.items()}
    ids["kineto"] = nsa.ingest(con, KINETO).report_id
    yield con, ids, plain
    con.close()


def _rows(con, name: str, **params) -> list[dict]:
    cols = [c.name for c in nsa.queries.get(name).columns]
    return [dict(zip(cols, r)) for r in nsa.query(con, name, **params).fetchall()]


def _kineto_events() -> list[dict]:
    with gzip.open(KINETO) as fh:
        return json.load(fh)["traceEvents"]


def test_launch_stacks_names_the_storm_line_nsys(ws) -> None:
    con, ids, plain = ws
    rows = _rows(con, "launch_stacks", report_id=ids["stacks"], kind="kernel", top_n=None)
    python = [r for r in rows if r["source"] == "python_cuda"]
    top = python[0]
    assert (top["user_function"], top["user_line"]) == (
        "scale_params",
        _line_of("scale_params", "s.mul_(0.999)"),
    )
    assert top["callers"].startswith("train_step < main")
    # the launches inside the `scale` NVTX ranges that carry a backtrace, and their kernels' time
    db = sqlite3.connect(plain["stacks"])
    calls, gpu_ns = db.execute(
        'SELECT count(DISTINCT r.correlationId), sum(k."end" - k.start) FROM NVTX_EVENTS n '
        'JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid AND r.start BETWEEN n.start AND n."end" '
        "JOIN StringIds s ON s.id = r.nameId JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
        "WHERE n.eventType = 59 AND n.text = 'scale' AND s.value = 'cudaLaunchKernel' AND r.callchainId IS NOT NULL"
    ).fetchone()
    assert (top["calls"], top["launched"], top["gpu_ns"]) == (calls, calls, gpu_ns)
    # every kernel has one launch call (the export also lists a call's `_v7000` twin, same correlation id)
    kernels = db.execute("SELECT count(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert top["total_calls"] == kernels
    # a time window and a pattern restrict the calls
    first_scale = db.execute(
        "SELECT min(start), max(\"end\") FROM NVTX_EVENTS WHERE eventType = 59 AND text = 'scale'"
    ).fetchone()
    windowed = _rows(con, "launch_stacks", report_id=ids["stacks"], kind="kernel", start_ns=first_scale[0],
                     end_ns=first_scale[0] + 1, top_n=None)  # fmt: skip
    assert all(r["calls"] <= 1 for r in windowed)
    named = _rows(con, "launch_stacks", report_id=ids["stacks"], pattern="^no such kernel$")
    assert named == []


def test_launch_stacks_names_the_item_line(ws) -> None:
    con, ids, plain = ws
    rows = _rows(con, "launch_stacks", report_id=ids["stacks"], kind="sync", top_n=None)
    item = [r for r in rows if r["source"] == "python_cuda" and r["user_function"] == "report_loss"]
    assert [r["user_line"] for r in item] == [_line_of("report_loss", "loss.item()")]
    assert item[0]["api_name"] == "cudaStreamSynchronize"
    # one .item() per train_step, and one `scale` range per train_step
    db = sqlite3.connect(plain["stacks"])
    steps = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text = 'scale'").fetchone()[
        0
    ]
    assert item[0]["calls"] == steps


def test_launch_stacks_kineto(ws) -> None:
    con, ids, _ = ws
    src = _source_lines()
    rows = _rows(con, "launch_stacks", report_id=ids["kineto"], top_n=None)
    kernel = [r for r in rows if r["kind"] == "kernel"]
    assert (kernel[0]["user_function"], kernel[0]["user_line"]) == (
        "scale_params",
        src["scale_params"]["def"],
    )
    assert kernel[0]["library_frame"].startswith("<built-in method mul_")
    # launches whose start lies inside a scale_params frame of their thread (JSON arithmetic)
    events = _kineto_events()
    frames = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in events
              if e.get("cat") == "python_function" and e["name"].endswith(": scale_params")]  # fmt: skip
    launches = [e for e in events if e.get("cat") == "cuda_runtime" and e["name"] == "cudaLaunchKernel"]
    inside = sum(any(t == e["tid"] and a <= e["ts"] <= b for t, a, b in frames) for e in launches)
    assert kernel[0]["calls"] == inside > 0
    sync = [r for r in rows if r["kind"] == "sync" and r["user_function"] == "report_loss"]
    assert sync and sync[0]["user_line"] == src["report_loss"]["def"]
    assert sync[0]["library_frame"].startswith("<built-in method item")


def test_launch_and_hot_stacks_say_which_option_records_stacks(ws) -> None:
    con, ids, _ = ws
    rows = _rows(con, "launch_stacks", report_id=ids["nostacks"])
    assert [r["source"] for r in rows] == [None]
    assert "--cudabacktrace=all --python-backtrace=cuda" in rows[0]["note"]
    hot = _rows(con, "hot_stacks", report_id=ids["nostacks"])
    assert [r["source"] for r in hot] == [None]
    assert "-s cpu --python-sampling=true" in hot[0]["note"]
    assert "with_stack=True" in _rows(con, "hot_stacks", report_id=ids["kineto"])[0]["note"]


def test_hot_stacks_counts_samples_per_frame(ws) -> None:
    con, ids, plain = ws
    rows = _rows(con, "hot_stacks", report_id=ids["stacks"], source="python_sample", top_n=None)
    db = sqlite3.connect(plain["stacks"])
    domain = dict(db.execute("SELECT text, domainId FROM NVTX_EVENTS WHERE eventType = 75").fetchall())
    blobs = [b for (b,) in db.execute(
        "SELECT binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ?",
        [domain["Python Periodic Sampling"]],
    )]  # fmt: skip
    strings = dict(db.execute("SELECT id, value FROM StringIds").fetchall())

    def functions(blob: bytes) -> list[str]:  # innermost first, as test_stacks decodes them
        n = struct.unpack_from("<I", blob, 32 + 12)[0]
        return [strings[struct.unpack_from("<Q", blob, 32 + 16 + 24 * i)[0]] for i in range(n)]

    stacks = [functions(b) for b in blobs]
    assert {r["samples"] for r in rows} == {len(stacks)}
    busy = [r for r in rows if r["function"] == "busy_python"]
    assert sum(r["self_samples"] for r in busy) == sum(s[:1] == ["busy_python"] for s in stacks) > 100
    assert sum(r["total_samples"] for r in busy) == sum("busy_python" in s for s in stacks)
    assert all(r["user"] for r in busy)
    # busy_python is the innermost user frame wherever it is on the stack (it calls only built-ins)
    assert sum(r["user_samples"] for r in busy) == sum(r["total_samples"] for r in busy)
    # a window of one thread holds fewer samples
    half = con.execute(
        "SELECT median(start_ns) FROM stack_events WHERE report_id = ? AND source = 'python_sample'",
        [ids["stacks"]],
    ).fetchone()[0]
    later = _rows(con, "hot_stacks", report_id=ids["stacks"], source="python_sample", start_ns=int(half))
    assert 0 < later[0]["samples"] < len(stacks)


def _finding(con, rid: int, rule: str, config: dict | None = None):
    found = [f for f in nsa.findings(con, report_id=rid, config=config) if f.rule_id == rule]
    assert len(found) == 1, rule
    return found[0]


def test_findings_name_the_lines_nsys(ws) -> None:
    con, ids, _ = ws
    rid = ids["stacks"]
    src = _source_lines()
    idle = _finding(con, rid, "gpu-idle").evidence["location"]
    assert idle["function"] in ("busy_python", "load_batch")
    assert idle["line"] in src[idle["function"]]["body"]
    assert idle["function"] == "load_batch" or idle["callers"].startswith("load_batch < train_step")
    storm = _finding(con, rid, "small-kernel-storm")
    assert (storm.evidence["location"]["function"], storm.evidence["location"]["line"]) == (
        "scale_params",
        _line_of("scale_params", "s.mul_(0.999)"),
    )
    assert f"stack_loop.py:{_line_of('scale_params', 's.mul_(0.999)')} in scale_params" in storm.title
    # the per-step syncs are too short for host-sync's thresholds: lowered, it names the .item() line
    sync = _finding(con, rid, "host-sync", {"sync_share_info": 0.0})
    lines = [(x["function"], x["line"]) for x in sync.evidence.get("locations", [sync.evidence["location"]])]
    assert ("report_loss", _line_of("report_loss", "loss.item()")) in lines
    assert f"stack_loop.py:{_line_of('report_loss', 'loss.item()')} in report_loss" in sync.message
    # start-up: the Python samples before the first step ran under the module's top level
    startup = _finding(con, rid, "startup").evidence["location"]
    assert startup["function"] == "<module>" and startup["file"].endswith("stack_loop.py")
    everything = nsa.findings(con, report_id=rid)
    assert not any(NSYS_HINT in f.recommendation for f in everything)


def test_findings_name_the_lines_kineto(ws) -> None:
    con, ids, _ = ws
    rid = ids["kineto"]
    src = _source_lines()
    idle = _finding(con, rid, "gpu-idle").evidence["location"]
    assert (idle["function"], idle["line"]) == ("busy_python", src["busy_python"]["def"])
    storm = _finding(con, rid, "small-kernel-storm").evidence["location"]
    assert (storm["function"], storm["line"]) == ("scale_params", src["scale_params"]["def"])
    sync = _finding(con, rid, "host-sync", {"sync_share_info": 0.0})
    lines = [(x["function"], x["line"]) for x in sync.evidence["locations"]]
    assert ("report_loss", src["report_loss"]["def"]) in lines
    assert not any(KINETO_HINT in f.recommendation for f in nsa.findings(con, report_id=rid))


def test_findings_without_stacks_say_the_option_once(ws) -> None:
    con, ids, _ = ws
    found = nsa.findings(con, report_id=ids["nostacks"], config={"sync_share_info": 0.0})
    assert {"gpu-idle", "small-kernel-storm", "host-sync"} <= {f.rule_id for f in found}
    assert not any("location" in f.evidence for f in found)
    assert sum(NSYS_HINT in f.recommendation for f in found) == 1


def test_straggler_names_its_hot_line(tmp_path: Path) -> None:
    """The run case's straggler (rank 2, report 3) with Python samples every 1 ms: in each steady
    step 9 in load_batch (its 9 ms `data` phase), 5 in train_step; in the warm-up step 20 more
    in load_batch, which the steady window leaves out: 45 of 70 samples."""
    from rules.run_cases import MS, STEPS, STRAGGLER

    frames = [
        {"report_id": 3, "frame_id": f, "kind": "python", "function": fn, "file": "/home/u/train.py", "line": line,
         "user": True}
        for f, fn, line in ((1, "load_batch", 30), (2, "train_step", 40), (3, "main", 50))
    ]  # fmt: skip
    stacks = [{"report_id": 3, "stack_id": s, "depth": d, "frame_id": f} for s, fs in ((1, (1, 3)), (2, (2, 3)))
              for d, f in enumerate(fs)]  # fmt: skip
    samples = [(0 + k * MS, 1) for k in range(20)]  # warm-up step 0 (the window starts at step 1)
    for i in range(1, STEPS):
        t = i * 20 * MS
        samples += [(t + k * MS, 1) for k in range(9)] + [(t + (9 + k) * MS, 2) for k in range(5)]
    events = [
        {"report_id": 3, "source": "python_sample", "start_ns": t, "end_ns": None, "pid": 100, "tid": 100,
         "global_tid": 100, "stack_id": s, "thread_state": "Running", "correlation_id": None}
        for t, s in samples
    ]  # fmt: skip
    rows = {**STRAGGLER, "stack_frames": frames, "stacks": stacks, "stack_events": events}
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, rows)
        found = run_rules(con, only=["straggler-rank"])
    finally:
        con.close()
    assert [(f.rule_id, f.ranks) for f in found] == [("straggler-rank", [2])]
    loc = found[0].evidence["location"]
    assert (loc["function"], loc["line"], loc["samples"], loc["of_samples"]) == ("load_batch", 30, 45, 70)
    assert loc["ns"] == 45 * MS
    assert "ran most under train.py:30 in load_batch (64% of them)" in found[0].message


def test_hint_names_the_missing_kind_of_stack(tmp_path: Path) -> None:
    """cloverleaf (a CUDA C++ program) was sampled (`-s cpu`) without CUDA backtraces: its storm
    finding says to add `--cudabacktrace=all`, not the whole set of flags it partly used."""
    from conftest import realdata

    path = realdata("nsys", "a100_nsys2024.5_perlmutter_cloverleaf.sqlite")
    with sqlite3.connect(path) as src:
        tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "SAMPLING_CALLCHAINS" in tables and "CUDA_CALLCHAINS" not in tables
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path).report_id
    found = nsa.findings(con, report_id=rid)
    con.close()
    hinted = [f for f in found if "do not cover it" in f.recommendation]
    assert len(hinted) == 1 and not any(NSYS_HINT in f.recommendation for f in found)
    text = hinted[0].recommendation
    assert "CPU samples" in text and "--cudabacktrace=all" in text and "-s cpu" not in text
