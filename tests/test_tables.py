"""Tables for people (issue 17): numbers in the unit their query declares and never broken over
lines, kernel names shortened unless --wide; csv and json keep exact base units."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from nsight_analytics import queries
from nsight_analytics.cli import EXIT_OK, demo_input, main
from nsight_analytics.render import Result, render
from nsight_analytics.render.rows import short_kernel_name

LONG = (
    "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>>(int, T2, T3)"
)
# The GPU span, computed here from the canonical tables: first start to last end of any activity.
SPAN = (
    "SELECT max(e) - min(s) FROM (SELECT start_ns s, end_ns e FROM kernels"
    " UNION ALL SELECT start_ns, end_ns FROM memcpy UNION ALL SELECT start_ns, end_ns FROM memset)"
)


def run(*args: str):
    return CliRunner(env={"COLUMNS": "80"}).invoke(main, list(args))


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tables") / "w.duckdb"
    res = run("ingest", "--db", str(path), "--full", str(demo_input()))
    assert res.exit_code == EXIT_OK, res.output
    return path


def truth(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def body_rows(table: str) -> list[list[str]]:
    """Each table row's cells, the lines of a row that wraps joined per cell with a space."""
    rows: list[list[str]] = []
    for line in table.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            if cells[0]:  # a row starts where its first (numeric, unwrapped) cell is set
                rows.append(cells)
            else:
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    return rows


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (LONG, "vectorized_elementwise_kernel"),
        ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_128x1_nn_align8>(T1::Params)",
         "Kernel2"),
        ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n", "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n"),
        ("memcpy HtoD", "memcpy HtoD"),
        ("aten::mm", "aten::mm"),  # no signature: an NVTX range or API name stays as it is
        ("[lambda() (instance 1)]", "[lambda() (instance 1)]"),
    ],
)  # fmt: skip
def test_short_kernel_name(name: str, short: str) -> None:
    assert short_kernel_name(name) == short


def test_units_come_from_the_contracts() -> None:
    assert queries.get("utilization").units()["span_ns"] == "ns"
    memcpy = queries.get("memcpy_summary").units()
    assert (memcpy["bytes"], memcpy["gb_per_s"], memcpy["span_pct"]) == ("byte", "GB/s", "%")
    assert "copies" not in memcpy


def test_table_cells_in_human_units() -> None:
    units = {"t_ns": "ns", "b": "byte", "bw": "GB/s", "p": "%"}
    res = Result(
        ["t_ns", "b", "bw", "p", "n", "name"],
        [True, True, True, True, True, False],
        [(1_510_000_000, 1_880_000_000, 1.347, 12.345, 1234567, LONG), (1700, None, None, None, None, "x")],
        units=units,
    )
    rows = body_rows(render(res, "table"))
    assert rows == [
        ["1.51 s", "1.88 GB", "1.35 GB/s", "12.3%", "1,234,567", "vectorized_elementwise_kernel"],
        ["1.7 µs", "", "", "", "", "x"],
    ]
    assert LONG in render(res, "table", wide=True).replace("\n", "")
    # machine formats keep exact base units and full names
    assert render(res, "csv").splitlines()[1] == f'1510000000,1880000000,1.347,12.345,1234567,"{LONG}"'
    assert json.loads(render(res, "json"))[0]["t_ns"] == 1_510_000_000


def test_utilization_at_80_columns(db: Path) -> None:
    res = run("query", "utilization", "--db", str(db))
    assert res.exit_code == EXIT_OK, res.output
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    ((span,),) = truth(db, SPAN)
    (row,) = body_rows(res.stdout)
    columns = [c.name for c in queries.get("utilization").columns]
    cell = dict(zip(columns, row, strict=True))
    assert cell["span_ns"] == "2.01 s" == f"{span / 1e9:.3g} s"
    assert cell["kernel_busy_ns"] == "69 µs"
    assert cell["idle_ns"] == "219 ms"
    assert "2,010,563,957" not in res.stdout


