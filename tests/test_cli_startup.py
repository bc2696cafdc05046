"""Start-up: `nsa --help`, `nsa CMD --help`, `nsa --version` and errors that need no workspace
load neither DuckDB nor the facade (issue 31: their import cost every call 0.4 s). Checked by what
a fresh interpreter imported, not by timing; benchmarks/run.py times it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT
from nsight_analytics import api, cli

HEAVY = (
    "duckdb",
    "numpy",
    "pandas",
    "pyarrow",
    "nsight_analytics.api",
    "nsight_analytics.diff",
    "nsight_analytics.ingest",
    "nsight_analytics.render.html",
)

# Runs `nsa ARGS...` in this interpreter, then writes the heavy modules it imported to OUT.
PROBE = f"""
import json, sys
out, args = sys.argv[1], sys.argv[2:]
try:
    from nsight_analytics.cli import main
    main(args, prog_name="nsa")
finally:
    with open(out, "w") as fh:
        json.dump(sorted(m for m in sys.modules if m in {HEAVY!r}), fh)
"""


def python(*args: str) -> subprocess.CompletedProcess[str]:
    # the checkout's package, whatever else the interpreter could import
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, env=env)


def test_importing_the_package_and_the_cli_loads_nothing_heavy() -> None:
    for module in ("nsight_analytics", "nsight_analytics.cli"):
        code = f"import sys, {module}; print(sorted(m for m in sys.modules if m in {HEAVY!r}))"
        res = python("-c", code)
        assert (res.returncode, res.stdout, res.stderr) == (0, "[]\n", ""), module


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], *([name, "--help"] for name in sorted(cli.main.commands))],
    ids=" ".join,
)
def test_help_and_version_load_nothing_heavy(args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "loaded.json"
    res = python("-c", PROBE, str(out), *args)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: nsa" if "--help" in args else "nsa, version ")
    assert json.loads(out.read_text()) == []


def test_a_missing_input_file_is_one_sentence_before_anything_loads(tmp_path: Path) -> None:
    out, missing = tmp_path / "loaded.json", tmp_path / "nope.sqlite"
    db = tmp_path / "w.duckdb"
    res = python("-c", PROBE, str(out), "ingest", "--db", str(db), str(missing))
    assert (res.returncode, res.stdout, res.stderr) == (
        cli.EXIT_ERROR,
        "",
        f"Error: {missing}: no such file.\n",
    )
    assert json.loads(out.read_text()) == []
    assert not db.exists()


def test_a_usage_error_loads_nothing_heavy(tmp_path: Path) -> None:
    out = tmp_path / "loaded.json"
    res = python("-c", PROBE, str(out), "diff", "1")
    assert (res.returncode, res.stderr) == (cli.EXIT_ERROR, "Error: nsa diff takes A B: got 1 argument(s).\n")
    assert json.loads(out.read_text()) == []


def test_help_lists_every_command() -> None:
    res = CliRunner().invoke(cli.main, ["--help"], catch_exceptions=False)
    assert res.exit_code == cli.EXIT_OK
    listed = res.output.split("\nCommands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == sorted(cli.main.commands)
    assert all(len(line.split()) > 1 for line in listed)  # each with its short help


def test_names_the_cli_reads_at_import_are_the_facades() -> None:
    assert cli.ENV_DB == api.ENV_DB
    assert cli.GATE_METRICS == api.diff_gate_metrics()


def test_the_package_gives_the_facade_on_first_use() -> None:
    # In a fresh interpreter: the `diff` subpackage imported first must not hide `nsa.diff`.
    code = """
import sys
import nsight_analytics as nsa
from nsight_analytics import render
assert "duckdb" not in sys.modules and render.FORMATS == ("table", "csv", "json", "markdown")
from nsight_analytics.diff import Diff
from nsight_analytics import api, connect, diff, InputError
from nsight_analytics.errors import InputError as Same
assert nsa.diff is diff is api.diff and connect is nsa.connect is api.connect and InputError is Same
assert all(getattr(nsa, name) is not None for name in nsa.__all__) and set(nsa.__all__) <= set(dir(nsa))
assert all(getattr(render, name) is not None for name in render.__all__)
print(sys.modules["nsight_analytics.diff"].Diff is Diff)
"""
    res = python("-c", code)
    assert (res.returncode, res.stdout, res.stderr) == (0, "True\n", "")


def test_ingest_and_kernel_summary_import_no_arrow_numpy_or_pandas(tmp_path: Path) -> None:
    # a real export shipped with the tests (H100, nsys 2025.3); ~0.1 s of imports per call
    export = ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite"
    out, db = tmp_path / "loaded.json", str(tmp_path / "w.duckdb")
    for args in (
        ["ingest", "-q", str(export), "--db", db],
        ["query", "kernel_summary", "--db", db, "--format", "csv", "-o", os.devnull],
    ):
        res = python("-c", PROBE, str(out), *args)
        assert res.returncode == 0, res.stderr
        assert [m for m in json.loads(out.read_text()) if m in ("numpy", "pandas", "pyarrow")] == [], args


@pytest.mark.parametrize(
    "trace",
    [
        "kineto/h100_torch2.11_train_fused_rerun.json.gz",
        "ddp/kineto/ddp_w2/rank0.json.gz",  # NCCL collectives: their names parsed in Python too
    ],
)
def test_a_kineto_ingest_imports_no_arrow_numpy_or_pandas(tmp_path: Path, trace: str) -> None:
    # DuckDB's JSON reader stages the events; rows Python works out go to DuckDB as SQL literals
    out, db = tmp_path / "loaded.json", str(tmp_path / "w.duckdb")
    res = python("-c", PROBE, str(out), "ingest", "-q", str(ROOT / "tests" / "data" / trace), "--db", db)
    assert res.returncode == 0, res.stderr
    assert [m for m in json.loads(out.read_text()) if m in ("numpy", "pandas", "pyarrow")] == []
    assert "duckdb" in json.loads(out.read_text())  # the probe saw the ingest's imports


def test_a_query_without_rules_or_parameters_imports_no_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the rules package (~6 ms of CPU) is for findings, rule folders, settings files and -p pairs
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # no user's settings file
    export = ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite"
    db = str(tmp_path / "w.duckdb")
    probe = PROBE.replace(repr(HEAVY), repr(("duckdb", "nsight_analytics.rules")))
    for args in (
        ["ingest", "-q", str(export), "--db", db],
        ["query", "kernel_summary", "--db", db, "--format", "csv", "-o", os.devnull],
        ["query", "gaps", "-p", "min_gap_ns=100000", "--db", db, "--format", "csv", "-o", os.devnull],
    ):
        out = tmp_path / "loaded.json"
        res = python("-c", probe, str(out), *args)
        assert res.returncode == 0, res.stderr
        expected = ["duckdb", "nsight_analytics.rules"] if "-p" in args else ["duckdb"]
        assert json.loads(out.read_text()) == expected, args
