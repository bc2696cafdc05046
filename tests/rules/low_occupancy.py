"""Cases of low-occupancy (one 1 ms Nsight Compute launch)."""

from __future__ import annotations

from typing import Any

from rules.build import MS, ncu

CASES: list[dict[str, Any]] = [
    {
        # registers allow 2 blocks, the fewest of the four limits: the limiter
        "id": "low-occupancy-registers",
        "rules": ["low-occupancy"],
        "rows": ncu(
            sm__maximum_warps_per_active_cycle_pct=25.0,
            sm__warps_active__DOT__avg__DOT__pct_of_peak_sustained_active=22.0,
            launch__occupancy_limit_registers=2,
            launch__occupancy_limit_shared_mem=8,
            launch__occupancy_limit_warps=8,
            launch__occupancy_limit_blocks=32,
        ),
        "expect": [("low-occupancy", "warning")],
        "detail": [
            {
                "est_savings_ns": None,
                "evidence": {
                    "ncu_ns": 1 * MS,
                    "time_at_stake_ns": 1 * MS,
                    "achieved_pct": 22.0,
                    "theoretical_pct": 25.0,
                    "limiter": "registers",
                },
            }
        ],
    },
    {
        "id": "low-achieved-only",
        "rules": ["low-occupancy"],
        "rows": ncu(
            sm__maximum_warps_per_active_cycle_pct=100.0,
            sm__warps_active__DOT__avg__DOT__pct_of_peak_sustained_active=20.0,
        ),
        "expect": [("low-occupancy", "info")],
        "detail": [
            {
                "est_savings_ns": None,
                "evidence": {
                    "ncu_ns": 1 * MS,
                    "achieved_pct": 20.0,
                    "theoretical_pct": 100.0,
                    "limiter": None,
                },
            }
        ],
    },
    {
        "id": "occupancy-fine",
        "rules": ["low-occupancy"],
        "rows": ncu(
            sm__maximum_warps_per_active_cycle_pct=100.0,
            sm__warps_active__DOT__avg__DOT__pct_of_peak_sustained_active=80.0,
        ),
        "expect": [],
    },
]
