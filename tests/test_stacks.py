"""Call stacks (stack_frames, stacks, stack_events) and the gap_stacks query, on the stack_loop
captures of tests/data/stacks/ (fixtures/captures/stack_loop.py, capture_stacks.sh). Expected
values come from the program's source (ast) and from the exports themselves (sqlite3, JSON)."""

from __future__ import annotations

import ast
import gzip
import json
import shutil
import sqlite3
import struct
import sys
from pathlib import Path

import pytest

import nsight_analytics as nsa
from conftest import ROOT
from nsight_analytics import api
from nsight_analytics.ingest import stacks, timeline
from nsight_analytics.ingest.nsys import nsys_cli

DATA = ROOT / "tests" / "data" / "stacks"
PROGRAM = ROOT / "fixtures" / "captures" / "stack_loop.py"
STACKS = DATA / "nsys" / "h100_nsys2025.3_stack_loop_stacks.sqlite.gz"
NATIVE = DATA / "nsys" / "h100_nsys2025.3_stack_loop_native.sqlite.gz"
NOSTACKS = DATA / "nsys" / "h100_nsys2025.3_stack_loop_nostacks.sqlite.gz"
KINETO = DATA / "kineto" / "h100_torch2.11_stack_loop.json.gz"


def _source_lines() -> dict[str, dict[str, object]]:
    """Per function of stack_loop.py: its def line, its last line and the lines of its calls."""
    tree = ast.parse(PROGRAM.read_text())
    out: dict[str, dict[str, object]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            body = {n.lineno for n in ast.walk(node) if isinstance(n, ast.stmt) and n is not node}
            out[node.name] = {"def": node.lineno, "end": node.end_lineno, "body": body}
    return out


def _line_of(function: str, text: str) -> int:
    """The line of `text` inside `function` of stack_loop.py."""
    lines = PROGRAM.read_text().splitlines()
    f = _source_lines()[function]
    hits = [i + 1 for i in range(int(f["def"]), int(f["end"])) if text in lines[i]]  # type: ignore[call-overload]
    assert len(hits) == 1, (function, text, hits)
    return hits[0]


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace with the four captures; the plain SQLite exports for sqlite3."""
    tmp = tmp_path_factory.mktemp("stacks")
    plain = {}
    for name, gz in (("stacks", STACKS), ("native", NATIVE), ("nostacks", NOSTACKS)):
        plain[name] = tmp / gz.name.removesuffix(".gz")
        with gzip.open(gz) as src, plain[name].open("wb") as dst:
            shutil.copyfileobj(src, dst)
    con = nsa.connect(tmp / "w.duckdb")
    ids = {name: nsa.ingest(con, path).report_id for name, path in plain.items()}
    ids["kineto"] = nsa.ingest(con, KINETO).report_id
    yield con, ids, plain
    con.close()


def _frames(con, rid: int) -> set[tuple[str, int]]:
    rows = con.execute(
        "SELECT DISTINCT function, line FROM stack_frames WHERE report_id = ? AND kind = 'python' "
        "AND ends_with(file, 'stack_loop.py') AND user",
        [rid],
    ).fetchall()
    return {(f, int(line)) for f, line in rows}


def test_python_frames_name_the_program_lines(ws) -> None:
    con, ids, _ = ws
    api.materialise(con, ["stack_frames"])
    src = _source_lines()
    frames = _frames(con, ids["stacks"])
    # the lines each named function was sampled at, read from the source
    assert ("busy_python", _line_of("busy_python", "acc += (i * i) % 7")) in frames
    assert ("scale_params", _line_of("scale_params", "s.mul_(0.999)")) in frames
    assert ("report_loss", _line_of("report_loss", "loss.item()")) in frames
    assert ("load_batch", _line_of("load_batch", "busy_python(a.load_ms)")) in frames
    for function, line in frames:  # every frame of a function lies inside it
        if function in src:
            assert line in src[function]["body"], (function, line)  # type: ignore[operator]
    # Kineto names each function by its first line
    kineto = _frames(con, ids["kineto"])
    for name in ("load_batch", "busy_python", "scale_params", "report_loss", "train_step"):
        assert (name, src[name]["def"]) in kineto
    # library frames are not the user's
    assert con.execute(
        "SELECT count(*) FROM stack_frames WHERE user AND (file LIKE '%site-packages%' OR file LIKE 'torch/%' "
        "OR starts_with(function, '<built-in') OR module LIKE '%libc.so%' OR module LIKE '%libcuda%')"
    ).fetchone() == (0,)


def test_stack_events_count_what_the_export_holds(ws) -> None:
    con, ids, plain = ws
    api.materialise(con, ["stack_events"])
    db = sqlite3.connect(plain["stacks"])
    domain = dict(db.execute("SELECT text, domainId FROM NVTX_EVENTS WHERE eventType = 75").fetchall())
    expected = {
        "cpu_sample": db.execute("SELECT count(*) FROM COMPOSITE_EVENTS").fetchone()[0],
        "cuda_call": db.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE callchainId IS NOT NULL"
        ).fetchone()[0],
        "python_sample": db.execute(
            "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ?",
            [domain["Python Periodic Sampling"]],
        ).fetchone()[0],
        "python_cuda": db.execute(
            "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ?",
            [domain["Python Backtrace on CUDA"]],
        ).fetchone()[0],
    }
    got = dict(
        con.execute(
            "SELECT source, count(stack_id) FROM stack_events WHERE report_id = ? GROUP BY source",
            [ids["stacks"]],
        ).fetchall()
    )
    assert {k: got.get(k) for k in expected} == expected
    # the Python samples whose innermost frame is busy_python, decoded here from the payloads (header
    # of 32 bytes, state u64 + u32, count u32, then frames of {function id, file id, line})
    strings = dict(db.execute("SELECT id, value FROM StringIds").fetchall())
    busy = 0
    for (blob,) in db.execute(
        "SELECT binaryData FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ?",
        [domain["Python Periodic Sampling"]],
    ):
        n = struct.unpack_from("<I", blob, 32 + 12)[0]
        if n and strings[struct.unpack_from("<Q", blob, 32 + 16)[0]] == "busy_python":
            busy += 1
    assert busy > 100
    row = con.execute(
        "SELECT count(*) FROM stack_events e JOIN stacks s USING (report_id, stack_id) "
        "JOIN stack_frames f USING (report_id, frame_id) WHERE e.report_id = ? AND e.source = 'python_sample' "
        "AND s.depth = 0 AND f.function = 'busy_python'",
        [ids["stacks"]],
    ).fetchone()
    assert row == (busy,)
    assert con.execute(
        "SELECT count(*) FROM stack_events WHERE report_id = ? AND source NOT IN ('osrt_call')",
        [ids["nostacks"]],
    ).fetchone() == (0,)


def test_cuda_call_stacks_join_their_launches(ws) -> None:
    """Each Python backtrace on CUDA names its call by correlation id; the ones from scale_params are
    the kernel launches inside the `scale` NVTX ranges (the export's own range join)."""
    con, ids, plain = ws
    api.materialise(con, ["stack_events", "cuda_api"])
    rid = ids["stacks"]
    unjoined = con.execute(
        "SELECT count(*) FROM stack_events e ANTI JOIN cuda_api c ON c.report_id = e.report_id "
        "AND c.pid = e.pid AND c.correlation_id = e.correlation_id "
        "WHERE e.report_id = ? AND e.source IN ('cuda_call', 'python_cuda')",
        [rid],
    ).fetchone()
    assert unjoined == (0,)
    launches = con.execute(
        "SELECT count(DISTINCT e.correlation_id) FROM stack_events e JOIN stacks s USING (report_id, stack_id) "
        "JOIN stack_frames f USING (report_id, frame_id) "
        "JOIN cuda_api c ON c.report_id = e.report_id AND c.pid = e.pid AND c.correlation_id = e.correlation_id "
        "WHERE e.report_id = ? AND e.source = 'python_cuda' AND f.function = 'scale_params' "
        "AND c.name = 'cudaLaunchKernel'",
        [rid],
    ).fetchone()[0]
    db = sqlite3.connect(plain["stacks"])
    expected = db.execute(
        "SELECT count(DISTINCT r.correlationId) FROM NVTX_EVENTS n JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        'ON r.globalTid = n.globalTid AND r.start BETWEEN n.start AND n."end" '
        "JOIN StringIds s ON s.id = r.nameId WHERE n.eventType = 59 AND n.text = 'scale' "
        "AND s.value = 'cudaLaunchKernel' AND r.callchainId IS NOT NULL"
    ).fetchone()[0]
    assert launches == expected > 0


def _load_ranges(db: sqlite3.Connection) -> list[tuple[int, int]]:
    return db.execute(
        "SELECT start, \"end\" FROM NVTX_EVENTS WHERE eventType = 59 AND text = 'load'"
    ).fetchall()


def test_gap_stacks_names_load_batch_nsys(ws) -> None:
    con, ids, _ = ws
    rows = nsa.query(con, "gap_stacks", report_id=ids["stacks"]).fetchall()
    cols = [c.name for c in nsa.queries.get("gap_stacks").columns]
    python = [dict(zip(cols, r)) for r in rows if r[cols.index("source")] == "python_sample"]
    top = python[0]
    assert (top["user_function"], top["user_line"]) == (
        "busy_python",
        _line_of("busy_python", "acc += (i * i)"),
    )
    assert top["callers"].startswith("load_batch < train_step")
    assert top["user_file"].endswith("stack_loop.py")
    # load_batch and what it calls explain most of the idle time the samples explain
    by_function = {}
    for r in python:
        by_function[r["user_function"]] = by_function.get(r["user_function"], 0) + r["explained_ns"]
    explained = sum(by_function.values())
    assert by_function["busy_python"] + by_function["load_batch"] > 0.7 * explained
    # per gap, the samples of a gap share its whole time
    per_gap = nsa.query(con, "gap_stacks", report_id=ids["stacks"], per_gap=True, top_n=None).fetchall()
    sums: dict[int, list[int]] = {}
    for r in per_gap:
        d = dict(zip(cols, r))
        if d["source"] == "python_sample":
            sums.setdefault(d["gap_start_ns"], [0, d["idle_ns"]])[0] += d["explained_ns"]
    assert sums and all(abs(got - idle) <= 1 for got, idle in sums.values())


def test_gap_stacks_names_load_batch_kineto(ws) -> None:
    con, ids, _ = ws
    rows = nsa.query(con, "gap_stacks", report_id=ids["kineto"], top_n=None).fetchall()
    cols = [c.name for c in nsa.queries.get("gap_stacks").columns]
    rows = [dict(zip(cols, r)) for r in rows]
    top = rows[0]
    assert top["source"] == "kineto_python"
    assert (top["user_function"], top["user_line"]) == ("busy_python", _source_lines()["busy_python"]["def"])
    assert top["callers"].startswith("load_batch < train_step")
    # busy_python calls nothing: its time in the gaps is at most its events' time, and at least
    # that of the steps after the first (the steady state starts at the first or second step)
    with gzip.open(KINETO) as fh:
        events = json.load(fh)["traceEvents"]
    busy = sorted(
        (e["ts"], e["dur"])
        for e in events
        if e.get("cat") == "python_function" and e["name"].endswith(": busy_python")
    )
    total_ns = sum(d for _, d in busy) * 1000
    assert sum(d for _, d in busy[1:]) * 1000 * 0.95 <= top["explained_ns"] <= total_ns * 1.001
    assert sum(r["explained_ns"] for r in rows) <= top["idle_ns"] + len(rows)


def test_gap_stacks_says_which_option_records_stacks(ws, tmp_path: Path) -> None:
    con, ids, plain = ws
    rows = nsa.query(con, "gap_stacks", report_id=ids["nostacks"]).fetchall()
    cols = [c.name for c in nsa.queries.get("gap_stacks").columns]
    assert len(rows) == 1
    row = dict(zip(cols, rows[0]))
    assert row["source"] is None and row["explained_ns"] is None
    assert "-s cpu --python-sampling=true" in row["note"]
    # Python samples exported without --include-blobs=true: events without frames
    bare = tmp_path / "noblobs.sqlite"
    shutil.copy(plain["stacks"], bare)
    with sqlite3.connect(bare) as db:
        db.execute("UPDATE NVTX_EVENTS SET binaryData = NULL")
        db.execute("DROP TABLE SAMPLING_CALLCHAINS")
        db.execute("DROP TABLE COMPOSITE_EVENTS")
    other = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(other, bare).report_id
    rows = nsa.query(other, "gap_stacks", report_id=rid).fetchall()
    assert [dict(zip(cols, r))["note"] for r in rows] == [
        (
            "nsys recorded Python samples but the export has no frames: export again with "
            "`nsys export --type sqlite --include-blobs=true`"
        )
    ]
    other.close()


def test_findings_do_not_depend_on_stacks(ws) -> None:
    """The captures with and without stacks get the same findings, but fp32-matmul: the sampled runs
    last twice as long (the FP32 GEMMs' 11.6 ms then fill under its 10% of the span)."""
    con, ids, _ = ws
    found = {}
    for name in ("stacks", "native", "nostacks"):
        found[name] = {f.rule_id for f in nsa.findings(con, report_id=ids[name])} - {"fp32-matmul"}
    assert found["stacks"] == found["native"] == found["nostacks"]
    assert {"gpu-idle", "small-kernel-storm"} <= found["stacks"]


# --- .nsys-rep: the export must carry the Python frames ------------------------------------------

REP = DATA / "nsys-rep" / "h100_nsys2025.3_stack_loop_stacks.nsys-rep.gz"


def _stack_rows(con, rid: int) -> dict[str, list[tuple]]:
    """A report's stack tables without its id (frame and stack ids are given by content)."""
    return {
        t: con.execute(
            f"SELECT * EXCLUDE (report_id) FROM {t} WHERE report_id = ? ORDER BY ALL", [rid]
        ).fetchall()
        for t in ("stack_frames", "stacks", "stack_events")
    }


def _stacks_of(path: Path, tmp_path: Path) -> dict[str, list[tuple]]:
    """The stack tables of `path` ingested into a workspace of its own."""
    other = nsa.connect(tmp_path / "other.duckdb")
    try:
        rid = nsa.ingest(other, path).report_id
        api.materialise(other, list(stacks.TABLES))
        return _stack_rows(other, rid)
    finally:
        other.close()


def _stacks_of_ws(con, rid: int) -> dict[str, list[tuple]]:
    api.materialise(con, list(stacks.TABLES))
    return _stack_rows(con, rid)


def _fake_nsys(folder: Path, export: Path, help_text: str) -> Path:
    """An nsys whose `export --help` prints help_text and whose export copies `export`, keeping
    NVTX_EVENTS.binaryData only when asked for with --include-blobs=true (as nsys does)."""
    path = folder / "nsys"
    path.write_text(
        f"#!{sys.executable}\n"
        "import shutil, sqlite3, sys\n"
        "argv = sys.argv[1:]\n"
        f"open({str(folder / 'calls.log')!r}, 'a').write(' '.join(argv) + '\\n')\n"
        "if argv == ['--version']:\n    print('NVIDIA Nsight Systems version 2025.3.1.0'); sys.exit(0)\n"
        f"if argv == ['export', '--help']:\n    print({help_text!r}); sys.exit(0)\n"
        "out = argv[argv.index('-o') + 1]\n"
        f"shutil.copy({str(export)!r}, out)\n"
        "if '--include-blobs=true' not in argv:\n"
        "    with sqlite3.connect(out) as db:\n"
        "        db.execute('UPDATE NVTX_EVENTS SET binaryData = NULL')\n"
    )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("has_option", [True, False])
def test_nsys_rep_export_asks_for_the_frames(
    ws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_option: bool
) -> None:
    """nsa passes --include-blobs=true to an nsys whose `export --help` lists it (2022.4's does not,
    and refuses it), so that the .nsys-rep gives the same stacks as the export made with it."""
    con, ids, plain = ws
    folder = tmp_path / "fake"
    folder.mkdir()
    help_text = (
        "--include-blobs=\n   Possible values are 'true' or 'false'." if has_option else "-o, --output="
    )
    nsys = _fake_nsys(folder, plain["stacks"], help_text)
    monkeypatch.setenv("NSYS", str(nsys))
    monkeypatch.setenv("PATH", str(folder / "nowhere"))
    monkeypatch.setattr(nsys_cli, "INSTALL_GLOBS", ())
    other = nsa.connect(tmp_path / "w.duckdb")
    try:
        rid = nsa.ingest(other, REP).report_id
        api.materialise(other, list(stacks.TABLES))
        exports = [
            c for c in (folder / "calls.log").read_text().splitlines() if c.startswith("export --type")
        ]
        assert len(exports) == 1 and ("--include-blobs=true" in exports[0]) == has_option
        bare = other.execute(
            "SELECT count(*) FILTER (stack_id IS NULL), count(*) FROM stack_events "
            "WHERE report_id = ? AND source IN ('python_sample', 'python_cuda')",
            [rid],
        ).fetchone()
        (python,) = (
            sqlite3.connect(plain["stacks"])
            .execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34")
            .fetchone()
        )
        assert bare == ((0 if has_option else python), python)
        if has_option:
            api.materialise(con, list(stacks.TABLES))
            assert _stack_rows(other, rid) == _stack_rows(con, ids["stacks"])
    finally:
        other.close()


def test_nsys_rep_stacks_equal_the_export(ws, tmp_path: Path) -> None:
    """The raw report through a real nsys that can open it (2025.3 or newer) gives the stack tables
    of the export made with --include-blobs=true."""
    con, ids, _ = ws
    report = tmp_path / REP.name.removesuffix(".gz")
    report.write_bytes(gzip.decompress(REP.read_bytes()))
    tried = []
    for nsys in nsys_cli.candidates():
        try:
            nsys_cli.export_sqlite(nsys, report, tmp_path / "probe.sqlite", None)
        except nsys_cli.InputError as exc:
            tried.append(str(exc))
            continue
        break
    else:
        pytest.skip(f"no nsys here opens a 2025.3 report: {tried or 'none found'}")
    assert _stacks_of(REP, tmp_path) == _stacks_of_ws(con, ids["stacks"])


# --- older Kineto traces: the `Call stack` argument of ops ---------------------------------------


def _old_kineto_trace(path: Path) -> list[dict]:
    """A PyTorch 1.10-style trace (`with_stack=True`, no python_function events): ops whose
    `Call stack` is `file(line): function;...;`, innermost first, with deliberate edge cases: a
    path with spaces and parentheses, a frame without a line, a library frame, an op without one."""
    stacks_ = [
        (
            "/home/u/my proj (v2)/train.py(88): load_batch;/home/u/my proj (v2)/train.py(120): main;"
            "/home/u/my proj (v2)/train.py(130): <module>;"
        ),
        (
            "/usr/lib/python3.8/site-packages/torch/optim/sgd.py(112): step;/home/u/my proj (v2)/train.py(95): "
            "step_fn;/home/u/my proj (v2)/train.py(120): main;/home/u/my proj (v2)/train.py(130): <module>;"
        ),
        "<built-in method item of Tensor object>;/home/u/my proj (v2)/train.py(101): report;",
    ]
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}}]
    ts = 1_000.0
    for i in range(30):
        args: dict = {"External id": i + 1}
        if i % 5 != 4:
            args["Call stack"] = stacks_[i % 3]
        events.append(
            {"ph": "X", "cat": "Operator", "name": f"aten::op{i % 4}", "pid": 7, "tid": 7, "ts": ts, "dur": 50.5,
             "args": args}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts + 100, "dur": 5.0,
             "args": {"device": 0, "stream": 7, "correlation": 1000 + i, "external id": i + 1}}
        )  # fmt: skip
        ts += 400.0
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return events


