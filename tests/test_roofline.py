"""The roofline query and the roofline-headroom rule on real `ncu --set full` exports.

Expected numbers are computed here, independently of nsa: the raw CSVs are read with the csv
module (row 1 names, row 2 units) and put through the formulas of ncu's roofline section files
(docs/roofline.md); and they are checked against what ncu itself wrote for the same launches:
the sections' `derived__*` metrics, the tensor paths' own `.per_second` / `.pct_of_peak` values,
dram__bytes_read/write, the throughput percentages of the Speed Of Light and Memory sections,
and the SOLFPRoofline rule text of the details export of the same report.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from conftest import ROOT, realdata
from nsight_analytics.rules import run_rules
from rows import insert

VARIANTS = ROOT / "tests" / "data" / "ncu" / "variants"
# (where, raw export, details export of the same report)
PAIRS = [
    ("variants", "raw_base.csv.gz", "details_base.csv.gz"),
    ("variants", "adam_raw_base.csv.gz", "adam_details_base.csv.gz"),
    ("variants", "hot_raw_base.csv.gz", "hot_details_base.csv.gz"),
    ("realdata", "h100_ncu2025.3_full_raw_import.csv", "h100_ncu2025.3_full_details_import.csv"),
    ("realdata", "h100_ncu2025.3_transformer_train_raw.csv", "h100_ncu2025.3_transformer_train_details.csv"),
]
RAWS = [raw for _, raw, _ in PAIRS]
B200 = "b200_ncu2025_full_with_rules_ragged.csv"
TRAIN_NSYS = "h100_nsys2025.3_transformer_train.sqlite"
MUL = (  # the optimizer's `mul_` kernel, as ncu names it
    "void vectorized_elementwise_kernel<4, AUnaryFunctor<float, float, float, "
    "binary_internal::MulFunctor<float>>, array<char *, 2>>(int, T2, T3)"
)
LEVELS = ("dram", "l2", "l1")


def _path(where: str, name: str) -> Path:
    return VARIANTS / name if where == "variants" else realdata("ncu", name)


def _where(name: str) -> str:
    return next((w for w, raw, details in PAIRS if name in (raw, details)), "realdata")


# --- the raw CSV, read independently -------------------------------------------------------

_PREFIX = {"K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9}


def _number(text: str, unit: str) -> float | None:
    """A raw-page cell in base units (ns, byte, hz): `1,280` (en_US), `1.28` with `Kbyte/cycle`."""
    try:
        x = float(text.replace(",", ""))
    except ValueError:
        return None
    if unit in _TIME:
        return x * _TIME[unit]
    m = re.match(r"([KkMGTP])(byte|hz)", unit)
    return x * _PREFIX[m[1]] if m else x


def raw_launches(path: Path) -> dict[int, dict[str, float | None]]:
    """{launch id: {metric name: value in base units}} from an `ncu --page raw --csv` export."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:
        lines = fh.read().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    rows = list(csv.reader(io.StringIO("".join(lines[start:]))))
    names, units = rows[0], rows[1]
    out = {}
    for row in rows[2:]:
        values = {n: _number(v, u) for n, u, v in zip(names, units, row, strict=True)}
        values["Kernel Name"] = row[names.index("Kernel Name")]  # type: ignore[assignment]
        out[int(row[0])] = values
    return out


def _get(m: dict, name: str) -> float:
    v = m.get(name)
    return 0.0 if v is None else v


