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

Every copy repeats the source's NVTX names, so 300 copies of a PyTorch capture hold 300 ranges of
each name, where a real capture of the same length numbers every call (`torch.autograd.profiler.
emit_nvtx` writes 'aten::mm, seq = 45333, op_id = 990372': h2d_heavy has 16,582 names in 16,782
ranges). With `--unique-nvtx` (unique_nvtx=True) copy i continues that numbering: each `seq = N`
and `op_id = N` in an NVTX name becomes N + i * (that counter's max - min + 1 over the source), so
no copy shares a numbered name with another; names without a counter ('forward', 'ncclSend',
domain and category names) repeat as before, and domains, categories, event types and the base
names (the name less its counters) are unchanged. Names stored inline (`text`) are rewritten in
the copy; names stored as string ids (`textId` -> StringIds) get a new StringIds row per copy,
id + i * (max StringIds id + 1), and the copy's `textId` points at it. Copy 0 is the source.
"""

from __future__ import annotations

import argparse
import os
import re
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


# The per-call counters of PyTorch's emit_nvtx names (', seq = 12, op_id = 345'): what makes a
# real capture's NVTX names differ call by call; --unique-nvtx continues them in every copy.
NVTX_COUNTER = re.compile(r", (seq|op_id) = ([0-9]+)")


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


def _nvtx_templates(con: sqlite3.Connection, tables: dict[str, list[str]]) -> tuple[int, dict[str, int]]:
    """For --unique-nvtx: temp.nvtx_tpl(name, p0, n1, d1, p1, ..., nK, dK, pK), one row per
    distinct NVTX name with a counter (inline or by string id), the name cut around its counters
    n1..nK, each with its step per copy dK; returns K and each counter's step."""
    cols = tables.get("NVTX_EVENTS", [])
    names: set[str] = set()
    if "text" in cols:
        names |= {
            r[0] for r in con.execute("SELECT DISTINCT text FROM src.NVTX_EVENTS WHERE text LIKE '%= %'")
        }
    if "textId" in cols and "StringIds" in tables:
        names |= {
            r[0]
            for r in con.execute(
                "SELECT value FROM src.StringIds WHERE value LIKE '%= %' "
                "AND id IN (SELECT textId FROM src.NVTX_EVENTS WHERE textId IS NOT NULL)"
            )
        }
    cut = {n: list(NVTX_COUNTER.finditer(n)) for n in names}
    cut = {n: ms for n, ms in cut.items() if ms}
    span: dict[str, list[int]] = {}
    for ms in cut.values():
        for m in ms:
            lo_hi = span.setdefault(m[1], [int(m[2]), int(m[2])])
            lo_hi[0], lo_hi[1] = min(lo_hi[0], int(m[2])), max(lo_hi[1], int(m[2]))
    step = {k: hi - lo + 1 for k, (lo, hi) in span.items()}
    width = max((len(ms) for ms in cut.values()), default=0)
    defs = ["name TEXT PRIMARY KEY", "p0 TEXT"]
    for j in range(1, width + 1):
        defs += [f"n{j} INTEGER", f"d{j} INTEGER", f"p{j} TEXT"]
    con.execute("DROP TABLE IF EXISTS temp.nvtx_tpl")
    con.execute(f"CREATE TEMP TABLE nvtx_tpl ({', '.join(defs)}) WITHOUT ROWID")
    rows = []
    for name, ms in cut.items():
        row: list[object] = [name]
        at = 0
        for m in ms:
            row.append(name[at : m.start(2)])
            row += [int(m[2]), step[m[1]]]
            at = m.end(2)
        row.append(name[at:])
        row += [None, None, ""] * (width - len(ms))
        rows.append(row)
    if rows:
        con.executemany(f"INSERT INTO temp.nvtx_tpl VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return width, step


def _nvtx_name(width: int, copy: str) -> str:
    """The SQL of a templated name in copy `copy` (t: the nvtx_tpl row)."""
    parts = ["t.p0"]
    for j in range(1, width + 1):
        parts += [f"coalesce(t.n{j} + {copy} * t.d{j}, '')", f"t.p{j}"]
    return " || ".join(parts)


def make_large_export(
    src: str | os.PathLike[str],
    copies: int,
    out: str | os.PathLike[str],
    margin_ns: int = 1_000_000,
    unique_nvtx: bool = False,
) -> dict[str, object]:
    """Write OUT from SRC tiled `copies` times; returns what it did (counts, span, offsets).
    unique_nvtx: every copy continues the NVTX names' per-call counters (module docstring)."""
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
        # --unique-nvtx: names with counters, cut into templates; string ids of such names
        width, counter_steps, string_step = 0, {}, 0
        nvtx_cols = tables.get("NVTX_EVENTS", [])
        if unique_nvtx and "NVTX_EVENTS" in tiled:
            width, counter_steps = _nvtx_templates(con, tables)
        by_id = width > 0 and "textId" in nvtx_cols and "StringIds" in tables
        if by_id:
            string_step = int(con.execute("SELECT coalesce(max(id), 0) FROM src.StringIds").fetchone()[0]) + 1
            con.execute("DROP TABLE IF EXISTS temp.nvtx_ids")
            con.execute(
                "CREATE TEMP TABLE nvtx_ids AS SELECT s.id, t.* FROM src.StringIds s "
                "JOIN temp.nvtx_tpl t ON t.name = s.value "
                "WHERE s.id IN (SELECT textId FROM src.NVTX_EVENTS WHERE textId IS NOT NULL)"
            )
            con.execute("CREATE UNIQUE INDEX temp.nvtx_ids_id ON nvtx_ids (id)")

        con.execute("BEGIN")
        for typ, name, _, sql in objects:
            if typ == "table":
                con.execute(sql)
        counts: dict[str, int] = {}
        for table, cols in tables.items():
            names = ", ".join(_q(c) for c in cols)
            if table in tiled:
                exprs = []
                joins = ""
                varied = width > 0 and table == "NVTX_EVENTS"
                for c in cols:
                    if varied and c == "text":
                        joins += " LEFT JOIN temp.nvtx_tpl t ON t.name = s.text"
                        exprs.append(
                            f"CASE WHEN t.name IS NULL THEN s.text ELSE {_nvtx_name(width, 'k.i')} END"
                        )
                    elif varied and by_id and c == "textId":
                        exprs.append(
                            "CASE WHEN k.i > 0 AND s.textId IN (SELECT id FROM temp.nvtx_ids) "
                            f"THEN s.textId + k.i * {string_step} ELSE s.textId END"
                        )
                    elif (table, c) in no_chain:
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
                    f"SELECT {', '.join(exprs)} FROM k CROSS JOIN src.{_q(table)} s{joins}"
                )
            else:
                con.execute(f"INSERT INTO main.{_q(table)} ({names}) SELECT {names} FROM src.{_q(table)}")
                if by_id and table == "StringIds":  # each copy's own string for a numbered name
                    con.execute(
                        f"WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < {copies - 1}) "
                        f"INSERT INTO main.StringIds (id, value) SELECT t.id + k.i * {string_step}, "
                        f"{_nvtx_name(width, 'k.i')} FROM k CROSS JOIN temp.nvtx_ids t"
                    )
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
        "unique_nvtx": unique_nvtx,
        "nvtx_counter_steps": counter_steps,
        "string_id_step": string_step,
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
    ap.add_argument(
        "--unique-nvtx",
        action="store_true",
        help="each copy continues the NVTX names' counters (', seq = N', ', op_id = N'), as a longer real capture would",
    )
    args = ap.parse_args(argv)
    info = make_large_export(args.src, args.copies, args.out, args.margin_ns, unique_nvtx=args.unique_nvtx)
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
