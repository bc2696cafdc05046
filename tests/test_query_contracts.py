"""Every library query's declared `-- col` lines equal its real result columns and DuckDB types."""

from __future__ import annotations

from pathlib import Path

import pytest

import nsight_analytics as nsa
from nsight_analytics import queries
from rows import required_params

QUERIES = sorted(queries.library())


def _declared(name: str) -> list[tuple[str, str]]:
    return [(c.name, c.type.upper()) for c in queries.get(name).columns]


def _actual(rel) -> list[tuple[str, str]]:
    return [(c, str(t).upper()) for c, t in zip(rel.columns, rel.types, strict=True)]


def test_library_has_the_nsys_queries() -> None:
    expected = {
        "kernel_summary", "utilization", "gaps", "stream_gaps", "memcpy_summary", "small_kernels",
        "small_kernel_storms", "nvtx_summary", "sync_calls",
    }  # fmt: skip
    assert expected <= set(QUERIES)
    for name in expected:
        assert queries.get(name).family == "nsys"


def test_every_query_becomes_a_macro(tmp_path: Path) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    assert queries.install_macros(con) == {}
    con.close()


@pytest.mark.parametrize("name", QUERIES)
def test_contract_shape(name: str) -> None:
    q = queries.get(name)
    assert q.doc and q.columns
    assert len({c.name for c in q.columns}) == len(q.columns), "column names are unique"
    if q.family != "nsys":
        return  # ncu queries may pair two reports (stall_time: nsys_report_id, ncu_report_id)
    assert [p.name for p in q.params][:1] == ["report_id"], "report_id is the first parameter"
    # filters with ($report_id IS NULL OR x.report_id = $report_id), directly or through a macro
    assert "$report_id IS NULL OR" in q.sql or "($report_id)" in q.sql


@pytest.mark.parametrize("name", QUERIES)
def test_columns_on_empty_workspace(tmp_path: Path, name: str) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    rel = nsa.query(con, name, **required_params(name))
    assert _actual(rel) == _declared(name)
    assert rel.fetchall() == []
    # the same query as a table macro, as notebook users call it
    assert con.sql(f"SELECT * FROM {name}()").columns == [c for c, _ in _declared(name)]
    con.close()


@pytest.mark.parametrize("name", QUERIES)
def test_columns_on_real_workspace(nsys_any_workspace, name: str) -> None:
    con, _ = nsys_any_workspace
    rel = nsa.query(con, name, **required_params(name))
    assert _actual(rel) == _declared(name)
    rows = rel.fetchall()
    q = queries.get(name)
    needs_input = any(p.required for p in q.params)  # gap_calls: no intervals, no rows
    if q.family == "nsys" and name not in {"small_kernel_storms"} and not needs_input:
        assert rows, f"{name} returns rows on the real exports"


@pytest.mark.parametrize("name", QUERIES)
def test_declared_reads_match_the_sql(name: str) -> None:
    """The `-- reads` line is what gets materialised before the query runs; it must name exactly
    the canonical tables the SQL reads after FROM/JOIN, its own and its shared macros'."""
    q = queries.get(name)
    assert q.tables() == queries.tables_read(q.sql), f"fix the `-- reads` line of {q.path}"


def test_a_contract_without_reads_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.sql"
    path.write_text("-- Kernels.\n-- col report_id INTEGER: report.\nSELECT report_id FROM kernel_rows\n")
    with pytest.raises(nsa.QueryError, match=r"q\.sql: the contract needs a `-- reads"):
        queries.parse(path)
    path.write_text("-- Kernels.\n-- reads kernel_rowz\n-- col report_id INTEGER: report.\nSELECT 1\n")
    with pytest.raises(nsa.QueryError, match="kernel_rowz, not canonical tables"):
        queries.parse(path)
