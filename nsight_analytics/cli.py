"""`nsa`: a thin click layer over the facade (`api`) and the renderers (`render`).

Nothing below this module imports click; this module imports nothing below the facade
(pyproject.toml's import-linter contract, run by tests/test_layers.py). The facade, and DuckDB
with it, is imported inside the commands that use it: `nsa --help`, `nsa --version` and usage
errors answer without loading either (tests/test_cli_startup.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import render
from .errors import INTERRUPTED, NsaError, WorkspaceError, os_problem
from .names import DATASET_MANIFEST, ENV_DB, GATE_METRICS
from .timing import timed

if TYPE_CHECKING:
    import duckdb

    from . import api

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


class NsaClickError(click.ClickException):
    exit_code = EXIT_ERROR


class Interrupted(click.ClickException):
    """Ctrl-C: one line (no "Error:", no traceback) and exit 130."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str = INTERRUPTED) -> None:
        super().__init__(message)

    def show(self, file: Any = None) -> None:
        click.echo(self.format_message(), err=True)


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C, as Python raises it or as DuckDB reports a query it stopped for it."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if type(exc).__name__ == "InterruptException":  # duckdb's, without importing DuckDB here
        return True
    return isinstance(exc, RuntimeError) and str(exc).strip() == "Query interrupted"


class NsaGroup(click.Group):
    """Every command's failure ends as one sentence: Ctrl-C as exit 130, a file-system problem
    nothing caught earlier (a symbolic link loop, a name too long, a full disk) as exit 2.
    Exit 1 stays reserved for findings at or above --fail-on (and the diff gate)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BaseException as exc:
            if _interrupted(exc) or _interrupted(exc.__context__ or exc):
                raise Interrupted() from None
            problem = os_problem(exc) if isinstance(exc, Exception) else None
            if problem is None:
                raise
            raise NsaClickError(problem) from exc


def db_option(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--data",
        metavar="DIR",
        type=click.Path(file_okay=False),
        expose_value=False,
        callback=_data_dir,
        help="Read a Parquet dataset (`nsa export DIR`) instead of a workspace; read-only.",
    )(f)
    return click.option(
        "--db",
        envvar=ENV_DB,
        type=click.Path(dir_okay=False),
        default=None,
        callback=_db_or_data,
        help=f"Workspace file (default ./nsa.duckdb, or ${ENV_DB}).",
    )(f)


def _data_dir(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """--data DIR: the dataset folder goes on as the command's `db` (the facade opens a folder as
    a dataset), once DIR is known to be one."""
    if value is None:
        return
    path = Path(value).expanduser()
    if not (path / DATASET_MANIFEST).is_file():
        raise NsaClickError(
            f"{path} is not an nsa dataset (no {DATASET_MANIFEST} in it); write one with `nsa export {path}`."
        )
    ctx.meta["nsa.data"] = str(path)
    _db_or_data(ctx, param, ctx.params.get("db"))
    if "db" in ctx.params:  # --db was read first
        ctx.params["db"] = str(path)


def _db_or_data(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    data = ctx.meta.get("nsa.data")
    if data is None:
        return value
    source = ctx.get_parameter_source("db")
    if value is not None and source is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("give --db or --data, not both.", ctx)
    return str(data)


def format_option(choices: tuple[str, ...] = render.FORMATS) -> Callable[..., Any]:
    return click.option(
        "--format", "fmt", type=click.Choice(choices), default=choices[0], show_default=True,
        help="Output format; machine formats print only data.",
    )  # fmt: skip


def wide_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--wide", is_flag=True,
        help="Tables: every column and full kernel names (default: the columns that fit the terminal; "
        "template arguments, arguments and namespaces elided).",
    )(f)  # fmt: skip


TABLE_ROWS = 50  # rows a table shows unless --limit or --all


def limit_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--all", "all_rows", is_flag=True, help="Tables: every row.")(f)
    return click.option(
        "--limit", type=click.IntRange(min=1), metavar="N",
        help=f"At most N rows (tables show the first {TABLE_ROWS} by default, other formats every row).",
    )(f)  # fmt: skip


def _row_limit(fmt: str, limit: int | None, all_rows: bool, path: str | None) -> int | None:
    """The rows to fetch: --limit, else TABLE_ROWS for a table unless --all; parquet only to a file."""
    if all_rows and limit is not None:
        raise NsaClickError("give --limit N or --all, not both.")
    if fmt == "parquet" and not path:
        raise NsaClickError("parquet is a binary file format: write it to a file with -o FILE.")
    if limit is None and fmt == "table" and not all_rows:
        return TABLE_ROWS
    return limit


def _check_output(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an --output path that cannot be written before any work is done."""
    if value is None:
        return None
    path = Path(value).expanduser()
    folder = path.parent
    if path.is_dir():
        raise NsaClickError(f"--output {value} is a folder; give a file name in it.")
    if not folder.is_dir():
        raise NsaClickError(
            f"--output {value}: folder {folder} does not exist; create it first or choose another path."
        )
    return value


def output_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--output", "-o", "output_path", type=click.Path(), metavar="FILE", callback=_check_output,
        help="Write to FILE instead of stdout.",
    )(f)  # fmt: skip


