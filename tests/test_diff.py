"""`nsa diff`: verdicts on real before/after pairs, the attribution adding up, the CI gate's exit
codes both ways, baselines, the JSON round trip, and the 'not comparable' and 'inconclusive' cases
on fixtures built by code. Expected step times are computed here with plain SQL on the SQLite exports (sqlite3)
or from the rows a fixture wrote, never taken from nsa's output."""

from __future__ import annotations

import bisect
import csv
import gzip
import itertools
import json
import random
import shutil
import sqlite3
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from conftest import ROOT, realdata
from fixtures.nsys_fixtures import T0, ExportBuilder
from nsight_analytics import api
from nsight_analytics.cli import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, main
from nsight_analytics.diff import NOISE_FLOOR, Diff, stats
from nsight_analytics.diff.names import diff_key
from nsight_analytics.render import diff as render_diff
from rows import opened

DATA = ROOT / "tests" / "data"
SYNC_BEFORE = DATA / "h100_nsys2025.3_sync_loop_before.sqlite.gz"
SYNC_AFTER = DATA / "h100_nsys2025.3_sync_loop_after.sqlite.gz"
FUSED_RERUN = DATA / "h100_nsys2025.3_train_fused_rerun.sqlite.gz"


def run(*args: str):
    return CliRunner(env={"COLUMNS": "80"}).invoke(main, list(args))


def unpacked(path: Path, folder: Path) -> Path:
    """A `.sqlite.gz` of tests/data as a plain SQLite file (for sqlite3)."""
    out = folder / path.name.removesuffix(".gz")
    if not out.exists():
        with gzip.open(path) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


# --- independent step times: plain SQL on the export ---------------------------------------

GPU_WORK = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def nvtx_step_starts(path: Path) -> dict[int, int]:
    """{step number: first GPU start of the work launched inside the NVTX range `step N`}: the
    CUDA API calls of the range's process starting inside it, joined to their GPU work on
    correlationId within the same process."""
    db = sqlite3.connect(path)
    try:
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        work = " UNION ALL ".join(
            f"SELECT correlationId, globalPid, start FROM {t}" for t in GPU_WORK if t in have
        )
        rows = db.execute(
            f"""
            WITH steps AS (
                SELECT e.start, e."end", e.globalTid, coalesce(e.text, s.value) AS name
                FROM NVTX_EVENTS AS e LEFT JOIN StringIds AS s ON s.id = e.textId
                WHERE e.eventType = 59 AND coalesce(e.text, s.value) GLOB 'step [0-9]*'
            )
            SELECT CAST(substr(st.name, 6) AS INTEGER), min(w.start)
            FROM steps AS st
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
              ON r.globalTid / 16777216 = st.globalTid / 16777216 AND r.start BETWEEN st.start AND st."end"
            JOIN ({work}) AS w ON w.correlationId = r.correlationId AND w.globalPid / 16777216 = r.globalTid / 16777216
            GROUP BY 1 ORDER BY 1
            """
        ).fetchall()
    finally:
        db.close()
    return {int(n): int(t) for n, t in rows}


def periods(starts: dict[int, int], skip: int = 2) -> list[int]:
    """GPU periods step n -> n+1, the first `skip` steps (warm-up and more) left out."""
    order = sorted(starts)
    return [starts[b] - starts[a] for a, b in itertools.pairwise(order) if a >= skip]


# --- workspaces ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """(db path, {name: report id}) with the tests/data pairs ingested once."""
    db = tmp_path_factory.mktemp("diff") / "w.duckdb"
    with opened(db) as con:
        ids = {p.name: nsa.ingest(con, p).report_id for p in (SYNC_BEFORE, SYNC_AFTER, FUSED_RERUN)}
    return db, ids


@pytest.fixture(scope="module")
def sync_diffs(ws):
    db, ids = ws
    a, b = ids[SYNC_BEFORE.name], ids[SYNC_AFTER.name]
    with opened(db) as con:
        return nsa.diff(con, a, b), nsa.diff(con, b, a)


def assert_adds_up(d: Diff) -> None:
    """Each attribution view: the parts listed plus the remainder are the total, and the total
    is the change of the mean GPU step time."""
    a = d.attribution
    assert a is not None
    assert sum(p.delta_ns for p in a.by_phase) + a.phase_remainder_ns == pytest.approx(a.total_ns, abs=1)
    assert sum(p.delta_ns for p in a.by_cause) + a.cause_remainder_ns == pytest.approx(a.total_ns, abs=1)
    for p in [*a.by_phase, *a.by_cause]:
        assert p.delta_ns == pytest.approx(p.b_ns - p.a_ns, abs=1)
    assert a.total_ns == pytest.approx(d.b.mean_step_ns - d.a.mean_step_ns, rel=1e-6, abs=10)


# --- the sync-loop fix: improvement one way, regression the other -----------------------------


