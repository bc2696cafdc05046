#!/usr/bin/env python3
"""nsa at scale, as issue 31 measures it: every step beside its peer or floor in the same run.

    python benchmarks/run.py                  # everything (about 30-60 min on 2 busy cores)
    python benchmarks/run.py --quick          # tiny sizes, one repeat: smoke-tests the harness
    python benchmarks/run.py --startup-only   # the CLI start-up steps alone, no export needed
    python benchmarks/run.py --readers        # also the sqlite reader comparison (results/readers.json)
    python benchmarks/run.py --nvtx-only      # only the NVTX steps on the unique-name tile (results/nvtx.json)

Two parts, every process measured alone (wall time and its own peak RSS from os.wait4):

- queries: every library query (found in the library, as `nsa query --list` lists them) warm
  in-process (median of --warm runs after a first one), at two sizes of each export tiled with
  make_large_export.py (h2d_heavy x30 and x300: 1M kernels and 5M NVTX ranges; transformer_train
  x25 and x250: 2M kernels and OS runtime calls; with --gpumetrics train_fused_gpumetrics too).
  Each query's time over kernel_summary's in the same process, and its growth between the sizes;
  a query above 5x kernel_summary or growing faster than n log n is flagged. Queries whose
  inputs the export lacks (no rows and an empty table it reads) are skipped with a note.
- steps, each repeated --repeats times, nsa interleaved with its peer or floor: ingest +
  kernel_summary against `nsys stats -r cuda_gpu_kern_sum` (2022.4: `gpukernsum`), the first
  NVTX use against `nsys stats -r nvtxsum`, `stream_gaps` to CSV through the CLI against DuckDB's
  own COPY of the same SQL, `nsa findings` and `nsa report` straight after ingest against that
  ingest (also once on the 2M-kernel OS-runtime export), Kineto ingest against a bare JSON parse
  of the same trace, and the CLI start-up against `python -c pass`.
- NVTX steps on a tile whose NVTX names are unique per call, as real PyTorch emit_nvtx captures
  are (h2d_heavy x300 made with make_large_export.py --unique-nvtx: 4.97M names in 5.03M ranges,
  where the plain tile repeats 16,582 names 300 times), reported apart: the first NVTX use against
  `nsys stats -r nvtxsum` and the first `nsa report` against its ingest.

The previous results/latest.json moves to results/history/<its date>.json; the run then says
which steps got slower than in that run by more than their spread (ratios, not seconds: the
machines differ). --quick writes results/quick.json and compares with the previous quick run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
RESULTS = HERE / "results"
REALDATA = ROOT.parent / "shared" / "realdata"
DEFAULT_SOURCE = REALDATA / "nsys" / "h100x2_nsys2026.2_h2d_heavy.sqlite"
sys.path.insert(0, str(HERE))
import compare  # benchmarks/ is not a package: found through sys.path

# name: (source export, small copies, large copies, quick small, quick large)
EXPORTS = {
    "h2d_heavy": (DEFAULT_SOURCE, 30, 300, 2, 6),
    "transformer_train": (REALDATA / "nsys" / "h100_nsys2025.3_transformer_train.sqlite", 25, 250, 2, 6),
}
GPUMETRICS = ("train_fused_gpumetrics", REALDATA / "nsys" / "h100_nsys2025.3_train_fused_gpumetrics.sqlite.gz",
              5, 50, 1, 3)  # fmt: skip
# The NVTX steps' tile with names unique per call (make_large_export --unique-nvtx): source,
# copies, quick copies.
UNIQUE_NVTX = (DEFAULT_SOURCE, 300, 6)
UNIQUE_NVTX_GROUP = "NVTX steps on a tile with unique NVTX names (--unique-nvtx)"
# nsys stats -r nvtxsum groups the 4.97M names with Python aggregates (median, stdev): 200 CPU-s
# and no end in 1800 s at load 10-28. Past PEER_FACTOR times nsa's own time (and at least
# PEER_MIN_S) it is stopped: the step's ratio is then below nsa / that time (1 / PEER_FACTOR,
# under the 0.5x target), which keeps the default run's time sane.
PEER_FACTOR, PEER_MIN_S = 3.0, 60.0
KINETO_SOURCE = REALDATA / "kineto" / "h100_torch2.11_train_foreach.json.gz"
KINETO_COPIES, KINETO_QUICK_COPIES = 50, 1  # 50: ~490 MB, the size issue 31 measured
GB = 1024**3
# `nsa --help` must answer within this (issue 31); start-up steps are the best of STARTUP_RUNS.
STARTUP_TARGET_S = 0.2
STARTUP_RUNS = 5
REPORT_PEAK_TARGET_MB = 512
# A step above this resident memory is killed (--rss-limit-gb; the machine has 23.5 GB and others
# work on it too).
RSS_LIMIT_MB = 8 * 1024
LIMITS = {"rss_mb": RSS_LIMIT_MB}
# What `nsys stats -r cuda_gpu_kern_sum` computes, as plain SQL on the canonical tables.
KERNEL_SUMMARY_SQL = (
    "SELECT 100 * sum(duration_ns) / sum(sum(duration_ns)) OVER () AS time_pct, sum(duration_ns) AS total_ns, "
    "count(*) AS instances, avg(duration_ns) AS avg_ns, median(duration_ns) AS med_ns, min(duration_ns) AS min_ns, "
    "max(duration_ns) AS max_ns, stddev_samp(duration_ns) AS stddev_ns, name FROM kernels GROUP BY name "
    "ORDER BY total_ns DESC"
)
# nsys renamed its reports in 2023/2024; try the new name first, then the old one.
NSYS_KERNELS = ("cuda_gpu_kern_sum", "gpukernsum")
NSYS_NVTX = ("nvtx_sum", "nvtxsum")

# --------------------------------------------------------------------------------------------
# measuring


def measure(
    cmd: list[str],
    *,
    cwd: Path | None = None,
    ok_codes: tuple[int, ...] = (0,),
    timeout_s: float | None = None,
) -> dict:
    """Run cmd; wall seconds and the child's own peak RSS (os.wait4), stdout/stderr tails.
    Past timeout_s, or above LIMITS["rss_mb"] of resident memory, the child is killed and the
    result says so (a runaway step must not take the machine's memory from everything else)."""
    load = os.getloadavg()[0]  # other work on the machine skews timings: recorded with each step
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd)
        killed: dict = {}
        done = threading.Event()
        watch = threading.Thread(target=_watch, args=(proc, t0, timeout_s, done, killed), daemon=True)
        watch.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        watch.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    rss = usage.ru_maxrss * 1024  # KiB on Linux
    res = {
        "cmd": " ".join(map(str, cmd)),
        "ok": proc.returncode in ok_codes and not killed,
        "rc": proc.returncode,
        "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_mb": round(rss / 2**20, 1),
        "loadavg_1m_before": round(load, 2),
        "stdout_tail": stdout[-1500:],
        "stderr_tail": stderr[-1500:],
    }
    res |= killed
    return res


