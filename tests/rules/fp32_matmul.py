"""Cases of fp32-matmul: 10 rounds of kernels (rules.build_kernel_mix.rounds)."""

from __future__ import annotations

from typing import Any

from rules.build_kernel_mix import ADD, BF16, DGEMM, FFMA, FP32_ATTENTION, RULES, SGEMM, TF32, rounds

MS = 1_000_000
SPEEDUP = 2.0  # the default fp32_matmul_speedup


def _fp32(fp32_ns: int, span_ns: int, sgemm_ns: int, cc_major: int | None = 9) -> dict[str, Any]:
    """`fp32_ns` of FP32 GEMMs in 100 ms of kernels over `span_ns`: at a 2x speed-up, half of it
    is saved; the top kernel is the SGEMM, `sgemm_ns` in all."""
    return {
        "est_savings_ns": fp32_ns * (1 - 1 / SPEEDUP),
        "evidence": {
            "phase": "run",
            "compute_capability_major": cc_major,
            "kernel_ns": 100 * MS,
            "kernel_busy_ns": 100 * MS,
            "span_ns": span_ns,
            "fp32_ns": fp32_ns,
            "fp32_share": fp32_ns / (100 * MS),
            "fp32_busy_ns": fp32_ns,
            "fp32_span_share": fp32_ns / span_ns,
            "fp32_ns_by_class": {"gemm": fp32_ns},
            "speedup": SPEEDUP,
            "time_at_stake_ns": fp32_ns,
            "top_kernels": [{"class": "gemm", "name": SGEMM, "kernel_ns": sgemm_ns, "kernels": 10}],
        },
    }


CASES: list[dict[str, Any]] = [
    {
        "id": "fp32-matmul: FP32 SGEMMs fill 80% of a busy GPU",
        "rules": RULES,
        "rows": rounds([(SGEMM, 5 * MS), (FFMA, 3 * MS), (ADD, 2 * MS)]),
        "expect": [("fp32-matmul", "critical")],
        "detail": [_fp32(10 * (5 + 3) * MS, 100 * MS, 10 * 5 * MS)],
    },
    {
        # 40 ms idle after each round but the last: the span is 10 x 50 - 40 ms
        "id": "fp32-matmul: the same on a mostly idle GPU is info",
        "rules": RULES,
        "rows": rounds([(SGEMM, 5 * MS), (FFMA, 3 * MS), (ADD, 2 * MS)], gap=40 * MS),
        "expect": [("fp32-matmul", "info")],
        "detail": [_fp32(10 * (5 + 3) * MS, 10 * 50 * MS - 40 * MS, 10 * 5 * MS)],
    },
    {
        "id": "fp32-matmul: a GPU the report does not describe is assumed to have tensor cores",
        "rules": RULES,
        "rows": rounds([(SGEMM, 8 * MS), (ADD, 2 * MS)], cc=None),
        "expect": [("fp32-matmul", "critical")],
        "detail": [_fp32(10 * 8 * MS, 100 * MS, 10 * 8 * MS, cc_major=None)],
    },
    {
        "id": "fp32-matmul silent: no tensor cores before compute capability 7.0",
        "rules": RULES,
        "rows": rounds([(SGEMM, 8 * MS), (ADD, 2 * MS)], cc="6.0"),
        "expect": [],
    },
    {
        "id": "fp32-matmul silent: TF32 and bf16 GEMMs",
        "rules": RULES,
        "rows": rounds([(TF32, 4 * MS), (BF16, 4 * MS), (ADD, 2 * MS)]),
        "expect": [],
    },
    {
        "id": "fp32-matmul silent: a TF32 program whose attention alone is FP32",
        "rules": RULES,
        "rows": rounds([(TF32, 5 * MS), (FP32_ATTENTION, 4 * MS), (ADD, 1 * MS)]),
        "expect": [],
    },
    {
        "id": "fp32-matmul silent: FP64 GEMMs (HPC)",
        "rules": RULES,
        "rows": rounds([(DGEMM, 8 * MS), (ADD, 2 * MS)]),
        "expect": [],
    },
    {
        "id": "fp32-matmul silent: FP32 GEMMs 15% of the kernel time",
        "rules": ["fp32-matmul"],
        "rows": rounds([(SGEMM, int(1.5 * MS)), (BF16, int(8.5 * MS))]),
        "expect": [],
    },
    {
        "id": "fp32-matmul threshold lowered: 15% fires at 10%",
        "rules": ["fp32-matmul"],
        "rows": rounds([(SGEMM, int(1.5 * MS)), (BF16, int(8.5 * MS))]),
        "config": {"fp32_matmul_share": 0.10},
        "expect": [("fp32-matmul", "info")],
        "detail": [_fp32(10 * int(1.5 * MS), 100 * MS, 10 * int(1.5 * MS))],
    },
]
