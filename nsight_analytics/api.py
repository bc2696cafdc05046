"""The facade: everything the CLI does, as functions a notebook calls the same way.

This is the one place deferred data is materialised (`materialise`): an ingest may leave large,
rarely read tables in the source export, and a query, the rules or the user's SQL get them
loaded here, from what the query library declares it reads (`-- reads`), before they run; the
rules and the queries themselves never load anything. A workspace the user cannot write
(shared, CI cache, read-only file system) still answers: the deferred rows are read from the
source export into TEMP tables of that connection, which hide the stored ones and are not saved.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from . import config_files, dataset, params, queries, schema
from .errors import QueryError, SourceGoneError, WorkspaceError
from .ingest import IngestResult, all_readers, deferred_for, ensure_loaded, ingest_file
from .ingest import runs as _runs
from .ingest import timeline as _timeline
from .ingest.pipeline import memory_cap
from .statements import canonical_writes, refuse_extensions
from .workspace import ENV_DB, open_workspace, resolve_db_path

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .config_files import ConfigFile
    from .diff import Diff, Gate
    from .rules import Finding, Rule
    from .rules.config import Threshold
    from .rules.context import Context

__all__ = [
    "ENV_DB",
    "IngestResult",
    "connect",
    "diff",
    "engine",
    "export",
    "extend",
    "findings",
    "ingest",
    "materialise",
    "memory_limit",
    "query",
    "reader",
    "report_data",
    "reports",
    "resolve_db_path",
    "rules",
    "run_reports",
    "runs",
    "schema_tables",
    "spark_query",
    "sql",
    "summary",
    "worked_out",
]


def _open(
    db: str | os.PathLike[str] | None, read_only: bool, standalone: bool = False
) -> duckdb.DuckDBPyConnection:
    """The workspace with the query library's TEMP macros (they exist per connection). A folder
    is a Parquet dataset (`nsa export`): opened read-only, whatever `read_only` says.
    `standalone`: see workspace.open_workspace."""
    load_plugins()  # before the macros: a plugin's queries get theirs
    if db is not None and Path(db).expanduser().is_dir():
        con = dataset.open_dataset(db)
    else:  # a new file: a copy of the cached empty workspace that has this library's macros
        template = (queries.builtin_macros().stamp, queries.install_macros)
        con = open_workspace(db, read_only=read_only, standalone=standalone, template=template)
    queries.install_macros(con)
    return con


def load_plugins() -> list[str]:
    """Load the installed plugins (entry points nsa.readers, nsa.rules, nsa.queries; once per
    process); returns one line per plugin that failed, each also logged as a warning."""
    from . import plugins

    return plugins.load()


def connect(
    db: str | os.PathLike[str] | None = None,
    read_only: bool = False,
    load_deferred: bool = True,
    *,
    standalone: bool = False,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection on the workspace with every canonical table and library query.

    Library queries are table macros: `SELECT * FROM gaps(min_gap_ns := 100000)`. A writable
    connection first copies tables an ingest deferred (NVTX, OS runtime) and works out what
    queries work out on first use (the GPU timeline with its launch calls and communication
    flag, the NVTX ranges' kernels), so plain SQL and the table macros see what `query` sees:
    each step under DuckDB's memory limit of its export's size (past it DuckDB spills to the
    workspace's temporary folder), so on a large export this costs time (the first NVTX use's
    and the timeline's, once), not memory; `load_deferred=False` leaves them for the first
    query that reads them. Read-only connections can run beside other readers but not beside a
    writer, and load deferred tables (into TEMP tables) only when `query`, `findings` or `sql`
    need them. `standalone`: for nsa's own commands (workspace.STANDALONE); a notebook leaves it off.
    """
    con = _open(db, read_only=read_only, standalone=standalone)
    if load_deferred and not read_only:
        # a workspace file: what a dataset holds, nothing left to first use (a dataset is read
        # only: what it lacks is worked out into TEMP tables by the queries that read it)
        materialise(con, ingest_deferrable() if dataset.dataset_path(con) else dataset_reads())
    return con


