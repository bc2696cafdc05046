"""One runner for every rule case in tests/rules/<rule>.py: rows in, findings out, each finding
holding the saving and evidence its case computed (tests/rules/__init__.py says what a case is)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rules import CASE_FILES, CASES

import nsight_analytics as nsa
from nsight_analytics import schema
from nsight_analytics.rules import run_rules
from rows import insert

ACTIVITY_KIND = {
    "kernels": "kernel",
    "memcpy": "memcpy",
    "memset": "memset",
    "graph_executions": "graph",
    "graph_events": "graph",
    "cuda_api": "cuda_api",
    "nvtx_ranges": "nvtx",
    "osrt_api": "osrt",
    "ncu_metrics": "ncu_metrics",
    "ncu_rules": "ncu_rules",
    "gpu_metrics": "gpu_metrics",
    "memory_events": "memory",
    "power_samples": "power",
    "comm_ops": "comm",
}


def _insert(con, table: str, rows: list[dict]) -> None:
    cols = schema.BY_NAME[table].col_names
    for row in rows:
        unknown = set(row) - set(cols)
        assert not unknown, f"{table} has no columns {unknown}"
    insert(con, table, rows)


def load_case(con, rows: dict[str, list[dict]]) -> None:
    reports = {r["report_id"]: r for r in rows.get("reports", [])}
    for table, table_rows in rows.items():
        for r in table_rows:
            if "report_id" in r and r["report_id"] not in reports:
                reports[r["report_id"]] = {"report_id": r["report_id"], "format": "nsys"}
    for rid, rep in reports.items():
        # what an ingest would record: the activity kinds the case has rows of (rules run by them)
        kinds = rep.get("activity_kinds") or sorted({ACTIVITY_KIND[t] for t in rows if t in ACTIVITY_KIND})
        _insert(
            con,
            "reports",
            [
                {
                    "source_path": f"/cases/report{rid}",
                    "sha256": str(rid),
                    "has_kernels": "kernels" in rows,
                    "activity_kinds": kinds,
                    **rep,
                }
            ],
        )
    for table, table_rows in rows.items():
        if table != "reports":
            _insert(con, table, table_rows)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_rule_case(case: dict, tmp_path: Path) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, case["rows"])
        found = run_rules(con, config=case.get("config"), only=case["rules"])
    finally:
        con.close()
    got = [(f.rule_id, f.severity) for f in found]
    assert got == case["expect"], "\n".join(f"{f.rule_id} {f.severity}: {f.message}" for f in found)
    for f in found:
        assert f.title and "\n" not in f.title
        assert f.message and f.recommendation
        assert f.est_savings_ns is None or f.est_savings_ns >= 0
    for f, want in zip(found, case.get("detail", []), strict=True):
        _assert_detail(f, want)


def _assert_detail(f, want: dict) -> None:
    """A finding says what a case's `detail` computed by hand: the saving and the evidence
    numbers, and for a run rule its run, report and the ranks it names (its message names the
    run); its message says `says`, its recommendation `advises`."""
    if "run_id" in want:
        assert (f.run_id, f.report_id, f.ranks) == (want["run_id"], want["report_id"], want["ranks"]), (
            f.message
        )
        assert f"run {f.run_id} (" in f.message
    if want["est_savings_ns"] is None:
        assert f.est_savings_ns is None, f.message
    else:
        assert f.est_savings_ns == pytest.approx(want["est_savings_ns"], rel=1e-9, abs=1), f.message
    assert f.same_saving_as == want.get("same_saving_as")
    for words in want.get("says", []):
        assert words in f.message, (words, f.message)
    for words in want.get("advises", []):
        assert words in f.recommendation, (words, f.recommendation)
    for key, value in want["evidence"].items():
        assert f.evidence[key] == _approx(value), (key, f.evidence[key], value)


def _approx(value: object) -> object:
    """Numbers compared to 1e-9 relative, inside dicts and lists as well."""
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_approx(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return pytest.approx(value, rel=1e-9, abs=1e-6)
    return value


def test_every_rule_has_its_case_file() -> None:
    """Each rule of nsight_analytics/rules/checks has tests/rules/<its module>.py, and only they:
    at least one case where the rule fires and one where it runs and stays quiet."""
    from nsight_analytics.rules import rules

    checks = Path(__file__).parents[1] / "nsight_analytics" / "rules" / "checks"
    modules = sorted(p.stem for p in checks.glob("*.py") if p.stem != "__init__")
    assert CASE_FILES == modules
    assert {r.id for r in rules()} == {m.replace("_", "-") for m in modules}
    for name in modules:
        rule_id = name.replace("_", "-")
        cases = [c for c in CASES if c["file"] == name]
        fires = [c for c in cases if rule_id in {r for r, _ in c["expect"]}]
        quiet = [c for c in cases if rule_id in c["rules"] and rule_id not in {r for r, _ in c["expect"]}]
        assert fires and quiet, (name, len(fires), len(quiet))


def test_every_finding_of_a_case_is_checked() -> None:
    """A case that expects findings says, for each, its saving and evidence numbers."""
    for case in CASES:
        assert len(case.get("detail", [])) == len(case["expect"]), case["id"]
        for want in case.get("detail", []):
            assert "est_savings_ns" in want and want["evidence"], case["id"]


def test_case_ids_are_unique() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))


def test_ncu_summary_rows_weigh_as_their_invocations(tmp_path: Path) -> None:
    # `ncu --print-summary per-kernel`: a row is the Average over `invocations` launches.
    from rules.build import MEM, MS, SOL, ncu_launch

    k_sum, m_sum = ncu_launch(0, "void summarised(float*)", 1 * MS, **{SOL: 10.0, MEM: 90.0})
    k_sum["invocations"] = 3
    k_one, m_one = ncu_launch(1, "void summarised(float*)", 1 * MS, **{SOL: 10.0, MEM: 10.0})
    k_big, m_big = ncu_launch(2, "void single(float*)", 2.5 * MS, **{SOL: 10.0, MEM: 10.0})
    rows = {
        "reports": [{"report_id": 1, "format": "ncu"}],
        "ncu_kernels": [k_sum, k_one, k_big],
        "ncu_metrics": m_sum + m_one + m_big,
    }
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, rows)
        found = run_rules(con, only=["memory-bound", "latency-bound"])
    finally:
        con.close()
    by_kernel = {f.evidence["kernel"]: f for f in found}
    # memory % weighted by time: (90 * 3 ms + 10 * 1 ms) / 4 ms = 70 -> memory-bound (>= 60),
    # where two equally weighted rows would give 50 (latency-bound)
    s = by_kernel["void summarised(float*)"]
    assert (s.rule_id, s.evidence["memory_pct"]) == ("memory-bound", 70.0)
    # its stake: 3 x 1 ms + 1 ms = 4 ms in 4 launches, more than the single 2.5 ms launch
    assert (s.evidence["ncu_launches"], s.evidence["ncu_ns"]) == (4, 4 * MS)
    assert by_kernel["void single(float*)"].rule_id == "latency-bound"
    assert by_kernel["void single(float*)"].evidence["ncu_ns"] == 2.5 * MS


def test_memory_growth_above_the_device_size_gives_no_time_to_full(tmp_path: Path) -> None:
    # 1 GiB held after the warm-up, 4 MiB more per steady step, on a "512 MiB" device: the events
    # hold more than the device has, so frees went unrecorded; no negative headroom is printed.
    from rules.build import memory_per_step

    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, memory_per_step([4 << 20] * 5, total_memory=512 << 20))
        (f,) = run_rules(con, only=["memory-growth"])
    finally:
        con.close()
    above = (1 << 30) + 5 * (4 << 20) - (512 << 20)
    assert f.severity == "warning"
    assert f.evidence["headroom_bytes"] == -above
    assert "steps_to_full" not in f.evidence
    assert "above the device's" in f.message and "no time to full is given" in f.message, f.message
    assert "headroom lasts" not in f.message
