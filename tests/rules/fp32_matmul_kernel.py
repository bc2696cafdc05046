"""Cases of fp32-matmul-kernel (one 1 ms Nsight Compute launch)."""

from __future__ import annotations

from typing import Any

from rules.build import MEM, MS, SOL, STALL, ncu

SPEEDUP = 2.0  # the default fp32_matmul_speedup

CASES: list[dict[str, Any]] = [
    {
        # an FP32 SGEMM near its FMA peak: the lever is tensor cores, not its occupancy or stalls;
        # at a 2x speed-up the 1 ms launch saves half
        "id": "fp32-sgemm-on-the-fma-pipe",
        "rules": ["fp32-matmul-kernel", "low-occupancy", "stall-dominated", "memory-bound"],
        "rows": ncu(
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4",
            **{SOL: 88.0, MEM: 60.0, STALL.format("selected"): 6.0, STALL.format("wait"): 1.0},
            sm__pipe_fma_cycles_active__DOT__avg__DOT__pct_of_peak_sustained_elapsed=79.0,
            sm__pipe_tensor_cycles_active__DOT__avg__DOT__pct_of_peak_sustained_elapsed=0.0,
            sm__maximum_warps_per_active_cycle_pct=12.5,
            sm__warps_active__DOT__avg__DOT__pct_of_peak_sustained_active=12.5,
            launch__occupancy_limit_registers=1,
            launch__occupancy_limit_warps=8,
        ),
        "expect": [("fp32-matmul-kernel", "warning")],
        "detail": [
            {
                "est_savings_ns": 1 * MS * (1 - 1 / SPEEDUP),
                "evidence": {
                    "ncu_ns": 1 * MS,
                    "time_at_stake_ns": 1 * MS,
                    "compute_pct": 88.0,
                    "fma_pct": 79.0,
                    "tensor_pct": 0.0,
                    "pipe": "fma",
                    "kernel_class": "gemm",
                    "math": "fp32",
                    "share": 1.0,
                    "speedup": SPEEDUP,
                },
            }
        ],
    },
    {
        # a bf16 GEMM on the tensor pipe near its peak: nothing to gain from tensor cores
        "id": "fp32-matmul-kernel silent: a bf16 GEMM on the tensor cores",
        "rules": ["fp32-matmul-kernel"],
        "rows": ncu(
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
            **{SOL: 88.0, MEM: 60.0},
            sm__pipe_fma_cycles_active__DOT__avg__DOT__pct_of_peak_sustained_elapsed=5.0,
            sm__pipe_tensor_cycles_active__DOT__avg__DOT__pct_of_peak_sustained_elapsed=80.0,
        ),
        "expect": [],
    },
]