def writable(db: str | os.PathLike[str] | None = None) -> bool:
    """Can this user write the workspace file (and the folder DuckDB writes its WAL in)?"""
    path = resolve_db_path(db)
    if not path.exists():
        return True  # to be created: opening it writable says what is wrong, if anything
    if path.is_dir():
        return False  # a Parquet dataset: read only
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def reader(
    db: str | os.PathLike[str] | None = None,
    needs: Iterable[str] | None = None,
    check: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A read-only connection for answering questions, so several can run side by side.

    When a needed table was deferred at ingest, a short writable session stores it first (or,
    when the workspace cannot be written, the read-only connection reads it from the source
    export); `check` runs before that, so a request it rejects changes nothing.
    """
    wanted = set(needs or ())
    return _loaded_reader(
        db,
        check or (lambda con: None),
        lambda con: bool(wanted and _pending(con, wanted)),
        lambda con: materialise(con, wanted),
    )


def report_reader(
    db: str | os.PathLike[str] | None = None, report_id: int | None = None, run: str | int | None = None
) -> duckdb.DuckDBPyConnection:
    """`reader` for `report_data`: what the page reads is loaded for the report drawn only (the
    run's reports with `run`; the workspace's one report without either), not for every report
    of the workspace."""
    wanted = report_reads()

    def drawn(con: duckdb.DuckDBPyConnection) -> list[int]:
        if run is not None:
            return run_reports(con, run)
        if report_id is not None:
            return [int(report_id)]
        ids = _report_ids(con)
        return ids if len(ids) == 1 else []  # several: report_data asks which, nothing loaded

    return _loaded_reader(
        db,
        lambda con: None,
        lambda con: _pending(con, wanted, drawn(con)),
        lambda con: materialise(con, wanted, drawn(con)),
    )


def _loaded_reader(
    db: str | os.PathLike[str] | None,
    check: Callable[[duckdb.DuckDBPyConnection], None],
    pending: Callable[[duckdb.DuckDBPyConnection], bool],
    load: Callable[[duckdb.DuckDBPyConnection], object],
) -> duckdb.DuckDBPyConnection:
    """A read-only connection once `check` passed and, when `pending` says data is still in the
    source exports, `load` ran: in a short writable session when the workspace can be written,
    else on the read-only connection itself (TEMP tables)."""
    con = _open(db, read_only=True)
    try:
        check(con)
        if not pending(con):
            return con
        if not writable(db):
            load(con)
            return con
    except BaseException:
        con.close()
        raise
    con.close()
    writer = _open(db, read_only=False)
    try:
        load(writer)
    finally:
        writer.close()
    return _open(db, read_only=True)


def _step_writes(step: str) -> tuple[str, ...]:
    """The canonical tables a deferred step writes, as its reader declares (a step named like a
    table writes that table)."""
    for rd in all_readers():
        if step in rd.step_writes:
            return rd.step_writes[step]
    return (step,)


def worked_out() -> set[str]:
    """Deferred steps that work something out on first use rather than copy rows."""
    return {s for rd in all_readers() for s in rd.worked_out}


def materialise(
    con: duckdb.DuckDBPyConnection, tables: Iterable[str], report_ids: Iterable[int] | None = None
) -> int:
    """Load the deferred data `tables` depend on, for `report_ids` (default every report);
    returns the steps loaded.

    The one place loading happens. A writable connection stores the rows in the workspace; a
    read-only one reads them from the source exports into TEMP tables (copies of the stored
    tables plus the deferred rows) that hide the stored tables for this connection only.
    When a source export is gone, the error says which report and file `nsa ingest --full`
    needs.
    """
    tables = set(tables)
    report_ids = None if report_ids is None else list(report_ids)
    # the GPU timeline is worked out from the workspace's GPU rows, after anything they wait for
    timeline = _timeline.TABLE in tables
    launches = timeline and _timeline.LAUNCHES in tables
    comm = timeline and _timeline.COMM in tables
    if launches and not tables >= set(_timeline.LAUNCH_READS):
        # launch calls are worked out from the CUDA API calls: load those first (an export that is
        # gone stops here with the usual error, as for any query of the calls)
        materialise(con, _timeline.LAUNCH_READS, report_ids)
    todo = deferred_for(con, tables, report_ids)
    if not todo:
        return _timeline.ensure(con, report_ids, launches, comm) if timeline else 0
    if is_read_only(con):
        temp = {
            name
            for row in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
            for name in row
        }
        shadow = {"reports"} | {w for _, _, step in todo for w in _step_writes(step)}
        stored = params.first_row(con.execute("SELECT current_database()"))[0]
        for name in sorted(shadow - temp):
            con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{stored}".main."{name}"')
    loaded = ensure_loaded(con, tables, report_ids=report_ids)
    return loaded + (_timeline.ensure(con, report_ids, launches, comm) if timeline else 0)


def _pending(
    con: duckdb.DuckDBPyConnection, tables: Iterable[str], report_ids: Iterable[int] | None = None
) -> bool:
    """Is data `tables` need still to be loaded or worked out (what `materialise` would do)?"""
    tables = set(tables)
    launches = _timeline.LAUNCHES in tables
    if launches:
        tables |= set(_timeline.LAUNCH_READS)
    ids = None if report_ids is None else list(report_ids)
    return bool(deferred_for(con, tables, ids)) or (
        _timeline.TABLE in tables and bool(_timeline.stale(con, ids, launches, _timeline.COMM in tables))
    )


def tables_needed(sql: str) -> set[str]:
    """Canonical tables a statement reads, directly or through library query macros (their
    declared `-- reads`)."""
    words = set(re.findall(r"[A-Za-z_]\w*", sql))
    needs = queries.tables_read(sql, exact=False)
    for name, q in queries.library().items():
        if name in words:
            needs |= q.tables()
    return needs


def ingest_deferrable() -> tuple[str, ...]:
    """Every step some reader can leave to first use (`nsa ingest` defers them unless --full)."""
    steps: list[str] = []
    for rd in all_readers():
        steps += [s for s in rd.deferrable if s not in steps]
    return tuple(steps)


def engine(db: str | os.PathLike[str] | None = None, read_only: bool = False) -> Any:
    """A SQLAlchemy engine on the workspace (duckdb-engine dialect), for pandas.read_sql & co.

    Every DBAPI connection is opened by `_open`, the code path `connect()` uses, so it
    has the same DuckDB configuration (a different one, such as duckdb-engine's own user-agent
    setting, makes DuckDB refuse a second connection in a process that already holds one) and
    the TEMP query macros, which exist per connection. Connections are not pooled: an engine
    kept in a notebook must not hold the workspace lock against `nsa ingest` in a terminal.
    Read-only connections on a workspace that cannot be written each read the deferred tables
    from the source exports (TEMP tables), as `reader` does.
    """
    from duckdb_engine import ConnectionWrapper
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    path = resolve_db_path(db)
    # Create the workspace and copy deferred tables once, so plain SQL sees every row.
    (reader(path, needs=set(ingest_deferrable())) if read_only else connect(path)).close()

    def open_dbapi() -> ConnectionWrapper:
        # duckdb-engine's DBAPI connection wraps the duckdb one; it forwards attribute access
        # and keeps the raw connection as `_ConnectionWrapper__c`.
        con = _open(path, read_only=read_only)
        if read_only:
            materialise(con, ingest_deferrable())  # a workspace that cannot be written: TEMP tables
        return ConnectionWrapper(con)

    return create_engine(f"duckdb:///{path}", creator=open_dbapi, poolclass=NullPool)


def ingest(con: duckdb.DuckDBPyConnection, path: str | Path, **options: Any) -> IngestResult:
    """Ingest one nsys SQLite export or ncu CSV; see nsight_analytics.ingest.ingest_file."""
    folder = dataset.dataset_path(con)
    if folder is not None:
        raise WorkspaceError(
            f"{folder} is a Parquet dataset, which nsa only reads; ingest into a workspace "
            f"(`nsa ingest FILE --db WORKSPACE.duckdb`), then add it with `nsa export {folder} --db WORKSPACE.duckdb`."
        )
    return ingest_file(con, path, **options)


def export(
    directory: str | os.PathLike[str],
    db: str | os.PathLike[str] | None = None,
    report_ids: Iterable[int] | None = None,
    runs: Iterable[str | int] | None = None,
) -> dataset.Exported:
    """Write the workspace `db` (its reports `report_ids` and the reports of `runs`; default
    every report) as a Parquet dataset into `directory`, creating it or adding to it. Deferred
    data is loaded first, so nothing in the dataset is deferred; see nsight_analytics.dataset."""
    chosen: list[int] | None = None

    def check(con: duckdb.DuckDBPyConnection) -> None:
        nonlocal chosen
        dataset.check_target(directory)
        if report_ids is not None or runs is not None:
            ids = list(report_ids or ())
            require_reports(con, ids)
            for run in runs or ():
                ids += run_reports(con, run)
            chosen = sorted(set(ids))

    con = reader(db, needs=dataset_reads(), check=check)
    try:
        return dataset.export(con, directory, chosen)
    finally:
        con.close()


def dataset_reads() -> set[str]:
    """Everything a dataset holds: every table, the views' columns (`kernels`: the launch
    columns) and every column worked out on first use."""
    return {t.name for t in schema.TABLES} | set(schema.COMPUTED)


def query(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> duckdb.DuckDBPyRelation:
    """Run a library query by name with bound parameters; `.df()`, `.to_arrow_table()`, `.fetchall()`.
    The relation runs each time it is read, holding no more than its own steps need."""
    q = queries.get(name)
    q.bind(params)  # a rejected parameter must not copy deferred tables first
    materialise(con, q.tables())
    return queries.run(con, name, params, materialised=True)


def memory_limit(
    con: duckdb.DuckDBPyConnection, report_ids: Iterable[int | None] = (None,)
) -> AbstractContextManager[str | None]:
    """Hold DuckDB's memory to the inputs' size while the block runs, as the rules and the
    deferred steps are held (ingest.pipeline.memory_cap: the exports' bytes less what nsa holds
    outside DuckDB); past it DuckDB spills to the workspace's temporary folder. `report_ids`:
    the reports a query reads (None among them: every report). `query` returns a lazy relation,
    so the caller holds the limit while the rows are fetched or written (`nsa query` does)."""
    ids = list(report_ids)
    if not ids or None in ids:
        return memory_cap(con, _report_ids(con))
    return memory_cap(con, [int(r) for r in ids if r is not None])


def spark_query(
    data: str | os.PathLike[str], name: str, *, master: str | None = None, **params: Any
) -> duckdb.DuckDBPyRelation:
    """Library query NAME run by Apache Spark over the Parquet dataset DATA (`nsa export`), its
    rows brought back as a DuckDB relation like `query`'s. `master`: a cluster URL
    (`spark://host:7077`, `sc://host` for Spark Connect), else $SPARK_REMOTE, else local mode.
    For a Spark DataFrame, call nsight_analytics.spark.query with your own SparkSession."""
    from . import spark
    from .params import connect as duckdb_connect

    q = queries.get(name)
    q.bind(params)  # a rejected parameter stops here, before Spark starts
    df = spark.query(master, name, data, params)
    return spark.relation(duckdb_connect(), name, df)


def query_run(
    con: duckdb.DuckDBPyConnection, name: str, run: str | int, **params: Any
) -> duckdb.DuckDBPyRelation:
    """A library query on one run: a query of runs gets its `run_id`; a query of reports runs on
    each of the run's reports, their rows one after the other (each row says its report_id)."""
    q = queries.get(name)
    run_id = resolve_run(con, run)
    names = {p.name for p in q.params}
    if "run_id" in names:
        return query(con, name, **params, run_id=run_id)
    if "report_id" not in names:
        raise QueryError(f"query {q.name} takes neither a run nor a report; run it without --run.")
    q.bind(params)
    materialise(con, q.tables())
    parts = [
        queries.run(con, name, {**params, "report_id": rid}, materialised=True)
        for rid in run_reports(con, run_id)
    ]
    out = parts[0]
    for part in parts[1:]:
        out = out.union(part)
    return out


