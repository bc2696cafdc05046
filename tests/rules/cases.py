"""Rule cases as data: canonical rows in, findings (rule id, severity) out.

Each case names the rules it runs (`rules`), the rows it inserts per canonical table (a
`reports` row is added for every report id used), optional threshold overrides (`config`),
and the findings expected, as (rule_id, severity) pairs in rank order. Times in ns.
"""

from __future__ import annotations

from typing import Any

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


def _idle(gap_ms: int, cause: str) -> dict[str, list[dict]]:
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


def _storm(n: int, dur: int = 2 * US, gap: int = 3 * US) -> dict[str, list[dict]]:
    ks, apis = [], []
    for i in range(n):
        k, a = launched(i * (dur + gap), dur, corr=i + 1, name="elementwise_add")
        ks.append(k)
        apis.append(a)
    return {"kernels": ks, "cuda_api": apis}


def _with_stacks(rows: dict[str, list[dict]], lines: dict[int, int]) -> dict[str, list[dict]]:
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


def _warmup_then_steps(steady_busy: int) -> dict[str, list[dict]]:
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


def _ncu(name: str = "void heavy_kernel(float*)", **m: float) -> dict[str, list[dict]]:
    k, rows = ncu_launch(0, name, 1 * MS, **m)
    return {"reports": [{"report_id": 1, "format": "ncu"}], "ncu_kernels": [k], "ncu_metrics": rows}


def _alloc(ts: int, n: int) -> dict:
    return {"report_id": 1, "device_id": 0, "pid": PID, "ts_ns": ts, "operation": "alloc", "bytes": n,
            "delta_bytes": n, "memory": "device"}  # fmt: skip


def _memory_per_step(grows: list[int], total_memory: int = 80 << 30) -> dict[str, list[dict]]:
    """The warm-up-then-steps timeline with device memory: 1 GiB allocated in the warm-up step,
    then `grows[i]` bytes allocated (never freed) in steady step i + 1."""
    rows = _warmup_then_steps(5 * MS)
    events = [_alloc(1 * MS, 1 << 30)]
    events += [_alloc(100 * MS + i * 10 * MS + 2 * MS, n) for i, n in enumerate(grows) if n]
    gpus = [{"report_id": 1, "device_id": 0, "total_memory_bytes": total_memory}]
    return {**rows, "memory_events": events, "gpus": gpus}


SOL = "sm__throughput__DOT__avg__DOT__pct_of_peak_sustained_elapsed"
MEM = "gpu__compute_memory_throughput__DOT__avg__DOT__pct_of_peak_sustained_elapsed"
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active__DOT__ratio"

