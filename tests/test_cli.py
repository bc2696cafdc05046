"""The CLI: exact output shapes and exit codes, and README's promises."""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT
from nsight_analytics.cli import EXIT_ERROR, EXIT_OK, main

# The bundled demo export: byte for byte ../shared/realdata/nsys/h100_nsys2025.3_pageable_h2d.sqlite,
# shipped in the package (nsight_analytics/data/README.md), so these tests need no ../shared.
DEMO = ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    res = invoke("ingest", "--db", str(path), str(DEMO))
    assert res.exit_code == EXIT_OK, res.output
    return path


def test_ingest_says_what_it_did(tmp_path: Path) -> None:
    db = str(tmp_path / "w.duckdb")
    res = invoke("ingest", "--db", db, str(DEMO))
    # Counts from sqlite3 on the export. Its CUDA runtime rows, NVTX ranges and OS runtime calls
    # (CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS, OSRT_API) are host-side and copied on first use,
    # like the synchronisations (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION), which no query reads.
    with sqlite3.connect(DEMO) as c:
        kernels, names = c.execute(
            "SELECT count(*), count(DISTINCT demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL"
        ).fetchone()
        (copies,) = c.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()
        (syncs,) = c.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION").fetchone()
        (gpus,) = c.execute("SELECT count(*) FROM TARGET_INFO_GPU").fetchone()
        (processes,) = c.execute("SELECT count(*) FROM PROCESSES").fetchone()
        (api_calls,) = c.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    assert res.output == (
        f"demo_pageable_h2d.sqlite: ingested as report 1 (nsys): {kernels:,} kernels, {names:,} kernel_names, "
        f"{copies:,} memcpy, {gpus:,} gpus, {processes:,} processes; kernel_launch, cuda_api, sync_events, "
        "nvtx_ranges, osrt_api copied on first use (--full copies now).\n"
    )
    res = invoke("sql", "--db", db, "SELECT count(*) AS n FROM cuda_api", "--format", "csv")
    assert res.output == f"n\n{api_calls}\n"
    res = invoke("sql", "--db", db, "SELECT count(*) AS n FROM sync_events", "--format", "csv")
    assert res.output == f"n\n{syncs}\n"
    res = invoke("ingest", "--db", db, str(DEMO))
    assert res.exit_code == EXIT_OK
    assert "already in the workspace as report 1" in res.output


def test_env_var_picks_the_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSA_DB", str(tmp_path / "env.duckdb"))
    assert invoke("ingest", str(DEMO)).exit_code == EXIT_OK
    assert (tmp_path / "env.duckdb").exists()


def test_sql_formats(db: Path) -> None:
    src = DEMO
    with sqlite3.connect(src) as c:
        (n, total) = c.execute(
            'SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY'
        ).fetchone()
    stmt = "SELECT count(*) AS n, CAST(sum(duration_ns) AS BIGINT) AS total FROM memcpy"
    res = invoke("sql", "--db", str(db), stmt, "--format", "json")
    assert json.loads(res.output) == [{"n": n, "total": total}]
    res = invoke("sql", "--db", str(db), stmt, "--format", "csv")
    assert list(csv.DictReader(io.StringIO(res.output))) == [{"n": str(n), "total": str(total)}]
    res = invoke("sql", "--db", str(db), stmt)
    assert f"{total:,}" in res.output


def test_sql_error_is_one_line(db: Path) -> None:
    res = CliRunner().invoke(main, ["sql", "--db", str(db), "SELECT * FROM no_such_table"])
    assert res.exit_code == EXIT_ERROR
    assert res.output.startswith("Error: ") and "Traceback" not in res.output


def test_reports_json(db: Path) -> None:
    rows = json.loads(invoke("reports", "--db", str(db), "--format", "json").output)
    assert [(r["report_id"], r["format"], r["tool_version"]) for r in rows] == [(1, "nsys", "2025.3.2.0")]
    assert "kernel" in rows[0]["activity_kinds"]


def test_query_unknown_name_and_param(db: Path) -> None:
    res = CliRunner().invoke(main, ["query", "--db", str(db), "no_such_query"])
    assert res.exit_code == EXIT_ERROR and "no query named" in res.output
    res = CliRunner().invoke(main, ["query", "--db", str(db), "speed_of_light", "-p", "bogus=1"])
    assert res.exit_code == EXIT_ERROR and "has no parameter bogus" in res.output


def test_reports_without_workspace(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["reports", "--db", str(tmp_path / "none.duckdb")])
    assert res.exit_code == EXIT_ERROR and "no workspace" in res.output


def test_schema_markdown_lists_every_table() -> None:
    from nsight_analytics import schema

    text = invoke("schema", "--format", "markdown").output
    for t in schema.TABLES:
        assert f"## `{t.name}`" in text


