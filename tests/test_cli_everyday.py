"""The everyday CLI (issue 17): honest exit codes, nothing changed on an error, the formats users
have, one set of output conventions. Run as a user would: an 80-column terminal, or a pipe."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from conftest import ROOT
from nsight_analytics import queries, schema
from nsight_analytics.cli import EXIT_ERROR, EXIT_OK, main
from nsight_analytics.render import schema_page as render_schema_page
from nsight_analytics.rules import rules
from nsight_analytics.rules.config import ConfigError, load_config

# Real captures that ship in the repository, so these tests need no ../shared: the bundled demo
# export (nsight_analytics/data/README.md) and a capture committed with the tests (tests/data/README.md).
DEMO = ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"
IDLE_GAPS = ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite"


def demo_kernels() -> int:
    """The demo export's kernels, counted with sqlite3."""
    con = sqlite3.connect(DEMO)
    try:
        return int(con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0])
    finally:
        con.close()


def run(*args: str, **env: str):
    """`nsa ARGS` at 80 columns, stdout and stderr kept apart."""
    return CliRunner(env={"COLUMNS": "80", **env}).invoke(main, list(args))


def assert_user_error(res, message: str) -> None:
    """Exit 2, nothing on stdout, exactly one sentence on stderr, no traceback."""
    assert res.exit_code == EXIT_ERROR, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.stdout == ""
    assert res.stderr == f"Error: {message}\n"


def state(db: Path) -> list[tuple]:
    """What an error must leave alone: the reports, what they still defer, and the row counts."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT report_id, content_hash, deferred_steps FROM reports ORDER BY 1"
        ).fetchall()
        counts = [con.execute(f'SELECT count(*) FROM "{t.name}"').fetchone()[0] for t in schema.STORED]
        return [*rows, tuple(counts)]
    finally:
        con.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A workspace holding the demo export as report 1, its CUDA API calls still deferred."""
    path = tmp_path / "w.duckdb"
    res = run("ingest", "--db", str(path), str(DEMO))
    assert res.exit_code == EXIT_OK, res.output
    assert "cuda_api" in state(path)[0][2]
    return path


# --- exit codes mean one thing ---------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["query", "gaps"],
        ["query", "--list"],
        ["sql", "SELECT 1 AS x"],
        ["reports"],
        ["findings"],
        ["rules"],
        ["schema"],
    ],
    ids=lambda a: " ".join(a),
)
def test_output_into_a_missing_folder_is_a_user_error(args: list[str], db: Path, tmp_path: Path) -> None:
    target = tmp_path / "no_such_folder" / "out.csv"
    before = state(db)
    extra = ["--db", str(db)] if args[0] not in ("rules", "schema") else []
    res = run(*args, *extra, "-o", str(target))
    assert_user_error(
        res,
        f"--output {target}: folder {target.parent} does not exist; create it first or choose another path.",
    )
    assert state(db) == before  # checked before the query could copy deferred tables
    assert not target.parent.exists()


def test_output_onto_a_folder_is_a_user_error(tmp_path: Path) -> None:
    assert_user_error(
        run("schema", "-o", str(tmp_path)), f"--output {tmp_path} is a folder; give a file name in it."
    )


def test_output_that_cannot_be_written_is_a_user_error() -> None:
    if not Path("/proc/self").is_dir():
        pytest.skip("needs /proc, where not even root can create a file")
    res = run("schema", "-o", "/proc/nsa-out.csv")
    assert res.exit_code == EXIT_ERROR and res.stdout == ""
    assert re.fullmatch(
        r"Error: cannot write /proc/nsa-out\.csv \([^)]+\); nothing was written; choose another --output "
        r"path\.\n",
        res.stderr,
    )


def test_output_to_a_file_writes_only_data(db: Path, tmp_path: Path) -> None:
    target = tmp_path / "kernels.csv"
    res = run(
        "sql", "--db", str(db), "SELECT count(*) AS n FROM kernels", "--format", "csv", "-o", str(target)
    )
    assert (res.exit_code, res.stdout, res.stderr) == (EXIT_OK, "", "")
    assert target.read_text() == f"n\n{demo_kernels()}\n"


