"""Cases of memory-growth: 1 GiB allocated in the warm-up step, then `grows[i]` bytes (never
freed) in steady step i + 1 (rules.build.memory_per_step)."""

from __future__ import annotations

from typing import Any

from rules.build import memory_per_step

GIB, MIB = 1 << 30, 1 << 20
LEAK = 4 * MIB  # per steady step, 5 steady steps


def _leak(total_memory: int) -> dict[str, Any]:
    """What a 4 MiB-per-step leak on a `total_memory` device must say."""
    held_last = GIB + 5 * LEAK
    return {
        "est_savings_ns": None,
        "evidence": {
            "steady_steps": 5,
            "steps_grown": 5,
            "held_first_bytes": GIB,
            "held_last_bytes": held_last,
            "growth_bytes": 5 * LEAK,
            "growth_per_step_bytes": LEAK,
            "total_memory_bytes": total_memory,
            "headroom_bytes": total_memory - held_last,
            "steps_to_full": (total_memory - held_last) // LEAK,
        },
    }


CASES: list[dict[str, Any]] = [
    {
        "id": "memory-leak-every-step",
        "rules": ["memory-growth"],
        "rows": memory_per_step([LEAK] * 5),
        "expect": [("memory-growth", "warning")],
        "detail": [_leak(80 * GIB)],
    },
    {
        # 200 MiB of headroom after the warm-up, 180 MiB after the 5 steps: 45 more steps
        "id": "memory-leak-fills-the-device-soon",
        "rules": ["memory-growth"],
        "rows": memory_per_step([LEAK] * 5, total_memory=GIB + 200 * MIB),
        "expect": [("memory-growth", "critical")],
        "detail": [_leak(GIB + 200 * MIB)],
    },
    {
        "id": "memory-pool-grown-once-passes",
        "rules": ["memory-growth"],
        "rows": memory_per_step([128 * MIB, 0, 0, 0, 0]),
        "expect": [],
    },
    {
        "id": "memory-growth-below-threshold-passes",
        "rules": ["memory-growth"],
        "rows": memory_per_step([1 * MIB] * 5),
        "expect": [],
    },
]