def resolve_run(con: duckdb.DuckDBPyConnection, run: str | int) -> int:
    """A run's id from its id or name (InputError naming the runs there are otherwise)."""
    return _runs.resolve_run(con, run)


def run_reports(con: duckdb.DuckDBPyConnection, run: str | int) -> list[int]:
    """The report ids holding a run's ranks, in rank order."""
    return _runs.run_reports(con, resolve_run(con, run))


def make_run(con: duckdb.DuckDBPyConnection, report_ids: Iterable[int], name: str | None = None) -> int:
    """Make (or remake) a run of these reports: ranks numbered, clocks aligned; its run_id."""
    return _runs.make_run(con, list(report_ids), name)


def group_runs(con: duckdb.DuckDBPyConnection, report_ids: Iterable[int]) -> list[int]:
    """Make the runs that these reports say they form (distributedInfo, rank numbers in file
    names, one report of several GPU processes); their run ids."""
    return [_runs.make_run(con, group) for group in _runs.group_runs(con, report_ids)]


def expand_inputs(
    paths: Iterable[str | Path], db: str | os.PathLike[str] | None = None
) -> tuple[list[Path], list[Path]]:
    """The files to ingest from files, folders and tar archives (unpacked beside the
    workspace); (files, skipped files no reader knows)."""
    return _runs.expand_inputs(paths, resolve_db_path(db).parent)


