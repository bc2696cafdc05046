"""Rule cases of the GPU metrics rules, in the format of tests/rules/cases.py: canonical rows in,
findings (rule id, severity) out. Twenty 5 ms samples span each case's 100 ms."""

from __future__ import annotations

from typing import Any

from rules.cases import MS, PID, kernel, launched

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


def _busy(**values: float) -> list[dict]:
    return [row for metric, v in values.items() for row in samples(metric, v)]


def _kernels(name: str, n: int = 20, dur: int = 4 * MS) -> list[dict]:
    return [kernel(i * 5 * MS, dur, name) for i in range(n)]


SGEMM = "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)"
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, AddFunctor<float>>(int, T2, T3)"


def _optimizer(**values: float) -> dict[str, list[dict]]:
    """An NVTX range 'optimizer' over 100 ms that launches 50 tiny kernels, with these metrics."""
    pairs = [launched(i * 2 * MS + 10_000, 20_000, corr=1000 + i, name=ELEMENTWISE) for i in range(50)]
    rng = {"report_id": 1, "pid": PID, "tid": PID, "global_tid": PID, "start_ns": 0, "end_ns": 100 * MS}
    rng.update(duration_ns=100 * MS, name="optimizer", base_name="optimizer")
    return {
        "kernels": [k for k, _ in pairs],
        "cuda_api": [a for _, a in pairs],
        "nvtx_ranges": [rng],
        "gpu_metrics": _busy(**values),
    }


def _with_kinds(case: dict[str, Any]) -> dict[str, Any]:
    """The activity kinds an ingest would record for the case's tables, gpu_metrics included
    (tests/test_rules_cases.py maps the other tables)."""
    kinds = {"kernels": "kernel", "cuda_api": "cuda_api", "nvtx_ranges": "nvtx", "gpu_metrics": "gpu_metrics"}
    rows = case["rows"]
    found = sorted({kinds[t] for t in rows if t in kinds})
    return {
        **case,
        "rows": {"reports": [{"report_id": 1, "format": "nsys", "activity_kinds": found}], **rows},
    }


GPU_METRIC_CASES: list[dict[str, Any]] = [
    {
        "id": "low-issue-while-busy: tiny kernels keep the GPU busy, SMs barely issue",
        "rules": GPU_RULES,
        "rows": _optimizer(gr_active=30, sm_active=5, sm_issue=2, warps_in_flight=1),
        "expect": [("low-issue-while-busy", "warning")],
    },
    {
        "id": "low-issue-while-busy silent: SMs issue on most busy cycles",
        "rules": GPU_RULES,
        "rows": _optimizer(gr_active=90, sm_active=85, sm_issue=60, warps_in_flight=30),
        "expect": [],
    },
    {
        "id": "low-issue-while-busy silent: the GPU is idle, not busy (gpu-idle's finding)",
        "rules": GPU_RULES,
        "rows": _optimizer(gr_active=3, sm_active=1, sm_issue=0.5, warps_in_flight=0.2),
        "expect": [],
    },
    {
        "id": "tensor-cores-idle: fp32 SIMT GEMMs at 2% tensor active",
        "rules": GPU_RULES,
        "rows": {
            "kernels": _kernels(SGEMM),
            "gpu_metrics": _busy(tensor_active=2, gr_active=90, sm_issue=60),
        },
        "expect": [("tensor-cores-idle", "warning")],
    },
    {
        "id": "tensor-cores-idle silent: no GEMMs, tensor cores have nothing to do",
        "rules": GPU_RULES,
        "rows": {
            "kernels": _kernels(ELEMENTWISE),
            "gpu_metrics": _busy(tensor_active=0, gr_active=90, sm_issue=60),
        },
        "expect": [],
    },
    {
        "id": "tensor-cores-idle silent: bf16 GEMMs keep the tensor cores busy",
        "rules": GPU_RULES,
        "rows": {
            "kernels": _kernels(BF16_GEMM),
            "gpu_metrics": _busy(tensor_active=55, gr_active=95, sm_issue=40),
        },
        "expect": [],
    },
    {
        "id": "tensor-cores-idle silent: no GPU metrics sampled",
        "rules": GPU_RULES,
        "rows": {"kernels": _kernels(SGEMM)},
        "expect": [],
    },
    {
        "id": "dram-saturated: read + write at 90% of peak for the whole run",
        "rules": GPU_RULES,
        "rows": {"kernels": _kernels(ELEMENTWISE), "gpu_metrics": _busy(dram_read=60, dram_write=30)},
        "expect": [("dram-saturated", "warning")],
    },
    {
        "id": "dram-saturated silent: 40% of peak",
        "rules": GPU_RULES,
        "rows": {"kernels": _kernels(ELEMENTWISE), "gpu_metrics": _busy(dram_read=25, dram_write=15)},
        "expect": [],
    },
    {
        "id": "pcie-saturated: host-to-device at 90% of the link",
        "rules": GPU_RULES,
        "rows": {"kernels": _kernels(ELEMENTWISE), "gpu_metrics": _busy(pcie_rx=90, pcie_tx=2)},
        "expect": [("pcie-saturated", "warning")],
    },
    {
        "id": "pcie-saturated: 10 ms of 100 at the limit is info",
        "rules": GPU_RULES,
        "rows": {
            "kernels": _kernels(ELEMENTWISE),
            "gpu_metrics": samples("pcie_rx", 95, n=2) + samples("pcie_rx", 5, start=2 * PERIOD, n=18),
        },
        "expect": [("pcie-saturated", "info")],
    },
    {
        "id": "pcie-saturated silent: 30% of the link",
        "rules": GPU_RULES,
        "rows": {"kernels": _kernels(ELEMENTWISE), "gpu_metrics": _busy(pcie_rx=30, pcie_tx=30)},
        "expect": [],
    },
]
GPU_METRIC_CASES = [_with_kinds(c) for c in GPU_METRIC_CASES]
