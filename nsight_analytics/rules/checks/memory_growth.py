"""memory-growth: the bytes a process holds keep rising step after step (a leak)."""

from __future__ import annotations

from typing import Any

from ...units import count, size
from ..context import Context, steady_evidence
from ..model import Finding, Threshold, rule


@rule(
    "memory-growth",
    order=95,
    needs=("memory",),
    queries=("memory_steps",),
    reads=("memory_events", "steps"),
    severities=("warning", "critical"),
    thresholds=(
        Threshold(
            "memory_growth_min_bytes",
            8 << 20,
            "byte",
            "Growth of the bytes held over the steady steps below this is not reported.",
        ),
        Threshold(
            "memory_growth_min_steps",
            4,
            "count",
            "Steady steps needed to tell a trend from a one-time allocation.",
        ),
        Threshold(
            "memory_growth_critical_steps",
            10_000,
            "count",
            "At the measured growth per step, a device that fills in fewer steps than this is critical.",
        ),
    ),
)
def memory_growth(ctx: Context, rid: int) -> list[Finding]:
    """The memory a process holds keeps growing from step to step: a leak.

    Anti-pattern: every iteration of the main loop keeps something alive that the next does not
    need: tensors appended to a Python list (losses kept with their graph instead of
    `loss.item()`), a cache keyed by something that changes every step, buffers allocated per step
    and never freed. Each step then holds more than the one before, until the device runs out of
    memory hours into the run.

    Fix: Find what the step keeps: keep scalars (`loss.item()`, `.detach()`) rather than
    tensors with their graph, clear per-step caches, reuse buffers allocated once; in PyTorch
    `torch.cuda.memory._record_memory_history()` and a snapshot show the allocations that
    outlive their step. `nsa query memory_timeline` lists every allocation with its step.

    Judged on the bytes held at the boundaries of the steady steps (query memory_steps), per
    device, process and memory kind. It fires when they grow by at least memory_growth_min_bytes
    over the steady state AND grow in both its halves in at least two steps: a pool a caching
    allocator grows once in the first steady steps and then reuses is no leak. Reports without
    steps or memory events are not judged.

    est_savings_ns: None: the cost is memory, and the failure it leads to, not time.
    """
    rows = ctx.query("memory_steps", rid).where(lambda r: bool(r.steady))
    series: dict[tuple[Any, Any, Any], list[Any]] = {}
    for r in rows:
        series.setdefault((r.device_id, r.pid, r.memory), []).append(r)
    leaks = [t for t in (_trend(steps, ctx) for steps in series.values()) if t is not None]
    if not leaks:
        return []
    worst = max(leaks, key=lambda t: t["growth_bytes"])
    per_step = worst["growth_bytes"] / worst["steady_steps"]
    where = f"device {worst['device_id']}" if worst["device_id"] is not None else "host"
    message = (
        f"The {worst['memory']} memory held by process {worst['pid']} on {where} grew by "
        f"{size(worst['growth_bytes'])} over {count(worst['steady_steps'])} steady steps "
        f"({size(worst['held_first_bytes'])} -> {size(worst['held_last_bytes'])}, about "
        f"{size(per_step)} per step), in {count(worst['steps_grown'])} of them and in both halves "
        "of the steady state: it does not level off."
    )
    severity = "warning"
    headroom = worst["headroom_bytes"]
    if headroom is not None and headroom <= 0:  # more than the device holds: frees went unrecorded
        message += (
            f" The held total is already {size(-headroom)} above the device's "
            f"{size(worst['total_memory_bytes'])}, so the capture missed frees: no time to full is given."
        )
    elif headroom is not None:
        steps_left = headroom / per_step
        worst["steps_to_full"] = int(steps_left)
        message += f" At this rate the device's {size(headroom)} of headroom lasts about {count(int(steps_left))} more steps."
        if steps_left < ctx["memory_growth_critical_steps"]:
            severity = "critical"
    if len(leaks) > 1:
        message += f" {count(len(leaks) - 1)} more device / process / memory kind series grow too."
    evidence = {
        **worst,
        "growth_per_step_bytes": per_step,
        "series_growing": len(leaks),
        "min_growth_bytes": int(ctx["memory_growth_min_bytes"]),
        **steady_evidence(ctx.steady(rid)),
    }
    title = f"{worst['memory'].capitalize()} memory grows {size(per_step)} per step"
    return [Finding("memory-growth", severity, rid, title, message, memory_growth.fix, evidence, None)]


def _trend(steps: list[Any], ctx: Context) -> dict[str, Any] | None:
    """The growth of one series over its steady steps when it is a trend, else None."""
    steps = sorted(steps, key=lambda r: r.step)
    if len(steps) < ctx["memory_growth_min_steps"]:
        return None
    first = int(steps[0].held_start_bytes)
    ends = [int(r.held_end_bytes) for r in steps]
    growth = ends[-1] - first
    mid = ends[len(ends) // 2 - 1]
    grown = sum(1 for before, after in zip([first, *ends], ends) if after > before)
    if growth < ctx["memory_growth_min_bytes"] or mid <= first or ends[-1] <= mid or grown < 2:
        return None
    total = steps[-1].total_memory_bytes
    return {
        "device_id": steps[0].device_id,
        "pid": steps[0].pid,
        "memory": str(steps[0].memory),
        "steady_steps": len(steps),
        "steps_grown": grown,
        "held_first_bytes": first,
        "held_mid_bytes": mid,
        "held_last_bytes": ends[-1],
        "growth_bytes": growth,
        "total_memory_bytes": int(total) if total is not None else None,
        "headroom_bytes": int(total) - ends[-1] if total is not None else None,
    }
