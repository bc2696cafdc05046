"""unfused-elementwise: most of the busy GPU time goes to unfused elementwise, copy and reduction kernels."""

from __future__ import annotations

from typing import Any

from ...units import count, dur, pct
from ..context import Context, steady_evidence, steady_scope
from ..kernel_mix import CLASS_WORDS, FUSIBLE, MATRIX, MIN_SPAN_SHARE, Device, devices, short
from ..model import Finding, Threshold, rule, severity_for

# What the unfused work is weighed against: the GEMMs and convolutions.
GEMM_CONV = ("gemm", "conv")


@rule(
    "unfused-elementwise",
    order=37,
    needs=("kernel",),
    queries=("kernel_classes", "utilization"),
    reads=("steps",),
    severities=("info", "warning"),
    thresholds=(
        MIN_SPAN_SHARE,
        Threshold(
            "unfused_share",
            0.40,
            "fraction",
            "unfused-elementwise fires when eager elementwise, copy/cast, reduction, norm and softmax kernels hold "
            "this share of the judged window's kernel time (and more than GEMMs and convolutions).",
        ),
        Threshold(
            "unfused_span_warning",
            0.25,
            "fraction",
            "Unfused elementwise time as a share of the judged window's span that makes the finding a warning (else info).",
        ),
        Threshold(
            "unfused_fusion_gain",
            0.30,
            "fraction",
            "Share of the unfused kernel time unfused-elementwise counts fusion to give back (torch.compile took 51% "
            "off it on an H100).",
        ),
    ),
)
def unfused_elementwise(ctx: Context, rid: int) -> list[Finding]:
    """Most of the GPU's busy time goes to unfused elementwise work, not to matrix math.

    Anti-pattern: eager PyTorch (or any framework op by op) runs each pointwise op, cast, copy,
    reduction, norm and softmax as a kernel of its own (nsa_kernel_class elementwise, copy,
    reduction, norm, softmax; not the kernels a fusing compiler generated: Triton triton_poi_ /
    triton_red_ / triton_per_, nvFuser, XLA fusions). Each reads its inputs from and writes its
    output to device memory, so a chain of k ops moves its tensors k times where one fused
    kernel moves them once; on LLM and vision training steps this memory traffic outweighs the
    GEMMs. Silent when such kernels hold less than unfused_share of the kernel time of the
    judged window (the steady state; the whole run without steps), no more than the GEMMs and
    convolutions do (attention is left out of that comparison: an LLM step whose elementwise
    work outweighs its GEMMs is unfused whatever its attention takes), or less than kernel_mix_min_span_share of the window's span
    (a mostly idle GPU); the finding names the GPU with the most such time. The
    launch gaps between many short kernels are small-kernel-storm's (idle time); this finding
    counts the kernels' own busy time, so the two estimates do not overlap.

    Fix: compile the step: torch.compile(model) (or the training step) lets Inductor fuse the
    pointwise chains, reductions, norms and casts into a few Triton kernels. Where compiling is
    not possible, use fused kernels: the fused optimizers (torch.optim.AdamW(..., fused=True)),
    fused layer norm / RMSNorm and bias+activation kernels (Apex, Transformer Engine, Liger),
    F.scaled_dot_product_attention instead of softmax(QK^T)V by hand; remove needless copies and
    casts (.contiguous(), .float() round trips, NCHW<->NHWC transposes: channels_last).

    est_savings_ns: unfused_fusion_gain (30%) of the unfused kernel time (as timeline time:
    scaled down by the kernels' overlap), within the window's busy time. Measured on an H100
    with the model and step of fixtures/captures/busy_train.py in bf16, eager and under
    torch.compile (PyTorch 2.11; kernel times from the PyTorch profiler over 5 steps): those
    kernels took 3.08 ms per step eager and 1.51 ms compiled (Triton kernels 1.46 ms, eager
    leftovers 0.05 ms), 51% less. 30% is taken because short chains, and reductions that must
    stay separate kernels, gain less than a transformer block. Severity follows the unfused
    time's share of the window's span: on a mostly idle GPU the idle time matters more
    (gpu-idle), and where no kernel runs half the window the message says so.
    """
    window = ctx.steady(rid)
    best: tuple[float, Device] | None = None
    for d in devices(ctx, rid):
        unfused = _unfused_ns(d)
        gemms = sum(int(r.kernel_ns) for r in d.rows if r.kernel_class in GEMM_CONV)
        if unfused / d.kernel_ns < ctx["unfused_share"] or unfused <= gemms:
            continue
        if d.busy(unfused) < ctx["kernel_mix_min_span_share"] * d.span_ns:
            continue  # a mostly idle GPU: its few kernels are not where the time goes
        if best is None or d.busy(unfused) > best[0]:
            best = (d.busy(unfused), d)
    if best is None:
        return []
    busy_ns, d = best
    rows = [r for r in d.rows if r.kernel_class in FUSIBLE and not r.fused]
    unfused_ns = _unfused_ns(d)
    launches = sum(int(r.kernels) for r in rows)
    matrix_ns = sum(int(r.kernel_ns) for r in d.rows if r.kernel_class in MATRIX)
    fused_ns = sum(int(r.kernel_ns) for r in d.rows if r.fused)
    share = unfused_ns / d.kernel_ns
    span_share = busy_ns / d.span_ns if d.span_ns else 0.0
    savings = int(busy_ns * float(ctx["unfused_fusion_gain"]))
    severity = severity_for(span_share, ctx["unfused_span_warning"], 2.0)
    by_class: dict[str, dict[str, Any]] = {}
    for r in rows:
        c = by_class.setdefault(r.kernel_class, {"kernel_ns": 0, "kernels": 0, "names": 0, "top": (0, "")})
        c["kernel_ns"] += int(r.kernel_ns)
        c["kernels"] += int(r.kernels)
        c["names"] += int(r.names)
        c["top"] = max(c["top"], (int(r.top_ns), str(r.top_name)))
    ranked = sorted(by_class.items(), key=lambda kv: -kv[1]["kernel_ns"])
    mix = "; ".join(
        f"{CLASS_WORDS[c]} {pct(v['kernel_ns'] / d.kernel_ns)} ({v['names']} kernel name{'s' if v['names'] > 1 else ''}, "
        f"{count(v['kernels'])} launches, avg {dur(v['kernel_ns'] / v['kernels'])})"
        for c, v in ranked
        if v["kernel_ns"] >= 0.01 * d.kernel_ns  # the mix, not every last kernel (evidence has all)
    )
    scope = steady_scope(window, ctx.steps_unknown(rid))
    lead = (
        "Most of the GPU's kernel time is unfused elementwise work"
        if share >= 0.5
        else "More of the GPU's kernel time goes to unfused elementwise work than to GEMMs"
    )
    message = (
        f"{lead}: {pct(share)} of the kernel time ({dur(unfused_ns)} of {dur(d.kernel_ns)}) {scope} on GPU "
        f"{d.device_id}, {pct(span_share)} of its span, goes to {count(launches)} launches of unfused elementwise, "
        f"copy and reduction kernels averaging {dur(unfused_ns / launches)}: {mix}. GEMMs, attention and "
        f"convolutions take {pct(matrix_ns / d.kernel_ns)}."
    )
    if fused_ns:
        message += (
            f" Kernels a compiler already fused (Triton, nvFuser, XLA) take {pct(fused_ns / d.kernel_ns)}: "
            "the eager ones run outside the compiled region."
        )
    top_ns, top_name = max(v["top"] for v in by_class.values())
    message += (
        f" The largest kernel: {short(top_name, 100)} ({dur(top_ns)}). Fusing them counts on "
        f"{pct(float(ctx['unfused_fusion_gain']))} of that time: about {dur(savings)}."
    )
    message += d.idle_note()
    recommendation = _recommendation(
        by_class,
        compiled=fused_ns > 0,
        fused_optimizer=any(r.kernel_class == "optimizer" and "Fused" in str(r.top_name) for r in d.rows),
        convolutions=any(r.kernel_class == "conv" for r in d.rows),
    )
    title = (
        f"{pct(share)} of GPU kernel time is unfused elementwise work ({count(launches)} kernels, avg "
        f"{dur(unfused_ns / launches)})"
    )
    ev: dict[str, Any] = {
        "phase": "steady" if window is not None else "run",
        "device_id": d.device_id,
        "kernel_ns": d.kernel_ns,
        "kernel_busy_ns": d.kernel_busy_ns,
        "span_ns": d.span_ns,
        "unfused_ns": unfused_ns,
        "unfused_share": share,
        "unfused_busy_ns": int(busy_ns),
        "unfused_span_share": span_share,
        "launches": launches,
        "avg_ns": unfused_ns / launches,
        "matrix_ns": matrix_ns,
        "fused_ns": fused_ns,
        "fusion_gain": float(ctx["unfused_fusion_gain"]),
        "time_at_stake_ns": int(busy_ns),
        "by_class": {
            c: {
                "kernel_ns": v["kernel_ns"],
                "kernels": v["kernels"],
                "names": v["names"],
                "top_name": v["top"][1],
            }
            for c, v in ranked
        },
        **steady_evidence(window),
    }
    return [Finding("unfused-elementwise", severity, rid, title, message, recommendation, ev, savings)]


