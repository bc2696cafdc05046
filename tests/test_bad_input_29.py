"""Issue 29, items 1-3: interrupts, file-system failures, hidden causes and unchecked values each
end as one sentence and the right exit code (130 interrupted, 2 any other failure; 1 only for
findings at or above --fail-on and the diff gate), with the workspace unchanged."""

from __future__ import annotations

import gzip
import os
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from conftest import ROOT
from nsight_analytics import api, params, queries
from nsight_analytics.cli import main
from nsight_analytics.errors import QueryError
from nsight_analytics.ingest import pipeline
from nsight_analytics.rules.config import ConfigError, load_config, table

DEMO = ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"
IDLE_GAPS = ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def one_sentence(res, code: int = 2) -> str:
    """The output of a failed command: exactly one line, no traceback, the expected exit code."""
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    return lines[0]


def counts(db: Path) -> tuple[int, int]:
    """(reports, kernels) in a workspace, read with DuckDB directly."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return (
            con.execute("SELECT count(*) FROM reports").fetchone()[0],
            con.execute("SELECT count(*) FROM kernels").fetchone()[0],
        )
    finally:
        con.close()


def demo_kernels() -> int:
    con = sqlite3.connect(DEMO)
    try:
        return int(con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0])
    finally:
        con.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    res = run("ingest", "-q", "--full", "--db", str(path), str(DEMO))
    assert res.exit_code == 0, res.output
    assert counts(path) == (1, demo_kernels())
    return path


# --- 1. Ctrl-C: exit 130, one line, nothing changed -------------------------------------------


def _interrupt_inside_the_transaction(monkeypatch, exc: BaseException) -> None:
    """Raise `exc` after the reader has inserted its rows, before the report row and COMMIT."""

    def cut(*args, **kwargs):
        raise exc

    monkeypatch.setattr(pipeline, "_insert_report", cut)


def _duckdb_interrupt() -> RuntimeError:
    """What DuckDB's Python client raises for a query Ctrl-C stopped: RuntimeError('Query
    interrupted'), with the KeyboardInterrupt as its context."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("Query interrupted") from None
    except RuntimeError as exc:
        exc.__context__ = KeyboardInterrupt()
        return exc


@pytest.mark.parametrize("how", ["KeyboardInterrupt", "Query interrupted"])
def test_ctrl_c_during_ingest_exits_130_and_changes_nothing(
    how: str, db: Path, tmp_path: Path, monkeypatch
) -> None:
    exc = KeyboardInterrupt() if how == "KeyboardInterrupt" else _duckdb_interrupt()
    _interrupt_inside_the_transaction(monkeypatch, exc)
    res = run("ingest", "-q", "--db", str(db), str(IDLE_GAPS))
    assert one_sentence(res, 130) == "interrupted; the workspace is unchanged."
    assert counts(db) == (1, demo_kernels())  # the rows the reader inserted were rolled back


def test_ctrl_c_into_a_new_workspace_leaves_no_report(tmp_path: Path, monkeypatch) -> None:
    _interrupt_inside_the_transaction(monkeypatch, KeyboardInterrupt())
    path = tmp_path / "new.duckdb"
    res = run("ingest", "-q", "--db", str(path), str(DEMO))
    one_sentence(res, 130)
    assert not path.exists()  # the workspace this command created goes with it
    assert not path.with_name("new.duckdb.wal").exists()


def test_failed_ingest_into_a_new_workspace_leaves_no_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}', encoding="utf-8")
    path = tmp_path / "new.duckdb"
    one_sentence(run("ingest", "-q", "--db", str(path), str(bad)), 2)
    assert list(tmp_path.iterdir()) == [bad]


def test_failed_ingest_into_an_existing_workspace_keeps_it(db: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}', encoding="utf-8")
    before = counts(db)
    one_sentence(run("ingest", "-q", "--db", str(db), str(bad)), 2)
    assert counts(db) == before


def test_ctrl_c_on_the_second_file_says_what_was_ingested(tmp_path: Path, monkeypatch) -> None:
    real = pipeline._insert_report
    calls = []

    def second_cut(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_insert_report", second_cut)
    path = tmp_path / "w.duckdb"
    res = CliRunner().invoke(main, ["ingest", "-q", "--db", str(path), str(DEMO), str(IDLE_GAPS)])
    assert res.exit_code == 130, res.output
    assert res.output.strip().splitlines()[-1] == (
        "interrupted; reports 1 were ingested before it, the file being ingested was not."
    )
    assert counts(path) == (1, demo_kernels())


def test_ctrl_c_in_any_command_exits_130(db: Path, monkeypatch) -> None:
    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "findings", stop)
    assert one_sentence(run("findings", "--db", str(db)), 130) == "interrupted; the workspace is unchanged."


