"""Cases of memory-bound (one 1 ms Nsight Compute launch)."""

from __future__ import annotations

from typing import Any

from rules.build import MEM, MS, SOL, ncu


def _kernel(compute_pct: float, memory_pct: float) -> dict[str, Any]:
    return {
        "est_savings_ns": None,
        "evidence": {
            "kernel": "void heavy_kernel(float*)",
            "ncu_launches": 1,
            "ncu_ns": 1 * MS,
            "time_at_stake_ns": 1 * MS,
            "compute_pct": compute_pct,
            "memory_pct": memory_pct,
        },
    }


CASES: list[dict[str, Any]] = [
    {
        "id": "memory-bound-at-peak",
        "rules": ["memory-bound", "latency-bound"],
        "rows": ncu(**{SOL: 20.0, MEM: 90.0}),
        "expect": [("memory-bound", "info")],
        "detail": [_kernel(20.0, 90.0)],
    },
    {
        "id": "memory-bound-below-peak",
        "rules": ["memory-bound"],
        "rows": ncu(**{SOL: 20.0, MEM: 70.0}),
        "expect": [("memory-bound", "warning")],
        "detail": [_kernel(20.0, 70.0)],
    },
    {
        "id": "compute-bound-passes",
        "rules": ["memory-bound", "latency-bound"],
        "rows": ncu(**{SOL: 85.0, MEM: 30.0}),
        "expect": [],
    },
]
