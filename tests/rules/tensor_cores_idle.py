"""Cases of tensor-cores-idle: twenty 4 ms kernels, one every 5 ms, under 100 ms of GPU metrics."""

from __future__ import annotations

from typing import Any

from rules.build_gpu_metrics import BF16_GEMM, ELEMENTWISE, GPU_RULES, SGEMM, busy, kernels_of, with_kinds

MS = 1_000_000

CASES: list[dict[str, Any]] = [
    with_kinds(c)
    for c in [
        {
            # no saving of its own: fp32-matmul's, the same fix, counts it
            "id": "tensor-cores-idle: fp32 SIMT GEMMs at 2% tensor active",
            "rules": GPU_RULES,
            "rows": {
                "kernels": kernels_of(SGEMM),
                "gpu_metrics": busy(tensor_active=2, gr_active=90, sm_issue=60),
            },
            "expect": [("tensor-cores-idle", "warning")],
            "detail": [
                {
                    "est_savings_ns": None,
                    "same_saving_as": "fp32-matmul",
                    "evidence": {
                        "scope": "run",
                        "start_ns": 0,
                        "end_ns": 19 * 5 * MS + 4 * MS,
                        "tensor_active_pct": 2.0,
                        "gemm_tensor_active_pct": 2.0,
                        "gemm_ns": 20 * 4 * MS,
                        "kernel_ns": 20 * 4 * MS,
                        "gemm_share": 1.0,
                        "gemm_ns_by_precision": {"fp32": 20 * 4 * MS},
                        "top_gemms": [
                            {
                                "name": SGEMM,
                                "kernels": 20,
                                "kernel_ns": 20 * 4 * MS,
                                "precision": "fp32",
                                "tensor_active_pct": 2.0,
                            }
                        ],
                    },
                }
            ],
        },
        {
            "id": "tensor-cores-idle silent: no GEMMs, tensor cores have nothing to do",
            "rules": GPU_RULES,
            "rows": {
                "kernels": kernels_of(ELEMENTWISE),
                "gpu_metrics": busy(tensor_active=0, gr_active=90, sm_issue=60),
            },
            "expect": [],
        },
        {
            "id": "tensor-cores-idle silent: bf16 GEMMs keep the tensor cores busy",
            "rules": GPU_RULES,
            "rows": {
                "kernels": kernels_of(BF16_GEMM),
                "gpu_metrics": busy(tensor_active=55, gr_active=95, sm_issue=40),
            },
            "expect": [],
        },
        {
            "id": "tensor-cores-idle silent: no GPU metrics sampled",
            "rules": GPU_RULES,
            "rows": {"kernels": kernels_of(SGEMM)},
            "expect": [],
        },
    ]
]
