"""Cases of low-issue-while-busy: an NVTX range 'optimizer' over 100 ms launching 50 kernels of
20 us, one every 2 ms from 10 us (rules.build_gpu_metrics.optimizer)."""

from __future__ import annotations

from typing import Any

from rules.build_gpu_metrics import GPU_RULES, optimizer, with_kinds

US, MS = 1_000, 1_000_000
# the range's GPU window: the first kernel's start to the last one's end
_FIRST, _LAST_END = 10 * US, 49 * 2 * MS + 10 * US + 20 * US

CASES: list[dict[str, Any]] = [
    with_kinds(c)
    for c in [
        {
            "id": "low-issue-while-busy: tiny kernels keep the GPU busy, SMs barely issue",
            "rules": GPU_RULES,
            "rows": optimizer(gr_active=30, sm_active=5, sm_issue=2, warps_in_flight=1),
            "expect": [("low-issue-while-busy", "warning")],
            "detail": [
                {
                    "est_savings_ns": None,
                    "evidence": {
                        "range": "optimizer",
                        "ranges": 1,
                        "start_ns": _FIRST,
                        "end_ns": _LAST_END,
                        "gpu_ns": _LAST_END - _FIRST,
                        "share": 1.0,
                        "cause": "parallelism",
                        "gr_active_pct": 30.0,
                        "sm_active_pct": 5.0,
                        "sm_issue_pct": 2.0,
                        "warps_in_flight_pct": 1.0,
                        "issue_per_busy": 2 / 30,
                    },
                }
            ],
        },
        {
            "id": "low-issue-while-busy silent: SMs issue on most busy cycles",
            "rules": GPU_RULES,
            "rows": optimizer(gr_active=90, sm_active=85, sm_issue=60, warps_in_flight=30),
            "expect": [],
        },
        {
            "id": "low-issue-while-busy silent: the GPU is idle, not busy (gpu-idle's finding)",
            "rules": GPU_RULES,
            "rows": optimizer(gr_active=3, sm_active=1, sm_issue=0.5, warps_in_flight=0.2),
            "expect": [],
        },
    ]
]
