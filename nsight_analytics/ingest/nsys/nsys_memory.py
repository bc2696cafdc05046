"""nsys GPU memory usage events (`--cuda-memory-usage=true`) -> `memory_events`.

`CUDA_GPU_MEMORY_USAGE_EVENTS` records each device allocation and free the driver sees
(cudaMalloc / cudaFree and their driver forms, module statics), not what a caching allocator
such as PyTorch's hands out inside its pools: bytes held here are what the process reserved
from the driver. The operation and memory-kind codes are CUPTI's
(ENUM_CUDA_DEV_MEM_EVENT_OPER, ENUM_CUDA_MEM_KIND), stable across versions, so the mapping is
written out as for the other enums in nsys.py.
"""

from __future__ import annotations

from . import nsys

MEMORY_USAGE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
OPERATIONS = {0: "alloc", 1: "free"}


def memory_events_sql(src: nsys.Source) -> str | None:
    """One row per allocation or free; NULL where the export lacks a column."""
    if not src.has(MEMORY_USAGE):
        return None
    t, a = MEMORY_USAGE, "m"
    gpid = src.col(t, "globalPid", a)
    op = src.col(t, "memoryOperationType", a)
    size = src.col(t, "bytes", a)
    cols = {
        "report_id": "$rid",
        "device_id": src.col(t, "deviceId", a),
        "pid": nsys.PID_OF.format(gpid) if gpid != "NULL" else "NULL",
        "global_pid": gpid,
        "tid": "NULL",
        "ts_ns": src.col(t, "start", a),
        "operation": nsys._decoded(src, t, "memoryOperationType", a, OPERATIONS),
        "bytes": size,
        # an operation nsa does not know moves no bytes rather than a guessed direction
        "delta_bytes": f"CASE {op} WHEN 0 THEN {size} WHEN 1 THEN -{size} ELSE 0 END",
        "address": src.col(t, "address", a),
        "memory": nsys._decoded(src, t, "memKind", a, nsys.MEM_KINDS),
        "allocated_bytes": "NULL",
        "reserved_bytes": "NULL",
        "name": src.col(t, "name", a),
    }
    return nsys._select(cols, "memory_events", f"FROM {src.ref(t)} {a}")