def test_kineto_call_stack_argument(tmp_path: Path) -> None:
    path = tmp_path / "old_trace.json"
    events = _old_kineto_trace(path)
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        rid = nsa.ingest(con, path).report_id
        ops = [e for e in events if e.get("cat") == "Operator"]
        # the trace's times relative to where the workspace put its first op
        (first,) = con.execute("SELECT min(start_ns) FROM cpu_ops WHERE report_id = ?", [rid]).fetchone()
        shift = first - round(ops[0]["ts"] * 1000)
        # the reader keeps the argument (cpu_ops.call_stack) and defers the stacks to first use
        assert (
            "stack_events"
            in con.execute("SELECT deferred_steps FROM reports WHERE report_id = ?", [rid]).fetchone()[0]
        )
        api.materialise(con, ["stack_events"])
        (written,) = con.execute(
            "SELECT count(*) FROM stack_events WHERE report_id = ? AND source = 'kineto_callstack'", [rid]
        ).fetchone()
        with_stack = [e for e in events if "Call stack" in e.get("args", {})]
        assert written == len(with_stack) == 24
        # each event's stack, innermost first, rebuilt from the JSON with plain string operations
        expected = []
        for e in with_stack:
            frames = []
            for part in e["args"]["Call stack"].split(";"):
                if not part:
                    continue
                head, sep, function = part.rpartition("): ")
                if sep:
                    file, line = head.rsplit("(", 1)
                    frames.append((function, file, int(line)))
                else:
                    frames.append((part, None, None))
            start = round(e["ts"] * 1000) + shift
            expected.append((start, start + round(e["dur"] * 1000), tuple(frames)))
        rows = con.execute(
            "SELECT e.start_ns, e.end_ns, list((f.function, f.file, f.line) ORDER BY s.depth) "
            "FROM stack_events e JOIN stacks s USING (report_id, stack_id) "
            "JOIN stack_frames f USING (report_id, frame_id) WHERE e.report_id = ? AND e.source = 'kineto_callstack' "
            "GROUP BY e.start_ns, e.end_ns ORDER BY 1",
            [rid],
        ).fetchall()
        got = [(s, end, tuple(tuple(f) for f in frames)) for s, end, frames in rows]
        assert got == expected
        # frames and stacks once each; the user's frames are the program's, not torch's or built-ins
        frames = {f for _, _, stack in expected for f in stack}
        assert con.execute("SELECT count(*) FROM stack_frames WHERE report_id = ?", [rid]).fetchone() == (
            len(frames),
        )
        distinct = {stack for _, _, stack in expected}
        assert con.execute(
            "SELECT count(DISTINCT stack_id) FROM stacks WHERE report_id = ?", [rid]
        ).fetchone() == (len(distinct),)
        users = con.execute(
            "SELECT DISTINCT function FROM stack_frames WHERE report_id = ? AND user ORDER BY 1", [rid]
        ).fetchall()
        assert users == [("<module>",), ("load_batch",), ("main",), ("report",), ("step_fn",)]
    finally:
        con.close()