def expected_roofline(m: dict) -> dict[tuple[str | None, str | None], dict[str, float | str | None]]:
    """{(precision, tensor path): row} for one launch, from the section files' formulas."""
    sm_hz, smsp_hz = m["sm__cycles_elapsed.avg.per_second"], m["smsp__cycles_elapsed.avg.per_second"]
    inst = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum.per_cycle_elapsed"
    peak = "sm__sass_thread_inst_executed_op_{}_pred_on.sum.peak_sustained"
    work: dict[tuple[str | None, str | None], tuple[float, float]] = {}
    for prec, p in (("fp64", "d"), ("fp32", "f")):
        add, mul, fma = (_get(m, inst.format(p + op)) for op in ("add", "mul", "fma"))
        if add + mul + fma > 0:  # SpeedOfLight_RooflineChart: add + mul + 2 x fma per cycle
            work[(prec, None)] = ((add + mul + 2 * fma) * smsp_hz, 2 * m[peak.format(p + "fma")] * sm_hz)
    hadd, hmul, hfma = (_get(m, inst.format(op)) for op in ("hadd", "hmul", "hfma"))
    if hadd + hmul + hfma > 0:  # HierarchicalHalfRooflineChart: half2 counts twice
        work[("fp16", None)] = (
            (2 * hadd + 2 * hmul + 4 * hfma) * smsp_hz,
            4 * m[peak.format("hfma")] * sm_hz,
        )
    paths = {
        k.removeprefix("sm__ops_path_tensor_").removesuffix(".sum.per_cycle_elapsed")
        for k in m
        if k.startswith("sm__ops_path_tensor_") and k.endswith(".sum.per_cycle_elapsed")
    }
    specific = {p for p in paths if p.startswith("op_")} or paths
    for p in specific:
        per_cycle = _get(m, f"sm__ops_path_tensor_{p}.sum.per_cycle_elapsed")
        if per_cycle > 0:
            work[("tensor", p)] = (
                per_cycle * sm_hz,
                m[f"sm__ops_path_tensor_{p}.sum.peak_sustained"] * sm_hz,
            )
    bw = {
        "dram": m["dram__bytes.sum.per_second"],
        "l2": 32 * m["lts__lts2xbar_cycles_active.sum.per_second"],
        "l1": 128 * m["l1tex__lsu_writeback_active_mem_lgds.sum.per_second"],
    }
    peak_bw = {
        "dram": m["dram__bytes.sum.peak_sustained"] * m["dram__cycles_elapsed.avg.per_second"],
        "l2": 32
        * m["lts__lts2xbar_cycles_active.sum.peak_sustained"]
        * m["lts__cycles_elapsed.avg.per_second"],
        "l1": 128
        * m["l1tex__lsu_writeback_active_mem_lgds.sum.peak_sustained"]
        * m["l1tex__cycles_elapsed.avg.per_second"],
    }
    mem_util = {lv: bw[lv] / peak_bw[lv] for lv in LEVELS}
    out: dict[tuple[str | None, str | None], dict[str, float | str | None]] = {}
    for key, (flops, peak_flops) in (work or {(None, None): (None, None)}).items():  # type: ignore[dict-item]
        util = dict(mem_util)
        row: dict[str, float | str | None] = {"flops": flops, "peak_flops": peak_flops}
        if flops is not None:
            util = {"compute": flops / peak_flops, **mem_util}
            for lv in LEVELS:
                row[f"{lv}_intensity"] = flops / bw[lv]
                row[f"{lv}_ridge"] = peak_flops / peak_bw[lv]
                # left of the ridge point on ncu's chart = memory bound at that level
                row[f"{lv}_bound"] = "memory" if flops / bw[lv] < peak_flops / peak_bw[lv] else "compute"
        for lv in LEVELS:
            row[f"{lv}_bytes_per_s"] = bw[lv]
            row[f"peak_{lv}_bytes_per_s"] = peak_bw[lv]
        top = max(util, key=lambda k: util[k])
        row["roof_pct"] = 100 * util[top]
        row["limiter"] = top
        row["bound"] = "compute" if top == "compute" else "memory"
        out[key] = row
    return out


