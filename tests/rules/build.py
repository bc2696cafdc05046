"""Builders of canonical rows for the rule cases (tests/rules/<rule>.py): kernels, copies, CUDA
calls, Nsight Compute launches, steps, device memory and Python backtraces. Times in ns."""

from __future__ import annotations

MS = 1_000_000
US = 1_000
PID = 100


def kernel(
    start: int, dur: int, name: str = "gemm", rid: int = 1, dev: int = 0, corr: int | None = None
) -> dict:
    return {
        "report_id": rid,
        "device_id": dev,
        "stream_id": 7,
        "pid": PID,
        "start_ns": start,
        "end_ns": start + dur,
        "duration_ns": dur,
        "name": name,
        "short_name": name,
        "correlation_id": corr,
    }


def copy(
    start: int,
    dur: int,
    nbytes: int,
    kind: str = "HtoD",
    host: str = "pinned",
    rid: int = 1,
    corr: int | None = None,
) -> dict:
    src, dst = (host, "device") if kind == "HtoD" else ("device", host)
    return {
        "report_id": rid,
        "device_id": 0,
        "stream_id": 7,
        "pid": PID,
        "start_ns": start,
        "end_ns": start + dur,
        "duration_ns": dur,
        "bytes": nbytes,
        "direction": kind,
        "src_memory": src,
        "dst_memory": dst,
        "correlation_id": corr,
    }


def api(start: int, dur: int, name: str, rid: int = 1, corr: int | None = None) -> dict:
    return {
        "report_id": rid,
        "pid": PID,
        "tid": PID,
        "start_ns": start,
        "end_ns": start + dur,
        "duration_ns": dur,
        "name": name,
        "correlation_id": corr,
    }


def launched(
    start: int, dur: int, corr: int, name: str = "gemm", issue_at: int | None = None
) -> tuple[dict, dict]:
    """A kernel and the cudaLaunchKernel that issued it (by default 5 us before it starts)."""
    at = start - 5 * US if issue_at is None else issue_at
    return kernel(start, dur, name, corr=corr), api(at, 3 * US, "cudaLaunchKernel", corr=corr)


def ncu_launch(
    launch: int, name: str, duration_ns: float, rid: int = 1, **metrics: float
) -> tuple[dict, list[dict]]:
    k = {"report_id": rid, "launch_id": launch, "name": name, "device_id": 0}
    rows = [
        {
            "report_id": rid,
            "launch_id": launch,
            "metric_name": "gpu__time_duration.sum",
            "unit": "ns",
            "value": duration_ns,
        }
    ]
    rows += [
        {"report_id": rid, "launch_id": launch, "metric_name": m.replace("__DOT__", "."), "value": v}
        for m, v in metrics.items()
    ]
    return k, rows


def idle(gap_ms: int, cause: str) -> dict[str, list[dict]]:
    """Two 1 ms kernels `gap_ms` apart; the host is in a sync call or launches late."""
    k1, a1 = launched(0, 1 * MS, corr=1)
    start2 = (1 + gap_ms) * MS
    if cause == "sync":
        k2, a2 = launched(start2, 1 * MS, corr=2, issue_at=0)
        extra = [api(1 * MS - 10 * US, gap_ms * MS, "cudaDeviceSynchronize")]
    else:  # late launch
        k2, a2 = launched(start2, 1 * MS, corr=2)
        extra = []
    return {"kernels": [k1, k2], "cuda_api": [a1, a2, *extra]}


def storm(n: int, dur: int = 2 * US, gap: int = 3 * US) -> dict[str, list[dict]]:
    ks, apis = [], []
    for i in range(n):
        k, a = launched(i * (dur + gap), dur, corr=i + 1, name="elementwise_add")
        ks.append(k)
        apis.append(a)
    return {"kernels": ks, "cuda_api": apis}


