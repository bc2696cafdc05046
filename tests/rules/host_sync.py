"""Cases of host-sync."""

from __future__ import annotations

from typing import Any

from rules.build import MS, US, api, idle, kernel, with_stacks

# idle(9, "sync"): a launch at -5 us (3 us), a kernel at 0-1 ms, the second launch at 0 (3 us), and
# cudaDeviceSynchronize from 1 ms - 10 us for 9 ms; the second kernel runs at 10 ms. The sync
# overlaps the first kernel by 10 us: the rest is time the GPU did not need the host to wait.
_SYNC_START, _SYNC_END, _SPAN_START = 1 * MS - 10 * US, 1 * MS - 10 * US + 9 * MS, -5 * US
_BEYOND = 9 * MS - 10 * US
_IDLE_SYNC = {
    "est_savings_ns": _BEYOND,
    "evidence": {
        "pid": 100,
        "blocked_ns": 9 * MS,
        "beyond_gpu_ns": _BEYOND,
        "process_span_ns": _SYNC_END - _SPAN_START,
        "blocked_share": 9 * MS / (_SYNC_END - _SPAN_START),
        "beyond_gpu_share": _BEYOND / (_SYNC_END - _SPAN_START),
        "calls": {"cudaDeviceSynchronize": {"calls": 1, "blocked_ns": 9 * MS}},
        "processes": 1,
    },
}

CASES: list[dict[str, Any]] = [
    {
        "id": "sync-while-idle",
        "rules": ["host-sync"],
        "rows": idle(9, "sync"),
        "expect": [("host-sync", "critical")],
        "detail": [_IDLE_SYNC],
    },
    {
        # the same, the synchronize call (the third CUDA call) backtraced to line 61
        # (tests/test_stacks_attribution.py checks `location` and `says`)
        "id": "sync-while-idle-names-the-line",
        "rules": ["host-sync"],
        "rows": with_stacks(idle(9, "sync"), {-3: 61}),
        "expect": [("host-sync", "critical")],
        "detail": [_IDLE_SYNC],
        "location": {"function": "step", "line": 61, "calls": 1, "blocked_ns": 9 * MS},
        "says": ["The blocking calls came from train.py:61 in step, calling mul_"],
    },
    {
        # a 10 ms stream sync from 5 us while a 10 ms kernel runs from 0: it waits 5 us past the GPU
        "id": "sync-while-busy-info",
        "rules": ["host-sync"],
        "rows": {
            "kernels": [kernel(0, 10 * MS)],
            "cuda_api": [api(0, 3 * US, "cudaLaunchKernel"), api(5 * US, 10 * MS, "cudaStreamSynchronize")],
        },
        "expect": [("host-sync", "info")],
        "detail": [
            {
                "est_savings_ns": 5 * US,
                "evidence": {
                    "blocked_ns": 10 * MS,
                    "beyond_gpu_ns": 5 * US,
                    "process_span_ns": 10 * MS + 5 * US,
                    "blocked_share": 10 * MS / (10 * MS + 5 * US),
                    "calls": {"cudaStreamSynchronize": {"calls": 1, "blocked_ns": 10 * MS}},
                },
            }
        ],
    },
    {
        # kernels 0-10 ms and 15-30 ms, a stream sync 7-15 ms: blocked 8 ms (27% of the 30 ms run, an
        # info finding) of which the GPU idled 5 ms (17% of the run: under the warning share), most of
        # the wait - the advice must not say the waits cover GPU work
        "id": "sync-mostly-idle-info",
        "rules": ["host-sync"],
        "rows": {
            "kernels": [kernel(0, 10 * MS), kernel(15 * MS, 15 * MS)],
            "cuda_api": [
                api(0, 3 * US, "cudaLaunchKernel"),
                api(7 * MS, 8 * MS, "cudaStreamSynchronize"),
                api(15 * MS, 3 * US, "cudaLaunchKernel"),
                api(30 * MS, 3 * US, "cudaMemcpyAsync"),
            ],
        },
        "expect": [("host-sync", "info")],
        "detail": [
            {
                "est_savings_ns": 5 * MS,
                "evidence": {
                    "blocked_ns": 8 * MS,
                    "beyond_gpu_ns": 5 * MS,
                    "process_span_ns": 30 * MS + 3 * US,
                    "blocked_share": 8 * MS / (30 * MS + 3 * US),
                    "beyond_gpu_share": 5 * MS / (30 * MS + 3 * US),
                },
                "advises": ["The GPU idled for 62% of these waits, 5 ms (17% of the run)"],
            }
        ],
    },
    {
        "id": "async-calls-pass",
        "rules": ["host-sync"],
        "rows": {"kernels": [kernel(0, 10 * MS)], "cuda_api": [api(0, 10 * MS, "cudaMemcpyAsync")]},
        "expect": [],
    },
]