def test_python_and_native_backtraces_of_a_call_are_one_stack(ws) -> None:
    """A CUDA call with both backtraces (`--cudabacktrace=all --python-backtrace=cuda`): its
    python_cuda event's stack is the native frames from the leaf up to the first frame of the
    Python interpreter, then the Python frames, innermost first; read here from the export."""
    con, ids, plain = ws
    api.materialise(con, ["stack_events"])
    db = sqlite3.connect(plain["stacks"])
    strings = dict(db.execute("SELECT id, value FROM StringIds").fetchall())
    domain = dict(db.execute("SELECT text, domainId FROM NVTX_EVENTS WHERE eventType = 75").fetchall())
    backtraces = db.execute(
        "SELECT n.start, n.globalTid, n.binaryData, r.callchainId, r.correlationId FROM NVTX_EVENTS n "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid AND r.start = n.start "
        "WHERE n.eventType = 34 AND n.domainId = ? AND r.callchainId IS NOT NULL ORDER BY n.start LIMIT 400",
        [domain["Python Backtrace on CUDA"]],
    ).fetchall()
    assert len(backtraces) == 400
    checked = 0
    for start, gtid, blob, chain, corr in backtraces[::8]:
        native = []
        for symbol, module in db.execute(
            "SELECT symbol, module FROM CUDA_CALLCHAINS WHERE id = ? ORDER BY stackDepth", [chain]
        ):
            if Path(strings.get(module, "")).name.startswith(("python", "libpython")):
                break
            native.append((strings.get(symbol), strings.get(module)))
        n = struct.unpack_from("<I", blob, 32 + 12)[0]
        python = []
        for i in range(n):
            fn, file, line = struct.unpack_from("<QQi", blob, 32 + 16 + 24 * i)
            python.append((strings[fn].replace("&lt;", "<").replace("&gt;", ">"), strings[file], line))
        got = con.execute(
            "SELECT list((f.kind, f.function, f.file, f.line, f.module) ORDER BY s.depth) FROM stack_events e "
            "JOIN stacks s USING (report_id, stack_id) JOIN stack_frames f USING (report_id, frame_id) "
            "WHERE e.report_id = ? AND e.source = 'python_cuda' AND e.global_tid = ? AND e.start_ns = ? "
            "AND e.correlation_id = ?",
            [ids["stacks"], gtid, start, corr],
        ).fetchone()[0]
        frames = [tuple(f) for f in got]
        assert frames == [("native", s, None, None, m) for s, m in native] + [
            ("python", f, file, line, None) for f, file, line in python
        ]
        checked += 1
    assert checked == 50


