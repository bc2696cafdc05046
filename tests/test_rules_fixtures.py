"""Each pathology fixture yields its finding; the healthy control yields no warning or critical."""

from __future__ import annotations

from pathlib import Path

import pytest

import nsight_analytics as nsa
from fixtures.nsys_fixtures import SCENARIOS
from nsight_analytics.api import findings

EXPECTED = {
    "idle_gaps": "gpu-idle",
    "h2d_dominated": "copy-dominated",
    "pageable_copies": "pageable-memcpy",
    "small_kernel_storm": "small-kernel-storm",
    "no_gpu_activity": "no-gpu-activity",
}


def _findings(name: str, tmp_path: Path):
    answers = SCENARIOS[name](tmp_path / f"{name}.sqlite")
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        nsa.ingest(con, tmp_path / f"{name}.sqlite")
        return answers, findings(con)
    finally:
        con.close()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pathology_yields_its_finding(name: str, tmp_path: Path) -> None:
    _, found = _findings(name, tmp_path)
    ids = [f.rule_id for f in found]
    assert EXPECTED[name] in ids, ids
    f = next(f for f in found if f.rule_id == EXPECTED[name])
    assert f.severity in ("warning", "critical")


def test_healthy_has_no_warning(tmp_path: Path) -> None:
    _, found = _findings("healthy", tmp_path)
    assert [f for f in found if f.severity != "info"] == []


def test_idle_gaps_numbers(tmp_path: Path) -> None:
    answers, found = _findings("idle_gaps", tmp_path)
    f = next(f for f in found if f.rule_id == "gpu-idle")
    assert f.evidence["dominant_cause"] == "sync"
    sync_ns = sum(g["duration"] for g in answers["gaps"] if g["cause"] == "sync")
    assert f.est_savings_ns == pytest.approx(sync_ns, rel=1e-6)
    assert f.evidence["gaps"] == len(answers["gaps"])


def test_h2d_dominated_numbers(tmp_path: Path) -> None:
    answers, found = _findings("h2d_dominated", tmp_path)
    f = next(f for f in found if f.rule_id == "copy-dominated")
    assert found[0] is f
    assert f.evidence["dominant"]["direction"] == "HtoD"
    assert f.evidence["dominant"]["host_memory"] == "pinned"
    # judged on the steady state: batch 0 is warm-up
    assert f.evidence["steady_start_ns"] == answers["steady_start_ns"]
    assert f.evidence["dominant"]["share"] == pytest.approx(answers["steady_htod_share"], abs=0.005)
    assert f.evidence["dominant"]["bytes"] == answers["steady_htod_bytes"]


def test_storm_names_the_kernel(tmp_path: Path) -> None:
    answers, found = _findings("small_kernel_storm", tmp_path)
    f = next(f for f in found if f.rule_id == "small-kernel-storm")
    top = f.evidence["top_kernels"][0]
    assert top["short_name"] == "elementwise_add"
    assert top["avg_ns"] == pytest.approx(answers["mean_kernel_ns"], rel=1e-6)
    assert "elementwise_add" in f.message
