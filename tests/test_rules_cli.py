"""`nsa findings` and `nsa rules` through click's CliRunner: exit codes, JSON shape, config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from fixtures.nsys_fixtures import SCENARIOS
from nsight_analytics.cli import EXIT_ERROR, EXIT_FINDINGS, main
from nsight_analytics.rules import rules


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    con = nsa.connect(d / "w.duckdb")
    for name in ("healthy", "h2d_dominated"):
        SCENARIOS[name](d / f"{name}.sqlite")
        nsa.ingest(con, d / f"{name}.sqlite")  # report 1 healthy, report 2 h2d
    con.close()
    return d / "w.duckdb"


def _run(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_json_shape(db: Path) -> None:
    r = _run("findings", "--db", str(db), "--format", "json")
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert isinstance(data, list) and data
    keys = {
        "rule_id",
        "severity",
        "report_id",
        "title",
        "message",
        "evidence",
        "recommendation",
        "est_savings_ns",
        "same_saving_as",
        "run_id",
        "ranks",
    }
    assert all(set(f) == keys for f in data)
    assert data[0]["rule_id"] == "copy-dominated"


def test_fail_on_exit_codes(db: Path) -> None:
    assert _run("findings", "--db", str(db), "--fail-on", "critical").exit_code == EXIT_FINDINGS
    assert _run("findings", "--db", str(db), "--report", "1", "--fail-on", "warning").exit_code == 0
    r = _run(
        "findings",
        "--db",
        str(db),
        "--report",
        "2",
        "--fail-on",
        "warning",
        "--set",
        "copy_share_warning=0.99",
    )
    assert r.exit_code == 0


def test_text_output(db: Path) -> None:
    r = _run("findings", "--db", str(db), "--report", "2")
    assert r.exit_code == 0
    assert r.output.startswith("1. [CRITICAL] HtoD copies from pinned memory fill 91% of the GPU span")
    assert "copy-dominated | report 2 (h2d_dominated.sqlite) | est. savings" in r.output
    assert "Fix: " in r.output and "GB/s" in r.output


def test_config_file_and_errors(db: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "rules.toml"
    cfg.write_text("[thresholds]\ncopy_share_warning = 0.99\ncopy_share_critical = 0.995\n")
    r = _run("findings", "--db", str(db), "--report", "2", "--config", str(cfg), "--format", "json")
    assert "copy-dominated" not in {f["rule_id"] for f in json.loads(r.output)}
    bad = _run("findings", "--db", str(db), "--set", "no_such_threshold=1")
    assert bad.exit_code == EXIT_ERROR and "unknown rule threshold" in bad.output
    assert _run("findings", "--db", str(db), "--report", "99").exit_code == EXIT_ERROR
    cfg.write_text("not toml [")
    assert _run("findings", "--db", str(db), "--config", str(cfg)).exit_code == EXIT_ERROR


def test_rules_lists_every_rule() -> None:
    r = _run("rules", "--format", "json")
    assert r.exit_code == 0
    listed = {x["rule"] for x in json.loads(r.output)}
    assert listed == {r.id for r in rules()}
    assert "small_kernel_ns" in _run("rules").output


def test_rules_layer_does_not_import_click() -> None:
    for path in (Path(__file__).parents[1] / "nsight_analytics" / "rules").glob("*.py"):
        assert "import click" not in path.read_text(), path