def test_statically_linked_cuda_runtime_is_not_the_users_code(tmp_path: Path) -> None:
    """A CUDA C++ binary links the CUDA runtime into itself (`__cudart1050`, `cudaDeviceSynchronize`
    in cuda-cloverleaf): those frames are a library's though their module is the program, so the
    innermost user frame of a sample is the application function that called the runtime."""
    from conftest import realdata

    path = realdata("nsys", "a100_nsys2024.5_perlmutter_cloverleaf.sqlite")
    with sqlite3.connect(path) as src:  # the binary's own symbols, from the export
        symbols = {
            s
            for (s,) in src.execute(
                "SELECT DISTINCT s.value FROM SAMPLING_CALLCHAINS c JOIN StringIds s ON s.id = c.symbol "
                "JOIN StringIds m ON m.id = c.module WHERE m.value LIKE '%/bin/cuda-cloverleaf'"
            )
        }
    runtime = {
        s for s in symbols if s.startswith(("__cudart", "cuda", "cu")) and s[2:3] != "_" and s != "cuda"
    }
    runtime = {s for s in runtime if s.startswith("__cudart") or s[:4] == "cuda" and s[4:5].isupper()}
    assert runtime and "hydro(global_variables&, parallel_&)" in symbols
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path).report_id
    api.materialise(con, {"stack_frames"})
    user = dict(
        con.execute(
            "SELECT function, bool_or(\"user\") FROM stack_frames WHERE report_id = ? AND kind = 'native' "
            "GROUP BY function",
            [rid],
        ).fetchall()
    )
    assert not any(user[s] for s in runtime if s in user), sorted(s for s in runtime if user.get(s))
    assert user["hydro(global_variables&, parallel_&)"] and user["main"]
    cupti = con.execute(  # nsys' injected CUPTI, under the profiler's own install path at NERSC
        "SELECT count(*), count(*) FILTER (WHERE \"user\") FROM stack_frames WHERE module LIKE '%/libcupti.so%'"
    ).fetchone()
    assert cupti is not None and cupti[0] > 0 and cupti[1] == 0
    top = nsa.query(con, "gap_stacks", report_id=rid).fetchall()
    assert not any(str(r[4] or "").startswith(("__cudart", "cuda")) for r in top)  # user_function
    con.close()