def engine_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--engine duckdb|spark and --spark-master URL (`nsa query`): where a library query runs."""
    f = click.option(
        "--spark-master", metavar="URL", envvar="NSA_SPARK_MASTER", expose_value=False, callback=_remember,
        help="Spark to run on with --engine spark: spark://host:7077, sc://host (Spark Connect); "
        "default $SPARK_REMOTE, else local mode.",
    )(f)  # fmt: skip
    return click.option(
        "--engine", type=click.Choice(("duckdb", "spark")), default="duckdb", show_default=True,
        expose_value=False, callback=_remember,
        help="Run the query on DuckDB, or on Apache Spark over a dataset given with --data "
        "(pip install 'nsight-analytics[spark]').",
    )(f)  # fmt: skip


def _spark_query(name: str, run: str | None, values: dict[str, Any]) -> Any:
    """`nsa query NAME --engine spark --data DIR`: the rows Spark returns, as a relation."""
    from . import api

    meta = click.get_current_context().meta
    data = meta.get("nsa.data")
    if data is None:
        raise NsaClickError(
            "--engine spark reads a Parquet dataset: give --data DIR (write one with `nsa export DIR`)."
        )
    if run is not None:
        raise NsaClickError(
            "--engine spark takes no --run yet; give the reports with --report or -p report_id=."
        )
    with timed(log, f"query {name} on spark"):
        return api.spark_query(data, name, master=meta.get("nsa.spark_master"), **values)


def extension_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--rules DIR and --queries DIR: a team's rule packs and .sql queries (`_extend` loads them)."""
    f = click.option(
        "--queries", "query_dirs", multiple=True, metavar="DIR", type=click.Path(file_okay=False),
        expose_value=False, callback=_remember,
        help="A folder of your own .sql queries (repeatable); also `queries = [...]` in the settings file.",
    )(f)  # fmt: skip
    return click.option(
        "--rules", "rule_dirs", multiple=True, metavar="DIR", type=click.Path(file_okay=False),
        expose_value=False, callback=_remember,
        help="A folder of TOML rule packs (repeatable); also `rules = [...]` in the settings file.",
    )(f)  # fmt: skip


