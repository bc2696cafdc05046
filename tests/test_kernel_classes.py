"""Kernel classes and math precision (queries/_kernels.sql, query kernel_classes) and the rules
that judge the busy time with them (fp32-matmul, unfused-elementwise), on real captures.

Expected numbers come from the files themselves: plain sqlite3 SQL on the nsys exports and JSON
arithmetic on the PyTorch profiler traces, with the kernel name patterns written out here."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
import statistics
from pathlib import Path
from typing import Any

import pytest

import nsight_analytics as nsa
from conftest import ROOT, realdata
from nsight_analytics.api import findings, summary
from nsight_analytics.render.findings import grouped
from nsight_analytics.render.summary import to_text
from nsight_analytics.rules import rules
from rows import gunzipped_sqlite

BUSY = ROOT / "tests" / "data" / "busy"

# Real kernel names (from the captures named) -> (nsa_kernel_class, nsa_kernel_math).
NAMES = [
    # busy_train fp32 / realdata train_*: FP32 on the FMA pipes, FP32 mem-efficient attention
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", "gemm", "fp32"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)", "gemm", "fp32"),
    ("fmha_cutlassB_f32_aligned_64x64_k64_dropout_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, float, (bool)1, (bool)1, (bool)0, (int)64, (int)64, (int)64, (bool)0>::Params)", "attention", "fp32"),
    ("ampere_sgemm_128x64_nn", "gemm", "fp32"),
    ("cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "conv", "fp32"),
    # helpers state their data type, not their math
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, false, false>(cublasLt::cublasSplitKParams<float>, float const*)", "gemm", None),
    ("void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, int, int)", "conv", None),
    # busy_train tf32, HTA A100 traces
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm", "tf32"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align4>(T1::Params)", "gemm", "tf32"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize256x64x32_stage3_warpsize4x2x1_g1_tensor16x8x8_execute_kernel", "conv", "tf32"),
    # busy_train bf16, h100x2 train_before, nvFuser capture
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm", "bf16"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm", "bf16"),
    ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT", "gemm", "fp16"),
    ("cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1", "gemm", "bf16"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0", "attention", "fp16"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits>>(Flash_fwd_params)", "attention", "bf16"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<(bool)1, (int)64>(const void *, const void *, void *)", "attention", None),
    ("void cudnn::fusion::convert_dq_to_16bits<(bool)1>(const void *, void *, unsigned int)", "copy", None),
    # not matrix math
    ("void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4, void at::native::templates::cuda::normal_and_transform<float, float>>(long)", "elementwise", None),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp)", "reduction", None),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>(long, float, float const*, float*, float*)", "norm", None),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct)", "norm", None),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*)", "reduction", None),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>)", "copy", None),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", "communication", None),
    ("void clover::par_ranged2d_kernel<PdV_kernel(bool, int, int, int, int, double, clover::Buffer2D<double> &)>(T1)", "other", None),
    ("triton_poi_fused_add_relu_0", "elementwise", None),
]  # fmt: skip


def test_classes_and_math_of_real_names(workspace) -> None:
    got = workspace.execute(
        "SELECT n, nsa_kernel_class(n), nsa_kernel_math(n), nsa_kernel_fused(n) FROM unnest($names) AS t(n)",
        {"names": [n for n, _, _ in NAMES]},
    ).fetchall()
    assert [(c, m) for _, c, m, _ in got] == [(c, m) for _, c, m in NAMES]
    fused = {n for n, _, _, f in got if f}
    assert fused == {"triton_poi_fused_add_relu_0"}  # cuDNN's cudnn::fusion:: helpers are not compiler output


# --- independent arithmetic on the files ---------------------------------------------------------

FP32_GEMM = re.compile(r"ffma|simt_sgemm", re.IGNORECASE)
FP32_ATTENTION = re.compile(r"fmha_cutlass[FB]_f32", re.IGNORECASE)


def _steady_start(steps: list[tuple[int, int]]) -> int:
    """The first step no longer than 1.5x the median step starts the steady state (table steps)."""
    median = statistics.median(e - s for s, e in steps)
    return next(s for s, e in steps if e - s <= 1.5 * median)


def _nsys_steady(db: sqlite3.Connection) -> tuple[int, list[tuple[str, int, int]]]:
    """(steady start, [(kernel name, start, end) clipped to the steady state]) of a busy_train export."""
    ranges = db.execute(
        'SELECT coalesce(e.text, s.value), e.start, e."end" FROM NVTX_EVENTS e LEFT JOIN StringIds s '
        "ON s.id = e.textId WHERE e.eventType IN (59, 60) ORDER BY e.start"
    ).fetchall()
    steps = [(s, e) for name, s, e in ranges if re.fullmatch(r"(train_)?step[ _]\d+", str(name))]
    ws = _steady_start(steps)
    rows = db.execute(
        'SELECT s.value, max(k.start, ?), k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k '
        'JOIN StringIds s ON s.id = k.demangledName WHERE k."end" > ?',
        [ws, ws],
    ).fetchall()
    return ws, rows


def _kineto(path: Path) -> tuple[int, list[tuple[str, int, int]]]:
    """(steady start, [(kernel name, start, end)]) of a PyTorch profiler trace, in ns of its clock."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = sorted(
        (round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") != "gpu_user_annotation"
        and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    ws = _steady_start(steps)
    kernels = [
        (e["name"], max(round(e["ts"] * 1000), ws), round((e["ts"] + e["dur"]) * 1000))
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "kernel" and (e["ts"] + e["dur"]) * 1000 > ws
    ]
    return ws, kernels


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def _share(kernels: list[tuple[str, int, int]], *patterns: re.Pattern[str]) -> tuple[int, int]:
    """(kernel time of the names matching any pattern, all kernel time)."""
    hit = sum(e - s for n, s, e in kernels if any(p.search(n) for p in patterns))
    return hit, sum(e - s for _, s, e in kernels)


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """(connection, {label: report_id}, folder): the busy_train captures at three precisions (nsys)
    and two (PyTorch profiler), ingested once."""
    folder = tmp_path_factory.mktemp("busy")
    con = nsa.connect(folder / "w.duckdb")
    ids = {}
    for p in ("fp32", "tf32", "bf16"):
        ids[f"nsys_{p}"] = nsa.ingest(
            con, BUSY / "nsys" / f"h100_nsys2025.3_busy_train_{p}.sqlite.gz"
        ).report_id
    for p in ("fp32", "bf16"):
        ids[f"kineto_{p}"] = nsa.ingest(
            con, BUSY / "kineto" / f"h100_torch2.11_busy_train_{p}.json.gz"
        ).report_id
    found = findings(con)
    yield con, ids, folder, found
    con.close()


def _by(found: list[Any], rid: int) -> dict[str, Any]:
    return {f.rule_id: f for f in found if f.report_id == rid}


def test_fp32_training_step_is_fp32_matmul(busy) -> None:
    """The FP32 step: 76% of the steady kernel time is FP32 GEMMs (64%) and attention (12%); the
    finding leads the report with half that time as its saving, inside the window's busy time."""
    _, ids, folder, found = busy
    db = gunzipped_sqlite(BUSY / "nsys" / "h100_nsys2025.3_busy_train_fp32.sqlite.gz", folder)
    ws, kernels = _nsys_steady(db)
    fp32, total = _share(kernels, FP32_GEMM, FP32_ATTENTION)
    gemm, _ = _share(kernels, FP32_GEMM)
    assert fp32 / total == pytest.approx(0.76, abs=0.01) and gemm / total == pytest.approx(0.64, abs=0.01)
    rid = ids["nsys_fp32"]
    mine = [f for f in found if f.report_id == rid]
    f = mine[0]
    assert f.rule_id == "fp32-matmul" and f.severity == "critical"
    assert f.evidence["fp32_ns"] == fp32 and f.evidence["kernel_ns"] == total
    assert f.evidence["fp32_ns_by_class"] == {"gemm": gemm, "attention": fp32 - gemm}
    busy_ns = _union([(s, e) for _, s, e in kernels])
    assert f.evidence["kernel_busy_ns"] == busy_ns
    assert f.est_savings_ns == int(fp32 * min(1, busy_ns / total) * 0.5)
    last = db.execute('SELECT max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
    assert f.est_savings_ns < busy_ns <= last - ws  # inside the steady window's busy time
    assert "76% of the GPU's kernel time is FP32 matrix math" in f.message
    assert (
        "set_float32_matmul_precision('high')" in f.recommendation and "flash attention" in f.recommendation
    )
    assert "unfused-elementwise" not in _by(found, rid)  # GEMM-bound: not the elementwise rule's


def test_tf32_and_bf16_steps_are_not_fp32_matmul(busy) -> None:
    """TF32 moved the GEMMs to tensor cores (only the FP32 attention is left: not this rule's);
    bf16 runs no FP32 matrix math at all."""
    con, ids, folder, found = busy
    db = gunzipped_sqlite(BUSY / "nsys" / "h100_nsys2025.3_busy_train_tf32.sqlite.gz", folder)
    _, kernels = _nsys_steady(db)
    gemm, total = _share(kernels, FP32_GEMM)
    attention, _ = _share(kernels, FP32_ATTENTION)
    assert gemm == 0 and attention / total == pytest.approx(0.25, abs=0.01)
    for label in ("nsys_tf32", "nsys_bf16", "kineto_bf16"):
        assert "fp32-matmul" not in _by(found, ids[label])
    rows = nsa.query(con, "kernel_classes", report_id=ids["nsys_tf32"], phase="steady").fetchall()
    tf32 = sum(r[8] for r in rows if r[3] == "gemm" and r[4] == "tf32")
    tf32_sql, _ = _share(kernels, re.compile(r"tf32|s1688", re.IGNORECASE))
    assert tf32 == tf32_sql


def test_precision_pair_measures_the_speedup(busy) -> None:
    """The speed-ups fp32-matmul's docstring states, from the three exports: GEMM time per steady
    step in FP32, TF32 and bf16, attention in FP32 and bf16."""
    folder = busy[2]
    gemm = re.compile(r"gemm|nvjet|xmma|splitKreduce", re.IGNORECASE)
    attention = re.compile(r"fmha|sdpa|flash|dot_do_o", re.IGNORECASE)
    per_step = {}
    for p in ("fp32", "tf32", "bf16"):
        db = gunzipped_sqlite(BUSY / "nsys" / f"h100_nsys2025.3_busy_train_{p}.sqlite.gz", folder)
        _, kernels = _nsys_steady(db)
        steps = db.execute(
            "SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE coalesce(e.text, s.value) GLOB 'step [0-9]*'"
        ).fetchone()[0]
        per_step[p] = {
            k: _share(kernels, pat)[0] / (steps - 1) for k, pat in (("gemm", gemm), ("attn", attention))
        }
    assert per_step["fp32"]["gemm"] / per_step["tf32"]["gemm"] == pytest.approx(4.7, abs=0.15)
    assert per_step["fp32"]["gemm"] / per_step["bf16"]["gemm"] == pytest.approx(11.5, abs=0.4)
    assert per_step["fp32"]["attn"] / per_step["tf32"]["attn"] == pytest.approx(1.0, abs=0.02)
    assert per_step["fp32"]["attn"] / per_step["bf16"]["attn"] == pytest.approx(6.0, abs=0.2)
    # the speed-up fp32-matmul counts on stays below the GEMMs' and below GEMMs + attention with TF32 alone
    speedup = next(
        t.default
        for r in rules()
        if r.id == "fp32-matmul"
        for t in r.declared
        if t.name == "fp32_matmul_speedup"
    )
    both = {p: per_step[p]["gemm"] + per_step[p]["attn"] for p in per_step}
    assert speedup < both["fp32"] / both["tf32"] == pytest.approx(3.0, abs=0.1)


def test_kineto_fp32_step(busy) -> None:
    """The same FP32 step in a PyTorch profiler trace: the finding from the trace's kernel names."""
    _, ids, _, found = busy
    _, kernels = _kineto(BUSY / "kineto" / "h100_torch2.11_busy_train_fp32.json.gz")
    fp32, total = _share(kernels, FP32_GEMM, FP32_ATTENTION)
    f = _by(found, ids["kineto_fp32"])["fp32-matmul"]
    assert f.evidence["fp32_share"] == pytest.approx(fp32 / total, rel=1e-3)
    assert f.evidence["fp32_share"] == pytest.approx(0.76, abs=0.01)
    assert f.evidence["fp32_from_op_dtypes_ns"] == 0  # every FP32 kernel name says so itself
    assert f.evidence["compute_capability_major"] == 9  # Kineto's deviceProperties


def test_bf16_step_is_unfused_elementwise_work(busy) -> None:
    """Once the GEMMs are bf16, eager elementwise/copy/norm/reduction kernels hold two thirds of
    the kernel time; the GPU waits on the host most of the steady state, so it is info and
    gpu-idle leads."""
    _, ids, folder, found = busy
    db = gunzipped_sqlite(BUSY / "nsys" / "h100_nsys2025.3_busy_train_bf16.sqlite.gz", folder)
    _, kernels = _nsys_steady(db)
    not_unfused = re.compile(
        r"gemm|nvjet|xmma|splitKreduce|sdpa|flash|fmha|dot_do_o|multi_tensor_apply|philox::unpack",
        re.IGNORECASE,
    )
    other, total = _share(kernels, not_unfused)
    matrix, _ = _share(
        kernels, re.compile(r"gemm|nvjet|xmma|splitKreduce|sdpa|flash|fmha|dot_do_o", re.IGNORECASE)
    )
    unfused = total - other
    assert unfused / total == pytest.approx(0.66, abs=0.01) and unfused > matrix
    mine = _by(found, ids["nsys_bf16"])
    f = mine["unfused-elementwise"]
    assert f.severity == "info" and f.evidence["unfused_ns"] == unfused and f.evidence["matrix_ns"] == matrix
    launches = sum(1 for n, _, _ in kernels if not not_unfused.search(n))
    assert f.evidence["launches"] == launches
    assert f.est_savings_ns == pytest.approx(f.evidence["unfused_busy_ns"] * 0.3, abs=1)
    assert f.evidence["unfused_busy_ns"] <= f.evidence["kernel_busy_ns"]
    ranked = [g.rule_id for g in found if g.report_id == ids["nsys_bf16"]]
    assert ranked.index("gpu-idle") < ranked.index("unfused-elementwise")
    # small-kernel-storm's saving is idle launch gaps, this one busy kernel time: both fit the span
    storm = mine["small-kernel-storm"].est_savings_ns or 0
    assert f.est_savings_ns + storm <= f.evidence["span_ns"]


def test_summary_line_has_the_kernel_mix(busy) -> None:
    con, ids, _, _ = busy
    text = to_text(summary(con, ids["nsys_fp32"]), width=200)
    line = next(x for x in text.splitlines() if "kernel time by class" in x)
    assert line.strip().startswith("kernel time by class (steady state): gemm 64.")
    assert re.search(r"gemm 64\.\d% \(fp32 64\.\d%\), attention 12\.\d% \(fp32 12\.\d%\), elementwise", line)


# --- shared real captures -------------------------------------------------------------------------


@pytest.mark.parametrize("opt", ["fused", "foreach"])
def test_realdata_kineto_train_is_fp32_matmul_first(workspace, opt: str) -> None:
    """The realdata training traces (~90% busy): before, no finding (fused) or only launch
    findings; the FP32 matmul finding now leads."""
    path = realdata("kineto", f"h100_torch2.11_train_{opt}.json.gz")
    _, kernels = _kineto(path)
    fp32, total = _share(kernels, FP32_GEMM, FP32_ATTENTION)
    rid = nsa.ingest(workspace, path).report_id
    found = findings(workspace, report_id=rid)
    f = next(f for f in found if f.rule_id == "fp32-matmul")
    assert f.evidence["fp32_share"] == pytest.approx(fp32 / total, rel=1e-3)
    assert fp32 / total == pytest.approx(0.76 if opt == "fused" else 0.74, abs=0.01)
    if opt == "fused":
        assert found[0] is f and f.severity == "critical"
    else:  # the foreach optimizer's launch storm is critical; FP32 matmul is next
        assert [g.rule_id for g in found][:2] == ["small-kernel-storm", "fp32-matmul"]


def test_realdata_transformer_train(workspace) -> None:
    """FP32 SIMT GEMMs, but the GPU idles 75% of the steady state: fp32-matmul is info there, the
    idle-time findings lead."""
    path = realdata("nsys", "h100_nsys2025.3_transformer_train.sqlite")
    db = sqlite3.connect(path)
    _, kernels = _nsys_steady(db)
    fp32, _ = _share(kernels, FP32_GEMM, FP32_ATTENTION)
    rid = nsa.ingest(workspace, path).report_id
    found = findings(workspace, report_id=rid)
    f = next(f for f in found if f.rule_id == "fp32-matmul")
    assert f.evidence["fp32_ns"] == fp32 and f.evidence["fp32_share"] == pytest.approx(0.66, abs=0.01)
    assert f.severity == "info"
    ranked = [g.rule_id for g in found]  # the idle-time findings (launch gaps, idle GPU) lead
    assert ranked.index("small-kernel-storm") < ranked.index("gpu-idle") < ranked.index("fp32-matmul")
    assert f.est_savings_ns <= f.evidence["kernel_busy_ns"] <= f.evidence["span_ns"]


@pytest.mark.parametrize(
    "name",
    [
        "a100_nsys2024.5_perlmutter_cloverleaf.sqlite",  # FP64 HPC stencils: no matrix math
        "h100x2_nsys2026.2_train_before.sqlite",  # bf16 GEMMs and flash attention
        "h100x2_nsys2026.2_train_after.sqlite",
    ],
)
def test_no_fp32_or_unfused_finding(workspace, name: str) -> None:
    path = realdata("nsys", name)
    rid = nsa.ingest(workspace, path).report_id
    fired = {f.rule_id for f in findings(workspace, report_id=rid)}
    assert not fired & {"fp32-matmul", "unfused-elementwise"}


def test_storm_leaves_the_gpu_idle_not_busy(workspace) -> None:
    """12,044 tiny elementwise kernels replayed by a CUDA graph, all of the kernel time unfused
    elementwise work, but 3% of the run: the GPU is idle, and the launch gaps are
    small-kernel-storm's; unfused-elementwise stays silent below kernel_mix_min_span_share."""
    path = realdata("nsys", "h100_nsys2025.3_storm_cudagraph.sqlite")
    db = sqlite3.connect(path)
    kernel_ns, first, last = db.execute(
        'SELECT sum("end" - start), min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL'
    ).fetchone()
    assert kernel_ns / (last - first) == pytest.approx(0.031, abs=0.002)
    rid = nsa.ingest(workspace, path).report_id
    fired = {f.rule_id for f in findings(workspace, report_id=rid)}
    assert "small-kernel-storm" in fired and "unfused-elementwise" not in fired
    rows = nsa.query(workspace, "kernel_classes", report_id=rid).fetchall()
    assert [(r[3], r[5], r[8]) for r in rows] == [("elementwise", False, kernel_ns)]


def test_hta_resnet_unfused(workspace) -> None:
    """HTA's ResNet rank: batch norm, ReLU/add and NCHW<->NHWC copies outweigh its TF32
    convolutions and GEMMs (45% against 25% of the kernel time)."""
    path = realdata("kineto", "hta_a100_rank0of2_nccl.json.gz")
    _, kernels = _kineto(path)
    unfused_pat = re.compile(
        r"bn_fw|bn_bw|elementwise_kernel|nchwToNhwc|nhwcToNchw|CatArray|reduce_kernel|max_pool|softmax|ReduceSplitK",
        re.IGNORECASE,
    )
    scudnn = re.compile(r"scudnn", re.IGNORECASE)  # a cuDNN convolution despite `relu` in its name
    unfused = sum(e - s for n, s, e in kernels if unfused_pat.search(n) and not scudnn.search(n))
    total = sum(e - s for _, s, e in kernels)
    rid = nsa.ingest(workspace, path).report_id
    f = next(f for f in findings(workspace, report_id=rid) if f.rule_id == "unfused-elementwise")
    assert f.evidence["unfused_share"] == pytest.approx(unfused / total, rel=1e-3)
    assert f.evidence["unfused_share"] == pytest.approx(0.45, abs=0.01)
    assert "channels_last" in f.recommendation  # its copies are layout transposes


def test_tensor_cores_idle_is_the_same_fix(workspace) -> None:
    """With GPU metrics both rules see the FP32 GEMMs: shown as one finding, one saving."""
    path = realdata("nsys", "h100_nsys2025.3_train_fused_gpumetrics.sqlite.gz")
    rid = nsa.ingest(workspace, path).report_id
    found = findings(workspace, report_id=rid)
    by = {f.rule_id: f for f in found}
    assert by["tensor-cores-idle"].same_saving_as == "fp32-matmul"
    _, same = next((g, s) for g, s in grouped(found) if g.rule_id == "fp32-matmul")
    assert [s.rule_id for s in same] == ["tensor-cores-idle"]
