#!/usr/bin/env python3
"""Make a large, realistic nsys SQLite export by tiling a real one in time.

    python benchmarks/make_large_export.py SRC N OUT [--margin-ns 1000000]

OUT gets SRC's schema; every time-stamped activity table (any table with a `start` or a
`timestamp` column: CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS, OSRT_API, DIAGNOSTIC_EVENT, ...) holds N
copies of SRC's rows, copy i shifted by i * (span + margin) ns, with `correlationId` offset by
i * (max correlationId + 1) in every table, so kernel <-> API pairs stay pairs and never collide
across copies. Call stacks are tiled with their owners: SAMPLING_CALLCHAINS with COMPOSITE_EVENTS
(`id`), CUDA_CALLCHAINS with CUPTI_ACTIVITY_KIND_RUNTIME and OSRT_CALLCHAINS with OSRT_API
(`callchainId`; NULL, and OSRT_API's 0, meaning none) get N copies with the ids offset alike. Everything else (StringIds, ENUM_*, META_DATA_*, TARGET_INFO_*, PROCESSES,
ThreadNames...) is copied once; ANALYSIS_DETAILS' stopTime/duration are stretched to the new
span. The whole copy is SQL inside SQLite (ATTACH, one INSERT ... SELECT per table over a
recursive CTE of copy numbers, one transaction, journal and sync off): 300 copies of a 2.2 MB
export (about 9M rows, 600 MB) take about 10 s.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from pathlib import Path

# Columns holding session-relative nanosecond timestamps: shifted per copy when not NULL.
TIME_COLUMNS = ("start", "end", "timestamp", "qmdBulkReleaseDone", "qmdPreexitDone", "qmdLastCtaDone")
# Ids that pair rows across tables (kernel <-> API, NVTX start/end ranges): offset per copy.
ID_COLUMNS = ("correlationId", "rangeId")
# Backtrace tables (not time-stamped), the (table, column) of the rows that point at their `id`
# and the value that means "no backtrace" there besides NULL (CUDA_CALLCHAINS has an id 0).
CHAINS = {
    "SAMPLING_CALLCHAINS": ("COMPOSITE_EVENTS", "id", None),
    "CUDA_CALLCHAINS": ("CUPTI_ACTIVITY_KIND_RUNTIME", "callchainId", None),
    "OSRT_CALLCHAINS": ("OSRT_API", "callchainId", 0),
}


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _columns(con: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA {schema}.table_info({_q(table)})")]


def is_tiled(columns: list[str]) -> bool:
    return "start" in columns or "timestamp" in columns


def _max(con: sqlite3.Connection, tables: dict[str, list[str]], col: str) -> int | None:
    vals = []
    for t, cols in tables.items():
        if col in cols:
            v = con.execute(f"SELECT max({_q(col)}) FROM src.{_q(t)}").fetchone()[0]
            if v is not None:
                vals.append(int(v))
    return max(vals) if vals else None


def _min(con: sqlite3.Connection, tables: dict[str, list[str]], col: str) -> int | None:
    vals = []
    for t, cols in tables.items():
        if col in cols:
            v = con.execute(f"SELECT min({_q(col)}) FROM src.{_q(t)}").fetchone()[0]
            if v is not None:
                vals.append(int(v))
    return min(vals) if vals else None


def make_large_export(
    src: str | os.PathLike[str], copies: int, out: str | os.PathLike[str], margin_ns: int = 1_000_000
) -> dict[str, object]:
    """Write OUT from SRC tiled `copies` times; returns what it did (counts, span, offsets)."""
    if copies < 1:
        raise ValueError("copies must be >= 1")
    src, out = Path(src), Path(out)
    if not src.is_file():
        raise FileNotFoundError(src)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    t0 = time.perf_counter()
    con = sqlite3.connect(tmp, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("PRAGMA cache_size=-262144")  # 256 MB page cache
        con.execute("ATTACH DATABASE ? AS src", (str(src),))
        objects = con.execute(
            "SELECT type, name, tbl_name, sql FROM src.sqlite_master "
            "WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type = 'table' DESC, rowid"
        ).fetchall()
        tables = {name: _columns(con, "src", name) for typ, name, _, _ in objects if typ == "table"}
        # a backtrace table is tiled with its owner, both ids offset by one amount per copy
        chain_ids: dict[tuple[str, str], int] = {}
        no_chain: dict[tuple[str, str], int] = {}
        for chain, (owner, col, none) in CHAINS.items():
            if "id" in tables.get(chain, ()) and col in tables.get(owner, ()):
                top = con.execute(
                    f"SELECT max(m) FROM (SELECT max(id) AS m FROM src.{_q(chain)} "
                    f"UNION ALL SELECT max({_q(col)}) FROM src.{_q(owner)})"
                ).fetchone()[0]
                chain_ids[(chain, "id")] = chain_ids[(owner, col)] = int(top or 0) + 1
                if none is not None:
                    no_chain[(owner, col)] = none
        tiled = {t: c for t, c in tables.items() if is_tiled(c) or (t, "id") in chain_ids}

        starts = [v for v in (_min(con, tiled, "start"), _min(con, tiled, "timestamp")) if v is not None]
        ends = [v for v in (_max(con, tiled, "end"), _max(con, tiled, "start"), _max(con, tiled, "timestamp"))
                if v is not None]  # fmt: skip
        span = (max(ends) - min(starts)) if starts and ends else 0
        period = span + margin_ns
        id_offsets = {c: (_max(con, tiled, c) or 0) + 1 for c in ID_COLUMNS}

        con.execute("BEGIN")
        for typ, name, _, sql in objects:
            if typ == "table":
                con.execute(sql)
        counts: dict[str, int] = {}
        for table, cols in tables.items():
            names = ", ".join(_q(c) for c in cols)
            if table in tiled:
                exprs = []
                for c in cols:
                    if (table, c) in no_chain:
                        none, step = no_chain[(table, c)], chain_ids[(table, c)]
                        exprs.append(
                            f"CASE WHEN s.{_q(c)} = {none} THEN {none} ELSE s.{_q(c)} + k.i * {step} END"
                        )
                    elif (table, c) in chain_ids:  # NULL stays NULL
                        exprs.append(f"s.{_q(c)} + k.i * {chain_ids[(table, c)]}")
                    elif c in TIME_COLUMNS:
                        exprs.append(f"s.{_q(c)} + k.i * {period}")
                    elif c in ID_COLUMNS:
                        exprs.append(f"s.{_q(c)} + k.i * {id_offsets[c]}")
                    else:
                        exprs.append(f"s.{_q(c)}")
                con.execute(
                    f"WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < {copies - 1}) "
                    f"INSERT INTO main.{_q(table)} ({names}) "
                    f"SELECT {', '.join(exprs)} FROM k CROSS JOIN src.{_q(table)} s"
                )
            else:
                con.execute(f"INSERT INTO main.{_q(table)} ({names}) SELECT {names} FROM src.{_q(table)}")
            counts[table] = con.execute(f"SELECT count(*) FROM main.{_q(table)}").fetchone()[0]
        if "ANALYSIS_DETAILS" in tables and {"stopTime", "duration"} <= set(tables["ANALYSIS_DETAILS"]):
            extra = (copies - 1) * period
            con.execute(
                f"UPDATE main.ANALYSIS_DETAILS SET stopTime = stopTime + {extra}, duration = duration + {extra}"
            )
        for typ, name, _, sql in objects:  # indexes, views, triggers after the data: faster
            if typ != "table":
                con.execute(sql)
        con.execute("COMMIT")
        con.execute("DETACH DATABASE src")
    finally:
        con.close()
    tmp.replace(out)
    return {
        "source": str(src),
        "output": str(out),
        "copies": copies,
        "span_ns": span,
        "period_ns": period,
        "id_offsets": id_offsets,
        "chain_offsets": {f"{t}.{c}": v for (t, c), v in chain_ids.items()},
        "tiled_tables": sorted(tiled),
        "rows": counts,
        "bytes": out.stat().st_size,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="a real nsys SQLite export")
    ap.add_argument("copies", type=int, help="how many copies to tile in time")
    ap.add_argument("out", help="output .sqlite (replaced)")
    ap.add_argument("--margin-ns", type=int, default=1_000_000, help="idle time between copies (ns)")
    args = ap.parse_args(argv)
    info = make_large_export(args.src, args.copies, args.out, args.margin_ns)
    rows = info["rows"]
    key = [
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "NVTX_EVENTS",
        "OSRT_API",
    ]
    shown = ", ".join(f"{t}={rows[t]:,}" for t in key if t in rows)
    print(
        f"{info['output']}: {info['copies']} copies, {info['bytes'] / 1e6:.0f} MB, "
        f"span {info['span_ns'] / 1e9 * info['copies']:.1f} s, {shown} ({info['seconds']:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