def _remember(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> None:
    ctx.meta[f"nsa.{param.name}"] = value


def _extend(config_path: str | None = None, no_config: bool = False) -> None:
    """Load the plugins, then the query and rule folders of the settings file (--config FILE, else
    the one found; none with --no-config) and of --queries / --rules."""
    from . import api

    meta = click.get_current_context().meta
    settings: Any = config_path if config_path is not None else None if no_config else api.config_file()
    api.extend(meta.get("nsa.rule_dirs", ()), meta.get("nsa.query_dirs", ()), settings)


@contextmanager
def errors() -> Iterator[None]:
    """Every error a user can act on becomes one sentence on stderr and exit code 2; Ctrl-C
    becomes one line and exit 130 (NsaGroup)."""
    try:
        yield
    except NsaError as exc:
        raise NsaClickError(str(exc)) from exc
    except click.ClickException:
        raise
    except Exception as exc:
        if _interrupted(exc):
            raise Interrupted() from None
        problem = os_problem(exc)
        if problem is not None:
            raise NsaClickError(problem) from exc
        import duckdb  # loaded already by the command that raised it, if DuckDB did

        if not isinstance(exc, duckdb.Error):
            raise
        raise NsaClickError(str(exc).strip().splitlines()[0]) from exc


def _missing_input(path: Path) -> str:
    """Why an input path names no file: a symbolic link loop, a link to nothing, or nothing there."""
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:  # RuntimeError: a loop, on Python 3.10-3.12
            problem = os_problem(exc)
            if problem is not None:
                return problem
        return f"{path} is a symbolic link to {os.readlink(path)}, which does not exist."
    return f"{path}: no such file."


def emit(text: str, path: str | None) -> None:
    if not path:
        click.echo(text, nl=False)
        return
    write_file(path, text)


def write_file(path: str, content: str | bytes | Callable[[Path], None]) -> None:
    """Write an --output file whole or not at all (render.write_atomic: a temporary file beside
    it, renamed into place); a failure, such as a full disk, is one sentence and exit 2, and
    leaves the file as it was."""
    existed = Path(path).expanduser().exists()
    try:
        render.write_atomic(path, content)
    except OSError as exc:
        raise NsaClickError(_unwritten(path, str(exc.strerror or exc), existed)) from exc
    except Exception as exc:
        import duckdb  # a COPY that wrote the file failed in DuckDB

        if not isinstance(exc, duckdb.IOException):
            raise
        reason = str(exc).strip().splitlines()[0].rsplit(": ", 1)[-1]
        raise NsaClickError(_unwritten(path, reason, existed)) from exc


def _unwritten(path: str, reason: str, existed: bool) -> str:
    kept = f"{path} is unchanged" if existed else "nothing was written"
    return f"cannot write {path} ({reason}); {kept}; choose another --output path."


def emit_rows(
    rel: duckdb.DuckDBPyRelation | None,
    fmt: str,
    path: str | None,
    title: str | None = None,
    units: dict[str, str] | None = None,
    wide: bool = False,
    limit: int | None = None,
) -> None:
    """A relation's rows in `fmt`: csv, json and parquet written by DuckDB straight into the
    --output file or stdout, never gathered here; a table or Markdown fetches only the `limit`
    rows it shows, and a table says how many more there are."""
    if rel is not None and fmt in render.COPY_FORMATS:
        rows = rel if limit is None else rel.limit(limit)
        if path:
            write_file(path, lambda tmp: render.copy_rows(rows, fmt, tmp))
            return
        sys.stdout.flush()
        stdout = sys.stdout.buffer
        try:
            render.stream_rows(rows, fmt, stdout)
            stdout.flush()
        except BrokenPipeError:  # the reader stopped early (`nsa query ... | head`): not an error
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
            except (OSError, ValueError):
                pass
            raise click.exceptions.Exit(EXIT_OK) from None
        return
    res, total = render.head(rel, limit, units)
    emit(render.render(res, fmt, title, wide=wide, total=total), path)


class _EchoHandler(logging.Handler):
    """Log records on stderr through click, so they follow click's (and CliRunner's) streams."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(self.format(record), err=True)


_VERBOSE = _EchoHandler()
_VERBOSE.setFormatter(logging.Formatter("nsa: %(message)s"))


def _set_verbose(on: bool) -> None:
    package = logging.getLogger("nsight_analytics")
    if on:
        if _VERBOSE not in package.handlers:
            package.addHandler(_VERBOSE)
        package.setLevel(logging.INFO)
    else:
        package.removeHandler(_VERBOSE)
        package.setLevel(logging.NOTSET)


@click.group(cls=NsaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nsight-analytics")
@click.option("--verbose", "-v", is_flag=True, help="Log each step and how long it took, on stderr.")
def main(verbose: bool) -> None:
    """Answers from Nsight Systems, Nsight Compute and PyTorch profiler captures.

    Ingest nsys and ncu reports or exports, PyTorch profiler traces and power logs into one
    DuckDB workspace, then ask questions: `nsa summary`, `nsa findings`, `nsa query gaps`,
    `nsa diff A B`, `nsa report -o report.html`, or your own SQL with `nsa sql`.

    Exit codes: 0 ok, 1 findings at or above `nsa findings --fail-on` (or `nsa diff
    --fail-on-regression` fired), 2 a usage or input error (one sentence on stderr saying what
    to do; the workspace is left unchanged), 130 interrupted (Ctrl-C; unchanged too).
    """
    _set_verbose(verbose)


# --- shell completion (`eval "$(_NSA_COMPLETE=bash_source nsa)"`; zsh_source, fish_source) ------
# Each completer answers from the library or the workspace and never fails: a workspace that
# cannot be opened completes nothing.


def _complete_query(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from . import api

    return [
        CompletionItem(q.name, help=render.query_headline(q))
        for q in api.library()
        if q.name.startswith(incomplete)
    ]


def _complete_param(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """`-p NAME=`: the chosen query's parameters not given yet; after `NAME=`, its allowed values."""
    import itertools

    from click.shell_completion import CompletionItem

    from . import api

    # an option still waiting for its value stops click's parse: the words it left are in ctx.args
    words = list(ctx.args)
    name = ctx.params.get("name") or next((w for w in words if not w.startswith("-")), "")
    try:
        q = api.get_query(name)
    except NsaError:
        return []
    if "=" in incomplete:
        key, _, value = incomplete.partition("=")
        allowed = next((p.allowed for p in q.params if p.name == key), ())
        return [CompletionItem(f"{key}={v}") for v in allowed if v.startswith(value)]
    pairs = [
        *(ctx.params.get("params") or ()),
        *(v for k, v in itertools.pairwise(words) if k in ("-p", "--param")),
    ]
    given = {v.split("=", 1)[0] for v in pairs}
    return [
        CompletionItem(f"{p.name}=", help=p.doc)
        for p in q.params
        if p.name.startswith(incomplete) and p.name not in given
    ]


def _workspace_names(ctx: click.Context) -> tuple[dict[int, str], list[tuple[int, str]]]:
    """({report id: file name}, [(run id, run name)]) of the workspace --db names, or nothing."""
    import duckdb

    from . import api

    try:
        con = api.reader(ctx.params.get("db"))
        try:
            return api.report_names(con), [(int(r[0]), str(r[1])) for r in api.runs(con).fetchall()]
        finally:
            con.close()
    except (NsaError, OSError, duckdb.Error):  # completion never fails, whatever the workspace
        return {}, []


def _complete_report(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    reports, _ = _workspace_names(ctx)
    return [
        CompletionItem(str(i), help=f) for i, f in sorted(reports.items()) if str(i).startswith(incomplete)
    ]


def _complete_run(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    _, runs = _workspace_names(ctx)
    items = [CompletionItem(name, help=f"run {i}") for i, name in runs if name.startswith(incomplete)]
    return items + [CompletionItem(str(i), help=name) for i, name in runs if str(i).startswith(incomplete)]


def _complete_side(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """`nsa diff A B`: report ids (runs with --run), else files."""
    from click.shell_completion import CompletionItem

    if ctx.params.get("runs"):
        return _complete_run(ctx, param, incomplete)
    if incomplete and not incomplete[0].isdigit():
        return [CompletionItem(incomplete, type="file")]
    return _complete_report(ctx, param, incomplete) + [CompletionItem(incomplete, type="file")]


def _progress(quiet: bool, console: Any = None) -> tuple[Any, Callable[[str, int, int], None] | None]:
    """A progress bar on stderr (a terminal only): the step, the share done, time spent and left.
    Readers report `(step, done, total)` in units of their own (nsys: rows of the export's tables)."""
    if console is None and (quiet or not sys.stderr.isatty()):
        return None, None
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),  # 42%
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        transient=True,
        console=console,
    )
    task = bar.add_task("ingest", total=1)

    def update(step: str, done: int, total: int) -> None:
        bar.update(task, description=f"ingest: {step}", completed=done, total=max(total, 1))

    return bar, update


def _describe(r: api.IngestResult) -> str:
    from . import api

    if r.status == "unchanged":
        return f"{r.path.name}: already in the workspace as report {r.report_id} (same content); use --replace to re-ingest."
    counts = ", ".join(f"{v:,} {k}" for k, v in r.rows.items() if v)
    verb = "replaced" if r.status == "replaced" else "ingested"
    text = f"{r.path.name}: {verb} as report {r.report_id} ({r.format}): {counts or 'no rows'}"
    copied_later = [t for t in r.deferred if t not in api.worked_out()]  # worked out, not copied
    if copied_later:
        text += f"; {', '.join(copied_later)} copied on first use (--full copies now)"
    return text + "."


@main.command(short_help="Ingest profiler reports, exports, traces and power logs.")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--replace", is_flag=True, help="Re-ingest files already in the workspace.")
@click.option(
    "--full", is_flag=True, help="Copy every table now instead of deferring NVTX/OS runtime to first use."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option(
    "--timezone",
    metavar="ZONE",
    help="Zone of nvidia-smi logs' local timestamps (Europe/Paris, UTC); default: this machine's.",
)
@click.option(
    "--run", "run_name", metavar="NAME",
    help="The files (or a folder or .tar of them) are the ranks of one job: make them the run NAME.",
)  # fmt: skip
@db_option
def ingest(
    files: tuple[str, ...],
    replace: bool,
    full: bool,
    quiet: bool,
    timezone: str | None,
    run_name: str | None,
    db: str | None,
) -> None:
    """Ingest nsys reports (.nsys-rep, through your nsys) and SQLite exports, ncu reports
    (.ncu-rep) and CSV exports, PyTorch profiler traces and NVML / nvidia-smi power logs, plain
    or gzip-compressed; the format is detected from the content. A folder or a .tar(.gz) of
    files is ingested file by file.

    Each file is all or nothing. With several files, every file that can be ingested is, one
    line each says what happened to it, and the exit code is 2 if any failed.

    The ranks of a multi-GPU job form a run (`nsa runs`): with --run NAME, or on their own when
    the files say so (PyTorch profiler traces with distributedInfo, names differing by a rank
    number such as out_rank0 / out_rank1, one nsys report of several GPU processes).
    """
    if len(files) == 1 and not Path(files[0]).expanduser().exists():  # said before DuckDB loads
        raise NsaClickError(_missing_input(Path(files[0]).expanduser()))
    import duckdb

    from . import api

    failed: list[str] = []
    ingested: list[int] = []
    with errors():
        paths, skipped = api.expand_inputs(files, db)
        for s in skipped:
            click.echo(f"{s.name}: skipped (no reader knows this file)", err=True)
        if not paths:
            raise NsaClickError(
                f"{', '.join(files)} is a folder with no report, export, trace or power log nsa can read "
                f"in it{f' ({len(skipped)} other files skipped)' if skipped else ''}; give those files, or the "
                "folder that holds them."
            )
        target = api.resolve_db_path(db)
        fresh = not target.exists()  # a workspace this command creates goes again if nothing lands in it
        con = api.connect(db, load_deferred=False, standalone=True)
        try:
            for f in map(str, paths):
                try:
                    result = _ingest_one(con, f, replace, full, quiet, timezone)
                except (NsaError, duckdb.Error) as exc:
                    if len(files) == 1 or isinstance(exc, WorkspaceError):
                        raise
                    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    click.echo(f"{Path(f).name}: failed: {reason}", err=True)
                    failed.append(Path(f).name)
                    continue
                click.echo(_describe(result))
                ingested.append(result.report_id)
                for warning in result.warnings:
                    click.echo(f"warning: {warning}", err=True)
            if run_name is not None and failed:
                raise NsaClickError(
                    f"run {run_name} not made: {len(failed)} of its files failed ({', '.join(failed)}); "
                    "fix them and run `nsa ingest --run` on all of them again."
                )
            made = [api.make_run(con, ingested, run_name)] if run_name is not None and ingested else []
            if run_name is None and ingested:
                made = api.group_runs(con, ingested)
            for run_id in made:
                click.echo(_describe_run(con, run_id))
        except BaseException as exc:
            if ingested and _interrupted(exc):  # the files before are in; the one cut short is not
                raise Interrupted(
                    f"interrupted; reports {', '.join(map(str, ingested))} were ingested before it, "
                    "the file being ingested was not."
                ) from None
            raise
        finally:
            con.close()
            if fresh and not ingested:
                for leftover in (target, target.with_name(target.name + ".wal")):
                    leftover.unlink(missing_ok=True)
    if failed:
        raise NsaClickError(
            f"{len(failed)} of {len(paths)} files not ingested ({', '.join(failed)}); "
            "fix them and run `nsa ingest` on them again."
        )


def _describe_run(con: duckdb.DuckDBPyConnection, run_id: int) -> str:
    from . import api

    row = api.runs(con).filter(f"run_id = {int(run_id)}").fetchone()
    assert row is not None
    _, name, world, seen, _, source, clock, unc, report_ids = row
    of = f" of {world}" if world and world != seen else ""
    where = (
        f"reports {', '.join(map(str, report_ids))}"
        if len(set(report_ids)) > 1
        else f"report {report_ids[0]}"
    )
    sure = f", within {render.duration(unc)}" if unc else ""
    return (
        f"run {run_id} ({name}): {seen} rank{'s' if seen != 1 else ''}{of} in {where}; ranks from {source}, "
        f"clocks aligned on {clock}{sure}."
    )


def _ingest_one(
    con: duckdb.DuckDBPyConnection,
    path: str,
    replace: bool,
    full: bool,
    quiet: bool,
    timezone: str | None = None,
) -> api.IngestResult:
    from . import api

    bar, update = _progress(quiet)
    if bar:
        bar.start()
    try:
        defer = () if full else api.ingest_deferrable()
        with timed(log, f"ingest {Path(path).name}"):
            options = {"timezone": timezone} if timezone else {}
            return api.ingest(con, path, replace=replace, defer=defer, progress=update, options=options)
    finally:
        if bar:
            bar.stop()


@main.command(short_help="List the reports in the workspace.")
@db_option
@format_option()
@output_option
def reports(db: str | None, fmt: str, output_path: str | None) -> None:
    """List the reports in the workspace."""
    from . import api

    with errors():
        con = api.reader(db)
        emit(render.render(render.Result.of(api.reports(con)), fmt, "reports"), output_path)


@main.command(short_help="List the runs (the ranks of multi-GPU jobs) in the workspace.")
@click.option(
    "--ranks", "show_ranks", is_flag=True, help="One row per rank: its report, process, GPU, clock offset."
)
@click.option("--run", "run", metavar="RUN", help="Only this run (id or name).", shell_complete=_complete_run)
@db_option
@format_option()
@wide_option
@output_option
def runs(
    show_ranks: bool, run: str | None, db: str | None, fmt: str, wide: bool, output_path: str | None
) -> None:
    """List the runs: name, world size, ranks held, how ranks were found and clocks aligned."""
    from . import api

    with errors():
        con = api.reader(db)
        if show_ranks or run is not None:
            rel = api.ranks(con, run)
        else:
            rel = api.runs(con)
        emit(
            render.render(render.Result.of(rel), fmt, "ranks" if show_ranks or run else "runs", wide=wide),
            output_path,
        )


@main.command(short_help="One screen per report: GPU busy, top kernels, copies.")
@click.option("--report", "report_id", type=int, help="Only this report.", shell_complete=_complete_report)
@click.option(
    "--run", "run", metavar="RUN", help="One screen for this run (id or name): its ranks side by side.",
    shell_complete=_complete_run,
)  # fmt: skip
@db_option
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="text for people; json for machines (base units: ns, bytes).",
)  # fmt: skip
@wide_option
@output_option
def summary(
    report_id: int | None, run: str | None, db: str | None, fmt: str, wide: bool, output_path: str | None
) -> None:
    """What each report holds at a glance: per GPU the span, busy and idle time, the top five
    kernels by GPU time and the copies by direction, over the whole capture. With --run, one
    screen for a multi-GPU run: per rank its steady step, compute, communication and the part
    exposed, GPU idle, time waiting in collectives and lateness; the matched collectives; the
    scaling against other world sizes of the same program."""
    from . import api

    with errors():
        if run is not None:
            if report_id is not None:
                raise NsaClickError("give --run or --report, not both.")

            def known(c: duckdb.DuckDBPyConnection) -> None:
                api.resolve_run(c, run)

            con = api.reader(db, needs=api.run_summary_reads(), check=known)
            emit(render.render_run_summary(api.run_summary(con, run), fmt), output_path)
            return
        con = api.reader(db)
        emit(render.render_summary(api.summary(con, report_id), fmt, wide), output_path)


@main.command(short_help="Run your own SQL on the workspace.")
@click.argument("statement")
@click.option(
    "--read-only",
    is_flag=True,
    help="Open the workspace read-only, so other readers can run at the same time.",
)
@click.option(
    "--allow-writes", is_flag=True,
    help="Allow INSERT/UPDATE/DELETE/DROP/ALTER/CREATE on nsa's own tables (`nsa schema` lists them).",
)  # fmt: skip
@db_option
@format_option(render.ROW_FORMATS)
@wide_option
@limit_options
@output_option
def sql(
    statement: str,
    read_only: bool,
    allow_writes: bool,
    db: str | None,
    fmt: str,
    wide: bool,
    limit: int | None,
    all_rows: bool,
    output_path: str | None,
) -> None:
    """Run one SQL statement on the workspace (canonical tables and query macros).

    Your own tables are yours: `CREATE TABLE mine AS SELECT ...`, `INSERT INTO mine ...`. The
    canonical tables belong to nsa (a `DELETE FROM reports` would leave the report's rows in
    every other table): statements that write to them are refused unless --allow-writes is given.
    """
    from . import api

    with errors():
        rows = _row_limit(fmt, limit, all_rows, output_path)
        api.refuse_extensions(statement)  # these, and writes, are refused before the workspace opens
        if not allow_writes:
            api.refuse_canonical_writes(statement)
        if read_only or not api.writable(db):  # a workspace this user cannot write still answers
            con = api.reader(db, needs=api.tables_needed(statement))
        else:
            con = api.connect(db, load_deferred=False)  # api.sql loads only what the statement reads
        with timed(log, "sql"):
            rel = api.sql(con, statement, allow_writes=True)
        emit_rows(rel, fmt, output_path, wide=wide, limit=rows)


@main.command(short_help="Run a library query by NAME.")
@click.argument("name", required=False, shell_complete=_complete_query)
@click.option(
    "--list", "list_", is_flag=True,
    help="List the library queries, one line each; with NAME, that query's whole contract.",
)  # fmt: skip
@click.option("--report", "report_id", type=int, help="Only this report.", shell_complete=_complete_report)
@click.option(
    "--run", "run", metavar="RUN", help="Only this run (id or name): its ranks' reports.",
    shell_complete=_complete_run,
)  # fmt: skip
@click.option(
    "-p", "--param", "params", multiple=True, metavar="NAME=VALUE", help="Query parameter (repeatable).",
    shell_complete=_complete_param,
)  # fmt: skip
@db_option
@format_option(render.ROW_FORMATS)
@wide_option
@limit_options
@output_option
@extension_options
@engine_options
def query(
    name: str | None,
    list_: bool,
    report_id: int | None,
    run: str | None,
    params: tuple[str, ...],
    db: str | None,
    fmt: str,
    wide: bool,
    limit: int | None,
    all_rows: bool,
    output_path: str | None,
) -> None:
    """Run a library query by NAME, for example `nsa query gaps -p min_gap_ns=100000`.
    `nsa query --list` lists the queries; `nsa query --list NAME` shows what NAME answers, its
    parameters and its columns.

    Parameters and the report are checked before anything runs: a wrong one exits 2 and leaves
    the workspace as it was.
    """
    from . import api

    with errors():
        _extend()
        if list_ or not name:
            emit(_query_list_text(name if list_ else None, fmt), output_path)
            return
        rows = _row_limit(fmt, limit, all_rows, output_path)
        q = api.get_query(name)
        values: dict[str, Any] = dict(api.parse_assignments(params, "-p", "min_gap_ns=100000"))
        if report_id is not None:
            if "report_id" not in {p.name for p in q.params}:
                known = ", ".join(p.name for p in q.params)
                raise NsaClickError(f"query {q.name} takes no --report; set its parameters with -p: {known}.")
            values["report_id"] = report_id
        if run is not None and report_id is not None:
            raise NsaClickError("give --run or --report, not both.")
        bound = q.bind(values)  # a rejected value stops here, before deferred tables are copied
        if click.get_current_context().meta.get("nsa.engine") == "spark":
            rel = _spark_query(q.name, run, values)
            emit_rows(rel, fmt, output_path, name, q.units(), wide, rows)
            return
        reports = [v for k, v in bound.items() if k.endswith("report_id")]

        def check(c: duckdb.DuckDBPyConnection) -> None:
            api.require_reports(c, reports)
            if run is not None:
                api.resolve_run(c, run)

        con = api.reader(db, needs=q.tables(), check=check)
        read = api.run_reports(con, run) if run is not None else reports
        # the relation is lazy: its rows are computed while they are written, under the limit,
        # never held whole (a relation holding them would run again for a table's first rows)
        with api.memory_limit(con, read), timed(log, f"query {q.name}"):
            rel = api.query(con, name, **values) if run is None else api.query_run(con, name, run, **values)
            emit_rows(rel, fmt, output_path, name, q.units(), wide, rows)


@main.command(short_help="Serve the workspace to AI assistants (MCP).")
@db_option
def mcp(db: str | None) -> None:
    """Serve the workspace over the Model Context Protocol on stdin/stdout, for an AI assistant
    to list reports and runs, ingest files, run library queries and read-only SQL, get findings
    and diff reports (docs/mcp.md has the lines to add to an assistant's configuration). Needs
    the optional SDK: pip install 'nsight-analytics[mcp]'.
    """
    from . import mcp_server

    with errors():
        server = mcp_server.build_server(db)
    server.run("stdio")


def _query_list_text(name: str | None, fmt: str) -> str:
    """`nsa query --list [NAME]`: a table is one line per query (or NAME's contract, in words);
    machine formats get every contract's whole text (or NAME's row)."""
    from . import api

    if fmt == "table":
        if name is not None:
            return render.query_contract(api.get_query(name))
        return render.query_index(api.library())
    lib = [api.get_query(name)] if name is not None else api.library()
    rows = []
    for q in lib:
        params = ", ".join(f"{p.name}={p.default}" if p.default else p.name for p in q.params)
        rows.append(
            {"query": q.name, "family": q.family, "parameters": params, "answers": q.doc,
             "reads": ", ".join(sorted(q.tables())), "columns": ", ".join(c.name for c in q.columns)}
        )  # fmt: skip
    return render.render(render.Result.of_records(rows), fmt, "queries")


@main.command("schema", short_help="The canonical tables: columns, types, units, meaning.")
@format_option()
@output_option
def schema_cmd(fmt: str, output_path: str | None) -> None:
    """Print the canonical tables: columns, types, units, meaning (markdown: docs/schema.md)."""
    from . import api

    emit(render.render_schema(api.schema_tables(), fmt), output_path)


def demo_input() -> Path:
    return Path(str(resources.files("nsight_analytics") / "data" / "demo_pageable_h2d.sqlite"))


@main.command(short_help="Show what nsa finds in a bundled real H100 capture.")
@click.option(
    "--db", type=click.Path(dir_okay=False), help="Keep the demo workspace here (default: a temporary one)."
)
def demo(db: str | None) -> None:
    """Ingest the bundled demo export (a real H100 capture) and show what nsa finds in it."""
    from . import api

    with errors(), tempfile.TemporaryDirectory() as tmp:
        path = Path(db) if db else Path(tmp) / "demo.duckdb"
        con = api.connect(path)
        try:
            result = api.ingest(con, demo_input(), defer=())
            width = min(shutil.get_terminal_size((100, 24)).columns, 100)
            click.echo(f"$ nsa ingest {demo_input().name}\n{textwrap.fill(_describe(result), width)}\n")
            click.echo("$ nsa findings")
            names = {result.report_id: demo_input().name}
            click.echo(render.render_findings(api.findings(con), "text", names))
            click.echo("$ nsa summary")
            click.echo(render.render_summary(api.summary(con), "text"), nl=False)
            page = (path.parent if db else Path(tempfile.gettempdir())) / "nsa-demo-report.html"
            emit(render.render_html(api.report_data(con, result.report_id)), str(page))
            click.echo(f"$ nsa report -o {page.name}\nReport: {page}")
            click.echo("More: `nsa query --list`, `nsa query gaps`, `nsa rules`, `nsa --help`.")
        finally:
            con.close()


# --- report (nsight_analytics.report, render/html.py) -------------------------------------------


@main.command(short_help="One self-contained HTML page: timeline, findings, panels.")
@click.option(
    "--report", "report_id", type=int, help="The report to draw (needed when the workspace holds several).",
    shell_complete=_complete_report,
)  # fmt: skip
@click.option(
    "--diff", "diff_sides", nargs=2, metavar="A B",
    help="Draw the diff of A and B (report ids, `1,2` groups or files) and both timelines.",
)  # fmt: skip
@click.option(
    "--run", "run", metavar="RUN", shell_complete=_complete_run,
    help="Draw a run (id or name, `nsa runs`): its ranks on one clock and their collectives.",
)  # fmt: skip
@click.option(
    "--max-events", type=click.IntRange(min=1000), default=None,
    help="Timeline events drawn exactly (default 100000); the rest as density bins.",
)  # fmt: skip
@click.option(
    "--output", "-o", "output_path", required=True, type=click.Path(), metavar="FILE", callback=_check_output,
    help="The HTML file to write.",
)  # fmt: skip
@db_option
@extension_options
def report(
    report_id: int | None,
    diff_sides: tuple[str, str] | None,
    run: str | None,
    max_events: int | None,
    output_path: str,
    db: str | None,
) -> None:
    """Write one offline HTML page (every script inlined) for a report: a zoomable timeline per
    device and stream with idle gaps, steps and findings on it, and the panels (findings,
    utilization, top kernels, NVTX, copies, ncu stalls / speed of light / occupancy / roofline,
    GPU metrics, memory, power). With --diff A B: the diff view and both timelines. With --run
    RUN: one lane group per rank on the run's clock, communication apart from compute, each
    collective lined up from its first arrival to its last end, and the run's findings.

    \b
        nsa report -o report.html
        nsa report --report 2 -o run2.html
        nsa report --diff before.sqlite after.sqlite -o diff.html
        nsa report --run 1 -o run1.html
    """
    from . import api

    with errors():
        if sum(x is not None for x in (report_id, diff_sides, run)) > 1:
            raise NsaClickError("give one of --report, --diff and --run.")
        _extend()
        con = api.connect(db, load_deferred=False) if diff_sides else api.report_reader(db, report_id, run)
        try:
            with timed(log, "report data"):
                data = api.report_data(con, report_id, diff_sides=diff_sides, max_events=max_events, run=run)
        finally:
            con.close()
        with timed(log, "render html"):
            text = render.render_html(data)
        emit(text, output_path)
    click.echo(f"wrote {output_path} ({len(text.encode()) / 1e6:.2f} MB)", err=True)


# --- findings and rules (nsight_analytics.rules) -------------------------------------------------


@main.command(short_help="Ranked findings: evidence, fix, estimated savings.")
@click.option("--report", "report_id", type=int, help="Only this report.", shell_complete=_complete_report)
@click.option(
    "--run", "run", metavar="RUN", help="Only this run (id or name): its ranks' reports and the run rules.",
    shell_complete=_complete_run,
)  # fmt: skip
@click.option(
    "--format", "fmt", type=click.Choice(["text", *render.FORMATS]), default="text", show_default=True,
    help="text (or table) for people, markdown for tickets, json (an array of findings) or csv for machines.",
)  # fmt: skip
@click.option(
    "--fail-on", type=click.Choice(["warning", "critical"]), default=None,
    help=f"Exit {EXIT_FINDINGS} when a finding at or above this severity exists (for CI).",
)  # fmt: skip
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False),
    help="TOML file of rule thresholds (example above; `nsa rules` lists them). Default: the first of "
    "./nsa.toml, [tool.nsa] in the project's pyproject.toml, ~/.config/nsa/config.toml.",
)  # fmt: skip
@click.option("--no-config", is_flag=True, help="Read no settings file: the thresholds' defaults and --set.")
@click.option(
    "--set", "sets", multiple=True, metavar="NAME=VALUE", help="Override one threshold (repeatable)."
)
@db_option
@output_option
@extension_options
def findings(
    report_id: int | None,
    run: str | None,
    fmt: str,
    fail_on: str | None,
    config_path: str | None,
    no_config: bool,
    sets: tuple[str, ...],
    db: str | None,
    output_path: str | None,
) -> None:
    """Run the rules and print ranked findings: evidence, fix, estimated savings.

    The --config file is TOML: threshold names at the top, under [thresholds], or under a table
    named after the rule that uses them (`nsa rules` lists every rule's thresholds); --set
    overrides the file. Without --config, the first settings file found is read the same way:
    ./nsa.toml, the [tool.nsa] table of the nearest pyproject.toml (`[tool.nsa.gpu-idle]`), then
    $XDG_CONFIG_HOME/nsa/config.toml (~/.config/nsa/config.toml); `nsa -v findings` says which.
    For example:

    \b
        # nsa-rules.toml
        [gpu-idle]
        idle_share_warning = 0.10
        idle_gap_min_ns = 50000
        [small-kernel-storm]
        small_kernel_ns = 5000
    """
    from . import api

    with errors():
        found_settings = _settings_file(config_path, no_config)
        _extend(config_path, no_config)
        config = api.rules_config(config_path, sets, found_settings)
        if run is not None and report_id is not None:
            raise NsaClickError("give --run or --report, not both.")
        con = api.findings_reader(db, report_id, config=config)
        try:
            with timed(log, "findings: rules"):
                found = api.findings(con, report_id=report_id, config=config, run=run)
            names = api.report_names(con)
        finally:
            con.close()
        emit(render.render_findings(found, fmt, names), output_path)
    if fail_on is not None:
        severities = api.severities()
        floor = severities.index(fail_on)
        if any(severities.index(f.severity) >= floor for f in found):
            sys.exit(EXIT_FINDINGS)