# --- workspaces ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """(connection, {file name: report id}): every raw/details pair whose files are here."""
    con = nsa.connect(tmp_path_factory.mktemp("roofline") / "w.duckdb")
    ids = {}
    for where, raw, details in PAIRS:
        for name in (raw, details):
            path = (
                VARIANTS / name if where == "variants" else ROOT.parent / "shared" / "realdata" / "ncu" / name
            )
            if path.exists():
                ids[name] = nsa.ingest(con, path).report_id
    yield con, ids
    con.close()


def _report(ws, name: str) -> tuple:
    con, ids = ws
    _path(_where(name), name)  # skips when the real data is absent
    return con, ids[name]


def _rows(con, rid: int) -> list[dict]:
    rel = nsa.query(con, "roofline", report_id=rid)
    return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]


# --- the query against the section formulas --------------------------------------------------


@pytest.mark.parametrize("raw", RAWS)
def test_query_follows_the_section_formulas(ws, raw: str) -> None:
    con, rid = _report(ws, raw)
    launches = raw_launches(_path(_where(raw), raw))
    got = _rows(con, rid)
    assert {r["launch_id"] for r in got} == set(launches)
    for lid, m in launches.items():
        want = expected_roofline(m)
        mine = {(r["precision"], r["tensor_path"]): r for r in got if r["launch_id"] == lid}
        assert set(mine) == set(want), f"launch {lid}"
        for key, w in want.items():
            r = mine[key]
            assert r["duration_ns"] == round(m["gpu__time_duration.sum"])
            for col, value in w.items():
                if isinstance(value, float):
                    assert r[col] == pytest.approx(value, rel=1e-9), f"launch {lid} {key} {col}"
                else:
                    assert r[col] == value, f"launch {lid} {key} {col}"
            if r["flops"] is not None:
                assert r["flop_count"] == pytest.approx(r["flops"] * r["duration_ns"] * 1e-9, rel=1e-6)
                assert r["attainable_flops"] == pytest.approx(r["flops"] / (r["roof_pct"] / 100), rel=1e-9)
                # the roof at this intensity: the lowest of the compute peak and each bandwidth roof
                roofs = [
                    r["peak_flops"],
                    *(r[f"{lv}_intensity"] * r[f"peak_{lv}_bytes_per_s"] for lv in LEVELS),
                ]
                assert r["attainable_flops"] == pytest.approx(min(roofs), rel=1e-9)


