"""Cases of load-imbalance, on the runs of rules.build_runs (its docstring draws them)."""

from __future__ import annotations

from typing import Any

from rules.build_runs import HEAVY, MS, RUN_RULES, STEADY, STRAGGLER

CASES: list[dict[str, Any]] = [
    {
        "id": "run-slow-kernels-imbalance-is-the-straggler",
        "rules": RUN_RULES,
        "rows": HEAVY,
        "expect": [
            ("load-imbalance", "critical"),
            ("straggler-rank", "warning"),
            ("exposed-communication", "info"),
        ],
        "detail": [
            {
                "run_id": 1,
                "report_id": 2,
                "ranks": [1],
                "est_savings_ns": 2 * MS * STEADY,
                "same_saving_as": "straggler-rank",
                "says": ["rank 1 computes 7.1 ms per steady step, 1.39x"],
                "evidence": {
                    "heaviest_rank": 1,
                    "median_compute_ns": 5.1 * MS,
                    "ratio": 7.1 / 5.1,
                    "compute_ns": {"0": 5.1 * MS, "1": 7.1 * MS, "2": 5.1 * MS, "3": 5.1 * MS},
                    "steps": STEADY,
                    "straggler_rank": 1,
                },
            },
            {
                "run_id": 1,
                "report_id": 2,
                "ranks": [1],
                "est_savings_ns": 2 * MS * STEADY,
                "says": ["most of the growth in gemm (+2 ms per step)"],
                "evidence": {
                    "rank": 1,
                    "late_ns": 2 * MS,
                    "late_share": 2 / 12,
                    "others_wait_ns": 3 * 2 * MS,
                    "compute_vs_median": 7.1 / 5.1,
                    "phase": None,
                    "host_wait": None,
                    "idle_ns": 3.9 * MS,  # 12 - (0.1 + 9 - 1) on every rank: the same E, the same idle
                    "median_idle_ns": 3.9 * MS,
                    "kernel": {
                        "name": "gemm",
                        "ns_per_step": 7 * MS,
                        "median_ns_per_step": 5 * MS,
                        "excess_ns": 2 * MS,
                    },
                },
            },
            {
                "run_id": 1,
                "report_id": 2,
                "ranks": [1],
                "est_savings_ns": 1 * MS * STEADY,
                "evidence": {
                    "worst_rank": 0,
                    "exposed_share": 0.25,
                    "explained_by_straggler": True,
                    "victims": [0, 2, 3],
                    "victims_wait_ns": 3 * 2 * MS * STEADY,
                    "victims_exposed_ns": 3 * 3 * MS * STEADY,
                    "exposed_share_without_wait": 1 / 12,
                },
            },
        ],
    },
    {
        # rank 2 is late for its host's sleep, but computes what the others compute
        "id": "load-imbalance silent: a straggler by its host, not its compute",
        "rules": ["load-imbalance"],
        "rows": STRAGGLER,
        "expect": [],
    },
]
