"""exposed-communication: a run's ranks spend their steady steps in communication that no compute hides."""

from __future__ import annotations

from typing import Any

from ...units import dur, pct
from ..context import Context
from ..model import Finding, Threshold, rule, severity_for
from ..runs import lowest_report, ranks_text, straggler
from ..thresholds import STRAGGLER_LAST_SHARE, STRAGGLER_LATE_SHARE

# The exposed time is a straggler's doing when the other ranks' wait inside collectives for it
# is at least this share of their exposed time.
_WAIT_EXPLAINS = 0.5


@rule(
    "exposed-communication",
    order=120,
    scope="run",
    needs=("kernel", "comm"),
    queries=("comm_overlap", "rank_balance"),
    reads=("runs", "ranks"),
    severities=("info", "warning", "critical"),
    thresholds=(
        Threshold(
            "exposed_share_warning",
            0.10,
            "fraction",
            "Exposed communication (no compute beside it) share of a rank's steady step time that is a warning.",
        ),
        Threshold(
            "exposed_share_critical",
            0.25,
            "fraction",
            "Exposed communication share of a rank's steady step time that is critical.",
        ),
        STRAGGLER_LAST_SHARE,
        STRAGGLER_LATE_SHARE,
    ),
)
def exposed_communication(ctx: Context, run_id: int) -> list[Finding]:
    """The ranks of a run wait for communication that no computation hides.

    Anti-pattern: a rank's communication kernels (NCCL all-reduce, all-gather, reduce-scatter)
    run while none of its compute kernels do, so every byte the job exchanges lengthens its
    step: gradients reduced in one block after backward instead of bucket by bucket while
    backward runs, buckets too large to start early, FSDP gathering parameters only when a layer
    needs them, or an all-reduce every micro-batch. Exposed time is communication time during
    which no compute ran on the rank's GPU (HTA's definition; docs/runs.md), judged per rank on
    its steady steps (query comm_overlap); severity follows the worst rank's exposed share of
    its steady step time. When a straggler explains the exposed time (the other ranks' exposed
    time is mostly waiting inside the collectives for one late rank), the waiting ranks are
    victims, not the cause: the finding names the straggler (see straggler-rank) and judges only
    the exposed time that is left once their wait is taken out; below the warning share it is
    info.

    Fix: Overlap communication with backward and hide what is left: with DDP, smaller gradient
    buckets so the first all-reduce starts early in backward (bucket_cap_mb, e.g. 25 down to
    10-16 for a slow link, up for many tiny buckets) and gradient_as_bucket_view=True (no copy
    into the buckets); keep NCCL on its own stream and avoid synchronising before the optimizer.
    With FSDP, prefetch parameters (forward_prefetch=True, backward_prefetch=BACKWARD_PRE,
    limit_all_gathers) and consider SHARD_GRAD_OP or hybrid sharding across nodes. Reduce less
    often: gradient accumulation with model.no_sync() on all but the last micro-batch. Send
    fewer bytes: a DDP communication hook compressing gradients to bf16/fp16 (or PowerSGD), or
    fewer, larger all-reduces instead of many small ones.

    est_savings_ns: what full overlap would win on the critical path: the exposed time of the
    rank with the least exposed time in its steady steps. Every rank waits for the slowest at
    each collective, so the job only gains what every rank gains. With a straggler, the ranks'
    wait for it is taken out first (the straggler-rank finding estimates that part). At most
    the shortest rank's steady time.
    """
    rows = ctx.run_query("comm_overlap", run_id, per="rank")
    ranks = [r for r in rows if r.steady_ns]
    if not ranks:
        return []
    exposed = {int(r.rank): float(r.exposed_ns or 0) for r in ranks}
    steady = {int(r.rank): float(r.steady_ns) for r in ranks}
    share = {k: exposed[k] / steady[k] for k in exposed}
    worst = max(share, key=lambda k: (share[k], -k))
    if share[worst] < ctx["exposed_share_warning"]:
        return []
    label = ctx.run_label(run_id)
    steps = {int(r.rank): int(r.steps or 0) for r in ranks}
    per_rank = [
        {
            "rank": int(r.rank),
            "report_id": int(r.report_id),
            "steps": int(r.steps or 0),
            "comm_ns": int(r.comm_ns or 0),
            "overlapped_ns": int(r.overlapped_ns or 0),
            "exposed_ns": int(r.exposed_ns or 0),
            "steady_ns": int(r.steady_ns),
            "exposed_share": share[int(r.rank)],
        }
        for r in sorted(ranks, key=lambda r: r.rank)
    ]
    ev: dict[str, Any] = {
        "run_id": run_id,
        "ranks": per_rank,
        "worst_rank": worst,
        "exposed_share": share[worst],
        "exposed_share_warning": ctx["exposed_share_warning"],
        "exposed_share_critical": ctx["exposed_share_critical"],
    }
    late = straggler(ctx, run_id)
    victims = [k for k in exposed if late is not None and k != late.rank]
    wait = {k: (late.wait_by_rank.get(k, 0.0) * steps[k] if late else 0.0) for k in exposed}
    victim_exposed = sum(exposed[k] for k in victims)
    explained = (
        late is not None
        and victim_exposed > 0
        and sum(wait[k] for k in victims) >= _WAIT_EXPLAINS * victim_exposed
    )
    own = {k: max(0.0, exposed[k] - wait[k]) for k in exposed} if explained else exposed
    savings = min(min(own.values()), min(steady.values()))
    above = sorted(
        (k for k in share if share[k] >= ctx["exposed_share_warning"]), key=lambda k: (-share[k], k)
    )
    if steps[worst]:
        n = steps[worst]
        where = (
            f"steady step time ({dur(exposed[worst] / n)} of {dur(steady[worst] / n)} per step, "
            f"{dur(exposed[worst])} over {n} steps)"
        )
    else:
        where = f"GPU span ({dur(exposed[worst])} of {dur(steady[worst])}; it has no steady steps)"
    head = (
        f"In {label}, communication with no compute beside it took {pct(share[worst])} of {ranks_text([worst])}'s "
        + where
    )
    if len(above) > 1:
        head += f"; {ranks_text(above)} are at {pct(ctx['exposed_share_warning'])} or more"
    head += "."
    spread = (
        f" The least exposed rank, {ranks_text([min(own, key=lambda k: (own[k], k))])}, exposes "
        f"{dur(savings)} in its steady steps: full overlap would shorten the job by that much, no more, since "
        "every rank waits for the slowest at each collective."
    )
    if not explained:
        severity = severity_for(share[worst], ctx["exposed_share_warning"], ctx["exposed_share_critical"])
        overlapped = sum(float(r.overlapped_ns or 0) for r in ranks) / max(
            1.0, sum(float(r.comm_ns or 0) for r in ranks)
        )
        message = (
            head + f" Across the ranks {pct(overlapped)} of the communication ran beside compute." + spread
        )
        if late is not None and victim_exposed > 0:  # a straggler, but not most of the exposed time
            part = sum(wait[k] for k in victims)
            message += (
                f" {ranks_text([late.rank]).capitalize()} is a straggler (see straggler-rank): "
                f"{dur(part)} of the other ranks' {dur(victim_exposed)} exposed time is waiting for it."
            )
            ev.update(
                straggler_rank=late.rank, victims_wait_ns=int(part), victims_exposed_ns=int(victim_exposed)
            )
        title = f"Communication exposed {pct(share[worst])} of the steady step on {ranks_text([worst])} of {label}"
        ev.update(explained_by_straggler=False, overlapped_share=overlapped)
        return [
            Finding(
                "exposed-communication", severity, lowest_report(ctx, run_id), title, message,
                exposed_communication.fix, ev, int(savings), run_id=run_id, ranks=above or [worst],
            )
        ]  # fmt: skip
    assert late is not None
    left = {k: own[k] / steady[k] for k in own}
    left_worst = max(left.values())
    severity = severity_for(left_worst, ctx["exposed_share_warning"], ctx["exposed_share_critical"])
    victim_wait = sum(wait[k] for k in victims)
    who, one = ranks_text(victims), len(victims) == 1
    message = (
        head + f" Most of it is waiting: {who} {'waits' if one else 'wait'} inside the collectives for "
        f"{ranks_text([late.rank])}, which arrives last at {pct(late.last_share)} of them, "
        f"{dur(late.late_ns)} late per step ({dur(victim_wait)} of {'its' if one else 'their'} "
        f"{dur(victim_exposed)} exposed time). {who.capitalize()} {'is a victim' if one else 'are victims'}, "
        f"not the cause: overlapping {'its' if one else 'their'} communication would not shorten the step; "
        f"{ranks_text([late.rank])} is the straggler (see straggler-rank). Without that wait the worst rank "
        f"exposes {pct(left_worst)} of its step time, and full overlap would win {dur(savings)} over the "
        "steady steps."
    )
    recommendation = (
        f"Fix {ranks_text([late.rank])} first (the straggler-rank finding says what it does instead of "
        f"arriving on time): the other ranks' exposed communication is time spent waiting for it."
    )
    if severity != "info":
        fix = exposed_communication.fix
        recommendation += f" Then overlap what is left: {fix[0].lower()}{fix[1:]}"
    ev.update(
        explained_by_straggler=True,
        straggler_rank=late.rank,
        victims=victims,
        victims_wait_ns=int(victim_wait),
        victims_exposed_ns=int(victim_exposed),
        exposed_without_wait_ns={str(k): int(v) for k, v in sorted(own.items())},
        exposed_share_without_wait=left_worst,
    )
    title = (
        f"Exposed communication in {label} is waiting for straggler {ranks_text([late.rank])}, "
        f"{pct(share[worst])} of the steady step on {ranks_text([worst])}"
    )
    return [
        Finding(
            "exposed-communication", severity, late.report_id, title, message, recommendation, ev,
            int(savings), run_id=run_id, ranks=[late.rank],
        )
    ]  # fmt: skip
