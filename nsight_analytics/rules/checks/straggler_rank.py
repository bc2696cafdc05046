"""straggler-rank: one rank arrives last at a run's collectives and every other rank waits for it."""

from __future__ import annotations

from typing import Any

from ...units import dur, pct
from .. import stacks
from ..context import Context
from ..model import Finding, Threshold, rule
from ..runs import Excess, excesses, median, ranks_text, straggler
from ..thresholds import STRAGGLER_LAST_SHARE, STRAGGLER_LATE_SHARE

# A phase, host wait or kernel is named as what the straggler did instead when its excess over
# the median rank is at least this share of the straggler's lateness.
_NAMED_SHARE = 0.25

# Host wait names (host_waits.name) by what the thread waited for, for the advice.
_SLEEPS = ("sleep", "usleep", "nanosleep", "clock_nanosleep")
_POLLS = ("poll", "ppoll", "select", "pselect", "epoll_wait", "epoll_pwait")
_READS = ("read", "pread", "pread64", "recv", "fread", "readv", "preadv", "recvfrom", "recvmsg")
_COMM = ("mpi_", "nccl", "ucp_", "shmem_", "gloo", "c10d::")


@rule(
    "straggler-rank",
    order=130,
    scope="run",
    needs=("kernel", "comm"),
    queries=("collective_skew", "rank_balance", "rank_activity", "hot_stacks"),
    reads=("runs", "ranks"),
    optional_reads=stacks.TABLES,
    optional_when=stacks.could_name,
    severities=("warning", "critical"),
    thresholds=(
        STRAGGLER_LAST_SHARE,
        STRAGGLER_LATE_SHARE,
        Threshold(
            "straggler_late_critical",
            0.20,
            "fraction",
            "A straggler whose lateness is at least this share of its steady step is critical.",
        ),
        Threshold(
            "straggler_compute_ratio",
            1.05,
            "ratio",
            "The straggler's kernels are named as a cause when its compute per step is at least this "
            "multiple of the median rank's (rank_balance.compute_vs_median).",
        ),
    ),
)
def straggler_rank(ctx: Context, run_id: int) -> list[Finding]:
    """One rank arrives last at most of a run's collectives, and the others wait for it.

    Anti-pattern: a collective finishes only when every rank has joined it, so the rank that
    arrives last sets the pace of all: the others sit inside the all-reduce (their time shows as
    communication, exposed or not) until it arrives. The straggler's own communication is short;
    the other ranks are victims, and tuning their communication does not help. The cause is on
    the straggler's timeline, in its steady steps, compared with the median of the other ranks:
    a host phase that takes longer (an NVTX range such as `data`: a slow input pipeline, a
    logging or checkpoint step only it does), host waits of the thread that runs its steps
    (sleeps, locks, reads: table host_waits), slower kernels (more work, or a GPU that runs
    slower: named when its compute per step is `straggler_compute_ratio` times the median
    rank's or more), or GPU idle time (its host issued the work late, whatever it did). A rank
    is the straggler when it arrives last at `straggler_last_share` of the collectives or more
    (rank_balance.last_share) and its mean lateness per step is `straggler_late_share` of its
    step or more; a phase, wait or idle time is named when it exceeds the median other rank's
    by a quarter of that lateness or more.

    Fix: Make the straggler keep up; what to change depends on what it did instead of arriving,
    and the finding says which: a longer host phase or host waits (data loading: more DataLoader
    workers, prefetch_factor, pin_memory, persistent_workers, data on local storage; sleeps,
    logging, checkpoints or evaluation run on that rank only: move them off the step or onto
    every rank; CPU contention: bind each rank to its own cores and NUMA node), or slower
    kernels (its batch holds more work: balance it, see load-imbalance; else its GPU is slower:
    check its clocks, temperature and power limits with nvidia-smi -q -d PERFORMANCE,CLOCK).
    Do not tune the other ranks' communication: their wait is the straggler's.

    Which line of code (query `hot_stacks`): where the straggler's report holds Python or CPU
    samples, the message names the user frame its samples in its steady steps ran under most,
    the evidence the same under `location`.

    est_savings_ns: the straggler's mean lateness per steady step times its steady steps: the
    time the other ranks wait for it at each step, which they would get back if it arrived with
    them. At most the straggler's steady time.
    """
    late = straggler(ctx, run_id)
    if late is None:
        return []
    label = ctx.run_label(run_id)
    me = ranks_text([late.rank])
    balance = {int(r.rank): r for r in ctx.run_query("rank_balance", run_id)}
    others = sorted(k for k in balance if k != late.rank)
    mine = balance[late.rank]
    collectives = int(mine.collectives or 0)
    last_at = round(late.last_share * collectives)
    # where the others waited for it: their wait at the collectives it came last to, by op (over
    # every matched collective of the capture, warm-up too: it names the op, not a number per step)
    skew = ctx.run_query("collective_skew", run_id, per="rank")
    waited = skew.where(lambda r: r.last_rank == late.rank and r.rank is not None and r.rank != late.rank)
    by_op = waited.sum_by("op", "wait_ns")
    severity = "critical" if late.late_share >= ctx["straggler_late_critical"] else "warning"
    found = excesses(ctx, run_id, late.rank)
    floor = _NAMED_SHARE * late.late_ns
    phase = _top(found.get("nvtx", []), floor)
    wait = _top(found.get("host_wait", []), floor)
    gap = _top(found.get("host_gap", []), floor) if phase is None and wait is None else None
    ratio = float(mine.compute_vs_median or 0.0)
    slower = ratio >= ctx["straggler_compute_ratio"]
    kernel = _top(found.get("kernel", []), 0.0) if slower else None
    doing: list[str] = []
    if phase is not None:
        doing.append(
            f"its NVTX range '{phase.name}' took {dur(phase.mine_ns)} per step where the median other rank's "
            f"took {dur(phase.median_ns)} (+{dur(phase.excess_ns)})"
        )
    if wait is not None:
        doing.append(
            f"its host waited in {wait.name} {dur(wait.mine_ns)} per step (median other rank: "
            f"{dur(wait.median_ns)}, +{dur(wait.excess_ns)})"
        )
    if gap is not None:
        doing.append(
            f"its host spent {dur(gap.mine_ns)} per step outside every op the profiler recorded (median other "
            f"rank: {dur(gap.median_ns)}, +{dur(gap.excess_ns)}): Python between torch calls, such as data "
            "loading, sleeps or logging"
        )
    if slower:
        doing.append(
            f"its compute per step was {ratio:.2f}x the median rank's ({dur(mine.compute_ns)})"
            + (
                f", most of the growth in {kernel.name} (+{dur(kernel.excess_ns)} per step)"
                if kernel is not None
                else ""
            )
        )
    idle = float(mine.idle_ns or 0.0)
    idle_median = median([float(balance[k].idle_ns or 0.0) for k in others])
    idled = idle - idle_median >= floor  # its GPU waited for its host
    if idled:
        doing.append(
            f"its GPU sat idle {dur(idle)} per step (median other rank: {dur(idle_median)}): its host issued "
            "the work late"
        )
    where = f", mostly in {by_op[0][0]}" if by_op else ""
    if len(others) == 1:
        victims = (
            f"The other rank ({ranks_text(others)}) waits inside the collectives for it, "
            f"{dur(late.others_wait_ns)} per step{where}: it is a victim, not the cause."
        )
    else:
        victims = (
            f"The other ranks ({ranks_text(others)}) wait inside the collectives for it, "
            f"{dur(late.others_wait_ns)} per step together{where}: they are victims, not the cause."
        )
    message = (
        f"In {label}, {me} arrives last at {last_at} of the {collectives} collectives of its steady steps "
        f"({pct(late.last_share)}), {dur(late.late_ns)} late per step on average ({pct(late.late_share)} of its "
        f"{dur(late.step_ns)} step). {victims} "
    )
    if doing:
        message += f"What {me} did instead, in its steady steps: " + "; ".join(doing) + "."
    else:
        message += (
            "Its timeline shows no NVTX range, host wait, kernel or GPU idle time that takes longer than on the "
            "other ranks: the time went to host code outside NVTX ranges (Python, data preparation) or to "
            "nothing the capture recorded."
        )
    if idled and phase is None and wait is None and gap is None:
        message += (
            " No NVTX range or host wait covers that host time (Python, data preparation outside ranges)."
        )
    hot = _hot_frame(ctx, late.report_id, late.rank, run_id)
    if hot is not None:
        message += (
            f" {me[0].upper()}{me[1:]}'s {stacks.SOURCE_WORDS[hot.source]} in its steady steps ran most under "
            f"{stacks.frame_text(hot)} ({pct(hot.user_samples / hot.samples)} of them)."
        )
    own_report = (
        all(r.pid is None for r in ctx.run_ranks(run_id) if int(r.report_id) == int(late.report_id))
        and sum(int(r.report_id) == int(late.report_id) for r in ctx.run_ranks(run_id)) == 1
    )
    recommendation = _advice(me, phase, wait, kernel if slower else None, slower, gap is not None)
    savings = min(late.late_ns * late.steps, late.step_ns * late.steps)
    title = (
        f"{me[0].upper()}{me[1:]} of {label} is a straggler: last at {pct(late.last_share)} of the "
        f"collectives, {dur(late.late_ns)} late per step"
    )
    ev: dict[str, Any] = {
        "run_id": run_id,
        "rank": late.rank,
        "report_id": late.report_id,
        "last_share": late.last_share,
        "collectives": collectives,
        "last_at": last_at,
        "capture_wait_by_op_ns": {str(k): float(v) for k, v in by_op},
        "late_ns": late.late_ns,
        "late_share": late.late_share,
        "step_ns": late.step_ns,
        "steps": late.steps,
        "others_wait_ns": late.others_wait_ns,
        "wait_by_rank_ns": {str(k): v for k, v in sorted(late.wait_by_rank.items())},
        "compute_vs_median": ratio,
        "compute_ns": {str(k): balance[k].compute_ns for k in sorted(balance)},
        "median_compute_ns": median([float(balance[k].compute_ns or 0) for k in others]),
        "phase": _excess_ev(phase),
        "host_wait": _excess_ev(wait),
        "host_gap": _excess_ev(gap),
        "kernel": _excess_ev(kernel) if slower else None,
        "idle_ns": idle,
        "median_idle_ns": idle_median,
    }
    if hot is not None:
        ev["location"] = stacks.frame_location(hot)
    return [
        Finding(
            "straggler-rank", severity, late.report_id, title, message, recommendation, ev, int(savings),
            run_id=run_id, ranks=[late.rank],
            # its GPU idled because its host was late: the gpu-idle finding of its own report is this
            # fix seen from one rank (not so where the report holds other ranks too)
            same_saving_as="gpu-idle" if idled and own_report else None,
        )
    ]  # fmt: skip