@pytest.mark.parametrize("raw", RAWS)
def test_query_matches_what_ncu_wrote(ws, raw: str) -> None:
    """ncu's own numbers for the same launches: the roofline sections' derived metrics, the
    utilisation percentages of Speed Of Light / Memory Workload Analysis, DRAM byte counts."""
    con, rid = _report(ws, raw)
    launches = raw_launches(_path(_where(raw), raw))
    checked = 0
    for r in _rows(con, rid):
        m = launches[r["launch_id"]]
        sm_hz = m["sm__cycles_elapsed.avg.per_second"]
        # ncu rounds per-second values to 2 decimals, per-cycle ones too: compare loosely
        assert r["l2_bytes_per_s"] == pytest.approx(
            m["derived__lts__lts2xbar_bytes.sum.per_second"], rel=1e-4
        )
        assert r["peak_l2_bytes_per_s"] == pytest.approx(
            m["derived__lts__lts2xbar_bytes.sum.peak_sustained"] * m["lts__cycles_elapsed.avg.per_second"],
            rel=1e-9,
        )
        l1 = "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum"
        assert r["l1_bytes_per_s"] == pytest.approx(m[f"{l1}.per_second"], rel=1e-4, abs=1e3)
        assert r["peak_l1_bytes_per_s"] == pytest.approx(
            m[f"{l1}.peak_sustained"] * m["l1tex__cycles_elapsed.avg.per_second"], rel=1e-9
        )
        # bandwidth utilisation = the throughput percentages ncu prints (2 decimals)
        util = {lv: 100 * r[f"{lv}_bytes_per_s"] / r[f"peak_{lv}_bytes_per_s"] for lv in LEVELS}
        assert util["dram"] == pytest.approx(
            m["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"], abs=0.011
        )
        assert util["l2"] == pytest.approx(
            m["lts__lts2xbar_cycles_active.sum.pct_of_peak_sustained_elapsed"], abs=0.011
        )
        assert util["l1"] == pytest.approx(
            m["l1tex__lsu_writeback_active_mem_lgds.sum.pct_of_peak_sustained_elapsed"], abs=0.011
        )
        moved = m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]
        assert r["dram_bytes"] == pytest.approx(moved, rel=1e-4, abs=64)
        if r["precision"] in ("fp32", "fp64"):
            fma = {"fp32": "ffma", "fp64": "dfma"}[r["precision"]]
            x2 = f"derived__sm__sass_thread_inst_executed_op_{fma}_pred_on_x2"
            assert r["peak_flops"] == pytest.approx(m[x2] * sm_hz, rel=1e-9)
        if r["precision"] == "fp32":
            fma2 = m["derived__smsp__sass_thread_inst_executed_op_ffma_pred_on_x2"]
            per_cycle = _get(
                m, "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed"
            ) + _get(m, "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed")
            hz = m["smsp__cycles_elapsed.avg.per_second"]
            # each per-cycle value is rounded to 0.01: allow that on the three terms
            assert r["flops"] == pytest.approx((per_cycle + fma2) * hz, rel=1e-3, abs=0.03 * hz)
        if r["precision"] == "fp16":
            assert r["peak_flops"] == pytest.approx(
                m["derived__sm__sass_thread_inst_executed_op_hfma_pred_on_x4"] * sm_hz, rel=1e-9
            )
        if r["precision"] == "tensor":
            base = f"sm__ops_path_tensor_{r['tensor_path']}.sum"
            assert r["flops"] == pytest.approx(m[f"{base}.per_second"], rel=1e-4)
            assert r["peak_flops"] == pytest.approx(m[f"{base}.peak_sustained_elapsed.per_second"], rel=1e-6)
            assert r["compute_pct"] == pytest.approx(m[f"{base}.pct_of_peak_sustained_elapsed"], abs=1e-3)
            assert r["flop_count"] == pytest.approx(m[base], rel=1e-3)
        checked += 1
    assert checked


_SOLFP = re.compile(
    r"achieved (\s*close to )?(\d+)% of this device's FP32 peak performance and (\s*close to )?(\d+)%"
)


def _ncu_says(pct: float) -> tuple[bool, str]:
    """How SpeedOfLight_Roofline.py words a share: 'close to N%' for 0 < share < 1%."""
    return (0 < pct < 1, f"{pct:.0f}")


@pytest.mark.parametrize(("where", "raw", "details"), PAIRS)
def test_fp_shares_match_ncus_roofline_rule(ws, where: str, raw: str, details: str) -> None:
    """The SOLFPRoofline rule of the same report states the FP32 and FP64 shares of peak."""
    con, rid = _report(ws, raw)
    _, did = _report(ws, details)
    said = {
        lid: _SOLFP.search(text)
        for lid, text in con.execute(
            "SELECT launch_id, description FROM ncu_rules WHERE report_id = ? AND rule_name = 'SOLFPRoofline'",
            [did],
        ).fetchall()
    }
    assert said
    rows = _rows(con, rid)
    for lid, match in said.items():
        assert match, f"launch {lid}: SOLFPRoofline text not understood"
        for prec, close, number in (("fp32", match[1], match[2]), ("fp64", match[3], match[4])):
            pct = next(
                (r["compute_pct"] for r in rows if r["launch_id"] == lid and r["precision"] == prec), 0.0
            )
            assert _ncu_says(pct) == (bool(close), number), f"launch {lid} {prec}: {pct}"