# --- 1. symbolic link loops, names over 255 bytes ----------------------------------------------


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    a, b = tmp_path / "loop_a", tmp_path / "loop_b"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def test_symlink_loop_as_input(loop: Path, db: Path) -> None:
    line = one_sentence(run("ingest", "--db", str(db), str(loop)))
    assert line == (
        f"Error: {loop} is a symbolic link loop (it leads back to itself); point the link at the "
        "real file or give that file's path."
    )


def test_dangling_link_as_input(tmp_path: Path, db: Path) -> None:
    link = tmp_path / "gone.sqlite"
    link.symlink_to(tmp_path / "nowhere.sqlite")
    line = one_sentence(run("ingest", "--db", str(db), str(link)))
    assert line == f"Error: {link} is a symbolic link to {tmp_path / 'nowhere.sqlite'}, which does not exist."


@pytest.mark.parametrize("command", [["ingest", str(DEMO)], ["summary"], ["findings"], ["sql", "SELECT 1"]])
def test_symlink_loop_as_workspace(loop: Path, command: list[str]) -> None:
    line = one_sentence(run(*command, "--db", str(loop)))
    assert "is a symbolic link loop (it leads back to itself)" in line
    assert str(loop) in line


def test_name_over_255_bytes(tmp_path: Path, db: Path) -> None:
    long = tmp_path / ("n" * 300 + ".sqlite")
    for args in (
        ["ingest", "--db", str(db), str(long)],
        ["ingest", "--db", str(tmp_path / ("w" * 300 + ".duckdb")), str(DEMO)],
        ["summary", "--db", str(tmp_path / ("w" * 300 + ".duckdb"))],
        ["query", "gaps", "--db", str(db), "-o", str(tmp_path / ("o" * 300 + ".csv"))],
    ):
        line = one_sentence(run(*args))
        assert "is 30" in line and "bytes long, over the 255 the file system allows" in line, line
    assert counts(db) == (1, demo_kernels())


# --- 2. causes: a full disk, an export given as the workspace, long paths, other JSON ----------


def test_full_disk_during_ingest_says_so(db: Path, monkeypatch) -> None:
    """DuckDB ends the transaction when its COMMIT cannot write the WAL: the error to report is
    the full disk, not the ROLLBACK that finds no transaction."""

    def full(con, row):
        con.execute("ROLLBACK")  # as DuckDB does when the commit fails
        raise duckdb.IOException(
            f'Failed to commit: Could not write file "{db}.wal": No space left on device'
        )

    monkeypatch.setattr(pipeline, "_insert_report", full)
    line = one_sentence(run("ingest", "-q", "--db", str(db), str(IDLE_GAPS)))
    assert line.startswith(f"Error: the disk is full (writing {db}.wal); free space there")
    assert "no transaction is active" not in line
    assert counts(db) == (1, demo_kernels())


