"""Cases of pcie-saturated: twenty 4 ms kernels, one every 5 ms, under 100 ms of GPU metrics
sampled every 5 ms."""

from __future__ import annotations

from typing import Any

from rules.build_gpu_metrics import ELEMENTWISE, GPU_RULES, PERIOD, busy, kernels_of, samples, with_kinds

CASES: list[dict[str, Any]] = [
    with_kinds(c)
    for c in [
        {
            "id": "pcie-saturated: host-to-device at 90% of the link",
            "rules": GPU_RULES,
            "rows": {"kernels": kernels_of(ELEMENTWISE), "gpu_metrics": busy(pcie_rx=90, pcie_tx=2)},
            "expect": [("pcie-saturated", "warning")],
            "detail": [
                {
                    "est_savings_ns": None,
                    "evidence": {
                        "link": "pcie_rx",
                        "scope": "run",
                        "share": 1.0,
                        "first_ns": 0,
                        "peak_pct": 90.0,
                    },
                }
            ],
        },
        {
            # the first 2 of 20 samples at 95%: a tenth of the observed time, ending at 2 periods
            "id": "pcie-saturated: 10 ms of 100 at the limit is info",
            "rules": GPU_RULES,
            "rows": {
                "kernels": kernels_of(ELEMENTWISE),
                "gpu_metrics": samples("pcie_rx", 95, n=2) + samples("pcie_rx", 5, start=2 * PERIOD, n=18),
            },
            "expect": [("pcie-saturated", "info")],
            "detail": [
                {
                    "est_savings_ns": None,
                    "evidence": {"link": "pcie_rx", "share": 2 / 20, "first_ns": 0, "peak_pct": 95.0},
                }
            ],
        },
        {
            "id": "pcie-saturated silent: 30% of the link",
            "rules": GPU_RULES,
            "rows": {"kernels": kernels_of(ELEMENTWISE), "gpu_metrics": busy(pcie_rx=30, pcie_tx=30)},
            "expect": [],
        },
    ]
]
