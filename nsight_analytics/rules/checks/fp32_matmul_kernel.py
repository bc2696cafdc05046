"""fp32-matmul-kernel: a heavy matrix-math kernel runs FP32 on the FMA pipe, not on tensor cores (ncu)."""

from __future__ import annotations

from ...units import dur, pct
from .. import ncu
from ..context import Context
from ..model import Finding, rule
from ..thresholds import FP32_MATMUL_SPEEDUP, HEAVY_KERNEL_SHARE, MAX_KERNEL_FINDINGS

_FIX = {
    "gemm": (
        "Let FP32 matmuls run on tensor cores: PyTorch torch.set_float32_matmul_precision('high') "
        "(or torch.backends.cuda.matmul.allow_tf32 = True) uses TF32 for them; JAX "
        "jax.default_matmul_precision('tensorfloat32'). Better, run the model in bf16 "
        "(torch.autocast('cuda', dtype=torch.bfloat16), bf16 weights), which doubles the tensor-core rate "
        "again and halves the bytes moved. Check the loss curve once after the switch."
    ),
    "conv": (
        "Let FP32 convolutions run on tensor cores: torch.backends.cudnn.allow_tf32 = True (PyTorch's default: "
        "something in the program turned it off), or bf16 autocast (torch.autocast('cuda', "
        "dtype=torch.bfloat16)) with channels_last memory format."
    ),
    "attention": (
        "FP32 attention runs PyTorch's memory-efficient kernel (FP32 on the FMA pipe, or from Ampere on three "
        "TF32 tensor-core products per FP32 product), and the TF32 switches do not change that: run attention "
        "in bf16 or fp16 (torch.autocast('cuda', dtype=torch.bfloat16)) so scaled_dot_product_attention picks "
        "FlashAttention."
    ),
}


@rule(
    "fp32-matmul-kernel",
    order=45,
    needs=("ncu_metrics",),
    queries=("bottleneck", "kernel_weights"),
    reads=("ncu_kernels",),
    severities=("warning",),
    thresholds=(HEAVY_KERNEL_SHARE, MAX_KERNEL_FINDINGS, FP32_MATMUL_SPEEDUP),
)
def fp32_matmul_kernel(ctx: Context, rid: int) -> list[Finding]:
    """A heavy matrix-math kernel runs in FP32 on the FMA pipe, leaving the tensor cores idle.

    Anti-pattern: a GEMM or convolution kernel (nsa_kernel_class) does FP32 math on the CUDA
    cores: its name says SIMT / FFMA FP32 (nsa_kernel_math 'fp32': `*_sgemm_*`,
    `f32f32_f32f32_f32_*ffma*`) and ncu's tensor pipe, where measured, stays below 1% of peak; or
    its name does not say and the pipes do (tensor idle, FMA pipe at 20% or more, query
    `bottleneck`). FP32 attention (`fmha_cutlass*_f32`, PyTorch's memory-efficient kernel) counts
    whatever its tensor pipe shows: from Ampere on it builds each FP32 product from three TF32
    tensor-core products, and bf16 would run FlashAttention instead. Such a kernel can sit near its FP32 peak, where occupancy, stall
    and roofline advice would only polish the wrong engine: the other ncu rules leave it to this
    one. Tensor cores run the same matmul as TF32 at 7-8x the FP32 rate on A100 and H100, bf16 at
    twice that.

    Fix: run FP32 matmuls on tensor cores: torch.set_float32_matmul_precision('high') /
    torch.backends.cuda.matmul.allow_tf32 (convolutions: torch.backends.cudnn.allow_tf32), or
    better bf16 autocast; attention in bf16/fp16 so FlashAttention runs.

    The finding's advice is the paragraph for the kernel's class (gemm, conv, attention).

    est_savings_ns: time at stake x (1 - 1 / fp32_matmul_speedup), the speed-up the timeline rule
    fp32-matmul counts on too (default 2: conservative against the 4.7x TF32 and 11.5x bf16 an
    H100 gave the same training step's GEMMs, and the 6x bf16 gave its attention).
    """
    import pandas as pd

    per = ncu.bottleneck_by_kernel(ctx, rid)
    if per is None:
        return []
    per = per[per.apply(ncu.fp32_matmul, axis=1).astype(bool)]
    if per.empty:
        return []
    cands = ncu.heavy(ctx, rid).merge(per, on=["report_id", "name"]).head(int(ctx["max_kernel_findings"]))
    out = []
    for _, r in cands.iterrows():
        stake_text, ev = ncu.stake(r)
        ev.update(ncu.units_evidence(r))
        ev["share"] = float(r["share"]) if pd.notna(r["share"]) else None
        ev["cc"] = r["cc"] if isinstance(r["cc"], str) else None
        tensor_busy = pd.notna(r["tensor_pct"]) and r["tensor_pct"] >= 1.0
        if tensor_busy:  # FP32 attention emulated on tensor cores (3xTF32)
            engine = (
                f"in FP32 through three TF32 tensor-core products each: tensor pipe {r['tensor_pct']:.0f}% of "
                "peak, no FlashAttention"
            )
        elif pd.notna(r["fma_pct"]):
            tensor = f"{r['tensor_pct']:.1f}%" if pd.notna(r["tensor_pct"]) else "n/a"
            engine = f"on the FMA pipe, no tensor cores: FMA pipe {r['fma_pct']:.0f}% of peak, tensor pipe {tensor}"
        elif pd.notna(r["compute_pct"]):
            engine = (
                f"no tensor cores by its name (FP32 SIMT/FFMA): SM throughput {r['compute_pct']:.0f}% of peak"
            )
        else:
            engine = "no tensor cores by its name (FP32 SIMT/FFMA)"
        share = f", {pct(r['share'])} of this ncu report's kernel time" if pd.notna(r["share"]) else ""
        message = (
            f"{ncu.short(r['name'])}: FP32 {_WHAT[r['kernel_class']]} {engine}. "
            f"It holds {stake_text}{share if pd.notna(r['nsys_ns']) else ''}."
        )
        speedup = float(ctx["fp32_matmul_speedup"])
        saving = round(float(r["time_at_stake_ns"]) * (1.0 - 1.0 / speedup)) if speedup > 1 else None
        if saving is not None:
            fix = (
                "bf16 with FlashAttention"
                if r["kernel_class"] == "attention"
                else "TF32 or bf16 tensor cores"
            )
            message += (
                f" Counting a {speedup:g}x speed-up on {fix} (an H100 ran a training step's GEMMs 4.7x faster in "
                f"TF32 and 11.5x in bf16, its attention 6x in bf16), it would take {dur(r['time_at_stake_ns'] - saving)} "
                f"instead of {dur(r['time_at_stake_ns'])}."
            )
            ev["speedup"] = speedup
        without = "FlashAttention" if r["kernel_class"] == "attention" else "tensor cores"
        title = f"FP32 {_WHAT[r['kernel_class']]} without {without}: {ncu.short(r['name'], 60)}" + (
            f" ({pct(r['share'])} of the ncu time)" if pd.notna(r["share"]) else ""
        )
        rec = _FIX[r["kernel_class"]]
        out.append(Finding("fp32-matmul-kernel", "warning", rid, title, message, rec, ev, saving))
    return out


_WHAT = {"gemm": "matrix multiply", "conv": "convolution", "attention": "attention"}
