#!/usr/bin/env python3
"""A ~1 GB PyTorch profiler trace, and what `nsa ingest` takes to read it.

    python benchmarks/kineto_big.py [--copies 100] [--src TRACE.json.gz] [--gz] [--keep]

The trace tiles a real one (default ../shared/realdata/kineto/h100_torch2.11_train_foreach.json.gz,
9.8 MB of JSON) N times in time: copy i is shifted by i * (span + 1 ms), with correlation ids,
External ids and flow ids offset per copy, so launches and kernels stay pairs. It is written
one event at a time with Kineto's own number format (`ts` with exactly three decimals), so the
generator never holds more than the source. `nsa ingest` then runs in a fresh subprocess,
and so do the floors it is held to, one after the other on the same file: a bare `ijson` pass
over the events and an `orjson` load of the whole file (when orjson is installed). Wall times,
CPU times (user + system: on a machine shared with other jobs they tell more than the wall) and
peak RSS (`os.wait4` rusage of each child alone) go to benchmarks/results/kineto_xN.json with the
ingest's ratio to each floor. With --gz the trace is gzip-compressed first (as users keep them),
and the floors read the .gz too. The file goes to benchmarks/data/ (git-ignored) or --data.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT.parent / "shared" / "realdata" / "kineto" / "h100_torch2.11_train_foreach.json.gz"
ID_ARGS = ("correlation", "External id", "external id")


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _ns(value: Any) -> int:
    return int(Decimal(str(value)) * 1000)


def write_tiled(src: Path, copies: int, out: Path) -> dict[str, int]:
    with gzip.open(src, "rt") as fh:
        trace = json.load(fh, parse_float=Decimal)
    events = [e for e in trace["traceEvents"] if isinstance(e.get("ts"), (int, Decimal))]
    first = min(_ns(e["ts"]) for e in events)
    last = max(_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in events)
    shift = last - first + 1_000_000
    id_step = 1 + max(
        [
            int(e["args"][k])
            for e in events
            for k in ID_ARGS
            if isinstance(e.get("args"), dict) and k in e["args"]
        ]
        + [int(e["id"]) for e in events if isinstance(e.get("id"), int)]
    )
    header = {k: v for k, v in trace.items() if k != "traceEvents"}
    kernels = 0
    with out.open("w") as fh:
        head = json.dumps(header, default=str)[:-1]
        fh.write(head + ', "traceEvents": [\n')
        sep = ""
        for i in range(copies):
            for e in events:
                ev = dict(e)
                ev["ts"] = _us(_ns(e["ts"]) + i * shift)
                if "dur" in e:
                    ev["dur"] = _us(_ns(e["dur"]))
                if isinstance(e.get("args"), dict):
                    args = dict(e["args"])
                    for k in ID_ARGS:
                        if k in args:
                            args[k] = int(args[k]) + i * id_step
                    ev["args"] = args
                if isinstance(e.get("id"), int):
                    ev["id"] = e["id"] + i * id_step
                text = json.dumps(ev, default=str)
                # numbers as Kineto writes them: unquoted decimals
                text = text.replace(f'"ts": "{ev["ts"]}"', f'"ts": {ev["ts"]}')
                if "dur" in ev:
                    text = text.replace(f'"dur": "{ev["dur"]}"', f'"dur": {ev["dur"]}')
                fh.write(sep + text)
                sep = ",\n"
                kernels += e.get("cat") == "kernel"
        fh.write("\n]}\n")
    return {"events": len(events) * copies, "kernels": kernels, "bytes": out.stat().st_size}


def measure(cmd: list[str]) -> dict[str, Any]:
    """Wall time and the child's own peak RSS; its output goes to a file, not a pipe that could
    fill up while the parent waits."""
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        log.seek(0)
        # DuckDB draws progress bars with carriage returns: keep the last line
        out = log.read().decode(errors="replace").replace("\r", "\n").strip().rsplit("\n", 1)[-1]
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "output": out.strip(),
    }


# The floors: parsing the same file and nothing else.
OPEN = "(gzip.open if sys.argv[1].endswith('.gz') else open)(sys.argv[1], 'rb')"
IJSON_PASS = (
    "import gzip, ijson, sys\n"
    f"with {OPEN} as fh:\n"
    "    n = sum(1 for _ in ijson.items(fh, 'traceEvents.item', use_float=False))\n"
    "print(n, 'events')"
)
ORJSON_LOAD = (
    "import gzip, orjson, sys\n"
    f"with {OPEN} as fh:\n"
    "    print(len(orjson.loads(fh.read())['traceEvents']), 'events')"
)


def floors(trace: Path) -> dict[str, Any]:
    out = {"ijson": measure([sys.executable, "-c", IJSON_PASS, str(trace)])}
    if importlib.util.find_spec("orjson") is not None:
        out["orjson"] = measure([sys.executable, "-c", ORJSON_LOAD, str(trace)])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--copies", type=int, default=100)
    p.add_argument("--src", type=Path, default=SRC)
    p.add_argument("--gz", action="store_true", help="ingest (and parse) the trace gzip-compressed")
    p.add_argument("--keep", action="store_true", help="keep the trace and the workspace")
    p.add_argument("--data", type=Path, default=ROOT / "benchmarks" / "data", help="where the trace goes")
    a = p.parse_args()
    data = a.data
    data.mkdir(parents=True, exist_ok=True)
    trace, db = data / f"kineto_x{a.copies}.json", data / f"kineto_x{a.copies}.duckdb"
    t0 = time.perf_counter()
    made = write_tiled(a.src, a.copies, trace)
    if a.gz:
        packed = trace.with_name(trace.name + ".gz")
        with trace.open("rb") as src, gzip.open(packed, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        trace.unlink()
        trace = packed
        made["gz_bytes"] = trace.stat().st_size
    made["generate_s"] = round(time.perf_counter() - t0, 1)
    db.unlink(missing_ok=True)
    nsa = [sys.executable, "-m", "nsight_analytics"]
    result = {"trace": made, "ingest": measure([*nsa, "ingest", "--db", str(db), str(trace)])}
    result["floors"] = floors(trace)
    result["ingest_to_floor"] = {
        k: round(result["ingest"]["wall_s"] / v["wall_s"], 2) for k, v in result["floors"].items()
    }
    result["ingest_to_floor_cpu"] = {
        k: round(result["ingest"]["cpu_s"] / v["cpu_s"], 2) for k, v in result["floors"].items()
    }
    result["events_per_s"] = round(made["events"] / result["ingest"]["wall_s"])
    result["findings"] = measure([*nsa, "findings", "--db", str(db), "--format", "csv"])
    with open("/proc/loadavg") as fh:
        result["load_average"] = fh.read().split()[:3]
    out = ROOT / "benchmarks" / "results" / f"kineto_x{a.copies}{'_gz' if a.gz else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if not a.keep:
        trace.unlink()
        db.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