def test_top_stacks_tied_on_calls_are_cut_by_function_too(tmp_path: Path) -> None:
    """cloverleaf's native stacks share their binary, line (none) and library frame
    (cudaDeviceSynchronize): groups with as many calls, told apart only by the user function,
    tie at launch_stacks' top-10 cut, and which were kept varied from run to run. The top rows
    are now those of the full list in (calls, gpu_ns, file, line, library frame, function) order."""
    from conftest import realdata

    path = realdata("nsys", "a100_nsys2024.5_perlmutter_cloverleaf.sqlite")
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, path).report_id
    cols = ["source", "kind", "user_function", "user_file", "user_line", "library_frame", "calls", "gpu_ns"]
    rel = nsa.query(con, "launch_stacks", report_id=rid, top_n=None)
    names = [d[0] for d in rel.description]
    every = [dict(zip(names, r)) for r in rel.fetchall() if r[names.index("source")] is not None]

    def key(r: dict) -> tuple:
        last = "\U0010ffff"  # DuckDB puts NULLs last in either direction
        return (
            -r["calls"],
            r["gpu_ns"] is None,
            -(r["gpu_ns"] or 0),
            r["user_file"] or last,
            r["user_line"] is None,
            r["user_line"] or 0,
            r["library_frame"] or last,
            r["user_function"] or last,
        )

    want = []
    for group in sorted({(r["source"], r["kind"]) for r in every}):
        want += sorted((r for r in every if (r["source"], r["kind"]) == group), key=key)[:10]
    sync = sorted((r for r in every if (r["source"], r["kind"]) == ("cpu_sample", "sync")), key=key)
    assert len(sync) > 10 and sync[9]["calls"] == sync[10]["calls"]  # the capture has the tie at the cut
    rel = nsa.query(con, "launch_stacks", report_id=rid)
    got = [dict(zip(names, r)) for r in rel.fetchall() if r[names.index("source")] is not None]
    assert [tuple(r[c] for c in cols) for r in got] == [
        tuple(r[c] for c in cols) for r in sorted(want, key=lambda r: (r["source"], r["kind"], key(r)))
    ]
    con.close()