def _watch(
    proc: subprocess.Popen, t0: float, timeout_s: float | None, done: threading.Event, killed: dict
) -> None:
    """Kill the child past its time or above LIMITS["rss_mb"]; say which in `killed`."""
    status = Path(f"/proc/{proc.pid}/status")
    while not done.wait(0.25):
        if timeout_s and time.perf_counter() - t0 > timeout_s:
            killed["timed_out_s"] = timeout_s
        else:
            try:
                m = re.search(r"VmRSS:\s+(\d+) kB", status.read_text())
            except OSError:
                return
            if m and int(m[1]) / 1024 > LIMITS["rss_mb"]:
                killed["killed_rss_mb"] = LIMITS["rss_mb"]
        if killed:
            proc.kill()
            return


def nsa_cmd(*args: str) -> list[str]:
    exe = shutil.which("nsa") or str(Path(sys.executable).parent / "nsa")
    return [exe, *args]


def fresh_db(tmp: Path, name: str) -> Path:
    db = tmp / f"{name}.duckdb"
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    return db


def drop_db(db: Path) -> None:
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)


def ingested_rows(stdout: str) -> dict[str, int]:
    """'1,032,600 kernels, 271,200 memcpy, ...' from nsa ingest's summary line."""
    return {
        m[2]: int(m[1].replace(",", ""))
        for m in re.finditer(r"(\d[\d,]*) ([a-z_]+)", stdout.split(":", 1)[-1])
    }


def mb(path: Path) -> float:
    return round(path.stat().st_size / 1e6, 1)


# --------------------------------------------------------------------------------------------
# CLI start-up


def cli_startup(runs: int = STARTUP_RUNS) -> dict[str, dict]:
    """`nsa --help` and `nsa --version` beside two floors, interleaved round by round: the
    interpreter alone and the interpreter importing click, which no click CLI can beat. Each
    is the fastest of `runs` (a 0.1 s step moves by more than itself when other work shares the
    machine, and the fastest run is the one it disturbed least), with every run kept."""
    cmds = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "python -c 'import click' (floor)": [sys.executable, "-c", "import click"],
        "nsa --help (CLI start-up)": nsa_cmd("--help"),
        "nsa --version (CLI start-up)": nsa_cmd("--version"),
    }
    all_runs: dict[str, list[dict]] = {k: [] for k in cmds}
    for _ in range(runs):
        for k, cmd in cmds.items():
            all_runs[k].append(measure(cmd, cwd=ROOT))
    out = {}
    for k, rs in all_runs.items():
        best = min(rs, key=lambda r: r["wall_s"])
        out[k] = {**best, "ok": all(r["ok"] for r in rs), "runs_wall_s": [r["wall_s"] for r in rs]}
    return out


def startup_summary(steps: dict[str, dict]) -> dict:
    python_s = steps["python -c pass (floor)"]["wall_s"]
    click_s = steps["python -c 'import click' (floor)"]["wall_s"]
    help_s = steps["nsa --help (CLI start-up)"]["wall_s"]
    return {
        "cli_startup_s": steps["nsa --version (CLI start-up)"]["wall_s"],
        "cli_help_s": help_s,
        "python_floor_s": python_s,
        "click_floor_s": click_s,
        "cli_help_over_python": round(help_s / python_s, 2),
        "cli_help_over_click": round(help_s / click_s, 2),
    }


def startup_target(sm: dict) -> dict:
    help_s = sm["cli_help_s"]
    return {
        "target": f"CLI start-up: `nsa --help` < {STARTUP_TARGET_S} s (best of {STARTUP_RUNS})",
        "value": help_s,
        "limit": STARTUP_TARGET_S,
        "pass": help_s < STARTUP_TARGET_S,
        "note": f"{sm['cli_help_over_python']}x `python -c pass`, {sm['cli_help_over_click']}x `import click`",
    }


def startup_only(output: Path) -> int:
    result: dict = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine()}
    result["steps"] = cli_startup()
    for name, r in result["steps"].items():
        flag = "" if r["ok"] else f"  FAILED rc={r['rc']}: {r['stderr_tail'][-200:]}"
        print(f"  {name:42s} {r['wall_s']:8.3f} s  (runs {r['runs_wall_s']}){flag}", flush=True)
    result["summary"] = startup_summary(result["steps"])
    result["targets"] = [startup_target(result["summary"])]
    t = result["targets"][0]
    print(
        f"  [{'PASS' if t['pass'] else 'FAIL'}] {t['target']}: {t['value']} (limit {t['limit']}) {t['note']}"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1))
    print(f"wrote {output}")
    return 0


# --------------------------------------------------------------------------------------------
# every library query, warm, at two sizes

