"""Cases of small-kernel-storm: rules.build.storm(n) launches n 2 us kernels 5 us apart, each by
a 3 us cudaLaunchKernel."""

from __future__ import annotations

from typing import Any

from rules.build import US, storm, with_stacks

# 600 kernels of 2 us, one every 5 us: the GPU span ends at 599 x 5 us + 2 us; the rest of it is
# idle between the launches, and that is what graphs or fusion win back
_SPAN, _BUSY = 599 * 5 * US + 2 * US, 600 * 2 * US
_STORM = {
    "est_savings_ns": _SPAN - _BUSY,
    "evidence": {
        "small_kernel_ns": 10 * US,
        "kernels": 600,
        "small_kernels": 600,
        "small_kernel_time_ns": _BUSY,
        "launch_api_ns": 600 * 3 * US,
        "launch_calls": 600,
        "graph_kernels": 0,
        "storm_windows": 1,
        "storm_idle_ns": _SPAN - _BUSY,
        "storm_idle_share": (_SPAN - _BUSY) / _SPAN,
        "top_kernels": [
            {
                "short_name": "elementwise_add",
                "example_name": "elementwise_add",
                "variants": 1,
                "launches": 600,
                "avg_ns": 2 * US,
            }
        ],
    },
}

CASES: list[dict[str, Any]] = [
    {
        "id": "storm-critical",
        "rules": ["small-kernel-storm"],
        "rows": storm(600),
        "expect": [("small-kernel-storm", "critical")],
        "detail": [_STORM],
    },
    {
        # the same storm with Python backtraces: 500 launches from line 88, 100 from line 95
        # (tests/test_stacks_attribution.py checks `location` and `says`)
        "id": "storm-critical-names-the-line",
        "rules": ["small-kernel-storm"],
        "rows": with_stacks(storm(600), {i + 1: 88 if i < 500 else 95 for i in range(600)}),
        "expect": [("small-kernel-storm", "critical")],
        "detail": [_STORM],
        "location": {"function": "step", "line": 88, "calls": 500, "total_calls": 600},
        "says": ["500 launched from train.py:88 in step", "calling mul_"],
    },
    {"id": "few-small-kernels-pass", "rules": ["small-kernel-storm"], "rows": storm(100), "expect": []},
    # trimmed exports carry no deviceId: the kernels' device is NULL and still one device
    {
        "id": "storm-without-device-ids",
        "rules": ["small-kernel-storm"],
        "rows": {**storm(600), "kernels": [{**k, "device_id": None} for k in storm(600)["kernels"]]},
        "expect": [("small-kernel-storm", "critical")],
        "detail": [_STORM],
    },
    {
        "id": "storm-threshold-lowered",
        "rules": ["small-kernel-storm"],
        "config": {"small_kernel_ns": 1000},
        "rows": storm(600),
        "expect": [],
    },
]