def test_gemm_uses_the_hopper_tensor_path(ws) -> None:
    """nvjet's bf16 GEMM on H100: one tensor row on the wgmma path (op_hgmma...sparsity_off,
    the dense peak), not also on the src_bf16 path that includes it (whose peak is the sparse one)."""
    con, rid = _report(ws, "h100_ncu2025.3_full_raw_import.csv")
    gemm = [r for r in _rows(con, rid) if r["name"].startswith("nvjet_sm90")]
    assert [(r["precision"], r["tensor_path"]) for r in gemm] == [
        ("tensor", "op_hgmma_src_bf16_dst_fp32_sparsity_off")
    ]
    g = gemm[0]
    assert g["flop_count"] == pytest.approx(2 * 4096**3, rel=1e-3)  # a 4096^3 matmul, 2 FLOP per MAC
    assert (g["limiter"], g["bound"], g["dram_bound"]) == ("compute", "compute", "compute")
    assert g["roof_pct"] == pytest.approx(g["compute_pct"])
    assert g["peak_flops_max_clock"] / g["peak_flops"] == pytest.approx(1.98e9 / 1.619702e9, rel=1e-4)


def test_launches_without_fp_work_get_a_memory_only_row(ws) -> None:
    con, rid = _report(ws, "raw_base.csv.gz")
    launches = raw_launches(VARIANTS / "raw_base.csv.gz")
    rows = _rows(con, rid)
    assert len(rows) == len(launches) == 10  # FillFunctor launches: stores, no arithmetic
    for r in rows:
        assert (r["precision"], r["flops"], r["dram_intensity"], r["dram_bound"]) == (None, None, None, None)
        assert r["bound"] == "memory" and r["limiter"] in LEVELS
        assert r["time_at_roof_ns"] == pytest.approx(r["duration_ns"] * r["roof_pct"] / 100)


def test_export_without_roofline_metrics_gives_nulls(tmp_path: Path) -> None:
    """A details page without the roofline sections (B200, live --csv): the row is there, empty."""
    con = nsa.connect(tmp_path / "w.duckdb")
    rid = nsa.ingest(con, realdata("ncu", B200)).report_id
    (r,) = _rows(con, rid)
    assert r["duration_ns"] == 406240
    assert all(r[c] is None for c in ("precision", "flops", "peak_flops", "roof_pct", "limiter", "bound"))
    con.close()


def test_dram_peak_falls_back_to_the_device_attributes(workspace) -> None:
    """Without dram__bytes.sum.peak_sustained the DRAM roof is 2 x memory clock x bus width."""
    insert(workspace, "reports", [{"report_id": 1, "format": "ncu", "source_path": "/x", "sha256": "1"}])
    insert(workspace, "ncu_kernels", [{"report_id": 1, "launch_id": 0, "name": "k"}])
    metrics = {
        "gpu__time_duration.sum": 1e6,
        "dram__bytes.sum.per_second": 1e12,
        "device__attribute_memory_clock_rate": 2_619_000,  # kHz
        "device__attribute_global_memory_bus_width": 5120,  # bits
    }
    insert(
        workspace,
        "ncu_metrics",
        [{"report_id": 1, "launch_id": 0, "metric_name": k, "value": v} for k, v in metrics.items()],
    )
    (r,) = _rows(workspace, 1)
    assert r["peak_dram_bytes_per_s"] == pytest.approx(2 * 2.619e9 * 640)
    assert (r["limiter"], r["roof_pct"]) == ("dram", pytest.approx(100 * 1e12 / (2 * 2.619e9 * 640)))


def test_device_attribute_dram_peak_agrees_with_ncus() -> None:
    for m in raw_launches(VARIANTS / "hot_raw_base.csv.gz").values():
        ncu_peak = m["dram__bytes.sum.peak_sustained"] * m["dram__cycles_elapsed.avg.per_second"]
        attr_peak = (
            2
            * m["device__attribute_memory_clock_rate"]
            * 1e3
            * m["device__attribute_global_memory_bus_width"]
            / 8
        )
        assert attr_peak == pytest.approx(ncu_peak, rel=1e-3)


