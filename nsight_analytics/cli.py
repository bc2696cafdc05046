"""`nsa`: a thin click layer over the library. Nothing below this module imports click."""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import click
import duckdb

from . import api, queries, schema
from . import output as out
from . import params as sql_params
from .errors import NsaError
from .ingest import IngestResult, ensure_loaded, ingest_file
from .ingest.nsys import DERIVED
from .workspace import ENV_DB, open_workspace

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


class NsaClickError(click.ClickException):
    exit_code = EXIT_ERROR


def db_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--db",
        envvar=ENV_DB,
        type=click.Path(dir_okay=False),
        default=None,
        help=f"Workspace file (default ./nsa.duckdb, or ${ENV_DB}).",
    )(f)


def format_option(choices: tuple[str, ...] = out.FORMATS) -> Callable[..., Any]:
    return click.option(
        "--format", "fmt", type=click.Choice(choices), default=choices[0], show_default=True,
        help="Output format; machine formats print only data.",
    )  # fmt: skip


def output_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--output", "-o", "output_path", type=click.Path(dir_okay=False), help="Write to FILE instead of stdout."
    )(f)


@contextmanager
def errors() -> Iterator[None]:
    """Every error a user can act on becomes one sentence on stderr and exit code 2."""
    try:
        yield
    except NsaError as exc:
        raise NsaClickError(str(exc)) from exc
    except duckdb.Error as exc:
        raise NsaClickError(str(exc).strip().splitlines()[0]) from exc


def emit(text: str, path: str | None) -> None:
    if path:
        Path(path).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nsight-analytics")
def main() -> None:
    """Answers from Nsight Systems and Nsight Compute exports.

    Ingest nsys SQLite exports and ncu CSVs into one DuckDB workspace, then ask questions:
    `nsa query gaps`, `nsa findings`, or your own SQL with `nsa sql`.
    """


def _progress(quiet: bool) -> tuple[Any, Callable[[str, int, int], None] | None]:
    if quiet or not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True)
    task = bar.add_task("ingest", total=1)

    def update(step: str, done: int, total: int) -> None:
        bar.update(task, description=f"ingest: {step}", completed=done, total=total)

    return bar, update