def _settings_file(config_path: str | None, no_config: bool) -> api.ConfigFile | None:
    """The settings file `nsa findings` reads when --config is not given; --verbose says which."""
    from . import api

    if config_path is not None and no_config:
        raise NsaClickError("give --config FILE or --no-config, not both.")
    if config_path is not None:
        log.info("config: %s (--config)", config_path)
        return None
    found = None if no_config else api.config_file()
    if found is not None:
        log.info("config: %s", found)
    elif no_config:
        log.info("config: none (--no-config)")
    else:
        log.info("config: none found (looked for %s)", api.config_searched())
    return found


@main.command("rules", short_help="List the rules, their thresholds and what they look for.")
@click.option("--explain", metavar="ID", help="One rule's whole documentation: what, why, fix, thresholds.")
@format_option()
@output_option
@extension_options
def rules_cmd(explain: str | None, fmt: str, output_path: str | None) -> None:
    """List the rules: id, severities, thresholds (with defaults), what each one looks for; with
    the team's rule packs (--rules DIR, `rules = [...]` in the settings file) and plugins' rules."""
    from . import api

    with errors():
        _extend()
        if explain is not None:
            found = {r.id: r for r in api.rules()}
            if explain not in found:
                raise NsaClickError(f"no rule {explain!r}; `nsa rules` lists them: {', '.join(found)}.")
            emit(render.explain_rule(found[explain], api.thresholds()), output_path)
            return
        emit(render.render_rules(api.rules(), api.thresholds(), fmt), output_path)