def with_stacks(rows: dict[str, list[dict]], lines: dict[int, int]) -> dict[str, list[dict]]:
    """`rows` plus a Python backtrace (nsys --python-backtrace=cuda) on each CUDA call whose
    correlation id `lines` maps to a line of /home/u/train.py: `step` at that line calls torch's
    `mul_`, called from `main`. Calls without a correlation id (syncs) are matched by their index
    in cuda_api, as the negative key -(i + 1)."""
    frames = [
        {"report_id": 1, "frame_id": 1, "kind": "python", "function": "mul_",
         "file": "/usr/lib/python3/site-packages/torch/_tensor.py", "line": 40, "user": False},
        {"report_id": 1, "frame_id": 2, "kind": "python", "function": "main", "file": "/home/u/train.py",
         "line": 120, "user": True},
    ]  # fmt: skip
    stacks, events = [], []
    for line in sorted(set(lines.values())):
        frames.append({"report_id": 1, "frame_id": 100 + line, "kind": "python", "function": "step",
                       "file": "/home/u/train.py", "line": line, "user": True})  # fmt: skip
        for depth, frame in enumerate((1, 100 + line, 2)):
            stacks.append({"report_id": 1, "stack_id": line, "depth": depth, "frame_id": frame})
    apis = [dict(a) for a in rows["cuda_api"]]
    for i, a in enumerate(apis):
        if a["correlation_id"] is None and -(i + 1) in lines:
            a["correlation_id"] = 10_000 + i
            line = lines[-(i + 1)]
        elif a["correlation_id"] in lines:
            line = lines[a["correlation_id"]]
        else:
            continue
        events.append({"report_id": 1, "source": "python_cuda", "start_ns": a["start_ns"], "end_ns": a["end_ns"],
                       "pid": PID, "tid": PID, "global_tid": PID, "stack_id": line,
                       "correlation_id": a["correlation_id"]})  # fmt: skip
    return {**rows, "cuda_api": apis, "stack_frames": frames, "stacks": stacks, "stack_events": events}


def warmup_then_steps(steady_busy: int) -> dict[str, list[dict]]:
    """A 100 ms warm-up step (the GPU busy 2 ms of it) and five 10 ms steps whose kernels run
    `steady_busy` ns each: the steps table flags step 0 as warm-up."""
    ks = [kernel(0, 1 * MS), kernel(99 * MS, 1 * MS)]
    steps = [
        {
            "report_id": 1,
            "step": 0,
            "name": "step 0",
            "number": 0,
            "source": "nvtx",
            "series": 1,
            "pid": PID,
            "start_ns": 0,
            "end_ns": 100 * MS,
            "duration_ns": 100 * MS,
            "steady": False,
        }
    ]
    for i in range(1, 6):
        t = 100 * MS + (i - 1) * 10 * MS
        ks.append(kernel(t, steady_busy))
        steps.append(
            {
                "report_id": 1,
                "step": i,
                "name": f"step {i}",
                "number": i,
                "source": "nvtx",
                "series": 1,
                "pid": PID,
                "start_ns": t,
                "end_ns": t + 10 * MS,
                "duration_ns": 10 * MS,
                "steady": True,
            }
        )
    ks.append(kernel(150 * MS - 1, 1))  # the last step's work reaches its end
    return {"kernels": ks, "steps": steps}


def ncu(name: str = "void heavy_kernel(float*)", **m: float) -> dict[str, list[dict]]:
    k, rows = ncu_launch(0, name, 1 * MS, **m)
    return {"reports": [{"report_id": 1, "format": "ncu"}], "ncu_kernels": [k], "ncu_metrics": rows}


def alloc(ts: int, n: int) -> dict:
    return {"report_id": 1, "device_id": 0, "pid": PID, "ts_ns": ts, "operation": "alloc", "bytes": n,
            "delta_bytes": n, "memory": "device"}  # fmt: skip


def memory_per_step(grows: list[int], total_memory: int = 80 << 30) -> dict[str, list[dict]]:
    """The warm-up-then-steps timeline with device memory: 1 GiB allocated in the warm-up step,
    then `grows[i]` bytes allocated (never freed) in steady step i + 1."""
    rows = warmup_then_steps(5 * MS)
    events = [alloc(1 * MS, 1 << 30)]
    events += [alloc(100 * MS + i * 10 * MS + 2 * MS, n) for i, n in enumerate(grows) if n]
    gpus = [{"report_id": 1, "device_id": 0, "total_memory_bytes": total_memory}]
    return {**rows, "memory_events": events, "gpus": gpus}


SOL = "sm__throughput__DOT__avg__DOT__pct_of_peak_sustained_elapsed"
MEM = "gpu__compute_memory_throughput__DOT__avg__DOT__pct_of_peak_sustained_elapsed"
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active__DOT__ratio"
