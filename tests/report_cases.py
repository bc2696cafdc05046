"""The exports `nsa report` is tested on (tests/test_report*.py): the demo, our captures in
tests/data and every shared real export of a kind nsa reads. One case = the files ingested into
one workspace and the file whose report the page draws."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conftest import REALDATA, ROOT

DATA = ROOT / "tests" / "data"
DEMO = ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"


@dataclass(frozen=True)
class Case:
    id: str
    files: tuple[Path, ...]  # ingested in this order; the first is the one drawn
    kind: str  # nsys, ncu, kineto, diff
    extra: tuple[Path, ...] = field(default_factory=tuple)  # ingested beside it (power logs)


def _glob(folder: Path, *patterns: str) -> list[Path]:
    return sorted(p for pat in patterns for p in folder.glob(pat)) if folder.is_dir() else []


def cases() -> list[Case]:
    out = [Case("demo", (DEMO,), "nsys")]
    for p in _glob(DATA, "*.sqlite", "*.sqlite.gz"):
        out.append(Case(f"data-{p.name}", (p,), "nsys"))
    for p in _glob(DATA / "kineto", "*.json.gz"):
        out.append(Case(f"data-{p.name}", (p,), "kineto"))
    for p in _glob(DATA / "stacks" / "nsys", "*_stacks.sqlite.gz"):  # the flame graph of the idle time
        out.append(Case(f"data-{p.name}", (p,), "nsys"))
    for p in _glob(DATA / "ncu-rep", "*.ncu-rep.gz"):
        out.append(Case(f"data-{p.name}", (p,), "ncu"))
    power = {"fused": REALDATA / "power" / "h100_nvml_train_fused.csv",
             "foreach": REALDATA / "power" / "h100_nvml_train_foreach.csv"}  # fmt: skip
    for p in _glob(REALDATA / "nsys", "*.sqlite", "*.sqlite.gz"):
        logs = tuple(
            log for key, log in power.items() if f"train_{key}_gpumetrics" in p.name and log.exists()
        )
        out.append(Case(f"real-{p.name}", (p,), "nsys", logs))
    for p in _glob(REALDATA / "ncu", "h100_ncu2025.3_full_details_import.csv", "b200_*.csv",
                   "h100_ncu2025.3_transformer_train_details.csv"):  # fmt: skip
        out.append(Case(f"real-{p.name}", (p,), "ncu"))
    for p in _glob(REALDATA / "ncu-rep", "*.ncu-rep"):
        out.append(Case(f"real-{p.name}", (p,), "ncu"))
    for p in _glob(REALDATA / "kineto", "*.json.gz"):
        out.append(Case(f"real-{p.name}", (p,), "kineto"))
    before, after = (REALDATA / "nsys" / f"h100x2_nsys2026.2_train_{s}.sqlite" for s in ("before", "after"))
    if before.exists() and after.exists():
        out.append(Case("real-diff-train", (before, after), "diff"))
    return out


@dataclass
class Built:
    con: object  # the workspace connection (duckdb)
    report_id: int  # the report drawn (the diff: A's first report)
    ids: list[int]
    data: dict
    page: Path


def build(case: Case, folder: Path) -> Built:
    """Ingest the case into a fresh workspace in `folder` and write its page there."""
    import nsight_analytics as nsa
    from nsight_analytics import api, render

    con = nsa.connect(folder / "w.duckdb")
    ids = [nsa.ingest(con, p).report_id for p in case.files]
    for p in case.extra:
        nsa.ingest(con, p)
    if case.kind == "diff":
        data = api.report_data(con, diff_sides=(ids[0], ids[1]))
    else:
        data = api.report_data(con, ids[0])
    page = folder / f"{case.id}.html"
    page.write_text(render.render_html(data), encoding="utf-8")
    return Built(con, ids[0], ids, data, page)