@pytest.mark.parametrize("command", ["query gaps", "query kernel_summary", "findings"])
def test_unknown_report_exits_2_and_copies_nothing(command: str, db: Path) -> None:
    before = state(db)
    res = run(*command.split(), "--db", str(db), "--report", "99")
    assert_user_error(res, "no report 99 in the workspace; `nsa reports` lists them.")
    assert state(db) == before


def test_unknown_report_given_as_a_parameter(db: Path) -> None:
    res = run("query", "stall_time", "--db", str(db), "-p", "ncu_report_id=7")
    assert_user_error(res, "no report 7 in the workspace; `nsa reports` lists them.")


def test_report_option_on_a_query_without_one(db: Path) -> None:
    res = run("query", "stall_time", "--db", str(db), "--report", "1")
    assert_user_error(
        res, "query stall_time takes no --report; set its parameters with -p: nsys_report_id, ncu_report_id."
    )


def test_known_report_still_answers(db: Path) -> None:
    res = run("query", "kernel_summary", "--db", str(db), "--report", "1", "--format", "json")
    assert res.exit_code == EXIT_OK, res.output
    assert {row["report_id"] for row in json.loads(res.stdout)} == {1}


@pytest.mark.parametrize(
    ("query", "param", "message"),
    [
        ("small_kernels", "top_n=-1",
         "parameter top_n must be at least 1 (how many names top_names lists), got -1."),
        ("stalls", "top_n=0",
         "parameter top_n must be at least 1 (keep only the top N reasons of each launch; all when NULL), got 0."),
        ("gaps", "min_gap_ns=-5", "parameter min_gap_ns must be 0 or more (shortest gap reported (ns)), got -5."),
        ("small_kernel_storms", "max_busy_pct=nan",
         ("parameter max_busy_pct must be 0 or more (storms busier than this share of their window are dropped "
         "(%)), got nan.")),
        ("gaps", "min_gap_ns=abc", "parameter min_gap_ns wants an integer, got 'abc'."),
        ("gaps", "min_gap_ns=1.5", "parameter min_gap_ns wants an integer, got '1.5'."),
        ("gaps", "min_gap_ns=1e400", "parameter min_gap_ns wants an integer, got '1e400'."),
        ("speed_of_light", "busy_pct=lots", "parameter busy_pct wants a number, got 'lots'."),
        ("gaps", "bogus=1", "query gaps has no parameter bogus; its parameters: report_id, min_gap_ns."),
        ("gaps", "min_gap_ns", "-p 'min_gap_ns' should look like name=value, e.g. min_gap_ns=100000."),
    ],
)  # fmt: skip
def test_rejected_parameter_exits_2_and_copies_nothing(
    query: str, param: str, message: str, db: Path
) -> None:
    """gaps reads the deferred CUDA API calls: a rejected value must not copy them first."""
    before = state(db)
    assert_user_error(run("query", query, "--db", str(db), "-p", param), message)
    assert state(db) == before


def test_python_api_checks_parameters_before_copying(db: Path) -> None:
    """The library does what the CLI does: `nsa.query` on a writable connection binds first."""
    import nsight_analytics as nsa

    before = state(db)
    con = nsa.connect(db, load_deferred=False)
    try:
        with pytest.raises(nsa.QueryError, match=r"^parameter min_gap_ns must be 0 or more"):
            nsa.query(con, "gaps", min_gap_ns=-1)
    finally:
        con.close()
    assert state(db) == before


def test_accepted_parameters(db: Path) -> None:
    res = run(
        "query", "gaps", "--db", str(db), "-p", "min_gap_ns=1e5", "-p", "report_id=1", "--format", "csv"
    )
    assert res.exit_code == EXIT_OK, res.output
    assert res.stdout.startswith("report_id,device_id,")
    assert "cuda_api" not in state(db)[0][2]  # now it was needed, so it was copied


def test_every_library_default_satisfies_the_parameter_conventions() -> None:
    """The top_/min_/max_/_ns/_pct conventions must never reject a query's own default."""
    checked = 0
    for q in queries.library().values():
        for p in q.params:
            p.default_value()  # raises if the default breaks the convention
            checked += p.lowest() is not None
    assert checked >= 10


# --- ingest: every file it can, one line each -----------------------------------------------


