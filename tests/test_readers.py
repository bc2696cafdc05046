"""Readers: discovery, a new format in one file, and transparent `.gz` for every format.

The `.gz` checks compare with plain sqlite3 on the decompressed export and with the plain CSV's
ingest, so a reader fault shows up as a count that differs from the file's own.
"""

from __future__ import annotations

import gzip
import random
import re
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest
import xxhash

import nsight_analytics as nsa
from conftest import ROOT
from nsight_analytics.errors import InputError
from nsight_analytics.ingest import LoadResult, Progress, Reader, all_readers, register, unregister
from nsight_analytics.ingest.nsys import nsys

pipeline = sys.modules["nsight_analytics.ingest.pipeline"]

DATA = ROOT / "tests" / "data"
# committed as .sqlite.gz only; 8.9 MB inside, past the 4 MB a reader sniffs: CUDA graph events,
# NVTX steps, OS runtime calls (tests/data/README.md)
COMPILE = DATA / "h100_nsys2025.3_compile_reduce_overhead.sqlite.gz"
DEMO = ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"  # the bundled demo export
# canonical table -> the export's table, counted with sqlite3
COUNTS = {
    "kernel_rows": "CUPTI_ACTIVITY_KIND_KERNEL",
    "graph_events": "CUDA_GRAPH_EVENTS",
    "sync_events": "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "nvtx_ranges": "NVTX_EVENTS",
    "osrt_api": "OSRT_API",
    "processes": "PROCESSES",
}