def test_full_disk_on_a_real_tmpfs(tmp_path: Path) -> None:
    """The same on a 2 MB tmpfs, where the machine lets us mount one (root, outside containers
    that forbid it)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    if os.system(f"mount -t tmpfs -o size=2m tmpfs {small} 2>/dev/null") != 0:
        pytest.skip("this machine does not allow mounting a tmpfs")
    try:
        target = ROOT.parent / "shared" / "realdata" / "nsys" / "h100_nsys2025.3_transformer_train.sqlite"
        source = target if target.exists() else IDLE_GAPS
        res = run("ingest", "-q", "--full", "--db", str(small / "w.duckdb"), str(source))
        if res.exit_code == 0:
            pytest.skip(f"{source.name} fits in 2 MB")
        line = one_sentence(res)
        assert line.startswith("Error: the disk is full"), line
        assert not (small / "w.duckdb").exists()  # the workspace this ingest created went again
    finally:
        os.system(f"umount {small}")


def test_export_given_as_the_workspace(tmp_path: Path) -> None:
    export = tmp_path / "report.sqlite"
    shutil.copy(DEMO, export)
    home = tmp_path / "home"
    home.mkdir()
    for args in (["summary"], ["ingest", str(IDLE_GAPS)], ["sql", "SELECT 1"], ["findings"]):
        line = one_sentence(run(*args, "--db", str(export)))
        assert line == (
            f"Error: {export} is an nsys SQLite export, not an nsa workspace: ingest it into one with "
            f"`nsa ingest {export} --db WORKSPACE.duckdb`, then give that workspace to --db."
        )
    assert export.read_bytes() == DEMO.read_bytes()


def test_no_connection_can_download(tmp_path: Path) -> None:
    setting = (
        "SELECT current_setting('autoinstall_known_extensions'), current_setting('autoload_known_extensions')"
    )
    con = api.connect(tmp_path / "w.duckdb")
    assert con.execute(setting).fetchone() == (False, False)
    con.close()
    reader = api.reader(tmp_path / "w.duckdb")
    assert reader.execute(setting).fetchone() == (False, False)
    reader.close()
    assert params.connect().execute(setting).fetchone() == (False, False)


@pytest.mark.parametrize(
    "statement",
    [
        "INSTALL httpfs",
        "FORCE INSTALL httpfs FROM community",
        "LOAD httpfs",
        "SELECT 1; LOAD 'x.duckdb_extension'",
        "UPDATE EXTENSIONS",
        "SET autoinstall_known_extensions = true",
        "SET GLOBAL autoload_known_extensions = 1",
        "RESET autoload_known_extensions",
        "SET custom_extension_repository = 'http://example.com'",
    ],
)
def test_sql_refuses_extension_statements(statement: str, db: Path) -> None:
    for extra in ([], ["--allow-writes"]):
        line = one_sentence(run("sql", statement, "--db", str(db), *extra))
        assert "is refused: nsa sql does not install, load or update DuckDB extensions" in line


def test_sql_still_runs_statements_that_only_mention_extensions(db: Path) -> None:
    res = run("sql", "SELECT 'INSTALL httpfs' AS t -- LOAD x", "--db", str(db), "--format", "csv")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == ["t", "INSTALL httpfs"]


def test_valid_export_at_a_long_path(tmp_path: Path) -> None:
    folder = tmp_path
    while len(os.fsencode(str(folder))) < 520:
        folder = folder / ("d" * 200)
    folder.mkdir(parents=True)
    export = folder / "report.sqlite"
    shutil.copy(DEMO, export)
    line = one_sentence(run("ingest", "--db", str(tmp_path / "w.duckdb"), str(export)))
    assert "SQLite cannot open a file whose full path is 504 bytes or longer" in line
    assert "the export is fine" in line and "export it again" not in line


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("content", ['{"metrics": [1, 2, 3]}', '[{"a": 1}]'])
def test_json_that_is_no_trace(content: str, compressed: bool, tmp_path: Path, db: Path) -> None:
    path = tmp_path / ("other.json.gz" if compressed else "other.json")
    path.write_bytes(gzip.compress(content.encode()) if compressed else content.encode())
    line = one_sentence(run("ingest", "--db", str(db), str(path)))
    what = "gzip-compressed JSON" if compressed else "JSON"
    assert line.startswith(f"Error: {path} is {what}, but not a PyTorch profiler trace (no traceEvents list)")
    assert "not an SQLite file" not in line


# --- 3. values: enumerated and required parameters, threshold ranges ---------------------------


def test_enumerated_parameter_lists_its_values(db: Path) -> None:
    line = one_sentence(run("query", "utilization", "-p", "phase=stedy", "--db", str(db)))
    assert line.startswith("Error: parameter phase must be one of steady, startup, NULL, got 'stedy'")
    line = one_sentence(run("query", "op_kernels", "-p", "level=bogus", "--db", str(db)))
    assert line.startswith("Error: parameter level must be one of top, leaf, annotation, got 'bogus'")
    for name in ("kernel_classes", "memcpy_summary", "copy_directions"):
        assert "must be one of steady, startup, NULL" in one_sentence(
            run("query", name, "-p", "phase=Steady", "--db", str(db))
        )
    ok = run("query", "utilization", "-p", "phase=steady", "--db", str(db), "--format", "csv")
    assert ok.exit_code == 0, ok.output


def test_required_parameters_are_asked_for(db: Path) -> None:
    line = one_sentence(run("query", "gap_calls", "--db", str(db)))
    assert line.startswith(
        "Error: query gap_calls needs parameters thread_ids, starts_ns, ends_ns: thread_ids"
    )
    con = api.reader(db)
    try:
        with pytest.raises(QueryError, match="needs parameters starts_ns, ends_ns"):
            api.query(con, "gap_calls", thread_ids=[1])
        assert api.query(con, "gap_calls", thread_ids=[], starts_ns=[], ends_ns=[]).fetchall() == []
    finally:
        con.close()


def test_values_are_checked_from_python_too() -> None:
    with pytest.raises(QueryError, match="must be one of steady, startup, NULL"):
        queries.get("utilization").bind({"phase": "whole"})
    assert queries.get("utilization").bind({"phase": None})["phase"] is None
    assert queries.get("op_kernels").bind({})["level"] == "top"


def test_the_contract_declares_values(tmp_path: Path) -> None:
    head = "-- Kernels.\n-- reads kernel_rows\n"
    path = tmp_path / "q.sql"
    path.write_text(
        head + "-- param mode VARCHAR = 'a' one of ('a', 'b'): the mode.\n"
        "-- param need INTEGER: required.\n-- col x INTEGER: x.\nSELECT $mode AS m, $need AS x\n"
    )
    q = queries.parse(path)
    mode, need = q.params
    assert (mode.default, mode.allowed, mode.doc, mode.required) == ("'a'", ("a", "b"), "the mode.", False)
    assert (need.default, need.allowed, need.required) == (None, (), True)
    path.write_text(
        head
        + "-- param mode VARCHAR = 'c' one of ('a', 'b'): the mode.\n-- col x INTEGER: x.\nSELECT $mode AS x\n"
    )
    with pytest.raises(QueryError, match="default is not one of its values"):
        queries.parse(path)


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        (
            "idle_share_warning=-3",
            "threshold idle_share_warning must be between 0 and 1 (a fraction), got '-3'.",
        ),
        ("idle_share_warning=1.5", "must be between 0 and 1 (a fraction)"),
        ("stall_share_min=120", "threshold stall_share_min must be between 0 and 100 (%), got '120'."),
        ("idle_gap_min_ns=-1", "threshold idle_gap_min_ns must be at least 0 (ns)"),
        ("imbalance_ratio_warning=0.5", "must be at least 1 (a ratio)"),
        ("idle_share_warning=nan", "must be between 0 and 1"),
        ("top_kernels=2.5", "threshold top_kernels wants a whole number (count), got '2.5'."),
    ],
)
def test_threshold_ranges(setting: str, words: str, db: Path) -> None:
    line = one_sentence(run("findings", "--set", setting, "--db", str(db)))
    assert words in line


def test_threshold_range_in_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text("[gpu-idle]\nidle_share_warning = 2.0\n")
    with pytest.raises(
        ConfigError, match=r"\[gpu-idle\]: threshold idle_share_warning must be between 0 and 1"
    ):
        load_config(path)


def test_every_default_is_in_its_range() -> None:
    for t in table().values():
        low, high = t.bounds()
        assert low is not None or high is not None, f"{t.name}: unit {t.unit!r} declares no range"
        assert (low is None or t.default >= low) and (high is None or t.default <= high), t.name
    assert load_config()["idle_share_warning"] == table()["idle_share_warning"].default


# --- 3. the diff: the same report, a gate that could not judge ---------------------------------


@pytest.fixture
def two(db: Path) -> Path:
    res = run("ingest", "-q", "--db", str(db), str(IDLE_GAPS))
    assert res.exit_code == 0, res.output
    return db


def test_diff_of_a_report_with_itself(db: Path) -> None:
    res = run("diff", "1", "1", "--db", str(db), "--no-findings")
    assert res.exit_code == 0, res.output
    assert "SAME REPORT" in res.output and "NO SIGNIFICANT CHANGE" not in res.output
    assert f"A and B are both report 1 ({DEMO.name}): nothing to compare" in res.output
    gated = run("diff", "1", "1", "--db", str(db), "--no-findings", "--fail-on-regression", "5")
    assert gated.exit_code == 0 and "gate not applied: A and B are the same report." in gated.output


def test_gate_fails_what_it_could_not_judge(two: Path) -> None:
    con = api.reader(two, needs=api.diff_reads(False))
    try:
        d = api.diff(con, 1, 2, with_findings=False)
    finally:
        con.close()
    assert d.verdict == "not comparable", d.reason
    res = run(
        "diff", "1", "2", "--db", str(two), "--no-findings", "--fail-on-regression", "5", "--format", "json"
    )
    assert res.exit_code == 1
    assert res.stderr.strip().startswith("gate FAILED: it could not judge B against A: not comparable (")
    assert res.stderr.strip().endswith("--allow-not-comparable passes such a diff.")
    allowed = run(
        "diff", "1", "2", "--db", str(two), "--no-findings", "--fail-on-regression", "5",
        "--allow-not-comparable", "--format", "json",
    )  # fmt: skip
    assert allowed.exit_code == 0
    assert allowed.stderr.strip().startswith("gate passed without judging (--allow-not-comparable)")
    plain = run("diff", "1", "2", "--db", str(two), "--no-findings")
    assert plain.exit_code == 0  # no gate asked for: a report, not a failure


def test_allow_not_comparable_needs_the_gate(db: Path) -> None:
    line = one_sentence(run("diff", "1", "1", "--db", str(db), "--allow-not-comparable"))
    assert "give it with --fail-on-regression PCT" in line
