"""Output formats straight from DuckDB results: types, NULLs, lists, alignment."""

from __future__ import annotations

import csv
import io
import json

import duckdb

from nsight_analytics import render as out

SQL = """
SELECT * FROM (VALUES
    (1, 2.5::DOUBLE, 1.25::DECIMAL(9, 2), 'a,b', ['x', 'y'], {'k': 1}, TIMESTAMP '2026-11-23 12:00:00', true),
    (NULL, 'nan'::DOUBLE, NULL, NULL, NULL, NULL, NULL, NULL)
) AS t(n, d, dec, s, l, st, ts, b)
"""


def _res() -> out.Result:
    return out.Result.of(duckdb.connect().sql(SQL))


def test_json_rows_are_plain_values() -> None:
    assert json.loads(out.render(_res(), "json")) == [
        {
            "n": 1,
            "d": 2.5,
            "dec": 1.25,
            "s": "a,b",
            "l": ["x", "y"],
            "st": {"k": 1},
            "ts": "2026-11-23T12:00:00",
            "b": True,
        },
        {"n": None, "d": None, "dec": None, "s": None, "l": None, "st": None, "ts": None, "b": None},
    ]


def test_csv_keeps_one_value_per_cell() -> None:
    rows = list(csv.reader(io.StringIO(out.render(_res(), "csv"))))
    assert rows == [
        ["n", "d", "dec", "s", "l", "st", "ts", "b"],
        ["1", "2.5", "1.25", "a,b", "x;y", '{"k": 1}', "2026-11-23T12:00:00", "True"],
        ["", "", "", "", "", "", "", ""],
    ]


def test_table_aligns_numbers_right_and_names_left() -> None:
    res = out.Result.of(
        duckdb.connect().sql("SELECT * FROM (VALUES (1234567, 'k'), (5, 'longer')) AS t(n, name)")
    )
    lines = out.to_table(res, width=60).splitlines()
    big = next(line for line in lines if "1,234,567" in line)
    five = next(line for line in lines if "longer" in line)
    assert five.index("5") == big.index("1,234,567") + len("1,234,567") - 1  # right-aligned number
    assert five.index("longer") == big.index("k")  # left-aligned text
    assert out.to_table(out.Result.of(None)).endswith("(no rows)\n")


def test_records_infer_numeric_columns() -> None:
    res = out.Result.of_records([{"a": 1, "b": "x"}, {"a": None, "b": "y", "c": 2.0}])
    assert res.columns == ["a", "b", "c"] and res.numeric == [True, False, True]
    assert res.rows == [(1, "x", None), (None, "y", 2.0)]


def _wide_result() -> out.Result:
    name = (
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>>(int, T2, T3)"
    )
    cols = ", ".join(f"{i * 1_234_567 + 123_456} AS gap_{i}_ns" for i in range(12))
    res = out.Result.of(duckdb.connect().sql(f"SELECT '{name}' AS name, {cols} FROM range(2)"))
    return out.Result(res.columns, res.numeric, res.rows, res.types, {f"gap_{i}_ns": "ns" for i in range(12)})


def table_headers(text: str) -> list[str]:
    """A drawn table's column names, each header's lines joined; asserts no name is broken
    inside a word (every line of a header but its last ends with `_`)."""
    lines = [line.strip("┃").split("┃") for line in text.splitlines() if line.startswith("┃")]
    names = []
    for col in zip(*lines, strict=True):
        parts = [p.strip() for p in col if p.strip()]
        assert all(p.endswith("_") for p in parts[:-1]), parts
        names.append("".join(parts))
    return names


def test_columns_that_do_not_fit_are_left_out_and_named() -> None:
    res = _wide_result()
    text = out.to_table(res, "gaps", width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    shown = table_headers(text)
    assert shown == res.columns[: len(shown)] and 2 <= len(shown) < len(res.columns)  # the first ones
    left = res.columns[len(shown) :]
    assert " ".join(lines[-2:]) == (
        f"{len(left)} more columns than fit in 80 columns: {', '.join(left)}; all of them: --wide, or "
        "--format csv."
    )
    assert "vectorized_eleme" in text and "at::native" not in text


def test_wide_rows_too_wide_for_the_terminal_become_one_block_per_row() -> None:
    res = _wide_result()
    name = res.rows[0][0]
    text = out.to_table(res, "gaps", width=80, wide=True)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].startswith("-[ gaps: row 1 of 2 ]")
    assert "gap_11_ns  13.7 ms" in lines  # human units, label then value
    assert sum(line.startswith("-[ gaps: row") for line in lines) == 2
    # wide enough: a table again, with the full name
    assert out.to_table(res, "gaps", width=400, wide=True).splitlines()[1].startswith("┏")
    assert name in out.to_table(res, "gaps", width=400, wide=True)
    # a long value wraps under the value column, whole
    wrapped = out.to_table(res, "gaps", width=60, wide=True).splitlines()
    assert max(len(line) for line in wrapped) <= 60
    value_lines = [wrapped[1]] + [line for line in wrapped[2:5] if line.startswith(" " * 11)]
    assert wrapped[1].startswith("name       void")
    assert "".join(line[11:] for line in value_lines) == name
