"""Rule cases of fp32-matmul and unfused-elementwise, in the format of tests/rules/cases.py:
canonical rows in, findings (rule id, severity) out. Each case runs 10 rounds of kernels over
100 ms; `gap` spreads the rounds apart (an idle GPU)."""

from __future__ import annotations

from typing import Any

from rules.cases import MS, kernel

RULES = ["fp32-matmul", "unfused-elementwise"]

SGEMM = "ampere_sgemm_128x64_nn"
FFMA = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
TF32 = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
BF16 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
DGEMM = "void cutlass::Kernel2<cutlass_80_simt_dgemm_128x128_8x4_nn_align1>(T1::Params)"
FP32_ATTENTION = (
    "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>::Params)"
)
ADD = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, std::array<char *, (unsigned long)3>>(int, T2, T3)"
SUM = "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>(T3)"
TRITON = "triton_poi_fused_add_mul_relu_0"
FLASH = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::bfloat16_t>>(Flash_fwd_params)"


def _rounds(parts: list[tuple[str, int]], gap: int = 0, cc: str | None = "9.0") -> dict[str, list[dict]]:
    """10 rounds of the kernels `parts` ((name, ns) back to back), `gap` ns of idle GPU after
    each; one GPU of compute capability `cc` (None: the report records no GPU)."""
    ks, t = [], 0
    for _ in range(10):
        for name, ns in parts:
            ks.append(kernel(t, ns, name))
            t += ns
        t += gap
    rows: dict[str, list[dict]] = {"kernels": ks}
    if cc is not None:
        rows["gpus"] = [{"report_id": 1, "device_id": 0, "name": "GPU", "compute_capability": cc}]
    return rows


KERNEL_MIX_CASES: list[dict[str, Any]] = [
    {
        "id": "fp32-matmul: FP32 SGEMMs fill 80% of a busy GPU",
        "rules": RULES,
        "rows": _rounds([(SGEMM, 5 * MS), (FFMA, 3 * MS), (ADD, 2 * MS)]),
        "expect": [("fp32-matmul", "critical")],
    },
    {
        "id": "fp32-matmul: the same on a mostly idle GPU is info",
        "rules": RULES,
        "rows": _rounds([(SGEMM, 5 * MS), (FFMA, 3 * MS), (ADD, 2 * MS)], gap=40 * MS),
        "expect": [("fp32-matmul", "info")],
    },
    {
        "id": "fp32-matmul: a GPU the report does not describe is assumed to have tensor cores",
        "rules": RULES,
        "rows": _rounds([(SGEMM, 8 * MS), (ADD, 2 * MS)], cc=None),
        "expect": [("fp32-matmul", "critical")],
    },
    {
        "id": "fp32-matmul silent: no tensor cores before compute capability 7.0",
        "rules": RULES,
        "rows": _rounds([(SGEMM, 8 * MS), (ADD, 2 * MS)], cc="6.0"),
        "expect": [],
    },
    {
        "id": "fp32-matmul silent: TF32 and bf16 GEMMs",
        "rules": RULES,
        "rows": _rounds([(TF32, 4 * MS), (BF16, 4 * MS), (ADD, 2 * MS)]),
        "expect": [],
    },
    {
        "id": "fp32-matmul silent: a TF32 program whose attention alone is FP32",
        "rules": RULES,
        "rows": _rounds([(TF32, 5 * MS), (FP32_ATTENTION, 4 * MS), (ADD, 1 * MS)]),
        "expect": [],
    },
    {
        "id": "fp32-matmul silent: FP64 GEMMs (HPC)",
        "rules": RULES,
        "rows": _rounds([(DGEMM, 8 * MS), (ADD, 2 * MS)]),
        "expect": [],
    },
    {
        "id": "fp32-matmul silent: FP32 GEMMs 15% of the kernel time",
        "rules": ["fp32-matmul"],
        "rows": _rounds([(SGEMM, int(1.5 * MS)), (BF16, int(8.5 * MS))]),
        "expect": [],
    },
    {
        "id": "fp32-matmul threshold lowered: 15% fires at 10%",
        "rules": ["fp32-matmul"],
        "rows": _rounds([(SGEMM, int(1.5 * MS)), (BF16, int(8.5 * MS))]),
        "config": {"fp32_matmul_share": 0.10},
        "expect": [("fp32-matmul", "info")],
    },
    {
        "id": "unfused-elementwise: eager elementwise and reductions fill a busy GPU",
        "rules": RULES,
        "rows": _rounds([(ADD, 5 * MS), (SUM, 2 * MS), (BF16, 3 * MS)]),
        "expect": [("unfused-elementwise", "warning")],
    },
    {
        "id": "unfused-elementwise: the same on a mostly idle GPU is info",
        "rules": RULES,
        "rows": _rounds([(ADD, 5 * MS), (SUM, 2 * MS), (BF16, 3 * MS)], gap=40 * MS),
        "expect": [("unfused-elementwise", "info")],
    },
    {
        "id": "unfused-elementwise: an LLM step, elementwise work ahead of the GEMMs, flash attention beside",
        "rules": RULES,
        "rows": _rounds([(ADD, 3 * MS), (SUM, 12 * MS // 10), (BF16, 35 * MS // 10), (FLASH, 23 * MS // 10)]),
        "expect": [("unfused-elementwise", "warning")],
    },
    {
        "id": "unfused-elementwise silent: GEMMs take more than the elementwise work",
        "rules": RULES,
        "rows": _rounds([(ADD, 4 * MS), (BF16, 6 * MS)]),
        "expect": [],
    },
    {
        "id": "unfused-elementwise silent: the elementwise work is compiled (Triton) already",
        "rules": RULES,
        "rows": _rounds([(TRITON, 7 * MS), (BF16, 3 * MS)]),
        "expect": [],
    },
]
