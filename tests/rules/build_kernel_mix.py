"""Builders of the kernel-mix rule cases (fp32-matmul, unfused-elementwise): each case runs 10
rounds of kernels over 100 ms; `gap` spreads the rounds apart (an idle GPU)."""

from __future__ import annotations

from rules.build import kernel

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


def rounds(parts: list[tuple[str, int]], gap: int = 0, cc: str | None = "9.0") -> dict[str, list[dict]]:
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