# --- the rule -------------------------------------------------------------------------------


def _synthetic(con, kernels: list[tuple[str, float, float, float]]) -> None:
    """One ncu report: (name, duration ns, fp32 share of peak, DRAM share of peak) per launch,
    on an H100-like device (1.6 GHz SM, 3.35 TB/s DRAM)."""
    insert(
        con,
        "reports",
        [
            {
                "report_id": 1,
                "format": "ncu",
                "source_path": "/x",
                "sha256": "1",
                "activity_kinds": ["ncu_metrics"],
            }
        ],
    )
    rows = []
    for lid, (name, dur_ns, fp_share, dram_share) in enumerate(kernels):
        insert(con, "ncu_kernels", [{"report_id": 1, "launch_id": lid, "name": name}])
        metrics = {
            "gpu__time_duration.sum": dur_ns,
            "sm__cycles_elapsed.avg.per_second": 1.6e9,
            "smsp__cycles_elapsed.avg.per_second": 1.6e9,
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": 16896,
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed": fp_share * 16896,
            "dram__bytes.sum.peak_sustained": 1280,
            "dram__cycles_elapsed.avg.per_second": 2.6e9,
            "dram__bytes.sum.per_second": dram_share * 1280 * 2.6e9,
        }
        rows += [{"report_id": 1, "launch_id": lid, "metric_name": k, "value": v} for k, v in metrics.items()]
    insert(con, "ncu_metrics", rows)


def test_rule_fires_on_a_memory_bound_kernel_far_below_its_roof(workspace) -> None:
    _synthetic(workspace, [("void scale(float*)", 1e6, 0.01, 0.20)])
    (f,) = run_rules(workspace, only=["roofline-headroom"])
    assert (f.rule_id, f.severity) == ("roofline-headroom", "warning")
    assert f.evidence["limiter"] == "dram" and f.evidence["bound"] == "memory"
    assert f.evidence["roof_fraction"] == pytest.approx(0.20)
    assert f.est_savings_ns == pytest.approx(0.8e6, abs=1)
    assert f.evidence["dram_intensity"] == pytest.approx(0.01 * 2 * 16896 * 1.6e9 / (0.2 * 1280 * 2.6e9))
    assert "20% of the roof" in f.message and "DRAM traffic 666 GB/s of 3.33 TB/s peak" in f.message
    assert "bytes in flight" in f.recommendation


def test_rule_names_the_compute_roof(workspace) -> None:
    _synthetic(workspace, [("void chain(float*)", 1e6, 0.30, 0.05)])
    (f,) = run_rules(workspace, only=["roofline-headroom"])
    assert (f.severity, f.evidence["limiter"], f.evidence["precision"]) == ("warning", "compute", "fp32")
    assert "compute bound at 30% of the roof" in f.message and "FMA" in f.recommendation


