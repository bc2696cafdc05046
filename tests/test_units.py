"""Numbers in words come from one module, nsight_analytics/units.py: finding sentences (ASCII
`us`, `n/a`), text tables (`µs`, `-`) and the report page (`µs`, `kB`, `–`) differ only in the
arguments they pass."""

from __future__ import annotations

import ast
import math

import pytest

from conftest import ROOT
from nsight_analytics import units


@pytest.mark.parametrize(
    ("ns", "sentence", "table", "page"),
    [
        (None, "n/a", "-", "–"),
        (999, "999 ns", "999 ns", "999 ns"),
        (1_700, "1.7 us", "1.7 µs", "1.7 µs"),
        (45_200_000, "45.2 ms", "45.2 ms", "45.2 ms"),
        (1_510_000_000, "1.51 s", "1.51 s", "1.51 s"),
        (1_234 * 10**9, "1,234 s", "1,234 s", "1,234 s"),  # never 1.23e+03 s
        (-2_500_000, "-2.5 ms", "-2.5 ms", "-2.5 ms"),
    ],
)
def test_durations_in_each_style(ns: float | None, sentence: str, table: str, page: str) -> None:
    assert (units.dur(ns), units.table_dur(ns), units.page_dur(ns)) == (sentence, table, page)


def test_signed_durations() -> None:
    assert [units.signed(x) for x in (1_200_000, -450_000, 0, None)] == ["+1.2 ms", "-450 us", "0 ns", "n/a"]
    assert [units.table_signed(x) for x in (1_200_000, -450_000, 0.3, None)] == [
        "+1.2 ms",
        "-450 µs",
        "0",
        "-",
    ]


def test_sizes_and_rates() -> None:
    assert [units.size(n) for n in (512, 3_400, 3.4e9, 2e12, None)] == [
        "512 B",
        "3.4 KB",
        "3.4 GB",
        "2 TB",
        "n/a",
    ]
    assert [units.page_size(n) for n in (3_400, None)] == ["3.4 kB", "–"]
    assert [units.rate(g) for g in (50.0, 1510.4, None)] == ["50 GB/s", "1,510 GB/s", "-"]
    assert units.bw(4.5e9, 90e6) == "50 GB/s"  # bytes per ns = GB/s
    assert units.bw(0, 5) == "n/a"


def test_percentages() -> None:
    assert [units.pct(f) for f in (0.123, 0.045, 0.0031, None)] == ["12%", "4.5%", "0.31%", "n/a"]
    assert (units.pct_of(1, 8), units.pct_of(1, 0)) == ("12.5%", "-")
    assert (units.percent(42.25), units.percent(42.25, space=False), units.percent(None)) == (
        "42.2 %",
        "42.2%",
        "–",
    )
    assert (units.page_percent(7.06), units.whole_pct(0.456), units.whole_pct(None)) == ("7.1 %", "46%", "-")
    assert (units.signed_pct(0.1234), units.signed_pct(-0.004)) == ("+12.3%", "-0.4%")


def test_counts_and_measures() -> None:
    assert (units.count(1024.7), units.plural(1, "gap"), units.plural(1024, "kernel")) == (
        "1,024",
        "1 gap",
        "1,024 kernels",
    )
    assert [units.num(v) for v in (17_000_000, 12_345.6, 3.14159, 0.0001234, 0.0, None)] == [
        "17,000,000", "12,346", "3.142", "0.000123", "0", "–"]  # fmt: skip
    assert (units.decimal(1234.56), units.decimal(None), units.decimal(None, none="n/a")) == (
        "1,234.6",
        "-",
        "n/a",
    )
    assert units.clip("abcdefghij", 8) == "abcde..."
    assert units.timestamp(11_912_345_678) == "11.912 s"


def test_metric_values_never_in_exponent_notation() -> None:
    pd = pytest.importorskip("pandas")
    assert units.metric(1.98e15, "FLOP/s") == "1.98 PFLOP/s"
    assert units.metric(2.95e12, "byte/s") == "2.95 TB/s"
    assert [units.metric(v, "B/s", none="n/a") for v in (None, math.nan, pd.NA)] == ["n/a"] * 3
    assert units.unit_name("hz") == "Hz"


def test_no_other_module_formats_numbers_for_people() -> None:
    """The render, report, diff and rules layers call units.py; none keeps a unit ladder of its
    own (`("ms", 1e6)`) or a helper named like the ones units.py replaced."""
    replaced = {
        "fmt_ns",
        "fmt_at",
        "fmt_bytes",
        "fmt_unit",
        "fmt_pct",
        "fmt_num",
        "rate",
        "dur",
        "size",
        "pct",
    }
    for path in sorted((ROOT / "nsight_analytics").rglob("*.py")):
        if path.name == "units.py" or "ingest" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        assert '("ms", 1e6)' not in text, path
        defined = {n.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)}
        assert not defined & replaced, (path, defined & replaced)