# --- Python payloads laid out by other nsys versions (fixtures built by code) ---------------------
# Only nsys 2025.3 exports with Python frames exist here (tests/data/stacks); 2022.4 has no Python
# options; the 2024.5 / 2024.6 exports in ../shared/realdata hold no Python frames. These fixtures
# are the 2025.3 export rewritten the ways another version could differ; no real file has them.


def _rewritten(src: Path, dst: Path, sql: list[str]) -> Path:
    shutil.copy(src, dst)
    db = sqlite3.connect(dst)
    for statement in sql:
        db.execute(statement)
    db.commit()
    db.close()
    return dst


def test_python_payload_schema_without_offsets(ws, tmp_path: Path) -> None:
    """An export whose NVTX_PAYLOAD_SCHEMA_ENTRIES has no `offset` column (the NVTX payload
    extension lets the producer leave offsets to the tool: natural alignment) gives the same
    stacks as the one that states them."""
    con, ids, plain = ws
    db = sqlite3.connect(plain["stacks"])
    cols = [r[1] for r in db.execute("PRAGMA table_info(NVTX_PAYLOAD_SCHEMA_ENTRIES)") if r[1] != "offset"]
    stated = db.execute('SELECT count(*) FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE "offset" > 0').fetchone()[0]
    db.close()
    assert stated >= 8  # the 2025.3 export states every offset but each schema's first
    path = _rewritten(plain["stacks"], tmp_path / "no_offsets.sqlite", [
        f"CREATE TABLE e AS SELECT {', '.join(cols)} FROM NVTX_PAYLOAD_SCHEMA_ENTRIES",
        "DROP TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES",
        "ALTER TABLE e RENAME TO NVTX_PAYLOAD_SCHEMA_ENTRIES",
    ])  # fmt: skip
    assert _stacks_of(path, tmp_path) == _stacks_of_ws(con, ids["stacks"])


