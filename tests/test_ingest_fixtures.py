"""Shapes real files lack: the 2.x schema and deliberate edge cases, built by fixtures/."""

from __future__ import annotations

from pathlib import Path

import pytest

import nsight_analytics as nsa
from fixtures import nsys_fixtures as fx


@pytest.fixture
def ingested(tmp_path: Path):
    def run(scenario):
        path = tmp_path / f"{scenario.__name__}.sqlite"
        answers = scenario(path)
        con = nsa.connect(tmp_path / "w.duckdb")
        result = nsa.ingest(con, path, defer=())
        return con, result, answers

    return run


def test_old_schema_2x(ingested) -> None:
    con, _r, a = ingested(fx.old_schema_2x)
    assert con.execute("SELECT tool_version, schema_version FROM reports").fetchone() == (
        "2021.3.1.54",
        "2.7.1",
    )
    n, total = con.execute("SELECT count(*), sum(duration_ns) FROM kernels").fetchone()
    assert (n, total) == (a["kernel_count"], a["kernel_total_ns"])
    by_kind = {
        k: (n, int(b))
        for k, n, b in con.execute("SELECT direction, count(*), sum(bytes) FROM memcpy GROUP BY 1").fetchall()
    }
    assert by_kind == {
        "HtoD": (a["memcpy_by_kind"][1]["count"], a["memcpy_by_kind"][1]["bytes"]),
        "DtoH": (a["memcpy_by_kind"][2]["count"], a["memcpy_by_kind"][2]["bytes"]),
    }
    names = [n for (n,) in con.execute("SELECT name FROM nvtx_ranges ORDER BY start_ns").fetchall()]
    assert names == a["nvtx_names"]
    # 2.x lacks graphNodeId: NULL, never invented.
    assert con.execute("SELECT count(graph_node_id) FROM kernels").fetchone()[0] == 0


def test_edge_cases(ingested) -> None:
    con, _r, a = ingested(fx.edge_cases)
    kernels = con.execute("SELECT name, short_name, duration_ns FROM kernels ORDER BY start_ns").fetchall()
    assert [k[0] for k in kernels] == a["kernel_names"]
    assert [k[1] for k in kernels] == a["kernel_short_names"]
    assert sum(1 for k in kernels if k[2] == 0) == a["zero_duration_kernels"]
    assert con.execute("SELECT DISTINCT pid FROM kernels").fetchall() == [(a["pid"],)]
    # Unknown enum codes stay visible instead of being dropped or mislabelled.
    kinds = set(con.execute("SELECT direction, src_memory, dst_memory FROM memcpy").fetchall())
    assert ("code:99", "code:42", "code:42") in kinds
    assert con.execute("SELECT sync_type FROM sync_events").fetchall() == [("code:17",)]
    ranges = {n: (d, e) for n, d, e in con.execute("SELECT name, domain, end_ns FROM nvtx_ranges").fetchall()}
    assert set(ranges) == set(a["nvtx_range_names"])  # marks are not ranges
    assert ranges["never_closed"][1] is None
    assert ranges["lib_call"][0] == "MyLibrary"
    assert ranges["registered_range"][0] is None
    assert "cudaMemcpyAsync" in {n for (n,) in con.execute("SELECT name FROM cuda_api").fetchall()}


def test_no_gpu_activity_ingests_and_says_so(ingested) -> None:
    con, r, a = ingested(fx.no_gpu_activity)
    assert r.warnings and "no kernel, memcpy or memset records" in r.warnings[0]
    row = con.execute("SELECT has_kernels, has_memcpy, has_nvtx FROM reports").fetchone()
    assert row == (False, False, True)
    assert con.execute("SELECT count(*) FROM nvtx_ranges").fetchone()[0] == a["nvtx_count"]
    assert con.execute("SELECT count(*) FROM osrt_api").fetchone()[0] == a["osrt_count"]