def test_ingest_good_bad_good(tmp_path: Path) -> None:
    good = DEMO
    good2 = IDLE_GAPS
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not a profile\n")
    db = tmp_path / "w.duckdb"
    res = run("ingest", "--db", str(db), str(good), str(bad), str(good2))
    assert res.exit_code == EXIT_ERROR
    lines = res.stdout.splitlines()
    assert [line.split(":")[0:2] for line in lines] == [
        [DEMO.name, " ingested as report 1 (nsys)"],
        [IDLE_GAPS.name, " ingested as report 2 (nsys)"],
    ]
    assert res.stderr == (
        f"bad.sqlite: failed: {bad} is not an SQLite file nor an ncu CSV; for nsys, export it with "
        "`nsys export --type sqlite report.nsys-rep`; for ncu, "
        "`ncu --import report.ncu-rep --csv --page details > report.csv`.\n"
        "Error: 1 of 3 files not ingested (bad.sqlite); fix them and run `nsa ingest` on them again.\n"
    )
    assert [r[0] for r in state(db)[:-1]] == [1, 2]
    # the good ones are in, so a second run only reports them as already there
    res = run("ingest", "--db", str(db), str(good), str(good2))
    assert res.exit_code == EXIT_OK and res.stdout.count("already in the workspace") == 2


def test_ingest_all_bad(tmp_path: Path) -> None:
    empty, missing = tmp_path / "empty.sqlite", tmp_path / "missing.sqlite"
    empty.write_bytes(b"")
    res = run("ingest", "--db", str(tmp_path / "w.duckdb"), str(empty), str(missing))
    assert res.exit_code == EXIT_ERROR and res.stdout == ""
    assert res.stderr == (
        f"empty.sqlite: failed: {empty} is empty (0 bytes); copy or export it again.\n"
        f"missing.sqlite: failed: {missing}: no such file.\n"
        "Error: 2 of 2 files not ingested (empty.sqlite, missing.sqlite); fix them and run `nsa ingest` "
        "on them again.\n"
    )


# --- nsa sql: the canonical tables are nsa's --------------------------------------------------


REFUSAL = (
    "{verb} on {table} is refused: nsa maintains {table}, and changing it by hand leaves the workspace "
    "inconsistent; write to a table of your own (CREATE TABLE mine AS ...), or pass --allow-writes if you mean it."
)


@pytest.mark.parametrize(
    ("statement", "verb", "table"),
    [
        ("DELETE FROM reports", "DELETE", "reports"),
        ('delete from main."Reports" where report_id = 1', "DELETE", "reports"),
        ("UPDATE kernel_rows SET start_ns = 0", "UPDATE", "kernel_rows"),
        ("WITH x AS (SELECT 1) UPDATE memcpy SET bytes = 0", "UPDATE", "memcpy"),
        ("INSERT INTO gpus SELECT * FROM gpus", "INSERT", "gpus"),
        ("DROP TABLE IF EXISTS processes", "DROP", "processes"),
        ("ALTER TABLE reports ADD COLUMN note VARCHAR", "ALTER", "reports"),
        ("CREATE OR REPLACE VIEW kernels AS SELECT 1 AS x", "CREATE", "kernels"),
        ("TRUNCATE sync_events", "TRUNCATE", "sync_events"),
        ("COPY memset FROM 'rows.csv'", "COPY", "memset"),
        ("SELECT 1; DELETE FROM kernel_names", "DELETE", "kernel_names"),
        ("DROP SCHEMA main CASCADE", "DROP SCHEMA", "main"),
    ],
)
def test_sql_refuses_writes_to_canonical_tables(statement: str, verb: str, table: str, db: Path) -> None:
    before = state(db)
    assert_user_error(run("sql", "--db", str(db), statement), REFUSAL.format(verb=verb, table=table))
    assert state(db) == before


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE mine AS SELECT report_id, format FROM reports",
        "SELECT 'DELETE FROM reports' AS text",
        "SELECT count(*) AS n FROM kernels -- DELETE FROM reports",
        "/* DROP TABLE reports */ SELECT 1 AS x",
        "COPY (SELECT * FROM reports) TO '{tmp}/reports.csv'",
    ],
)
def test_sql_runs_reads_and_writes_to_own_tables(statement: str, db: Path, tmp_path: Path) -> None:
    before = state(db)
    res = run("sql", "--db", str(db), statement.format(tmp=tmp_path))
    assert res.exit_code == EXIT_OK, res.output
    assert state(db)[0][:2] == before[0][:2]


