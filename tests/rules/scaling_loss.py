"""Cases of scaling-loss, on the runs of rules.build_runs (its docstring draws them)."""

from __future__ import annotations

from typing import Any

from rules.build_runs import MS, OTHER, RUN_RULES, SCALE_W2, SCALE_W4, STEADY, Rank, ddp_run, merged

CASES: list[dict[str, Any]] = [
    {
        "id": "run-scaling-loss-critical",
        "rules": ["scaling-loss"],
        "rows": merged(SCALE_W2, SCALE_W4, OTHER),
        "expect": [("scaling-loss", "critical")],
        "detail": [
            {
                "run_id": 2,
                "report_id": 3,
                "ranks": [0, 1, 2, 3],
                "est_savings_ns": 4 * MS * STEADY,
                "says": [
                    "Run 2 (ddp_w4), ranks 0-3, scales at 71% efficiency against run 1 (ddp_w2)",
                    "2 ranks: 200 rank-steps/s",
                    "4 ranks: 286 rank-steps/s",
                    "4 ms lost per step: 4 ms more exposed",
                ],
                "evidence": {
                    "base_run_id": 1,
                    "mode": "weak",
                    "efficiency": 10 / 14,
                    "speedup": (4 / 14) / (2 / 10),
                    "step_ns": 14 * MS,
                    "ideal_ns": 10 * MS,
                    "lost_ns": 4 * MS,
                    "lost_comm_ns": 4 * MS,
                    "lost_compute_ns": 0,
                    "lost_imbalance_ns": 0,
                    "lost_other_ns": 0,
                    "largest_part": "lost_comm_ns",
                    "runs": [
                        {
                            "run_id": 1,
                            "run": "ddp_w2",
                            "world_size": 2,
                            "step_ns": 10 * MS,
                            "throughput": 200.0,
                            "efficiency": 1.0,
                        },
                        {
                            "run_id": 2,
                            "run": "ddp_w4",
                            "world_size": 4,
                            "step_ns": 14 * MS,
                            "throughput": 4e9 / (14 * MS),
                            "efficiency": 10 / 14,
                        },
                    ],
                },
            },
        ],
    },
    {
        # a healthy job: the all-reduce fully hidden behind compute, no straggler, equal compute,
        # and the same step at 2 and 4 ranks
        "id": "run-healthy-passes",
        "rules": RUN_RULES,
        "rows": merged(
            ddp_run(1, "ddp_w2", [Rank(overlap=1 * MS)] * 2, step=10 * MS, latency=1 * MS, first_report=1),
            ddp_run(2, "ddp_w4", [Rank(overlap=1 * MS)] * 4, step=10 * MS, latency=1 * MS, first_report=3),
        ),
        "expect": [],
    },
]
