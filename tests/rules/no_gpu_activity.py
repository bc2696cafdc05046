"""Cases of no-gpu-activity."""

from __future__ import annotations

from typing import Any

from rules.build import MS, US, api, kernel

CASES: list[dict[str, Any]] = [
    {
        # a CUDA program that never reached the GPU: the GPU rules are silent, this one says why
        "id": "no-gpu",
        "rules": ["no-gpu-activity", "gpu-idle", "copy-dominated"],
        "rows": {
            "reports": [
                {
                    "report_id": 1,
                    "format": "nsys",
                    "has_kernels": False,
                    "activity_kinds": ["cuda_api", "nvtx", "osrt"],
                }
            ],
            "cuda_api": [api(0, 2 * US, "cuModuleGetLoadingMode")],
        },
        "expect": [("no-gpu-activity", "warning")],
        "detail": [
            {
                "est_savings_ns": None,
                "evidence": {"activity_kinds": ["cuda_api", "nvtx", "osrt"], "cuda_api_rows": 1},
            }
        ],
    },
    {"id": "gpu-present", "rules": ["no-gpu-activity"], "rows": {"kernels": [kernel(0, MS)]}, "expect": []},
]
