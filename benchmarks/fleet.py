"""A fleet of reports as one Parquet dataset, queried by DuckDB and by Spark: time per report
as the count grows (issue 30). Not a test: numbers for benchmarks/README.md.

The fleet is a real two-rank DDP run (tests/data/ddp: h200x2 ddp_w2, ranks 0 and 1), ingested,
exported once (`nsa export`), then tiled N/2 times at the Parquet level: each copy is a run of
its own with fresh report and run ids, its times shifted (by the copy's number of ms) and its
durations scaled (0.97 to 1.03, per copy), so no two reports are the same. From --small-at
reports on, each report keeps only what starts before its first kernel's start + --small-ms
(small reports: about 40% of the steps, so 1,000 fit this machine's disk and time; the table
says which size each count used).

    python benchmarks/fleet.py --counts 10,100,1000 --repeat 3 --out /tmp/fleet

For each count and query it prints the best of --repeat wall times on DuckDB (dataset.open_dataset,
the views `nsa --data` reads) and on Spark local (nsight_analytics.spark, local[2]), the time per
report, the Spark / DuckDB ratio and the 1-minute load average after the row's runs (the machine
may be shared: compare ratios and rows of one run). Both read the same files; neither caches
results between runs. --spark-queries with --spark-upto N: from N reports on, Spark runs only those
queries (the rest take minutes per run on Spark local).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nsight_analytics import api, dataset, params, queries

DDP = [
    ROOT / "tests" / "data" / "ddp" / "nsys" / f"h200x2_nsys2025.3_ddp_w2_rank{r}.sqlite.gz" for r in (0, 1)
]
QUERIES = ("kernel_summary", "gaps", "rank_balance", "collective_skew", "comm_overlap", "rank_activity")
SHIFTED = ("start_ns", "end_ns", "ts_ns")  # times moved with the copy; durations follow from them


def base_dataset(out: Path) -> Path:
    """The DDP run ingested and exported once: the tile every fleet is made of."""
    ws = out / "base.duckdb"
    if ws.exists():
        ws.unlink()
    con = api.connect(ws)
    api.group_runs(con, [api.ingest(con, path).report_id for path in DDP])
    con.close()
    shutil.rmtree(out / "base", ignore_errors=True)
    api.export(out / "base", db=ws)
    return out / "base"


def tile(base: Path, out: Path, reports: int, small_ms: float | None) -> Path:
    """A dataset of `reports` reports (copies of the base run's two) written by DuckDB."""
    manifest = dataset.read_manifest(base)
    per_run = len(manifest["reports"])
    copies = max(1, reports // per_run)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    con = params.connect()
    con.execute("SET memory_limit = '2GB'")
    con.execute(f"SET temp_directory = '{out}/.tmp'")
    con.execute(f"CREATE TABLE copies AS SELECT range AS i FROM range({copies})")
    base_ids = sorted(int(r["report_id"]) for r in manifest["reports"])
    first = base_ids[0]
    kernels = (
        f"read_parquet('{base}/kernel_rows/**/*.parquet', hive_partitioning = true, union_by_name = true)"
    )
    for table in dataset.tables():
        if not dataset.has_files(base, table.name):
            continue
        cols = [c.name for c in table.cols] + ["rowid"]
        src = f"read_parquet('{base}/{table.name}/**/*.parquet', hive_partitioning = true, union_by_name = true)"
        have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
        exprs = []
        scale = "(0.97 + 0.06 * ((c.i * 7919) % 101) / 100.0)"
        shift = "(c.i * 1000000)"
        for name in cols:
            col = f't."{name}"' if name in have else "NULL"
            if name == "report_id":
                exprs.append(f"(t.report_id - {first}) + c.i * {per_run} + 1 AS report_id")
            elif name == "run_id":
                exprs.append("c.i + 1 AS run_id")
            elif name == "start_ns" and "end_ns" in have:
                exprs.append(f"t.start_ns + {shift} AS start_ns")
            elif name == "end_ns" and "start_ns" in have:
                exprs.append(
                    f"t.start_ns + {shift} + CAST(round((t.end_ns - t.start_ns) * {scale}) AS BIGINT) AS end_ns"
                )
            elif name == "duration_ns" and {"start_ns", "end_ns"} <= have:
                exprs.append(f"CAST(round((t.end_ns - t.start_ns) * {scale}) AS BIGINT) AS duration_ns")
            elif name in SHIFTED:
                exprs.append(f'{col} + {shift} AS "{name}"')
            elif name == "rowid":
                exprs.append("t.rowid * 1000000 + c.i AS rowid" if "rowid" in have else "NULL AS rowid")
            else:
                exprs.append(f'{col} AS "{name}"')
        keep = ""
        if small_ms is not None and "start_ns" in have and "report_id" in cols:
            # one cut for every table of a report: its first kernel's start + small_ms
            keep = (
                f"WHERE t.start_ns < (SELECT min(k.start_ns) FROM {kernels} AS k WHERE k.report_id = t.report_id)"
                f" + {int(small_ms * 1e6)}"
            )
        if "report_id" in cols:
            part = "run_id, report_id"
            extra = "" if "run_id" in cols else ", c.i + 1 AS run_id"
        else:
            part, extra = "run_id", ""
        con.execute(
            f"COPY (SELECT {', '.join(exprs)}{extra} FROM {src} AS t CROSS JOIN copies AS c {keep}) "
            f"TO '{out / table.name}' (FORMAT parquet, PARTITION_BY ({part}), OVERWRITE_OR_IGNORE)"
        )
    now = manifest["reports"][0].get("exported_at")
    manifest["reports"] = [
        {
            **r,
            "report_id": (int(r["report_id"]) - first) + i * per_run + 1,
            "run_id": i + 1,
            "source_path": f"{r['source_path']}#copy{i}",
            "sha256": f"{r['sha256']}-{i}",
            "partition": f"run_id={i + 1}/report_id={(int(r['report_id']) - first) + i * per_run + 1}",
            "exported_at": now,
        }
        for i in range(copies)
        for r in manifest["reports"]
    ]
    name = manifest["runs"][0]["name"] if manifest["runs"] else "run"
    manifest["runs"] = [{"run_id": i + 1, "name": f"{name}#{i}"} for i in range(copies)]
    (out / dataset.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    shutil.rmtree(out / ".tmp", ignore_errors=True)
    return out


def _duckdb_rows(con, name: str) -> list:
    return queries.run(con, name, {}).fetchall()


def _spark_rows(spark, name: str, fleet: Path) -> list:
    from nsight_analytics import spark as nspark

    return nspark.query(spark, name, fleet).collect()


def findings(con, spark, fleet: Path) -> list[str]:
    """The rules over every report of the fleet, on DuckDB and with their queries on Spark
    (`spark.findings`), once each: the findings, both times, whether they are the same, the load."""
    from nsight_analytics.rules.engine import run_rules

    def key(f) -> tuple:
        return (f.rule_id, f.report_id, f.severity, f.title, f.message, f.est_savings_ns)

    t0 = time.perf_counter()
    on_duckdb = sorted(map(key, run_rules(con)))
    duck = time.perf_counter() - t0
    cells = [str(len(on_duckdb)), f"{duck:.1f}"]
    if spark is None:
        return [*cells, "", "", f"{os.getloadavg()[0]:.1f}"]
    from nsight_analytics import spark as nspark

    t0 = time.perf_counter()
    on_spark = sorted(map(key, nspark.findings(spark, fleet)))
    sp = time.perf_counter() - t0
    same = "yes" if on_spark == on_duckdb else f"no: {len(set(on_spark) ^ set(on_duckdb))} differ"
    return [*cells, f"{sp:.1f}", same, f"{os.getloadavg()[0]:.1f}"]


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="10,100,1000")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--small-at", type=int, default=1000, help="from this count on, small reports")
    ap.add_argument(
        "--small-ms",
        type=float,
        default=150.0,
        help="small reports: rows up to this long after the first kernel (ms)",
    )
    ap.add_argument("--engines", default="duckdb,spark")
    ap.add_argument(
        "--spark-queries",
        default=None,
        help="of --queries, those Spark runs at --spark-upto reports and beyond (default: all)",
    )
    ap.add_argument(
        "--spark-upto", type=int, default=0, help="from this count on, Spark runs only --spark-queries"
    )
    ap.add_argument(
        "--findings-upto",
        type=int,
        default=0,
        help="below this count, also the rules' findings over the whole fleet on both engines (once each)",
    )
    ap.add_argument("--out", default=None, help="scratch folder (default: a temporary one, removed)")
    args = ap.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nsa-fleet-"))
    out.mkdir(parents=True, exist_ok=True)
    engines = args.engines.split(",")
    names = args.queries.split(",")
    spark = None
    if "spark" in engines:
        from nsight_analytics import spark as nspark

        spark = nspark.session(
            "local[2]",
            app="nsa-fleet",
            conf={
                "spark.sql.shuffle.partitions": "2",
                "spark.driver.memory": "2g",
                "spark.sql.codegen.wholeStage": "false",
            },
        )
        spark.sparkContext.setLogLevel("OFF")
    base = base_dataset(out)
    print(f"load: {os.getloadavg()[0]:.1f} (1-min average, {os.cpu_count()} cores)")
    print(
        "| reports | report size | query | rows | DuckDB s | DuckDB ms/report | Spark s | Spark ms/report"
        " | Spark/DuckDB | load |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    found: dict[int, list[str]] = {}
    for n in [int(c) for c in args.counts.split(",")]:
        small = args.small_ms if n >= args.small_at else None
        t0 = time.perf_counter()
        fleet = tile(base, out / f"fleet{n}", n, small)
        made = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in fleet.rglob("*.parquet"))
        reports = len(dataset.read_manifest(fleet)["reports"])
        print(
            f"<!-- {reports} reports: {size / 1e6:.1f} MB of Parquet, tiled in {made:.1f} s -->", flush=True
        )
        con = dataset.open_dataset(fleet)
        con.execute("SET memory_limit = '2GB'")
        queries.install_macros(con)
        if spark is not None:
            nspark.register(spark, fleet, refresh=True)
        for name in names:
            rows = len(queries.run(con, name, {}).fetchall())
            duck = best(partial(_duckdb_rows, con, name), args.repeat) if "duckdb" in engines else None
            on_spark = spark is not None and (
                args.spark_queries is None or n < args.spark_upto or name in args.spark_queries.split(",")
            )
            sp = best(partial(_spark_rows, spark, name, fleet), args.repeat) if on_spark else None
            label = f"first {small:g} ms" if small else "whole"
            cells = [str(reports), label, name, str(rows)]
            cells += [f"{duck:.3f}", f"{1e3 * duck / reports:.2f}"] if duck is not None else ["", ""]
            cells += [f"{sp:.3f}", f"{1e3 * sp / reports:.2f}"] if sp is not None else ["", ""]
            cells.append(f"{sp / duck:.1f}" if sp and duck else "")
            cells.append(f"{os.getloadavg()[0]:.1f}")  # the 1-minute load average after the row's runs
            print("| " + " | ".join(cells) + " |", flush=True)
        if n < args.findings_upto:
            found[n] = findings(con, spark, fleet)
        con.close()
        shutil.rmtree(fleet, ignore_errors=True)
    if found:
        print("\n| reports | findings | DuckDB s | Spark s | same findings | load |")
        print("|---:|---:|---:|---:|---|---:|")
        for n, cells in found.items():
            print("| " + " | ".join([str(n), *cells]) + " |")
    print(f"load: {os.getloadavg()[0]:.1f}")
    if spark is not None:
        spark.stop()
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
