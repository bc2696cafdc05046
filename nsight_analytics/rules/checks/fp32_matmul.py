"""fp32-matmul: FP32 matrix math holds the busy GPU on a GPU with tensor cores (kernel names)."""

from __future__ import annotations

from typing import Any

from ...units import dur, pct
from ..context import Context, steady_evidence, steady_scope
from ..kernel_mix import MATRIX, MIN_SPAN_SHARE, Device, devices, short
from ..model import Finding, Threshold, rule, severity_for
from ..thresholds import FP32_MATMUL_SPEEDUP

_WHAT = {
    "gemm": "GEMMs on the FP32 FMA pipes",
    "conv": "convolutions on the FP32 FMA pipes",
    "attention": "attention in PyTorch's FP32 mem-efficient kernels",
}


@rule(
    "fp32-matmul",
    order=35,
    needs=("kernel",),
    queries=("kernel_classes", "utilization"),
    reads=("steps", "gpus"),
    severities=("info", "warning", "critical"),
    thresholds=(
        MIN_SPAN_SHARE,
        Threshold(
            "fp32_matmul_share",
            0.20,
            "fraction",
            "fp32-matmul fires when FP32 GEMMs and convolutions (no tensor cores) hold this share of the judged "
            "window's kernel time.",
        ),
        Threshold(
            "fp32_matmul_span_warning",
            0.20,
            "fraction",
            "FP32 matrix-math time as a share of the judged window's span that makes fp32-matmul a warning (else info).",
        ),
        Threshold(
            "fp32_matmul_span_critical",
            0.50,
            "fraction",
            "FP32 matrix-math share of the judged window's span that is critical.",
        ),
        FP32_MATMUL_SPEEDUP,
    ),
)
def fp32_matmul(ctx: Context, rid: int) -> list[Finding]:
    """FP32 matrix math holds much of the busy time on a GPU whose tensor cores would run it faster.

    Anti-pattern: GEMMs, convolutions and attention run at FP32 (nsa_kernel_math 'fp32', query
    `kernel_classes`): cuBLAS `..._f32f32_f32f32_f32_..._ffma` and CUTLASS `simt_sgemm` kernels
    on the FMA pipes, PyTorch's FP32 mem-efficient attention `fmha_cutlass[FB]_f32` (FP32
    accuracy through three TF32 MMAs per product). PyTorch keeps FP32 matmuls off tensor cores
    unless told otherwise (torch.backends.cuda.matmul.allow_tf32 is False by default), so a model
    trained in FP32 leaves most of a Volta / Ampere / Hopper GPU's matrix throughput unused. In
    PyTorch profiler traces a GEMM whose name states no precision counts as FP32 when the op that
    launched it had FP32 inputs. Silent on GPUs without tensor cores (compute capability below
    7.0 where the report records it), on FP64 codes (math 'fp64') and when FP32 GEMMs and
    convolutions, the math the TF32 switches move to tensor cores, hold less than
    fp32_matmul_share of the kernel time (a TF32 program whose attention alone is FP32 is not
    this finding), or while the FP32 matrix math fills less than kernel_mix_min_span_share of
    the window's span (a mostly idle GPU); once it fires, FP32 attention counts with the GEMMs,
    as bf16 speeds both up.
    Judged on the steady state (the whole run without steps), per GPU; the finding names the
    GPU with the most FP32 matrix-math time.

    Fix: TF32 for FP32 models: torch.set_float32_matmul_precision('high') (or
    torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True for
    convolutions); better, bf16 autocast (torch.autocast('cuda', dtype=torch.bfloat16)), which
    also moves scaled_dot_product_attention from the FP32 mem-efficient kernels, which the TF32
    switches leave alone, to flash attention. Outside PyTorch: cuBLAS
    CUBLAS_COMPUTE_32F_FAST_TF32, JAX jax.default_matmul_precision('tensorfloat32').

    est_savings_ns: the FP32 matrix-math time (as timeline time: scaled down by the kernels'
    overlap) x (1 - 1 / fp32_matmul_speedup). The default speed-up of 2 is conservative against
    the same transformer training step captured at three precisions on an H100
    (tests/data/busy/nsys/h100_nsys2025.3_busy_train_{fp32,tf32,bf16}): per step, cuBLAS/CUTLASS
    GEMMs took 12.4 ms in FP32, 2.6 ms in TF32 (4.7x) and 1.08 ms in bf16 (11.5x); attention
    2.34 ms in FP32 and TF32 alike, 0.39 ms in bf16 (6.0x); GEMMs + attention 14.8 ms -> 4.97 ms
    with TF32 only (3.0x) -> 1.47 ms in bf16 (10x). Severity follows the same time's share of
    the window's span: FP32 math on a mostly idle GPU is info, and where no kernel runs half the
    window the message says the saving waits for the idle time's fix.
    """
    window = ctx.steady(rid)
    gpus = _gpus(ctx, rid)
    best: tuple[float, Device, list[Any]] | None = None
    for d in devices(ctx, rid):
        major = gpus.get(d.device_id, (None, ""))[0]
        if major is not None and major < 7:
            continue  # no tensor cores to move to
        fp32 = [r for r in d.rows if r.kernel_class in MATRIX and r.math == "fp32"]
        fp32_ns = sum(int(r.kernel_ns) for r in fp32)
        simt_ns = sum(int(r.kernel_ns) for r in fp32 if r.kernel_class != "attention")
        if (
            simt_ns / d.kernel_ns < ctx["fp32_matmul_share"]
            or d.busy(fp32_ns) < ctx["kernel_mix_min_span_share"] * d.span_ns
        ):
            continue
        if best is None or d.busy(fp32_ns) > best[0]:
            best = (d.busy(fp32_ns), d, fp32)
    if best is None:
        return []
    busy_ns, d, fp32 = best
    fp32_ns = sum(int(r.kernel_ns) for r in fp32)
    share = fp32_ns / d.kernel_ns
    span_share = busy_ns / d.span_ns if d.span_ns else 0.0
    speedup = float(ctx["fp32_matmul_speedup"])
    savings = int(busy_ns * (1.0 - 1.0 / speedup)) if speedup > 1 else 0
    severity = severity_for(span_share, ctx["fp32_matmul_span_warning"], ctx["fp32_matmul_span_critical"])
    by_class: dict[str, int] = {}
    for r in fp32:
        by_class[r.kernel_class] = by_class.get(r.kernel_class, 0) + int(r.kernel_ns)
    ranked = sorted(fp32, key=lambda r: -int(r.kernel_ns))
    parts = [
        f"{_WHAT[r.kernel_class]} {pct(int(r.kernel_ns) / d.kernel_ns)} (led by {short(str(r.top_name))}, "
        f"{dur(r.top_ns)} in {r.top_kernels:,} launches)"
        for r in ranked
    ]
    from_ops = sum(int(r.math_ops_ns) for r in fp32)
    scope = steady_scope(window, ctx.steps_unknown(rid))
    major, gpu = gpus.get(d.device_id, (None, ""))
    message = (
        f"{pct(share)} of the GPU's kernel time is FP32 matrix math that tensor cores would run several times "
        f"faster: {dur(fp32_ns)} of {dur(d.kernel_ns)} {scope} on GPU {d.device_id}"
        + (f" ({gpu})" if gpu else "")
        + f", {pct(span_share)} of its span. By kind: "
        + "; ".join(parts)
        + "."
    )
    if from_ops:
        message += (
            f" {dur(from_ops)} of it is counted as FP32 from the input dtypes of the PyTorch ops that launched it "
            "(float): those kernel names do not state a precision."
        )
    if major is None:
        message += (
            " The report does not record the GPU's compute capability: tensor cores are assumed (Volta, compute "
            "capability 7.0, or newer)."
        )
    message += (
        f" Counting a {speedup:g}x speed-up (an H100 ran the same training step's GEMMs 4.7x faster in TF32 and "
        f"11.5x in bf16, its attention 6x in bf16) gives back about {dur(savings)}."
    )
    message += d.idle_note()
    recommendation = _recommendation(by_class)
    title = f"{pct(share)} of GPU kernel time is FP32 matmul without TF32/bf16 tensor cores" + (
        f" (led by {short(str(ranked[0].top_name), 50)})" if ranked else ""
    )
    ev: dict[str, Any] = {
        "phase": "steady" if window is not None else "run",
        "device_id": d.device_id,
        "compute_capability_major": major,
        "kernel_ns": d.kernel_ns,
        "kernel_busy_ns": d.kernel_busy_ns,
        "span_ns": d.span_ns,
        "fp32_ns": fp32_ns,
        "fp32_share": share,
        "fp32_gemm_conv_share": sum(n for c, n in by_class.items() if c != "attention") / d.kernel_ns,
        "fp32_busy_ns": int(busy_ns),
        "fp32_span_share": span_share,
        "fp32_ns_by_class": by_class,
        "fp32_from_op_dtypes_ns": from_ops,
        "speedup": speedup,
        "time_at_stake_ns": int(busy_ns),
        "top_kernels": [
            {
                "class": r.kernel_class,
                "name": str(r.top_name),
                "kernel_ns": int(r.top_ns),
                "kernels": int(r.top_kernels),
            }
            for r in ranked
        ],
        **steady_evidence(window),
    }
    return [Finding("fp32-matmul", severity, rid, title, message, recommendation, ev, savings)]


