"""Builders of the GPU metrics rule cases: twenty 5 ms samples span each case's 100 ms."""

from __future__ import annotations

from typing import Any

from rules.build import MS, PID, kernel, launched

GPU_RULES = ["tensor-cores-idle", "low-issue-while-busy", "dram-saturated", "pcie-saturated"]


PERIOD = 5 * MS


def samples(
    metric: str, value: float, start: int = 0, n: int = 20, unit: str = "%", rid: int = 1
) -> list[dict]:
    return [
        {
            "report_id": rid,
            "device_id": 0,
            "ts_ns": start + i * PERIOD,
            "period_ns": PERIOD,
            "metric": metric,
            "raw_name": metric,
            "unit": unit,
            "value": value,
        }
        for i in range(n)
    ]


def busy(**values: float) -> list[dict]:
    return [row for metric, v in values.items() for row in samples(metric, v)]


def kernels_of(name: str, n: int = 20, dur: int = 4 * MS) -> list[dict]:
    return [kernel(i * 5 * MS, dur, name) for i in range(n)]


SGEMM = "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)"
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>>(int, T2, T3)"


def optimizer(**values: float) -> dict[str, list[dict]]:
    """An NVTX range 'optimizer' over 100 ms that launches 50 tiny kernels, with these metrics."""
    pairs = [launched(i * 2 * MS + 10_000, 20_000, corr=1000 + i, name=ELEMENTWISE) for i in range(50)]
    rng = {"report_id": 1, "pid": PID, "tid": PID, "global_tid": PID, "start_ns": 0, "end_ns": 100 * MS}
    rng.update(duration_ns=100 * MS, name="optimizer", base_name="optimizer")
    return {
        "kernels": [k for k, _ in pairs],
        "cuda_api": [a for _, a in pairs],
        "nvtx_ranges": [rng],
        "gpu_metrics": busy(**values),
    }


def with_kinds(case: dict[str, Any]) -> dict[str, Any]:
    """The activity kinds an ingest would record for the case's tables, gpu_metrics included
    (tests/test_rules_cases.py maps the other tables)."""
    kinds = {"kernels": "kernel", "cuda_api": "cuda_api", "nvtx_ranges": "nvtx", "gpu_metrics": "gpu_metrics"}
    rows = case["rows"]
    found = sorted({kinds[t] for t in rows if t in kinds})
    return {
        **case,
        "rows": {"reports": [{"report_id": 1, "format": "nsys", "activity_kinds": found}], **rows},
    }