QUERY_BENCH = r"""
import json, statistics, sys, threading, time
import nsight_analytics as nsa
from nsight_analytics import api, queries, schema
db, warm_runs, timeout_s, result = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[5]
skip = json.loads(sys.argv[4])
con = nsa.connect(db)
lib = queries.library()
try:
    import pyarrow  # noqa: F401  (columnar results: the query's time, not Python tuples')
    fetch = lambda rel: rel.fetch_arrow_table().num_rows
except ImportError:
    fetch = lambda rel: len(rel.fetchall())

def count(table):
    try:
        return con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    except Exception:
        return None

def timed(name):
    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        t = time.perf_counter()
        rows = fetch(nsa.query(con, name))
        return time.perf_counter() - t, rows
    finally:
        timer.cancel()

# tables queries join for detail, absent from many captures: their being empty does not mean a
# query with no rows had nothing to read (small_kernel_storms on an export without graphs)
DETAIL_TABLES = {"graph_executions", "memset", "memcpy", "steps", "host_waits", "cpu_samples", "osrt_api",
                 "gpus", "reports", "kernel_names"}
out = {"kernels": count("kernel_rows"), "queries": {}}

def save(running=None):
    with open(result, "w") as fh:
        json.dump({**out, "running": running}, fh)

for name in ["kernel_summary"] + sorted(n for n in lib if n != "kernel_summary"):
    q = lib[name]
    required = [p.name for p in q.params if p.default is None]
    if required:
        out["queries"][name] = {"skipped": "needs parameters " + ", ".join(required)}
        continue
    if name in skip:
        out["queries"][name] = {"skipped": skip[name]}
        continue
    save(running=name)  # a process killed for its memory still leaves what it measured
    t = time.perf_counter()
    try:
        api.materialise(con, q.tables())
    except Exception as exc:
        out["queries"][name] = {"error": "loading its tables: " + str(exc).splitlines()[0]}
        continue
    res = {"load_s": time.perf_counter() - t}
    empty = sorted(t for t in q.tables() if t in schema.BY_NAME and count(t) == 0)
    try:
        res["first_s"], res["rows"] = timed(name)
        res["warm_s"] = [timed(name)[0] for _ in range(warm_runs)]
    except Exception as exc:
        text = str(exc).splitlines()[0]
        if "interrupt" in text.lower() or "INTERRUPT" in type(exc).__name__.upper():
            res["timeout_s"] = timeout_s
        else:
            res["error"] = text
        out["queries"][name] = res
        print(json.dumps({name: res}), file=sys.stderr, flush=True)
        continue
    lacking = [t for t in empty if t not in DETAIL_TABLES]
    if res["rows"] == 0 and lacking:
        res["skipped"] = "no input: " + ", ".join(lacking) + " empty"
    res["median_s"] = statistics.median(res["warm_s"])
    out["queries"][name] = res
    print(json.dumps({name: {k: v for k, v in res.items() if k != "warm_s"}}), file=sys.stderr, flush=True)
save()
"""


def source_file(source: Path, data: Path) -> Path:
    """The export itself, or its unpacked copy when it is gzipped."""
    if source.suffix != ".gz":
        return source
    plain = data / source.name.removesuffix(".gz")
    if not plain.exists():
        data.mkdir(parents=True, exist_ok=True)
        with gzip.open(source) as fh, plain.open("wb") as out:
            shutil.copyfileobj(fh, out)
    return plain


def ensure_file(source: Path, copies: int, data: Path = DATA, unique_nvtx: bool = False) -> Path:
    """benchmarks/data/<source>_x<copies>.sqlite (unique_nvtx: _x<copies>u, NVTX names numbered
    on in every copy), made with make_large_export.py unless a file whose sidecar names the same
    source, copies and NVTX naming is there already."""
    source = source_file(source, data)
    out = data / f"{source.stem}_x{copies}{'u' if unique_nvtx else ''}.sqlite"
    sidecar = out.with_suffix(".json")
    if out.exists() and sidecar.exists():
        info = json.loads(sidecar.read_text())
        if (
            info.get("source") == str(source)
            and info.get("copies") == copies
            and info.get("bytes") == out.stat().st_size
            and bool(info.get("unique_nvtx")) == unique_nvtx
        ):
            return out
    print(f"generating {out.name} ({copies} copies of {source.name}{', unique NVTX names' if unique_nvtx else ''})"
          " ...", flush=True)  # fmt: skip
    # In a child process: this process must stay small, since a child's peak RSS (wait4) starts
    # from what it inherits at fork.
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from make_large_export import make_large_export; "
        "print(json.dumps(make_large_export(sys.argv[2], int(sys.argv[3]), sys.argv[4], "
        "unique_nvtx=sys.argv[5] == '1')))"
    )
    r = subprocess.run([sys.executable, "-c", code, str(HERE), str(source), str(copies), str(out),
                        "1" if unique_nvtx else "0"], capture_output=True, text=True, check=True)  # fmt: skip
    info = json.loads(r.stdout.strip().splitlines()[-1])
    info.update(source=str(source), copies=copies, bytes=out.stat().st_size, unique_nvtx=unique_nvtx)
    sidecar.write_text(json.dumps(info, indent=1))
    print(f"  {info['bytes'] / 1e6:.0f} MB in {info['seconds']:.1f} s", flush=True)
    return out