def test_sql_own_table_round_trip(db: Path) -> None:
    assert run("sql", "--db", str(db), "CREATE TABLE mine (n INTEGER)").exit_code == EXIT_OK
    assert run("sql", "--db", str(db), "INSERT INTO mine SELECT count(*) FROM kernels").exit_code == EXIT_OK
    res = run("sql", "--db", str(db), "SELECT n FROM mine", "--format", "csv")
    assert (res.exit_code, res.stdout) == (EXIT_OK, f"n\n{demo_kernels()}\n")


def test_sql_allow_writes(db: Path) -> None:
    res = run("sql", "--db", str(db), "--allow-writes", "DELETE FROM ncu_rules WHERE report_id = 99")
    assert res.exit_code == EXIT_OK, res.output
    assert "--allow-writes" in run("sql", "--help").stdout


def test_sql_parse_error_is_a_user_error(db: Path) -> None:
    res = run("sql", "--db", str(db), "SELEC 1")
    assert res.exit_code == EXIT_ERROR and res.stdout == ""
    assert (
        res.stderr.startswith("Error: Parser Error: syntax error at or near") and res.stderr.count("\n") == 1
    )


# --- the formats users have --------------------------------------------------------------------


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _gz(path: Path, data: bytes) -> Path:
    return _write(path, gzip.compress(data))


KINETO = b'{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "traceEvents": []\n}\n'
NO_EVENTS = (
    "{path} is a PyTorch profiler trace with no events: the profiler recorded nothing; export the trace "
    "from inside the profiled region (`on_trace_ready`) or after a step ran."
)
CHROME = b'{"traceEvents": [{"ph": "X", "name": "frame", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}'
FORMATS = {
    "empty file": (
        lambda tmp: _write(tmp / "empty.sqlite", b""),
        "{path} is empty (0 bytes); copy or export it again.",
    ),
    "PyTorch trace without events": (lambda tmp: _write(tmp / "trace.json", KINETO), NO_EVENTS),
    "PyTorch trace without events, gzip": (lambda tmp: _gz(tmp / "trace.json.gz", KINETO), NO_EVENTS),
    "another tool's Chrome trace": (
        lambda tmp: _write(tmp / "chrome.json", CHROME),
        (
            "{path} is a Chrome trace JSON that the PyTorch profiler did not write (no Kineto keys or event "
            "categories); nsa reads nsys reports (.nsys-rep) and their SQLite exports, ncu reports (.ncu-rep) "
            "and CSV exports, PyTorch profiler traces, and NVML or nvidia-smi power logs "
            "(`prof.export_chrome_trace(path)` writes a PyTorch trace)."
        ),
    ),
    "other gzip": (
        lambda tmp: _gz(tmp / "notes.gz", b"hello\n"),
        (
            "{path} is gzip-compressed, and the file inside is none of them: nsa reads nsys reports "
            "(.nsys-rep) and their SQLite exports, ncu reports (.ncu-rep) and CSV exports, PyTorch profiler "
            "traces, and NVML or nvidia-smi power logs."
        ),
    ),
    "damaged gzip": (
        lambda tmp: _write(tmp / "cut.sqlite.gz", gzip.compress(b"SQLite format 3\x00" * 4096)[:20]),
        "{path} is a damaged, truncated or empty gzip file; copy it again.",
    ),
}


@pytest.mark.parametrize("case", FORMATS)
def test_formats_users_have_get_their_own_sentence(case: str, db: Path, tmp_path: Path) -> None:
    make, message = FORMATS[case]
    path = make(tmp_path)
    before = state(db)
    assert_user_error(run("ingest", "--db", str(db), str(path)), message.format(path=path.resolve()))
    assert state(db) == before


# --- one set of output conventions ----------------------------------------------------------


SPECIAL = "SELECT 'inf'::DOUBLE AS a, 'nan'::DOUBLE AS b, '-inf'::DOUBLE AS c, [1.5, 'inf'::DOUBLE] AS d"


def test_json_never_holds_bare_infinity_or_nan(tmp_path: Path) -> None:
    res = run("sql", "--db", str(tmp_path / "w.duckdb"), SPECIAL, "--format", "json")
    assert res.exit_code == EXIT_OK, res.output
    # an array of row objects, one a line, as DuckDB's JSON writer puts them
    assert res.stdout == '[\n\t{"a":null,"b":null,"c":null,"d":[1.5,null]}\n]\n'
    assert json.loads(res.stdout) == [{"a": None, "b": None, "c": None, "d": [1.5, None]}]


