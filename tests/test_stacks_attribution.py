"""Which line of code: launch_stacks, hot_stacks and the findings that name a line (gpu-idle,
small-kernel-storm, host-sync, startup), on the stack_loop captures of tests/data/stacks/
(fixtures/captures/stack_loop.py) and on rule cases (tests/rules/host_sync.py, small_kernel_storm.py). Expected lines come
from the program's source (ast); expected counts from the exports (sqlite3, JSON)."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest
from rules import CASES
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
    in load_batch, which the steady window leaves out: 45 of 70 samples. After the last step, 40 in
    train_step (a tear-down, as destroy_process_group in stack_ddp.py), which the window leaves out
    too: counted, train_step would win (25 + 40 > 45)."""
    from rules.build_runs import MS, STEPS, STRAGGLER

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
    samples += [(STEPS * 20 * MS + k * MS, 2) for k in range(40)]  # after the last step ends
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


# ---- captures without backtraces of the CUDA calls: samples taken inside the calls (issue 33) ----


@pytest.fixture(scope="module")
def sampled(ws, tmp_path_factory):
    """The stacks capture without its CUDA call backtraces (the Python backtraces' NVTX rows,
    CUDA_CALLCHAINS and the runtime calls' callchainId dropped): Python and CPU samples only, as
    `nsys profile -s cpu --python-sampling=true` records them. Ingested into ws's workspace."""
    con, _, plain = ws
    path = tmp_path_factory.mktemp("sampled") / "h100_stack_loop_samples_only.sqlite"
    shutil.copyfile(plain["stacks"], path)
    with sqlite3.connect(path) as db:
        domain = dict(db.execute("SELECT text, domainId FROM NVTX_EVENTS WHERE eventType = 75").fetchall())
        db.execute(
            "DELETE FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ?",
            [domain["Python Backtrace on CUDA"]],
        )
        db.execute("DROP TABLE CUDA_CALLCHAINS")
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET callchainId = NULL")
    return con, nsa.ingest(con, path).report_id, path


def _samples_inside(db: sqlite3.Connection, calls: list[tuple[int, int, int]], samples_sql: str) -> list[int]:
    """Per call (globalTid, start, end): the samples of `samples_sql` (globalTid, start) inside it."""
    by_tid: dict[int, list[int]] = {}
    for tid, t in db.execute(samples_sql):
        by_tid.setdefault(tid, []).append(t)
    return [sum(a <= t <= b for t in by_tid.get(tid, [])) for tid, a, b in calls]


def test_launch_stacks_from_python_samples_inside_the_calls(sampled) -> None:
    con, rid, path = sampled
    rows = _rows(con, "launch_stacks", report_id=rid, kind="kernel", source="python_sample", top_n=None)
    line = _line_of("scale_params", "s.mul_(0.999)")
    top = rows[0]
    assert (top["user_function"], top["user_line"]) == ("scale_params", line)
    db = sqlite3.connect(path)
    domain = dict(db.execute("SELECT text, domainId FROM NVTX_EVENTS WHERE eventType = 75").fetchall())
    python = (
        "SELECT globalTid, start FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = "
        f"{domain['Python Periodic Sampling']}"
    )
    # one launch per kernel: the calls of its correlation id (a runtime call, its `_v7000` twin, the
    # driver call inside it) as one interval
    launches = db.execute(
        "SELECT r.tid, r.a, r.b, EXISTS (SELECT 1 FROM NVTX_EVENTS n WHERE n.eventType = 59 "
        "AND n.text = 'scale' AND n.globalTid = r.tid AND r.a BETWEEN n.start AND n.\"end\") "
        'FROM (SELECT correlationId, min(globalTid) AS tid, min(start) AS a, max("end") AS b '
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY correlationId) r "
        "WHERE r.correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    ).fetchall()
    inside = _samples_inside(db, [(t, a, b) for t, a, b, _ in launches], python)
    # every launch inside a `scale` range comes from scale_params' loop: those holding a sample
    assert top["calls"] == sum(n > 0 for n, x in zip(inside, launches) if x[3]) >= 10
    assert top["samples"] == sum(n for n, x in zip(inside, launches) if x[3])
    assert top["stacked_calls"] == sum(n > 0 for n in inside)
    assert top["total_calls"] == len(launches)


def test_findings_name_the_lines_from_samples(sampled) -> None:
    """Without CUDA backtraces the storm is named from the Python samples inside the launches;
    the per-step .item() syncs are too short for any sample to fall inside: host-sync says so."""
    con, rid, path = sampled
    storm = _finding(con, rid, "small-kernel-storm")
    loc = storm.evidence["location"]
    line = _line_of("scale_params", "s.mul_(0.999)")
    assert (loc["source"], loc["function"], loc["line"]) == ("python_sample", "scale_params", line)
    assert f"stack_loop.py:{line} in scale_params" in storm.title
    assert "by Python samples taken inside" in storm.message
    sync = _finding(con, rid, "host-sync", {"sync_share_info": 0.0})
    assert "location" not in sync.evidence
    db = sqlite3.connect(path)
    calls = db.execute(
        'SELECT r.globalTid, r.start, r."end" FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId '
        "WHERE s.value LIKE 'cuda%Synchronize%' AND r.start >= ?",
        [sync.evidence.get("steady_start_ns", 0) or 0],
    ).fetchall()
    python_or_cpu = (
        "SELECT globalTid, start FROM NVTX_EVENTS WHERE eventType = 34 UNION ALL "
        "SELECT globalTid, start FROM COMPOSITE_EVENTS"
    )
    assert sum(_samples_inside(db, calls, python_or_cpu)) == 0
    assert "None of the" in sync.recommendation and "too few to name the line" in sync.recommendation
    assert "--cudabacktrace=all" in sync.recommendation


