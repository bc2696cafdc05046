"""Rows, the result type the timeline rules read: order and NULL handling the findings rely on."""

from __future__ import annotations

import duckdb

from nsight_analytics.rules.context import Rows


def test_sum_by_largest_first_ties_by_key_null_keys_apart() -> None:
    rows = Rows(
        ["cause", "ns"], [("sync", 2), ("late", 2), (None, 5), ("unknown", 1), ("late", None), ("sync", 0)]
    )
    # pandas' groupby(...).sum().sort_values(ascending=False) order: NULL keys dropped, ties by key
    assert rows.sum_by("cause", "ns") == [("late", 2), ("sync", 2), ("unknown", 1)]
    assert rows.sum_by("cause", "ns", nulls=True) == [(None, 5), ("late", 2), ("sync", 2), ("unknown", 1)]
    assert Rows(["d", "ns"], [(1, 3), (None, 3), (0, 3)]).sum_by("d", "ns", nulls=True) == [
        (0, 3),
        (1, 3),
        (None, 3),
    ]
    assert rows.total("ns") == 10
    assert Rows(["ns"]).total("ns") == 0


def test_rows_from_duckdb_keep_column_names_and_filter() -> None:
    rel = duckdb.connect().sql("SELECT * FROM (VALUES (1, 'a', NULL), (2, 'b', 7)) AS t(report_id, name, n)")
    rows = Rows.of(rel)
    assert rows.columns == ("report_id", "name", "n") and len(rows) == 2
    assert rows[1].name == "b" and rows[0].n is None
    two = rows.where(lambda r: r.report_id == 2)
    assert [r.n for r in two] == [7] and two.columns == rows.columns
    assert not rows.where(lambda r: False)


def test_context_keeps_rows_and_dataframes_of_one_query_apart(tmp_path) -> None:
    import pandas as pd

    import nsight_analytics as nsa
    from nsight_analytics.rules.context import Context

    ctx = Context(nsa.connect(tmp_path / "w.duckdb"), {}, None)
    for rows, frame in (
        (ctx.query("kernel_summary"), ctx.query_df("kernel_summary")),
        (
            ctx.sql("k", "SELECT 1 AS report_id, $rid AS r"),
            ctx.sql_df("k", "SELECT 1 AS report_id, $rid AS r"),
        ),
    ):
        assert isinstance(rows, Rows) and isinstance(frame, pd.DataFrame)
        assert list(frame.columns) == list(rows.columns)
    assert ctx.sql("k", "SELECT 1 AS report_id, $rid AS r", report_id=1)[0].r is None
    assert ctx.reports().columns[:2] == ("report_id", "format") and not ctx.reports("nsys")
