"""Cases of gpu-idle. These captures are milliseconds long: idle_min_span_ns is lowered so the
rule judges them."""

from __future__ import annotations

from typing import Any

from rules.build import MS, PID, US, idle, kernel, warmup_then_steps


def _gap(cause: str, detail: str | None, saving: int | None, busy: int = 2 * MS) -> dict[str, Any]:
    """One gap between two kernels over an 11 ms span, busy `busy` of it."""
    idle_ns = 11 * MS - busy
    return {
        "est_savings_ns": saving,
        "evidence": {
            "phase": "run",
            "span_ns": 11 * MS,
            "idle_ns": idle_ns,
            "idle_share": idle_ns / (11 * MS),
            "gaps": 1,
            "gap_ns": idle_ns,
            "idle_by_cause_ns": {cause: idle_ns},
            "dominant_cause": cause,
            "dominant_detail": detail,
        },
    }


CASES: list[dict[str, Any]] = [
    {
        # two 1 ms kernels 9 ms apart, the host in cudaDeviceSynchronize meanwhile: all 9 ms can go
        "id": "idle-sync-critical",
        "rules": ["gpu-idle"],
        "rows": idle(9, "sync"),
        "config": {"idle_min_span_ns": MS},
        "expect": [("gpu-idle", "critical")],
        "detail": [_gap("sync", "cudaDeviceSynchronize", 9 * MS)],
    },
    {
        "id": "idle-late-launch-critical",
        "rules": ["gpu-idle"],
        "rows": idle(9, "late"),
        "config": {"idle_min_span_ns": MS},
        "expect": [("gpu-idle", "critical")],
        "detail": [_gap("late_launch", "cudaLaunchKernel", 9 * MS)],
    },
    {
        # 7 ms + 1 ms of kernels with 3 ms between them and no host activity to blame: no saving
        "id": "idle-warning",
        "rules": ["gpu-idle"],
        "config": {"idle_min_span_ns": MS},
        "rows": {"kernels": [kernel(0, 7 * MS), kernel(10 * MS, 1 * MS)]},
        "expect": [("gpu-idle", "warning")],
        "detail": [_gap("unknown", None, None, busy=8 * MS)],
    },
    {"id": "idle-capture-too-short-passes", "rules": ["gpu-idle"], "rows": idle(9, "sync"), "expect": []},
    {
        "id": "idle-threshold-raised",
        "rules": ["gpu-idle"],
        "config": {"idle_share_warning": 0.9},
        "rows": idle(9, "sync"),
        "expect": [],
    },
    {
        # steady steps 100-150 ms, 1 ms of kernels each (and 1 ns at the end): the warm-up's idle
        # time is not counted
        "id": "idle-in-steady-state-critical",
        "rules": ["gpu-idle"],
        "rows": warmup_then_steps(1 * MS),
        "config": {"idle_min_span_ns": MS},
        "expect": [("gpu-idle", "critical")],
        "detail": [
            {
                "est_savings_ns": None,
                "evidence": {
                    "phase": "steady",
                    "span_ns": 50 * MS,
                    "idle_ns": 50 * MS - (5 * MS + 1),
                    "idle_share": (50 * MS - (5 * MS + 1)) / (50 * MS),
                    "gaps": 5,
                    "steady_steps": 5,
                    "steady_start_ns": 100 * MS,
                    "steady_end_ns": 150 * MS,
                },
            }
        ],
    },
    # a CUDA graph replay traced as one row is GPU work, not idle time
    {
        "id": "graph-replay-is-busy",
        "rules": ["gpu-idle"],
        "config": {"idle_min_span_ns": MS},
        "rows": {
            "kernels": [kernel(0, 1 * MS), kernel(9 * MS, 1 * MS)],
            "graph_executions": [
                {
                    "report_id": 1,
                    "device_id": 0,
                    "stream_id": 7,
                    "pid": PID,
                    "start_ns": 1 * MS,
                    "end_ns": 9 * MS,
                    "duration_ns": 8 * MS,
                    "graph_id": 1,
                    "correlation_id": 9,
                }
            ],
        },
        "expect": [],
    },
    {
        "id": "idle-busy-passes",
        "rules": ["gpu-idle"],
        "rows": {"kernels": [kernel(0, 5 * MS), kernel(5 * MS + 2 * US, 5 * MS)]},
        "expect": [],
    },
]
