"""tensor-cores-idle: a matmul-heavy steady state leaves the tensor cores idle (GPU metrics)."""

from __future__ import annotations

from typing import Any

from ...units import clip, dur, pct
from ..context import Context, steady_evidence, steady_scope
from ..gpu_metrics import kernel_math, window_text
from ..kernel_mix import MATRIX
from ..model import Finding, Threshold, rule

_FP32_FIX = (
    "The matrix multiplies run in plain FP32 ({names}), which tensor cores do not execute: "
    "let them use TF32 (PyTorch: torch.set_float32_matmul_precision('high'), or "
    "torch.backends.cuda.matmul.allow_tf32 = True and torch.backends.cudnn.allow_tf32 = True), or better "
    "run the model in bf16 (torch.autocast('cuda', dtype=torch.bfloat16), bf16 weights), which halves the "
    "memory traffic too; check the loss curve once after the switch."
)
_SHAPE_FIX = (
    "The matrix multiplies already use a tensor-core precision ({names}) yet keep the tensor cores idle: "
    "the problems are too small or misaligned for them. Make M, N and K (batch x sequence, hidden and "
    "head sizes, vocabulary) multiples of 8 for FP16/BF16 (16 for FP8, 4 for TF32), batch more work per "
    "GEMM (larger batches, fused QKV projections, grouped GEMMs) and use channels_last for convolutions."
)


@rule(
    "tensor-cores-idle",
    order=72,
    needs=("gpu_metrics", "kernel"),
    queries=("gpu_metrics_summary", "gpu_metrics_by_kernel"),
    reads=("kernel_names", "steps"),
    severities=("warning",),
    thresholds=(
        Threshold(
            "tensor_gemm_share",
            0.30,
            "fraction",
            "Share of the steady state's kernel time in matrix-multiply/attention kernels that makes it matmul-heavy.",
        ),
        Threshold(
            "tensor_active_max_pct",
            20.0,
            "%",
            "tensor-cores-idle fires when Tensor Active over the GEMM kernels' time stays below this.",
        ),
    ),
)
def tensor_cores_idle(ctx: Context, rid: int) -> list[Finding]:
    """Matrix multiplies dominate the steady state but the tensor cores stay idle (GPU metrics).

    Anti-pattern: most kernel time goes to GEMM / attention / convolution kernels
    (nsa_kernel_class: names with gemm, xmma, cublas, nvjet, fmha, flash, fprop...), yet nsys's
    GPU metrics sampling shows Tensor Active far below what such kernels reach on tensor cores:
    the GEMMs run in FP32 on the CUDA cores (`simt`, `sgemm`, `ffma` kernels), or in a
    tensor-core precision on shapes too small or misaligned to keep the tensor pipes fed. Silent
    when the report has no Tensor Active samples (nsys ran without --gpu-metrics-devices, or the
    GPU has no such metric), when GEMMs hold less than tensor_gemm_share of the kernel time (an
    elementwise-bound program has no use for tensor cores), or when Tensor Active over the GEMM
    kernels reaches tensor_active_max_pct.

    Fix: depends on the GEMMs' precision, read from their kernel names (nsa_kernel_math): FP32
    GEMMs (the fp32-matmul finding, with its estimate, is the same fix): enable TF32
    or move to bf16 autocast; FP16/BF16/TF32 GEMMs: pad M, N, K to multiples of 8 (16 for FP8)
    and give each GEMM more work.

    est_savings_ns: None: what the GEMMs gain on tensor cores depends on their shapes; the
    finding states their time, the most any change to them can give back.
    """
    window = ctx.steady(rid)
    scope = "steady" if window is not None else "run"
    summary = [r for r in ctx.query("gpu_metrics_summary", rid, scope=scope) if r.metric == "tensor_active"]
    if not summary:
        return []
    kernels = ctx.query("gpu_metrics_by_kernel", rid, metrics="tensor_active", phase="steady")
    total_ns = sum(int(r.kernel_ns) for r in kernels)
    kinds = kernel_math(ctx, rid)

    def precision(name: str) -> str:
        return kinds.get(name, ("other", None))[1] or "unknown"

    gemms = [r for r in kernels if kinds.get(str(r.name), ("other", None))[0] in MATRIX]
    gemm_ns = sum(int(r.kernel_ns) for r in gemms)
    if not total_ns or gemm_ns / total_ns < ctx["tensor_gemm_share"]:
        return []
    sampled = sum(int(r.sampled_ns) for r in gemms)
    tensor = sum(float(r.average) * int(r.sampled_ns) for r in gemms) / sampled if sampled else 0.0
    if tensor >= ctx["tensor_active_max_pct"]:
        return []
    by_precision: dict[str, int] = {}
    for r in gemms:
        by_precision[precision(str(r.name))] = by_precision.get(precision(str(r.name)), 0) + int(r.kernel_ns)
    ranked = sorted(by_precision.items(), key=lambda kv: -kv[1])
    fp32_ns = by_precision.get("fp32", 0)
    top = sorted(gemms, key=lambda r: -int(r.kernel_ns))[:3]
    names = "; ".join(clip(str(r.name), 70) for r in top)
    s = summary[0]
    where = window_text(int(s.start_ns), int(s.end_ns))
    sc = steady_scope(window, ctx.steps_unknown(rid))
    message = (
        f"{sc[0].upper()}{sc[1:]}, {where}: "
        f"matrix-multiply and attention kernels ran {dur(gemm_ns)} of {dur(total_ns)} of kernel time "
        f"({pct(gemm_ns / total_ns)}), yet Tensor Active averaged {tensor:.1f}% while they ran "
        f"({s.average:.1f}% over the whole {scope} span, peak sample {s.peak:.0f}%). By precision, from the "
        "kernel names: " + ", ".join(f"{p} {dur(ns)}" for p, ns in ranked) + f". Largest: {names}."
    )
    largest = f"the largest: {clip(str(top[0].name), 60)}"
    fp32 = fp32_ns >= gemm_ns / 2
    recommendation = (_FP32_FIX if fp32 else _SHAPE_FIX).format(names=largest)
    ev: dict[str, Any] = {
        "scope": scope,
        "start_ns": int(s.start_ns),
        "end_ns": int(s.end_ns),
        "device_id": int(s.device_id),
        "tensor_active_pct": float(s.average),
        "tensor_active_peak_pct": float(s.peak),
        "gemm_tensor_active_pct": tensor,
        "gemm_ns": gemm_ns,
        "kernel_ns": total_ns,
        "gemm_share": gemm_ns / total_ns,
        "gemm_ns_by_precision": dict(ranked),
        "top_gemms": [
            {
                "name": str(r.name),
                "kernels": int(r.kernels),
                "kernel_ns": int(r.kernel_ns),
                "precision": precision(str(r.name)),
                "tensor_active_pct": float(r.average),
            }
            for r in top
        ],
        **steady_evidence(window),
    }
    title = (
        f"Tensor cores idle: {pct(gemm_ns / total_ns)} of kernel time in GEMMs at {tensor:.1f}% Tensor Active"
    )
    # FP32 GEMMs: fp32-matmul says the same from the kernel names, with an estimate: one fix
    same = "fp32-matmul" if fp32 else None
    return [
        Finding(
            "tensor-cores-idle", "warning", rid, title, message, recommendation, ev, None, same_saving_as=same
        )
    ]