# --- diff (nsight_analytics.diff) ----------------------------------------------------------------


@main.command(short_help="What changed between two runs, and whether it is real.")
@click.argument("sides", nargs=-1, metavar="A B", shell_complete=_complete_side)
@click.option(
    "--baseline", metavar="NAME",
    help="Compare B (one argument) with the stored baseline NAME; with --save, store A as NAME.",
)  # fmt: skip
@click.option("--save", is_flag=True, help="With --baseline NAME: store the report(s) given as NAME.")
@click.option(
    "--run", "runs", is_flag=True,
    help="A and B are runs (id or name): one world size compares rank by rank, two as a scaling.",
)  # fmt: skip
@click.option(
    "--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), metavar="PCT",
    help=f"Exit {EXIT_FINDINGS} when B regressed beyond PCT percent of A with confidence (for CI); "
    "runs of two world sizes: when the scaling efficiency is below (100 - PCT)%. A diff that is "
    f"NOT COMPARABLE (another program, other GPUs, no steps) also exits {EXIT_FINDINGS}: the gate "
    "could not judge it.",
)  # fmt: skip
@click.option(
    "--metric", default="step_time", show_default=True, type=click.Choice(GATE_METRICS),
    help="What --fail-on-regression watches (the step time is judged with its confidence interval).",
)  # fmt: skip
@click.option(
    "--fail-on-inconclusive", is_flag=True,
    help="With --fail-on-regression: also fail an inconclusive step time (too few or too spread "
    "steps) that does not rule out a regression beyond PCT.",
)  # fmt: skip
@click.option(
    "--allow-not-comparable", is_flag=True,
    help="With --fail-on-regression: pass (exit 0, saying so) a diff that is NOT COMPARABLE.",
)  # fmt: skip
@click.option(
    "--fail-on-new-finding", "fail_new", type=click.Choice(["warning", "critical"]), is_flag=False,
    flag_value="warning", default=None, metavar="[SEVERITY]",
    help=f"Exit {EXIT_FINDINGS} when B has a finding at or above SEVERITY (warning when not given) that "
    "A has not, or that got more severe; alone or beside --fail-on-regression. Without a value, "
    "give it after A B.",
)  # fmt: skip
@click.option(
    "--noise-floor", "floor_pct", type=click.FloatRange(min=0), default=2.0, show_default=True, metavar="PCT",
    help="Step-time shifts under PCT percent are noise; 'no significant change' needs the interval "
    "inside +-PCT (else 'inconclusive').",
)  # fmt: skip
@click.option("--no-findings", is_flag=True, help="Skip running the rules on both sides.")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table", show_default=True,
    help="table for people, markdown for a pull-request comment, json for machines.",
)  # fmt: skip
@db_option
@output_option
@extension_options
def diff(
    sides: tuple[str, ...],
    baseline: str | None,
    save: bool,
    runs: bool,
    fail_pct: float | None,
    metric: str,
    fail_on_inconclusive: bool,
    allow_not_comparable: bool,
    fail_new: str | None,
    floor_pct: float,
    no_findings: bool,
    fmt: str,
    db: str | None,
    output_path: str | None,
) -> None:
    """Compare run A (before) with run B (after): step time with a confidence interval and a
    verdict, where the change came from, kernels and findings that changed.

    A and B are report ids, `1,2` (a group: all ranks of one run) or files (ingested first);
    with --run, runs (id or name): the same world size compares the job before and after, rank
    by rank; two world sizes compare as a scaling (efficiency, throughput, the time lost).
    Exit codes: 0 ok, 1 --fail-on-regression fired (B regressed, or A and B are not comparable
    unless --allow-not-comparable) or --fail-on-new-finding did (B has a finding A has not, or a
    more severe one), 2 a usage or input error. The same report or run on both sides says so
    (verdict 'same report', 'same run') instead of measuring a change.

    \b
        nsa diff before.sqlite after.sqlite
        nsa diff --run ddp_w4 ddp_w4_fix                   # two runs of one job
        nsa diff --baseline main --save run.sqlite         # store a baseline
        nsa diff --baseline main new.sqlite --fail-on-regression 5
        nsa diff --baseline main new.sqlite --fail-on-new-finding warning
    """
    if save and not baseline:
        raise NsaClickError("--save stores a baseline: give its name with --baseline NAME.")
    if fail_on_inconclusive and fail_pct is None:
        raise NsaClickError("--fail-on-inconclusive changes the gate: give it with --fail-on-regression PCT.")
    if allow_not_comparable and fail_pct is None:
        raise NsaClickError("--allow-not-comparable changes the gate: give it with --fail-on-regression PCT.")
    if fail_new is not None and no_findings:
        raise NsaClickError("--fail-on-new-finding gates on the findings: leave out --no-findings.")
    if runs and baseline:
        raise NsaClickError("--baseline stores and compares reports; with --run give two runs: --run A B.")
    wanted = 1 if baseline else 2
    if len(sides) != wanted:
        usage = "--baseline NAME [--save] REPORT" if baseline else "A B"
        raise NsaClickError(f"nsa diff takes {usage}: got {len(sides)} argument(s).")
    from . import api

    with errors():
        _extend()
        ids_only = runs or (not save and all(api.is_report_ids(s) for s in sides))
        # report ids or runs only: read-only, beside other readers (deferred tables stored first)
        con = (
            api.reader(db, needs=api.diff_reads(not no_findings, runs=runs))
            if ids_only
            else api.connect(db, load_deferred=False)
        )
        try:
            if baseline and save:
                ids = api.save_baseline(con, baseline, sides[0])
                click.echo(f"baseline {baseline}: report {', '.join(map(str, ids))}.")
                return
            a: Any = api.baseline(con, baseline) if baseline else sides[0]
            with timed(log, "diff"):
                result = api.diff(
                    con, a, sides[-1], noise_floor=floor_pct / 100, with_findings=not no_findings, runs=runs
                )
            gate = (
                api.diff_gate(result, fail_pct, metric, fail_on_inconclusive, allow_not_comparable, fail_new)
                if fail_pct is not None or fail_new is not None
                else None
            )
        finally:
            con.close()
        emit(render.render_diff(result, fmt, gate), output_path)
    if gate is not None:
        if fmt != "table":  # the table already says it; machine formats print only data
            click.echo(gate.message, err=True)
        if gate.failed:
            sys.exit(EXIT_FINDINGS)


