""".ncu-rep reports through NVIDIA's ncu_report: every value checked against ncu's own CSV exports
of the same reports (tests/data/ncu/variants/, written by `ncu -i REPORT --csv`), parsed here
with the csv module alone; the shared JAX report against the facts its README states."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import math
import re
import shutil
import sqlite3
import sys
from collections import Counter
from contextlib import closing
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from conftest import ROOT, realdata
from nsight_analytics import schema
from nsight_analytics.cli import EXIT_ERROR, EXIT_OK, main
from nsight_analytics.errors import InputError
from nsight_analytics.ingest import all_readers
from nsight_analytics.ingest.ncu.ncu_rep import display_name
from nsight_analytics.ingest.ncu.reader_rep import READER

pytest.importorskip("ncu_report", reason="ncu-report has wheels for Linux and Windows x86-64 only")

REP = ROOT / "tests" / "data" / "ncu-rep"
CSV = ROOT / "tests" / "data" / "ncu" / "variants"
FWD = REP / "h100_ncu2025.3_train_fwd_full.ncu-rep.gz"
ADAM = REP / "h100_ncu2025.3_train_adam_full.ncu-rep.gz"
HOT = REP / "h100_ncu2025.3_hot_source.ncu-rep.gz"
# report -> its raw page and details page, both `--print-units base`
EXPORTS = {
    "fwd": (FWD, "raw_base.csv.gz", "details_base.csv.gz"),
    "adam": (ADAM, "adam_raw_base.csv.gz", "adam_details_base.csv.gz"),
    "hot": (HOT, "hot_raw_base.csv.gz", "hot_details_base.csv.gz"),
}
# Columns of the raw page that describe the launch, not a metric.
LAUNCH_COLS = {
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
    "Grid Size", "Device", "CC",
}  # fmt: skip
NVTX_COL_RE = re.compile(r"Domain:(Push/Pop|Start/Stop)_Range")
# Metrics the report holds that the CSV writer leaves out: ncu's groupings of other metrics.
REPORT_ONLY_PREFIXES = ("breakdown:", "group:")
# Metrics whose aggregate the report lacks and the CSV prints as `no data`.
CSV_NO_DATA = {
    "sass__inst_executed_register_spilling_mem_local",
    "sass__inst_executed_register_spilling_mem_shared",
}
# The report gives idc__requests.sum the unit `request`; the CSV's units row leaves it blank.
UNIT_DIFFERS = {"idc__requests.sum"}


def read_csv(name: str) -> list[list[str]]:
    with gzip.open(CSV / name, "rt", newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def unzip(path: Path) -> bytes:
    with gzip.open(path) as fh:
        return fh.read()


def number(text: str) -> float:
    return float(text.replace(",", ""))


def within_print(value: float | None, text: str) -> bool:
    """Does `value` print as `text` at the CSV's precision (its decimals, en_US separators)?
    NaN is stored as NULL, as the CSV reader stores `nan` cells."""
    printed = number(text)
    if value is None:
        return math.isnan(printed)
    if math.isnan(printed) or math.isnan(value):
        return math.isnan(printed) and math.isnan(value)
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(value - printed) <= 0.5 * 10**-decimals * (1 + 1e-9) + 1e-12 * abs(value)


def is_number(text: str) -> bool:
    return re.fullmatch(r"-?[\d,]+(\.\d+)?|nan|-?inf", text) is not None


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """(connection, {report key: report_id}): the three reports, from their `.gz` files."""
    con = nsa.connect(tmp_path_factory.mktemp("ncu_rep") / "w.duckdb")
    ids = {key: nsa.ingest(con, rep).report_id for key, (rep, _, _) in EXPORTS.items()}
    yield con, ids
    con.close()


# --- detection ---------------------------------------------------------------------------------


def test_sniff_claims_reports_and_nothing_else() -> None:
    head = unzip(FWD)[:4096]
    assert READER.sniff(head)
    assert [r.name for r in all_readers() if r.sniff(head)] == ["ncu-rep"]
    csv_head = unzip(CSV / "raw_base.csv.gz")[:4096]
    sqlite_head = (ROOT / "tests" / "data" / "h100_nsys2025.3_idle_gaps.sqlite").read_bytes()[:4096]
    assert not READER.sniff(csv_head)
    assert not READER.sniff(sqlite_head)
    assert not READER.sniff(b"")


# --- the shared JAX report: the facts its README states -------------------------------------------


def test_jax_report_has_the_launches_the_readme_states(tmp_path: Path) -> None:
    path = realdata("ncu-rep", "jax_cuda_graph_pdl_stream_capture.ncu-rep")
    con = nsa.connect(tmp_path / "w.duckdb")
    result = nsa.ingest(con, path)
    assert result.format == "ncu-rep"
    # README: 1 range, 3 launches, ~2,500 metrics each (a JAX program: CUDA graph, PDL, capture)
    kernels = con.execute("SELECT launch_id, name FROM ncu_kernels ORDER BY 1").fetchall()
    assert [k[0] for k in kernels] == [0, 1, 2]
    per_launch = con.execute(
        "SELECT launch_id, count(DISTINCT metric_name) FROM ncu_metrics GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert len(per_launch) == 3
    assert all(2_300 <= n <= 2_700 for _, n in per_launch), per_launch
    assert result.rows["kernels"] == 3


# --- value by value against the raw page ----------------------------------------------------------


@pytest.mark.parametrize("key", EXPORTS)
def test_every_metric_equals_the_csv_raw_page(ws, key: str) -> None:
    con, ids = ws
    rows = read_csv(EXPORTS[key][1])
    head, units, data = rows[0], rows[1], rows[2:]
    assert units[0] == ""  # the raw page's units row
    ours = {
        (launch, name): (value, text, unit)
        for launch, name, value, text, unit in con.execute(
            "SELECT launch_id, metric_name, value, value_text, unit FROM ncu_metrics WHERE report_id = ?",
            [ids[key]],
        ).fetchall()
    }
    csv_cells = {}
    for row in data:
        for name, unit, text in zip(head, units, row, strict=True):
            if name not in LAUNCH_COLS and not NVTX_COL_RE.search(name) and text != "":
                csv_cells[(int(row[0]), name)] = (unit, text)
    launches = len(data)
    assert launches == {"fwd": 10, "adam": 1, "hot": 2}[key]

    both = csv_cells.keys() & ours.keys()
    csv_only = csv_cells.keys() - ours.keys()
    ours_only = ours.keys() - csv_cells.keys()
    # Explained differences, counted: `no data` cells, and the report's own groupings (plus
    # string metrics the CSV leaves blank when they are empty).
    assert {csv_cells[k][1] for k in csv_only} == {"no data"}
    assert {k[1] for k in csv_only} == CSV_NO_DATA
    assert len(csv_only) == 2 * launches
    unexplained = [k for k in ours_only if not k[1].startswith(REPORT_ONLY_PREFIXES) and ours[k][1] != ""]
    assert unexplained == []
    assert sum(k[1].startswith(REPORT_ONLY_PREFIXES) for k in ours_only) == 16 * launches

    wrong_values, wrong_units = [], set()
    for k in both:
        unit, text = csv_cells[k]
        value, our_text, our_unit = ours[k]
        if is_number(text):
            if not within_print(value, text):
                wrong_values.append((k, text, value))
        elif our_text != text:
            wrong_values.append((k, text, our_text))
        if (unit or None) != our_unit:
            wrong_units.add(k[1])
    assert wrong_values == []
    assert wrong_units == UNIT_DIFFERS
    assert len(both) > 2_200 * launches


@pytest.mark.parametrize("key", EXPORTS)
def test_launch_attributes_equal_the_csv(ws, key: str) -> None:
    con, ids = ws
    rows = read_csv(EXPORTS[key][1])
    head, data = rows[0], rows[2:]
    expected = [
        (int(r[0]), r[head.index("Kernel Name")], r[head.index("Grid Size")], r[head.index("Block Size")],
         int(r[head.index("Context")]), int(r[head.index("Stream")]), int(r[head.index("Device")]), r[head.index("CC")])
        for r in data
    ]  # fmt: skip
    got = con.execute(
        "SELECT launch_id, name, grid, block, context_id, stream_id, device_id, cc FROM ncu_kernels "
        "WHERE report_id = ? ORDER BY launch_id",
        [ids[key]],
    ).fetchall()
    assert got == expected


def test_kernel_names_are_spelled_as_ncus_csv_spells_them() -> None:
    """The same program under nsys (full demangled names) and ncu (its CSV's short names):
    every name ncu printed is display_name of a name nsys recorded."""
    export = realdata("nsys", "h100_nsys2025.3_transformer_train.sqlite")
    with closing(sqlite3.connect(export)) as src:
        full = {
            r[0]
            for r in src.execute(
                "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.demangledName"
            )
        }
    with realdata("ncu", "h100_ncu2025.3_transformer_train_details.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    at = rows[0].index("Kernel Name")
    printed = {r[at] for r in rows[1:] if len(r) > at}
    assert len(printed) == 7
    assert printed <= {display_name(n) for n in full}


def test_nvtx_state_and_symbols_equal_the_csv(ws) -> None:
    con, ids = ws
    rows = read_csv("raw_base.csv.gz")
    head, data = rows[0], rows[2:]
    push_pop = next(i for i, c in enumerate(head) if "Push/Pop_Range" in c)
    # `2324  "<default domain>:step 0:none:..."  "<default domain>:optimizer:none:..."`
    expected = [" > ".join(re.findall(r'"<default domain>:([^:]*):', r[push_pop])) for r in data]
    mangled_rows = read_csv("details_kernel_base_mangled.csv.gz")
    at = mangled_rows[0].index("Kernel Name")
    mangled = {int(r[0]): r[at] for r in mangled_rows[1:]}
    got = con.execute(
        "SELECT launch_id, nvtx_ranges, mangled_name FROM ncu_kernels WHERE report_id = ? ORDER BY 1",
        [ids["fwd"]],
    ).fetchall()
    assert [g[1] for g in got] == expected
    assert expected[0] == "step 0 > optimizer"
    assert [g[2] for g in got] == [mangled[g[0]] for g in got]


# --- instances ---------------------------------------------------------------------------------


def parse_instances(cell: str) -> tuple[str, list[str]]:
    """`3,670 (32; 32; ...)` or `(0.00; 0; ...)` (no aggregate) -> (aggregate, instance texts)."""
    aggregate, _, inner = cell.partition("(")
    return aggregate.strip(), inner.rstrip(")").split("; ")


def as_key(text: str) -> str:
    """An instance's correlation id as nsa stores it: decimal (ncu prints PCs in hex)."""
    return str(int(text, 0)) if re.fullmatch(r"0x[0-9a-f]+|\d+", text) else text


def test_instances_equal_the_csv(ws) -> None:
    con, ids = ws
    values = read_csv("raw_instances_values.csv.gz")
    details = read_csv("raw_instances_details.csv.gz")
    head = values[0]
    assert details[0] == head
    ours: dict[tuple[int, str], list[tuple[str | None, float | None, str]]] = {}
    for launch, name, key, value, text in con.execute(
        "SELECT launch_id, metric_name, instance_key, value, value_text FROM ncu_metric_instances "
        "WHERE report_id = ? ORDER BY launch_id, metric_name, instance",
        [ids["fwd"]],
    ).fetchall():
        ours.setdefault((launch, name), []).append((key, value, text))
    # This export has ncu's default `--print-units auto`: where its unit differs from the base
    # unit (`Kbyte` for `byte`), only the instance keys and counts are compared.
    base_units = dict(zip(*read_csv("raw_base.csv.gz")[:2], strict=True))
    scaled = {n for n, u in zip(head, values[1], strict=True) if n in base_units and u != base_units[n]}
    compared: set[tuple[int, str]] = set()
    mismatched = instances = 0
    for vrow, drow in zip(values[2:], details[2:], strict=True):
        launch = int(vrow[0])
        for name, vcell, dcell in zip(head, vrow, drow, strict=True):
            if name in LAUNCH_COLS or "(" not in vcell:
                continue
            _, texts = parse_instances(vcell)
            # details: `1: 32; 16: 32` or `0 (+0): 0.00; 1795... (+1795...): 0`
            # (PC addresses in hex: `0x7fd60f7f1600: 8`)
            keys = [
                as_key(re.sub(r" \(\+\d+\)$", "", part.rsplit(": ", 1)[0]))
                for part in parse_instances(dcell)[1]
            ]
            got = ours.get((launch, name), [])
            compared.add((launch, name))
            instances += len(texts)
            if [g[0] for g in got] != keys or (
                name not in scaled
                and not all(
                    within_print(v, t) if is_number(t) and v is not None else our_text == t
                    for (_, v, our_text), t in zip(got, texts, strict=True)
                )
            ):
                mismatched += 1
    assert mismatched == 0
    assert len(scaled & {n for _, n in ours}) == 8  # byte sizes and rates in K/M/G, one percentage
    # the same instanced metrics on both sides: 132 in every launch, plus the PC-sampling
    # counters in the launches where ncu got samples
    assert compared == ours.keys()
    assert len(compared) > 132 * 10
    total = con.execute(
        "SELECT count(*) FROM ncu_metric_instances WHERE report_id = ?", [ids["fwd"]]
    ).fetchone()
    assert total[0] == instances


def source_page_blocks(name: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) per kernel of a `--page source --print-source sass` export; ncu 2025.3
    prints each kernel's block twice in a row, the copy is dropped."""
    blocks: list[tuple[list[str], list[list[str]]]] = []
    head: list[str] = []
    rows: list[list[str]] = []
    for row in read_csv(name):
        if row[:1] == ["Kernel Name"]:
            if head and (not blocks or blocks[-1] != (head, rows)):
                blocks.append((head, rows))
            head, rows = [], []
        elif row[:1] == ["Address"]:
            head = row
        elif row:
            rows.append(row)
    if head and (not blocks or blocks[-1] != (head, rows)):
        blocks.append((head, rows))
    return blocks


@pytest.mark.parametrize(
    ("column", "metric"),
    [("# Samples", "smsp__pcsamp_sample_count"), ("Instructions Executed", "inst_executed")],
)
def test_per_pc_instances_equal_the_source_page(ws, column: str, metric: str) -> None:
    """The PC-keyed instances are the source page's per-instruction columns (PCs with 0 have
    no instance)."""
    con, ids = ws
    blocks = source_page_blocks("hot_source_sass.csv.gz")
    assert len(blocks) == 2
    for launch_id, (head, rows) in enumerate(blocks):
        expected = {int(r[0], 16): int(number(r[head.index(column)])) for r in rows}
        ours = dict(
            con.execute(
                "SELECT CAST(instance_key AS UBIGINT), value FROM ncu_metric_instances "
                "WHERE report_id = ? AND launch_id = ? AND metric_name = ?",
                [ids["hot"], launch_id, metric],
            ).fetchall()
        )
        assert set(ours) <= set(expected)
        assert {pc: ours.get(pc, 0) for pc in expected} == expected
        assert sum(expected.values()) > 0


def cuda_sass_page(name: str) -> tuple[Counter, Counter]:
    """A `--page source --print-source cuda,sass` export read plainly: (rows, stall rows).
    Rows: (launch, kind, line, address, sass, samples, not issued, executed); a line's
    instructions follow it, repeated and split by `...` rows, which count once."""
    rows: Counter = Counter()
    stalls: Counter = Counter()
    launch, head, line, seen = -1, [], None, set()
    for r in read_csv(name):
        if r[:1] == ["File Path"]:
            launch, seen = launch + 1, set()
        elif r[:1] == ["Line No"]:
            head = r
        elif head and r[:1] != ["Function Name"]:
            col = {c: i for i, c in enumerate(head) if c != "Source"}
            if r[0]:
                line, kind, address, sass = int(r[0]), "line", None, None
            elif r[2] in ("...", "-") or (line, r[2]) in seen:
                continue
            else:
                seen.add((line, r[2]))
                kind, address, sass = "sass", r[2], r[3].strip()

            def cell(c: str, r=r, col=col) -> int:
                return int(number(r[col[c]]))

            key = (launch, kind, line, address)
            counts = (
                cell("Warp Stall Sampling (All Samples)"),
                cell("Warp Stall Sampling (Not-issued Samples)"),
            )
            rows[(*key, sass, *counts, cell("Instructions Executed"))] += 1
            for c in head:
                if c.startswith("stall_") and not c.endswith(" (Not Issued)") and cell(c):
                    reason = c[len("stall_") :]
                    not_issued = f"{c} (Not Issued)"
                    stalls[(*key, reason, cell(c), cell(not_issued) if not_issued in col else None)] += 1
    return rows, stalls


def test_source_view_equals_the_csv_source_page(ws) -> None:
    con, ids = ws
    expected_rows, expected_stalls = cuda_sass_page("hot_source_cuda_sass.csv.gz")
    rows = Counter(
        con.execute(
            "SELECT launch_id, granularity, line, address, sass, samples, samples_not_issued, instructions_executed "
            "FROM ncu_source WHERE report_id = ?",
            [ids["hot"]],
        ).fetchall()
    )
    stalls = Counter(
        con.execute(
            "SELECT launch_id, granularity, line, address, reason, t.samples, t.samples_not_issued "
            "FROM ncu_source_stalls t JOIN ncu_source s USING (report_id, launch_id, seq) WHERE report_id = ?",
            [ids["hot"]],
        ).fetchall()
    )
    assert rows == expected_rows
    assert sum(expected_rows.values()) == 134  # 14 source lines, 120 instructions
    # ncu names one not-issued column `stall_sleeping (Not Issued)` beside `stall_sleep`: none here
    assert stalls == expected_stalls
    assert len(expected_stalls) > 100
    files = con.execute("SELECT DISTINCT file FROM ncu_source WHERE report_id = ?", [ids["hot"]]).fetchall()
    assert files == sorted(
        {(r[1],) for r in read_csv("hot_source_cuda_sass.csv.gz") if r[:1] == ["File Path"]}
    )


def test_source_instructions_equal_the_sass_page(ws) -> None:
    con, ids = ws
    for launch_id, (head, page) in enumerate(source_page_blocks("hot_source_sass.csv.gz")):
        expected = [
            (r[0], r[1].strip(), int(number(r[head.index("Warp Stall Sampling (All Samples)")])))
            for r in page
        ]
        got = con.execute(
            "SELECT address, sass, samples FROM ncu_source WHERE report_id = ? AND launch_id = ? "
            "AND granularity = 'sass' ORDER BY address",
            [ids["hot"], launch_id],
        ).fetchall()
        assert got == sorted(expected)


# --- rules ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", EXPORTS)
def test_rules_equal_the_csv_details_page(ws, key: str) -> None:
    con, ids = ws
    rows = read_csv(EXPORTS[key][2])
    head = rows[0]
    col = {c: head.index(c) for c in ("ID", "Section Name", "Rule Name", "Rule Type", "Rule Description")}
    kind_at, speedup_at = head.index("Estimated Speedup Type"), head.index("Estimated Speedup")
    expected = Counter()
    speedups = {}
    for r in rows[1:]:
        if len(r) > col["Rule Name"] and r[col["Rule Name"]]:
            k = (
                int(r[0]),
                r[col["Section Name"]],
                r[col["Rule Name"]],
                r[col["Rule Type"]],
                r[col["Rule Description"]],
            )
            expected[k] += 1
            speedups[k] = (r[kind_at] or None, r[speedup_at])
    got = con.execute(
        "SELECT launch_id, section, rule_name, rule_type, description, est_speedup_type, est_speedup "
        "FROM ncu_rules WHERE report_id = ?",
        [ids[key]],
    ).fetchall()
    assert Counter(g[:5] for g in got) == expected
    for g in got:
        kind, text = speedups[g[:5]]
        assert g[5] == kind
        assert (g[6] is None and text == "") or within_print(g[6], text), (g, text)
    assert sum(expected.values()) > 0


# --- paths, errors, and the same answers as the CSV ---------------------------------------------


def test_plain_and_gz_paths_give_the_same_rows(tmp_path: Path) -> None:
    plain = tmp_path / "adam.ncu-rep"
    with gzip.open(ADAM) as src, plain.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    con = nsa.connect(tmp_path / "w.duckdb")
    a, b = nsa.ingest(con, plain).report_id, nsa.ingest(con, ADAM).report_id
    assert a != b
    for table in ("ncu_kernels", "ncu_metrics", "ncu_metric_instances", "ncu_rules"):
        cols = ", ".join(f'"{c}"' for c in schema.BY_NAME[table].col_names if c != "report_id")
        diff = con.execute(
            f"SELECT count(*) FROM ((SELECT {cols} FROM {table} WHERE report_id = {a} EXCEPT ALL "
            f"SELECT {cols} FROM {table} WHERE report_id = {b}) UNION ALL (SELECT {cols} FROM {table} "
            f"WHERE report_id = {b} EXCEPT ALL SELECT {cols} FROM {table} WHERE report_id = {a}))"
        ).fetchone()
        assert diff == (0,), table
        assert con.execute(f"SELECT count(*) FROM {table} WHERE report_id = {a}").fetchone()[0] > 0


def _state(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT report_id, content_hash FROM reports ORDER BY 1").fetchall()
        return [
            *rows,
            tuple(con.execute(f'SELECT count(*) FROM "{t.name}"').fetchone()[0] for t in schema.STORED),
        ]
    finally:
        con.close()


def _cut(tmp_path: Path, name: str, keep) -> Path:
    data = unzip(HOT)
    path = tmp_path / name
    path.write_bytes(keep(data))
    return path


DAMAGED = {
    "cut in the last launch": lambda d: d[: len(d) - 1000],
    "cut one byte short": lambda d: d[:-1],
    "cut after the file header": lambda d: d[:16],
    "garbage after the magic": lambda d: d[:4] + b"\xff" * 4000,
    "a launch's bytes zeroed": lambda d: d[:1_400_000] + bytes(len(d) - 1_400_000),
}


@pytest.mark.parametrize("case", DAMAGED)
def test_damaged_report_exits_2_and_changes_nothing(tmp_path: Path, case: str) -> None:
    db = tmp_path / "w.duckdb"
    runner = CliRunner(env={"COLUMNS": "80"})
    assert runner.invoke(main, ["ingest", "--db", str(db), str(ADAM)]).exit_code == EXIT_OK
    before = _state(db)
    bad = _cut(tmp_path, "hot.ncu-rep", DAMAGED[case])
    res = runner.invoke(main, ["ingest", "--db", str(db), str(bad)])
    assert res.exit_code == EXIT_ERROR, res.output
    assert res.stdout == ""
    assert res.stderr.startswith(f"Error: {bad.resolve()} ")
    assert "damaged" in res.stderr or "without any profiled launch" in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert _state(db) == before


def test_a_missing_ncu_report_module_says_what_to_install(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # import fails as if not installed
    con = nsa.connect(tmp_path / "w.duckdb")
    with pytest.raises(InputError, match=r"pip install ncu-report"):
        nsa.ingest(con, ADAM)
    assert con.execute("SELECT count(*) FROM reports").fetchone() == (0,)


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    """The forward report and its raw-page CSV export in one workspace: (con, rep id, csv id)."""
    con = nsa.connect(tmp_path_factory.mktemp("side_by_side") / "w.duckdb")
    rep = nsa.ingest(con, FWD).report_id
    exported = nsa.ingest(con, CSV / "raw_base.csv.gz").report_id
    yield con, rep, exported
    con.close()


def _rows(con, name: str, report_id: int) -> list[tuple]:
    """Rows without report_id, ordered by their text columns; without `rank`, which ties among
    the near-zero stall reasons that the CSV's two decimals round to 0.00 break differently."""
    rel = nsa.query(con, name, report_id=report_id)
    cols = [c for c in rel.columns if c not in ("report_id", "rank")]
    rows = rel.select(*cols).fetchall()
    return sorted(rows, key=lambda r: [str(v) for v in r if not isinstance(v, float)])


def _same(a: object, b: object) -> bool:
    """The CSV prints 2 decimals; numbers derived from them (shares, ratios) move a little more."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=5e-3, abs_tol=0.05) or (math.isnan(a) and math.isnan(b))
    return a == b


def test_source_hotspots_answer_the_same_on_the_report_and_its_csv(tmp_path: Path) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    rep = nsa.ingest(con, HOT).report_id
    exported = nsa.ingest(con, CSV / "hot_source_cuda_sass.csv.gz").report_id
    ours, theirs = _rows(con, "source_hotspots", rep), _rows(con, "source_hotspots", exported)
    assert ours == theirs
    assert len(ours) == 10  # the top 5 lines of each kernel


@pytest.mark.parametrize("name", ["stalls", "speed_of_light", "occupancy"])
def test_queries_answer_the_same_on_the_report_and_its_csv(side_by_side, name: str) -> None:
    con, rep, exported = side_by_side
    ours, theirs = _rows(con, name, rep), _rows(con, name, exported)
    assert len(ours) == len(theirs) >= 10
    different = [(o, t) for o, t in zip(ours, theirs, strict=True) if not all(map(_same, o, t))]
    assert different == []


def test_findings_are_the_same_on_the_report_and_its_csv(side_by_side) -> None:
    con, rep, exported = side_by_side

    def comparable(report_id: int) -> list[tuple]:
        found = nsa.findings(con, report_id=report_id)
        return sorted(
            (f.rule_id, f.severity, f.title, f.est_savings_ns is None)
            for f in (dataclasses.replace(f, report_id=0) for f in found)
        )

    assert comparable(rep) == comparable(exported)


def test_damaged_gzip_of_a_report_names_the_gz(tmp_path: Path) -> None:
    cut = unzip(HOT)[:-5000]
    path = tmp_path / "hot.ncu-rep.gz"
    path.write_bytes(gzip.compress(cut))
    con = nsa.connect(tmp_path / "w.duckdb")
    with pytest.raises(InputError, match=re.escape(str(path.resolve())) + r" is a damaged or truncated"):
        nsa.ingest(con, path)