def test_python_payload_shorter_than_its_frames(ws, tmp_path: Path) -> None:
    """Payloads cut short (a layout this reader would misread): their events keep time and thread
    without frames; the ingest does not fail and the other events keep theirs."""
    con, ids, plain = ws
    db = sqlite3.connect(plain["stacks"])
    (domain,) = db.execute(
        "SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'Python Periodic Sampling'"
    ).fetchone()
    total = db.execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND domainId = ?", [domain]
    ).fetchone()[0]
    db.close()
    cut = f"eventType = 34 AND domainId = {domain} AND rowid % 10 = 0"
    path = _rewritten(plain["stacks"], tmp_path / "cut.sqlite", [
        f"CREATE TABLE cut AS SELECT start FROM NVTX_EVENTS WHERE {cut}",
        f"UPDATE NVTX_EVENTS SET binaryData = substr(binaryData, 1, 44) WHERE {cut}",
    ])  # fmt: skip
    db = sqlite3.connect(path)
    n_cut = db.execute("SELECT count(*) FROM cut").fetchone()[0]
    db.close()
    cols = [d[0] for d in con.execute("SELECT * EXCLUDE (report_id) FROM stack_events LIMIT 0").description]
    source, stack = cols.index("source"), cols.index("stack_id")

    def python(rows: dict[str, list[tuple]]) -> tuple[int, int]:  # (without a stack, all)
        mine = [r for r in rows["stack_events"] if r[source] == "python_sample"]
        return sum(r[stack] is None for r in mine), len(mine)

    before, after = python(_stacks_of_ws(con, ids["stacks"])), python(_stacks_of(path, tmp_path))
    assert 0 < n_cut < total and before[1] == after[1] == total
    assert after[0] == before[0] + n_cut