def _recommendation(by_class: dict[str, int]) -> str:
    text = (
        "Let FP32 matrix math use tensor cores: TF32 keeps the FP32 model and its code "
        "(torch.set_float32_matmul_precision('high'), or torch.backends.cuda.matmul.allow_tf32 = True"
        + ("; torch.backends.cudnn.allow_tf32 = True for the convolutions" if "conv" in by_class else "")
        + "); better, train in bf16 (torch.autocast('cuda', dtype=torch.bfloat16) around the forward pass and "
        "the loss), which doubles the tensor-core rate again and halves the bytes moved."
    )
    if "attention" in by_class:
        text += (
            " The TF32 switches leave attention as it is: FP32 scaled_dot_product_attention runs the "
            "mem-efficient fmha_cutlass*_f32 kernels; bf16 or fp16 inputs let it run flash attention."
        )
    return text + (
        " Outside PyTorch: cuBLAS CUBLAS_COMPUTE_32F_FAST_TF32, JAX jax.default_matmul_precision('tensorfloat32')."
        " Check the loss curve once after the switch."
    )


def _gpus(ctx: Context, rid: int) -> dict[int, tuple[int | None, str]]:
    """{device: (compute capability major or None, 'NVIDIA H100 80GB HBM3, compute capability
    9.0')} for the devices the report records (nsys TARGET_INFO_GPU, Kineto deviceProperties)."""
    rows = ctx.sql(
        "gpu_names",
        "SELECT report_id, device_id, any_value(compute_capability) AS cc, any_value(name) AS name FROM gpus "
        "WHERE $rid IS NULL OR report_id = $rid GROUP BY ALL",
        rid,
    )
    out: dict[int, tuple[int | None, str]] = {}
    for r in rows:
        major = str(r.cc or "").split(".")[0]
        text = ", ".join(str(x) for x in (r.name, f"compute capability {r.cc}" if r.cc else None) if x)
        out[int(r.device_id)] = (int(major) if major.isdigit() else None, text)
    return out
