"""One ncu report exported under every print option (tests/data/ncu/variants/manifest.tsv): each
export ingests to the same launches and, metric by metric, to the values of the base-unit export.

The reference values are read here from raw_base.csv.gz and details_base.csv.gz with the csv
module (`--print-units base`: the numbers are already in base units), never from nsa's parser.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
import tempfile
from functools import cache
from pathlib import Path

import pytest

from nsight_analytics.errors import InputError
from nsight_analytics.ingest.ncu.ncu import NcuParsed, parse_ncu

VARIANTS = Path(__file__).parent / "data" / "ncu" / "variants"
MANIFEST = [
    line.split("\t") for line in (VARIANTS / "manifest.tsv").read_text().splitlines()[1:] if line.strip()
]
NOT_KERNEL_DATA = {"session.csv", "source_cuda_sass.csv", "raw_name_label.csv"}
SOURCE_PAGES = {"source_sass.csv", "hot_source_cuda_sass.csv", "hot_source_sass.csv"}
SUMMARIES = {"details_summary_per_kernel.csv", "details_summary_per_gpu.csv", "details_summary_per_nvtx.csv"}


def _text(name: str) -> str:
    return gzip.decompress((VARIANTS / f"{name}.gz").read_bytes()).decode("utf-8")


def _csv(name: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(_text(name))))


def _number(cell: str) -> float | None:
    cell = cell.replace(",", "").strip()
    return float(cell) if re.fullmatch(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", cell) else None


_PLAIN = tempfile.TemporaryDirectory(prefix="nsa_ncu_variants_")  # removed when the run ends


def _plain(name: str) -> Path:
    """The export decompressed (the pipeline does that for `nsa ingest`; parse_ncu reads text)."""
    path = Path(_PLAIN.name) / name
    if not path.exists():
        path.write_text(_text(name))
    return path


@cache
def _parsed(name: str) -> NcuParsed:
    return parse_ncu(_plain(name))


@cache
def _raw_base() -> dict[tuple[int, str], tuple[float, str]]:
    """(launch, metric name) -> value, from the raw page: header, units row, one row per launch."""
    rows = _csv("raw_base.csv")
    head, data = rows[0], rows[2:]
    assert rows[1][0] == ""  # the units row
    first_metric = head.index("CC") + 1
    out = {}
    for row in data:
        for name, cell in zip(head[first_metric:], row[first_metric:], strict=True):
            value = _number(cell)
            if value is not None:
                out[(int(row[0]), name)] = (value, cell)
    return out


@cache
def _details_base() -> dict[tuple[int, str, str], list[tuple[float, str]]]:
    """(launch, section, label) -> values (a label can repeat within a section)."""
    rows = _csv("details_base.csv")
    head = rows[0]
    at = {c: head.index(c) for c in ("ID", "Section Name", "Metric Name", "Metric Value")}
    out: dict[tuple[int, str, str], list[tuple[float, str]]] = {}
    for row in rows[1:]:
        if len(row) <= at["Metric Value"] or not row[at["Metric Name"]]:
            continue
        value = _number(row[at["Metric Value"]])
        if value is not None:
            key = (int(row[at["ID"]]), row[at["Section Name"]], row[at["Metric Name"]])
            out.setdefault(key, []).append((value, row[at["Metric Value"]]))
    return out


@cache
def _launch_ids() -> list[int]:
    return [int(r[0]) for r in _csv("raw_base.csv")[2:]]


def _printed_tolerance(text: str, value: float, base_unit: str | None) -> float:
    """Half a unit in the last printed digit, in base units: `2.55` Ghz is 2.55e9 +- 5e6 hz.

    Where the printed number is 0 its prefix is unknown; a unit ncu scales (bytes, hertz, time,
    rates) may then hide up to half a giga-unit.
    """
    number = _number(text) or 0.0
    decimals = len(text.split(".")[1]) if "." in text else 0
    half = 0.5 * 10.0**-decimals
    if number:
        return half * abs(value / number) + 1e-9 * abs(value)
    scaled = base_unit is not None and (
        "byte" in base_unit or base_unit in ("hz", "ns") or base_unit.endswith("/s")
    )
    return half * (1e9 if scaled else 1.0)


def _close(value: float, text: str, unit: str | None, reference: tuple[float, str]) -> bool:
    """Equal within what either export printed (the raw page may print more digits than the base)."""
    ref, ref_text = reference
    tolerance = max(_printed_tolerance(text, value, unit), _printed_tolerance(ref_text, ref, unit))
    return abs(value - ref) <= tolerance


PER_LAUNCH = [m for m in MANIFEST if m[0] not in NOT_KERNEL_DATA | SOURCE_PAGES | SUMMARIES]


def test_manifest_lists_every_file() -> None:
    listed = {m[0] for m in MANIFEST}
    on_disk = {p.name.removesuffix(".gz") for p in VARIANTS.glob("*.csv.gz")}
    # the adam_* / hot_*_base exports are of other reports, kept for the ncu-rep comparison
    assert listed <= on_disk
    assert {n for n in on_disk - listed if not n.startswith(("adam_", "hot_"))} == set()


@pytest.mark.one_python  # a heavy sweep of real captures; lighter cases cover its code on every Python
@pytest.mark.parametrize(("name", "rc", "options"), PER_LAUNCH, ids=[m[0] for m in PER_LAUNCH])
def test_every_print_option_gives_the_base_export_values(name: str, rc: str, options: str) -> None:
    parsed = _parsed(name)
    assert rc == "0"
    assert sorted(parsed.kernels.launch_id) == _launch_ids()
    raw_ref, details_ref = _raw_base(), _details_base()
    compared = 0
    mismatches = []
    for row in parsed.metrics.itertuples():
        if row.value_text is None or _number(row.value_text) is None:
            continue
        if row.unit is not None and row.unit.endswith("/byte"):
            # ncu disagrees with itself on a prefixed denominator: derived__pct_occupancy_per_
            # shared_mem_size is `1.591000` %/Kbyte (auto) but `1,591` %/byte (base), where
            # 1.591 %/Kbyte is 0.001591 %/byte
            continue
        checks = []
        if (row.launch_id, row.metric_name) in raw_ref:
            checks.append([raw_ref[(row.launch_id, row.metric_name)]])
        if row.section is not None and (row.launch_id, row.section, row.metric_label) in details_ref:
            checks.append(details_ref[(row.launch_id, row.section, row.metric_label)])
        for refs in checks:
            compared += 1
            if not any(_close(row.value, row.value_text, row.unit, r) for r in refs):
                mismatches.append(
                    (row.launch_id, row.section, row.metric_name, row.value_text, row.value, refs)
                )
    assert not mismatches[:5]
    # every variant but the body-only one repeats the header metrics: ten launches' durations at least
    assert compared >= (0 if "--print-details body" in options else 10)


@pytest.mark.parametrize("name", sorted(SUMMARIES))
def test_summaries_add_up_to_the_launches(name: str) -> None:
    parsed = _parsed(name)
    assert int(parsed.kernels.invocations.sum()) == len(_launch_ids())
    m = parsed.metrics.dropna(subset=["value", "value_min", "value_max"])
    assert not m.empty
    assert ((m.value_min <= m.value * (1 + 1e-9)) & (m.value <= m.value_max * (1 + 1e-9))).all()
    # the durations of the launches in each group, from the base export: Minimum and Maximum
    durations = {i: v for (i, n), (v, _) in _raw_base().items() if n == "gpu__time_duration.sum"}
    d = parsed.metrics[parsed.metrics.metric_name == "gpu__time_duration.sum"]
    assert d.value_min.min() == pytest.approx(min(durations.values()), abs=5)  # printed in us
    assert d.value_max.max() == pytest.approx(max(durations.values()), abs=5)


def test_per_nvtx_summary_keeps_the_ranges() -> None:
    kernels = _parsed("details_summary_per_nvtx.csv").kernels
    # the Range cell: ` "step 0:none:...:none"  "optimizer:none:...:none" `, default domain
    cell = _csv("details_summary_per_nvtx.csv")[1][1]
    names = [entry.split(":")[0] for entry in re.findall(r'"([^"]*)"', cell)]
    assert names == ["step 0", "optimizer"]
    assert set(kernels.nvtx_ranges) == {" > ".join(names)}


def test_nvtx_columns_of_a_per_launch_export() -> None:
    rows = _csv("details_plain.csv")
    assert rows[0][4].startswith("thread Domain:Push/Pop_Range")
    assert set(_parsed("details_plain.csv").kernels.nvtx_ranges) == {"step 0 > optimizer"}


# --- options that hold no kernel data, or that ncu refused -------------------------------------


def test_refused_option_names_the_option() -> None:
    assert "only supported for the details page" in _text("raw_name_label.csv")
    with pytest.raises(InputError, match=r"`--print-metric-name`.*details page"):
        _parsed("raw_name_label.csv")


def test_session_page_says_what_to_export() -> None:
    with pytest.raises(InputError, match=r"session page.*--page details"):
        _parsed("session.csv")


def test_source_page_without_line_info_says_what_to_export() -> None:
    assert "No lineinfo available" in _text("source_cuda_sass.csv")
    with pytest.raises(InputError, match=r"no line info.*--print-source sass"):
        _parsed("source_cuda_sass.csv")


# --- metric instances ----------------------------------------------------------------------------


def _details_cells(name: str, label: str) -> list[tuple[int, str]]:
    rows = _csv(name)
    head = rows[0]
    at, value_at = head.index("Metric Name"), head.index("Metric Value")
    return [(int(r[0]), r[value_at]) for r in rows[1:] if len(r) > value_at and r[at] == label]


@pytest.mark.parametrize("name", ["details_instances_values.csv", "details_instances_details.csv"])
def test_details_instances_keep_the_aggregate(name: str) -> None:
    parsed = _parsed(name)
    cells = _details_cells(name, "Registers Per Thread")  # `16 (16)` / `16 (0: 16)`
    assert len(cells) == 10
    m = parsed.metrics[parsed.metrics.metric_name == "launch__registers_per_thread"]
    inst = parsed.instances[parsed.instances.metric_name == "launch__registers_per_thread"]
    for launch, cell in cells:
        aggregate, inner = re.fullmatch(r"(\S+) \((.*)\)", cell).groups()
        assert m[m.launch_id == launch].value.tolist() == [float(aggregate)]
        mine = inst[inst.launch_id == launch]
        assert mine.value_text.tolist() == [inner.split(": ")[-1]]
        assert mine.instance_key.tolist() == ([inner.split(": ")[0]] if ": " in inner else [None])


def test_raw_instances_details_keep_correlation_ids() -> None:
    name = "raw_instances_details.csv"
    rows = _csv(name)
    head = rows[0]
    metric = "LTS.TriageCompute.lts__throughput.avg.pct_of_peak_sustained_elapsed"
    cell = rows[2][head.index(metric)]  # `(0 (+0): 0.16; 1795... (+1795...): 0.04; ...)`, no aggregate
    assert cell.startswith("(") and cell.endswith(")")
    parts = [re.fullmatch(r"(\d+) \(\+\d+\): (.*)", p).groups() for p in cell[1:-1].split("; ")]
    parsed = _parsed(name)
    inst = parsed.instances
    mine = inst[(inst.launch_id == int(rows[2][0])) & (inst.metric_name == metric)].sort_values("instance")
    assert mine.instance.tolist() == list(range(len(parts)))
    assert mine.instance_key.tolist() == [k for k, _ in parts]
    assert mine.value.sum() == pytest.approx(sum(float(v) for _, v in parts))
    m = parsed.metrics
    agg = m[(m.launch_id == int(rows[2][0])) & (m.metric_name == metric)]
    assert len(agg) == 1 and math.isnan(agg.value.iloc[0])


def test_raw_instances_values_fill_what_was_lost() -> None:
    """`44 (44)` on the raw page: the aggregate is the value the base export has."""
    rows = _csv("raw_instances_values.csv")
    head = rows[0]
    at = head.index("launch__registers_per_thread")
    parsed = _parsed("raw_instances_values.csv")
    m = parsed.metrics[parsed.metrics.metric_name == "launch__registers_per_thread"]
    for row in rows[2:]:
        aggregate = float(row[at].split(" (")[0])
        assert aggregate == _raw_base()[(int(row[0]), "launch__registers_per_thread")][0]
        assert m[m.launch_id == int(row[0])].value.tolist() == [aggregate]


def test_instances_with_thousands_separators(tmp_path: Path) -> None:
    head = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
        '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    )
    kernel = '"0","1","app","host","k()","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0"'
    rows = [
        f'{kernel},"Launch Statistics","Threads","thread","1,024 (4; 4; 1,016)"',
        f'{kernel},"Launch Statistics","Grid Size","","(8, 1, 1)"',
        f'{kernel},"Launch Statistics","Block Size","","256 (128;128)"',
        f'{kernel},"Launch Statistics","Function Cache Configuration","","CachePreferNone (0: CachePreferNone)"',
    ]
    path = tmp_path / "x.csv"
    path.write_text("\n".join([head, *rows]) + "\n")
    parsed = parse_ncu(path)
    m = parsed.metrics.set_index("metric_label")
    assert m.loc["Threads", "value"] == 1024.0 and m.loc["Threads", "value_text"] == "1,024"
    assert m.loc["Grid Size", "value_text"] == "(8, 1, 1)"  # not instances: no `; ` list
    assert m.loc["Function Cache Configuration", "value_text"] == "CachePreferNone"
    i = parsed.instances
    assert i[i.metric_label == "Threads"].value.tolist() == [4.0, 4.0, 1016.0]
    assert i[i.metric_label == "Block Size"].value_text.tolist() == ["128", "128"]
    assert i[i.metric_label == "Function Cache Configuration"].instance_key.tolist() == ["0"]


# --- section body text ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["details_all.csv", "details_body.csv", "combo_details_all_rules_base.csv"])
def test_section_body_text_is_kept_with_its_launch(name: str) -> None:
    lines = _text(name).split("\n")
    # free text: lines with an indent; the launch is that of the CSV row above
    expected_text = []
    launch = None
    for line in lines:
        if re.match(r'^"\d+","\d+",', line):
            launch = int(line.split('","')[0].strip('"'))
        elif line.startswith("    "):
            expected_text.append((launch, line.strip()))
    tables = [ln for ln in lines if ln.startswith('"GPU ID","GPU Name"')]
    rows = _csv(name)
    item_at = rows[0].index("Body Item Label")
    items = [r for r in rows[1:] if len(r) > item_at + 2 and r[item_at] and r[item_at + 1]]
    text = _parsed(name).section_text
    got_text = text[text.entry == "text"]
    assert sorted(zip(got_text.launch_id, got_text.text, strict=True)) == sorted(expected_text)
    got_tables = text[text.entry == "table"]
    assert len(got_tables) == len(tables) == 10
    # the CSV names no section for either; after_section says which rows they followed
    assert text[text.entry != "item"].section.isna().all()
    before_table = {"details_body.csv": "Instruction Statistics"}.get(name, "NUMA Affinity")
    assert set(got_tables.after_section) == {before_table}
    assert all(t.split("\n")[0] == tables[0] for t in got_tables.text)
    got_items = text[text.entry == "item"]
    assert len(got_items) == len(items)
    first = items[0]
    head = rows[0]
    row = got_items.iloc[0]
    assert (row.launch_id, row.section, row["item"], row.metric_label, row.text) == (
        int(first[0]),
        first[head.index("Section Name")],
        first[item_at],
        first[head.index("Metric Name")],
        first[head.index("Metric Value")],
    )
    # one seq per launch, in file order
    assert (text.groupby("launch_id").seq.apply(lambda s: list(s) == list(range(len(s))))).all()


def test_body_items_with_instances_keep_the_aggregate() -> None:
    text = _parsed("details_all.csv").section_text
    # `"Executed Instructions by SASS Opcode Category","","184 (72; 40; 24; 16; 16; 16)"`
    rows = _csv("details_all.csv")
    head = rows[0]
    label_at, value_at = head.index("Metric Name"), head.index("Metric Value")
    cell = next(
        r for r in rows[1:] if len(r) > value_at and r[label_at].startswith("Executed Instructions by SASS")
    )
    got = text[(text.launch_id == int(cell[0])) & (text.metric_label == cell[label_at])]
    assert got.value.tolist() == [float(cell[value_at].split(" (")[0])]
    assert got.text.tolist() == [cell[value_at]]


# --- truncation at a row boundary ----------------------------------------------------------------


def _cut(tmp_path: Path, name: str, keep_lines: int) -> Path:
    lines = _text(name).split("\n")
    path = tmp_path / name
    path.write_text("\n".join(lines[:keep_lines]) + "\n")
    return path


def _last_launch_lines(name: str) -> tuple[int, int]:
    """(first, last) 1-based line of the last launch's rows."""
    lines = _text(name).rstrip("\n").split("\n")
    last_id = lines[-1].split('","')[0]
    first = next(i for i, ln in enumerate(lines, 1) if ln.startswith(f'{last_id}","'))
    return first, len(lines)