def test_csv_and_table_keep_infinities(tmp_path: Path) -> None:
    db = str(tmp_path / "w.duckdb")
    res = run("sql", "--db", db, SPECIAL, "--format", "csv")
    assert res.stdout == "a,b,c,d\ninf,,-inf,1.5;inf\n"
    res = run("sql", "--db", db, SPECIAL)
    assert res.stdout == (
        "┏━━━━━┳━━━┳━━━━━━┳━━━━━━━━━━┓\n"
        "┃   a ┃ b ┃    c ┃ d        ┃\n"
        "┡━━━━━╇━━━╇━━━━━━╇━━━━━━━━━━┩\n"
        "│ inf │   │ -inf │ 1.5, inf │\n"
        "└─────┴───┴──────┴──────────┘\n"
    )


def test_findings_json_writes_null_for_infinities() -> None:
    from nsight_analytics.render.findings import to_json
    from nsight_analytics.rules import Finding

    f = Finding("gpu-idle", "info", 1, "t", "m", "r", {"ratio": float("inf"), "share": float("nan"), "n": 3})
    text = to_json([f])
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text)[0]["evidence"] == {"ratio": None, "share": None, "n": 3}


def test_rules_in_every_row_format() -> None:
    ids = [r.id for r in rules()]
    res = run("rules", "--format", "csv")
    assert res.exit_code == EXIT_OK, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert list(rows[0]) == ["rule", "reads", "severity", "scope", "thresholds", "looks for"]
    assert {r["rule"]: r["scope"] for r in rows}["straggler-rank"] == "run"
    assert [r["rule"] for r in rows] == ids
    assert [r["rule"] for r in json.loads(run("rules", "--format", "json").stdout)] == ids
    table = run("rules").stdout
    assert table.splitlines()[0].strip() == "rules"
    assert max(len(line) for line in table.splitlines()) <= 80
    for r in rules():  # one block per rule: its id and every threshold name whole on a line
        assert any(line.startswith(r.id + "  (") for line in table.splitlines())
        assert all(re.search(rf"\b{t}=", table) for t in r.thresholds), r.id
    assert run("rules", "--format", "markdown").stdout.startswith("| rule | reads | severity |")