def _describe(r: IngestResult) -> str:
    if r.status == "unchanged":
        return f"{r.path.name}: already in the workspace as report {r.report_id} (same content); use --replace to re-ingest."
    counts = ", ".join(f"{v:,} {k}" for k, v in r.rows.items() if v)
    verb = "replaced" if r.status == "replaced" else "ingested"
    text = f"{r.path.name}: {verb} as report {r.report_id} ({r.kind}): {counts or 'no rows'}"
    copied_later = [t for t in r.deferred if t not in DERIVED]  # derived steps follow their tables
    if copied_later:
        text += f"; {', '.join(copied_later)} copied on first use (--full copies now)"
    return text + "."


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--replace", is_flag=True, help="Re-ingest files already in the workspace.")
@click.option("--full", is_flag=True, help="Copy every table now instead of deferring NVTX/OS runtime to first use.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@db_option
def ingest(files: tuple[str, ...], replace: bool, full: bool, quiet: bool, db: str | None) -> None:
    """Ingest nsys SQLite exports and ncu CSV files (detected from content)."""
    with errors():
        con = open_workspace(db)
        try:
            for f in files:
                bar, update = _progress(quiet)
                if bar:
                    bar.start()
                try:
                    defer = () if full else api.ingest_deferrable()
                    result = ingest_file(con, f, replace=replace, defer=defer, progress=update)
                finally:
                    if bar:
                        bar.stop()
                click.echo(_describe(result))
                for warning in result.warnings:
                    click.echo(f"warning: {warning}", err=True)
        finally:
            con.close()


@main.command()
@db_option
@format_option()
@output_option
def reports(db: str | None, fmt: str, output_path: str | None) -> None:
    """List the reports in the workspace."""
    with errors():
        con = open_workspace(db, read_only=True)
        res = out.Result.of(con.sql(
            "SELECT report_id, kind, tool_version, schema_version, activity_kinds, "
            "regexp_extract(source_path, '[^/]+$') AS file, ingested_at FROM reports ORDER BY report_id"
        ))  # fmt: skip
        emit(out.render(res, fmt, "reports"), output_path)


@main.command()
@click.argument("statement")
@click.option(
    "--read-only", is_flag=True, help="Open the workspace read-only, so other readers can run at the same time."
)
@db_option
@format_option()
@output_option
def sql(statement: str, read_only: bool, db: str | None, fmt: str, output_path: str | None) -> None:
    """Run one SQL statement on the workspace (canonical tables and query macros)."""
    with errors():
        needs = api.tables_needed(statement)
        if read_only:
            con = api.reader(db, needs=needs)
        else:
            con = api.connect(db, load_deferred=False)
            ensure_loaded(con, needs)  # only what this statement reads, not every deferred table
        rel = con.sql(statement)
        emit(out.render(out.Result.of(rel), fmt), output_path)


@main.command()
@click.argument("name", required=False)
@click.option("--list", "list_", is_flag=True, help="List the library queries and their contracts.")
@click.option("--report", "report_id", type=int, help="Only this report.")
@click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE", help="Query parameter (repeatable).")
@db_option
@format_option()
@output_option
def query(
    name: str | None,
    list_: bool,
    report_id: int | None,
    params: tuple[str, ...],
    db: str | None,
    fmt: str,
    output_path: str | None,
) -> None:
    """Run a library query by NAME, e.g. `nsa query gaps -p min_gap_ns=100000`."""
    with errors():
        if list_ or not name:
            # machines get the whole text; `docs/queries.md` has it for people
            emit(out.render(_query_list(full=fmt != "table"), fmt, "queries"), output_path)
            return
        from .rules.config import parse_assignments

        values: dict[str, Any] = dict(parse_assignments(params, "-p", "min_gap_ns=100000"))
        if report_id is not None:
            values["report_id"] = report_id
        con = api.reader(db, needs=queries.get(name).tables())
        res = out.Result.of(api.query(con, name, **values))
        emit(out.render(res, fmt, name), output_path)


def _query_list(full: bool) -> out.Result:
    """One row per library query; a table shows the first sentence of each contract's text."""
    rows = []
    for q in queries.library().values():
        params = ", ".join(f"{p.name}={p.default}" if p.default else p.name for p in q.params)
        doc = q.doc if full else re.split(r"(?<=\.)\s", q.doc, maxsplit=1)[0]
        rows.append({"query": q.name, "family": q.family, "parameters": params, "answers": doc})
    return out.Result.of_records(rows)


@main.command("schema")
@click.option("--format", "fmt", type=click.Choice(["markdown", *out.FORMATS]), default="markdown", show_default=True)
@output_option
def schema_cmd(fmt: str, output_path: str | None) -> None:
    """Print the canonical tables: columns, types, units, meaning."""
    if fmt == "markdown":
        emit(schema.render_markdown() + "\n", output_path)
        return
    rows = [
        {"table": t.name, "column": c.name, "type": c.type, "unit": c.unit, "meaning": c.doc}
        for t in schema.TABLES
        for c in t.cols
    ]
    emit(out.render(out.Result.of_records(rows), fmt), output_path)


def demo_input() -> Path:
    return Path(str(resources.files("nsight_analytics") / "data" / "demo_pageable_h2d.sqlite"))


@main.command()
@click.option("--db", type=click.Path(dir_okay=False), help="Keep the demo workspace here (default: a temporary one).")
def demo(db: str | None) -> None:
    """Ingest the bundled demo export (a real H100 capture) and show what nsa finds in it."""
    from .rules import run_rules
    from .rules.render import render

    with errors(), tempfile.TemporaryDirectory() as tmp:
        path = Path(db) if db else Path(tmp) / "demo.duckdb"
        con = api.connect(path)
        try:
            result = ingest_file(con, demo_input(), defer=())
            click.echo(f"$ nsa ingest {demo_input().name}\n{_describe(result)}\n")
            click.echo("$ nsa query utilization")
            click.echo(out.render(out.Result.of(api.query(con, "utilization")), "table"))
            click.echo("$ nsa findings")
            names = {result.report_id: demo_input().name}
            click.echo(render(run_rules(con), "text", names), nl=False)
        finally:
            con.close()


# --- findings and rules (nsight_analytics.rules) -------------------------------------------------


def _rules_config(config_path: str | None, sets: tuple[str, ...]) -> dict[str, Any]:
    from .rules.config import load_config, parse_overrides

    return load_config(config_path, parse_overrides(sets))


@main.command()
@click.option("--report", "report_id", type=int, help="Only this report.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True,
    help="text for people, markdown for tickets, json (an array of findings) for machines.",
)  # fmt: skip
@click.option(
    "--fail-on", type=click.Choice(["warning", "critical"]), default=None,
    help=f"Exit {EXIT_FINDINGS} when a finding at or above this severity exists (for CI).",
)  # fmt: skip
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML file of rule thresholds.")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Override one threshold (repeatable).")
@db_option
@output_option
def findings(
    report_id: int | None,
    fmt: str,
    fail_on: str | None,
    config_path: str | None,
    sets: tuple[str, ...],
    db: str | None,
    output_path: str | None,
) -> None:
    """Run the rules and print ranked findings: evidence, fix, estimated savings."""
    from .rules import SEVERITIES, run_rules
    from .rules.engine import DEFERRED_TABLES_READ
    from .rules.render import render

    with errors():
        config = _rules_config(config_path, sets)
        con = api.reader(db, needs=set(DEFERRED_TABLES_READ))
        try:
            if report_id is not None and not sql_params.execute(
                con, "SELECT count(*) FROM reports WHERE report_id = $rid", {"rid": report_id}
            ).fetchone()[0]:
                raise NsaClickError(f"no report {report_id} in the workspace; `nsa reports` lists them.")
            found = run_rules(con, report_id=report_id, config=config)
            names = dict(con.execute("SELECT report_id, regexp_extract(source_path, '[^/]+$') FROM reports").fetchall())
        finally:
            con.close()
        emit(render(found, fmt, names), output_path)
    if fail_on is not None:
        floor = SEVERITIES.index(fail_on)
        if any(SEVERITIES.index(f.severity) >= floor for f in found):
            sys.exit(EXIT_FINDINGS)


