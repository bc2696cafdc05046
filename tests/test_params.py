"""Parameters as SQL literals: every value reads back as itself, and no pandas gets imported."""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import datetime

import duckdb
import pytest

from conftest import ROOT
from nsight_analytics import params

VALUES = [
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**70, 1.5, -0.0, 1e-300, 1e300,
    "", "plain", "it's", "''", "back\\slash \\' ", "new\nline\ttab", "ünïcode ✓ 漢字", "$rid", "?", "--",
    "'; DROP TABLE reports; --", datetime(2026, 11, 23, 18, 1, 2, 345678), ["a", "b'c"], [1, 2, 3], [],
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_literal_reads_back_as_the_value(value) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE reports (x INTEGER)")
    got = con.execute(f"SELECT {params.literal(value)}").fetchone()[0]
    assert got == value and type(got) is type(value)
    assert con.execute("SELECT count(*) FROM reports").fetchone()[0] == 0


def test_special_floats_and_refusals() -> None:
    con = duckdb.connect()
    assert math.isnan(con.execute(f"SELECT {params.literal(float('nan'))}").fetchone()[0])
    assert con.execute(f"SELECT {params.literal(float('-inf'))}").fetchone()[0] == float("-inf")
    with pytest.raises(ValueError):
        params.literal("nul\x00")
    with pytest.raises(TypeError):
        params.literal(object())


def test_execute_binds_named_parameters_and_relations_rerun() -> None:
    con = duckdb.connect()
    sql = "SELECT $a + 1 AS a, $s AS s, $n IS NULL AS n, '$a' AS text"
    assert params.execute(con, sql, {"a": 41, "s": "x'y", "n": None, "unused": 5}).fetchall() == [
        (42, "x'y", True, "$a")
    ]
    rel = params.sql(con, sql, {"a": 1, "s": "", "n": 3})
    assert rel.fetchall() == rel.fetchall() == [(2, "", False, "$a")]


def test_relations_bind_the_values_execute_binds_and_run_when_read() -> None:
    """sql() writes the literals into the statement (a relation that runs when read, not an
    EXECUTE's, which runs at once and holds its rows): the values and types of execute()'s
    PREPARE / EXECUTE, a `$name` in a string, a quoted name or a comment left as it is."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x INTEGER)")
    sql = (
        "SELECT $a + 1 AS a, $s AS s, $n IS NULL AS n, '$a' AS text, $$ $a $$ AS dollars, "
        '/* $a */ $a * 2 AS "$a" -- $a\nFROM t'
    )
    values = {"a": 41, "s": "x'y", "n": None, "unused": 5}
    rel = params.sql(con, sql, values)
    con.execute("INSERT INTO t VALUES (1)")  # after the relation was made
    want = [(42, "x'y", True, "$a", " $a ", 82)]
    assert rel.fetchall() == rel.fetchall() == want
    assert rel.columns == ["a", "s", "n", "text", "dollars", "$a"]
    bound = params.execute(con, sql, values)
    assert bound.fetchall() == want
    assert rel.types == [d[1] for d in bound.description]


def test_cli_query_ingest_and_findings_do_not_import_pandas(tmp_path) -> None:
    # DuckDB imports pandas (~0.35 s) when it binds a Python value; nsa binds literals instead,
    # and the timeline rules read plain rows (this export has copy and host-sync findings); the
    # bundled demo export is h100_nsys2025.3_pageable_h2d.sqlite, shipped in the package
    src = ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"
    runs = [
        ["ingest", str(src)],
        ["query", "gaps", "-p", "min_gap_ns=1000"],
        ["query", "kernel_summary", "--report", "1"],
        ["findings"],
        ["findings", "--report", "1", "--format", "json"],
    ]
    script = (
        "import sys\nfrom nsight_analytics.cli import main\n"
        f"for args in {runs!r}:\n"
        f"    try: main([*args, '--db', {str(tmp_path / 'w.duckdb')!r}])\n"
        "    except SystemExit as e: assert e.code in (0, None), e.code\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