def test_schema_defaults_to_a_table() -> None:
    res = run("schema")
    assert res.exit_code == EXIT_OK
    lines = res.stdout.splitlines()
    assert re.match(r"┃ table\s+┃ column\s+┃ type\s+┃ unit\s+┃ meaning\s+┃", lines[1]), lines[1]
    assert max(len(line) for line in lines) <= 80
    res = run("schema", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert len(rows) == sum(len(t.cols) for t in schema.TABLES)
    assert rows[0] == {
        "table": schema.TABLES[0].name,
        "column": schema.TABLES[0].cols[0].name,
        "type": schema.TABLES[0].cols[0].type,
        "unit": schema.TABLES[0].cols[0].unit,
        "meaning": schema.TABLES[0].cols[0].doc,
    }
    assert run("schema", "--format", "markdown").stdout == render_schema_page(schema.TABLES) + "\n"


def test_help_lists_whole_sentences() -> None:
    """click cuts a command's help at its first period ("e.g.") or at 45 characters: no command
    may be listed cut short."""
    res = run("--help")
    assert res.exit_code == EXIT_OK
    listing = res.stdout.split("Commands:\n", 1)[1]
    for name, command in main.commands.items():
        short = command.get_short_help_str(limit=80)
        assert not short.endswith(("...", "e.g.")), (name, short)
        assert f"  {name.ljust(8)}  {short}\n" in listing, name
    assert max(len(line) for line in res.stdout.splitlines()) <= 80


def test_python_dash_m_is_nsa() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nsight_analytics", "--help"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == EXIT_OK, proc.stderr
    assert proc.stdout.startswith("Usage: nsa [OPTIONS] COMMAND [ARGS]...")


def test_documented_shell_completion_works() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'eval "$(_NSA_COMPLETE=bash_source nsa)"' in readme
    env = {**os.environ, "_NSA_COMPLETE": "bash_source"}
    proc = subprocess.run(
        [sys.executable, "-m", "nsight_analytics"], check=False, env=env, capture_output=True, text=True
    )
    assert proc.returncode == EXIT_OK and "_nsa_completion()" in proc.stdout


def test_package_ships_types_and_licence() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert (ROOT / "nsight_analytics" / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["nsight_analytics"]
    assert project["project"]["license"] == {"text": "MIT"}
    licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("MIT License\n") and "the nsight-analytics authors" in licence


def test_verbose_logs_steps_and_times_on_stderr(db: Path) -> None:
    res = run("--verbose", "query", "gaps", "--db", str(db), "--format", "csv")
    assert res.exit_code == EXIT_OK, res.output
    assert res.stdout.startswith("report_id,device_id,")  # data only: the log is on stderr
    steps = [re.sub(r"\d+\.\d{3} s$", "N s", line) for line in res.stderr.splitlines()]
    assert steps == [
        "nsa: report 1: loaded deferred cuda_api: N s",
        "nsa: report 1: loaded deferred steps: N s",
        "nsa: report 1: worked out gpu_timeline: N s",
        "nsa: query gaps: N s",
    ]
    res = run("query", "gaps", "--db", str(db), "--format", "csv")
    assert res.exit_code == EXIT_OK and res.stderr == ""  # quiet without --verbose


def test_verbose_ingest_times_each_step(tmp_path: Path) -> None:
    res = run("-v", "ingest", "--db", str(tmp_path / "w.duckdb"), str(DEMO))
    assert res.exit_code == EXIT_OK, res.output
    lines = res.stderr.splitlines()
    assert lines[0].startswith(f"nsa: ingest {DEMO.name}: kernel_rows: ") and lines[0].endswith(" s")
    assert re.fullmatch(rf"nsa: ingest {re.escape(DEMO.name)}: \d+\.\d{{3}} s", lines[-1]), lines[-1]


# --- the rules config file ----------------------------------------------------------------------


def _help_example() -> str:
    text = run("findings", "--help").stdout
    block = text.split("For example:\n\n", 1)[1].split("\n\nOptions:", 1)[0]
    return "\n".join(line.strip() for line in block.splitlines())


def test_config_example_in_help_and_readme_is_accepted(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    readme_example = re.search(r"```toml\n(.*?)```", readme, re.DOTALL)[1]
    for example in (_help_example(), readme_example):
        assert "[gpu-idle]" in example
        path = tmp_path / "nsa-rules.toml"
        path.write_text(example)
        values = load_config(path)
        assert (values["idle_share_warning"], values["idle_gap_min_ns"], values["small_kernel_ns"]) == (
            0.10,
            50000,
            5000,
        )


def test_rule_tables_take_that_rules_thresholds(db: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[gpu-idle]\nidle_share_warning = 0.1\n\n[thresholds]\ntop_kernels = 4\n")
    res = run("findings", "--db", str(db), "--config", str(cfg))
    assert res.exit_code == EXIT_OK, res.output


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[gpu-idle]\nsmall_kernel_ns = 5000\n",
         ("rules config {cfg}: [gpu-idle] has no threshold 'small_kernel_ns'; its thresholds: idle_share_warning, "
         "idle_share_critical, idle_gap_min_ns, idle_min_span_ns, idle_min_steps, idle_host_lead_share (small_kernel_ns "
         "belongs to [small-kernel-storm]).")),
        ("[gpu-idel]\nidle_share_warning = 0.1\n",
         "rules config {cfg}: [gpu-idel] is neither [thresholds] nor a rule; rule ids: {ids}."),
        ("[stall-dominated]\nheavy_kernel_share = 0.1\n[memory-bound]\nheavy_kernel_share = 0.2\n",
         ("rules config {cfg} sets heavy_kernel_share twice ([stall-dominated] and [memory-bound]); thresholds are "
         "shared by the rules that use them, so give it one value.")),
        ("[gpu-idle]\nidle_share_warning = 'high'\n",
         "rules config {cfg} [gpu-idle]: threshold idle_share_warning wants a number, got 'high'."),
    ],
)  # fmt: skip
def test_rule_table_errors_name_what_is_allowed(toml: str, message: str, db: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    expected = message.format(cfg=cfg, ids=", ".join(r.id for r in rules()))
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert str(exc.value) == expected
    before = state(db)
    assert_user_error(run("findings", "--db", str(db), "--config", str(cfg)), expected)
    assert state(db) == before