def test_rule_on_a_warp_mma_tensor_kernel(workspace) -> None:
    """A GEMM on the mma.sync path at 35% of its tensor peak: tensor advice, and the pointer to
    the warpgroup paths."""
    insert(
        workspace,
        "reports",
        [
            {
                "report_id": 1,
                "format": "ncu",
                "source_path": "/x",
                "sha256": "1",
                "activity_kinds": ["ncu_metrics"],
            }
        ],
    )
    insert(workspace, "ncu_kernels", [{"report_id": 1, "launch_id": 0, "name": "ampere_gemm"}])
    path = "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum"
    metrics = {
        "gpu__time_duration.sum": 1e6,
        "sm__cycles_elapsed.avg.per_second": 1.6e9,
        f"{path}.per_cycle_elapsed": 0.35 * 360448,
        f"{path}.peak_sustained": 360448,
        # the generic path holding the same work: not counted again
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum.per_cycle_elapsed": 0.35 * 360448,
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained": 1081344,
        "dram__bytes.sum.peak_sustained": 1280,
        "dram__cycles_elapsed.avg.per_second": 2.6e9,
        "dram__bytes.sum.per_second": 0.1 * 1280 * 2.6e9,
    }
    insert(
        workspace,
        "ncu_metrics",
        [{"report_id": 1, "launch_id": 0, "metric_name": k, "value": v} for k, v in metrics.items()],
    )
    assert [(r["precision"], r["tensor_path"]) for r in _rows(workspace, 1)] == [
        ("tensor", "op_hmma_src_bf16_dst_fp32_sparsity_off")
    ]
    (f,) = run_rules(workspace, only=["roofline-headroom"])
    assert (f.severity, f.evidence["limiter"], f.evidence["roof_fraction"]) == (
        "warning",
        "compute",
        pytest.approx(0.35),
    )
    assert "its tensor-core roof" in f.title
    assert "Tensor cores are its busiest unit" in f.recommendation and "mma.sync" in f.recommendation


def test_rule_silent_near_the_roof_and_for_negligible_kernels(workspace) -> None:
    _synthetic(
        workspace,
        [
            ("void stream(float*)", 1e6, 0.01, 0.85),  # at 85% of the DRAM roof
            ("void tiny(float*)", 2e4, 0.01, 0.05),  # far below, but 2% of the report's time
            ("void middle(float*)", 1e6, 0.01, 0.55),  # between far (40%) and near (70%)
        ],
    )
    found = run_rules(workspace, only=["roofline-headroom"])
    assert [(f.evidence["kernel"], f.severity) for f in found] == [("void middle(float*)", "info")]


def test_rule_on_real_exports_skips_kernels_at_their_roof(ws) -> None:
    con, rid = _report(ws, "h100_ncu2025.3_full_raw_import.csv")
    found = [f for f in run_rules(con, report_id=rid) if f.rule_id == "roofline-headroom"]
    names = {f.evidence["kernel"] for f in found}
    assert found and not any(n.startswith("nvjet") for n in names)  # the GEMM is at 90% of its roof
    assert all(f.evidence["roof_fraction"] < 0.70 for f in found)
    assert [f.est_savings_ns for f in found] == sorted((f.est_savings_ns for f in found), reverse=True)


def _kernel_roof(launches: list[dict]) -> float:
    """The share of its roof a kernel's launches reach taken together (fp32 work, the three
    memory levels): each resource's time-weighted rate over its time-weighted peak, the busiest."""
    weight = sum(m["gpu__time_duration.sum"] for m in launches)

    def timed(per_launch) -> float:
        return sum(m["gpu__time_duration.sum"] * per_launch(m) for m in launches) / weight

    inst = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum.per_cycle_elapsed"
    fp32 = timed(
        lambda m: (
            (_get(m, inst.format("fadd")) + _get(m, inst.format("fmul")) + 2 * _get(m, inst.format("ffma")))
            * m["smsp__cycles_elapsed.avg.per_second"]
        )
    )
    fp32_peak = timed(
        lambda m: (
            2
            * m["sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"]
            * m["sm__cycles_elapsed.avg.per_second"]
        )
    )
    dram = timed(lambda m: m["dram__bytes.sum.per_second"])
    dram_peak = timed(
        lambda m: m["dram__bytes.sum.peak_sustained"] * m["dram__cycles_elapsed.avg.per_second"]
    )
    l2 = timed(lambda m: 32 * m["lts__lts2xbar_cycles_active.sum.per_second"])
    l2_peak = timed(
        lambda m: (
            32 * m["lts__lts2xbar_cycles_active.sum.peak_sustained"] * m["lts__cycles_elapsed.avg.per_second"]
        )
    )
    l1 = timed(lambda m: 128 * m["l1tex__lsu_writeback_active_mem_lgds.sum.per_second"])
    l1_peak = timed(
        lambda m: (
            128
            * m["l1tex__lsu_writeback_active_mem_lgds.sum.peak_sustained"]
            * m["l1tex__cycles_elapsed.avg.per_second"]
        )
    )
    return max(fp32 / fp32_peak, dram / dram_peak, l2 / l2_peak, l1 / l1_peak)