def test_each_idle_gap_has_one_ending_activity(ws) -> None:
    """gap_stacks reads the window's gaps a row each: in gpu_timeline's (start_ns, end_ns) order a
    gap is ended by the first activity after it (a second one starting then has the first one's
    end among the ends before it), so no two of a device's gaps start at one time. The gaps
    counted from the exports' GPU activity by a sort (sqlite3) are the timeline's, one start each."""
    con, ids, plain = ws
    timeline.ensure(con)  # worked out on first use: this test may run before any query
    tables = (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    )
    for name in ("stacks", "native", "nostacks"):
        with sqlite3.connect(plain[name]) as db:
            have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            acts: dict[int, list[tuple[int, int]]] = {}
            for t in tables:
                if t in have:
                    for dev, s, e in db.execute(
                        f'SELECT deviceId, start, "end" FROM {t} WHERE "end" >= start'
                    ):
                        acts.setdefault(dev, []).append((s, e))
        expected = 0
        for spans in acts.values():
            end = None
            for s, e in sorted(spans):
                if end is not None and s > end:
                    expected += 1
                end = e if end is None else max(end, e)
        gaps, starts = con.execute(
            "SELECT count(*), count(DISTINCT (device_id, prev_end_ns)) FROM gpu_timeline "
            "WHERE report_id = ? AND start_ns > prev_end_ns",
            [ids[name]],
        ).fetchone()
        assert expected > 0
        assert gaps == starts == expected, name