def test_sync_loop_fix_is_an_improvement(sync_diffs, tmp_path) -> None:
    fix, _ = sync_diffs
    before = periods(nvtx_step_starts(unpacked(SYNC_BEFORE, tmp_path)))
    after = periods(nvtx_step_starts(unpacked(SYNC_AFTER, tmp_path)))
    assert fix.verdict == "improvement", fix.reason
    # nsa's GPU step times (its own warm-up cut, the last step included) against plain SQL
    assert fix.a.median_step_ns == pytest.approx(statistics.median(before), rel=0.005)
    assert fix.b.median_step_ns == pytest.approx(statistics.median(after), rel=0.005)
    assert fix.step_change is not None and fix.step_change.ci_ns is not None
    lo, hi = fix.step_change.ci_ns
    expected = statistics.median(after) - statistics.median(before)  # about -5.5 ms
    assert lo <= fix.step_change.estimate_ns <= hi < 0
    assert fix.step_change.estimate_ns == pytest.approx(expected, rel=0.02)
    # the host sync made the GPU wait: the change is idle time, not kernel time
    kinds = {p.name: p.delta_ns for p in fix.attribution.by_cause}
    assert kinds["GPU idle (waiting for work)"] == pytest.approx(fix.attribution.total_ns, rel=0.05)
    assert abs(kinds["kernel time"]) < 0.01 * abs(fix.attribution.total_ns)
    # host step ranges say 22 ms -> 0.8 ms; the GPU says 22 ms -> 16.6 ms
    assert fix.metric("host_step_time").b < 0.1 * fix.b.median_step_ns
    resolved = {f.rule_id for f in fix.findings if f.status == "resolved"}
    assert "gpu-idle" in resolved
    assert_adds_up(fix)


def test_sync_loop_reversed_is_a_regression(sync_diffs) -> None:
    fix, undo = sync_diffs
    assert undo.verdict == "regression", undo.reason
    assert undo.step_change.estimate_ns == pytest.approx(-fix.step_change.estimate_ns, rel=1e-9)
    assert {f.rule_id for f in undo.findings if f.status == "new"} >= {"gpu-idle"}
    assert_adds_up(undo)


def test_gate_exit_codes_both_ways(ws) -> None:
    db, _ = ws
    ok = run("diff", "--db", str(db), str(SYNC_BEFORE), str(SYNC_AFTER), "--fail-on-regression", "5")
    assert ok.exit_code == EXIT_OK, ok.output
    assert "IMPROVEMENT" in ok.stdout and "gate passed" in ok.stdout
    bad = run("diff", "--db", str(db), str(SYNC_AFTER), str(SYNC_BEFORE), "--fail-on-regression", "5")
    assert bad.exit_code == EXIT_FINDINGS, bad.output
    assert "REGRESSION" in bad.stdout and "gate FAILED" in bad.stdout
    # +33% with confidence is not beyond +50%
    lenient = run("diff", "--db", str(db), str(SYNC_AFTER), str(SYNC_BEFORE), "--fail-on-regression", "50")
    assert lenient.exit_code == EXIT_OK, lenient.output
    # a metric without a confidence interval: GPU idle per step grows a hundredfold
    idle = run(
        "diff", "--db", str(db), str(SYNC_AFTER), str(SYNC_BEFORE), "--fail-on-regression", "50",
        "--metric", "gpu_idle", "--format", "json",
    )  # fmt: skip
    assert idle.exit_code == EXIT_FINDINGS, idle.output
    assert json.loads(idle.stdout)["gate"]["failed"] is True
    assert idle.stderr.startswith("gate FAILED: gpu_idle")