def runs(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
    """The runs in the workspace, one row each."""
    return con.sql(
        "SELECT run_id, name, world_size, ranks_seen, hosts, rank_source, clock_source, "
        "clock_uncertainty_ns, (SELECT list(report_id ORDER BY first_rank) FROM (SELECT report_id, "
        "min(rank) AS first_rank FROM ranks AS k WHERE k.run_id = runs.run_id GROUP BY report_id)) AS report_ids "
        "FROM runs ORDER BY run_id"
    )


def ranks(con: duckdb.DuckDBPyConnection, run: str | int | None = None) -> duckdb.DuckDBPyRelation:
    """The ranks of one run (or all runs): report, process, GPU, how the rank was found, offset."""
    where = "" if run is None else f"WHERE k.run_id = {resolve_run(con, run)}"
    return con.sql(
        "SELECT k.run_id, k.rank, k.local_rank, k.host, k.report_id, k.pid, k.device_id, k.rank_source, "
        "k.clock_offset_ns, regexp_extract(r.source_path, '[^/]+$') AS file "
        f"FROM ranks AS k JOIN reports AS r USING (report_id) {where} ORDER BY k.run_id, k.rank"
    )


def library() -> list[queries.Query]:
    """The library queries and their contracts, in `nsa query --list` order."""
    return list(queries.library().values())


def get_query(name: str) -> queries.Query:
    return queries.get(name)


def sql(
    con: duckdb.DuckDBPyConnection, statement: str, allow_writes: bool = False
) -> duckdb.DuckDBPyRelation | None:
    """Run your own SQL after materialising what it reads; writes to nsa's canonical tables are
    refused (QueryError) unless `allow_writes`; so is any statement that installs or loads a
    DuckDB extension (`refuse_extensions`: nothing is ever downloaded)."""
    refuse_extensions(statement)
    if not allow_writes:
        refuse_canonical_writes(statement)
    materialise(con, tables_needed(statement))  # only what this statement reads
    return con.sql(statement)


def refuse_canonical_writes(statement: str) -> None:
    """Raise QueryError when the statement writes to one of nsa's canonical tables (a
    `DELETE FROM reports` would leave the report's rows in every other table)."""
    writes = canonical_writes(statement)
    if writes:
        verb, table = writes[0]
        raise QueryError(
            f"{verb} on {table} is refused: nsa maintains {table}, and changing it by hand leaves "
            "the workspace inconsistent; write to a table of your own (CREATE TABLE mine AS ...), "
            "or pass --allow-writes if you mean it."
        )


def reports(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
    """The reports in the workspace, one row each; columns keep their names in table `reports`."""
    return con.sql(
        "SELECT report_id, format, tool_version, schema_version, activity_kinds, source_path, ingested_at "
        "FROM reports ORDER BY report_id"
    )


def report_names(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """{report_id: file name}, for naming reports in findings."""
    rows = con.execute("SELECT report_id, regexp_extract(source_path, '[^/]+$') FROM reports").fetchall()
    return {int(r): str(n) for r, n in rows}


def rules() -> list[Rule]:
    """Every rule, in the order `nsa rules` lists them."""
    from .rules import rules as registered

    return registered()


def thresholds() -> list[Threshold]:
    """Every rule threshold with its default, unit and meaning."""
    from .rules import DEFAULTS

    return list(DEFAULTS.values())


def rules_config(
    config_path: str | Path | None = None, sets: Iterable[str] = (), found: ConfigFile | None = None
) -> dict[str, Any]:
    """Thresholds from a TOML file (`config_path`, else a settings file `config_file()` found)
    and `name=value` overrides (`nsa findings --config/--set`)."""
    from .rules.config import load_config, load_config_data, parse_overrides

    overrides = parse_overrides(list(sets))
    if config_path is None and found is not None:
        return load_config_data(found.data, str(found), overrides)
    return load_config(config_path, overrides)


def config_file(cwd: Path | None = None) -> ConfigFile | None:
    """The settings file that applies in `cwd` when no --config is given (config_files.find:
    nsa.toml here, [tool.nsa] in the project's pyproject.toml, the user's config.toml)."""
    return config_files.find(cwd)


def config_searched(cwd: Path | None = None) -> str:
    """Where `config_file` looks, in words."""
    return config_files.searched(cwd)


def parse_assignments(pairs: Iterable[str], option: str, example: str) -> dict[str, str]:
    """`name=value` pairs of a command-line option, checked."""
    given = list(pairs)
    if not given:  # `nsa query NAME` without -p: the rules' package stays unloaded
        return {}
    from .rules.config import parse_assignments as parse

    return parse(given, option, example)


# --- a team's rule files and queries, plugins (rules/files.py, queries.add_folder, plugins.py) --

_RULE_FOLDERS: set[Path] = set()


def extend(
    rules: Iterable[str | Path] = (),
    query_folders: Iterable[str | Path] = (),
    settings: ConfigFile | str | Path | None = None,
    plugins: bool = True,
) -> list[str]:
    """Add a team's queries and rules to the library and the rules: the installed plugins
    (`plugins`), the folders a settings file names (`queries = [...]`, `rules = [...]`, relative
    to the file), then `query_folders` (.sql files) and `rules` (TOML rule packs). Queries come
    first: a rule may judge one of them. Returns one line per plugin that failed to load.
    A folder given twice is read once."""
    problems = load_plugins() if plugins else []
    named = _settings_folders(settings)
    for folder in [*named["queries"], *query_folders]:
        queries.add_folder(folder)
    for folder in [*named["rules"], *rules]:
        key = Path(folder).expanduser().resolve()
        if key not in _RULE_FOLDERS:
            # imported here: a command given no rule folder (every `nsa query`) loads no rules (~7 ms)
            from .rules.discovery import add, registered
            from .rules.files import load_folder

            add(load_folder(folder, registered()))
            _RULE_FOLDERS.add(key)
    return problems


def _settings_folders(settings: ConfigFile | str | Path | None) -> dict[str, list[Path]]:
    """The `queries` and `rules` folders a settings file names, relative to the file."""
    if settings is None:  # no settings file: the rules' package stays unloaded
        return {"rules": [], "queries": []}
    from .rules.config import FOLDER_KEYS, ConfigError

    out: dict[str, list[Path]] = {k: [] for k in FOLDER_KEYS}
    if isinstance(settings, (str, Path)):
        path = Path(settings)
        data = config_files.read(path) if path.is_file() else {}
        where = str(path)
    else:
        path, data, where = settings.path, settings.data, str(settings)
    for key in FOLDER_KEYS:
        value = data.get(key, [])
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(
                f'settings file {where}: {key} wants a list of folders, e.g. {key} = ["nsa/{key}"].'
            )
        out[key] = [path.parent / Path(v).expanduser() for v in value]
    return out


def rules_reads(
    only: Iterable[str] | None = None,
    activity_kinds: Iterable[str] | None = None,
    optional: bool = True,
) -> set[str]:
    """The canonical tables the rules read: the union of what their queries declare
    (`-- reads`) and the tables each rule declares it reads outside them (`Rule.reads`); with
    `activity_kinds`, only the rules that run on a report holding that data; without
    `optional`, only what some rule cannot judge without (less its `Rule.optional_reads`)."""
    needs: set[str] = set()
    for r in rules():
        if only is not None and r.id not in set(only):
            continue
        if activity_kinds is not None and not r.runs_on(tuple(activity_kinds)):
            continue
        mine = set(r.reads)
        for name in r.queries:
            mine |= queries.get(name).tables()
        needs |= mine if optional else mine - set(r.optional_reads)
    return needs


def _rule_reads_by_report(
    con: duckdb.DuckDBPyConnection, report_id: int | None, only: Iterable[str] | None
) -> dict[tuple[frozenset[str], frozenset[str], frozenset[str]], list[int]]:
    """{(tables needed, tables wanted, tables gated): report ids}: per report, what the rules that
    will run on it cannot judge without, all they read (a rule on GPU metrics does not need the
    NVTX ranges of a report without GPU metrics), and of the tables they can do without, those
    only rules with `Rule.optional_when` read (loaded where one of those says it reads them)."""
    rows = con.execute("SELECT report_id, activity_kinds FROM reports ORDER BY report_id").fetchall()
    groups: dict[tuple[frozenset[str], frozenset[str], frozenset[str]], list[int]] = {}
    for rid, kinds in rows:
        if report_id is None or rid == report_id:
            needed = frozenset(rules_reads(only, kinds or (), optional=False))
            wanted = frozenset(rules_reads(only, kinds or ()))
            gated = frozenset(_gated_on(only, tuple(kinds or ()))) & (wanted - needed)
            groups.setdefault((needed, wanted, gated), []).append(int(rid))
    return groups


def _materialise_for_rules(
    con: duckdb.DuckDBPyConnection,
    report_id: int | None,
    only: Iterable[str] | None,
    config: dict[str, Any] | None = None,
    context: Context | None = None,
) -> set[tuple[int, str]]:
    """Load what the rules read; returns the (report, rule) pairs that cannot run because data
    they need was left in a source file that is gone (each said in a warning): the other rules
    still judge the report. Tables the rules can do without (`Rule.optional_reads`) are loaded
    where their source is still there; where not, a warning says so and the rules run without.
    Those only rules with `Rule.optional_when` read are loaded last, on the reports where one of
    those says it reads them (`config`: the thresholds' overrides it judges with; `context`: the
    rules' Context, when it is made already)."""
    cannot: set[tuple[int, str]] = set()
    gated: list[tuple[list[int], frozenset[str]]] = []
    for (needed, wanted, later), rids in _rule_reads_by_report(con, report_id, only).items():
        # the optional tables first: a needed step may read what they copy instead of the source
        # (the steps read the copied NVTX ranges rather than scan the export's again)
        if wanted - needed - later:
            _materialise_optional(con, wanted - needed - later, rids)
        try:
            materialise(con, needed, rids)
        except SourceGoneError:
            for rid in rids:
                cannot |= _rules_one_by_one(con, rid, only)
            continue
        if later:
            gated.append((rids, later))
    # once every report's needed tables are in (`context` may answer for all reports at once)
    for rids, later in gated:
        for rid in rids:
            read = _gated_wanted(con, rid, only, config, later, context)
            if read:
                _materialise_optional(con, frozenset(read), [rid])
    return cannot


def _gated_on(only: Iterable[str] | None, kinds: tuple[str, ...]) -> set[str]:
    """Tables that, of the rules `only` running on a report holding `kinds`, only rules with
    `Rule.optional_when` read, and those only as optional."""
    chosen = [r for r in rules() if (only is None or r.id in set(only)) and r.runs_on(kinds)]
    always: set[str] = set()
    for r in chosen:
        if r.optional_when is None:
            always |= rules_reads([r.id])
        else:
            always |= rules_reads([r.id], optional=False)
    return {t for r in chosen if r.optional_when is not None for t in r.optional_reads} - always


def _gated_wanted(
    con: duckdb.DuckDBPyConnection,
    rid: int,
    only: Iterable[str] | None,
    config: dict[str, Any] | None,
    tables: Iterable[str],
    context: Context | None = None,
) -> set[str]:
    """Of `tables` (read only by rules with `optional_when`), those still to load for report
    `rid` that a rule running on it says it reads there (its `optional_when`, on `context` or
    a Context of its own: all of its optional tables, or those it names)."""
    pending = {t for t in tables if _pending(con, {t}, [rid])}
    if not pending:
        return set()
    from .rules import load_config
    from .rules.context import Context

    kinds = tuple(
        params.first_row(
            params.execute(con, "SELECT activity_kinds FROM reports WHERE report_id = $rid", {"rid": rid})
        )[0]
        or ()
    )
    ctx = Context(con, load_config(overrides=config), rid) if context is None else context
    wanted: set[str] = set()
    for r in rules():
        if r.optional_when is None or (only is not None and r.id not in set(only)) or not r.runs_on(kinds):
            continue
        mine = set(r.optional_reads) & pending - wanted
        if not mine:
            continue
        try:
            reads = r.optional_when(ctx, rid)
        except (duckdb.Error, QueryError):  # the check itself will say what is wrong
            reads = True
        if reads is True:
            wanted |= mine
        elif not isinstance(reads, bool):  # those of its optional tables it names
            wanted |= mine & set(reads)
    return wanted


def _materialise_optional(con: duckdb.DuckDBPyConnection, tables: frozenset[str], rids: list[int]) -> None:
    """Load what rules can do without, report by report where a source is gone."""
    try:
        materialise(con, tables, rids)
    except SourceGoneError:
        for rid in rids:
            try:
                materialise(con, tables, [rid])
            except SourceGoneError as exc:
                log.warning("%s Until then, the rules judge report %s without it.", exc, rid)


def _rules_one_by_one(
    con: duckdb.DuckDBPyConnection, rid: int, only: Iterable[str] | None
) -> set[tuple[int, str]]:
    kinds = params.first_row(
        params.execute(con, "SELECT activity_kinds FROM reports WHERE report_id = $rid", {"rid": rid})
    )[0]
    cannot: set[tuple[int, str]] = set()
    for r in rules():
        if (only is not None and r.id not in set(only)) or not r.runs_on(tuple(kinds or ())):
            continue
        try:
            materialise(con, rules_reads([r.id], optional=False), [rid])
        except SourceGoneError as exc:
            log.warning("%s not run on report %s: %s", r.id, rid, exc)
            cannot.add((rid, r.id))
    return cannot


def findings_reader(
    db: str | os.PathLike[str] | None = None,
    report_id: int | None = None,
    only: Iterable[str] | None = None,
    config: dict[str, Any] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A read-only connection ready for `findings`: what the rules will read on each report is
    stored first in a short writable session (or read from the sources when the workspace
    cannot be written); an unknown report stops before anything is copied. `config`: the
    thresholds `findings` will judge with (what some rules read depends on them)."""
    return _loaded_reader(
        db,
        lambda con: require_reports(con, [report_id]),
        lambda con: _rules_pending(con, report_id, only, config),
        lambda con: _materialise_for_rules(con, report_id, only, config),
    )


def _rules_pending(
    con: duckdb.DuckDBPyConnection,
    report_id: int | None,
    only: Iterable[str] | None,
    config: dict[str, Any] | None,
) -> bool:
    """Would `_materialise_for_rules` load anything?"""
    for (needed, wanted, later), rids in _rule_reads_by_report(con, report_id, only).items():
        if _pending(con, wanted - later, rids):
            return True
        if later and any(_gated_wanted(con, rid, only, config, later) for rid in rids):
            return True
    return False


def findings(
    con: duckdb.DuckDBPyConnection,
    report_id: int | None = None,
    config: dict[str, Any] | None = None,
    only: list[str] | None = None,
    run: str | int | None = None,
    context: Callable[..., Context] | None = None,
) -> list[Finding]:
    """Ranked findings for one report (or all), or for one run (`run`: id or name: the rules on
    each of its reports and the run rules on the run), after materialising what the rules read.
    `context`: what makes the rules' Context (rules.run_rules), the library's by default."""
    from .rules import load_config, run_rules
    from .rules.context import Context

    make = Context if context is None else context

    if run is not None:
        if report_id is not None:
            raise QueryError("give a run or a report, not both.")
        run_id = resolve_run(con, run)
        cannot: set[tuple[int, str]] = set()
        for rid in _runs.run_reports(con, run_id):
            cannot |= _materialise_for_rules(con, rid, only, config)
        return run_rules(con, config=config, only=only, skip=cannot, run_id=run_id, context=make)
    require_reports(con, [report_id])
    # one Context for the rules and for what decides which of their optional tables to load
    # (Rule.optional_when): the queries it ran are not run again
    shared = make(con, load_config(overrides=config), report_id, None)
    cannot = _materialise_for_rules(con, report_id, only, config, shared)
    return run_rules(
        con, report_id=report_id, config=config, only=only, skip=cannot, context=lambda *a: shared
    )


def summary(
    con: duckdb.DuckDBPyConnection, report_id: int | None = None, top: int = 5
) -> list[dict[str, Any]]:
    """One screen per report: the GPU timeline's span, busy and idle time per device (whole
    capture, and the steady state when steps were found), the kernel time by class and math
    precision (`kernel_classes`: the steady state when steps were found), the `top` kernels by GPU
    time and the copies by direction (whole capture; `nsa query` for the rest).
    Plain data in base units (ns, bytes), one dict per report."""
    require_reports(con, [report_id])
    util = _by_report(query(con, "utilization", report_id=report_id))
    steady = _by_report(query(con, "utilization", report_id=report_id, phase="steady"))
    classes = _by_report(query(con, "kernel_classes", report_id=report_id, phase="steady"))
    kernels = _by_report(query(con, "kernel_summary", report_id=report_id))
    copies = _by_report(query(con, "memcpy_summary", report_id=report_id))
    wanted = "" if report_id is None else f" WHERE report_id = {int(report_id)}"
    rows = con.execute(
        "SELECT report_id, format, regexp_extract(source_path, '[^/]+$') FROM reports"
        + wanted
        + " ORDER BY 1"
    ).fetchall()
    return [
        {
            "report_id": rid,
            "file": file,
            "format": fmt,
            "devices": util.get(rid, []),
            # the same from the first steady step on, for reports whose steps were found
            "steady": [d for d in steady.get(rid, []) if d["phase"] == "steady"],
            # per device, class, math and fused: the steady state's ('steady') or the run's ('run')
            "kernel_classes": classes.get(rid, []),
            "top_kernels": kernels.get(rid, [])[:top],
            "kernel_count": sum(k["instances"] for k in kernels.get(rid, [])),
            "copies": sorted(copies.get(rid, []), key=lambda c: -c["total_ns"]),
        }
        for rid, fmt, file in rows
    ]


def run_summary(con: duckdb.DuckDBPyConnection, run: str | int) -> dict[str, Any]:
    """One screen for a run: how its ranks were found and aligned, per rank the steady step,
    compute, communication (exposed part), GPU idle, waits and lateness, the matched
    collectives, and scaling against the other world sizes of the same program when the
    workspace holds them. Plain data in base units (ns, bytes)."""
    run_id = resolve_run(con, run)
    info = _records(runs(con).filter(f"run_id = {run_id}"))[0]
    ranks_ = _records(ranks(con, run_id))
    balance = {r["rank"]: r for r in _records(query(con, "rank_balance", run_id=run_id))}
    overlap = {r["rank"]: r for r in _records(query(con, "comm_overlap", run_id=run_id))}
    per_rank = []
    for r in ranks_:
        b, o = balance.get(r["rank"], {}), overlap.get(r["rank"], {})
        per_rank.append({**r, **{k: b.get(k) for k in ("steps", "step_ns", "compute_ns", "comm_ns", "exposed_comm_ns",
                                                        "idle_ns", "host_ns", "wait_ns", "late_ns", "last_share")},
                         "overlapped_share": o.get("overlapped_share"), "exposed_share": o.get("exposed_share")})  # fmt: skip
    skew = _records(query(con, "collective_skew", run_id=run_id))
    ops = Counter(str(c["op"]) for c in skew)
    last = Counter(int(c["last_rank"]) for c in skew)

    def median(values: list[float]) -> float | None:
        values = sorted(v for v in values if v is not None)
        return values[len(values) // 2] if values else None

    collectives = {
        "matched": len(skew),
        "ops": dict(ops.most_common()),
        "arrival_skew_ns": median([c["arrival_skew_ns"] for c in skew]),
        "arrival_skew_max_ns": max((c["arrival_skew_ns"] for c in skew), default=None),
        "end_skew_ns": median([c["end_skew_ns"] for c in skew]),
        "busbw_gbps": median([c["busbw_gbps"] for c in skew]),
        "last_rank": dict(last.most_common()),
    }
    from .rules.checks.scaling_loss import program_series  # the scaling-loss rule's series

    series = program_series(
        con.execute("SELECT run_id, name, world_size, ranks_seen FROM runs").fetchall(), run_id
    )
    scaling = _records(query(con, "scaling", run_ids=",".join(map(str, series)))) if len(series) > 1 else []
    return {"run": info, "ranks": per_rank, "collectives": collectives, "scaling": scaling}


def run_summary_reads() -> set[str]:
    """The canonical tables `run_summary` reads (its queries')."""
    return set().union(
        *(queries.get(q).tables() for q in ("rank_balance", "comm_overlap", "collective_skew", "scaling"))
    )


def _records(rel: duckdb.DuckDBPyRelation) -> list[dict[str, Any]]:
    return [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]


def report_data(
    con: duckdb.DuckDBPyConnection,
    report_id: int | None = None,
    diff_sides: tuple[Any, Any] | None = None,
    max_events: int | None = None,
    config: dict[str, Any] | None = None,
    run: str | int | None = None,
) -> dict[str, Any]:
    """What `nsa report` draws, as plain data (`render.html.page` turns it into the page): the
    report's timeline, findings and panels (`nsight_analytics.report`), or with `diff_sides`
    the diff of A and B (`diff(...).to_dict()`) with both sides' reports, or with `run` (id or
    name) the run's ranks on its clock, its collectives and findings. `report_id` None: the
    workspace's only report (QueryError when there are several)."""
    from . import report

    if run is not None:
        run_id = resolve_run(con, run)
        limit = report.DEFAULT_MAX_EVENTS if max_events is None else max_events
        # a page reads most of the workspace: under the drawn inputs' size DuckDB evicts what it
        # scanned and spills its large intermediates instead of growing to several times that
        with memory_cap(con, run_reports(con, run_id)):
            return report.gather_run(con, run_id, run_findings(con, run_id, config), max_events=limit)
    if diff_sides is not None:
        result = diff(con, diff_sides[0], diff_sides[1], config=config)
        ids = [*result.a.report_ids[:1], *result.b.report_ids[:1]]
        sides = [report_data(con, rid, max_events=max_events, config=config) for rid in ids]
        return {"diff": result.to_dict(), "sides": sides}
    if report_id is None:
        ids = _report_ids(con)
        if len(ids) != 1:
            raise QueryError(
                f"the workspace holds {len(ids)} reports; choose one with --report ID (`nsa reports` lists them)."
            )
        report_id = ids[0]
    require_reports(con, [report_id])
    materialise(con, report_reads(), [report_id])
    limit = report.DEFAULT_MAX_EVENTS if max_events is None else max_events
    with memory_cap(con, [report_id]):  # the rules and the page scan most of the workspace
        # the rules' Context is kept: the page reuses the query results it holds
        from .rules.context import Context

        made: list[Context] = []
        found = findings(con, report_id, config=config, context=lambda *a: _keep(made, Context(*a)))
        return report.gather(con, report_id, found, max_events=limit, context=made[0] if made else None)


def _keep(made: list[Any], item: Any) -> Any:
    made.append(item)
    return item


def run_findings(
    con: duckdb.DuckDBPyConnection, run: str | int, config: dict[str, Any] | None = None
) -> list[Finding]:
    """The findings of a run, ranked: the rules on each of its reports, and the run rules on the
    run. Materialises what the page and the rules read first."""
    materialise(con, report_reads(), run_reports(con, run))
    return findings(con, config=config, run=run)


def report_reads() -> set[str]:
    """The canonical tables `report_data` reads: the page's queries and the rules'."""
    from . import report

    return set(report.READS) | rules_reads()


def _by_report(rel: duckdb.DuckDBPyRelation) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rel.fetchall():
        record = dict(zip(rel.columns, row, strict=True))
        out.setdefault(int(record["report_id"]), []).append(record)
    return out


def severities() -> tuple[str, ...]:
    from .rules import SEVERITIES

    return tuple(SEVERITIES)


def schema_tables() -> list[schema.Table]:
    """The canonical tables and views, documented column by column."""
    return list(schema.TABLES)


def _report_ids(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Every report id of the workspace, in order."""
    return [int(r[0]) for r in con.execute("SELECT report_id FROM reports ORDER BY 1").fetchall()]


def require_reports(con: duckdb.DuckDBPyConnection, report_ids: Iterable[int | None]) -> None:
    """Raise QueryError unless every report id given (None: all reports) is in the workspace."""
    for rid in report_ids:
        if rid is None:
            continue
        found = params.execute(con, "SELECT count(*) FROM reports WHERE report_id = $rid", {"rid": rid})
        if not params.first_row(found)[0]:
            raise QueryError(f"no report {rid} in the workspace; `nsa reports` lists them.")


def is_read_only(con: duckdb.DuckDBPyConnection) -> bool:
    try:
        return bool(params.first_row(con.execute("SELECT current_setting('access_mode') = 'read_only'"))[0])
    except duckdb.Error:
        return False


# --- diff (nsight_analytics.diff) ------------------------------------------------------------


def diff(
    con: duckdb.DuckDBPyConnection,
    a: Any,
    b: Any,
    *,
    confidence: float = 0.95,
    noise_floor: float = 0.02,
    with_findings: bool = True,
    config: dict[str, Any] | None = None,
    runs: bool = False,
) -> Diff:
    """What changed from A (before) to B (after), and whether the step-time change is real.

    Each side is a report id, `"1,2"`, a file (ingested first, unless already in the
    workspace), or a list of those (all ranks of one run); with `runs`, a run (id or name): two
    runs of one world size compare as the job before and after (with rank and collective
    changes), two world sizes as a scaling (verdict 'scaling'). Returns a `Diff` (`.to_dict()` is
    what `nsa diff --format json` prints); `nsight_analytics.diff` says how it is computed.
    """
    from .diff import compare, compare_runs

    if runs:
        run_a, run_b = resolve_run(con, a), resolve_run(con, b)
        ids = _runs.run_reports(con, run_a) + _runs.run_reports(con, run_b)
        materialise(con, diff_reads(with_findings, runs=True), ids)
        return compare_runs(
            con,
            run_a,
            run_b,
            confidence=confidence,
            noise_floor=noise_floor,
            with_findings=with_findings,
            config=config,
        )
    a_ids, b_ids = diff_reports(con, a), diff_reports(con, b)
    require_reports(con, [*a_ids, *b_ids])
    materialise(con, diff_reads(with_findings))
    return compare(
        con,
        a_ids,
        b_ids,
        confidence=confidence,
        noise_floor=noise_floor,
        with_findings=with_findings,
        config=config,
    )


def diff_reads(with_findings: bool = True, runs: bool = False) -> set[str]:
    """The canonical tables a diff reads (its own, the run queries' for runs, and the rules'
    for its findings)."""
    from .diff import READS, RUN_QUERIES

    needs = set(READS) | (rules_reads() if with_findings else set())
    if runs:
        needs |= set().union(*(queries.get(q).tables() for q in RUN_QUERIES))
    return needs


def is_report_ids(text: str) -> bool:
    """`3` or `1,2`: report ids, not a file name."""
    return re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", text) is not None


def diff_reports(con: duckdb.DuckDBPyConnection, side: Any) -> list[int]:
    """The report ids of one side of a diff: ids as they are, files ingested (or found, when
    the same content is already in the workspace)."""
    items = [side] if isinstance(side, (int, str, os.PathLike)) else list(side)
    ids: list[int] = []
    for item in items:
        if isinstance(item, int):
            ids.append(item)
        elif isinstance(item, str) and is_report_ids(item):
            ids += [int(x) for x in item.split(",")]
        elif Path(item).exists():
            ids.append(ingest(con, Path(item)).report_id)
        else:
            raise QueryError(f"{item} is neither a report id nor a file; `nsa reports` lists the reports.")
    if not ids:
        raise QueryError("a diff side needs at least one report id or file.")
    return ids


def diff_gate(
    result: Diff,
    threshold_pct: float | None,
    metric: str = "step_time",
    fail_inconclusive: bool = False,
    allow_not_comparable: bool = False,
    new_findings: str | None = None,
) -> Gate:
    """The CI gate of `nsa diff --fail-on-regression PCT`: failed when B regressed beyond PCT,
    or when A and B are not comparable (unless `allow_not_comparable`); with
    `fail_inconclusive`, also when an inconclusive step time does not rule that out. With
    `new_findings` (`--fail-on-new-finding SEVERITY`), also when B has a finding at or above that
    severity that is new or worse than in A; `threshold_pct` None gates on findings alone."""
    from .diff import gate

    return gate(result, threshold_pct, metric, fail_inconclusive, allow_not_comparable, new_findings)


def save_baseline(con: duckdb.DuckDBPyConnection, name: str, side: Any) -> list[int]:
    """Store the side's reports (ids or files, ingested first) as baseline `name`."""
    from .diff import save_baseline as save

    folder = dataset.dataset_path(con)
    if folder is not None:
        raise WorkspaceError(
            f"{folder} is a Parquet dataset, which nsa only reads; store baselines in a workspace (--db)."
        )
    ids = diff_reports(con, side)
    require_reports(con, ids)
    save(con, name, ids)
    return ids


def baseline(con: duckdb.DuckDBPyConnection, name: str) -> list[int]:
    """The report ids stored as baseline `name` (QueryError when there is none)."""
    from .diff import baseline_reports

    return baseline_reports(con, name)


def diff_gate_metrics() -> tuple[str, ...]:
    """What `nsa diff --fail-on-regression` can watch."""
    from .diff import GATE_METRICS

    return GATE_METRICS
