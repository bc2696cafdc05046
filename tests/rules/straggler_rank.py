"""Cases of straggler-rank, on the runs of rules.build_runs (its docstring draws them)."""

from __future__ import annotations

from typing import Any

from rules.build_runs import EXPOSED, MS, RUN_RULES, STEADY, STRAGGLER, STRAGGLER_EVIDENCE, VICTIM_EVIDENCE

CASES: list[dict[str, Any]] = [
    {
        "id": "run-straggler-and-its-victims",
        "rules": RUN_RULES,
        "rows": STRAGGLER,
        "expect": [("straggler-rank", "critical"), ("exposed-communication", "info")],
        "detail": [
            {
                "run_id": 1,
                "report_id": 3,
                "ranks": [2],
                "est_savings_ns": 8 * MS * STEADY,
                # its GPU idled because its host was late, and report 3 is rank 2's alone: the
                # gpu-idle finding of that report is the same fix
                "same_saving_as": "gpu-idle",
                "says": [
                    "run 1 (ddp_w4_slow2), rank 2 arrives last at 5 of the 5 collectives",
                    "(ranks 0, 1 and 3) wait",
                    "victims, not the cause",
                    "'data' took 9 ms",
                    "nanosleep 8 ms per step",
                    "GPU sat idle 13.9 ms per step (median other rank: 5.9 ms)",
                ],
                "evidence": STRAGGLER_EVIDENCE,
            },
            {
                "run_id": 1,
                "report_id": 3,
                "ranks": [2],
                "est_savings_ns": 1 * MS * STEADY,
                "says": [
                    "ranks 0, 1 and 3 wait inside the collectives for rank 2",
                    "are victims, not the cause",
                ],
                "evidence": VICTIM_EVIDENCE,
            },
        ],
    },
    {
        # every rank arrives at t + 6 ms: nobody is last by more than the others
        "id": "straggler-rank silent: every rank arrives together",
        "rules": ["straggler-rank"],
        "rows": EXPOSED,
        "expect": [],
    },
]
