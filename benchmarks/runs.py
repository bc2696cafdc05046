#!/usr/bin/env python3
"""The queries of runs at 1M kernels: a 4-rank DDP job (tests/data/ddp, one nsys export per rank)
tiled N times in time per rank (make_large_export.py), ingested as one run, each run query timed
in-process against `kernel_summary` on the same workspace, at two sizes, so the growth shows.

    python benchmarks/run.py is the main benchmark; this one is for the multi-GPU queries:
    python benchmarks/runs.py                 # x10 (~118k kernels) and x85 (~1M kernels)
    python benchmarks/runs.py --copies 5 20   # other sizes

Each query: the first run (it also copies the deferred CUDA API calls the step windows need, for
the first query only) and the median of 3 warm runs; the ratio to `kernel_summary`'s warm median
is the number to watch (issue: every query within 5x kernel_summary at 1M kernels, and no
query growing faster than n log n). Results: benchmarks/results/runs.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from make_large_export import make_large_export

import nsight_analytics as nsa

RANKS = sorted((ROOT / "tests" / "data" / "ddp" / "nsys").glob("h200x4_nsys2025.3_ddp_w4_rank*.sqlite.gz"))
QUERIES = {
    "comm_overlap": {},
    "comm_overlap (per step)": {"per": "step"},
    "collective_skew": {},
    "collective_skew (per rank)": {"per": "rank"},
    "rank_balance": {},
    "rank_activity": {},
    "scaling": {},
}


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def one_size(copies: int, work: Path) -> dict:
    folder = work / f"x{copies}"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for src in RANKS:
        plain = work / src.name.removesuffix(".gz")
        if not plain.exists():
            with gzip.open(src) as fh, plain.open("wb") as out:
                shutil.copyfileobj(fh, out)
        out = folder / plain.name
        if not out.exists():
            make_large_export(plain, copies, out)
        files.append(out)
    db = folder / "w.duckdb"
    db.unlink(missing_ok=True)
    con = nsa.connect(db)
    ingest_s = timed(lambda: [nsa.ingest(con, f) for f in files])
    ids = [r[0] for r in con.execute("SELECT report_id FROM reports ORDER BY report_id").fetchall()]
    run_id = nsa.make_run(con, ids, f"x{copies}")
    kernels = con.execute("SELECT count(*) FROM kernel_rows").fetchone()[0]
    result: dict = {
        "copies": copies,
        "kernels": kernels,
        "ranks": len(files),
        "ingest_s": ingest_s,
        "queries": {},
    }

    def run(name: str, params: dict) -> None:
        query = name.split(" ")[0]
        args = {**params} if query in ("scaling", "kernel_summary") else {"run_id": run_id, **params}
        nsa.query(con, query, **args).fetchall()

    first = {
        name: timed(lambda n=name, p=params: run(n, p))
        for name, params in {"kernel_summary": {}, **QUERIES}.items()
    }
    for name, params in {"kernel_summary": {}, **QUERIES}.items():
        warm = [timed(lambda n=name, p=params: run(n, p)) for _ in range(3)]
        result["queries"][name] = {"first_s": first[name], "warm_s": statistics.median(warm)}
    base = result["queries"]["kernel_summary"]["warm_s"]
    for q in result["queries"].values():
        q["vs_kernel_summary"] = q["warm_s"] / base
    con.close()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--copies", type=int, nargs="+", default=[10, 85])
    p.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "data" / "runs")
    a = p.parse_args(argv)
    out = {"load_before": os.getloadavg()[0], "sizes": [one_size(n, a.work) for n in a.copies]}
    small, large = out["sizes"][0], out["sizes"][-1]
    print(
        f"{'query':30} "
        + "  ".join(f"x{s['copies']} ({s['kernels']:,} kernels)" for s in out["sizes"])
        + "  growth/size"
    )
    for name in small["queries"]:
        cells = "  ".join(
            f"{s['queries'][name]['warm_s']:8.3f} s ({s['queries'][name]['vs_kernel_summary']:5.1f}x)"
            for s in out["sizes"]
        )
        growth = (large["queries"][name]["warm_s"] / small["queries"][name]["warm_s"]) / (
            large["kernels"] / small["kernels"]
        )
        print(f"{name:30} {cells}  {growth:5.2f}")
    target = ROOT / "benchmarks" / "results" / "runs.json"
    target.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