def test_readme_commands_match_ci() -> None:
    """README's set-up is exactly two commands; .ci/run runs the second one verbatim."""
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.+?)\n```", setup)
    assert len(commands) == 2, commands
    assert "nsa demo" in commands[0]
    assert "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()


def test_every_command_is_documented_in_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in main.commands:
        assert f"`nsa {name}" in readme, f"README does not document `nsa {name}`"


def test_demo_runs_on_the_bundled_export() -> None:
    """The first README command: the bundled H100 capture copies 128 MB DtoH into pageable
    memory at ~1.3 GB/s (its data README), so both copy findings must come out on top."""
    res = invoke("demo")
    assert res.exit_code == EXIT_OK, res.output
    lines = [line for line in res.output.splitlines() if re.match(r"\d+\. \[", line)]  # the findings
    assert lines[0].startswith("1. [CRITICAL] DtoH copies into pageable memory")
    assert "copy-dominated" in res.output and "pageable-memcpy" in res.output
    # judged on the steady state, from batch_1 on (batch_0 is warm-up): that part's DtoH rate
    db = sqlite3.connect(ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite")
    steady = db.execute("SELECT start FROM NVTX_EVENTS WHERE text = 'batch_1'").fetchone()[0]
    nbytes, ns = db.execute(
        'SELECT sum(bytes), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY '
        "WHERE copyKind = 2 AND dstKind = 0 AND start >= ?",
        [steady],
    ).fetchone()
    assert f"{nbytes / ns:.3g} GB/s" in res.output
    # one fix, one saving: the pageable-memcpy finding is shown under the copy one, not as a second
    assert "\n2. [" not in res.output
    assert "+ Same saving, also found by pageable-memcpy [CRITICAL]" in res.output
    # findings first, then the one-screen summary
    assert res.output.index("$ nsa findings") < res.output.index("$ nsa summary")


def test_demo_fits_an_80_column_terminal() -> None:
    res = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["demo"])
    assert res.exit_code == EXIT_OK, res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80


def test_summary_numbers_match_the_export(tmp_path: Path) -> None:
    """`nsa summary`: top kernels by GPU time and copies by direction, checked with plain SQL."""
    db = str(tmp_path / "w.duckdb")
    demo = ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"
    assert invoke("ingest", "--db", db, str(demo)).exit_code == EXIT_OK
    res = invoke("summary", "--db", db, "--format", "json")
    assert res.exit_code == EXIT_OK, res.output
    (report,) = json.loads(res.output)
    src = sqlite3.connect(demo)
    top = src.execute(
        'SELECT s.value, sum(k."end" - k.start), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k '
        "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value ORDER BY 2 DESC"
    ).fetchall()
    got = [(k["name"], k["total_ns"], k["instances"]) for k in report["top_kernels"]]
    assert sorted(got, key=lambda k: (-k[1], k[0])) == sorted(top, key=lambda k: (-k[1], k[0]))[:5]
    assert report["kernel_count"] == sum(n for _, _, n in top)
    copies = src.execute(
        'SELECT copyKind, srcKind, dstKind, sum(bytes), sum("end" - start), count(*) '
        "FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1, 2, 3 ORDER BY 5 DESC"
    ).fetchall()
    assert [(c["bytes"], c["total_ns"], c["copies"]) for c in report["copies"]] == [c[3:] for c in copies]
    (device,) = report["devices"]
    first, last = src.execute(
        'SELECT min(start), max("end") FROM (SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL '
        'UNION ALL SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY)'
    ).fetchone()
    assert device["span_ns"] == last - first
    text = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["summary", "--db", db]).output
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "vectorized_elementwise_kernel<FillFunctor>" in text  # same short names told apart
    assert "DtoH device -> pageable" in text


def test_table_cells_are_not_read_as_markup(tmp_path: Path) -> None:
    # Kernel names such as `[lambda() (instance 1)]` (ncu) or `void f<[bold]>` must print as written.
    stmt = "SELECT 'k<[lambda() (instance 1)]>' AS name, '[red]x[/red]' AS \"[b]col\""
    res = invoke("sql", "--db", str(tmp_path / "w.duckdb"), "--wide", stmt)  # full kernel names
    assert res.exit_code == EXIT_OK, res.output
    assert "k<[lambda() (instance 1)]>" in res.output
    assert "[red]x[/red]" in res.output and "[b]col" in res.output


