"""`nsa diff --run A B` on the DDP captures (tests/data/ddp): one world size compares the job
before and after, rank by rank; two world sizes compare as a scaling. Expected numbers come from
what the program printed (tests/data/ddp/logs: steady step time and throughput over 25 steps
timed between two synchronisations) and plain arithmetic on them, never from nsa's output."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from nsight_analytics.cli import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, main
from nsight_analytics.diff import Diff
from nsight_analytics.render import diff as render_diff
from rows import opened

DDP = Path(__file__).resolve().parent / "data" / "ddp"
LOG_LINE = re.compile(
    r"^world (\d+) steady_steps \d+ seconds [\d.]+ step_ms ([\d.]+) throughput ([\d.]+) samples/s"
)
RUN_RULES = {"exposed-communication", "straggler-rank", "load-imbalance", "scaling-loss"}


def printed(tag: str) -> tuple[int, float, float]:
    """(world size, step ms, samples/s) as rank 0 of run `tag` printed them."""
    for line in (DDP / "logs" / f"{tag}.log").read_text().splitlines():
        if m := LOG_LINE.match(line):
            return int(m.group(1)), float(m.group(2)), float(m.group(3))
    raise AssertionError(f"no throughput line in {tag}.log")


def run(*args: str):
    return CliRunner(env={"COLUMNS": "80"}).invoke(main, list(args))


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """(db, {tag: run id}): the per-rank nsys captures of world 4, world 4 with rank 2 slowed,
    world 2 and world 1, each a run named by its tag."""
    db = tmp_path_factory.mktemp("diff_runs") / "w.duckdb"
    runs = {}
    with opened(db) as con:
        for tag, world in (("ddp_w4", 4), ("ddp_w4_slow2", 4), ("ddp_w2", 2), ("ddp_w1", 1)):
            files = sorted((DDP / "nsys").glob(f"h200x{world}_nsys2025.3_{tag}_rank*.sqlite.gz"))
            assert len(files) == world
            runs[tag] = nsa.make_run(con, [nsa.ingest(con, f).report_id for f in files], tag)
    return db, runs


@pytest.fixture(scope="module")
def diffs(ws) -> dict[str, Diff]:
    db, _ = ws
    with opened(db) as con:
        return {
            "slowed": nsa.diff(con, "ddp_w4", "ddp_w4_slow2", runs=True),
            "scaling": nsa.diff(con, "ddp_w2", "ddp_w4", runs=True),
        }


def test_a_slowed_rank_is_a_regression_named_by_rank(diffs) -> None:
    d = diffs["slowed"]
    _, before_ms, _ = printed("ddp_w4")
    _, after_ms, _ = printed("ddp_w4_slow2")
    expected = (after_ms - before_ms) * 1e6  # 12.744 - 5.446 ms: the 8 ms sleep, less what it hid
    assert d.verdict == "regression", d.reason
    assert d.step_change is not None
    assert d.step_change.estimate_ns == pytest.approx(expected, rel=0.05)
    assert d.run_a is not None and d.run_b is not None
    assert (d.run_a.name, d.run_b.name, d.run_a.world_size) == ("ddp_w4", "ddp_w4_slow2", 4)
    # rank 2 now arrives late by about the step's growth, and the other three wait that long
    rc = d.run_changes
    assert rc is not None and rc.straggler == 2
    by_rank = {r.rank: r for r in rc.ranks}
    assert sorted(by_rank) == [0, 1, 2, 3]
    assert by_rank[2].delta("late_ns") > 0.9 * expected
    for r in (0, 1, 3):
        assert by_rank[r].delta("wait_ns") > 0.9 * expected
        assert abs(by_rank[r].delta("late_ns")) < 0.1 * expected
    assert rc.summary[0].startswith("Rank 2 arrives at the collectives")
    assert "ranks 0, 1 and 3 wait" in rc.summary[0]
    assert rc.collectives and rc.collectives[0].op == "all_reduce"
    assert rc.collectives[0].b_last_rank == 2
    # each run finding once: the straggler is new, found once for the run, not once per rank
    counts = Counter((f.status, f.rule_id) for f in d.findings if f.rule_id in RUN_RULES)
    assert counts[("new", "straggler-rank")] == 1
    assert max(counts.values()) == 1


def test_the_same_change_reversed_is_an_improvement(ws, diffs) -> None:
    db, _ = ws
    with opened(db) as con:
        undo = nsa.diff(con, "ddp_w4_slow2", "ddp_w4", runs=True, with_findings=False)
    assert undo.verdict == "improvement", undo.reason
    assert undo.step_change.estimate_ns == pytest.approx(-diffs["slowed"].step_change.estimate_ns, rel=1e-9)
    assert undo.run_changes.straggler == 2
    assert undo.run_changes.summary[0].startswith("Rank 2 no longer holds the others back")


def test_two_world_sizes_are_a_scaling_comparison(diffs) -> None:
    d = diffs["scaling"]
    w2, _, tput2 = printed("ddp_w2")
    w4, _, tput4 = printed("ddp_w4")
    # weak scaling: each rank keeps its batch, so efficiency = per-rank throughput ratio
    efficiency = tput4 / (w4 / w2 * tput2)  # 376030.4 / (2 x 222217.2) = 0.846
    assert d.verdict == "scaling", d.reason
    s = d.scaling
    assert s is not None and s.mode == "weak" and s.throughput_unit == "rank-steps/s"
    assert (s.base.name, s.base.world_size, s.scaled.name, s.scaled.world_size) == ("ddp_w2", 2, "ddp_w4", 4)
    assert s.efficiency == pytest.approx(efficiency, abs=0.03)
    assert s.speedup == pytest.approx(tput4 / tput2, abs=0.06)
    # the lost step time: actual - ideal (the base's step, weak scaling), split four ways
    assert s.lost_ns == pytest.approx(s.scaled.step_ns - s.base.step_ns, rel=1e-6)
    parts = (s.lost_comm_ns, s.lost_compute_ns, s.lost_imbalance_ns, s.lost_other_ns)
    assert sum(parts) == pytest.approx(s.lost_ns, rel=1e-6)
    assert s.lost_comm_ns > 0.5 * s.lost_ns  # four ranks all-reduce longer than two
    head = render_diff.headline(d)
    m = re.fullmatch(r"SCALES AT (\d+)% \(weak scaling, 2 -> 4 ranks\)", head)
    assert m and abs(int(m.group(1)) - 100 * efficiency) <= 3, head
    # findings pair by rule across world sizes: scaling-loss judges this pair, once
    loss = [f for f in d.findings if f.rule_id == "scaling-loss"]
    assert [f.status for f in loss] == ["new"]
    assert f"{round(100 * s.efficiency)}%" in loss[0].title
    assert len({f.rule_id for f in d.findings}) == len(d.findings)


def test_scaling_from_one_rank_and_either_order(ws) -> None:
    db, _ = ws
    w1, _, tput1 = printed("ddp_w1")
    w4, _, tput4 = printed("ddp_w4")
    with opened(db) as con:
        d = nsa.diff(con, "ddp_w4", "ddp_w1", runs=True, with_findings=False)
    assert d.verdict == "scaling", d.reason
    assert d.scaling.base.name == "ddp_w1" and d.scaling.scaled.name == "ddp_w4"
    assert d.scaling.efficiency == pytest.approx(tput4 / (w4 / w1 * tput1), abs=0.03)  # 0.713
    assert "B has the fewer ranks" in d.reason


def test_gate_on_runs(ws) -> None:
    db, _ = ws
    _, before_ms, _ = printed("ddp_w4")
    _, after_ms, _ = printed("ddp_w4_slow2")
    assert (after_ms - before_ms) / before_ms > 1.0  # the slowed run more than doubles the step
    slower = run("diff", "--db", str(db), "--run", "ddp_w4", "ddp_w4_slow2", "--no-findings",
                 "--fail-on-regression", "50")  # fmt: skip
    assert slower.exit_code == EXIT_FINDINGS, slower.output
    assert "gate FAILED: step time" in slower.stdout
    faster = run("diff", "--db", str(db), "--run", "ddp_w4_slow2", "ddp_w4", "--no-findings",
                 "--fail-on-regression", "50")  # fmt: skip
    assert faster.exit_code == EXIT_OK, faster.output
    # a scaling at about 85% fails a 10% gate (needs 90%) and passes a 20% one (needs 80%)
    strict = run("diff", "--db", str(db), "--run", "ddp_w2", "ddp_w4", "--no-findings",
                 "--fail-on-regression", "10", "--format", "json")  # fmt: skip
    assert strict.exit_code == EXIT_FINDINGS, strict.output
    assert json.loads(strict.stdout)["gate"]["failed"] is True
    assert strict.stderr.startswith("gate FAILED: scaling efficiency 8")
    lenient = run("diff", "--db", str(db), "--run", "ddp_w2", "ddp_w4", "--no-findings",
                  "--fail-on-regression", "20")  # fmt: skip
    assert lenient.exit_code == EXIT_OK, lenient.output
    assert "gate passed: scaling efficiency" in lenient.stdout


def test_the_same_run_twice_says_so(ws) -> None:
    db, runs = ws
    res = run("diff", "--db", str(db), "--run", str(runs["ddp_w4"]), str(runs["ddp_w4"]),
              "--fail-on-regression", "1")  # fmt: skip
    assert res.exit_code == EXIT_OK, res.output
    assert f"SAME RUN: A and B are both run {runs['ddp_w4']} (ddp_w4)" in res.stdout
    assert "gate not applied: A and B are the same run." in res.stdout
    # an id on one side, the name on the other: still one run
    with opened(db) as con:
        d = nsa.diff(con, runs["ddp_w4"], "ddp_w4", runs=True)
    assert d.same_run and d.verdict == "same run" and not d.findings
    # as for one report twice: no gate, whatever it watches, findings included
    js = run("diff", "--db", str(db), "--run", "ddp_w4", "ddp_w4", "--format", "json", "--fail-on-regression", "1",
             "--metric", "energy_per_step", "--fail-on-new-finding")  # fmt: skip
    assert js.exit_code == EXIT_OK, js.output
    assert json.loads(js.stdout)["verdict"] == "same run"
    assert js.stderr == (
        "gate not applied: A and B are the same run. findings gate not applied: A and B are the same run.\n"
    )


def test_text_fits_80_columns_markdown_and_json(ws, diffs) -> None:
    db, _ = ws
    for a, b, first in (("ddp_w4", "ddp_w4_slow2", "REGRESSION: GPU step time +1"),
                        ("ddp_w2", "ddp_w4", "SCALES AT 8")):  # fmt: skip
        res = run("diff", "--db", str(db), "--run", a, b)
        assert res.exit_code == EXIT_OK, res.output
        lines = res.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80
        assert lines[1].startswith("A (before)  run ") and f"{a}:" in lines[1]
        assert lines[4].startswith(first)
    text = render_diff.to_text(diffs["slowed"])
    for section in (
        "Ranks (per steady step",
        "Collectives matched across ranks",
        "Rank 2 arrives",
        "Findings",
    ):
        assert section in text
    text = render_diff.to_text(diffs["scaling"])
    for section in (
        "Scaling (per steady step",
        "Step time lost against ideal scaling",
        "exposed communication",
    ):
        assert section in text
    md = render_diff.to_markdown(diffs["slowed"])
    assert md.startswith("### nsa diff: REGRESSION") and "<summary>Ranks</summary>" in md
    assert "| rank | step (median) |" in md
    assert render_diff.to_markdown(diffs["scaling"]).startswith("### nsa diff: SCALES AT 8")
    for d in diffs.values():
        data = json.loads(render_diff.to_json(d))
        back = Diff.from_dict(data)
        assert back == d and back.to_dict() == data
    assert json.loads(render_diff.to_json(diffs["scaling"]))["scaling"]["mode"] == "weak"


def test_report_groups_list_a_run_finding_once(ws) -> None:
    """`nsa diff 1,2,3,4 5,6,7,8` (the reports of the two runs, not --run) judges each run once."""
    db, runs = ws
    with opened(db) as con:
        a = nsa.api.run_reports(con, runs["ddp_w4"])
        b = nsa.api.run_reports(con, runs["ddp_w4_slow2"])
        d = nsa.diff(con, a, b)
    assert d.run_a is None and d.run_changes is None
    straggler = [f for f in d.findings if f.rule_id == "straggler-rank"]
    assert [f.status for f in straggler] == ["new"]
    counts = Counter((f.status, f.rule_id) for f in d.findings if f.rule_id in RUN_RULES)
    assert max(counts.values()) == 1


def test_run_usage_errors_exit_2(ws) -> None:
    db, _ = ws
    unknown = run("diff", "--db", str(db), "--run", "ddp_w4", "nope")
    assert unknown.exit_code == EXIT_ERROR
    assert unknown.stderr.startswith("Error: no run 'nope' in the workspace (the runs are 1 (ddp_w4), ")
    both = run("diff", "--db", str(db), "--run", "--baseline", "main", "ddp_w4")
    assert both.exit_code == EXIT_ERROR and "with --run give two runs" in both.stderr