@main.command("rules")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True)
@output_option
def rules_cmd(fmt: str, output_path: str | None) -> None:
    """List the rules: id, severities, thresholds (with defaults), what each one looks for."""
    from .rules import DEFAULTS, rules

    rows = [
        {
            "rule": r.id,
            "reads": r.kind,
            "severity": " / ".join(r.severities),
            "thresholds": ", ".join(f"{t}={DEFAULTS[t].default}" for t in r.thresholds),
            "looks for": r.summary,
        }
        for r in rules()
    ]
    if fmt == "markdown":
        lines = ["| rule | reads | severity | thresholds | looks for |", "|---|---|---|---|---|"]
        lines += [f"| `{x['rule']}` | {x['reads']} | {x['severity']} | {x['thresholds']} | {x['looks for']} |" for x in rows]
        lines += ["", "| threshold | default | unit | meaning |", "|---|---|---|---|"]
        lines += [f"| `{t.name}` | {t.default} | {t.unit} | {t.doc} |" for t in DEFAULTS.values()]
        emit("\n".join(lines) + "\n", output_path)
        return
    if fmt == "json":
        emit(out.render(out.Result.of_records(rows), "json"), output_path)
        return
    text = out.to_table(out.Result.of_records(rows), "rules")
    text += out.to_table(
        out.Result.of_records([{"threshold": t.name, "default": str(t.default), "unit": t.unit, "meaning": t.doc}
                      for t in DEFAULTS.values()]),
        "thresholds (change with --config FILE or --set name=value)",
    )  # fmt: skip
    emit(text, output_path)