def test_old_workspace_gains_new_columns(tmp_path: Path) -> None:
    # A workspace written by an older nsa lacks columns added since; opening it for writing adds
    # them (NULL in the old rows) and ingest fills them.
    import duckdb

    from nsight_analytics import schema

    path = tmp_path / "old.duckdb"
    assert invoke("ingest", "--db", str(path), str(DEMO)).exit_code == EXIT_OK
    with sqlite3.connect(DEMO) as c:  # the export's kernel names, and those with a mangled name
        names, mangled = c.execute(
            "SELECT count(DISTINCT demangledName), "
            "count(DISTINCT demangledName) FILTER (WHERE mangledName IS NOT NULL) FROM CUPTI_ACTIVITY_KIND_KERNEL"
        ).fetchone()
    assert mangled > 0
    with duckdb.connect(str(path)) as con:
        con.execute('ALTER TABLE kernel_names DROP COLUMN "mangled_name"')
        con.execute('ALTER TABLE ncu_kernels DROP COLUMN "invocations"')
    res = invoke(
        "sql",
        "--db",
        str(path),
        "SELECT count(*) AS n, count(mangled_name) AS named FROM kernel_names",
        "--format",
        "csv",
    )
    assert res.output == f"n,named\n{names},0\n"
    with duckdb.connect(str(path), read_only=True) as con:
        for table in ("kernel_names", "ncu_kernels"):
            cols = [
                r[0]
                for r in con.execute(
                    f"SELECT column_name FROM duckdb_columns() WHERE table_name = '{table}'"
                ).fetchall()
            ]
            assert sorted(cols) == sorted(schema.BY_NAME[table].col_names)
    res = invoke("ingest", "--db", str(path), "--replace", str(DEMO))
    assert res.exit_code == EXIT_OK, res.output
    res = invoke(
        "sql", "--db", str(path), "SELECT count(mangled_name) AS named FROM kernel_names", "--format", "csv"
    )
    assert res.output == f"named\n{mangled}\n"


def test_query_list_shows_first_sentences_and_json_whole_texts() -> None:
    from nsight_analytics import queries

    lib = queries.library()
    res = invoke("query", "--list", "--format", "json")
    rows = {r["query"]: r for r in json.loads(res.output)}
    assert set(rows) == set(lib)
    assert all(rows[n]["answers"] == q.doc for n, q in lib.items())
    assert rows["gaps"]["columns"].split(", ") == [c.name for c in lib["gaps"].columns]
    doc = lib["occupancy"].doc
    assert "launch__occupancy_limit_*" in doc


@pytest.mark.parametrize("columns", [80, 200])
def test_query_list_is_one_line_per_query_cut_to_the_terminal(columns: int) -> None:
    from nsight_analytics import queries

    lib = queries.library()
    res = CliRunner().invoke(main, ["query", "--list"], env={"COLUMNS": str(columns)})
    assert res.exit_code == EXIT_OK, res.output
    lines = res.output.splitlines()
    families = {q.family for q in lib.values()}
    assert len(lines) == len(lib) + len(families) + 1  # a line per family, per query, and the last
    assert max(map(len, lines)) <= columns
    assert lines[-1].startswith(f"{len(lib)} queries; `nsa query --list NAME`")
    listed = {}
    for line in lines[:-1]:
        if not line.startswith(" "):
            family = line.rstrip(":")
            continue
        name, headline = line.split(maxsplit=1)
        listed[name] = (family, headline)
    assert set(listed) == set(lib)
    for name, (family, headline) in listed.items():
        q = lib[name]
        assert family == q.family
        text = " ".join(q.doc.split())
        # the headline is the contract's first words up to its first '. ' or ': ', whole or cut with "..."
        assert text.startswith(headline.removesuffix("...").rstrip(".")), (name, headline)
    assert listed["occupancy"][1] == "Occupancy per ncu kernel launch."
    assert "launch__occupancy_limit_*" not in res.output


def test_query_list_name_shows_the_whole_contract() -> None:
    from nsight_analytics import queries

    q = queries.library()["gaps"]
    res = CliRunner().invoke(main, ["query", "--list", "gaps"], env={"COLUMNS": "80"})
    assert res.exit_code == EXIT_OK, res.output
    text = " ".join(res.output.split())
    assert res.output.startswith("gaps (nsys: queries/nsys/gaps.sql)\n")
    assert " ".join(q.doc.split()) in text
    for p in q.params:
        assert f"{p.name} ({p.type}, default {p.default})" in text
    for c in q.columns:
        assert f"{c.name} ({c.type}): {' '.join(c.doc.split())}" in text
    assert max(map(len, res.output.splitlines())) <= 80
    as_json = json.loads(invoke("query", "--list", "gaps", "--format", "json").output)
    assert [r["query"] for r in as_json] == ["gaps"]
    missing = invoke("query", "--list", "no_such_query")
    assert missing.exit_code == EXIT_ERROR
    assert "no_such_query" in missing.output
