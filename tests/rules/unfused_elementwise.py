"""Cases of unfused-elementwise: 10 rounds of kernels (rules.build_kernel_mix.rounds)."""

from __future__ import annotations

from typing import Any

from rules.build_kernel_mix import ADD, BF16, FLASH, RULES, SUM, TRITON, rounds

MS = 1_000_000
GAIN = 0.3  # the default unfused_fusion_gain


def _unfused(add_ns: int, sum_ns: int, matrix_ns: int, span_ns: int = 100 * MS) -> dict[str, Any]:
    """Per round `add_ns` of elementwise and `sum_ns` of reduction kernels, `matrix_ns` of GEMMs
    and attention; fusing saves GAIN of the unfused time."""
    unfused = 10 * (add_ns + sum_ns)
    return {
        "est_savings_ns": unfused * GAIN,
        "evidence": {
            "phase": "run",
            "kernel_ns": 100 * MS,
            "span_ns": span_ns,
            "unfused_ns": unfused,
            "unfused_share": unfused / (100 * MS),
            "unfused_busy_ns": unfused,
            "unfused_span_share": unfused / span_ns,
            "launches": 20,
            "avg_ns": unfused / 20,
            "matrix_ns": 10 * matrix_ns,
            "fused_ns": 0,
            "fusion_gain": GAIN,
            "time_at_stake_ns": unfused,
            "by_class": {
                "elementwise": {"kernel_ns": 10 * add_ns, "kernels": 10, "names": 1, "top_name": ADD},
                "reduction": {"kernel_ns": 10 * sum_ns, "kernels": 10, "names": 1, "top_name": SUM},
            },
        },
    }


CASES: list[dict[str, Any]] = [
    {
        "id": "unfused-elementwise: eager elementwise and reductions fill a busy GPU",
        "rules": RULES,
        "rows": rounds([(ADD, 5 * MS), (SUM, 2 * MS), (BF16, 3 * MS)]),
        "expect": [("unfused-elementwise", "warning")],
        "detail": [_unfused(5 * MS, 2 * MS, 3 * MS)],
    },
    {
        "id": "unfused-elementwise: the same on a mostly idle GPU is info",
        "rules": RULES,
        "rows": rounds([(ADD, 5 * MS), (SUM, 2 * MS), (BF16, 3 * MS)], gap=40 * MS),
        "expect": [("unfused-elementwise", "info")],
        "detail": [_unfused(5 * MS, 2 * MS, 3 * MS, span_ns=10 * 50 * MS - 40 * MS)],
    },
    {
        "id": "unfused-elementwise: an LLM step, elementwise work ahead of the GEMMs, flash attention beside",
        "rules": RULES,
        "rows": rounds([(ADD, 3 * MS), (SUM, 12 * MS // 10), (BF16, 35 * MS // 10), (FLASH, 23 * MS // 10)]),
        "expect": [("unfused-elementwise", "warning")],
        "detail": [_unfused(3 * MS, 12 * MS // 10, 35 * MS // 10 + 23 * MS // 10)],
    },
    {
        "id": "unfused-elementwise silent: GEMMs take more than the elementwise work",
        "rules": RULES,
        "rows": rounds([(ADD, 4 * MS), (BF16, 6 * MS)]),
        "expect": [],
    },
    {
        "id": "unfused-elementwise silent: the elementwise work is compiled (Triton) already",
        "rules": RULES,
        "rows": rounds([(TRITON, 7 * MS), (BF16, 3 * MS)]),
        "expect": [],
    },
]