def warm_cache(path: Path) -> None:
    """Flush the generator's dirty pages and read the file once, so every step sees the same warm
    page cache (a freshly generated file is otherwise written back to disk during the first step)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        while os.read(fd, 1 << 24):
            pass
    finally:
        os.close(fd)


def bench_queries(path: Path, tmp: Path, warm: int, timeout_s: float, skip: dict[str, str]) -> dict:
    """Ingest `path` into a fresh workspace, then time every library query in one process."""
    db = fresh_db(tmp, f"queries_{path.stem}")
    ingest = measure(nsa_cmd("ingest", "-q", str(path), "--db", str(db)))
    res: dict = {"file": path.name, "input_mb": mb(path), "ingest_s": ingest["wall_s"],
                 "ingest_peak_mb": ingest["peak_rss_mb"], "rows": ingested_rows(ingest["stdout_tail"])}  # fmt: skip
    if not ingest["ok"]:
        res["error"] = "ingest failed: " + ingest["stderr_tail"][-300:]
        return res
    print(
        f"  {path.name}: ingest {ingest['wall_s']:.2f} s; every query, first + median of {warm}", flush=True
    )
    found, done = tmp / "queries.json", "__measured__"
    results: dict[str, dict] = {}
    res["process_wall_s"], res["process_peak_mb"] = 0.0, 0.0
    while True:  # a query killed with its process (memory): the next process goes on after it
        found.unlink(missing_ok=True)
        todo_skip = {**skip, **dict.fromkeys(results, done)}
        cmd = [
            sys.executable,
            "-c",
            QUERY_BENCH,
            str(db),
            str(warm),
            str(timeout_s),
            json.dumps(todo_skip),
            str(found),
        ]
        r = measure(cmd, cwd=ROOT)
        res["process_wall_s"] += r["wall_s"]
        res["process_peak_mb"] = max(res["process_peak_mb"], r["peak_rss_mb"])
        data = json.loads(found.read_text()) if found.exists() else {}
        res["kernels"] = data.get("kernels", res.get("kernels"))
        results |= {q: v for q, v in data.get("queries", {}).items() if v.get("skipped") != done}
        running = data.get("running")
        if r["ok"] or not running:
            if not r["ok"]:
                res["error"] = r["stderr_tail"][-500:]
            break
        why = (
            f"killed above {r['killed_rss_mb'] / 1024:g} GB"
            if r.get("killed_rss_mb")
            else f"process died (rc {r['rc']})"
        )
        results[running] = {"killed": why, "peak_rss_mb": r["peak_rss_mb"]}
        print(f"  {running}: {why}; the other queries in a new process", flush=True)
    res["queries"] = results
    res["workspace_mb"] = mb(db) if db.exists() else None
    drop_db(db)
    ks = res["queries"].get("kernel_summary", {}).get("warm_s")
    for v in res["queries"].values():
        if ks and v.get("warm_s") and "skipped" not in v:
            v["vs_kernel_summary_repeats"] = compare.ratios(v["warm_s"], ks)
            v["vs_kernel_summary"] = v["median_s"] / statistics.median(ks)
    return res


def query_table(small: dict, large: dict) -> dict[str, dict]:
    """Per query: both sizes, the ratio to kernel_summary at the large size, the growth, the flags."""
    rows: dict[str, dict] = {}
    for name in large.get("queries", {}) or small.get("queries", {}):
        s, lg = small.get("queries", {}).get(name, {}), large.get("queries", {}).get(name, {})
        row: dict = {"small_s": s.get("median_s"), "large_s": lg.get("median_s"),
                     "vs_kernel_summary": lg.get("vs_kernel_summary"), "notes": []}  # fmt: skip
        for v in (s, lg):
            for key in ("skipped", "error"):
                if v.get(key) and v[key] not in row["notes"]:
                    row["notes"].append(v[key])
            if v.get("timeout_s"):
                row["notes"].append(f"did not finish in {v['timeout_s']:g} s")
            if v.get("killed"):
                row["notes"].append(v["killed"])
        grow = None
        if row["small_s"] and row["large_s"] and small.get("kernels") and large.get("kernels"):
            grow = compare.growth(row["small_s"], row["large_s"], small["kernels"], large["kernels"])
            row["growth"] = grow
        if "skipped" not in lg and "skipped" not in s:
            row["flags"] = compare.query_flags(row["large_s"] or 0, row["vs_kernel_summary"], grow)
            if any(v.get("timeout_s") or v.get("killed") for v in (s, lg)):
                row["flags"].append("did not finish")
        rows[name] = row
    return rows


def queries_part(exports: dict, tmp: Path, args: argparse.Namespace) -> dict:
    out: dict = {}
    for name, (source, small_n, large_n, q_small, q_large) in exports.items():
        if not source.exists():
            out[name] = {"error": f"source export not found: {source}"}
            print(f"note: {source} not found; {name} skipped", flush=True)
            continue
        sizes = (q_small, q_large) if args.quick else (small_n, large_n)
        print(f"\n== queries on {name} x{sizes[0]} and x{sizes[1]}", flush=True)
        res: dict = {"source": str(source), "sizes": {}}
        skip: dict[str, str] = {}
        for copies in sizes:
            path = ensure_file(source, copies, args.data)
            warm_cache(path)
            r = bench_queries(path, tmp, 1 if args.quick else args.warm, args.query_timeout, skip)
            r["copies"] = copies
            res["sizes"][f"x{copies}"] = r
            # what the small size could not run (no input, no end in time) is not tried again
            for q, v in r.get("queries", {}).items():
                if v.get("skipped") or v.get("timeout_s") or v.get("killed"):
                    why = v.get("killed") or f"did not finish in {v.get('timeout_s', 0):g} s"
                    skip.setdefault(q, v.get("skipped") or f"{why} at x{copies}")
        small, large = (res["sizes"][f"x{n}"] for n in sizes)
        res["table"] = query_table(small, large)
        print_query_table(name, small, large, res["table"])
        out[name] = res
    return out


def print_query_table(name: str, small: dict, large: dict, table: dict) -> None:
    print(f"\n  {name}: x{small.get('copies')} ({small.get('kernels') or 0:,} kernels) -> "
          f"x{large.get('copies')} ({large.get('kernels') or 0:,} kernels)")  # fmt: skip
    print(f"  {'query':24s} {'small s':>9s} {'large s':>9s} {'vs ks':>7s} {'exp':>5s}  flags / notes")
    for q, row in table.items():
        grow = row.get("growth")
        cells = (
            f"{_num(row['small_s'], '9.3f')} {_num(row['large_s'], '9.3f')} "
            f"{_num(row['vs_kernel_summary'], '6.1f', 'x')} {_num(grow and grow['exponent'], '5.2f')}"
        )
        print(f"  {q:24s} {cells}  {'; '.join(row.get('flags', []) + row['notes'])}")


def _num(v: float | None, fmt: str, unit: str = "") -> str:
    width = int(fmt.split(".")[0]) + len(unit)
    return format(v, fmt) + unit if isinstance(v, (int, float)) else "-".rjust(width)


# --------------------------------------------------------------------------------------------
# the steps of issue 31, each beside its peer or floor

# The query's own SQL with its default parameters written in as literals (no prepared
# statement, no relation, no conversion of cells), as a user would paste it into DuckDB.
COPY_FLOOR = r"""
import re, sys
import nsight_analytics as nsa
from nsight_analytics import api, params, queries
db, name, out = sys.argv[1:4]
con = nsa.connect(db)
q = queries.get(name)
api.materialise(con, q.tables())
bound = q.bind({})
sql = re.sub(r"\$(\w+)", lambda m: params.literal(bound[m[1]]) if m[1] in bound else m[0], q.sql)
path = out.replace("'", "''")
con.execute(f"COPY ({sql}) TO '{path}' (HEADER, DELIMITER ',')")
"""

PARSE_FLOOR = r"""
import sys
try:
    from orjson import loads
    how = "orjson.loads"
except ImportError:
    from json import loads
    how = "json.loads (orjson not installed)"
with open(sys.argv[1], "rb") as fh:
    data = loads(fh.read())
