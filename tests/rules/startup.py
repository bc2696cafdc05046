"""Cases of startup: a 100 ms warm-up step (the GPU busy 2 ms of it) before five 10 ms steps
(rules.build.warmup_then_steps)."""

from __future__ import annotations

from typing import Any

from rules.build import MS, warmup_then_steps

CASES: list[dict[str, Any]] = [
    {
        # the warm-up is start-up, not steady-state idle: gpu-idle is silent, startup says it
        "id": "idle-only-in-warmup-passes",
        "rules": ["gpu-idle", "startup"],
        "rows": warmup_then_steps(10 * MS - 1),
        "config": {"idle_min_span_ns": MS},
        "expect": [("startup", "info")],
        "detail": [
            {
                "est_savings_ns": None,
                "evidence": {
                    "startup_ns": 100 * MS,
                    "steady_ns": 50 * MS,
                    "startup_share": 100 / 150,
                    "startup_gpu_busy_ns": 2 * MS,
                    "steps": 6,
                    "steady_steps": 5,
                },
            }
        ],
    },
    {
        "id": "short-startup-passes",
        "rules": ["startup"],
        "rows": warmup_then_steps(10 * MS - 1),
        "config": {"startup_min_ns": 200 * MS},
        "expect": [],
    },
]
