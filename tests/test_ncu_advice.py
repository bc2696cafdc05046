"""ncu advice that helps: the memory level named is the one ncu measured busiest, a kernel at a
unit's peak gets no occupancy / stall / roofline advice, an FP32 matmul on the FMA pipe is told to
use tensor cores, and a report's kernel findings come heaviest kernel first.

Expected numbers come from ncu's own CSV exports read with the csv module (the raw page's metric
columns, the details page's labelled rows), never from nsa's output. The main capture is
tests/data/busy/ncu/h100_ncu2025.3_gemm_pair_* (fixtures/captures/gemm_pair.py: an FP32 SGEMM
4096^3 with TF32 off, a bf16 GEMM 8192^3, an add and a ReLU, 4 iterations, `ncu --set full`).
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections import defaultdict
from pathlib import Path

import pytest
from rules.build import MEM, MS, SOL, STALL, ncu_launch

import nsight_analytics as nsa
from conftest import ROOT, realdata
from nsight_analytics.rules import run_rules
from nsight_analytics.rules.engine import rank_key
from nsight_analytics.rules.model import Finding
from rows import gunzipped_sqlite, insert

BUSY = ROOT / "tests" / "data" / "busy" / "ncu"
GEMM_RAW = BUSY / "h100_ncu2025.3_gemm_pair_raw.csv.gz"
GEMM_DETAILS = BUSY / "h100_ncu2025.3_gemm_pair_details.csv.gz"
GEMM_REP = BUSY / "h100_ncu2025.3_gemm_pair_full.ncu-rep.gz"
GEMM_NSYS = ROOT / "tests" / "data" / "busy" / "nsys" / "h100_nsys2025.3_gemm_pair.sqlite.gz"
HOT_REP = ROOT / "tests" / "data" / "ncu-rep" / "h100_ncu2025.3_hot_source.ncu-rep.gz"
HOT_RAW = ROOT / "tests" / "data" / "ncu" / "variants" / "hot_raw_base.csv.gz"
NCU_RULES = [
    "fp32-matmul-kernel",
    "memory-bound",
    "latency-bound",
    "low-occupancy",
    "stall-dominated",
    "roofline-headroom",
]
E = ".avg.pct_of_peak_sustained_elapsed"
SCALE = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9}
FMA_RE = re.compile(
    r"^sm__(pipe_fma\w*_cycles_active|inst_executed_pipe_fma\w*)\.avg\.pct_of_peak_sustained_elapsed$"
)
TENSOR_RE = re.compile(
    r"^sm__(pipe_tensor\w*_cycles_active|inst_executed_pipe_tensor\w*)\.avg\.pct_of_peak_sustained_elapsed$"
)
# the speed-up both FP32 rules count on (threshold fp32_matmul_speedup): half the time is kept
KEEP = 1 / 2.0


# --- ncu's CSV exports, read with the csv module -------------------------------------------------


def _text(path: Path) -> str:
    return gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()


def _num(s: str) -> float | None:
    s = s.replace(",", "").strip()
    try:
        return float(s)
    except ValueError:
        return None


def raw_launches(path: Path) -> list[dict]:
    """One dict per launch of a raw-page export: name, duration (ns) and every numeric metric."""
    rows = list(csv.reader(io.StringIO(_text(path))))
    header, units = rows[0], rows[1]
    out = []
    for row in rows[2:]:
        d: dict = {"name": row[header.index("Kernel Name")]}
        for h, u, v in zip(header, units, row, strict=True):
            x = _num(v)
            if x is not None and h != "ID":
                d[h] = x * SCALE[u] if h == "gpu__time_duration.sum" else x
        out.append(d)
    return out


def details_launches(path: Path) -> list[dict]:
    """One dict per launch of a details-page export: name and {metric label: value}."""
    by_id: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO(_text(path))):
        d = by_id.setdefault(row["ID"], {"name": row["Kernel Name"]})
        x = _num(row["Metric Value"])
        if x is not None:
            d[row["Metric Name"]] = x * SCALE.get(row["Metric Unit"], 1.0)
    return list(by_id.values())


def by_kernel(launches: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for d in launches:
        out[d["name"]].append(d)
    return out


def mean(launches: list[dict], value, dur: str = "gpu__time_duration.sum") -> float:
    """Duration-weighted mean over the launches of `value(d)` (a metric name or a function)."""
    get = value if callable(value) else (lambda d: d[value])
    return sum(get(d) * d[dur] for d in launches) / sum(d[dur] for d in launches)


def pipe(d: dict, pattern: re.Pattern) -> float:
    return max(v for k, v in d.items() if pattern.match(k))


def _one(names, prefix: str) -> str:
    (name,) = [n for n in names if n.startswith(prefix)]
    return name


# --- helpers -------------------------------------------------------------------------------------


def _ingest(tmp_path: Path, *paths: Path) -> tuple:
    con = nsa.connect(tmp_path / "w.duckdb")
    rids = [nsa.ingest(con, p).report_id for p in paths]
    return con, rids


def _ncu_findings(con, rid: int, config: dict | None = None, only: list[str] | None = None) -> list[Finding]:
    return [
        f for f in run_rules(con, report_id=rid, config=config, only=only or NCU_RULES) if f.report_id == rid
    ]


def _load(con, launches: list[tuple[dict, list[dict]]], cc: str | None = None, rid: int = 1) -> None:
    """An ncu report of hand-built launches (rules/build.ncu_launch rows)."""
    insert(
        con,
        "reports",
        [{"report_id": rid, "format": "ncu", "source_path": f"/cases/{rid}", "sha256": str(rid),
          "has_kernels": False, "activity_kinds": ["ncu_metrics"]}],
    )  # fmt: skip
    insert(con, "ncu_kernels", [{**k, "cc": cc} for k, _ in launches])
    insert(con, "ncu_metrics", [m for _, ms in launches for m in ms])


PIPE_FMA = "sm__pipe_fma_cycles_active" + E
PIPE_TENSOR = "sm__pipe_tensor_cycles_active" + E
DRAM = "gpu__dram_throughput" + E
L2 = "lts__throughput" + E
L1 = "l1tex__throughput" + E
SHARED = "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed"
OCC_THEO = "sm__maximum_warps_per_active_cycle_pct"
OCC_ACH = "sm__warps_active.avg.pct_of_peak_sustained_active"


def launch(i: int, name: str, ms: float, **metrics: float) -> tuple[dict, list[dict]]:
    k, rows = ncu_launch(i, name, ms * MS)
    rows += [
        {"report_id": 1, "launch_id": i, "metric_name": n.replace("__DOT__", "."), "value": v}
        for n, v in metrics.items()
    ]
    return k, rows


# --- the gemm_pair capture -----------------------------------------------------------------------


def test_fp32_sgemm_is_told_to_use_tensor_cores_and_nothing_else(tmp_path: Path) -> None:
    """The FP32 SGEMM (65% of the ncu time, FMA pipe ~78%, tensor pipe ~0) gets the precision
    advice with its share and a saving; not the register cap it used to get, nor a stall finding.
    The bf16 GEMM at its tensor peak, whose Memory Throughput (shared memory feeding the tensor
    cores) edges its Compute Throughput, is not called memory-bound: no ncu finding names it."""
    per = by_kernel(raw_launches(GEMM_RAW))
    sgemm, bf16 = _one(per, "sm80_xmma_gemm_f32f32_f32f32_f32"), _one(per, "nvjet_sm90_tst")
    total_ns = sum(d["gpu__time_duration.sum"] for ls in per.values() for d in ls)
    sgemm_ns = sum(d["gpu__time_duration.sum"] for d in per[sgemm])
    fma = mean(per[sgemm], lambda d: pipe(d, FMA_RE))
    tensor = mean(per[sgemm], lambda d: pipe(d, TENSOR_RE))
    # the trap the old memory-bound fell into: Memory Throughput above Compute, DRAM at ~27%
    b = per[bf16]
    assert mean(b, "gpu__compute_memory_throughput" + E) > mean(b, "sm__throughput" + E)
    assert mean(b, DRAM) < 30 and mean(b, lambda d: pipe(d, TENSOR_RE)) > 90
    assert 0.6 < sgemm_ns / total_ns < 0.7 and 75 < fma < 80 and tensor < 0.01  # what the capture is

    con, (rid,) = _ingest(tmp_path, GEMM_RAW)
    found = _ncu_findings(con, rid)
    con.close()
    assert [(f.rule_id, f.severity) for f in found] == [("fp32-matmul-kernel", "warning")]
    (f,) = found
    ev = f.evidence
    assert ev["kernel"] == sgemm and ev["ncu_launches"] == 4
    assert ev["time_at_stake_ns"] == pytest.approx(sgemm_ns, abs=1)
    assert ev["share"] == pytest.approx(sgemm_ns / total_ns, rel=1e-6)
    assert ev["fma_pct"] == pytest.approx(fma, rel=1e-6)
    assert ev["tensor_pct"] == pytest.approx(tensor, rel=1e-6, abs=1e-9)
    assert f.est_savings_ns == pytest.approx(sgemm_ns * (1 - KEEP), abs=2)
    assert f"({sgemm_ns / total_ns:.0%} of the ncu time)" in f.title
    assert f"FMA pipe {fma:.0f}% of peak" in f.message and "2x speed-up" in f.message
    assert "set_float32_matmul_precision('high')" in f.recommendation
    assert "bfloat16" in f.recommendation
    assert not any(bf16[:40] in g.message for g in found)


@pytest.mark.one_python  # a heavy sweep of real captures; lighter cases cover its code on every Python
def test_details_page_and_report_give_the_same_advice(tmp_path: Path) -> None:
    """The details page has no pipe metrics: the name says FP32 SIMT/FFMA, the SM throughput is the
    evidence. The .ncu-rep (read through ncu_report) gives what its raw export gives."""
    per = by_kernel(details_launches(GEMM_DETAILS))
    sgemm = _one(per, "sm80_xmma_gemm_f32f32_f32f32_f32")
    dur = "Duration"
    sm = mean(per[sgemm], "Compute (SM) Throughput", dur)
    sgemm_ns = sum(d[dur] for d in per[sgemm])
    paths = [GEMM_DETAILS]
    try:
        import ncu_report  # noqa: F401

        paths.append(GEMM_REP)
    except ImportError:
        pass  # ncu-report has wheels for Linux and Windows x86-64 only
    con, rids = _ingest(tmp_path, *paths)
    try:
        for rid in rids:
            found = _ncu_findings(con, rid)
            assert [(f.rule_id, f.severity) for f in found] == [("fp32-matmul-kernel", "warning")], rid
            assert found[0].evidence["time_at_stake_ns"] == pytest.approx(sgemm_ns, abs=1)
        (f,) = _ncu_findings(con, rids[0])
        assert f.evidence["fma_pct"] is None and f.evidence["compute_pct"] == pytest.approx(sm, rel=1e-6)
        assert f"no tensor cores by its name (FP32 SIMT/FFMA): SM throughput {sm:.0f}% of peak" in f.message
    finally:
        con.close()


def test_memory_bound_names_the_level_ncu_measured(tmp_path: Path) -> None:
    """With every kernel heavy, memory-bound on the add names DRAM (gpu__dram_throughput) and on the
    ReLU (clamp) names L2 (lts__throughput above DRAM); never `gpu__compute_memory_throughput` as
    DRAM. The GEMMs get none."""
    per = by_kernel(raw_launches(GEMM_RAW))
    want = {}
    for name, ls in per.items():
        levels = {"DRAM": mean(ls, DRAM), "L2": mean(ls, L2), "L1/TEX": mean(ls, L1)}
        mem, comp = mean(ls, "gpu__compute_memory_throughput" + E), mean(ls, "sm__throughput" + E)
        busy, balanced = mem >= 60 and mem > comp, comp >= 60 and mem - comp < 10
        if busy and not balanced and mean(ls, lambda d: pipe(d, TENSOR_RE)) < 60:
            top = max(levels, key=lambda k: levels[k])
            want[name] = (top, levels[top])
    assert len(want) == 2
    add = _one(want, "void at::vectorized_elementwise_kernel<4, at::CUDAFunctor_add")
    relu = _one(want, "void at::vectorized_elementwise_kernel<4, at::<unnamed>::launch_clamp")
    assert want[add][0] == "DRAM" and want[relu][0] == "L2"

    con, (rid,) = _ingest(tmp_path, GEMM_RAW)
    found = _ncu_findings(
        con, rid, config={"heavy_kernel_share": 0.0, "max_kernel_findings": 20}, only=["memory-bound"]
    )
    con.close()
    got = {f.evidence["kernel"]: f for f in found}
    assert set(got) == set(want)
    for name, (level, value) in want.items():
        f = got[name]
        assert f"({level} {value:.0f}% of peak)" in f.title
        assert f.evidence["memory_level_pct"] == pytest.approx(value, rel=1e-6)
        assert f.severity == ("info" if value >= 80 else "warning")
    assert "Move fewer bytes through DRAM" in got[add].recommendation
    assert "L2 is the busiest level" in got[relu].recommendation


def test_timeline_time_is_at_stake_where_the_nsys_capture_is_there(tmp_path: Path) -> None:
    """With the nsys capture of the same program in the workspace, the SGEMM's weight and saving
    come from its timeline time (nsys runs unlocked clocks: less than under ncu)."""
    with gunzipped_sqlite(GEMM_NSYS, tmp_path) as db:
        ((launches, timeline_ns),) = db.execute(
            "SELECT count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'sm80_xmma_gemm_f32f32_f32f32_f32%'"
        ).fetchall()
    con, (nsys_rid, ncu_rid) = _ingest(tmp_path, tmp_path / GEMM_NSYS.name.removesuffix(".gz"), GEMM_RAW)
    found = _ncu_findings(con, ncu_rid)
    con.close()
    (f,) = found
    assert (f.evidence["nsys_report_id"], f.evidence["nsys_launches"]) == (nsys_rid, launches)
    assert f.evidence["time_at_stake_ns"] == timeline_ns
    assert f.est_savings_ns == pytest.approx(timeline_ns * (1 - KEEP), abs=2)
    assert f"of timeline time in {launches} launches (nsys report {nsys_rid})" in f.message


# --- other real reports --------------------------------------------------------------------------


def test_saturated_kernels_get_no_occupancy_stall_or_roofline_advice(tmp_path: Path) -> None:
    """ncu's --set full export of a small transformer step (shared realdata): the direct-copy
    kernel at 98% L2 throughput is memory-bound on L2, with no long-scoreboard stall advice (more
    loads in flight cannot help a saturated L2) and no roofline headroom; the bf16 GEMM at its
    tensor peak gets no occupancy advice; the RNG kernel at 76% SM throughput no roofline
    headroom. Findings of one severity come heaviest kernel first."""
    path = realdata("ncu", "h100_ncu2025.3_full_raw_import.csv")
    per = by_kernel(raw_launches(path))
    copy = _one(per, "void at::elementwise_kernel<128, 2, void at::gpu_kernel_impl_nocast<at::direct_copy")
    gemm = _one(per, "nvjet_sm90_tst")
    assert mean(per[copy], L2) > 95 and mean(per[copy], DRAM) < 40
    assert mean(per[gemm], lambda d: pipe(d, TENSOR_RE)) > 80

    con, (rid,) = _ingest(tmp_path, path)
    found = _ncu_findings(con, rid)
    con.close()
    on = defaultdict(set)
    for f in found:
        on[f.evidence["kernel"]].add(f.rule_id)
    assert on[copy] == {"memory-bound"}
    assert not on[gemm]
    (f,) = [f for f in found if f.evidence["kernel"] == copy]
    assert f"(L2 {mean(per[copy], L2):.0f}% of peak)" in f.title
    assert "strided or transposing copy" in f.recommendation
    rngs = [n for n in per if "distribution_elementwise" in n]
    assert rngs and all(mean(per[n], "sm__throughput" + E) >= 70 for n in rngs)
    assert not any("roofline-headroom" in on[n] for n in rngs)
    for sev in ("warning", "info"):
        stakes = [f.evidence["time_at_stake_ns"] for f in found if f.severity == sev]
        assert stakes == sorted(stakes, reverse=True)


def test_gather_at_l2_limit_and_fma_chain_at_sm_peak(tmp_path: Path) -> None:
    """The hot-source report: `gather` reaches 90% L2 throughput (DRAM 69%): memory-bound names L2,
    and roofline-headroom stays silent (it drew the kernel at 69% of its DRAM roof); `fma_chain`
    at 96% SM throughput gets no not-selected stall finding (warps ready, the SM busy)."""
    pytest.importorskip("ncu_report", reason="ncu-report has wheels for Linux and Windows x86-64 only")
    per = by_kernel(raw_launches(HOT_RAW))
    gather, chain = _one(per, "gather("), _one(per, "fma_chain(")
    l2 = mean(per[gather], L2)
    assert l2 > 85 and mean(per[gather], DRAM) < 70 and mean(per[chain], "sm__throughput" + E) > 90
    con, (rid,) = _ingest(tmp_path, HOT_REP)
    found = _ncu_findings(con, rid)
    con.close()
    assert [(f.rule_id, f.evidence["kernel"]) for f in found] == [("memory-bound", gather)]
    assert f"(L2 {l2:.0f}% of peak)" in found[0].title and found[0].severity == "info"


# --- hand-built reports: each judgement on its own -----------------------------------------------


def test_tensor_core_gemm_at_peak_gets_no_advice(tmp_path: Path) -> None:
    """The issue's bf16 GEMM: tensor pipe 97%, DRAM 30%, Memory Throughput 97% from shared memory,
    occupancy 15% limited by registers, math-pipe-throttle stalls: nothing to tell it."""
    gemm = launch(
        0,
        "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT",
        2.0,
        **{SOL: 96.0, MEM: 97.0, DRAM: 30.0, L2: 52.0, L1: 97.0, SHARED: 96.5, PIPE_TENSOR: 97.0, PIPE_FMA: 0.0,
           OCC_THEO: 18.75, OCC_ACH: 15.0, "launch__occupancy_limit_registers": 1, "launch__occupancy_limit_warps": 5,
           STALL.format("math_pipe_throttle"): 8.0, STALL.format("wait"): 1.0},
    )  # fmt: skip
    con = nsa.connect(tmp_path / "w.duckdb")
    _load(con, [gemm], cc="9.0")
    assert _ncu_findings(con, 1) == []
    con.close()


def test_balanced_kernel_without_pipe_metrics_is_not_memory_bound(tmp_path: Path) -> None:
    """A details page has no pipe metrics: compute 94% within 10 points of memory 95% is balanced,
    where compute 70% against memory 95% is memory-bound (and names the level)."""
    con = nsa.connect(tmp_path / "w.duckdb")
    _load(
        con,
        [
            launch(0, "balanced_kernel", 1.0, **{SOL: 94.0, MEM: 95.0, DRAM: 27.0, L2: 51.0, L1: 95.0}),
            launch(1, "streaming_kernel", 1.0, **{SOL: 70.0, MEM: 95.0, DRAM: 95.0, L2: 80.0, L1: 30.0}),
        ],
    )
    found = _ncu_findings(con, 1, only=["memory-bound"])
    con.close()
    assert [(f.evidence["kernel"], f.title.split("(")[-1]) for f in found] == [
        ("streaming_kernel", "DRAM 95% of peak)")
    ]
    assert "DRAM 95%, L2 80%" in found[0].message


@pytest.mark.parametrize(
    ("metrics", "title", "advice"),
    [
        ({DRAM: 70.0, L2: 40.0, L1: 20.0}, "(DRAM 70% of peak)", "check coalescing and the L2 hit rate"),
        ({DRAM: 30.0, L2: 75.0, L1: 20.0}, "(L2 75% of peak)", "L2 is the busiest level"),
        (
            {DRAM: 30.0, L2: 40.0, L1: 75.0, SHARED: 10.0},
            "(L1/TEX 75% of peak)",
            "L1/TEX is the busiest level",
        ),
        ({DRAM: 30.0, L2: 40.0, L1: 75.0, SHARED: 70.0}, "(shared memory 70% of peak)", "bank conflicts"),
        ({}, "(memory throughput 75% of peak)", "Move fewer bytes through DRAM"),
    ],
    ids=["dram", "l2", "l1", "shared", "unknown"],
)
def test_memory_bound_levels(tmp_path: Path, metrics: dict, title: str, advice: str) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    _load(con, [launch(0, "void k(float*)", 1.0, **{SOL: 20.0, MEM: 75.0, **metrics})])
    (f,) = _ncu_findings(con, 1, only=["memory-bound"])
    con.close()
    assert title in f.title and advice in f.recommendation
    assert f.severity == "warning"
    if not metrics:
        assert "this export does not say which" in f.message


def test_bf16_data_is_not_told_to_use_bf16(tmp_path: Path) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    _load(
        con,
        [
            launch(
                0, "void add_kernel<c10::BFloat16>(c10::BFloat16*)", 1.0, **{SOL: 5.0, MEM: 88.0, DRAM: 88.0}
            )
        ],
    )
    (f,) = _ncu_findings(con, 1, only=["memory-bound"])
    con.close()
    assert "bf16" not in f.recommendation and "Move fewer bytes through DRAM" in f.recommendation


@pytest.mark.parametrize(
    ("name", "metrics", "cc", "saving", "advice"),
    [
        # the name says nothing; the pipes say FP32 on the FMA pipe
        ("my_matmul_kernel", {SOL: 70.0, MEM: 30.0, PIPE_FMA: 60.0, PIPE_TENSOR: 0.0}, "8.0", 1 - KEEP, "allow_tf32"),
        # the name says SIMT SGEMM; no pipe metrics (details page); a workstation GPU (bf16 still doubles it)
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)", {SOL: 85.0, MEM: 46.0},
         "8.6", 1 - KEEP, "set_float32_matmul_precision"),
        # FP32 mem-efficient attention: bf16 is the fix, TF32 does not apply
        ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>::Params)",
         {SOL: 60.0, MEM: 40.0, PIPE_FMA: 55.0, PIPE_TENSOR: 0.2}, "9.0", 1 - KEEP, "FlashAttention"),
        # the same on Ampere and later: FP32 built from three TF32 tensor-core products
        ("fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<float>::Params)",
         {SOL: 70.0, MEM: 40.0, PIPE_FMA: 20.0, PIPE_TENSOR: 45.0}, "9.0", 1 - KEEP, "three TF32"),
    ],
    ids=["pipes", "name", "attention", "attention-3xtf32"],
)  # fmt: skip
def test_fp32_matmul_kernel(tmp_path: Path, name: str, metrics: dict, cc: str, saving, advice: str) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    _load(
        con,
        [launch(0, name, 2.0, **metrics), launch(1, "void tail(float*)", 2.0, **{SOL: 5.0, MEM: 5.0})],
        cc=cc,
    )
    found = _ncu_findings(con, 1, only=["fp32-matmul-kernel"])
    con.close()
    (f,) = found
    assert f.evidence["kernel"] == name and f.evidence["share"] == pytest.approx(0.5)
    assert advice in f.recommendation + f.message
    assert f.est_savings_ns == (None if saving is None else pytest.approx(2 * MS * saving, abs=1))


@pytest.mark.parametrize(
    ("name", "metrics"),
    [
        # named FP32, but its tensor pipe runs: not this finding
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8",
            {SOL: 70.0, MEM: 30.0, PIPE_TENSOR: 40.0},
        ),
        # FMA busy and tensor idle, but no matrix math: an FMA-bound custom kernel
        ("fma_chain(float *, int, int)", {SOL: 96.0, MEM: 15.0, PIPE_FMA: 74.0, PIPE_TENSOR: 0.0}),
        # a bf16 GEMM
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", {SOL: 90.0, MEM: 69.0, PIPE_TENSOR: 90.0}),
    ],
    ids=["tensor-pipe-busy", "not-a-matmul", "bf16"],
)
def test_not_fp32_matmul(tmp_path: Path, name: str, metrics: dict) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    _load(con, [launch(0, name, 2.0, **metrics)], cc="9.0")
    assert _ncu_findings(con, 1, only=["fp32-matmul-kernel"]) == []
    con.close()


def test_occupancy_and_stalls_only_where_no_unit_is_at_its_peak(tmp_path: Path) -> None:
    """Three kernels with the same low occupancy (registers) and one dominant stall: the FMA-bound
    one (SM 96%) and the DRAM-bound one (DRAM 90%) get neither finding; the latency-bound one gets
    both; a library GEMM below its peak gets an info that does not say to cap registers."""
    occ = {
        OCC_THEO: 25.0,
        OCC_ACH: 20.0,
        "launch__occupancy_limit_registers": 2,
        "launch__occupancy_limit_warps": 8,
    }
    stall = {STALL.format("long_scoreboard"): 6.0, STALL.format("wait"): 1.0}
    con = nsa.connect(tmp_path / "w.duckdb")
    _load(
        con,
        [
            launch(0, "fma_bound(float*)", 4.0, **{SOL: 96.0, MEM: 15.0, PIPE_FMA: 74.0, **occ, **stall}),
            launch(1, "dram_bound(float*)", 3.0, **{SOL: 10.0, MEM: 90.0, DRAM: 90.0, **occ, **stall}),
            launch(2, "latency_bound(float*)", 2.0, **{SOL: 10.0, MEM: 20.0, DRAM: 20.0, **occ, **stall}),
            launch(
                3,
                "cutlass3x_sm90_tensorop_gemm_bf16",
                1.0,
                **{SOL: 24.0, MEM: 22.0, PIPE_TENSOR: 24.0, **occ},
            ),
        ],
    )
    found = _ncu_findings(con, 1, only=["low-occupancy", "stall-dominated"])
    con.close()
    got = sorted((f.evidence["kernel"], f.rule_id, f.severity) for f in found)
    assert got == [
        ("cutlass3x_sm90_tensorop_gemm_bf16", "low-occupancy", "info"),
        ("latency_bound(float*)", "low-occupancy", "warning"),
        ("latency_bound(float*)", "stall-dominated", "warning"),
    ]
    (gemm,) = [f for f in found if f.evidence["kernel"].startswith("cutlass")]
    assert "Cap registers" not in gemm.recommendation and "by design" in gemm.recommendation


# --- ranking -------------------------------------------------------------------------------------


def test_kernel_findings_rank_heaviest_kernel_first() -> None:
    """Within a severity a kernel finding ranks by its kernel's time at stake, before any saving;
    timeline findings keep ranking by their saving."""
    heavy = Finding("memory-bound", "info", 1, "t", "m", "r", {"time_at_stake_ns": 3 * MS}, None)
    light = Finding("roofline-headroom", "info", 1, "t", "m", "r", {"time_at_stake_ns": 1 * MS}, MS // 2)
    same_kernel = Finding("low-occupancy", "info", 1, "t", "m", "r", {"time_at_stake_ns": 1 * MS}, None)
    warn = Finding("latency-bound", "warning", 1, "t", "m", "r", {"time_at_stake_ns": 1}, None)
    assert sorted([light, same_kernel, heavy, warn], key=rank_key) == [warn, heavy, light, same_kernel]
    big, small = (Finding("gpu-idle", "warning", 1, "t", "m", "r", {}, s) for s in (5 * MS, MS))
    none = Finding("host-sync", "warning", 1, "t", "m", "r", {}, None)
    assert sorted([none, small, big], key=rank_key) == [big, small, none]


def test_timeline_time_ranks_the_kernels_where_an_nsys_report_has_them(tmp_path: Path) -> None:
    """Two memory-bound kernels: `a` is heavier in the ncu report, `b` ran 10x longer on the nsys
    timeline of the same program: `b` comes first, with its timeline time at stake."""
    from rules.build import kernel

    con = nsa.connect(tmp_path / "w.duckdb")
    _load(
        con,
        [
            launch(0, "void a(float*)", 2.0, **{SOL: 5.0, MEM: 90.0, DRAM: 90.0}),
            launch(1, "void b(float*)", 1.0, **{SOL: 5.0, MEM: 90.0, DRAM: 90.0}),
        ],
    )
    insert(
        con,
        "reports",
        [{"report_id": 2, "format": "nsys", "source_path": "/cases/2", "sha256": "2", "has_kernels": True,
          "activity_kinds": ["kernel"]}],
    )  # fmt: skip
    insert(
        con,
        "kernels",
        [kernel(0, MS, "void a(float*)", rid=2), kernel(2 * MS, 10 * MS, "void b(float*)", rid=2)],
    )
    found = _ncu_findings(con, 1, only=["memory-bound"])
    con.close()
    assert [(f.evidence["kernel"], f.evidence["time_at_stake_ns"]) for f in found] == [
        ("void b(float*)", 10 * MS),
        ("void a(float*)", 1 * MS),
    ]