def _short(symbol: str) -> str:
    """A C++ symbol's name without return type, template arguments and parameters (test's own)."""
    name = symbol.split("(", 1)[0].split("<", 1)[0]
    return name.rsplit(" ", 1)[-1]


@pytest.fixture(scope="module")
def clover(tmp_path_factory):
    from conftest import realdata

    path = realdata("nsys", "a100_nsys2024.5_perlmutter_cloverleaf.sqlite")
    con = nsa.connect(tmp_path_factory.mktemp("clover") / "w.duckdb")
    yield con, nsa.ingest(con, path).report_id, path
    con.close()


def test_cloverleaf_syncs_named_from_cpu_samples(clover) -> None:
    """cloverleaf (C++, `-s cpu`, no CUDA backtraces): the CPU samples of the calling thread inside
    its cudaDeviceSynchronize calls, per call the first whose stack holds a frame of the program's
    binary other than the static CUDA runtime, that innermost frame's function: launch_stacks' calls
    and blocked time per function, and host-sync's named function."""
    con, rid, path = clover
    db = sqlite3.connect(path)
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    calls = db.execute(
        'SELECT r.globalTid, r.start, r."end" FROM CUPTI_ACTIVITY_KIND_RUNTIME r '
        "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaDeviceSynchronize%' ORDER BY r.start"
    ).fetchall()
    program: dict[int, str] = {}  # sample id -> its innermost frame of the binary, not CUDA runtime
    for sid, depth, symbol, module in db.execute(
        "SELECT id, stackDepth, symbol, module FROM SAMPLING_CALLCHAINS ORDER BY id, stackDepth"
    ):
        name = strings[symbol]
        if sid in program or not strings[module].endswith("/cuda-cloverleaf") or name.startswith("0x"):
            continue
        if _short(name).startswith(("cuda", "__cuda", "cudart", "_start", "__libc_csu")):
            continue
        program[sid] = name
    samples: dict[int, list[tuple[int, int]]] = {}
    for sid, tid, t in db.execute("SELECT id, globalTid, start FROM COMPOSITE_EVENTS ORDER BY start"):
        samples.setdefault(tid, []).append((t, sid))
    per_function: dict[str, list[int]] = {}  # short name -> [calls, blocked ns]
    for tid, a, b in calls:
        named = [program[sid] for t, sid in samples.get(tid, []) if a <= t <= b and sid in program]
        if named:
            p = per_function.setdefault(named[0], [0, 0])
            p[0] += 1
            p[1] += b - a
    assert per_function
    rows = _rows(con, "launch_stacks", report_id=rid, kind="sync", source="cpu_sample",
                 pattern="^cudaDeviceSynchronize", top_n=None)  # fmt: skip
    got: dict[str, list[int]] = {}
    for r in rows:
        if r["user_function"] is not None and r["api_name"].startswith("cudaDeviceSynchronize"):
            p = got.setdefault(r["user_function"], [0, 0])
            p[0] += r["calls"]
            p[1] += r["api_ns"]
    assert got == per_function
    # the finding names the function that blocked longest, its template instances as one
    merged: dict[str, int] = {}
    for name, (_, ns) in per_function.items():
        merged[_short(name)] = merged.get(_short(name), 0) + ns
    top = max(merged, key=merged.__getitem__)
    sync = _finding(con, rid, "host-sync")
    assert _short(sync.evidence["location"]["function"]) == top
    assert sync.evidence["location"]["source"] == "cpu_sample"
    assert f"came from {top}<>()" in sync.message
    assert "by CPU samples taken inside" in sync.message


def test_gap_stacks_of_one_step(ws) -> None:
    """A step's idle time: the GPU's idle intervals (no kernel, copy or memset running) inside the
    NVTX range `step 5`, from the export; the stacks sampled in it name load_batch's work."""
    con, ids, plain = ws
    rid = ids["stacks"]
    rows = _rows(con, "gap_stacks", report_id=rid, step=5, top_n=None)
    db = sqlite3.connect(plain["stacks"])
    s0, s1 = db.execute(
        "SELECT start, \"end\" FROM NVTX_EVENTS WHERE eventType = 59 AND text = 'step 5'"
    ).fetchone()
    acts = sorted(db.execute(
        "SELECT start, \"end\" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, \"end\" FROM "
        "CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, \"end\" FROM CUPTI_ACTIVITY_KIND_MEMSET"
    ).fetchall())  # fmt: skip
    idle, reach = 0, acts[0][1]
    for a, b in acts[1:]:
        if a > reach:  # an idle interval [reach, a]
            idle += max(0, min(a, s1) - max(reach, s0))
        reach = max(reach, b)
    assert {r["idle_ns"] for r in rows} == {idle}
    python = [r for r in rows if r["source"] == "python_sample"]
    assert 0 < sum(r["explained_ns"] for r in python) <= idle
    src = _source_lines()
    top = python[0]
    assert top["user_function"] in ("busy_python", "load_batch")
    assert top["user_line"] in src[top["user_function"]]["body"]
    # the step's idle time is part of the window's
    whole = _rows(con, "gap_stacks", report_id=rid, top_n=None)
    assert idle < whole[0]["idle_ns"]
    assert _rows(con, "gap_stacks", report_id=rid, step=999) == []  # no such step: no idle time