@main.command(short_help="Write the workspace as a Parquet dataset (for DuckDB, Spark, ...).")
@click.argument("directory", metavar="DIR", type=click.Path())
@click.option(
    "--report", "report_ids", type=int, multiple=True, help="Only this report (repeatable).",
    shell_complete=_complete_report,
)  # fmt: skip
@click.option(
    "--run", "run_names", metavar="RUN", multiple=True, shell_complete=_complete_run,
    help="Only this run's reports (id or name; repeatable).",
)  # fmt: skip
@db_option
def export(directory: str, report_ids: tuple[int, ...], run_names: tuple[str, ...], db: str | None) -> None:
    """Write the workspace (or the reports and runs chosen) into DIR as a hive-partitioned Parquet
    dataset: DIR/<table>/run_id=<run>/report_id=<report>/*.parquet plus DIR/_nsa_dataset.json.
    Exporting into an existing dataset adds the new reports with fresh ids; a report it holds
    already (same file, same content) is skipped. Deferred data is loaded first. Read it with
    `nsa <command> --data DIR`, DuckDB or Spark (docs/dataset.md).
    """
    from . import api

    with errors():
        chosen = (report_ids or run_names) or None
        done = api.export(
            directory, db, report_ids=report_ids if chosen else None, runs=run_names if chosen else None
        )
    for old, new in done.skipped:
        click.echo(f"report {old}: skipped, already in {done.directory} as report {new}", err=True)
    for old, new in done.written.items():
        click.echo(f"report {old}: exported as report {new}")
    click.echo(f"{done.directory}: {len(done.written)} reports written, {len(done.skipped)} skipped.")