@pytest.fixture(scope="module")
def train_db(tmp_path_factory) -> Path:
    """A workspace with the transformer_train program twice: nsys (whole run) and ncu (60
    optimizer launches), ingested through the CLI."""
    from nsight_analytics.cli import main

    files = [
        str(realdata("nsys", TRAIN_NSYS)),
        str(realdata("ncu", "h100_ncu2025.3_transformer_train_raw.csv")),
    ]
    db = tmp_path_factory.mktemp("train") / "w.duckdb"
    res = CliRunner().invoke(main, ["ingest", "-q", "--db", str(db), *files])
    assert res.exit_code == 0, res.output
    return db


def test_rule_uses_the_nsys_time_of_the_same_program(train_db: Path) -> None:
    """transformer_train: ncu profiled 60 optimizer launches, nsys the whole run; the finding's
    weight is the nsys time of the same kernel (all its launches), its saving that time x (1 -
    the kernel's share of its roof) computed here from the raw CSV."""
    sqlite_path, raw = (
        realdata("nsys", TRAIN_NSYS),
        realdata("ncu", "h100_ncu2025.3_transformer_train_raw.csv"),
    )
    con = nsa.connect(train_db)
    (rid,) = con.execute("SELECT report_id FROM reports WHERE format = 'ncu'").fetchone()
    found = [f for f in run_rules(con, report_id=rid) if f.rule_id == "roofline-headroom"]
    con.close()
    ncu_name = MUL
    nsys_name = (
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)2>>(int, T2, T3)"
    )
    with sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True) as db:
        (launches, nsys_ns) = db.execute(
            "SELECT count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE s.value = ?",
            [nsys_name],
        ).fetchone()
    mine = [m for m in raw_launches(raw).values() if m["Kernel Name"] == ncu_name]
    roof = _kernel_roof(mine)
    (f,) = [f for f in found if f.evidence["kernel"] == ncu_name]
    assert (
        (f.evidence["time_at_stake_ns"], f.evidence["nsys_launches"])
        == (nsys_ns, launches)
        == (2490591, 1200)
    )
    assert f.evidence["roof_fraction"] == pytest.approx(roof, rel=1e-9)
    assert f.est_savings_ns == pytest.approx(nsys_ns * (1 - roof), abs=1)
    assert f.evidence["limiter"] == "dram" and f.severity == "info"  # 3 us launches: too short for any roof
    assert "of timeline time in 1,200 launches" in f.message and "Fuse" in f.recommendation


def test_findings_cli_reads_right(train_db: Path) -> None:
    from nsight_analytics.cli import main

    runner = CliRunner()
    res = runner.invoke(main, ["findings", "--db", str(train_db), "--format", "json"])
    assert res.exit_code == 0, res.output
    mine = [f for f in json.loads(res.output) if f["rule_id"] == "roofline-headroom"]
    assert mine and all(0 < f["est_savings_ns"] <= f["evidence"]["time_at_stake_ns"] for f in mine)
    text = " ".join(runner.invoke(main, ["findings", "--db", str(train_db)]).output.split())
    assert "Roofline headroom: void vectorized_elementwise_kernel<4, AUnaryFunctor" in text
    mul = [
        m
        for m in raw_launches(realdata("ncu", "h100_ncu2025.3_transformer_train_raw.csv")).values()
        if m["Kernel Name"] == MUL
    ]
    assert f"bandwidth bound at {100 * _kernel_roof(mul):.0f}% of the roof" in text
    assert "of timeline time in 1,200 launches" in text