def test_utilization_csv_keeps_exact_integers(db: Path) -> None:
    res = run("query", "utilization", "--db", str(db), "--format", "csv")
    (row,) = list(csv.DictReader(io.StringIO(res.stdout)))
    ((span,),) = truth(db, SPAN)
    assert row["span_ns"] == str(span) == "2010563957"


def header_names(text: str) -> list[str]:
    """A drawn table's column names, each header's lines joined; asserts that no name breaks
    inside a word (each line of a header but its last ends with `_`)."""
    lines = [line.strip("┃").split("┃") for line in text.splitlines() if line.startswith("┃")]
    names = []
    for col in zip(*lines, strict=True):
        parts = [p.strip() for p in col if p.strip()]
        assert all(p.endswith("_") for p in parts[:-1]), parts
        names.append("".join(parts))
    return names


def test_gaps_fit_the_terminal_numbers_whole_and_names_short(db: Path) -> None:
    """gaps has 15 columns: at 80 columns the table keeps the first that fit (the ids the same
    in every row said once above it), one table row per gap, every number whole, kernel names
    short; a line names the columns left out."""
    res = run("query", "gaps", "--db", str(db))
    assert res.exit_code == EXIT_OK, res.output
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    exact = list(csv.DictReader(io.StringIO(run("query", "gaps", "--db", str(db), "--format", "csv").stdout)))
    rows = body_rows(res.stdout)
    assert len(rows) == len(exact) > 1
    assert len(lines) < 5 * len(exact)  # not a block of 16 lines per gap
    columns = [c.name for c in queries.get("gaps").columns]
    same = [
        c for c in ("report_id", "device_id", "pid", "launch_global_tid") if len({w[c] for w in exact}) == 1
    ]
    said = ", ".join(f"{c} {exact[0][c]}" for c in same)  # ids as they are: no thousands separators
    assert f"gaps ({said} in every row)" in " ".join(line.strip() for line in lines[:2])
    shown = header_names(res.stdout)
    rest = [c for c in columns if c not in same]
    assert shown == rest[: len(shown)] and {"gap_ns", "after"} <= set(shown)
    left = rest[len(shown) :]
    assert " ".join(lines[-2:]) == (
        f"{len(left)} more columns than fit in 80 columns: {', '.join(left)}; all of them: --wide, or --format csv."
    )
    for row, want in zip(rows, exact, strict=True):
        cell = dict(zip(shown, row, strict=True))
        gap = int(want["gap_ns"])
        assert re.fullmatch(r"\d+(\.\d+)? (s|ms|µs|ns)", cell["gap_ns"]), cell
        scale = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1}[cell["gap_ns"].split()[1]]
        assert float(cell["gap_ns"].split()[0]) == pytest.approx(gap / scale, rel=5e-3)
        assert cell["after"].replace(" ", "").startswith(short_kernel_name(want["after"]))
    # short names stay distinct: one short name per full name
    pairs = {(w["after"], r[shown.index("after")].replace(" ", "")) for w, r in zip(exact, rows, strict=True)}
    assert len({full for full, _ in pairs}) == len(pairs) == len({short for _, short in pairs})
    full = {w["after"] for w in exact}
    assert any("<" in name for name in full)
    # --wide: every column, every full name, ids without separators
    wide = CliRunner(env={"COLUMNS": "2000"}).invoke(main, ["query", "gaps", "--db", str(db), "--wide"])
    assert all(name in wide.stdout for name in full)
    assert header_names(wide.stdout) == columns
    tids = [r[columns.index("launch_global_tid")] for r in body_rows(wide.stdout)]
    assert tids == [w["launch_global_tid"] for w in exact]


def test_sql_takes_wide(tmp_path: Path) -> None:
    sql = f"SELECT '{LONG}' AS name, 1 AS n"
    db = str(tmp_path / "w.duckdb")
    short = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["sql", "--db", db, sql])
    wide = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["sql", "--db", db, "--wide", sql])
    assert "vectorized_elementwise_kernel" in short.stdout and "at::native" not in short.stdout
    assert LONG in wide.stdout
