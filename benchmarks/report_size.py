#!/usr/bin/env python3
"""`nsa report` at scale: file size, build time and browser draw time of the page for a
~1M-kernel export.

    python benchmarks/report_size.py [--copies 300] [--max-events 400000 --max-events 1100000]

Builds (or reuses) benchmarks/data/<source>_x<copies>.sqlite with make_large_export.py and its
workspace, then for each --max-events writes the page with `nsa report` (a fresh subprocess:
wall time and peak RSS are its own) and loads it in headless chromium (Debian's chromium and
chromedriver, through Selenium): time until the page is ready, the first timeline frame, a
frame zoomed to 1/1000 of the span and a full-span frame again. Prints a table and writes
benchmarks/results/report_size.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from run import DATA, DEFAULT_SOURCE, HERE, RESULTS, measure, nsa_cmd

sys.path.insert(0, str(HERE.parent))  # the repository root: fixtures/ is not an installed package
from fixtures.browser import headless_chromium


def export_and_workspace(copies: int) -> tuple[Path, Path, dict]:
    """The tiled export and its workspace, made when missing; how long each took."""
    export = DATA / f"{DEFAULT_SOURCE.stem}_x{copies}.sqlite"
    steps: dict = {}
    if not export.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        steps["make_export"] = measure(
            [
                sys.executable,
                str(HERE / "make_large_export.py"),
                str(DEFAULT_SOURCE),
                str(copies),
                str(export),
            ]
        )
    ws = DATA / f"report_x{copies}.duckdb"
    if not ws.exists():
        steps["ingest"] = measure(nsa_cmd("ingest", "--db", str(ws), "-q", str(export)))
    return export, ws, steps


def browser_timings(page: Path) -> dict:
    """Load the page in headless chromium; ready time and the timeline's frame times (ms)."""
    from selenium.webdriver.support.ui import WebDriverWait

    d = headless_chromium(page_load_timeout_s=300)
    try:
        t0 = time.perf_counter()
        d.get(page.as_uri())
        WebDriverWait(d, 300).until(
            lambda drv: drv.execute_script("return document.body.dataset.ready") == "1"
        )
        ready = time.perf_counter() - t0
        frames = d.execute_script(
            "const t = window.nsaTimelines[0], out = {script_ms: window.nsaReady.ms,"
            "  first_frame_ms: Number(t.el.dataset.drawMs), first_frame_marks: t.marks};"
            "const w = t.full[1] - t.full[0], c = t.full[0] + w / 2;"
            "t.setView(c, c + w / 1000); out.zoomed_frame_ms = Number(t.el.dataset.drawMs); out.zoomed_marks = t.marks;"
            "t.setView(t.full[0], t.full[1]); out.full_frame_ms = Number(t.el.dataset.drawMs); return out;"
        )
        errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        mem = d.execute_script("return performance.memory ? performance.memory.usedJSHeapSize : null")
    finally:
        d.quit()
    return {"load_to_ready_s": round(ready, 2), **frames, "js_heap_mb": mem and round(mem / 2**20, 1),
            "console_errors": len(errors)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=300)
    ap.add_argument(
        "--max-events", type=int, action="append", help="timeline events drawn exactly (repeatable)"
    )
    args = ap.parse_args(argv)
    export, ws, steps = export_and_workspace(args.copies)
    rows = []
    for max_events in args.max_events or [400_000, 1_500_000]:
        page = DATA / f"report_x{args.copies}_{max_events}.html"
        build = measure(
            nsa_cmd("-v", "report", "--db", str(ws), "--max-events", str(max_events), "-o", str(page))
        )
        row = {"max_events": max_events, "build_s": build["wall_s"], "build_peak_rss_mb": build["peak_rss_mb"],
               "build_ok": build["ok"], "build_log": build["stderr_tail"][-400:]}  # fmt: skip
        if build["ok"]:
            blob = page.read_text(encoding="utf-8")
            start = blob.index('id="nsa-data">') + len('id="nsa-data">')
            data = json.loads(blob[start : blob.index("</script>", start)])
            tl = data["timelines"][0]
            row |= {"file_mb": round(page.stat().st_size / 1e6, 2), "events": tl["events"],
                    "exact_events": tl["exact_events"], "nvtx_ranges": sum(len(la["d"]) for la in tl["lanes"]
                                                                           if la["kind"] == "nvtx")}  # fmt: skip
            row |= browser_timings(page)
        rows.append(row)
        print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    result = {"export": str(export), "export_mb": round(export.stat().st_size / 1e6, 1), "setup": steps,
              "machine": platform.platform(), "rows": rows}  # fmt: skip
    (RESULTS / "report_size.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(
        f"{'max_events':>11} {'events':>9} {'exact':>9} {'MB':>6} {'build s':>8} {'ready s':>8} {'frame ms':>9}"
    )
    for r in rows:
        print(f"{r['max_events']:>11} {r.get('events', '-'):>9} {r.get('exact_events', '-'):>9} {r.get('file_mb', '-'):>6} "
              f"{r['build_s']:>8} {r.get('load_to_ready_s', '-'):>8} {r.get('first_frame_ms', '-'):>9}")  # fmt: skip
    return 0 if all(r["build_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