print(how, len(data["traceEvents"]))
"""

_NSYS_REPORT: dict[tuple[str, ...], str] = {}  # the report name this nsys knows, once found


def nsys_stats(names: tuple[str, ...], path: Path, tmp: Path, timeout_s: float | None = None) -> dict | None:
    """`nsys stats -r NAME` on the export (the first name this nsys knows); None without nsys."""
    nsys = shutil.which("nsys")
    if not nsys:
        return None
    r: dict = {}
    for report in [_NSYS_REPORT[names]] if names in _NSYS_REPORT else names:
        cmd = [nsys, "stats", "-r", report, "-f", "csv", "--force-overwrite", "true",
               "-o", str(tmp / f"nsys_{report}"), str(path)]  # fmt: skip
        r = measure(cmd, cwd=tmp, timeout_s=timeout_s)
        if r.get("timed_out_s"):  # the name was known, the report did not end in time
            return {**r, "label": f"nsys stats -r {report}"}
        text = r["stdout_tail"] + r["stderr_tail"]
        if r["ok"] and "could not be found" not in text and "ERROR" not in text:
            _NSYS_REPORT[names] = report
            r["label"] = f"nsys stats -r {report}"
            return r
    return {**r, "ok": False, "label": f"nsys stats -r {names[0]}", "error": "no report name worked"}


class Steps:
    """Each step's repeats: nsa's run(s) beside the peer's or floor's run of the same repeat."""

    def __init__(self) -> None:
        self.steps: dict[str, dict] = {}

    def add(
        self,
        name: str,
        path: Path,
        nsa: dict | list[dict],
        floor: dict | None,
        floor_label: str,
        *,
        target: float | None = None,
        peak_target_mb: float | None = None,
        group: str | None = None,
    ) -> None:
        runs = nsa if isinstance(nsa, list) else [nsa]
        step = self.steps.setdefault(name, {
            "input": path.name, "input_mb": mb(path), "floor": floor_label, "target_ratio": target,
            "peak_target_mb": peak_target_mb, "repeats": [],
        })  # fmt: skip
        if group:
            step["group"] = group
        rep = {
            "nsa_s": round(sum(r["wall_s"] for r in runs), 3),
            # CPU seconds beside the wall: under load they move less (kept, not the ratio's basis)
            "nsa_cpu_s": round(sum(r.get("cpu_s", 0.0) for r in runs), 3),
            "nsa_peak_mb": max(r["peak_rss_mb"] for r in runs),
            "ok": all(r["ok"] for r in runs),
            "load": runs[0]["loadavg_1m_before"],
        }
        if floor is not None:
            rep |= {
                "floor_s": floor["wall_s"],
                "floor_cpu_s": floor.get("cpu_s"),
                "floor_peak_mb": floor["peak_rss_mb"],
                "floor_ok": floor["ok"],
            }
            step["floor"] = floor.get("label", floor_label)
        if floor is not None and floor.get("timed_out_s") and rep["ok"]:
            # the peer stopped past its time: nsa's ratio is below nsa / that time, not an error
            rep["peer_timed_out_s"] = floor["timed_out_s"]
            rep["ratio_below"] = round(rep["nsa_s"] / floor["timed_out_s"], 3)
            rep.pop("floor_s", None)
            rep.pop("floor_ok", None)
            floor = None
        failed = [r for r in runs if not r["ok"]] + ([floor] if floor is not None and not floor["ok"] else [])
        if failed:
            f = failed[0]
            rep["error"] = (
                f"did not finish in {f['timed_out_s']:g} s" if f.get("timed_out_s") else
                f"killed above {f['killed_rss_mb'] / 1024:g} GB of memory" if f.get("killed_rss_mb") else
                f"rc={f.get('rc')}: {(f.get('stderr_tail') or f.get('error') or '')[-300:]}"
            )  # fmt: skip
        step["repeats"].append(rep)
        ratio = f"{rep['nsa_s'] / rep['floor_s']:.2f}x" if rep.get("floor_s") else "-"
        if "ratio_below" in rep:
            ratio = f"<{rep['ratio_below']:.2f}x"
        cpu = f"cpu {rep['nsa_cpu_s']:.1f} vs {rep.get('floor_cpu_s') or float('nan'):.1f} s"
        print(f"  {name:44s} {rep['nsa_s']:8.2f} s vs {rep.get('floor_s', float('nan')):7.2f} s  {ratio:>7s}  {cpu}"
              f"  {rep['nsa_peak_mb']:6.0f} MB  load {rep['load']:.1f}{'  ' + rep['error'] if 'error' in rep else ''}",
              flush=True)  # fmt: skip

    def finish(self) -> dict[str, dict]:
        for step in self.steps.values():
            good = [r for r in step["repeats"] if r["ok"] and r.get("floor_ok", True)]
            step["ok"] = len(good) == len(step["repeats"])
            step["nsa_s_median"] = statistics.median(r["nsa_s"] for r in good) if good else None
            with_floor = [r for r in good if r.get("floor_s")]
            step["ratios"] = compare.ratios(
                [r["nsa_s"] for r in with_floor], [r["floor_s"] for r in with_floor]
            )
            step["ratio"] = compare.spread(step["ratios"])
            step["peak_mb"] = max(r["nsa_peak_mb"] for r in step["repeats"])
            step["peak_over_input"] = step["peak_mb"] > step["input_mb"]
            checks = []
            if step["target_ratio"] is not None and step["ratio"]:
                checks.append(step["ratio"]["median"] <= step["target_ratio"])
            if step["peak_target_mb"] is not None:
                checks.append(step["peak_mb"] <= step["peak_target_mb"])
            below = [r.get("ratio_below") for r in good]
            if step["target_ratio"] is not None and not step["ratio"] and good and all(below):
                # the peer never ended in time: nsa under the target against every stopped peer
                step["ratio_below"] = max(below)
                checks.append(step["ratio_below"] <= step["target_ratio"])
            targeted = step["target_ratio"] is not None or step["peak_target_mb"] is not None
            step["pass"] = (step["ok"] and all(checks)) if targeted else None
        return self.steps


def steps_part(args: argparse.Namespace, tmp: Path) -> dict[str, dict]:
    st = Steps()
    repeats = 1 if args.quick else args.repeats
    h2d = EXPORTS["h2d_heavy"]
    path = ensure_file(h2d[0], h2d[4] if args.quick else h2d[2], args.data)
    warm_cache(path)
    print(f"\n== steps on {path.name} ({mb(path)} MB), {repeats} repeat(s), nsa and its floor interleaved")
    if not shutil.which("nsys"):
        print("note: nsys is not on PATH; the steps measured against it have no ratio")
    devnull = os.devnull
    for _ in range(repeats):
        # ingest + kernel_summary, then the first NVTX use, then stream_gaps to CSV on that workspace
        db = fresh_db(tmp, "steps")
        ingest = measure(nsa_cmd("ingest", "-q", str(path), "--db", str(db)))
        ks = measure(nsa_cmd("query", "kernel_summary", "--db", str(db), "--format", "csv", "-o", devnull))
        st.add("ingest + kernel_summary", path, [ingest, ks], nsys_stats(NSYS_KERNELS, path, tmp),
               "nsys stats -r cuda_gpu_kern_sum", target=0.5)  # fmt: skip
        nv = measure(nsa_cmd("query", "nvtx_summary", "--db", str(db), "--format", "csv", "-o", devnull))
        st.add("first NVTX use (nvtx_summary)", path, nv, nsys_stats(NSYS_NVTX, path, tmp),
               "nsys stats -r nvtx_sum", target=0.5)  # fmt: skip
        # load stream_gaps' deferred tables first: the step is the output, not the copy
        measure(
            nsa_cmd("sql", "SELECT count(*) FROM cuda_api", "--db", str(db), "--format", "csv", "-o", devnull)
        )
        cli_csv, floor_csv = tmp / "stream_gaps_cli.csv", tmp / "stream_gaps_copy.csv"
        cli = measure(nsa_cmd("query", "stream_gaps", "--db", str(db), "--format", "csv", "-o", str(cli_csv)),
                      timeout_s=args.step_timeout)  # fmt: skip
        floor = measure([sys.executable, "-c", COPY_FLOOR, str(db), "stream_gaps", str(floor_csv)], cwd=ROOT,
                        timeout_s=args.step_timeout)  # fmt: skip
        st.add("stream_gaps to CSV (CLI)", path, cli, {**floor, "label": "DuckDB COPY (same SQL) TO csv"},
               "DuckDB COPY (same SQL) TO csv")  # fmt: skip
        st.steps["stream_gaps to CSV (CLI)"]["csv_lines"] = [_lines(cli_csv), _lines(floor_csv)]
        for p in (cli_csv, floor_csv):
            p.unlink(missing_ok=True)
        drop_db(db)
        findings_and_report(st, path, tmp, args.step_timeout)
    unique_nvtx_steps(st, args, tmp)
    # findings and report must finish on a 2M-kernel export with OS runtime calls (once)
    tr = EXPORTS["transformer_train"]
    if tr[0].exists():
        big = ensure_file(tr[0], tr[4] if args.quick else tr[2], args.data)
        warm_cache(big)
        print(f"\n== findings and report on {big.name} ({mb(big)} MB), once")
        findings_and_report(
            st, big, tmp, args.step_timeout, suffix=f" ({big.stem.rsplit('_', 1)[-1]} OS runtime)"
        )
    kineto(st, args, tmp)
    # CLI start-up: nsa --help against the bare interpreter, round by round
    start = cli_startup(1 if args.quick else STARTUP_RUNS)
    helps = start["nsa --help (CLI start-up)"]["runs_wall_s"]
    pys = start["python -c pass (floor)"]["runs_wall_s"]
    step: dict = {"input": "-", "input_mb": 0, "floor": "python -c pass", "target_ratio": None,
            "startup": start, "summary": startup_summary(start)}  # fmt: skip
    step["repeats"] = [{"nsa_s": a, "floor_s": b, "ok": True} for a, b in zip(helps, pys)]
    step["ratios"] = compare.ratios(helps, pys)
    step["ratio"] = compare.spread(step["ratios"])
    step["nsa_s_median"] = min(helps)
    step["ok"] = start["nsa --help (CLI start-up)"]["ok"]
    step["peak_mb"] = start["nsa --help (CLI start-up)"]["peak_rss_mb"]
    step["peak_over_input"] = False
    step["pass"] = min(helps) < STARTUP_TARGET_S
    print(f"  {'nsa --help (best)':44s} {min(helps):8.3f} s vs {min(pys):7.3f} s  python -c pass")
    done = st.finish()
    done["CLI start-up (nsa --help)"] = step
    return done


def unique_nvtx_steps(st: Steps, args: argparse.Namespace, tmp: Path) -> None:
    """The NVTX steps on a tile whose NVTX names are numbered on in every copy (as a real PyTorch
    capture of that length would be: the plain tile repeats each name once per copy, which makes
    grouping by name cheap): the first NVTX use after a fresh ingest against `nsys stats -r
    nvtx_sum`, and the first `nsa report` after its own fresh ingest against that ingest."""
    source, copies, quick_copies = UNIQUE_NVTX
    if not source.exists():
        print(f"note: {source} not found; no unique-name NVTX steps")
        return
    path = ensure_file(source, quick_copies if args.quick else copies, args.data, unique_nvtx=True)
    warm_cache(path)
    repeats = 1 if args.quick else args.repeats
    print(f"\n== {UNIQUE_NVTX_GROUP}: {path.name} ({mb(path)} MB), {repeats} repeat(s)")
    devnull = os.devnull
    first_use = "first NVTX use (nvtx_summary), unique names"
    for _ in range(repeats):
        db = fresh_db(tmp, "unique_nvtx")
        ingest = measure(nsa_cmd("ingest", "-q", str(path), "--db", str(db)))
        nv = measure(nsa_cmd("query", "nvtx_summary", "--db", str(db), "--format", "csv", "-o", devnull),
                     timeout_s=args.step_timeout)  # fmt: skip
        if not ingest["ok"]:
            nv = {**nv, "ok": False, "rc": ingest["rc"], "stderr_tail": "ingest: " + ingest["stderr_tail"]}
        peer = nsys_stats(NSYS_NVTX, path, tmp, max(PEER_MIN_S, PEER_FACTOR * nv["wall_s"]))
        st.add(first_use, path, nv, peer, "nsys stats -r nvtx_sum", target=0.5, group=UNIQUE_NVTX_GROUP)
        drop_db(db)
        report = report_after_ingest(st, path, tmp, args.step_timeout, ", unique names", UNIQUE_NVTX_GROUP)
    info = json.loads(path.with_suffix(".json").read_text())
    for name in (first_use, report):
        st.steps[name]["tile"] = {
            k: info.get(k) for k in ("source", "copies", "unique_nvtx", "nvtx_counter_steps")
        }


def findings_and_report(st: Steps, path: Path, tmp: Path, timeout_s: float, suffix: str = "") -> None:
    """`nsa findings` and `nsa report`, each straight after its own fresh ingest, against it."""
    db = fresh_db(tmp, "findings")
    ingest = measure(nsa_cmd("ingest", "-q", str(path), "--db", str(db)))
    f = measure(nsa_cmd("findings", "--db", str(db)), ok_codes=(0, 1), timeout_s=timeout_s)
    st.add(f"nsa findings straight after ingest{suffix}", path, f, {**ingest, "label": "its nsa ingest"},
           "its nsa ingest")  # fmt: skip
    drop_db(db)
    report_after_ingest(st, path, tmp, timeout_s, suffix)


def report_after_ingest(
    st: Steps, path: Path, tmp: Path, timeout_s: float, suffix: str = "", group: str | None = None
) -> str:
    """`nsa report` straight after its own fresh ingest, against it; returns the step's name."""
    name = f"nsa report straight after ingest{suffix}"
    db = fresh_db(tmp, "report")
    ingest = measure(nsa_cmd("ingest", "-q", str(path), "--db", str(db)))
    page = tmp / "report.html"
    r = measure(nsa_cmd("report", "--db", str(db), "-o", str(page)), timeout_s=timeout_s)
    st.add(name, path, r, {**ingest, "label": "its nsa ingest"}, "its nsa ingest", target=3.0,
           peak_target_mb=REPORT_PEAK_TARGET_MB, group=group)  # fmt: skip
    page.unlink(missing_ok=True)
    drop_db(db)
    return name


