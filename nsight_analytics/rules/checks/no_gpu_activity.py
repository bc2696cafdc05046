"""no-gpu-activity: a report without GPU records, so nothing can be said about the GPU."""

from __future__ import annotations

from ...units import count
from ..context import Context
from ..model import Finding, rule


@rule("no-gpu-activity", order=110, needs=(), queries=("api_summary",), severities=("warning",))
def no_gpu_activity(ctx: Context, rid: int) -> list[Finding]:
    """The report holds no kernel, memcpy or memset records: nothing can be said about the GPU.

    Anti-pattern: reading such a report as "the GPU is healthy / idle". CUDA tracing was off
    (`-t` without `cuda`) or failed, typically because the nsys is too old for the CUDA
    driver; NVTX and OS runtime rows can still be there.

    Fix: Profile again with `nsys profile -t cuda,nvtx,osrt` using an nsys release that supports
    the installed CUDA driver (an nsys older than the driver records no CUDA activity).

    est_savings_ns: None (nothing measured).
    """
    row = next((r for r in ctx.reports() if r.report_id == rid), None)
    if row is None:
        return []
    kinds = [str(k) for k in (row.activity_kinds or [])]
    if row.has_kernels or any(k in kinds for k in ("kernel", "memcpy", "memset")):
        return []
    if kinds == ["power"]:  # a power log (nvml, nvidia-smi): samples to align, not a capture
        return []
    api_rows = int(ctx.query("api_summary", rid).total("calls"))
    captured = ", ".join(k for k in kinds if k != "processes") or "nothing"
    message = (
        f"{ctx.report_file(rid)} has no kernel, memcpy or memset records (it holds: {captured}; "
        f"{count(api_rows)} CUDA API rows). GPU utilization, copies and kernels cannot be judged from it."
    )
    ev = {"activity_kinds": kinds, "cuda_api_rows": api_rows}
    return [
        Finding(
            "no-gpu-activity", "warning", rid, "No GPU activity captured", message, no_gpu_activity.fix, ev
        )
    ]
