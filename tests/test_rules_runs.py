"""Run rules: a rule of scope "run" judges the ranks of a job together, once per run, on the union
of its reports' data; run_rules selects runs by report or by run id; `nsa rules` says the scope.
The rules' own numbers are tested as cases (tests/rules/exposed_communication.py, straggler_rank.py, load_imbalance.py, scaling_loss.py)."""

from __future__ import annotations

import csv
import io
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from rules.build_runs import MS, OTHER, SCALE_W2, SCALE_W4, STEADY, Rank, ddp_run, merged
from test_rules_cases import load_case

import nsight_analytics as nsa
from nsight_analytics import api, render
from nsight_analytics.rules import discover, rule, rules, run_rules
from nsight_analytics.rules.checks.scaling_loss import same_program
from nsight_analytics.rules.runs import ranks_text


@pytest.fixture
def three_runs(tmp_path: Path) -> Iterator:
    """Runs 1 (ddp_w2, reports 1-2), 2 (ddp_w4, reports 3-6) and 3 (ddp_w4_slow2, reports 7-10:
    rank 2, report 9, is a straggler), and report 11, in no run."""
    con = nsa.connect(tmp_path / "w.duckdb")
    lone = {"kernels": [{"report_id": 11, "device_id": 0, "stream_id": 7, "pid": 1, "start_ns": 0,
                         "end_ns": MS, "duration_ns": MS, "name": "gemm"}]}  # fmt: skip
    load_case(con, merged(SCALE_W2, SCALE_W4, OTHER, lone))
    yield con
    con.close()


def _found(con, **kw) -> list[tuple[str, int | None, int]]:
    return [(f.rule_id, f.run_id, f.report_id) for f in run_rules(con, **kw)]


def test_run_rules_judge_each_run_once(three_runs) -> None:
    assert _found(three_runs, only=["straggler-rank", "scaling-loss"]) == [
        ("straggler-rank", 3, 9),  # the straggler's report
        ("scaling-loss", 2, 3),  # the largest run of ddp_w2 / ddp_w4, filed under its lowest report
    ]


def test_a_report_brings_the_runs_it_belongs_to(three_runs) -> None:
    only = ["straggler-rank", "scaling-loss"]
    # report 8 is rank 1 of run 3: the straggler finding of its run, filed under rank 2's report
    assert _found(three_runs, report_id=8, only=only) == [("straggler-rank", 3, 9)]
    # report 4 is in run 2, the largest of its series, compared with run 1 though report 4 is not in it
    assert _found(three_runs, report_id=4, only=only) == [("scaling-loss", 2, 3)]
    assert _found(three_runs, report_id=1, only=only) == []  # run 1 is the base, not the largest
    assert _found(three_runs, report_id=11, only=only) == []  # in no run


def test_run_id_selects_runs_and_their_reports(three_runs) -> None:
    only = ["straggler-rank", "scaling-loss", "no-gpu-activity"]
    assert _found(three_runs, run_id=3, only=only) == [("straggler-rank", 3, 9)]
    assert _found(three_runs, run_id=2, only=only) == [("scaling-loss", 2, 3)]
    # report rules judge the selected run's reports only
    from nsight_analytics.rules.context import Context

    assert [r.report_id for r in Context(three_runs, {}, run_ids=[3]).reports()] == [7, 8, 9, 10]
    assert [r.run_id for r in Context(three_runs, {}, report_id=5).runs()] == [2]
    assert [r.report_ids for r in Context(three_runs, {}, run_ids=[1, 3]).runs()] == [[1, 2], [7, 8, 9, 10]]


def test_runs_the_user_names_are_one_series(three_runs) -> None:
    """Named together, ddp_w2 and ddp_w4_slow2 are compared though their names differ: run 3's
    20 ms step against run 1's 10 ms, weak scaling (every rank computes 5.1 ms per step in both):
    efficiency 50%, 10 ms lost per step. Exposed communication per step, mean over ranks, grows
    from 1 ms to (3 x 9 + 1) / 4 = 7 ms: 6 ms of the loss, most of it the other ranks' wait for
    straggler rank 2, which the finding says; the other 4 ms is idle GPU time (no imbalance: rank 2
    computes what the others do)."""
    found = [f for f in run_rules(three_runs, run_id=[1, 3], only=["scaling-loss"])]
    assert [(f.rule_id, f.severity, f.run_id) for f in found] == [("scaling-loss", "critical", 3)]
    ev = found[0].evidence
    assert (ev["base_run_id"], ev["mode"]) == (1, "weak")
    assert ev["efficiency"] == pytest.approx(0.5)
    assert ev["lost_ns"] == pytest.approx(10 * MS)
    assert (ev["lost_comm_ns"], ev["lost_other_ns"]) == (pytest.approx(6 * MS), pytest.approx(4 * MS))
    assert (ev["lost_compute_ns"], ev["lost_imbalance_ns"]) == (pytest.approx(0), pytest.approx(0))
    assert (ev["largest_part"], ev["straggler_rank"]) == ("lost_comm_ns", 2)
    assert "Rank 2 is a straggler in this run (8 ms late per step)" in found[0].message
    assert found[0].recommendation.startswith("Fix the straggler, rank 2, first")
    assert found[0].est_savings_ns == 10 * MS * STEADY


