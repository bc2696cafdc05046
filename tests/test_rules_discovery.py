"""Rules are found, not listed: a rule is one module, and the engine runs it on every report that
has the data it declares, whatever tool wrote the report."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import nsight_analytics as nsa
from nsight_analytics.rules import ConfigError, discover, load_config, rules, run_rules
from nsight_analytics.rules.context import Context
from rows import insert

# A whole rule, as a new file in nsight_analytics/rules/checks/ would hold it.
TOY_RULE = '''
from nsight_analytics.rules.context import Context
from nsight_analytics.rules.model import Finding, Threshold, rule


@rule(
    "many-kernels",
    needs=("kernel",),
    severities=("info",),
    thresholds=(Threshold("toy_min_kernels", 3, "count", "Kernels on one device worth a finding."),),
    queries=("kernel_span",),
)
def many_kernels(ctx: Context, rid: int) -> list[Finding]:
    """A device ran many kernels.

    Fix: Nothing to fix: this rule shows that a rule is one file.
    """
    out = []
    for r in ctx.query("kernel_span", rid):
        if r.kernels >= ctx["toy_min_kernels"]:
            title = f"{r.kernels} kernels on device {r.device_id}"
            out.append(Finding("many-kernels", "info", rid, title, title + ".", many_kernels.fix))
    return out
'''


@pytest.fixture
def toy_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    package = tmp_path / "toy_rules"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "many_kernels.py").write_text(textwrap.dedent(TOY_RULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget("toy_rules")
    yield package
    _forget("toy_rules")


def _forget(package: str) -> None:
    """Drop an imported package and its modules, so the next test imports its own files."""
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]


def _workspace(path: Path):
    con = nsa.connect(path)
    reports = [
        {"report_id": 1, "format": "nsys", "activity_kinds": ["kernel"], "has_kernels": True},
        # an ncu report also has kernels (ncu_kernels), but no kernel activity on a timeline
        {"report_id": 2, "format": "ncu", "activity_kinds": ["ncu_metrics"], "has_kernels": True},
    ]
    insert(
        con,
        "reports",
        [{"source_path": f"/toy/{r['report_id']}", "sha256": str(r["report_id"]), **r} for r in reports],
    )
    kernels = [
        {
            "report_id": 1,
            "device_id": 0,
            "start_ns": i * 1000,
            "end_ns": i * 1000 + 500,
            "duration_ns": 500,
            "name": "k",
        }
        for i in range(4)
    ]
    insert(con, "kernels", kernels)
    return con


def test_a_rule_is_one_file(toy_rules: Path, tmp_path: Path) -> None:
    toy = discover("toy_rules")
    assert [r.id for r in toy] == ["many-kernels"]
    assert toy[0].fix == "Nothing to fix: this rule shows that a rule is one file."
    con = _workspace(tmp_path / "w.duckdb")
    try:
        found = run_rules(con, ruleset=[*rules(), *toy], only=["many-kernels"])
        assert [(f.rule_id, f.report_id, f.title) for f in found] == [
            ("many-kernels", 1, "4 kernels on device 0")
        ]
        # its threshold is configured like any other, by name or in its own table
        assert run_rules(con, ruleset=toy, config={"toy_min_kernels": 5}) == []
    finally:
        con.close()
    cfg = tmp_path / "rules.toml"
    cfg.write_text("[many-kernels]\ntoy_min_kernels = 10\n")
    assert load_config(cfg, ruleset=toy)["toy_min_kernels"] == 10
    with pytest.raises(ConfigError, match="unknown rule threshold 'toy_min_kernels'"):
        load_config(overrides={"toy_min_kernels": 1})  # the built-in rules do not know it


def test_a_module_defines_exactly_one_rule(toy_rules: Path) -> None:
    body = (toy_rules / "many_kernels.py").read_text()
    (toy_rules / "two.py").write_text(
        body + body.replace("many_kernels", "more_kernels").replace('"many-kernels"', '"more"')
    )
    with pytest.raises(
        ValueError, match="toy_rules.two must define exactly one rule, found: many-kernels, more"
    ):
        discover("toy_rules")


def test_builtin_rules_are_discovered_in_their_declared_order() -> None:
    assert [r.id for r in rules()] == [
        "copy-dominated", "pageable-memcpy", "small-kernel-storm", "fp32-matmul", "unfused-elementwise",
        "stall-dominated", "fp32-matmul-kernel",
        "memory-bound",
        "roofline-headroom", "latency-bound", "low-occupancy", "tensor-cores-idle", "low-issue-while-busy",
        "dram-saturated", "pcie-saturated", "gpu-idle", "startup", "memory-growth", "host-sync",
        "no-gpu-activity", "exposed-communication", "straggler-rank", "load-imbalance", "scaling-loss",
    ]  # fmt: skip
    checks = Path(nsa.__file__).parent / "rules" / "checks"
    assert len([p for p in checks.glob("*.py") if not p.name.startswith("_")]) == len(rules())


def test_rules_run_by_the_data_a_report_holds() -> None:
    by_id = {r.id: r for r in rules()}
    timeline = ["kernel", "memcpy", "cuda_api", "sync", "nvtx", "processes"]
    assert by_id["gpu-idle"].runs_on(timeline) and not by_id["gpu-idle"].runs_on(["ncu_metrics"])
    assert by_id["gpu-idle"].runs_on(["graph"])  # a CUDA graph replay is GPU work too
    assert by_id["stall-dominated"].runs_on(["ncu_metrics", "ncu_rules"]) and not by_id[
        "stall-dominated"
    ].runs_on(timeline)
    assert not by_id["pageable-memcpy"].runs_on(["kernel"])
    assert by_id["no-gpu-activity"].runs_on([])  # it judges what is missing, on any report


def test_rules_declare_the_queries_they_run(nsys_any_workspace) -> None:
    """The facade materialises what a rule's queries read before it runs: the declaration must
    cover every query the rule asks for."""
    con, _ = nsys_any_workspace

    class Recording(Context):
        ran: set[str]

        def _run_query(self, name, params, as_df):
            self.ran.add(name)
            return super()._run_query(name, params, as_df)

    for r in rules():
        ctx = Recording(con, load_config(), None)
        ctx.ran = set()
        # a run rule judges each run, on the union of its reports' data
        for unit in ctx.runs() if r.scope == "run" else ctx.reports():
            if r.runs_on(unit.activity_kinds or ()):
                r.check(ctx, int(unit.run_id if r.scope == "run" else unit.report_id))
        assert ctx.ran <= set(r.queries), f"{r.id} runs {sorted(ctx.ran - set(r.queries))} undeclared"


def test_thresholds_are_declared_once() -> None:
    from nsight_analytics.rules import DEFAULTS

    owners = {name: [r.id for r in rules() if name in r.thresholds] for name in DEFAULTS}
    assert all(owners.values())
    assert owners["heavy_kernel_share"] == [
        "stall-dominated",
        "fp32-matmul-kernel",
        "memory-bound",
        "roofline-headroom",
        "latency-bound",
        "low-occupancy",
    ]