def _top(found: list[Excess], floor: float) -> Excess | None:
    """The largest excess, when it reaches `floor`."""
    return found[0] if found and found[0].excess_ns >= floor and found[0].excess_ns > 0 else None


def _excess_ev(e: Excess | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "name": e.name,
        "ns_per_step": e.mine_ns,
        "median_ns_per_step": e.median_ns,
        "excess_ns": e.excess_ns,
    }


def _advice(
    me: str,
    phase: Excess | None,
    wait: Excess | None,
    kernel: Excess | None,
    slower: bool,
    untraced: bool = False,
) -> str:
    parts: list[str] = []
    if untraced:
        parts.append(
            f"find what {me} runs between its torch calls (its data loading, a sleep, logging): profile it with "
            "`with_stack=True` for the Python frames, or with `nsys profile -t cuda,nvtx,osrt` and NVTX ranges "
            "around its data loading and logging; then take that work off its step (DataLoader workers, "
            "prefetching) or spread it over every rank"
        )
    if wait is not None:
        name = wait.name.lower()
        if name in _SLEEPS:
            parts.append(f"{me} sleeps ({wait.name}) during its steps: take the sleep out of the step")
        elif name in _POLLS:
            parts.append(
                f"{me} waits on a pipe or socket ({wait.name}) during its steps: if it is the DataLoader's queue, its "
                "workers are too slow (more num_workers, prefetch_factor); if it is storage or a service, prefetch "
                "or cache what it reads"
            )
        elif name.startswith(_COMM):
            parts.append(
                f"{me}'s host waits in {wait.name} during its steps, a blocking communication call the other ranks "
                "wait in less: look at what this rank exchanges that the others do not (an extra broadcast, a "
                "gather to this rank, a barrier)"
            )
        elif name in _READS:
            parts.append(
                f"{me} waits for reads ({wait.name}) during its steps: prefetch its input (DataLoader workers, "
                "prefetch_factor) or put its data on local storage"
            )
        else:
            parts.append(
                f"{me} waits in {wait.name} during its steps: find the producer it waits for (a data loader queue, a "
                "lock another thread holds) and make it faster"
            )
    if phase is not None:
        parts.append(
            f"shorten its '{phase.name}' phase or take it off the critical path: if it loads data, more DataLoader "
            "workers, prefetch_factor, pin_memory=True and persistent_workers=True; if only this rank does it "
            "(logging, checkpoints, evaluation), move it off the step or spread it over every rank; bind each rank "
            "to its own CPU cores and NUMA node"
        )
    if slower:
        which = f" ({kernel.name} grew most)" if kernel is not None else ""
        parts.append(
            f"its kernels run longer than the other ranks'{which}: if its batch holds more work (longer sequences, "
            "a larger shard), balance the data (see load-imbalance); if the work is the same, its GPU is slower: "
            "check its clocks, temperature and power limit (nvidia-smi -q -d PERFORMANCE,CLOCK)"
        )
    if not parts:
        parts.append(
            f"add NVTX ranges around {me}'s host work (torch.cuda.nvtx.range around data loading, logging, "
            "checkpointing) and capture with `nsys profile -t cuda,nvtx,osrt` to see where its time goes"
        )
    text = "; ".join(parts)
    return (
        f"{text[0].upper()}{text[1:]}. Do not tune the other ranks' communication: their wait inside the "
        f"collectives is {me}'s lateness."
    )


def _hot_frame(ctx: Context, report_id: int, rank: int, run_id: int) -> Any:
    """The hot_stacks row of the user frame the straggler's samples in its steady steps (first steady
    step's start to last step's end) ran under most (its process only where the report holds several
    ranks), or None."""
    if not stacks.sources(ctx, report_id) & {"python_sample", "cpu_sample"}:
        return None
    window = ctx.steady(report_id)
    pid = next((r.pid for r in ctx.run_ranks(run_id) if r.rank == rank), None)
    # its steady steps, from the first steady step's start to the last step's end: not the tear-down
    # after the loop (destroy_process_group, exit), which can hold more samples than the steps
    start = None if window is None else int(window.start_ns)
    end = None if window is None else int(window.end_ns)
    return stacks.hot_user(
        ctx.query("hot_stacks", report_id, pid=pid, start_ns=start, end_ns=end, top_n=None)
    )