def gpu_idle_share(path: Path) -> float:
    """The share of the window from the first GPU start of step 2 (past warm-up) to the last GPU
    end in which no kernel, copy or memset ran: a sort-and-merge of their intervals."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            " UNION ALL ".join(f'SELECT start, "end" FROM {t}' for t in GPU_WORK) + " ORDER BY 1"
        ).fetchall()
    finally:
        db.close()
    lo = nvtx_step_starts(path)[2]
    busy, reach = 0, lo
    for start, end in rows:
        start = max(start, reach)
        if end > start:
            busy, reach = busy + end - start, end
    return 1 - busy / (reach - lo)


def test_gate_on_new_findings(ws, tmp_path) -> None:
    """--fail-on-new-finding: the sync loop's GPU idles about a quarter of each step before the
    fix and hardly at all after (plain SQL below), between gpu-idle's warning (20%) and critical
    (50%) shares: the fix resolves the warning, undoing it brings it back as new."""
    db, _ = ws
    before, after = (
        gpu_idle_share(unpacked(SYNC_BEFORE, tmp_path)),
        gpu_idle_share(unpacked(SYNC_AFTER, tmp_path)),
    )
    assert 0.2 <= before < 0.5 and after < 0.05, (before, after)
    fix = run("diff", "--db", str(db), str(SYNC_BEFORE), str(SYNC_AFTER), "--fail-on-new-finding")
    assert fix.exit_code == EXIT_OK, fix.output
    assert fix.stdout.endswith(
        "gate passed: no finding of B at warning or above is new or worse than in A (1\nresolved).\n"
    )
    undo = run(
        "diff",
        "--db",
        str(db),
        str(SYNC_AFTER),
        str(SYNC_BEFORE),
        "--format",
        "json",
        "--fail-on-new-finding",
    )
    assert undo.exit_code == EXIT_FINDINGS, undo.output
    gate = json.loads(undo.stdout)["gate"]
    assert (gate["metric"], gate["threshold_pct"], gate["failed"]) == ("findings", None, True)
    assert undo.stderr.startswith(
        "gate FAILED: B has 1 finding at warning or above that is new or worse than in A "
        f"(--fail-on-new-finding): new [warning] gpu-idle: GPU idle {before:.0%} of the steady state"
    )
    # a warning does not fail a gate at critical; without the option findings never fail a diff
    crit = run(
        "diff", "--db", str(db), str(SYNC_AFTER), str(SYNC_BEFORE), "--fail-on-new-finding", "critical"
    )
    assert crit.exit_code == EXIT_OK, crit.output
    assert "gate passed: no finding of B at critical is new or worse than in A." in crit.stdout
    plain = run("diff", "--db", str(db), str(SYNC_AFTER), str(SYNC_BEFORE), "--format", "json")
    assert plain.exit_code == EXIT_OK and "gate" not in json.loads(plain.stdout)
    # beside the metric gate: +33% passes +50%, the new finding fails the build
    both = run("diff", "--db", str(db), str(SYNC_AFTER), str(SYNC_BEFORE), "--fail-on-regression", "50",
               "--fail-on-new-finding", "warning", "--format", "json")  # fmt: skip
    assert both.exit_code == EXIT_FINDINGS, both.output
    assert both.stderr.startswith("gate passed: step time +3")
    assert "gate FAILED: B has 1 finding at warning or above" in both.stderr
    no = run("diff", "--db", str(db), "1", "2", "--no-findings", "--fail-on-new-finding")
    assert no.exit_code == EXIT_ERROR
    assert no.stderr == "Error: --fail-on-new-finding gates on the findings: leave out --no-findings.\n"


def test_gate_on_a_metric_one_side_lacks_is_not_comparable(con, train, ws) -> None:
    """The NVML log written during the fused capture covers it (UTC clocks), not its rerun on
    another day: a gate on the energy per step cannot judge the rerun against it."""
    log = realdata("power", "h100_nvml_train_fused.csv")
    with log.open() as fh:
        stamps = [int(r["timestamp_ns"]) for r in csv.DictReader(fh)]
    for name, path, covered in (
        ("fused", train["h100_nsys2025.3_train_fused_gpumetrics.sqlite:path"], True),
        (
            "rerun",
            unpacked(
                FUSED_RERUN, Path(str(train["h100_nsys2025.3_train_fused_gpumetrics.sqlite:path"])).parent
            ),
            False,
        ),
    ):
        db = sqlite3.connect(path)
        (origin,) = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        (lo, hi) = db.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
        db.close()
        assert (min(stamps) <= origin + lo and origin + hi <= max(stamps)) is covered, name
    try:
        nsa.ingest(con, log)
    except nsa.InputError as exc:  # pragma: no cover - the power reader is another module
        pytest.skip(f"no power log reader: {exc}")
    d = nsa.diff(
        con,
        train["h100_nsys2025.3_train_fused_gpumetrics.sqlite"],
        ws[1][FUSED_RERUN.name],
        with_findings=False,
    )
    assert d.comparable, d.reason
    m = d.metric("energy_per_step")
    assert m is not None and m.a is not None and m.b is None
    g = api.diff_gate(d, 5, "energy_per_step")
    assert g.failed
    assert g.message == (
        "gate FAILED: it could not judge B against A: energy_per_step is NOT COMPARABLE, measured in A only; "
        "--allow-not-comparable passes such a diff."
    )
    passed = api.diff_gate(d, 5, "energy_per_step", allow_not_comparable=True)
    assert not passed.failed
    assert passed.message == (
        "gate passed without judging (--allow-not-comparable): energy_per_step is NOT COMPARABLE, "
        "measured in A only."
    )


def test_table_fits_80_columns_and_markdown_is_a_comment(ws) -> None:
    db, _ = ws
    res = run("diff", "--db", str(db), str(SYNC_BEFORE), str(SYNC_AFTER))
    assert res.exit_code == EXIT_OK
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    for section in ("Checks", "Where the step time went", "Per steady step", "Kernels per step", "Findings"):
        assert section in res.stdout
    md = run("diff", "--db", str(db), str(SYNC_BEFORE), str(SYNC_AFTER), "--format", "markdown")
    assert md.stdout.startswith("### nsa diff: IMPROVEMENT: GPU step time -2")
    assert "| per steady step | A | B | change |" in md.stdout


def test_json_round_trip(ws, sync_diffs) -> None:
    db, ids = ws
    res = run(
        "diff", "--db", str(db), str(ids[SYNC_BEFORE.name]), str(ids[SYNC_AFTER.name]), "--format", "json"
    )
    assert res.exit_code == EXIT_OK, res.output
    data = json.loads(res.stdout)
    back = Diff.from_dict(data)
    assert back == sync_diffs[0]
    assert back.to_dict() == data
    assert json.loads(render_diff.to_json(back)) == data


def test_baseline_store_and_compare(ws) -> None:
    db, ids = ws
    saved = run("diff", "--db", str(db), "--baseline", "main", "--save", str(SYNC_BEFORE))
    assert saved.exit_code == EXIT_OK, saved.output
    assert saved.stdout == f"baseline main: report {ids[SYNC_BEFORE.name]}.\n"
    better = run("diff", "--db", str(db), "--baseline", "main", str(SYNC_AFTER), "--fail-on-regression", "5")
    assert better.exit_code == EXIT_OK and "IMPROVEMENT" in better.stdout
    # storing again under the same name replaces the baseline
    run("diff", "--db", str(db), "--baseline", "main", "--save", str(ids[SYNC_AFTER.name]))
    worse = run("diff", "--db", str(db), "--baseline", "main", str(SYNC_BEFORE), "--fail-on-regression", "5")
    assert worse.exit_code == EXIT_FINDINGS and "REGRESSION" in worse.stdout
    with opened(db) as con:
        rows = con.execute("SELECT name, report_id FROM diff_baselines").fetchall()
    assert rows == [("main", ids[SYNC_AFTER.name])]
    unknown = run("diff", "--db", str(db), "--baseline", "nope", str(SYNC_AFTER))
    assert unknown.exit_code == EXIT_ERROR
    assert unknown.stderr == (
        "Error: no baseline named 'nope' in the workspace (known: main); store one with "
        "`nsa diff --baseline nope --save REPORT`.\n"
    )


def test_usage_errors_exit_2(ws) -> None:
    db, _ = ws
    assert run("diff", "--db", str(db), "1").exit_code == EXIT_ERROR
    assert run("diff", "--db", str(db), "--save", "1").exit_code == EXIT_ERROR
    missing = run("diff", "--db", str(db), "1", "999")
    assert missing.exit_code == EXIT_ERROR
    assert missing.stderr == "Error: no report 999 in the workspace; `nsa reports` lists them.\n"
    nofile = run("diff", "--db", str(db), "1", "no/such.sqlite")
    assert nofile.exit_code == EXIT_ERROR and "neither a report id nor a file" in nofile.stderr


# --- real pairs of ../shared/realdata ----------------------------------------------------------


@pytest.fixture(scope="module")
def train(ws, tmp_path_factory):
    """Report ids of the foreach / fused nsys training captures (unpacked from realdata)."""
    db, ids = ws
    folder = tmp_path_factory.mktemp("train")
    out = dict(ids)
    with opened(db) as con:
        for name in (
            "h100_nsys2025.3_train_foreach_gpumetrics.sqlite",
            "h100_nsys2025.3_train_fused_gpumetrics.sqlite",
        ):
            path = unpacked(realdata("nsys", name + ".gz"), folder)
            out[name] = nsa.ingest(con, path).report_id
            out[name + ":path"] = path  # type: ignore[assignment]
    return out


@pytest.fixture
def con(ws):
    with opened(ws[0]) as connection:
        yield connection


def test_same_program_twice_is_no_significant_change(con, train, tmp_path) -> None:
    """train.py --opt fused captured twice (once with GPU metrics sampling, once without)."""
    fused = train["h100_nsys2025.3_train_fused_gpumetrics.sqlite"]
    d = nsa.diff(con, fused, train[FUSED_RERUN.name])
    assert d.verdict == "no significant change", d.reason
    assert abs(d.step_change.relative) < NOISE_FLOOR
    a = periods(nvtx_step_starts(train["h100_nsys2025.3_train_fused_gpumetrics.sqlite:path"]))
    b = periods(nvtx_step_starts(unpacked(FUSED_RERUN, tmp_path)))
    assert d.a.median_step_ns == pytest.approx(statistics.median(a), rel=0.005)
    assert d.b.median_step_ns == pytest.approx(statistics.median(b), rel=0.005)
    assert {k.status for k in d.kernels} == {"changed"}  # the same kernels, the same counts
    assert all(k.a_count == pytest.approx(k.b_count) for k in d.kernels)
    assert_adds_up(d)


def test_fused_adamw_is_an_improvement_from_the_optimizer(con, train) -> None:
    d = nsa.diff(
        con,
        train["h100_nsys2025.3_train_foreach_gpumetrics.sqlite"],
        train["h100_nsys2025.3_train_fused_gpumetrics.sqlite"],
    )
    assert d.verdict == "improvement", d.reason
    top = d.attribution.by_phase[0]
    assert top.name == "optimizer" and top.delta_ns < -4e6
    assert "fewer kernels per step" in top.detail and "launch overhead" in top.detail
    # kernels per steady step, counted here: kernels launched inside `step N` (N >= 1)
    for side, name in ((d.a, "foreach"), (d.b, "fused")):
        db = sqlite3.connect(train[f"h100_nsys2025.3_train_{name}_gpumetrics.sqlite:path"])
        n, steps = db.execute(
            """SELECT count(*), count(DISTINCT e.text) FROM NVTX_EVENTS e
               JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid / 16777216 = e.globalTid / 16777216
                AND r.start BETWEEN e.start AND e."end"
               JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
                AND k.globalPid / 16777216 = r.globalTid / 16777216
               WHERE e.text GLOB 'step [0-9]*' AND e.text != 'step 0'"""
        ).fetchone()
        db.close()
        assert side.kernels_per_step == pytest.approx(n / steps, abs=0.5)
    added = {render_short(k.name) for k in d.kernels if k.status == "added"}
    assert "multi_tensor_apply_kernel" in added
    assert_adds_up(d)


def _counter(path: Path):
    """E(t): the NVML log's energy counter (mJ) through its updates (the first sample showing each
    new value), linear in between."""
    ts, joules = [], []
    with path.open() as fh:
        for r in csv.DictReader(fh):
            if not joules or int(r["energy_mj"]) != joules[-1] * 1000:
                ts.append(int(r["timestamp_ns"]))
                joules.append(int(r["energy_mj"]) / 1000)

    def at(t: float) -> float:
        i = bisect.bisect_right(ts, t) - 1
        return joules[i] + (joules[i + 1] - joules[i]) * (t - ts[i]) / (ts[i + 1] - ts[i])

    return at


def test_energy_per_step_from_power_logs(con, train) -> None:
    """NVML power logs written during the two captures (UTC timestamps): the driver's energy
    counter over the steady steps (NVTX `step 1` to the last step's end) per step, read here from
    the CSV and the export. (The power readings are one-second averages that lag a sub-second
    steady state; the counter is the measurement.)"""
    logs = {}
    for name in ("foreach", "fused"):
        logs[name] = realdata("power", f"h100_nvml_train_{name}.csv")
        try:
            nsa.ingest(con, logs[name])
        except nsa.InputError as exc:  # pragma: no cover - the power reader is another module
            pytest.skip(f"no power log reader: {exc}")
    d = nsa.diff(
        con,
        train["h100_nsys2025.3_train_foreach_gpumetrics.sqlite"],
        train["h100_nsys2025.3_train_fused_gpumetrics.sqlite"],
        with_findings=False,
    )
    for side, name in ((d.a, "foreach"), (d.b, "fused")):
        db = sqlite3.connect(train[f"h100_nsys2025.3_train_{name}_gpumetrics.sqlite:path"])
        origin = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        steps = db.execute(
            """SELECT start, "end" FROM NVTX_EVENTS WHERE text GLOB 'step [0-9]*'
               ORDER BY CAST(substr(text, 6) AS INTEGER)"""
        ).fetchall()
        db.close()
        energy = _counter(logs[name])
        lo, hi = origin + steps[1][0], origin + steps[-1][1]  # step 0 is warm-up
        assert side.energy_per_step_j == pytest.approx((energy(hi) - energy(lo)) / (len(steps) - 1), rel=1e-6)
    assert d.metric("energy_per_step").relative < -0.1  # fused AdamW: about an eighth less per step


def render_short(name: str) -> str:
    from nsight_analytics.render.rows import short_kernel_name

    return short_kernel_name(name)


def test_h100x2_change_is_a_regression(tmp_path) -> None:
    """Two ranks (GPUs) per run, steps from the repeating kernel pattern. Checked here: the
    kernel `CatArrayBatchedCopy` runs twice per step on each GPU, so every second start of it
    marks a step."""
    before = realdata("nsys", "h100x2_nsys2026.2_train_before.sqlite")
    after = realdata("nsys", "h100x2_nsys2026.2_train_after.sqlite")
    con = nsa.connect(tmp_path / "x2.duckdb")
    d = nsa.diff(con, str(before), str(after))
    expected = {}
    for label, path in (("a", before), ("b", after)):
        db = sqlite3.connect(path)
        steps = []
        for dev in (0, 1):
            starts = [
                r[0]
                for r in db.execute(
                    "SELECT k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                    "WHERE s.value GLOB 'CatArrayBatchedCopy*' AND k.deviceId = ? ORDER BY k.start",
                    (dev,),
                )
            ]
            steps += [y - x for x, y in zip(starts, starts[2:])]
        db.close()
        expected[label] = statistics.fmean(steps)
    assert d.verdict == "regression", d.reason
    assert d.a.mean_step_ns == pytest.approx(expected["a"], rel=0.03)
    assert d.b.mean_step_ns == pytest.approx(expected["b"], rel=0.03)
    kinds = {p.name: p.delta_ns for p in d.attribution.by_cause}
    assert kinds["GPU idle (waiting for work)"] > kinds["kernel time"] > 0  # the GPU waits more
    assert_adds_up(d)
    con.close()


def test_graph_loop_steps_are_host_ranges(tmp_path) -> None:
    """Steps from a replayed CUDA graph (no NVTX: launch call to launch call) are host ranges like
    NVTX steps: the step time runs from the GPU start of one replay to the next, and the parts add
    up to it, the host's 2 ms sleep per step as GPU idle time."""
    path = DATA / "busy" / "nsys" / "h100_nsys2025.3_graph_loop_sleep.sqlite.gz"
    if not path.exists():
        pytest.skip(f"capture not available: {path} (fixtures/captures/capture_busy.sh makes it)")
    con = nsa.connect(tmp_path / "g.duckdb")
    rid = nsa.ingest(con, path).report_id
    d = nsa.diff(con, rid, rid, with_findings=False)
    if d.a.steps_source != "graphs":  # pragma: no cover - graph steps are another module's
        pytest.skip(f"steps found from {d.a.steps_source}, not from the graph launches")
    db = sqlite3.connect(unpacked(path, tmp_path))
    starts = [r[0] for r in db.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE ORDER BY start")]
    db.close()
    replays = [b - a for a, b in itertools.pairwise(starts)][1:]  # the first step is warm-up
    assert d.verdict == "no significant change", d.reason
    assert len(d.a.step_ns) == len(starts) - 1
    assert d.a.median_step_ns == pytest.approx(statistics.median(replays), rel=0.005)
    kinds = {p.name: p.a_ns for p in d.attribution.by_cause}
    assert kinds["GPU idle (waiting for work)"] > 0.8 * d.a.mean_step_ns
    assert sum(kinds.values()) == pytest.approx(d.a.mean_step_ns, rel=1e-9)
    assert_adds_up(d)
    con.close()


def test_precision_change_is_the_same_program(tmp_path) -> None:
    """FP32 -> bf16 autocast (busy_train.py): every GEMM, attention and elementwise kernel changes
    its name and casts are added, so few names match (plain SQL below), yet it is the same program
    with other kernels, not a different one: compared, with a note."""
    folder = DATA / "busy" / "nsys"
    fp32, bf16 = (
        folder / "h100_nsys2025.3_busy_train_fp32.sqlite.gz",
        folder / "h100_nsys2025.3_busy_train_bf16.sqlite.gz",
    )
    for path in (fp32, bf16):
        if not path.exists():
            pytest.skip(f"capture not available: {path} (fixtures/captures/capture_busy.sh makes it)")
    shares = []
    for path in (fp32, bf16):
        db = sqlite3.connect(unpacked(path, tmp_path))
        rows = db.execute(
            """SELECT s.value, sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
               JOIN StringIds s ON s.id = k.demangledName GROUP BY 1"""
        ).fetchall()
        db.close()
        total = sum(t for _, t in rows)
        shares.append({name: t / total for name, t in rows})
    overlap = sum(min(v, shares[1].get(k, 0.0)) for k, v in shares[0].items())
    assert overlap < 0.3  # under the name test's bar
    con = nsa.connect(tmp_path / "p.duckdb")
    d = nsa.diff(con, str(fp32), str(bf16), with_findings=False)
    program = next(c for c in d.checks if c.name == "program")
    assert program.ok and program.warning, program.detail
    assert "the same program with other kernels" in program.detail
    before = periods(nvtx_step_starts(unpacked(fp32, tmp_path)))
    after = periods(nvtx_step_starts(unpacked(bf16, tmp_path)))
    assert d.a.median_step_ns == pytest.approx(statistics.median(before), rel=0.005)
    assert d.b.median_step_ns == pytest.approx(statistics.median(after), rel=0.005)
    assert d.verdict == "improvement", d.reason
    con.close()


def test_kernel_names_meet_across_nsys_and_kineto(con, train) -> None:
    """The same program under nsys and under the PyTorch profiler: every kernel name of one
    finds its spelling in the other."""
    try:
        k = nsa.ingest(con, realdata("kineto", "h100_torch2.11_train_fused.json.gz")).report_id
    except nsa.InputError as exc:  # pragma: no cover - the Kineto reader is another module
        pytest.skip(f"no Kineto reader: {exc}")
    n = train["h100_nsys2025.3_train_fused_gpumetrics.sqlite"]

    def keys(rid: int) -> set[str]:
        rows = con.execute(
            "SELECT DISTINCT nsa_kernel_key(name) FROM kernel_names WHERE report_id = ?", [rid]
        )
        return {diff_key(r[0]) for r in rows.fetchall()}

    assert keys(k) == keys(n) and len(keys(n)) == 31
    d = nsa.diff(con, n, k)
    assert not [x for x in d.kernels if x.status != "changed"]
    assert any(c.name == "tool" and c.warning for c in d.checks)


# --- not comparable, and noise, on fixtures built here ------------------------------------------


def training_loop(
    path: Path,
    steps: int,
    *,
    fused: bool = False,
    gpu: str | None = None,
    kernel: str = "fwd_gemm",
    gemm_ns: int = 2_000_000,
    jitter_seed: int | None = None,
) -> dict[str, float]:
    """A training loop: per NVTX `step N`, a `forward` of 4 GEMMs (2 ms each) and an `optimizer`
    of 20 tiny launch-bound kernels (10 us each, one every 24 us of host time), or one fused
    50 us kernel. Returns the GPU-timeline answers of the steps (mean step, optimizer phase)."""
    rng = random.Random(jitter_seed)
    b = ExportBuilder()
    gtid = b.process(4242, "python3")
    b.gpu(0, **({"name": gpu} if gpu else {}))
    h = g = T0
    kernels: list[tuple[int, int, str]] = []  # (gpu start, gpu end, phase)
    host_end = 0
    for i in range(steps):
        step_start = h
        for phase, launches in (
            ("forward", [gemm_ns] * 4),
            ("optimizer", [50_000] if fused else [10_000] * 20),
        ):
            p0 = h
            for ns in launches:
                ns += rng.randint(0, 40_000) if jitter_seed is not None else 0
                start = max(g + 1_000, h + 9_000)
                h, g = b.launch_kernel(
                    h + 20_000, start + 20_000, ns, kernel if phase == "forward" else "adam", gtid=gtid
                )
                kernels.append((start + 20_000, g, phase))
            b.nvtx(p0, h, phase, gtid=gtid)
        b.nvtx(step_start, h + 1_000, f"step {i}", gtid=gtid)
        host_end = h + 1_000
        h += 1_000
    b.write(path)
    # the GPU timeline of the steps: each kernel charged its time and the idle time before it
    first, last = kernels[0][0], max(host_end, kernels[-1][1])
    charge: dict[str, float] = {}
    prev = first
    for s, e, phase in kernels:
        charge[phase] = charge.get(phase, 0) + (e - s) + (s - prev)
        prev = e
    charge["optimizer"] += last - prev
    return {"step_ns": (last - first) / steps, "optimizer_ns": charge["optimizer"] / steps}


@pytest.fixture
def loops(tmp_path):
    con = nsa.connect(tmp_path / "loops.duckdb")

    def make(name: str, steps: int, **kw) -> tuple[int, dict[str, float]]:
        answers = training_loop(tmp_path / f"{name}.sqlite", steps, **kw)
        return nsa.ingest(con, tmp_path / f"{name}.sqlite").report_id, answers

    yield con, make
    con.close()


def test_fused_optimizer_fixture_attribution_matches_the_timeline(loops) -> None:
    con, make = loops
    a, ans_a = make("foreach", 12)
    b, ans_b = make("fused", 12, fused=True)
    d = nsa.diff(con, a, b, with_findings=False)
    assert d.verdict == "improvement", d.reason
    assert d.a.mean_step_ns == pytest.approx(ans_a["step_ns"])
    assert d.b.mean_step_ns == pytest.approx(ans_b["step_ns"])
    opt = next(p for p in d.attribution.by_phase if p.name == "optimizer")
    assert opt.a_ns == pytest.approx(ans_a["optimizer_ns"])
    assert opt.b_ns == pytest.approx(ans_b["optimizer_ns"])
    assert opt.detail.startswith("19 fewer kernels per step")
    assert d.attribution.by_phase[0].name == "optimizer"
    assert_adds_up(d)


def test_groups_of_reports_compare_step_by_step(loops) -> None:
    """All ranks of a run: each side a group of reports; step k is their mean."""
    con, make = loops
    (a1, ans1), (a2, ans2) = make("rank0", 12, jitter_seed=3), make("rank1", 12, jitter_seed=4)
    b1, _ = make("fused0", 12, fused=True)
    b2, _ = make("fused1", 12, fused=True)
    d = nsa.diff(con, f"{a1},{a2}", [b1, b2], with_findings=False)
    assert d.a.report_ids == [a1, a2] and d.b.report_ids == [b1, b2]
    assert len(d.a.step_ns) == len(d.b.step_ns) == 12
    assert d.a.mean_step_ns == pytest.approx((ans1["step_ns"] + ans2["step_ns"]) / 2)
    assert d.verdict == "improvement", d.reason
    assert_adds_up(d)


def test_a_real_but_small_shift_is_under_the_noise_floor(loops) -> None:
    """GEMMs 0.5% longer: every step slower, so the interval excludes zero, but a 0.5% shift is
    what two runs of one program differ by; with a lower floor it is a regression."""
    con, make = loops
    a, ans_a = make("base", 12)
    b, ans_b = make("slower", 12, gemm_ns=2_010_000)
    d = nsa.diff(con, a, b, with_findings=False)
    assert d.verdict == "no significant change"
    assert "the shift is real but under the 2% noise floor" in d.reason
    assert d.step_change.ci_ns[0] > 0
    assert d.step_change.estimate_ns == pytest.approx(ans_b["step_ns"] - ans_a["step_ns"], rel=0.01)
    strict = nsa.diff(con, a, b, with_findings=False, noise_floor=0.001)
    assert strict.verdict == "regression"
    assert api.diff_gate(strict, 0.2).failed and not nsa.api.diff_gate(strict, 1).failed


def test_too_few_steps_is_inconclusive(loops) -> None:
    """3 steps a side: no result can reach 95% confidence (the least p-value is 2/20). The sides
    compare, the test cannot decide: inconclusive, with the change and the steps that would tell
    (every step of B beats every step of A: P(B > A) = 0, and Noether's sample size is
    (z.975 + z.8)^2 / (3 * 0.5^2) = 10.5 steps in all, 6 a side)."""
    con, make = loops
    a, ans_a = make("a", 3)
    b, ans_b = make("b", 3, fused=True)
    d = nsa.diff(con, a, b, with_findings=False)
    assert d.verdict == "inconclusive", d.reason
    assert d.comparable and d.step_change.ci_ns is None
    assert d.step_change.estimate_ns == pytest.approx(ans_b["step_ns"] - ans_a["step_ns"], rel=0.01)
    assert "with 3 and 3 steady steps no result can reach 95% confidence" in d.reason
    assert d.step_change.superiority == 0 and d.step_change.steps_needed == 6
    assert d.reason.endswith("capture about 6 steady steps a side.")
    note = next(c for c in d.checks if c.name == "steps" and c.warning)
    assert note.ok and note.warning and note.detail.startswith("too few steps")
    assert not api.diff_gate(d, 5).failed  # no regression shown
    assert api.diff_gate(d, 5, fail_inconclusive=True).failed  # nor ruled out


def test_different_gpu_is_not_comparable(loops) -> None:
    con, make = loops
    a, _ = make("h100", 10)
    b, _ = make("a100", 10, gpu="NVIDIA A100-SXM4-80GB")
    d = nsa.diff(con, a, b, with_findings=False)
    assert d.verdict == "not comparable"
    assert d.reason == "different GPUs: A ran on 1x NVIDIA H100 80GB HBM3, B on 1x NVIDIA A100-SXM4-80GB."
    gate = api.diff_gate(d, 5)
    assert gate.failed and gate.message.startswith(
        "gate FAILED: it could not judge B against A: not comparable"
    )
    allowed = api.diff_gate(d, 5, allow_not_comparable=True)
    assert not allowed.failed and allowed.message.startswith("gate passed without judging")


def test_different_program_is_not_comparable(loops) -> None:
    con, make = loops
    a, _ = make("model", 10)
    b, _ = make("other", 10, kernel="other_conv")
    d = nsa.diff(con, a, b, with_findings=False)
    assert d.verdict == "not comparable"
    assert "a different program" in d.reason


def test_same_loop_with_noise_is_no_significant_change(loops) -> None:
    con, make = loops
    a, _ = make("run1", 20, jitter_seed=1)
    b, _ = make("run2", 20, jitter_seed=2)
    d = nsa.diff(con, a, b, with_findings=False)
    assert d.verdict == "no significant change", d.reason


# --- the statistic ---------------------------------------------------------------------------


def test_exact_u_distribution_matches_enumeration() -> None:
    for n, m in ((3, 4), (4, 4), (2, 7), (5, 3)):
        counts = [0] * (n * m + 1)
        for pos in itertools.combinations(range(n + m), n):  # positions of A in the joint order
            u = sum(1 for p in pos for q in range(p + 1, n + m) if q not in pos)
            counts[u] += 1
        assert tuple(counts) == stats._u_counts(n, m)


def test_shift_interval_and_limits() -> None:
    s = stats.shift([1, 2, 3, 4], [5, 6, 7, 8])
    assert s.estimate == 4 and s.ci == (1.0, 7.0)  # all 16 differences; P(U = 16) = 1/70
    assert s.p_value == pytest.approx(2 / 70)
    assert stats.shift([1, 2, 3], [4, 5, 6]).ci is None  # min p = 2/20 > 0.05
    rng = random.Random(0)
    a = [rng.gauss(10, 1) for _ in range(300)]
    b = [x + 0.5 for x in a]
    big = stats.shift(a, b)
    assert not big.exact and big.ci[0] < 0.5 < big.ci[1]
    assert big.estimate == pytest.approx(0.5, abs=0.15)
