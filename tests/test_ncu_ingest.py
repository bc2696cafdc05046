"""ncu CSV ingest: every real export parses to the numbers its file shows, bad files fail clearly.

Expected values are read by hand from the files (the grep in each comment shows where), never
copied from the parser's output.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest

from nsight_analytics import schema
from nsight_analytics.errors import InputError
from nsight_analytics.ingest.ncu.ncu import load_ncu, parse_ncu, sniff_ncu
from nsight_analytics.ingest.ncu.ncu_metric_names import LABEL_TO_NAME

REAL = Path(__file__).parents[1] / ".." / "shared" / "realdata"
NCU = REAL / "ncu"
needs_real = pytest.mark.skipif(
    not NCU.is_dir(), reason="real exports not present: ../shared/realdata/ncu (see its README)"
)

# (file, page, kernels, rule rows, [(launch_id, metric_name, value in base unit, base unit)])
# kernels: distinct IDs, `grep -ao '^"[0-9]*","[0-9]*"' FILE | sort -u | wc -l` (raw pages: minus
# the units row, whose ID is ""); rules: `grep -c ',"\(OPT\|INF\|WRN\|ERR\)",' FILE`.
CASES = [
    (
        "b200_ncu2025_full_with_rules_ragged.csv",
        "details",
        1,
        8,
        [
            (0, "gpu__time_duration.sum", 406240, "ns"),  # "Duration","ns","406240"
            (0, "dram__cycles_elapsed.avg.per_second", 3995313115.40, "hz"),  # "DRAM Frequency","hz"
            (0, "launch__registers_per_thread", 168, "register/thread"),  # "Registers Per Thread"
            (0, "sm__warps_active.avg.pct_of_peak_sustained_active", 15.53, "%"),  # Achieved Occupancy
        ],
    ),
    (
        "h100_ncu2025.3_details_base_units.csv",
        "details",
        4,
        44,
        [
            (0, "gpu__time_duration.sum", 13728, "ns"),  # "Duration","ns","13,728"
            (0, "dram__cycles_elapsed.avg.per_second", 2609790209.79, "hz"),  # "2,609,790,209.79"
            (0, "launch__persisting_l2_cache_size", 9830400, "byte"),  # "L2 Persisting Size","9,830,400"
            (0, "dram__bytes.sum.per_second", 4326340326.34, "byte/s"),  # MWA "Memory Throughput"
            (0, "sm__warps_active.avg.pct_of_peak_sustained_active", 50.50, "%"),
        ],
    ),
    (
        "h100_ncu2025.3_details_metric_names.csv",
        "details",
        4,
        44,
        [
            (0, "gpu__time_duration.sum", 13730, "ns"),  # "gpu__time_duration.sum","us","13.73"
            (0, "dram__cycles_elapsed.avg.per_second", 2.61e9, "hz"),  # "Ghz","2.61"
            (0, "launch__persisting_l2_cache_size", 9.83e6, "byte"),  # "Mbyte","9.83"
            (0, "dram__bytes.sum.per_second", 4.33e9, "byte/s"),  # "Gbyte/s","4.33"
            (0, "launch__registers_per_thread", 44, "register/thread"),
        ],
    ),
    (
        "h100_ncu2025.3_full_details_import.csv",
        "details",
        11,
        101,
        [
            (0, "gpu__time_duration.sum", 42850, "ns"),  # "Duration","us","42.85"
            (0, "dram__cycles_elapsed.avg.per_second", 2.62e9, "hz"),  # "DRAM Frequency","Ghz","2.62"
            (0, "gpc__cycles_elapsed.max", 84809, "cycle"),  # "Elapsed Cycles","cycle","84,809"
            (0, "dram__bytes.sum.per_second", 287.16e9, "byte/s"),  # "Gbyte/s","287.16"
            (0, "sm__throughput.avg.pct_of_peak_sustained_elapsed", 72.33, "%"),  # Compute (SM)
        ],
    ),
    (
        "h100_ncu2025.3_full_raw_import.csv",
        "raw",
        11,
        0,
        [
            # raw page, kernel ID 0 (line 3), column by name, unit from line 2
            (0, "gpu__time_duration.sum", 42848, "ns"),  # 'us' '42.848000'
            (0, "dram__cycles_elapsed.avg.per_second", 2.617177e9, "hz"),  # 'Ghz' '2.617177'
            (0, "launch__occupancy_limit_registers", 5, "block"),  # 'block' '5.000000'
            (0, "launch__persisting_l2_cache_size", 9830400, "byte"),  # 'Mbyte' '9.830400'
            (0, "dram__bytes.sum.per_second", 0.287158e12, "byte/s"),  # 'Tbyte/s' '0.287158'
            (0, "smsp__pcsamp_warps_issue_stalled_no_instructions", 73, "inst"),
        ],
    ),
    (
        "h100_ncu2025.3_live_csv_mixed_with_app_stdout.txt",
        "details",
        2,
        7,
        [
            (0, "gpu__time_duration.sum", 13728, "ns"),  # "Duration","ns","13,728"
            (0, "dram__cycles_elapsed.avg.per_second", 2613053613.05, "hz"),
            (0, "sm__warps_active.avg.pct_of_peak_sustained_active", 50.53, "%"),
        ],
    ),
    (
        "h100_ncu2025.3_metrics_only.csv",
        "details",
        1,
        0,
        [
            (0, "dram__bytes.sum", 10240, "byte"),  # "dram__bytes.sum","byte","10,240"
            (0, "gpu__time_duration.sum", 6560, "ns"),  # "ns","6,560"
            (0, "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct", 0.0, "%"),
        ],
    ),
    (
        "h100_ncu2025.3_transformer_train_details.csv",
        "details",
        60,
        762,
        [
            (0, "gpu__time_duration.sum", 3072, "ns"),  # "Duration","ns","3,072"
            (0, "dram__cycles_elapsed.avg.per_second", 2583333333.33, "hz"),
            (0, "dram__bytes.sum.per_second", 343e9, "byte/s"),  # "343,000,000,000"
            (0, "launch__registers_per_thread", 32, "register/thread"),
        ],
    ),
    (
        "h100_ncu2025.3_transformer_train_raw.csv",
        "raw",
        60,
        0,
        [
            (0, "gpu__time_duration.sum", 3072, "ns"),  # 'ns' '3,072'
            (0, "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", 36.46, "inst"),
            (0, "launch__occupancy_limit_registers", 16, "block"),
            (0, "launch__thread_count", 32768, "thread"),  # 'thread' '32,768'
        ],
    ),
    (
        "sm86_ncu2023_metrics_en_us_separators.csv",
        "details",
        9,
        0,
        [
            (0, "dram__bytes.sum", 32746880, "byte"),  # "32,746,880"
            (0, "gpu__time_duration.sum", 10776576, "ns"),  # "nsecond","10,776,576"
            (8, "sm__sass_thread_inst_executed_op_ffma_pred_on.sum", 1094713344, "inst"),
            (8, "gpu__time_duration.sum", 148896, "ns"),  # "nsecond","148,896"
        ],
    ),
    (
        "rtx5070_windows_ncu2026.2/saxpy.csv",
        "details",
        1,
        0,
        [
            (0, "dram__bytes_op_read.sum", 134221568, "byte"),  # "134,221,568"
            (0, "gpu__time_duration.sum", 292928, "ns"),  # "292,928"
            (0, "sm__throughput.avg.pct_of_peak_sustained_elapsed", 22.30, "%"),
        ],
    ),
    (
        "rtx5070_windows_ncu2026.2/gemm_tiled.csv",
        "details",
        1,
        0,
        [
            (0, "gpu__time_duration.sum", 10195552, "ns"),  # "10,195,552"
            (0, "dram__bytes_op_write.sum", 3377920, "byte"),  # "3,377,920"
            (0, "lts__t_sector_hit_rate.pct", 87.50, "%"),
        ],
    ),
    (
        "rtx5070_windows_ncu2026.2/transpose_naive.csv",
        "details",
        1,
        0,
        [
            (0, "gpu__time_duration.sum", 163072, "ns"),  # "163,072"
            (0, "dram__bytes_op_read.sum", 19001600, "byte"),  # "19,001,600"
            (0, "sm__throughput.avg.pct_of_peak_sustained_elapsed", 6.40, "%"),
        ],
    ),
]


def _value(parsed, launch_id: int, metric_name: str) -> tuple[float, str]:
    m = parsed.metrics
    hit = m[(m.launch_id == launch_id) & (m.metric_name == metric_name)]
    assert len(hit) == 1, f"{metric_name}: {len(hit)} rows"
    return float(hit.value.iloc[0]), hit.unit.iloc[0]


@needs_real
@pytest.mark.parametrize(("name", "page", "n_kernels", "n_rules", "values"), CASES, ids=[c[0] for c in CASES])
def test_real_exports_parse_to_base_units(name, page, n_kernels, n_rules, values) -> None:
    path = NCU / name
    assert sniff_ncu(path)
    parsed = parse_ncu(path)
    assert parsed.page == page
    assert len(parsed.kernels) == n_kernels
    assert parsed.kernels.launch_id.is_unique
    assert len(parsed.rules) == n_rules
    for launch_id, metric, expected, unit in values:
        value, got_unit = _value(parsed, launch_id, metric)
        assert got_unit == unit, metric
        assert value == pytest.approx(expected, rel=1e-9), metric


def test_every_real_ncu_file_is_covered() -> None:
    if not NCU.is_dir():
        pytest.skip("real exports not present: ../shared/realdata/ncu")
    files = {str(p.relative_to(NCU)) for p in NCU.rglob("*") if p.suffix in (".csv", ".txt")}
    assert files - {c[0] for c in CASES} == {"rtx5070_windows_ncu2026.2/ncu_version.txt"}


@needs_real
def test_frames_have_canonical_columns_and_kernel_fields() -> None:
    parsed = parse_ncu(NCU / "b200_ncu2025_full_with_rules_ragged.csv")
    for table, frame in (
        ("ncu_kernels", parsed.kernels),
        ("ncu_metrics", parsed.metrics),
        ("ncu_rules", parsed.rules),
    ):
        assert list(frame.columns) == [c for c in schema.BY_NAME[table].col_names if c != "report_id"]
    k = parsed.kernels.iloc[0]
    # line 4: "0","371693","cublaslt_gemm","127.0.0.1","cutlass3x_sm100_...","1","7","(384, 1, 1)","(9, 32, 1)","0","10.0"
    assert (k.launch_id, k.pid, k.process_name, k.host_name) == (0, 371693, "cublaslt_gemm", "127.0.0.1")
    assert (k.context_id, k.stream_id, k.block, k.grid, k.device_id, k.cc) == (
        1,
        7,
        "(384, 1, 1)",
        "(9, 32, 1)",
        0,
        "10.0",
    )
    assert k["name"].startswith("cutlass3x_sm100_tensorop_s64x256x32gemm")
    rule = parsed.rules[parsed.rules.est_speedup_type == "local"].iloc[0]
    # "Occupancy" rule row: ...,"OPT","The 3.00 theoretical warps per ...","local","81.25"
    assert (rule.section, rule.rule_type, rule.est_speedup) == ("Occupancy", "OPT", 81.25)
    assert rule.description.startswith("The 3.00 theoretical warps per")


@needs_real
def test_labels_get_names_and_names_get_labels() -> None:
    labels = parse_ncu(NCU / "h100_ncu2025.3_details_base_units.csv").metrics
    names = parse_ncu(NCU / "h100_ncu2025.3_details_metric_names.csv").metrics
    # the same kernels printed with labels and with names: every row resolves to the same pair
    assert labels.metric_name.notna().all()
    assert list(labels.metric_name) == list(names.metric_name)
    assert list(labels.metric_label) == list(names.metric_label)
    row = labels[
        (labels.launch_id == 0) & (labels.metric_name == "sm__throughput.avg.pct_of_peak_sustained_elapsed")
    ]
    assert row.metric_label.iloc[0] == "Compute (SM) Throughput"
    # base units and auto-scaled units agree to the auto-scaled file's rounding
    both = labels.assign(auto=names.value.to_numpy()).dropna(subset=["value", "auto"])
    assert ((both.value - both.auto).abs() <= both.value.abs() * 5e-3 + 0.01).all()


@needs_real
def test_non_numeric_values_keep_their_text() -> None:
    m = parse_ncu(NCU / "h100_ncu2025.3_full_raw_import.csv").metrics
    row = m[(m.launch_id == 0) & (m.metric_name == "launch__func_cache_config")]
    assert row.value.isna().all() and list(row.value_text) == ["CachePreferNone"]
    assert list(row.metric_label) == ["Function Cache Configuration"]


@needs_real
def test_load_ncu_inserts_into_the_open_transaction() -> None:
    con = duckdb.connect()
    for t in schema.TABLES:
        con.execute(t.ddl())
    con.execute("BEGIN TRANSACTION")
    info = load_ncu(con, NCU / "h100_ncu2025.3_full_details_import.csv", 7)
    assert info == {
        "tool_version": None,
        "kernels": 11,
        "metrics": info["metrics"],
        "rules": 101,
        "activity_kinds": ["ncu_metrics", "ncu_rules"],
    }
    assert (
        con.execute("SELECT count(*) FROM ncu_metrics WHERE report_id = 7").fetchone()[0] == info["metrics"]
    )
    assert (
        con.execute("SELECT count(DISTINCT launch_id) FROM ncu_kernels WHERE report_id = 7").fetchone()[0]
        == 11
    )
    con.execute("ROLLBACK")
    assert con.execute("SELECT count(*) FROM ncu_kernels").fetchone()[0] == 0


@needs_real
def test_not_ncu_files_are_not_sniffed() -> None:
    assert not sniff_ncu(NCU / "rtx5070_windows_ncu2026.2" / "ncu_version.txt")
    assert not sniff_ncu(REAL / "nsys" / "tiny_nsys2026.1.sqlite")


# --- real captures kept in the repo: tests/data/ncu (ncu 2025.3.1 on an H100, made by
# fixtures/captures/ncu_app.py; see ncu_version.txt) -------------------------------------------

DATA = Path(__file__).parent / "data" / "ncu"
SUMMARY_KERNEL = DATA / "h100_ncu2025.3_summary_per_kernel.csv"
SUMMARY_GPU = DATA / "h100_ncu2025.3_summary_per_gpu.csv"
LABEL_NAME = DATA / "h100_ncu2025.3_label_name.csv"
MULTI_PROCESS = DATA / "h100_ncu2025.3_multi_process.csv"

# Same table as CASES. Summaries: one kernel per group of rows, counted with
# `grep -c '"Duration"' FILE` (one Duration row per kernel); launch_id is the group's index in
# file order, so 2 is the third kernel, the one with "Invocations" "3".
DATA_CASES = [
    (
        SUMMARY_KERNEL.name,
        "summary",
        3,
        0,
        [
            (0, "gpu__time_duration.sum", 17664, "ns"),  # "Duration","ns","17,664.00" x3
            (0, "dram__cycles_elapsed.avg.per_second", 2615217391.30, "hz"),  # "2,615,217,391.30"
            (2, "gpu__time_duration.sum", 3061.33, "ns"),  # Average of "3,040.00","3,104.00","3,061.33"
            (2, "dram__cycles_elapsed.avg.per_second", 2580524507.14, "hz"),  # Average
            (2, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", 12.16, "%"),
        ],
    ),
    (
        SUMMARY_GPU.name,
        "summary",
        3,
        0,
        [
            (0, "gpu__time_duration.sum", 17060, "ns"),  # "Duration","us","17.06"
            (0, "dram__cycles_elapsed.avg.per_second", 2.61e9, "hz"),  # "DRAM Frequency","Ghz","2.61"
            (1, "gpc__cycles_elapsed.max", 6422, "cycle"),  # "Elapsed Cycles","cycle","6,422.00"
            (2, "gpu__time_duration.sum", 3010, "ns"),  # "us","2.98","3.04","3.01": the Average
            (2, "dram__cycles_elapsed.avg.per_second", 2.60e9, "hz"),  # "Ghz","2.58","2.61","2.60"
        ],
    ),
    (
        LABEL_NAME.name,
        "details",
        2,
        5,
        [
            (0, "gpu__time_duration.sum", 4000, "ns"),  # "Duration (gpu__time_duration.sum)","ns","4,000"
            (0, "dram__cycles_elapsed.avg.per_second", 2595200000.00, "hz"),  # "2,595,200,000.00"
            (1, "sm__warps_active.avg.pct_of_peak_sustained_active", 6.03, "%"),  # Achieved Occupancy
        ],
    ),
    (
        MULTI_PROCESS.name,
        "details",
        15,
        15,
        [
            (0, "gpu__time_duration.sum", 4032, "ns"),  # ID 0, pid 621: "Duration","ns","4,032"
            (9, "gpu__time_duration.sum", 18080, "ns"),  # ID 9, pid 699: "18,080"
            (14, "gpu__time_duration.sum", 17952, "ns"),  # ID 14, pid 773: "17,952"
        ],
    ),
]


@pytest.mark.parametrize(
    ("name", "page", "n_kernels", "n_rules", "values"), DATA_CASES, ids=[c[0] for c in DATA_CASES]
)
def test_repo_captures_parse_to_base_units(name, page, n_kernels, n_rules, values) -> None:
    path = DATA / name
    assert sniff_ncu(path)
    parsed = parse_ncu(path)
    assert parsed.page == page
    assert len(parsed.kernels) == n_kernels
    assert list(parsed.kernels.launch_id) == list(range(n_kernels))
    assert len(parsed.rules) == n_rules
    for launch_id, metric, expected, unit in values:
        value, got_unit = _value(parsed, launch_id, metric)
        assert got_unit == unit, metric
        assert value == pytest.approx(expected, rel=1e-9), metric


def test_every_repo_ncu_capture_is_covered() -> None:
    files = {p.name for p in DATA.glob("*") if p.suffix in (".csv", ".txt")}
    assert files - {c[0] for c in DATA_CASES} == {"ncu_version.txt"}
    assert not sniff_ncu(DATA / "ncu_version.txt")


@pytest.mark.parametrize("path", [SUMMARY_KERNEL, SUMMARY_GPU], ids=["per-kernel", "per-gpu"])
def test_summary_kernels_carry_invocations(path: Path) -> None:
    parsed = parse_ncu(path)
    k = parsed.kernels
    assert list(k.columns) == [c for c in schema.BY_NAME["ncu_kernels"].col_names if c != "report_id"]
    # grep -o '"([0-9, ]*)","([0-9, ]*)","[0-9]*","GPU Speed Of Light Throughput","Duration"' FILE:
    # "(512, 1, 1)","(1, 1, 1)","1"; "(256, 1, 1)","(256, 1, 1)","1"; "(128, 1, 1)","(64, 1, 1)","3"
    # (Block Size, Grid Size, Invocations); the two files differ only in column order and units.
    assert list(k.invocations) == [1, 1, 3]
    assert list(k.block) == ["(512, 1, 1)", "(256, 1, 1)", "(128, 1, 1)"]
    assert list(k.grid) == ["(1, 1, 1)", "(256, 1, 1)", "(64, 1, 1)"]
    assert k["name"].str.startswith("void reduce_kernel<512, 1, ReduceOp<float").iloc[0]
    assert k["name"].str.startswith("void vectorized_elementwise_kernel<4, AUnaryFunctor").iloc[2]
    # "Device","CC" are "0","9.0" on every row; no Context / Stream columns in a summary
    assert set(k.device_id) == {0} and set(k.cc) == {"9.0"}
    assert k.context_id.isna().all() and k.stream_id.isna().all()
    # 10 metrics per kernel: `grep -c '"GPU Speed Of Light Throughput"' FILE` = 30
    assert len(parsed.metrics) == 30 and parsed.metrics.groupby("launch_id").size().tolist() == [10, 10, 10]
    assert parsed.metrics.metric_name.notna().all()
    assert parsed.rules.empty


def test_summary_min_max_average_in_base_units() -> None:
    # per-kernel, third kernel (Invocations "3"):
    # "Duration","ns","3,040.00","3,104.00","3,061.33" (Minimum, Maximum, Average)
    # "SM Frequency","hz","1,563,651,315.79","1,568,297,697.37","1,565,541,208.85"
    m = parse_ncu(SUMMARY_KERNEL).metrics
    row = m[(m.launch_id == 2) & (m.metric_name == "gpu__time_duration.sum")].iloc[0]
    assert (row.value_min, row.value_max, row.value) == pytest.approx((3040, 3104, 3061.33))
    assert row.value_text == "3,061.33" and row.metric_label == "Duration"
    row = m[(m.launch_id == 2) & (m.metric_name == "gpc__cycles_elapsed.avg.per_second")].iloc[0]
    assert (row.value_min, row.value_max, row.value) == pytest.approx(
        (1563651315.79, 1568297697.37, 1565541208.85)
    )
    # per-gpu, auto units: "DRAM Frequency","Ghz","2.58","2.61","2.60"; "Duration","us","2.98","3.04","3.01"
    g = parse_ncu(SUMMARY_GPU).metrics
    row = g[(g.launch_id == 2) & (g.metric_name == "dram__cycles_elapsed.avg.per_second")].iloc[0]
    assert row.unit == "hz"
    assert (row.value_min, row.value_max, row.value) == pytest.approx((2.58e9, 2.61e9, 2.60e9))
    row = g[(g.launch_id == 2) & (g.metric_name == "gpu__time_duration.sum")].iloc[0]
    assert (row.unit, row.value_text) == ("ns", "3.01")
    assert (row.value_min, row.value_max, row.value) == pytest.approx((2980, 3040, 3010))
    # single-invocation kernels: Minimum = Maximum = Average, "Elapsed Cycles","cycle","6,422.00" x3
    row = g[(g.launch_id == 1) & (g.metric_name == "gpc__cycles_elapsed.max")].iloc[0]
    assert row.value_min == row.value_max == row.value == 6422


def test_per_launch_exports_leave_summary_columns_null() -> None:
    parsed = parse_ncu(MULTI_PROCESS)
    assert parsed.kernels.invocations.isna().all()
    assert parsed.metrics.value_min.isna().all() and parsed.metrics.value_max.isna().all()


def test_label_name_cells_split_into_name_and_label() -> None:
    m = parse_ncu(LABEL_NAME).metrics
    # `grep -o '"[^"]* ([a-z][a-z0-9_]*__[^"]*)"' FILE | sort | uniq -c`: 23 distinct
    # "Label (name)" cells, each on both kernels; every metric row of the file is one of them
    assert len(m) == 46 and m.metric_name.nunique() == 23
    pairs = set(zip(m.metric_label, m.metric_name, strict=True))
    assert ("DRAM Frequency", "dram__cycles_elapsed.avg.per_second") in pairs
    assert ("Compute (SM) Throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed") in pairs
    assert ("L1/TEX Cache Throughput", "l1tex__throughput.avg.pct_of_peak_sustained_active") in pairs
    assert ("Theoretical Occupancy", "sm__maximum_warps_per_active_cycle_pct") in pairs
    assert ("Overall GPU Occupancy", "launch__occupancy_cluster_gpu_pct") in pairs
    assert not m.metric_label.str.contains(r"__|\(\w+\)$").any()
    # the pairs ncu printed agree with the label -> name table used for labels-only exports
    for section, label, name in zip(m.section, m.metric_label, m.metric_name, strict=True):
        if (section, label) in LABEL_TO_NAME:
            assert LABEL_TO_NAME[(section, label)] == name, (section, label)


def test_one_csv_from_three_processes() -> None:
    k = parse_ncu(MULTI_PROCESS).kernels
    # `grep -ao '^"[0-9]*","[0-9]*"' FILE | sort -u | cut -d, -f2 | sort | uniq -c`:
    # 5 "621" (the parent), 5 "699", 5 "773" (its two children); IDs 0-14 run on across processes
    assert k.groupby("pid").size().to_dict() == {621: 5, 699: 5, 773: 5}
    assert list(k.launch_id) == list(range(15))
    assert list(k.pid.iloc[[0, 4, 5, 9, 10, 14]]) == [621, 621, 699, 699, 773, 773]


# --- synthetic files: failure modes and layouts the real set lacks ----------------------------

HEADER20 = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value",'
    '"Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"'
)


def _row(launch: int, pid: int, label: str, unit: str, value: str, kernel: str = "k(int)") -> str:
    return (
        f'"{launch}","{pid}","app","host","{kernel}","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0",'
        f'"GPU Speed Of Light Throughput","{label}","{unit}","{value}",'
    )


def _write(tmp_path: Path, text: str, name: str = "x.csv", encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


def test_failure_log_errors_with_ncus_message(tmp_path: Path) -> None:
    log = (
        "==PROF== Connected to process 4242 (/usr/bin/python3.12)\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
        "Performance Counters on the target device 0.\n"
        "==PROF== Disconnected from process 4242\n"
    )
    path = _write(tmp_path, log, "ncu.log")
    assert sniff_ncu(path)
    with pytest.raises(InputError, match="ERR_NVGPUCTRPERM"):
        parse_ncu(path)


def test_log_without_csv_or_error_says_no_kernel(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "app output\n==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n"
    )
    with pytest.raises(InputError, match="no CSV"):
        parse_ncu(path)


def test_empty_file_errors(tmp_path: Path) -> None:
    for text in ("", "\ufeff\r\n"):
        with pytest.raises(InputError, match="empty"):
            parse_ncu(_write(tmp_path, text))


def test_other_csv_is_not_ncu(tmp_path: Path) -> None:
    path = _write(tmp_path, "name,value\nx,1\n")
    assert not sniff_ncu(path)
    with pytest.raises(InputError, match="not an ncu CSV"):
        parse_ncu(path)


@needs_real
@pytest.mark.parametrize(
    "name", ["h100_ncu2025.3_full_details_import.csv", "h100_ncu2025.3_transformer_train_raw.csv"]
)
def test_truncated_csv_errors(tmp_path: Path, name: str) -> None:
    data = (NCU / name).read_bytes()
    mid_quote = data[: len(data) // 2]
    cut = mid_quote[: mid_quote.rindex(b'",') + 1]  # right after a closing quote: a short row
    for part in (mid_quote, cut):
        with pytest.raises(InputError, match="truncated"):
            parse_ncu(_write(tmp_path, part.decode("utf-8", "ignore"), name))


def test_short_row_in_the_middle_is_an_error(tmp_path: Path) -> None:
    text = "\n".join(
        [HEADER20, _row(0, 1, "Duration", "ns", "5"), '"0","1","app"', _row(0, 1, "SM Frequency", "hz", "1")]
    )
    with pytest.raises(InputError, match="line 3"):
        parse_ncu(_write(tmp_path, text + "\n"))


def test_bom_crlf_and_preamble_parse_like_plain(tmp_path: Path) -> None:
    lines = [HEADER20, _row(0, 1, "Duration", "us", "1,234.5"), _row(0, 1, "DRAM Frequency", "Ghz", "2.6")]
    plain = parse_ncu(_write(tmp_path, "\n".join(lines) + "\n", "a.csv"))
    windows = "==PROF== Connected to process 1 (C:\\app.exe)\r\napp says hi\r\n" + "\r\n".join(lines) + "\r\n"
    bom = parse_ncu(_write(tmp_path, "\ufeff" + windows, "b.csv"))
    assert plain.metrics.equals(bom.metrics) and plain.kernels.equals(bom.kernels)
    assert list(bom.metrics.value) == [1234500.0, 2.6e9]
    assert list(bom.metrics.metric_name) == ["gpu__time_duration.sum", "dram__cycles_elapsed.avg.per_second"]


def test_2019_layout_with_kernel_time(tmp_path: Path) -> None:
    head = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context",'
        '"Stream","Section Name","Metric Name","Metric Unit","Metric Value"'
    )
    row = '"3","99","a.out","h","vecAdd","2019-Dec-03 10:11:12","1","7","GPU Speed Of Light","Duration","usecond","5.50"'
    parsed = parse_ncu(_write(tmp_path, f"{head}\n{row}\n"))
    k = parsed.kernels.iloc[0]
    assert (k.launch_id, k.pid, k["name"]) == (3, 99, "vecAdd")
    assert k.grid is None and k.cc is None and pd.isna(k.device_id)
    m = parsed.metrics.iloc[0]
    assert (m.metric_name, m.unit, m.value, m.value_text) == ("gpu__time_duration.sum", "ns", 5500.0, "5.50")


def test_label_name_and_na_cells(tmp_path: Path) -> None:
    text = "\n".join(
        [
            HEADER20,
            _row(0, 1, "Duration (gpu__time_duration.sum)", "ns", "7"),
            _row(0, 1, "Some New Label", "", "n/a"),
            _row(0, 1, "Memory Throughput", "Mbyte/s", "1.5"),
        ]
    )
    m = parse_ncu(_write(tmp_path, text + "\n")).metrics
    assert list(m.metric_name) == [
        "gpu__time_duration.sum",
        None,
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ]
    assert list(m.metric_label) == ["Duration", "Some New Label", "Memory Throughput"]
    assert m.value.iloc[1] != m.value.iloc[1] and m.unit.iloc[1] is None and m.value_text.iloc[1] == "n/a"
    assert (m.unit.iloc[2], m.value.iloc[2]) == ("byte/s", 1.5e6)


def test_several_processes_with_restarting_ids_get_distinct_launches(tmp_path: Path) -> None:
    text = "\n".join(
        [
            HEADER20,
            _row(0, 10, "Duration", "ns", "1", "a()"),
            _row(1, 10, "Duration", "ns", "2", "b()"),
            "==PROF== Disconnected from process 10",
            HEADER20,
            _row(0, 11, "Duration", "ns", "3", "c()"),
        ]
    )
    parsed = parse_ncu(_write(tmp_path, text + "\n"))
    assert list(parsed.kernels.launch_id) == [0, 1, 2]
    assert list(parsed.kernels.pid) == [10, 10, 11]
    joined = parsed.metrics.merge(parsed.kernels, on="launch_id")
    assert dict(zip(joined["name"], joined.value, strict=True)) == {"a()": 1.0, "b()": 2.0, "c()": 3.0}


def test_tool_version_from_a_banner(tmp_path: Path) -> None:
    text = (
        "NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2026 NVIDIA Corporation\n"
        "Version 2026.2.1.0 (build 38283040) (public-release)\n"
        + HEADER20
        + "\n"
        + _row(0, 1, "Duration", "ns", "1")
    )
    assert parse_ncu(_write(tmp_path, text + "\n")).tool_version == "2026.2.1.0"
    assert (
        parse_ncu(_write(tmp_path, HEADER20 + "\n" + _row(0, 1, "Duration", "ns", "1") + "\n")).tool_version
        is None
    )


def test_unit_conversions(tmp_path: Path) -> None:
    cases = {
        "msecond": (2, 2e6, "ns"),
        "Kbyte/block": (1.02, 1020, "byte/block"),
        "cycle/nsecond": (1.5, 1.5e9, "hz"),
        "sector/us": (3, 3e6, "sector/s"),
        "%/Kbyte": (4, 4e-3, "%/byte"),
        "inst/cycle": (0.5, 0.5, "inst/cycle"),
        "Tbyte/s": (1.2, 1.2e12, "byte/s"),
    }
    rows = [_row(0, 1, f"m{i}", unit, str(v)) for i, (unit, (v, _, _)) in enumerate(cases.items())]
    m = parse_ncu(_write(tmp_path, HEADER20 + "\n" + "\n".join(rows) + "\n")).metrics
    for (unit, (_, value, base)), got_value, got_unit in zip(cases.items(), m.value, m.unit, strict=True):
        assert got_unit == base, unit
        assert got_value == pytest.approx(value), unit


SUMMARY_HEAD = (
    '"Process ID","Process Name","Host Name","Kernel Name","Block Size","Grid Size","Device","CC",'
    '"Invocations","Section Name","Metric Name","Metric Unit","Minimum","Maximum","Average"'
)


def _summary_row(kernel: str, invocations: int, label: str, unit: str, lo: str, hi: str, avg: str) -> str:
    return (
        f'"7","app","host","{kernel}","(256, 1, 1)","(8, 1, 1)","0","9.0","{invocations}",'
        f'"GPU Speed Of Light Throughput","{label}","{unit}","{lo}","{hi}","{avg}"'
    )


def test_summary_groups_split_where_the_kernel_or_a_repeated_metric_says(tmp_path: Path) -> None:
    rows = [
        _summary_row("a()", 2, "Duration", "us", "1", "3", "2"),
        _summary_row("a()", 2, "SM Frequency", "Ghz", "1.5", "1.6", "1.55"),
        _summary_row("b()", 1, "Duration", "ns", "5", "5", "5"),
        # same kernel columns as the group before, but Duration again: a new kernel group
        _summary_row("b()", 1, "Duration", "ns", "7", "7", "7"),
    ]
    path = _write(tmp_path, "\n".join([SUMMARY_HEAD, *rows]) + "\n")
    assert sniff_ncu(path)  # no ==PROF== lines needed
    parsed = parse_ncu(path)
    assert parsed.page == "summary"
    assert list(parsed.kernels.launch_id) == [0, 1, 2]
    assert list(parsed.kernels["name"]) == ["a()", "b()", "b()"]
    assert list(parsed.kernels.invocations) == [2, 1, 1]
    m = parsed.metrics
    assert list(m.launch_id) == [0, 0, 1, 2]
    assert list(m.value) == [2000.0, 1.55e9, 5.0, 7.0]
    assert list(m.value_min) == [1000.0, 1.5e9, 5.0, 7.0]
    assert list(m.value_max) == [3000.0, 1.6e9, 5.0, 7.0]


def test_summary_truncated_and_mixed_files_error(tmp_path: Path) -> None:
    full = _summary_row("a()", 2, "Duration", "us", "1", "3", "2")
    cut = full[: full.rindex('","') + 1]  # the Average cell missing
    with pytest.raises(InputError, match="truncated"):
        parse_ncu(_write(tmp_path, f"{SUMMARY_HEAD}\n{full}\n{cut}\n"))
    with pytest.raises(InputError, match="line 2 has 14 fields"):
        parse_ncu(_write(tmp_path, f"{SUMMARY_HEAD}\n{cut}\n{full}\n"))
    mixed = "\n".join([HEADER20, _row(0, 1, "Duration", "ns", "5"), SUMMARY_HEAD, full]) + "\n"
    with pytest.raises(InputError, match="mixes ncu's details and summary"):
        parse_ncu(_write(tmp_path, mixed))
    with pytest.raises(InputError, match="no kernel rows"):
        parse_ncu(_write(tmp_path, SUMMARY_HEAD + "\n"))


def test_unknown_ncu_layout_is_named_not_called_a_log(tmp_path: Path) -> None:
    text = (
        "==PROF== Connected to process 1 (/usr/bin/app)\n"
        '"Range Name","Kernel Name","Metric Name","Metric Value"\n"r","k()","Duration","5"\n'
    )
    path = _write(tmp_path, text)
    assert sniff_ncu(path)
    with pytest.raises(InputError, match='layout nsa does not know.*"Range Name"'):
        parse_ncu(path)


def test_load_ncu_writes_summary_columns() -> None:
    con = duckdb.connect()
    for t in schema.TABLES:
        con.execute(t.ddl())
    info = load_ncu(con, SUMMARY_GPU, 3)
    assert (info["kernels"], info["metrics"], info["rules"]) == (3, 30, 0)
    assert info["activity_kinds"] == ["ncu_metrics"]
    got = con.execute("SELECT launch_id, invocations FROM ncu_kernels ORDER BY launch_id").fetchall()
    assert got == [(0, 1), (1, 1), (2, 3)]
    # "Memory Throughput","%","12.24","12.30","12.26" (third kernel)
    got = con.execute(
        "SELECT value_min, value, value_max FROM ncu_metrics WHERE launch_id = 2 "
        "AND metric_name = 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed'"
    ).fetchall()
    assert got == [(12.24, 12.26, 12.30)]


def test_every_ncu_page_is_sniffed_from_its_content(tmp_path: Path) -> None:
    nvtx_header = (
        '"ID","Process ID","Process Name","Host Name","thread Domain:Push/Pop_Range:PL_Type:PL_Value:'
        'CLR_Type:Color:Msg_Type:Msg","Kernel Name","Context","Stream","Section Name","Metric Name",'
        '"Metric Unit","Metric Value"\n'
    )
    heads = {
        "nvtx": nvtx_header,
        "per_nvtx": '"Domain","Range:PL_Type:PL_Value","Kernel Name","Block Size","Invocations"\n',
        "source_sass": '"Kernel Name","k()",\n"Address","Source","Warp Stall Sampling (All Samples)"\n',
        "source_cuda": '"File Path","/a.cu"\n"Function Name","k()"\n"Line No","Source","Address","Source"\n',
        "session": 'Launch Settings\n"Launch Attribute","Value"\n"Profiler Command Line","ncu"\n',
    }
    for name, head in heads.items():
        assert sniff_ncu(_write(tmp_path, head, f"{name}.csv")), name
    for other in ('"Kernel Name","k()"\n"Duration","5"\n', '"Attribute","Value"\n"a","b"\n'):
        assert not sniff_ncu(_write(tmp_path, other, "other.csv"))
