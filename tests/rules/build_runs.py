"""The runs of the run rules' cases (exposed-communication, straggler-rank, load-imbalance,
scaling-loss) and the evidence their findings must hold, computed here by hand from the timeline
each run draws.

A case's run is a data-parallel job drawn step by step (`ddp_run`): on each rank, step i is an
NVTX range [t, t + T] (t = i x T) holding a `data` range [t, t + data]; the GPU runs a 0.1 ms
`zero_grad` kernel at t (so every rank's GPU step window starts at t), a `gemm` kernel from
t + data for `compute`, then the step's all-reduce from its arrival a = t + data + compute to
E = (the last rank's arrival) + `latency`, the same end on every rank; an `overlap` kernel on a
second stream may run beside the all-reduce from a. Step 0 is warm-up; steps 1-5 are steady and
each steady GPU window is exactly T long. Per steady step, then, with p = 0.1 ms:
compute = p + compute + overlap, communication = E - a, overlapped = overlap, exposed =
E - a - overlap, a rank's wait = last arrival - a, its lateness = a - first arrival.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MS = 1_000_000
PID = 100
P = 100_000  # the zero_grad kernel that opens each step's GPU work
STEPS = 6  # step 0 warm-up, steps 1-5 steady
STEADY = STEPS - 1


@dataclass(frozen=True)
class Rank:
    data: int = 1 * MS  # host `data` phase: the compute launches after it
    compute: int = 5 * MS  # the gemm kernel
    overlap: int = 0  # compute beside the all-reduce, on a second stream
    sleep: int = 0  # a host wait (nanosleep) at the start of the data phase
    poll: int = 0  # a background thread of the process waiting in poll from each step's start


def ddp_run(run_id: int, name: str, ranks: list[Rank], step: int, latency: int, first_report: int) -> dict:
    """Canonical rows of one run: a report per rank (report first_report + rank, GPU = rank)."""
    rows: dict[str, list[dict[str, Any]]] = {
        "runs": [
            {"run_id": run_id, "name": name, "world_size": len(ranks), "ranks_seen": len(ranks), "hosts": 1,
             "rank_source": "file name", "clock_source": "session start", "clock_uncertainty_ns": 0}
        ],
        "ranks": [],
        "kernels": [],
        "comm_ops": [],
        "steps": [],
        "nvtx_ranges": [],
        "host_waits": [],
    }  # fmt: skip
    for r, plan in enumerate(ranks):
        rid = first_report + r
        rows["ranks"].append(
            {"run_id": run_id, "rank": r, "local_rank": r, "report_id": rid, "pid": None, "device_id": r,
             "rank_source": "file name", "clock_offset_ns": 0}
        )  # fmt: skip
    for i in range(STEPS):
        t = i * step
        arrivals = [t + p.data + p.compute for p in ranks]
        end = max(arrivals) + latency
        assert end <= t + step, "the step's all-reduce must end inside the step"
        for r, plan in enumerate(ranks):
            rid = first_report + r
            a = arrivals[r]
            rows["steps"].append(
                {"report_id": rid, "step": i, "name": f"step {i}", "number": i, "source": "nvtx", "series": 1,
                 "pid": PID, "start_ns": t, "end_ns": t + step, "duration_ns": step, "steady": i > 0}
            )  # fmt: skip
            rows["nvtx_ranges"] += [
                _range(rid, f"step {i}", t, step),
                _range(rid, "data", t, plan.data),
                _range(rid, "forward", t + plan.data, 50_000),
            ]
            if plan.sleep:
                rows["host_waits"].append(
                    {"report_id": rid, "pid": PID, "tid": PID, "start_ns": t, "end_ns": t + plan.sleep,
                     "duration_ns": plan.sleep, "name": "nanosleep", "source": "osrt"}
                )  # fmt: skip
            if plan.poll:
                rows["host_waits"].append(
                    {"report_id": rid, "pid": PID, "tid": PID + 1, "start_ns": t, "end_ns": t + plan.poll,
                     "duration_ns": plan.poll, "name": "poll", "source": "osrt"}
                )  # fmt: skip
            rows["kernels"] += [
                _kernel(rid, r, t, P, "zero_grad"),
                _kernel(rid, r, t + plan.data, plan.compute, "gemm"),
                _kernel(rid, r, a, end - a, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=9),
            ]
            if plan.overlap:
                rows["kernels"].append(_kernel(rid, r, a, plan.overlap, "backward_tail", stream=8))
            rows["comm_ops"].append(
                {**_kernel(rid, r, a, end - a, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=9),
                 "library": "nccl", "op": "all_reduce", "reduce_op": "sum", "dtype": "f32",
                 "message_bytes": 100 << 20, "group_size": len(ranks), "channel": "pg 0", "seq": i}
            )  # fmt: skip
    return rows


def _kernel(rid: int, dev: int, start: int, dur: int, name: str, stream: int = 7) -> dict:
    return {"report_id": rid, "device_id": dev, "stream_id": stream, "pid": PID, "start_ns": start,
            "end_ns": start + dur, "duration_ns": dur, "name": name}  # fmt: skip


def _range(rid: int, name: str, start: int, dur: int) -> dict:
    return {"report_id": rid, "pid": PID, "tid": PID, "start_ns": start, "end_ns": start + dur,
            "duration_ns": dur, "name": name, "base_name": name, "range_api": "push_pop"}  # fmt: skip


def merged(*runs: dict) -> dict:
    out: dict[str, list[dict]] = {}
    for rows in runs:
        for table, table_rows in rows.items():
            out.setdefault(table, []).extend(table_rows)
    return out


RUN_RULES = ["exposed-communication", "straggler-rank", "load-imbalance", "scaling-loss"]

# --- exposed-communication, no straggler: everyone arrives at t + 6 ms, the all-reduce takes 3 ms
# after that; how much of it each rank hides differs (overlap 1, 0, 2.5, 0.5 ms). Per steady step
# exposed = 3 ms - overlap: 2, 3, 0.5, 2.5 ms of the 10 ms step -> 20%, 30%, 5%, 25%. The worst
# rank is rank 1 (30% >= 25%: critical); ranks at 10% or more, worst first: 1, 3, 0. Saving: the
# least exposed rank's time, rank 2's 0.5 ms x 5 steps.
OVERLAP = [1 * MS, 0, 5 * MS // 2, MS // 2]
EXPOSED = ddp_run(
    1, "ddp_w4", [Rank(overlap=o) for o in OVERLAP], step=10 * MS, latency=3 * MS, first_report=1
)
EXPOSED_EVIDENCE = {
    "worst_rank": 1,
    "exposed_share": 0.30,
    "explained_by_straggler": False,
    "ranks": [
        {"rank": r, "report_id": 1 + r, "steps": STEADY, "comm_ns": 3 * MS * STEADY, "overlapped_ns": o * STEADY,
         "exposed_ns": (3 * MS - o) * STEADY, "steady_ns": 10 * MS * STEADY, "exposed_share": (3 * MS - o) / (10 * MS)}
        for r, o in enumerate(OVERLAP)
    ],
}  # fmt: skip

# --- a straggler: rank 2 sleeps 8 ms at the start of its data phase (data 9 ms, the others 1 ms),
# so it arrives at t + 14 ms, the others at t + 6 ms; the all-reduce ends 1 ms after it. A
# background thread of rank 2's process polls 15 ms a step (the others' 1 ms): not the thread that
# runs the steps, so not what rank 2 did instead. Per
# steady step (T = 20 ms): the others wait 8 ms each (24 ms together), rank 2 is 8 ms late (40% of
# its step: critical) and last at all 5 steady collectives. Saving: 8 ms x 5 steps. What it did
# instead: its `data` range 9 ms against the median other rank's 1 ms (+8 ms) and nanosleep 8 ms
# against 0 on the thread that runs its steps; its compute equals the others' (compute_vs_median
# 1), so no kernel is named; its GPU idles 20 - (0.1 + 15 - 9) = 13.9 ms a step, the others'
# 20 - (0.1 + 15 - 1) = 5.9 ms (its host issued the work 8 ms late).
# exposed-communication: the others expose 9 ms of 20 (45%), 8 ms of it waiting for rank 2: the
# wait (3 x 40 ms) is well over half their exposed time (3 x 45 ms), so the finding names rank 2,
# not the victims; without the wait every rank exposes 1 ms per step (5%: info) and full overlap
# would win 1 ms x 5 steps.
SLOW = Rank(data=9 * MS, sleep=8 * MS, poll=15 * MS)
STRAGGLER = ddp_run(
    1, "ddp_w4_slow2", [Rank(poll=MS), Rank(poll=MS), SLOW, Rank(poll=MS)], step=20 * MS, latency=1 * MS,
    first_report=1,
)  # fmt: skip
STRAGGLER_EVIDENCE = {
    "rank": 2,
    "report_id": 3,
    "last_share": 1.0,
    "collectives": STEADY,
    "last_at": STEADY,
    "late_ns": 8 * MS,
    "late_share": 0.40,
    "step_ns": 20 * MS,
    "steps": STEADY,
    "others_wait_ns": 3 * 8 * MS,
    "wait_by_rank_ns": {"0": 8 * MS, "1": 8 * MS, "3": 8 * MS},
    "compute_vs_median": 1.0,
    "phase": {"name": "data", "ns_per_step": 9 * MS, "median_ns_per_step": 1 * MS, "excess_ns": 8 * MS},
    "host_wait": {"name": "nanosleep", "ns_per_step": 8 * MS, "median_ns_per_step": 0, "excess_ns": 8 * MS},
    "kernel": None,
    "idle_ns": 13.9 * MS,
    "median_idle_ns": 5.9 * MS,
    # the others' wait at the collectives rank 2 came last to, by op, over the whole capture:
    # the warm-up step's all-reduce too
    "capture_wait_by_op_ns": {"all_reduce": 3 * 8 * MS * STEPS},
}
VICTIM_EVIDENCE = {
    "worst_rank": 0,
    "exposed_share": 0.45,
    "explained_by_straggler": True,
    "straggler_rank": 2,
    "victims": [0, 1, 3],
    "victims_wait_ns": 3 * 8 * MS * STEADY,
    "victims_exposed_ns": 3 * 9 * MS * STEADY,
    "exposed_without_wait_ns": {str(r): 1 * MS * STEADY for r in range(4)},
    "exposed_share_without_wait": 0.05,
}

# --- slower compute on rank 1 (gemm 7 ms, the others 5 ms): it arrives 2 ms after the others at
# every collective (T = 12 ms: 16.7% late, a warning straggler) and computes 7.1 ms per step
# against the median rank's 5.1 ms (ratio 1.39: critical imbalance). The two are one fix:
# load-imbalance says so (same_saving_as). Savings: imbalance (7.1 - 5.1) ms x 5 steps, straggler
# 2 ms x 5 steps. The straggler names the kernel that grew, gemm (+2 ms per step). The other
# ranks expose 3 ms of their 12 ms step (25%), 2 ms of it waiting for rank 1 (30 of 45 ms over
# the steps: more than half), so exposed-communication names rank 1 too; without the wait every
# rank exposes 1 ms per step (8.3%: info).
HEAVY = ddp_run(1, "ddp_w4", [Rank(), Rank(compute=7 * MS), Rank(), Rank()], step=12 * MS, latency=1 * MS,
                first_report=1)  # fmt: skip

# --- scaling: the same program at 2 and 4 ranks (weak scaling: each rank computes the same 5.1 ms
# per step); the all-reduce takes 1 ms after the arrivals at 2 ranks and 5 ms at 4, and the step
# grows from 10 to 14 ms. Efficiency 10 / 14 = 71% (critical, < 75%); throughput 2 x 100 = 200 and
# 4 x 1e9 / 14e6 = 285.7 rank-steps/s; lost 4 ms per step, all of it exposed communication
# (1 ms -> 5 ms per step, no imbalance, same compute). Saving 4 ms x 5 steps. A run of another
# program (ddp_w4_slow2: its stem keeps `slow2`) is not compared, though at 4 ranks and a later
# run id it would be the largest run (and at 20 ms a step, a worse one).
SCALE_W2 = ddp_run(1, "ddp_w2", [Rank(), Rank()], step=10 * MS, latency=1 * MS, first_report=1)
SCALE_W4 = ddp_run(2, "ddp_w4", [Rank()] * 4, step=14 * MS, latency=5 * MS, first_report=3)
OTHER = ddp_run(3, "ddp_w4_slow2", [Rank(), Rank(), Rank(data=9 * MS, sleep=8 * MS), Rank()], step=20 * MS,
                latency=1 * MS, first_report=7)  # fmt: skip