def _unfused_ns(d: Device) -> int:
    return sum(int(r.kernel_ns) for r in d.rows if r.kernel_class in FUSIBLE and not r.fused)


def _recommendation(
    by_class: dict[str, dict[str, Any]], compiled: bool, fused_optimizer: bool, convolutions: bool
) -> str:
    text = (
        "Part of the program is compiled already: bring the eager code around it into the compiled region "
        "(torch.compile the whole training step, and look for graph breaks with TORCH_LOGS=graph_breaks)."
        if compiled
        else "Compile the step: torch.compile(model) (or the whole training step) fuses the pointwise chains, "
        "reductions, norms and casts into a few Triton kernels."
    )
    fused = ["fused layer norm / RMSNorm and bias+activation kernels (Apex, Transformer Engine, Liger)"]
    if not fused_optimizer:
        fused.insert(0, "fused optimizers (torch.optim.AdamW(..., fused=True))")
    if "softmax" in by_class:
        fused.append("F.scaled_dot_product_attention instead of a hand-written softmax(QK^T)V")
    text += " Without a compiler, use fused kernels: " + ", ".join(fused) + "."
    if "copy" in by_class:
        text += (
            " Copies and casts are work of their own: drop needless .contiguous() calls and dtype round trips "
            "(autocast casts FP32 weights again on every forward; torch.compile folds casts into their consumers)"
            + (", and use channels_last for convolutions (no NCHW<->NHWC transposes)" if convolutions else "")
            + "."
        )
    return text