def _sqlite_count(path: Path, table: str) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return int(db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def _count(con: duckdb.DuckDBPyConnection, table: str, rid: int) -> int:
    return int(con.execute(f'SELECT count(*) FROM "{table}" WHERE report_id = ?', [rid]).fetchone()[0])


@pytest.fixture(autouse=True)
def _own_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Decompressed copies go to the system's temporary folder: here, the test's own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _leftovers(folder: Path) -> list[Path]:
    return sorted(folder.glob("nsa-gunzip-*"))


def test_every_reader_module_is_discovered() -> None:
    """A `reader` / `reader_*` module of a format package (ingest/nsys/, ...) is a reader:
    nothing else lists them."""
    folder = Path(pipeline.__file__).parent
    modules = sorted(
        f"{p.parent.name}.{p.stem}"
        for p in folder.glob("*/reader*.py")
        if p.stem == "reader" or p.stem.startswith("reader_")
    )
    assert [".".join(type(r).__module__.rsplit(".", 2)[1:]) for r in all_readers()] == modules
    assert {"ncu.reader_csv", "nsys.reader_sqlite", "kineto.reader"} <= set(modules)
    assert {"ncu", "nsys", "kineto"} <= {r.name for r in all_readers()}  # reports.format


def test_the_readers_ship_in_the_package() -> None:
    """pyproject.toml lists packages by hand: a reader folder missing there would install empty."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    root = Path(__file__).resolve().parents[1]
    packages = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert {f"nsight_analytics.ingest.{f}" for f in ("nsys", "ncu", "kineto", "power")} <= set(
        packages["packages"]
    )
    # and so would any other package folder (the rules' checks/ once did)
    folders = {
        ".".join(p.parent.relative_to(root).parts) for p in (root / "nsight_analytics").rglob("__init__.py")
    }
    assert folders <= set(packages["packages"])


def test_gz_nsys_export_ingests_like_the_file_inside(tmp_path: Path) -> None:
    packed = COMPILE.resolve()
    plain = tmp_path / "plain" / packed.name.removesuffix(".gz")  # by the test's own gzip, for sqlite3
    plain.parent.mkdir()
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    r = nsa.ingest(con, packed)
    assert (r.format, r.status, r.path) == ("nsys", "ingested", packed)
    row = con.execute("SELECT format, source_path, sha256, content_hash, size_bytes FROM reports").fetchone()
    assert row == (
        "nsys",
        str(packed),
        None,  # only reports ingested before content_hash have it
        "xxh3_128-" + xxhash.xxh3_128(packed.read_bytes()).hexdigest(),  # of the .gz's bytes
        packed.stat().st_size,
    )
    assert "nvtx_ranges" in r.deferred and _leftovers(tmp_path) == []
    # the deferred tables come from the .gz too, decompressed again on first use
    later = ["nvtx_ranges", "nvtx_kernels", "nvtx_totals", "kernels", "osrt_api", *nsys.GPU_COPIES]
    assert pipeline.ensure_loaded(con, later) > 0
    assert con.execute("SELECT deferred_steps FROM reports").fetchone()[0] in (
        ["steps"],
        ["stack_events", "steps"],
    )
    for canonical, raw in COUNTS.items():
        assert _count(con, canonical, r.report_id) == _sqlite_count(plain, raw), canonical
    assert con.execute("SELECT count(*) FROM kernel_rows WHERE grid_x IS NULL").fetchone()[0] == 0
    assert _leftovers(tmp_path) == []
    # the same content, plain: the same rows
    rid = nsa.ingest(con, plain, defer=()).report_id
    for canonical in COUNTS:
        assert _count(con, canonical, rid) == _count(con, canonical, r.report_id), canonical
    con.close()


def test_gz_ncu_csv_ingests_like_the_csv(tmp_path: Path) -> None:
    # the details page of a `--set full` report, base units (tests/data/ncu/variants/manifest.tsv)
    csv = tmp_path / "details_base.csv"
    csv.write_bytes(gzip.decompress((DATA / "ncu" / "variants" / "details_base.csv.gz").read_bytes()))
    packed = tmp_path / (csv.name + ".gz")
    packed.write_bytes(gzip.compress(csv.read_bytes()))
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    a, b = nsa.ingest(con, csv), nsa.ingest(con, packed)
    assert (b.format, b.rows) == ("ncu", a.rows) and a.rows["kernels"] > 0
    for table in ("ncu_kernels", "ncu_metrics", "ncu_rules"):
        sql = f"SELECT * EXCLUDE (report_id) FROM {table} WHERE report_id = ? ORDER BY ALL"
        one = con.execute(sql, [a.report_id]).fetchall()
        assert one == con.execute(sql, [b.report_id]).fetchall(), table
    assert nsa.ingest(con, packed).status == "unchanged"
    assert _leftovers(tmp_path) == []
    con.close()


def test_errors_inside_a_gz_name_the_gz(tmp_path: Path) -> None:
    """A file inside a .gz that its reader refuses: the sentence names the .gz, nothing stays."""
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (x)")
    packed = tmp_path / "other.sqlite.gz"
    packed.write_bytes(gzip.compress(db.read_bytes()))
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    with pytest.raises(InputError) as err:
        nsa.ingest(con, packed)
    assert str(err.value).startswith(f"{packed} is an SQLite database but not an nsys export")
    assert con.execute("SELECT count(*) FROM reports").fetchone()[0] == 0
    assert _leftovers(tmp_path) == []
    con.close()


@pytest.mark.parametrize("tail", [0, 12 << 20], ids=["cut-in-head", "cut-after-head"])
def test_a_gz_cut_short_fails_whole(tmp_path: Path, tail: int) -> None:
    """Cut within the first megabytes (not even the format can be told) or after them (found
    while decompressing): random bytes after the export keep the second half past them."""
    content = DEMO.read_bytes() + random.Random(0).randbytes(tail)  # 1.1 MB export, then `tail` bytes
    data = gzip.compress(content)
    packed = tmp_path / "cut.sqlite.gz"
    packed.write_bytes(data[: len(data) // 2])
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    said = "is a damaged or truncated gzip file (" if tail else "is a damaged, truncated or empty gzip file;"
    with pytest.raises(InputError, match=re.escape(f"{packed} {said}")):
        nsa.ingest(con, packed)
    assert con.execute("SELECT count(*) FROM reports").fetchone()[0] == 0
    assert _leftovers(tmp_path) == []
    con.close()


# --- a new format is one package: this reader could be nsight_analytics/ingest/toy/reader.py ---

MAGIC = b"# toy kernels v1\n"


class ToyKernels(Reader[list[tuple[str, int, int]]]):
    """A CSV of kernels, `name,start_ns,end_ns`, under a magic first line."""

    name = "toy"

    def __init__(self) -> None:
        self.opened: list[Path] = []  # what open() was given

    def sniff(self, head: bytes) -> bool:
        return head.startswith(MAGIC)

    @contextmanager
    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[list[tuple[str, int, int]]]:
        self.opened.append(path)
        rows = []
        for n, line in enumerate(path.read_text().splitlines()[2:], start=3):
            fields = line.split(",")
            if len(fields) != 3:
                raise InputError(f"{path}: line {n} is not `name,start_ns,end_ns`.")
            rows.append((fields[0], int(fields[1]), int(fields[2])))
        yield rows

    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: list[tuple[str, int, int]],
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        names = {name: i for i, name in enumerate(dict.fromkeys(n for n, _, _ in handle), start=1)}
        for name, nid in names.items():
            con.execute(
                "INSERT INTO kernel_names (report_id, name_id, name, kernels) VALUES (?, ?, ?, ?)",
                [report_id, nid, name, sum(1 for n, _, _ in handle if n == name)],
            )
        for name, start, end in handle:
            con.execute(
                "INSERT INTO kernel_rows (report_id, device_id, start_ns, end_ns, duration_ns, name_id) "
                "VALUES (?, 0, ?, ?, ?, ?)",
                [report_id, start, end, end - start, names[name]],
            )
        return LoadResult(rows={"kernels": len(handle)}, activity_kinds=["kernel"] if handle else [])


@pytest.fixture
def toy() -> Iterator[ToyKernels]:
    reader = ToyKernels()
    register(reader)
    yield reader
    unregister(reader.name)


def test_a_new_format_is_one_reader(toy: ToyKernels, tmp_path: Path) -> None:
    path = tmp_path / "run.kernels"  # any name: the content decides
    path.write_bytes(MAGIC + b"name,start_ns,end_ns\ngemm,0,300\nrelu,400,450\ngemm,500,800\n")
    con = nsa.connect(tmp_path / "w.duckdb")
    r = nsa.ingest(con, path)
    assert (r.format, r.rows) == ("toy", {"kernels": 3})
    row = con.execute("SELECT format, activity_kinds, has_kernels, has_memcpy FROM reports").fetchone()
    assert row == ("toy", ["kernel"], True, False)
    rows = nsa.query(con, "kernel_summary").fetchall()
    assert [(name, n, total) for _, name, n, total, *_ in rows] == [("gemm", 2, 600), ("relu", 1, 50)]
    # and compressed, with no more code
    packed = tmp_path / "run2.kernels.gz"
    packed.write_bytes(gzip.compress(path.read_bytes().replace(b"800", b"900")))
    assert nsa.ingest(con, packed).format == "toy"
    inside = toy.opened[-1]  # a temporary copy, named as the .gz without `.gz`, gone now
    assert (inside.name, inside.parent.parent, inside.exists()) == ("run2.kernels", tmp_path, False)
    bad = tmp_path / "bad.kernels"
    bad.write_bytes(MAGIC + b"name,start_ns,end_ns\ngemm,0\n")
    with pytest.raises(InputError, match=r"bad.kernels: line 3 is not"):
        nsa.ingest(con, bad)
    assert con.execute("SELECT count(*) FROM reports").fetchone()[0] == 2
    con.close()