def kineto(st: Steps, args: argparse.Namespace, tmp: Path) -> None:
    """Kineto ingest of a tiled trace (benchmarks/kineto_big.py makes it) against a bare parse."""
    if not KINETO_SOURCE.exists():
        print(f"note: {KINETO_SOURCE} not found; no Kineto step")
        return
    from kineto_big import write_tiled

    copies = KINETO_QUICK_COPIES if args.quick else args.kineto_copies
    trace = args.data / f"kineto_x{copies}.json"
    sidecar = trace.with_suffix(".info.json")
    if not (
        trace.exists()
        and sidecar.exists()
        and json.loads(sidecar.read_text()).get("bytes") == trace.stat().st_size
    ):
        print(f"generating {trace.name} ({copies} copies of {KINETO_SOURCE.name}) ...", flush=True)
        sidecar.write_text(json.dumps(write_tiled(KINETO_SOURCE, copies, trace)))
    warm_cache(trace)
    print(f"\n== Kineto ingest of {trace.name} ({mb(trace)} MB)")
    for _ in range(1 if args.quick else args.repeats):
        db = fresh_db(tmp, "kineto")
        ingest = measure(nsa_cmd("ingest", "-q", str(trace), "--db", str(db)), timeout_s=args.step_timeout)
        parse = measure([sys.executable, "-c", PARSE_FLOOR, str(trace)])
        label = parse["stdout_tail"].strip().rsplit(" ", 1)[0] or "json parse"
        st.add("Kineto ingest", trace, ingest, {**parse, "label": f"bare {label} of the file"}, "bare JSON parse",
               target=1.5)  # fmt: skip
        drop_db(db)
    st.steps["Kineto ingest"]["trace"] = json.loads(sidecar.read_text())


