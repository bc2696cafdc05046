"""Every query golden in tests/goldens/ (a folder per case; its README says the format)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

import nsight_analytics as nsa
from nsight_analytics import render
from nsight_analytics.ingest.nvtx import fill_nvtx_kernels, fill_nvtx_totals_of_ranges
from rows import insert

GOLDENS = Path(__file__).resolve().parent / "goldens"
CASES = sorted(p.parent.name for p in GOLDENS.glob("*/case.json"))
DERIVE = {"nvtx_kernels": fill_nvtx_kernels, "nvtx_totals": fill_nvtx_totals_of_ranges}


def _cells_equal(got: str, want: str) -> bool:
    if got == want:
        return True
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_there_are_goldens() -> None:
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, tmp_path: Path) -> None:
    spec = json.loads((GOLDENS / case / "case.json").read_text())
    assert spec["why"], "a golden says why its expected rows are right"
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        for table, rows in spec["tables"].items():
            insert(con, table, rows)
        for step in spec.get("derive", []):
            for (rid,) in con.execute("SELECT DISTINCT report_id FROM nvtx_ranges").fetchall():
                DERIVE[step](con, rid)
        for run in spec["runs"]:
            got = _rows(render.to_csv(render.Result.of(nsa.query(con, spec["query"], **run["params"]))))
            want = _rows((GOLDENS / case / run["expected"]).read_text())
            assert got[0] == want[0], f"{run['expected']}: columns"
            assert len(got) == len(want), (
                f"{run['expected']} with {run['params']}: {len(got) - 1} rows, want {len(want) - 1}"
            )
            for i, (g, w) in enumerate(zip(got[1:], want[1:], strict=True), 1):
                bad = [c for c, a, b in zip(want[0], g, w, strict=True) if not _cells_equal(a, b)]
                assert not bad, f"{run['expected']} row {i} differs in {bad}: got {g}, want {w}"
    finally:
        con.close()
