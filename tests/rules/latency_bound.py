"""Cases of latency-bound (one 1 ms Nsight Compute launch)."""

from __future__ import annotations

from typing import Any

from rules.build import MEM, MS, SOL, ncu

CASES: list[dict[str, Any]] = [
    {
        "id": "latency-bound",
        "rules": ["memory-bound", "latency-bound"],
        "rows": ncu(**{SOL: 10.0, MEM: 15.0}),
        "expect": [("latency-bound", "warning")],
        "detail": [
            {
                "est_savings_ns": None,
                "evidence": {
                    "kernel": "void heavy_kernel(float*)",
                    "ncu_ns": 1 * MS,
                    "time_at_stake_ns": 1 * MS,
                    "compute_pct": 10.0,
                    "memory_pct": 15.0,
                },
            }
        ],
    },
    {
        # memory at 70% of peak: memory-bound's kernel, not a latency-bound one
        "id": "latency-bound silent: a memory-bound kernel",
        "rules": ["latency-bound"],
        "rows": ncu(**{SOL: 20.0, MEM: 70.0}),
        "expect": [],
    },
]