@pytest.mark.parametrize("name", ["details_base.csv", "details_all.csv", "details_instances_details.csv"])
def test_details_cut_at_a_row_boundary_is_truncated(tmp_path: Path, name: str) -> None:
    first, last = _last_launch_lines(name)
    for keep in (first + 1, (first + last) // 2, last - 5):
        with pytest.raises(InputError, match="truncated"):
            parse_ncu(_cut(tmp_path, name, keep))


def test_summary_cut_at_a_row_boundary_is_truncated(tmp_path: Path) -> None:
    lines = _text("details_summary_per_kernel.csv").rstrip("\n").split("\n")
    with pytest.raises(InputError, match="truncated"):
        parse_ncu(_cut(tmp_path, "details_summary_per_kernel.csv", len(lines) - 10))


def test_raw_cut_inside_a_row_is_truncated(tmp_path: Path) -> None:
    text = _text("raw_base.csv")
    cut = text[: text.rindex('","', 0, len(text) - 1000) + 1]  # after a closing quote, mid-row
    path = tmp_path / "raw.csv"
    path.write_text(cut + "\n")
    with pytest.raises(InputError, match="truncated"):
        parse_ncu(path)


REAL_NCU = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "ncu"
CAPTURES = Path(__file__).parent / "data" / "ncu"


def _every_real_csv() -> list[Path]:
    files = sorted(CAPTURES.glob("*.csv"))
    if REAL_NCU.is_dir():
        files += sorted(
            p for p in REAL_NCU.rglob("*") if p.suffix in (".csv", ".txt") and "version" not in p.name
        )
    return files


@pytest.mark.parametrize("path", _every_real_csv(), ids=lambda p: p.name)
def test_no_real_file_looks_truncated(path: Path) -> None:
    parsed = parse_ncu(path)
    assert not parsed.kernels.empty


def test_real_exports_are_present_or_skipped() -> None:
    if not REAL_NCU.is_dir():
        pytest.skip(f"real data not available: {REAL_NCU} (tests expect ../shared/realdata beside the repo)")
    assert len(_every_real_csv()) > len(list(CAPTURES.glob("*.csv")))


def test_new_tables_reach_the_workspace_and_refusals_leave_it_unchanged(tmp_path: Path) -> None:
    import nsight_analytics as nsa

    con = nsa.connect(tmp_path / "w.duckdb")
    for name in ("details_all.csv", "raw_instances_details.csv"):
        nsa.ingest(con, VARIANTS / f"{name}.gz")
    for name in sorted(NOT_KERNEL_DATA):
        with pytest.raises(InputError):
            nsa.ingest(con, VARIANTS / f"{name}.gz")
    assert con.execute("SELECT count(*) FROM reports").fetchone() == (2,)
    all_text, raw = _parsed("details_all.csv"), _parsed("raw_instances_details.csv")
    stored = dict(
        con.execute(
            "SELECT 'text', count(*) FROM ncu_section_text UNION ALL "
            "SELECT 'instances', count(*) FROM ncu_metric_instances UNION ALL "
            "SELECT 'launches', count(DISTINCT (report_id, launch_id)) FROM ncu_kernels"
        ).fetchall()
    )
    assert stored == {
        "text": len(all_text.section_text),
        "instances": len(all_text.instances) + len(raw.instances),
        "launches": 2 * len(_launch_ids()),
    }