def test_a_run_rule_is_skipped_with_any_of_its_reports(three_runs) -> None:
    only = ["straggler-rank"]
    assert _found(three_runs, only=only, skip={(7, "straggler-rank")}) == []
    assert _found(three_runs, only=only, skip={(7, "gpu-idle")}) == [("straggler-rank", 3, 9)]


# A run rule as one file: it needs kernels and NVTX ranges, which no single report of its run holds.
TOY_RUN_RULE = '''
from nsight_analytics.rules.context import Context
from nsight_analytics.rules.model import Finding, rule


@rule("ranks-seen", scope="run", needs=("kernel", "nvtx"), severities=("info",))
def ranks_seen(ctx: Context, run_id: int) -> list[Finding]:
    """A run's ranks, counted.

    Fix: Nothing to fix: this rule shows what a run rule is.
    """
    ranks = [int(r.rank) for r in ctx.run_ranks(run_id)]
    report = min(int(r.report_id) for r in ctx.run_ranks(run_id))
    text = f"{ctx.run_label(run_id)} has {len(ranks)} ranks."
    return [Finding("ranks-seen", "info", report, text, text, ranks_seen.fix, run_id=run_id, ranks=ranks)]
'''


@pytest.fixture
def toy_run_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    package = tmp_path / "toy_run_rules"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ranks_seen.py").write_text(textwrap.dedent(TOY_RUN_RULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for name in [m for m in sys.modules if m.startswith("toy_run_rules")]:
        del sys.modules[name]


def test_a_run_rule_needs_what_its_reports_hold_together(toy_run_rules: Path, tmp_path: Path) -> None:
    toy = discover("toy_run_rules")
    assert [(r.id, r.scope) for r in toy] == [("ranks-seen", "run")]
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        run = ddp_run(1, "split", [Rank(), Rank()], step=10 * MS, latency=MS, first_report=1)
        load_case(con, run)
        # report 1 holds the kernels, report 2 the NVTX ranges: neither alone meets the needs
        con.execute("UPDATE reports SET activity_kinds = ['kernel'] WHERE report_id = 1")
        con.execute("UPDATE reports SET activity_kinds = ['nvtx'] WHERE report_id = 2")
        found = run_rules(con, ruleset=toy)
        assert [(f.rule_id, f.run_id, f.report_id, f.ranks, f.title) for f in found] == [
            ("ranks-seen", 1, 1, [0, 1], "run 1 (split) has 2 ranks.")
        ]
        con.execute("UPDATE reports SET activity_kinds = ['kernel']")
        assert run_rules(con, ruleset=toy) == []
    finally:
        con.close()


def test_scope_is_declared_and_listed() -> None:
    with pytest.raises(ValueError, match="scope must be one of"):
        rule("x", needs=(), severities=("info",), scope="job")(lambda ctx, rid: [])
    by_id = {r.id: r for r in rules()}
    assert {i for i, r in by_id.items() if r.scope == "run"} == {
        "exposed-communication", "straggler-rank", "load-imbalance", "scaling-loss",
    }  # fmt: skip
    assert by_id["gpu-idle"].scope == "report"
    thresholds = api.thresholds()
    rows = list(csv.DictReader(io.StringIO(render.render_rules(rules(), thresholds, "csv"))))
    assert {r["rule"]: r["scope"] for r in rows}["load-imbalance"] == "run"
    text = render.render_rules(rules(), thresholds, "table", width=80)
    assert "straggler-rank  (warning / critical; reads kernel and comm)\n  per run: One rank arrives" in text
    assert "gpu-idle  (warning / critical; reads " in text
    markdown = render.render_rules(rules(), thresholds, "markdown")
    assert "| `scaling-loss` | kernel | warning / critical | run |" in markdown


def test_names_of_ranks_and_series() -> None:
    assert [ranks_text(r) for r in ([3], [2, 0], [0, 1, 5], [3, 0, 1, 2], [])] == [
        "rank 3", "ranks 0 and 2", "ranks 0, 1 and 5", "ranks 0-3", "no rank",
    ]  # fmt: skip
    assert same_program("ddp_w4", 4, "ddp_w2", 2)
    assert same_program("h200x4_nsys2025.3_ddp_w4", 4, "h200x1_nsys2025.3_ddp_w1", 1)
    assert same_program("resnet_v1_w1", 1, "resnet_v1_w8", 8)
    assert not same_program("resnet50_8gpu", 8, "resnet101_4gpu", 4)
    assert not same_program("ddp_w4_slow2", 4, "ddp_w2", 2)
    assert not same_program("ddp_w4", 4, "ddp_w8", 2)  # 8 is not that run's world size


def test_run_rules_declare_what_they_read(three_runs) -> None:
    """The facade materialises what a rule declares: the queries the run rules run (their `-- reads`
    lines are checked against their SQL by tests/test_query_contracts.py)."""
    from nsight_analytics.rules import load_config
    from nsight_analytics.rules.context import Context

    class Recording(Context):
        ran: set[str]

        def _run_query(self, name, params, as_df):
            self.ran.add(name)
            return super()._run_query(name, params, as_df)

    for r in [r for r in rules() if r.scope == "run"]:
        ctx = Recording(three_runs, load_config(), None)
        ctx.ran = set()
        for run in ctx.runs():
            r.check(ctx, int(run.run_id))
        assert ctx.ran <= set(r.queries), f"{r.id} runs {sorted(ctx.ran - set(r.queries))} undeclared"
