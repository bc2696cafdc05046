"""Rows for hand-built workspaces: `insert(con, "kernels", [{...}])` writes what an ingest would;
and `union_within`, interval arithmetic to check the timeline queries against.

`kernels` is a view (kernel_rows joined with kernel_names), so a kernel given with its `name`
(and `short_name`) becomes a kernel_rows row with a name id plus, once per distinct name and
report, a kernel_names row. Every other table takes the dicts as they are.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

NAME_COLS = ("name", "short_name", "mangled_name")


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict]) -> None:
    """One INSERT per run of rows with the same columns (executemany), not one per row."""
    if table == "kernels":
        rows = [_kernel_row(con, row) for row in rows]
    target = "kernel_rows" if table == "kernels" else table
    batches: dict[tuple[str, ...], list[list]] = {}
    for row in rows:
        batches.setdefault(tuple(row), []).append(list(row.values()))
    for cols, values in batches.items():
        names = ", ".join(f'"{c}"' for c in cols)
        con.executemany(f'INSERT INTO "{target}" ({names}) VALUES ({", ".join("?" * len(cols))})', values)
    if table == "kernels":
        con.execute(
            "UPDATE kernel_names SET kernels = (SELECT count(*) FROM kernel_rows k "
            "WHERE k.report_id = kernel_names.report_id AND k.name_id = kernel_names.name_id)"
        )


def _kernel_row(con: duckdb.DuckDBPyConnection, row: dict) -> dict:
    names = {c: row.get(c) for c in NAME_COLS}
    rest = {k: v for k, v in row.items() if k not in NAME_COLS}
    if not any(names.values()):
        return rest
    rid = row["report_id"]
    found = con.execute(
        "SELECT name_id FROM kernel_names WHERE report_id = ? AND name IS NOT DISTINCT FROM ?",
        [rid, names["name"]],
    ).fetchone()
    if found:
        return {**rest, "name_id": found[0]}
    nid = con.execute(
        "SELECT coalesce(max(name_id), 0) + 1 FROM kernel_names WHERE report_id = ?", [rid]
    ).fetchone()[0]
    con.execute(
        "INSERT INTO kernel_names (report_id, name_id, name, short_name, mangled_name, kernels) VALUES (?, ?, ?, ?, ?, 0)",
        [rid, nid, names["name"], names["short_name"], names["mangled_name"]],
    )
    return {**rest, "name_id": nid}


def union_within(
    intervals: list[tuple[int, int]], lo: float = float("-inf"), hi: float = float("inf")
) -> int:
    """Length of the union of intervals clipped to [lo, hi], by sort and merge."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return int(total + (0 if cur_e is None else cur_e - cur_s))


def gunzipped_sqlite(path: Path, folder: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection on a `.sqlite.gz` export, decompressed into `folder` once."""
    out = folder / path.name.removesuffix(".gz")
    if not out.exists():
        with gzip.open(path) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return sqlite3.connect(out)


@contextmanager
def opened(db: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for the length of a block: `nsa diff` on report ids opens the workspace
    read-only, which DuckDB refuses while this process holds a writable connection to it."""
    import nsight_analytics as nsa

    con = nsa.connect(db)
    try:
        yield con
    finally:
        con.close()


def required_params(name: str) -> dict[str, list]:
    """An empty list for each required parameter of a library query (gap_calls' intervals): no
    intervals, no rows - what a test needs to run every query bare."""
    from nsight_analytics import queries

    return {p.name: [] for p in queries.get(name).params if p.required}
