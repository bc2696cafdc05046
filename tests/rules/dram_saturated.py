"""Cases of dram-saturated: twenty 4 ms kernels, one every 5 ms, under 100 ms of GPU metrics."""

from __future__ import annotations

from typing import Any

from rules.build_gpu_metrics import ELEMENTWISE, GPU_RULES, busy, kernels_of, with_kinds

MS = 1_000_000

CASES: list[dict[str, Any]] = [
    with_kinds(c)
    for c in [
        {
            # read 60% + write 30% share one bandwidth: 90% in every sample
            "id": "dram-saturated: read + write at 90% of peak for the whole run",
            "rules": GPU_RULES,
            "rows": {"kernels": kernels_of(ELEMENTWISE), "gpu_metrics": busy(dram_read=60, dram_write=30)},
            "expect": [("dram-saturated", "warning")],
            "detail": [
                {
                    "est_savings_ns": None,
                    "evidence": {
                        "scope": "run",
                        "share": 1.0,
                        "first_ns": 0,
                        "peak_pct": 60.0 + 30.0,
                        "ranges": [],
                        "kernels": [{"name": ELEMENTWISE, "dram_pct": 90.0, "kernel_ns": 20 * 4 * MS}],
                    },
                }
            ],
        },
        {
            "id": "dram-saturated silent: 40% of peak",
            "rules": GPU_RULES,
            "rows": {"kernels": kernels_of(ELEMENTWISE), "gpu_metrics": busy(dram_read=25, dram_write=15)},
            "expect": [],
        },
    ]
]
