"""Cases of exposed-communication, on the runs of rules.build_runs (its docstring draws them)."""

from __future__ import annotations

from typing import Any

from rules.build_runs import EXPOSED, EXPOSED_EVIDENCE, MS, STEADY, Rank, ddp_run

CASES: list[dict[str, Any]] = [
    {
        "id": "run-exposed-communication-critical",
        "rules": ["exposed-communication"],
        "rows": EXPOSED,
        "expect": [("exposed-communication", "critical")],
        "detail": [
            {
                "run_id": 1,
                "report_id": 1,
                "ranks": [1, 3, 0],
                "est_savings_ns": MS // 2 * STEADY,
                "says": [
                    "In run 1 (ddp_w4)",
                    "30% of rank 1's steady step time",
                    "ranks 0, 1 and 3 are at 10%",
                    "rank 2, exposes 2.5 ms in its steady steps",
                ],
                "evidence": EXPOSED_EVIDENCE,
            }
        ],
    },
    {
        "id": "run-exposed-communication-threshold-raised",
        "rules": ["exposed-communication"],
        "rows": EXPOSED,
        "config": {"exposed_share_warning": 0.35, "exposed_share_critical": 0.5},
        "expect": [],
    },
    {
        # a 1 ms all-reduce beside 1 ms of backward work on every rank: nothing exposed
        "id": "exposed-communication silent: every rank hides its all-reduce",
        "rules": ["exposed-communication"],
        "rows": ddp_run(
            1, "ddp_w4", [Rank(overlap=1 * MS)] * 4, step=10 * MS, latency=1 * MS, first_report=1
        ),
        "expect": [],
    },
]