def _lines(path: Path) -> int | None:
    if not path.exists():
        return None
    with path.open("rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))


# --------------------------------------------------------------------------------------------
# sqlite reader comparison: DuckDB's sqlite_scanner vs Python sqlite3 + pandas / pyarrow

READER = r"""
import json, sqlite3, sys, time
import duckdb
path, table, how, db = sys.argv[1:5]
con = duckdb.connect(db)
t = time.perf_counter()
if how == "duckdb_sqlite_scanner":
    from nsight_analytics.ingest import sqlite_source
    sqlite_source.load_extension(con)
    con.execute(f"ATTACH '{path}' AS src (TYPE sqlite, READ_ONLY)")
    con.execute(f'CREATE TABLE t AS SELECT * FROM src."{table}"')
elif how == "duckdb_sqlite_scanner_unordered":
    from nsight_analytics.ingest import sqlite_source
    sqlite_source.load_extension(con)
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"ATTACH '{path}' AS src (TYPE sqlite, READ_ONLY)")
    con.execute(f'CREATE TABLE t AS SELECT * FROM src."{table}"')
elif how == "sqlite3_pandas":
    import pandas as pd
    df = pd.read_sql_query(f'SELECT * FROM "{table}"', sqlite3.connect(path))
    con.execute("CREATE TABLE t AS SELECT * FROM df")
elif how == "sqlite3_pyarrow":
    import pyarrow as pa
    cur = sqlite3.connect(path).execute(f'SELECT * FROM "{table}"')
    names = [d[0] for d in cur.description]
    batches = []
    while rows := cur.fetchmany(200_000):
        batches.append(pa.RecordBatch.from_arrays([pa.array(c) for c in zip(*rows)], names=names))
    arrow = pa.Table.from_batches(batches)
    con.execute("CREATE TABLE t AS SELECT * FROM arrow")
n = con.execute("SELECT count(*) FROM t").fetchone()[0]
con.close()
print(json.dumps({"rows": n, "seconds": time.perf_counter() - t}))
"""
READERS = ["duckdb_sqlite_scanner", "duckdb_sqlite_scanner_unordered", "sqlite3_pandas", "sqlite3_pyarrow"]
READER_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"]


def reader_comparison(path: Path, tmp: Path) -> list[dict]:
    rows = []
    for table in READER_TABLES:
        for how in READERS:
            db = fresh_db(tmp, f"reader_{how}")
            r = measure([sys.executable, "-c", READER, str(path), table, how, str(db)], cwd=ROOT)
            res = json.loads(r["stdout_tail"].strip().splitlines()[-1]) if r["ok"] else {}
            rows.append({
                "table": table, "reader": how, "ok": r["ok"], "rows": res.get("rows"),
                "copy_s": round(res["seconds"], 3) if res else None, "process_wall_s": r["wall_s"],
                "peak_rss_mb": r["peak_rss_mb"], "error": None if r["ok"] else r["stderr_tail"][-300:],
            })  # fmt: skip
            print(
                f"  reader {table:28s} {how:32s} {rows[-1]['copy_s']}s  {r['peak_rss_mb']:.0f} MB", flush=True
            )
    return rows


# --------------------------------------------------------------------------------------------
# summary, history, main


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        m = re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
        mem = int(m[1]) * 1024 if m else 0
    except OSError:
        mem = 0
    import duckdb

    nsys = shutil.which("nsys")
    nsys_v = (
        subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip() if nsys else None
    )
    return {
        "nproc": os.cpu_count(), "cpu": cpu, "ram_gb": round(mem / GB, 1), "python": platform.python_version(),
        "duckdb": duckdb.__version__, "nsys": nsys_v, "platform": platform.platform(),
    }  # fmt: skip


def print_steps(steps: dict[str, dict]) -> None:
    """The steps, those of a group (the unique-name NVTX tile) apart under their own heading."""
    groups: dict[str | None, dict[str, dict]] = {}
    for name, s in steps.items():
        groups.setdefault(s.get("group"), {})[name] = s
    for group, members in sorted(groups.items(), key=lambda g: g[0] is not None):
        print(f"\n== {group or 'steps'} (ratio: nsa / peer or floor, median [min-max] over the repeats)")
        _print_step_rows(members)


def _print_step_rows(steps: dict[str, dict]) -> None:
    print(f"  {'step':52s} {'input MB':>8s} {'nsa s':>8s} {'ratio':>18s} {'target':>7s} {'peak MB':>8s}  vs")
    for name, s in steps.items():
        r = s.get("ratio")
        ratio = f"{r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}]" if r else "-"
        if not r and s.get("ratio_below"):
            ratio = f"< {s['ratio_below']:.2f} (peer stopped)"
        target = f"{s['target_ratio']:g}x" if s.get("target_ratio") else "-"
        verdict = {True: "PASS", False: "FAIL", None: ""}[s.get("pass")]
        notes = [verdict] if verdict else []
        if s.get("peak_over_input"):
            notes.append("peak > input")
        if s.get("peak_target_mb") and s["peak_mb"] > s["peak_target_mb"]:
            notes.append(f"peak > {s['peak_target_mb']} MB")
        notes += sorted({r["error"] for r in s["repeats"] if r.get("error")})
        print(f"  {name:52s} {s['input_mb']:8.0f} {_num(s.get('nsa_s_median'), '8.2f')} {ratio:>18s} {target:>7s} "
              f"{s['peak_mb']:8.0f}  {s['floor']}  {' '.join(notes)}")  # fmt: skip


def flagged_queries(queries: dict) -> list[str]:
    out = []
    for export, res in queries.items():
        for q, row in res.get("table", {}).items():
            if row.get("flags"):
                out.append(f"{q} ({export}): {'; '.join(row['flags'])}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="tiny tiles, one repeat, one warm run: seconds, not minutes"
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="repeats of each step against its floor (default 3)"
    )
    ap.add_argument("--warm", type=int, default=3, help="warm runs of each query after its first (default 3)")
    ap.add_argument(
        "--query-timeout", type=float, default=300, help="seconds one query may take (default 300)"
    )
    ap.add_argument(
        "--step-timeout", type=float, default=900, help="seconds one nsa command may take (default 900)"
    )
    ap.add_argument("--rss-limit-gb", type=float, default=RSS_LIMIT_MB / 1024,
                    help="kill a step above this resident memory (default 8)")  # fmt: skip
    ap.add_argument("--kineto-copies", type=int, default=KINETO_COPIES, help="copies in the Kineto trace")
    ap.add_argument("--gpumetrics", action="store_true", help="also the queries on train_fused_gpumetrics")
    ap.add_argument(
        "--exports",
        default=",".join(EXPORTS),
        help=f"the exports of the query part (default {','.join(EXPORTS)})",
    )
    ap.add_argument("--skip-queries", action="store_true", help="only the steps")
    ap.add_argument("--skip-steps", action="store_true", help="only the queries")
    ap.add_argument("--readers", action="store_true", help="also the sqlite reader comparison")
    ap.add_argument(
        "--data", type=Path, default=DATA, help="where the tiled exports go (default benchmarks/data)"
    )
    ap.add_argument(
        "--startup-only", action="store_true", help="only the CLI start-up (results/startup.json)"
    )
    ap.add_argument("--nvtx-only", action="store_true",
                    help="only the NVTX steps on the unique-name tile (results/nvtx.json, nvtx_quick.json)")  # fmt: skip
    ap.add_argument(
        "--output", type=Path, default=None, help="default results/latest.json (--quick: quick.json)"
    )
    args = ap.parse_args(argv)
    if args.startup_only:
        return startup_only(args.output or RESULTS / "startup.json")
    LIMITS["rss_mb"] = int(args.rss_limit_gb * 1024)
    default = "quick.json" if args.quick else "latest.json"
    if args.nvtx_only:
        default = "nvtx_quick.json" if args.quick else "nvtx.json"
    output = args.output or RESULTS / default
    previous = json.loads(output.read_text()) if output.exists() else None
    known = {**EXPORTS, GPUMETRICS[0]: GPUMETRICS[1:]}
    wanted = [e for e in args.exports.split(",") if e]
    if unknown := [e for e in wanted if e not in known]:
        ap.error(f"unknown export {', '.join(unknown)}; known: {', '.join(known)}")
    exports = {e: known[e] for e in wanted}
    if args.gpumetrics:
        exports[GPUMETRICS[0]] = GPUMETRICS[1:]
    args.data.mkdir(parents=True, exist_ok=True)
    mode = ("quick" if args.quick else "full") + (" nvtx-only" if args.nvtx_only else "")
    result: dict = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "mode": mode,
                    "machine": machine(), "load_before": os.getloadavg(),
                    "args": {k: str(v) for k, v in vars(args).items()}}  # fmt: skip
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nsa-bench-", dir=args.data) as tmpdir:
        tmp = Path(tmpdir)
        if args.nvtx_only:
            st = Steps()
            unique_nvtx_steps(st, args, tmp)
            result["steps"] = st.finish()
        elif not args.skip_steps:
            result["steps"] = steps_part(args, tmp)
        if not args.skip_queries and not args.nvtx_only:
            result["queries"] = queries_part(exports, tmp, args)
        if args.readers:
            path = ensure_file(DEFAULT_SOURCE, EXPORTS["h2d_heavy"][2], args.data)
            print("\n== reader comparison (copy one table into a fresh DuckDB file)")
            result["readers"] = reader_comparison(path, tmp)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["load_after"] = os.getloadavg()

    if "steps" in result:
        print_steps(result["steps"])
    flagged = flagged_queries(result.get("queries", {}))
    result["flagged_queries"] = flagged
    print(f"\n== queries flagged (> {compare.MAX_VS_KERNEL_SUMMARY:g}x kernel_summary at the large size, "
          f"or time ~ size^k with k > {compare.SUPERLINEAR_EXPONENT:g}): {len(flagged)}")  # fmt: skip
    for line in flagged:
        print(f"  {line}")
    if previous is not None and previous.get("mode", "full") == result["mode"]:
        result["compared_with"] = previous.get("when")
        result["regressions"] = compare.regressions(previous, result)
        print(f"\n== slower than the previous run ({previous.get('when')}) by more than the spread, or failing now: "
              f"{len(result['regressions'])}")  # fmt: skip
        for r in result["regressions"]:
            print(f"  {compare.describe(r)}")
        if not compare.step_ratios(previous):
            print("  (the previous run kept no repeated ratios: nothing to compare)")
    output.parent.mkdir(parents=True, exist_ok=True)
    if not args.quick and not args.nvtx_only and args.output is None:
        moved = compare.archive(output, RESULTS / "history")
        if moved:
            print(f"\nprevious run kept as {moved.relative_to(ROOT)}")
    tmp_out = output.with_name(output.name + ".tmp")
    tmp_out.write_text(json.dumps(result, indent=1))
    tmp_out.replace(output)
    print(f"wrote {output} ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
