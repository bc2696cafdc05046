"""Thresholds that several rules read: declared once here, listed by each rule that uses them.

A threshold used by one rule is declared in that rule's module.
"""

from __future__ import annotations

from .model import Threshold

HEAVY_KERNEL_SHARE = Threshold(
    "heavy_kernel_share",
    0.05,
    "fraction",
    "A kernel is heavy when it holds at least this share of the report's kernel time.",
)
MAX_KERNEL_FINDINGS = Threshold(
    "max_kernel_findings", 3, "count", "At most this many kernels per ncu rule and report."
)
# The straggler test (rules/runs.py): straggler-rank reports the straggler; exposed-communication,
# load-imbalance and scaling-loss ask whether what they found is the straggler's doing.
STRAGGLER_LAST_SHARE = Threshold(
    "straggler_last_share",
    0.5,
    "fraction",
    "A rank is a straggler when it arrives last at at least this share of a run's collectives ...",
)
STRAGGLER_LATE_SHARE = Threshold(
    "straggler_late_share",
    0.05,
    "fraction",
    "... and arrives late by at least this share of its steady step, on average per step.",
)
# fp32-matmul (timeline) and fp32-matmul-kernel (ncu): what moving FP32 matrix math to tensor
# cores is counted to give, one number for both.
FP32_MATMUL_SPEEDUP = Threshold(
    "fp32_matmul_speedup",
    2.0,
    "ratio",
    "Speed-up counted on for FP32 matrix math moved to TF32 or bf16 tensor cores "
    "(measured on an H100: GEMMs 4.7x in TF32, 11.5x in bf16; attention 6.0x in bf16).",
)