CASES: list[dict[str, Any]] = [
    # memory-growth
    {
        "id": "memory-leak-every-step",
        "rules": ["memory-growth"],
        "rows": _memory_per_step([4 << 20] * 5),
        "expect": [("memory-growth", "warning")],
    },
    {
        "id": "memory-leak-fills-the-device-soon",
        "rules": ["memory-growth"],
        "rows": _memory_per_step([4 << 20] * 5, total_memory=(1 << 30) + (200 << 20)),
        "expect": [("memory-growth", "critical")],
    },
    {
        "id": "memory-pool-grown-once-passes",
        "rules": ["memory-growth"],
        "rows": _memory_per_step([128 << 20, 0, 0, 0, 0]),
        "expect": [],
    },
    {
        "id": "memory-growth-below-threshold-passes",
        "rules": ["memory-growth"],
        "rows": _memory_per_step([1 << 20] * 5),
        "expect": [],
    },
    # gpu-idle
    # These captures are milliseconds long: idle_min_span_ns is lowered so the rule judges them.
    {
        "id": "idle-sync-critical",
        "rules": ["gpu-idle"],
        "rows": _idle(9, "sync"),
        "config": {"idle_min_span_ns": MS},
        "expect": [("gpu-idle", "critical")],
    },
    {
        "id": "idle-late-launch-critical",
        "rules": ["gpu-idle"],
        "rows": _idle(9, "late"),
        "config": {"idle_min_span_ns": MS},
        "expect": [("gpu-idle", "critical")],
    },
    {
        "id": "idle-warning",
        "rules": ["gpu-idle"],
        "config": {"idle_min_span_ns": MS},
        "rows": {"kernels": [kernel(0, 7 * MS), kernel(10 * MS, 1 * MS)]},
        "expect": [("gpu-idle", "warning")],
    },
    {"id": "idle-capture-too-short-passes", "rules": ["gpu-idle"], "rows": _idle(9, "sync"), "expect": []},
    {
        "id": "idle-threshold-raised",
        "rules": ["gpu-idle"],
        "config": {"idle_share_warning": 0.9},
        "rows": _idle(9, "sync"),
        "expect": [],
    },
    # steps: warm-up is start-up, not steady-state idle; the steady state is judged on its own
    {
        "id": "idle-only-in-warmup-passes",
        "rules": ["gpu-idle", "startup"],
        "rows": _warmup_then_steps(10 * MS - 1),
        "config": {"idle_min_span_ns": MS},
        "expect": [("startup", "info")],
    },
    {
        "id": "idle-in-steady-state-critical",
        "rules": ["gpu-idle"],
        "rows": _warmup_then_steps(1 * MS),
        "config": {"idle_min_span_ns": MS},
        "expect": [("gpu-idle", "critical")],
    },
    {
        "id": "short-startup-passes",
        "rules": ["startup"],
        "rows": _warmup_then_steps(10 * MS - 1),
        "config": {"startup_min_ns": 200 * MS},
        "expect": [],
    },
    # a CUDA graph replay traced as one row is GPU work, not idle time
    {
        "id": "graph-replay-is-busy",
        "rules": ["gpu-idle"],
        "config": {"idle_min_span_ns": MS},
        "rows": {
            "kernels": [kernel(0, 1 * MS), kernel(9 * MS, 1 * MS)],
            "graph_executions": [
                {
                    "report_id": 1,
                    "device_id": 0,
                    "stream_id": 7,
                    "pid": PID,
                    "start_ns": 1 * MS,
                    "end_ns": 9 * MS,
                    "duration_ns": 8 * MS,
                    "graph_id": 1,
                    "correlation_id": 9,
                }
            ],
        },
        "expect": [],
    },
    {
        "id": "idle-busy-passes",
        "rules": ["gpu-idle"],
        "rows": {"kernels": [kernel(0, 5 * MS), kernel(5 * MS + 2 * US, 5 * MS)]},
        "expect": [],
    },
    # host-sync
    {
        "id": "sync-while-idle",
        "rules": ["host-sync"],
        "rows": _idle(9, "sync"),
        "expect": [("host-sync", "critical")],
    },
    {
        # the same, the synchronize call (the third CUDA call) backtraced to line 61
        "id": "sync-while-idle-names-the-line",
        "rules": ["host-sync"],
        "rows": _with_stacks(_idle(9, "sync"), {-3: 61}),
        "expect": [("host-sync", "critical")],
        "location": {"function": "step", "line": 61, "calls": 1, "blocked_ns": 9 * MS},
        "says": ["The blocking calls came from train.py:61 in step, calling mul_"],
    },
    {
        "id": "sync-while-busy-info",
        "rules": ["host-sync"],
        "rows": {
            "kernels": [kernel(0, 10 * MS)],
            "cuda_api": [api(0, 3 * US, "cudaLaunchKernel"), api(5 * US, 10 * MS, "cudaStreamSynchronize")],
        },
        "expect": [("host-sync", "info")],
    },
    {
        "id": "async-calls-pass",
        "rules": ["host-sync"],
        "rows": {"kernels": [kernel(0, 10 * MS)], "cuda_api": [api(0, 10 * MS, "cudaMemcpyAsync")]},
        "expect": [],
    },
    # copy-dominated
    {
        "id": "h2d-critical",
        "rules": ["copy-dominated"],
        "rows": {"memcpy": [copy(0, 90 * MS, 4_500_000_000)], "kernels": [kernel(90 * MS, 5 * MS)]},
        "expect": [("copy-dominated", "critical")],
    },
    {
        "id": "d2h-warning",
        "rules": ["copy-dominated"],
        "rows": {
            "memcpy": [copy(0, 40 * MS, 2_000_000_000, "DtoH")],
            "kernels": [kernel(40 * MS, 10 * MS), kernel(90 * MS, 10 * MS)],
        },
        "expect": [("copy-dominated", "warning")],
    },
    {
        "id": "kernels-busy-passes",
        "rules": ["copy-dominated"],
        "rows": {"memcpy": [copy(0, 40 * MS, 2_000_000_000)], "kernels": [kernel(40 * MS, 60 * MS)]},
        "expect": [],
    },
    {
        "id": "dtod-not-counted",
        "rules": ["copy-dominated"],
        "rows": {
            "memcpy": [
                {
                    **copy(0, 90 * MS, 10**10),
                    "direction": "DtoD",
                    "src_memory": "device",
                    "dst_memory": "device",
                }
            ],
            "kernels": [kernel(90 * MS, 5 * MS)],
        },
        "expect": [],
    },
    # pageable-memcpy
    {
        "id": "pageable-critical",
        "rules": ["pageable-memcpy"],
        "rows": {
            "memcpy": [copy(0, 50 * MS, 300_000_000, "DtoH", "pageable"), copy(60 * MS, 2 * MS, 100_000_000)],
            "kernels": [kernel(62 * MS, 38 * MS)],
        },
        "expect": [("pageable-memcpy", "critical")],
    },
    {
        "id": "pageable-info",
        "rules": ["pageable-memcpy"],
        "rows": {
            "memcpy": [copy(0, 2 * MS, 10_000_000, "HtoD", "pageable")],
            "kernels": [kernel(2 * MS, 98 * MS)],
        },
        "expect": [("pageable-memcpy", "info")],
    },
    {
        "id": "pinned-passes",
        "rules": ["pageable-memcpy"],
        "rows": {"memcpy": [copy(0, 50 * MS, 2_500_000_000)], "kernels": [kernel(50 * MS, 50 * MS)]},
        "expect": [],
    },
    # small-kernel-storm
    {
        "id": "storm-critical",
        "rules": ["small-kernel-storm"],
        "rows": _storm(600),
        "expect": [("small-kernel-storm", "critical")],
    },
    {
        # the same storm with Python backtraces: 500 launches from line 88, 100 from line 95
        "id": "storm-critical-names-the-line",
        "rules": ["small-kernel-storm"],
        "rows": _with_stacks(_storm(600), {i + 1: 88 if i < 500 else 95 for i in range(600)}),
        "expect": [("small-kernel-storm", "critical")],
        "location": {"function": "step", "line": 88, "calls": 500, "total_calls": 600},
        "says": ["500 launched from train.py:88 in step", "calling mul_"],
    },
    {"id": "few-small-kernels-pass", "rules": ["small-kernel-storm"], "rows": _storm(100), "expect": []},
    # trimmed exports carry no deviceId: the kernels' device is NULL and still one device
    {
        "id": "storm-without-device-ids",
        "rules": ["small-kernel-storm"],
        "rows": {**_storm(600), "kernels": [{**k, "device_id": None} for k in _storm(600)["kernels"]]},
        "expect": [("small-kernel-storm", "critical")],
    },
    {
        "id": "storm-threshold-lowered",
        "rules": ["small-kernel-storm"],
        "config": {"small_kernel_ns": 1000},
        "rows": _storm(600),
        "expect": [],
    },
    # no-gpu-activity
    {
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
    },
    {"id": "gpu-present", "rules": ["no-gpu-activity"], "rows": {"kernels": [kernel(0, MS)]}, "expect": []},
    # ncu
    {
        "id": "stall-dominated",
        "rules": ["stall-dominated"],
        "rows": _ncu(
            **{STALL.format("long_scoreboard"): 6.0, STALL.format("barrier"): 1.0, STALL.format("wait"): 1.0}
        ),
        "expect": [("stall-dominated", "warning")],
    },
    {
        "id": "stalls-spread-pass",
        "rules": ["stall-dominated"],
        "rows": _ncu(
            **{STALL.format("long_scoreboard"): 3.0, STALL.format("barrier"): 3.0, STALL.format("wait"): 3.0}
        ),
        "expect": [],
    },
    {
        "id": "memory-bound-at-peak",
        "rules": ["memory-bound", "latency-bound"],
        "rows": _ncu(**{SOL: 20.0, MEM: 90.0}),
        "expect": [("memory-bound", "info")],
    },
    {
        "id": "memory-bound-below-peak",
        "rules": ["memory-bound"],
        "rows": _ncu(**{SOL: 20.0, MEM: 70.0}),
        "expect": [("memory-bound", "warning")],
    },
    {
        "id": "latency-bound",
        "rules": ["memory-bound", "latency-bound"],
        "rows": _ncu(**{SOL: 10.0, MEM: 15.0}),
        "expect": [("latency-bound", "warning")],
    },
    {
        "id": "compute-bound-passes",
        "rules": ["memory-bound", "latency-bound"],
        "rows": _ncu(**{SOL: 85.0, MEM: 30.0}),
        "expect": [],
    },
    {
        # an FP32 SGEMM near its FMA peak: the lever is tensor cores, not its occupancy or stalls
        "id": "fp32-sgemm-on-the-fma-pipe",
        "rules": ["fp32-matmul-kernel", "low-occupancy", "stall-dominated", "memory-bound"],
        "rows": _ncu(
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
    },
    {
        "id": "low-occupancy-registers",
        "rules": ["low-occupancy"],
        "rows": _ncu(
            sm__maximum_warps_per_active_cycle_pct=25.0,
            sm__warps_active__DOT__avg__DOT__pct_of_peak_sustained_active=22.0,
            launch__occupancy_limit_registers=2,
            launch__occupancy_limit_shared_mem=8,
            launch__occupancy_limit_warps=8,
            launch__occupancy_limit_blocks=32,
        ),
        "expect": [("low-occupancy", "warning")],
    },
    {
        "id": "low-achieved-only",
        "rules": ["low-occupancy"],
        "rows": _ncu(
            sm__maximum_warps_per_active_cycle_pct=100.0,
            sm__warps_active__DOT__avg__DOT__pct_of_peak_sustained_active=20.0,
        ),
        "expect": [("low-occupancy", "info")],
    },
    {
        "id": "occupancy-fine",
        "rules": ["low-occupancy"],
        "rows": _ncu(
            sm__maximum_warps_per_active_cycle_pct=100.0,
            sm__warps_active__DOT__avg__DOT__pct_of_peak_sustained_active=80.0,
        ),
        "expect": [],
    },
    {
        "id": "roofline-headroom-far-below-dram-roof",
        "rules": ["roofline-headroom"],
        "rows": _ncu(
            dram__bytes__DOT__sum__DOT__per_second=0.2 * 1280 * 2.6e9,
            dram__bytes__DOT__sum__DOT__peak_sustained=1280,
            dram__cycles_elapsed__DOT__avg__DOT__per_second=2.6e9,
        ),
        "expect": [("roofline-headroom", "warning")],
    },
    {
        "id": "roofline-headroom-near-roof-passes",
        "rules": ["roofline-headroom"],
        "rows": _ncu(
            dram__bytes__DOT__sum__DOT__per_second=0.85 * 1280 * 2.6e9,
            dram__bytes__DOT__sum__DOT__peak_sustained=1280,
            dram__cycles_elapsed__DOT__avg__DOT__per_second=2.6e9,
        ),
        "expect": [],
    },
]
