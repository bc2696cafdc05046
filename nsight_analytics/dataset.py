"""A workspace as a hive-partitioned Parquet dataset, for engines beyond one DuckDB file.

`nsa export DIR` writes it; `nsa <command> --data DIR` (and `api.connect(DIR)`) reads it with
DuckDB over Parquet, read-only; Spark reads the same files (`nsight_analytics.spark`).

Layout (stable: other engines read it):

    DIR/_nsa_dataset.json                          the manifest (written last: the commit point)
    DIR/<table>/run_id=<id>/report_id=<id>/<name>.parquet
    DIR/runs/run_id=<id>/<name>.parquet

- One folder per stored canonical table (`schema.STORED`, except `nsa_workspace`: the manifest
  holds the layout version). The views (`kernels`, `collectives`) are not written; a reader
  creates them over the tables (`schema.VIEWS`).
- Every table with a `report_id` is partitioned by `run_id` then `report_id`: hive folders
  `run_id=<reports.run_id>` (`__HIVE_DEFAULT_PARTITION__` for a report in no run: NULL) and
  `report_id=<id>`. The partition columns are not stored inside the files. `run_id` is a
  column of `reports` and `ranks` only; in the other tables it is a partition column alone,
  which a reader drops. `runs` is partitioned by `run_id` alone.
- Every table has one more column than in schema.py, `rowid` BIGINT (last): the row's
  position in its workspace table plus an offset per export (`tables.<t>.next_rowid` in the
  manifest), so it is unique in the table across exports and keeps the workspace's order
  within a report. Queries read it as DuckDB's `rowid` pseudo-column (an order among rows
  at the same time, a key to join a row back), which a view over Parquet does not have.
- Files are written by DuckDB (`COPY ... (FORMAT parquet, PARTITION_BY (run_id, report_id))`),
  any number per partition, named freely: read `DIR/<table>/**/*.parquet`.
- Column types are the canonical ones (`schema.py`: INTEGER, BIGINT, DOUBLE, BOOLEAN,
  VARCHAR, VARCHAR[] (a Parquet list), TIMESTAMP (microseconds, UTC)). Hive partition values
  come back as strings unless typed: read them with hive_types {run_id: INTEGER,
  report_id: INTEGER} (DuckDB) or cast them (Spark). Units are those of schema.py (ns, bytes).
- Nothing is deferred: export loads every deferred step first, and the exported
  `reports.deferred_steps` is an empty list.
- Report ids and run ids are unique in the dataset: appending a workspace gives its reports
  and runs fresh ids (max in the dataset + 1, ...), the same in every table.
- Only reports listed in the manifest are part of the dataset: a reader keeps only those
  partitions (`report_id IN manifest`), so partitions of an export that was interrupted
  before its manifest was written are invisible (the next export removes them).

A reader's connection (`open_dataset`) also has the view `nsa_dataset` (one row: `path`, the
folder), by which the facade knows it is not a workspace, and `nsa_workspace`.

Manifest fields (`_nsa_dataset.json`, JSON object):

    format            "nsa-dataset"
    dataset_version   DATASET_VERSION (1): this layout; a reader refuses another
    schema_version    workspace.SCHEMA_VERSION of the canonical tables written
    nsa_version       the nsa that last wrote it
    partition_by      ["run_id", "report_id"]
    tables            {table: {"columns": [[name, type], ...] (rowid last),
                               "path": "<table>/**/*.parquet", "next_rowid": N}}
    reports           [{"report_id", "run_id", "format", "source_path", "sha256", "content_hash",
                        "partition": "run_id=<r>/report_id=<id>", "exported_at"}, ...]
    runs              [{"run_id", "name"}, ...]
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from . import params, schema
from .errors import WorkspaceError
from .names import DATASET_MANIFEST
from .outputs import write_atomic
from .workspace import SCHEMA_VERSION

MANIFEST = DATASET_MANIFEST
FORMAT = "nsa-dataset"
DATASET_VERSION = 1
PARTITION_BY = ("run_id", "report_id")
HIVE_TYPES = {"run_id": "INTEGER", "report_id": "INTEGER"}
_TMP_PREFIX = ".nsa-tmp-"


def _nsa_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nsight-analytics")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown"


# The workspace's row order, which queries read as DuckDB's `rowid` (an order among rows at the
# same time, a key to join a row back): stored as a column, unique in the table across exports.
ROWID = schema.Col("rowid", "BIGINT", "", "The row's order in its table, unique in the dataset.")


def tables() -> tuple[schema.Table, ...]:
    """The canonical tables a dataset holds: every stored one but the layout version."""
    return tuple(t for t in schema.STORED if t.name != "nsa_workspace")


def is_dataset(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / MANIFEST).is_file()


def table_paths(directory: str | os.PathLike[str]) -> dict[str, str]:
    """{table: glob of its Parquet files} for every table of the dataset (a table no export
    wrote rows to has no files: `has_files` says which do)."""
    root = Path(directory).expanduser().resolve()
    return {t.name: str(root / t.name / "**" / "*.parquet") for t in tables()}


def has_files(directory: str | os.PathLike[str], table: str) -> bool:
    folder = Path(directory).expanduser() / table
    return folder.is_dir() and next(folder.rglob("*.parquet"), None) is not None


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the dataset at `directory`; WorkspaceError when there is none, or it is of
    a layout or schema version this nsa does not read."""
    root = Path(directory).expanduser()
    path = root / MANIFEST
    if not root.is_dir():
        what = "a file" if root.exists() else "nothing"
        raise WorkspaceError(
            f"{root} is {what}, not an nsa dataset (a folder written by `nsa export`); "
            "write one with `nsa export DIR`."
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkspaceError(
            f"{root} is not an nsa dataset: it has no {MANIFEST}; write one with `nsa export {root}`."
        ) from None
    except (OSError, ValueError) as exc:
        raise WorkspaceError(f"cannot read the dataset manifest {path} ({exc}).") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise WorkspaceError(f'{path} is not an nsa dataset manifest (no "format": "{FORMAT}").')
    layout, version = manifest.get("dataset_version"), manifest.get("schema_version")
    if layout != DATASET_VERSION or version != SCHEMA_VERSION:
        newer = (layout or 0) > DATASET_VERSION or (version or 0) > SCHEMA_VERSION
        todo = (
            "upgrade nsa (pip install -U nsight-analytics) to read it"
            if newer
            else "export the workspaces again into a new folder"
        )
        raise WorkspaceError(
            f"dataset {root} has layout {layout} and schema version {version}, and this nsa "
            f"reads layout {DATASET_VERSION}, schema version {SCHEMA_VERSION}; {todo}."
        )
    return manifest


# --- reading ----------------------------------------------------------------------------------


def _read_parquet(glob: str, partitions: Iterable[str] = PARTITION_BY) -> str:
    types = ", ".join(f"'{k}': {HIVE_TYPES[k]}" for k in partitions)
    return f"read_parquet({_literal(glob)}, hive_partitioning = true, hive_types = {{{types}}})"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ids(values: Iterable[int]) -> str:
    return ", ".join(str(int(v)) for v in values) or "NULL"


def open_dataset(directory: str | os.PathLike[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per canonical table over the dataset's
    Parquet files, typed as in the workspace, plus the canonical views: queries, rules, the
    summary and the report run on it unchanged. Read-only: the views cannot be written."""
    root = Path(directory).expanduser().resolve()
    manifest = read_manifest(root)
    report_ids = [int(r["report_id"]) for r in manifest.get("reports", [])]
    run_ids = [int(r["run_id"]) for r in manifest.get("runs", [])]
    con = params.connect()
    con.execute("SET asof_loop_join_threshold = 0")  # as open_workspace does
    try:
        paths = table_paths(root)
        for table in tables():
            written = {c[0] for c in manifest["tables"].get(table.name, {}).get("columns", [])}
            files = has_files(root, table.name)
            con.execute(_view(table, paths[table.name], written if files else None, report_ids, run_ids))
        con.execute(
            f"CREATE VIEW nsa_workspace AS SELECT CAST({int(SCHEMA_VERSION)} AS INTEGER) AS schema_version"
        )
        con.execute(f"CREATE VIEW nsa_dataset AS SELECT {_literal(str(root))} AS path")
        for view in schema.VIEWS:
            con.execute(view.ddl())
    except BaseException:
        con.close()
        raise
    return con


def _view(
    table: schema.Table, glob: str, have: set[str] | None, report_ids: list[int], run_ids: list[int]
) -> str:
    """The view of one table (`have`: the columns its files hold, as the manifest says; None: no
    files): canonical columns and types, only the manifest's reports (or runs); columns an
    older nsa did not write are NULL. The files' schemas are not read here: every file of a
    dataset has the manifest's columns (export refuses to add others)."""
    if have is not None:
        source = _read_parquet(glob, PARTITION_BY if "report_id" in table.col_names else ("run_id",))
        key, ids = ("report_id", report_ids) if "report_id" in table.col_names else ("run_id", run_ids)
        where = f"WHERE {_id_filter(key, ids)}"
    else:
        source, have, where = "(SELECT 1)", set(), "WHERE false"
    cols = ", ".join(
        f"CAST({_quoted(c.name) if c.name in have else 'NULL'} AS {c.type}) AS {_quoted(c.name)}"
        for c in (*table.cols, ROWID)
    )
    return f"CREATE VIEW {_quoted(table.name)} AS SELECT {cols} FROM {source} {where}"


def _id_filter(key: str, ids: Iterable[int]) -> str:
    """The manifest's ids as ranges (an export gives its reports and runs consecutive ids, so
    usually one): DuckDB tests a range against each file's hive partition in constant time, an
    IN list of every id in time growing with the list - 1,000 reports' `IN (...)` made a query
    over all of them 7x slower, and one report's 25x."""
    runs: list[list[int]] = []
    for i in sorted({int(v) for v in ids}):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    if not runs:
        return "false"
    if len(runs) > 64:
        return f"{key} IN ({_ids(ids)})"
    return " OR ".join(f"{key} BETWEEN {lo} AND {hi}" for lo, hi in runs)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --- writing ----------------------------------------------------------------------------------


@dataclass
class Exported:
    """What an export did: {workspace report id: dataset report id} of the reports written, and
    the reports skipped because the dataset holds them already (workspace id, its dataset id)."""

    directory: Path
    written: dict[int, int] = field(default_factory=dict)
    skipped: list[tuple[int, int]] = field(default_factory=list)
    runs: dict[int, int] = field(default_factory=dict)


def _target(directory: str | os.PathLike[str]) -> tuple[Path, dict[str, Any] | None]:
    """The folder to export into and its manifest (None: a new dataset), or one sentence on why
    it cannot be."""
    root = Path(directory).expanduser()
    if root.exists() and not root.is_dir():
        raise WorkspaceError(
            f"cannot export into {root}: it is a file; choose a folder (new or an nsa dataset)."
        )
    if root.is_dir():
        if is_dataset(root):
            manifest = read_manifest(root)
        elif any(p.name != MANIFEST for p in root.iterdir()):
            raise WorkspaceError(
                f"cannot export into {root}: the folder holds other files and is not an nsa dataset; "
                "choose an empty or new folder, or an existing dataset to add to."
            )
        else:
            manifest = None
        if not os.access(root, os.W_OK | os.X_OK):
            raise WorkspaceError(f"cannot export into {root}: permission denied; choose a writable folder.")
        return root.resolve(), manifest
    parent = root.parent
    if not parent.is_dir():
        raise WorkspaceError(f"cannot export into {root}: folder {parent} does not exist.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise WorkspaceError(
            f"cannot export into {root}: permission denied in {parent}; choose a writable folder."
        )
    return root.resolve(), None


def export(
    con: duckdb.DuckDBPyConnection,
    directory: str | os.PathLike[str],
    reports: Iterable[int] | None = None,
) -> Exported:
    """Write the workspace on `con` (its reports `reports`, default all) into the dataset at
    `directory`, creating it or adding to it.

    `con` must hold every row already (nothing deferred: `api.export` loads it first). A report
    the dataset holds already (same source path and content hash) is skipped; the others get fresh
    report and run ids. Each table is written by DuckDB into a temporary folder inside the
    dataset, its partitions then renamed into place, and the manifest replaced last: an export
    interrupted part-way adds nothing a reader sees."""
    root, manifest = _target(directory)
    manifest = _same_columns(root, manifest) if manifest else _new_manifest()
    rows = con.execute(
        "SELECT report_id, run_id, format, source_path, sha256, content_hash FROM reports ORDER BY report_id"
    ).fetchall()
    wanted = None if reports is None else {int(r) for r in reports}
    # a report's key: its content_hash, or its sha256 when ingested before nsa kept content_hash
    have = {
        (r.get("source_path"), r.get("content_hash") or r.get("sha256")): int(r["report_id"])
        for r in manifest["reports"]
    }
    result = Exported(root)
    base_report = max((int(r["report_id"]) for r in manifest["reports"]), default=0)
    base_run = max((int(r["run_id"]) for r in manifest["runs"]), default=0)
    new_reports: list[dict[str, Any]] = []
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for rid, run, fmt, source, sha, key in rows:
        if wanted is not None and rid not in wanted:
            continue
        if (source, key or sha) in have:
            result.skipped.append((rid, have[(source, key or sha)]))
            continue
        new_id = base_report + len(result.written) + 1
        result.written[rid] = new_id
        if run is not None and run not in result.runs:
            result.runs[run] = base_run + len(result.runs) + 1
        new_run = result.runs.get(run) if run is not None else None
        new_reports.append(
            {
                "report_id": new_id,
                "run_id": new_run,
                "format": fmt,
                "source_path": source,
                "sha256": sha,
                "content_hash": key,
                "partition": f"run_id={_hive(new_run)}/report_id={new_id}",
                "exported_at": now,
            }
        )
    if not result.written:
        return result
    run_names = dict(
        con.execute(f"SELECT run_id, name FROM runs WHERE run_id IN ({_ids(result.runs)})").fetchall()
    )
    _remove_orphans(root, manifest)
    tmp = root / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
    root.mkdir(exist_ok=True)
    try:
        tmp.mkdir()
        _write_maps(con, result)
        for table in tables():
            entry = manifest["tables"][table.name]
            offset = int(entry.get("next_rowid", 0))
            _copy(con, table, tmp / table.name, offset)
            last = params.first_row(con.execute(f"SELECT max(rowid) FROM {_quoted(table.name)}"))[0]
            entry["next_rowid"] = offset + (int(last) + 1 if last is not None else 0)
        for table in tables():
            _move_partitions(tmp / table.name, root / table.name)
        manifest["reports"] += new_reports
        manifest["runs"] += [{"run_id": new, "name": run_names.get(old)} for old, new in result.runs.items()]
        manifest["nsa_version"] = _nsa_version()
        write_atomic(root / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        con.execute("DROP TABLE IF EXISTS temp._nsa_report_map")
        con.execute("DROP TABLE IF EXISTS temp._nsa_run_map")
    return result


def _same_columns(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a dataset whose tables have the columns this nsa writes; else one
    sentence (every file of a table has the same columns, so readers need not open them all)."""
    want = _new_manifest()["tables"]
    for name, entry in want.items():
        have = manifest["tables"].get(name, {}).get("columns")
        if have != entry["columns"]:
            raise WorkspaceError(
                f"dataset {root} holds table {name} with other columns than this nsa writes "
                "(made by another nsa version); export into a new folder."
            )
    return manifest


def _new_manifest() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "dataset_version": DATASET_VERSION,
        "schema_version": SCHEMA_VERSION,
        "nsa_version": _nsa_version(),
        "partition_by": list(PARTITION_BY),
        "tables": {
            t.name: {
                "columns": [[c.name, c.type] for c in (*t.cols, ROWID)],
                "path": f"{t.name}/**/*.parquet",
                "next_rowid": 0,
            }
            for t in tables()
        },
        "reports": [],
        "runs": [],
    }


def _hive(value: int | None) -> str:
    return "__HIVE_DEFAULT_PARTITION__" if value is None else str(int(value))


def _write_maps(con: duckdb.DuckDBPyConnection, result: Exported) -> None:
    """The id maps as TEMP tables (a read-only workspace connection may create those)."""
    con.execute("CREATE OR REPLACE TEMP TABLE _nsa_report_map (old INTEGER, new INTEGER)")
    con.execute("CREATE OR REPLACE TEMP TABLE _nsa_run_map (old INTEGER, new INTEGER)")
    pairs = ", ".join(f"({int(a)}, {int(b)})" for a, b in result.written.items())
    con.execute(f"INSERT INTO _nsa_report_map VALUES {pairs}")
    if result.runs:
        pairs = ", ".join(f"({int(a)}, {int(b)})" for a, b in result.runs.items())
        con.execute(f"INSERT INTO _nsa_run_map VALUES {pairs}")


def _copy(con: duckdb.DuckDBPyConnection, table: schema.Table, out: Path, rowid_offset: int) -> None:
    """One table's rows of the exported reports, ids remapped, into hive partitions under `out`."""
    names = table.col_names
    cols = []
    for c in table.cols:
        if c.name == "report_id":
            cols.append("m.new AS report_id")
        elif c.name == "run_id":
            cols.append("u.new AS run_id")
        elif table.name == "reports" and c.name == "deferred_steps":
            cols.append("CAST([] AS VARCHAR[]) AS deferred_steps")
        else:
            cols.append(f"t.{_quoted(c.name)}")
    cols.append(f"t.rowid + {int(rowid_offset)} AS rowid")
    if "report_id" in names:
        run = "" if "run_id" in names else ", u.new AS run_id"
        sql = (
            f"SELECT {', '.join(cols)}{run} FROM {_quoted(table.name)} AS t "
            "JOIN _nsa_report_map AS m ON m.old = t.report_id "
            "JOIN reports AS r ON r.report_id = t.report_id "
            "LEFT JOIN _nsa_run_map AS u ON u.old = r.run_id"
        )
        partition = "run_id, report_id"
    else:  # runs
        sql = (
            f"SELECT {', '.join(cols)} FROM {_quoted(table.name)} AS t "
            "JOIN _nsa_run_map AS u ON u.old = t.run_id"
        )
        partition = "run_id"
    con.execute(
        f"COPY ({sql}) TO {_literal(str(out))} "
        f"(FORMAT parquet, PARTITION_BY ({partition}), FILENAME_PATTERN 'part_{{uuid}}')"
    )


def _move_partitions(src: Path, dst: Path) -> None:
    """Rename each written partition folder into the dataset (atomic, one folder each)."""
    if not src.is_dir():
        return  # no rows in this table
    for run_dir in sorted(src.iterdir()):
        leaves = sorted(p for p in run_dir.iterdir() if p.is_dir()) or [run_dir]
        for leaf in leaves:
            target = dst / leaf.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(leaf, target)


def _remove_orphans(root: Path, manifest: dict[str, Any]) -> None:
    """Partitions an interrupted export left (not in the manifest), and its temporary folders."""
    for tmp in root.glob(f"{_TMP_PREFIX}*"):
        shutil.rmtree(tmp, ignore_errors=True)
    reports = {f"report_id={int(r['report_id'])}" for r in manifest["reports"]}
    runs = {f"run_id={int(r['run_id'])}" for r in manifest["runs"]}
    for table in tables():
        folder = root / table.name
        if not folder.is_dir():
            continue
        for run_dir in folder.iterdir():
            if table.name == "runs":
                if run_dir.name not in runs:
                    shutil.rmtree(run_dir, ignore_errors=True)
                continue
            for leaf in run_dir.iterdir():
                if leaf.name not in reports:
                    shutil.rmtree(leaf, ignore_errors=True)


def dataset_path(con: duckdb.DuckDBPyConnection) -> str | None:
    """The folder of the dataset `con` reads (open_dataset), or None for a workspace."""
    found = con.execute(
        "SELECT 1 FROM duckdb_views() WHERE view_name = 'nsa_dataset' AND NOT temporary"
    ).fetchone()
    if not found:
        return None
    return str(params.first_row(con.execute("SELECT path FROM nsa_dataset"))[0])


def check_target(directory: str | os.PathLike[str]) -> None:
    """Raise WorkspaceError (one sentence) when `directory` cannot take an export."""
    _target(directory)
