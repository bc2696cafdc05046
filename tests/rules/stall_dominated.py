"""Cases of stall-dominated (one 1 ms Nsight Compute launch)."""

from __future__ import annotations

from typing import Any

from rules.build import MS, STALL, ncu

CASES: list[dict[str, Any]] = [
    {
        # long_scoreboard 6 of 6 + 1 + 1 stall cycles per issue: 75%, at most 75% of the 1 ms
        "id": "stall-dominated",
        "rules": ["stall-dominated"],
        "rows": ncu(
            **{STALL.format("long_scoreboard"): 6.0, STALL.format("barrier"): 1.0, STALL.format("wait"): 1.0}
        ),
        "expect": [("stall-dominated", "warning")],
        "detail": [
            {
                "est_savings_ns": None,
                "evidence": {
                    "kernel": "void heavy_kernel(float*)",
                    "ncu_launches": 1,
                    "ncu_ns": 1 * MS,
                    "reason": "long_scoreboard",
                    "share_pct": 100 * 6 / 8,
                    "reason_time_upper_bound_ns": 1 * MS * 6 / 8,
                },
            }
        ],
    },
    {
        "id": "stalls-spread-pass",
        "rules": ["stall-dominated"],
        "rows": ncu(
            **{STALL.format("long_scoreboard"): 3.0, STALL.format("barrier"): 3.0, STALL.format("wait"): 3.0}
        ),
        "expect": [],
    },
]
