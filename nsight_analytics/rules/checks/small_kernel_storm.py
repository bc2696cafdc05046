"""small-kernel-storm: many kernels too short to pay for their launch."""

from __future__ import annotations

from typing import Any

from ...units import clip, count, dur, pct, plural
from .. import stacks
from ..context import Context, steady_evidence
from ..model import Finding, Threshold, rule, severity_for


@rule(
    "small-kernel-storm",
    order=30,
    needs=("kernel",),
    queries=(
        "small_kernels",
        "utilization",
        "kernel_span",
        "small_kernel_storms",
        "small_kernel_names",
        "graph_launches",
        "launch_stacks",
    ),
    reads=("steps",),
    optional_reads=stacks.TABLES,
    optional_when=stacks.could_name,
    severities=("info", "warning", "critical"),
    thresholds=(
        Threshold(
            "small_kernel_ns",
            10_000,
            "ns",
            "A kernel shorter than this is small: launch overhead is comparable.",
        ),
        Threshold("storm_min_kernels", 500, "count", "Fewest small kernels in a report for a storm."),
        Threshold(
            "storm_max_gap_ns",
            100_000,
            "ns",
            "Idle gaps between two small kernels up to this long count as launch gaps (longer: gpu-idle); "
            "the same boundary as gpu-idle's idle_gap_min_ns.",
        ),
        Threshold(
            "storm_gap_share_warning",
            0.02,
            "fraction",
            "Launch-gap idle share of the kernel span (first to last kernel) that makes a storm a warning (else info).",
        ),
        Threshold(
            "storm_gap_share_critical",
            0.20,
            "fraction",
            "Launch-gap idle share of the kernel span that is critical.",
        ),
        Threshold("top_kernels", 3, "count", "How many kernels a finding names."),
    ),
)
def small_kernel_storm(ctx: Context, rid: int) -> list[Finding]:
    """Many kernels shorter than small_kernel_ns: the run is launch-bound, not compute-bound.

    Anti-pattern: thousands of tiny kernels (elementwise ops, eager-mode PyTorch, per-element
    loops launching kernels), each shorter than the ~2-5 us a launch costs on the host. The
    GPU finishes each one before the host has issued the next and waits in between.

    Fix: Fuse the tiny kernels: torch.compile the step (or write one Triton/CUDA kernel for the
    elementwise chain; fused/foreach optimizers for parameter updates), and capture the
    steady-state step in a CUDA graph (torch.cuda.CUDAGraph / cudaStreamBeginCapture) so one
    launch replays them all. Batch small operations so each kernel does more work.

    Which line of code (query `launch_stacks`): where the report holds the call stacks of the
    launches (nsys `--python-backtrace=cuda` / `--cudabacktrace`, PyTorch profiler
    `with_stack=True`), the title and message name the innermost user frame that launched most of
    the tiny kernels in the steady state ("3,000 launched from stack_loop.py:57 in scale_params"),
    its evidence the same under `location`. A capture without backtraces of the calls names the line
    from the CPU or Python samples taken inside the launch calls (launch_stacks' window form), when
    at least stacks.MIN_SAMPLED_CALLS launches hold one, else says they are too few; without stacks
    the finding says once which capture option records them.

    A program that already replays graphs (table `graph_executions`, or kernels with a
    graph_node_id) is told so: its graph kernels pay one launch per replay, and only fusion is
    left to advise.

    est_savings_ns: the GPU idle time (nothing running at all, copies included) in gaps of at
    most storm_max_gap_ns inside storm windows (`small_kernel_storms`: runs of consecutive
    tiny kernels) of the steady state (from the first steady step on; all of them without steps),
    i.e. the launch gaps fusion or graphs remove; the largest device. The kernels' own time is not
    counted: fused work still has to run. Severity follows that time's share of the steady state.
    """
    small = ctx["small_kernel_ns"]
    summary = ctx.query("small_kernels", rid, max_kernel_ns=int(small))
    if not summary:
        return []
    s = summary[0]
    n_small = int(s.small_kernels)
    if n_small < ctx["storm_min_kernels"]:
        return []
    window = ctx.steady(rid)
    if window is not None:  # the steady state: from the first steady step to the end
        dev_span = {r.device_id: int(r.span_ns) for r in ctx.query("utilization", rid, phase="steady")}
    else:
        dev_span = {r.device_id: int(r.span_ns) for r in ctx.query("kernel_span", rid)}
    span = max(dev_span.values()) if dev_span else 0
    storms = ctx.query(
        "small_kernel_storms",
        rid,
        max_kernel_ns=int(small),
        max_gap_ns=int(ctx["storm_max_gap_ns"]),
    )
    if window is not None:
        storms = storms.where(lambda r: r.start_ns >= window.start_ns)
    idle = storms.sum_by("device_id", "idle_ns", nulls=True)  # the worst device first
    worst_dev, savings = idle[0] if idle else (None, 0)
    gap_share = savings / dev_span.get(worst_dev, span) if idle and span else 0.0
    severity = severity_for(gap_share, ctx["storm_gap_share_warning"], ctx["storm_gap_share_critical"])
    top = ctx.query("small_kernel_names", rid, max_kernel_ns=int(small))[: int(ctx["top_kernels"])]
    named = "; ".join(
        f"{clip(r.short_name, 50)} x{count(r.launches)} (avg {dur(r.avg_ns)}"
        + (f", {r.variants} template variants)" if r.variants > 1 else ")")
        for r in top
    )
    message = (
        f"{count(n_small)} of {count(s.kernels)} kernels ({pct(s.launch_pct / 100)}) ran shorter than "
        f"{dur(small)}, {dur(s.small_kernel_ns)} of GPU time in total, launched by {dur(s.launch_api_ns)} "
        f"of host launch calls. Most frequent: {named}."
    )
    if not storms:
        message += " No storm window (a run of tiny kernels with the GPU mostly waiting) was found."
    else:
        of = (
            f"the {dur(dev_span.get(worst_dev, span))} steady state"
            if window is not None
            else "the span from first to last kernel"
        )
        message += (
            f" {count(len(storms))} storm windows{' in the steady state' if window is not None else ''} "
            f"({count(storms.total('kernels'))} kernels, GPU busy "
            f"{storms.total('busy_ns') / max(1, storms.total('window_ns')) * 100:.0f}% inside them) left the GPU "
            f"idle {dur(savings)} in launch gaps ({pct(gap_share)} of {of})."
        )
    graphs = ctx.query("graph_launches", rid)
    graph_small = int(s.graph_kernels or 0)
    if graphs:
        replays = int(graphs.total("replays"))
        per = graphs.where(lambda r: r.kernels_per_replay is not None)
        message += (
            f" The program already replays CUDA graphs: {plural(replays, 'replay')}, {dur(graphs.total('gpu_ns'))} on "
            f"the GPU, launched by {dur(graphs.total('launch_api_ns'))} of host calls"
            + (f", {per[0].kernels_per_replay:,.0f} kernels per replay" if per else "")
            + "."
        )
        if graph_small:
            message += (
                f" {count(graph_small)} of the tiny kernels ran inside a graph: their launch cost is paid once "
                "per replay, so only fusion makes them cheaper."
            )
        eager = n_small - graph_small
        recommendation = (
            "Fuse the tiny kernels: torch.compile the step (or write one Triton/CUDA kernel for the elementwise "
            "chain; fused/foreach optimizers for parameter updates): inside a CUDA graph each kernel still runs "
            "for itself and the GPU pays ~1 us between nodes."
            + (
                f" The {count(eager)} tiny kernels launched one by one outside graphs are warm-up or capture runs, "
                "or work the graph does not cover: keep them out of the steady-state loop."
                if eager >= ctx["storm_min_kernels"]
                else ""
            )
        )
    else:
        recommendation = small_kernel_storm.fix
    title = (
        f"{count(n_small)} tiny kernels (< {dur(small)}), led by {top[0].short_name} at "
        f"{dur(top[0].avg_ns)} avg"
        if top
        else f"{count(n_small)} tiny kernels"
    )
    launcher = _launcher(ctx, rid, int(small), None if window is None else int(window.start_ns))
    located = None
    if isinstance(launcher, str):
        recommendation += f" {launcher}"
    elif launcher is not None:
        row = launcher
        sampled = row.source in stacks.WINDOW_SOURCES
        of = row.stacked_calls if sampled else row.total_calls
        title += (
            f"; {pct(row.calls / of)} of sampled launches from {stacks.where(row)}"
            if sampled
            else f"; {count(row.calls)} launched from {stacks.where(row)}"
        )
        message += (
            f" {count(row.calls)} of the {count(of)} tiny-kernel launches"
            f"{' of the steady state' if window is not None else ''}{' with a sample inside' if sampled else ''} "
            f"({pct(row.calls / of)}) came from {stacks.where(row)}{stacks.callers_text(row)}"
            f"{stacks.beneath(row, row.api_name)}, by {stacks.by_samples(row)}: start there."
        )
        located = stacks.location(row, calls=int(row.calls), total_calls=int(row.total_calls),
                                  gpu_ns=int(row.gpu_ns), api_ns=int(row.api_ns))  # fmt: skip
    ev = {
        "small_kernel_ns": int(small),
        "kernels": int(s.kernels),
        "small_kernels": n_small,
        "small_kernel_time_ns": int(s.small_kernel_ns),
        "launch_api_ns": int(s.launch_api_ns),
        "launch_calls": int(s.launch_calls),
        "graph_kernels": graph_small,
        "graph_replays": int(graphs.total("replays")),
        "storm_windows": len(storms),
        "storm_idle_ns": int(savings),
        "storm_idle_share": gap_share,
        "top_kernels": [
            {
                "short_name": r.short_name,
                "example_name": r.name,
                "variants": int(r.variants),
                "launches": int(r.launches),
                "avg_ns": float(r.avg_ns),
            }
            for r in top
        ],
        **steady_evidence(window),
    }
    if located is not None:
        ev["location"] = located
    return [
        Finding(
            "small-kernel-storm",
            severity,
            rid,
            title,
            message,
            recommendation,
            ev,
            None if not storms else savings,
        )
    ]


def _launcher(ctx: Context, rid: int, small_ns: int, start_ns: int | None) -> Any:
    """The launch_stacks row of the user frame that launched the most tiny kernels (backtraces of
    the launches first, then samples taken inside them), the capture hint (a str) where the report
    holds no stacks of its launches or too few samples inside them, or None."""
    source = stacks.first_source(ctx, rid, stacks.LAUNCH_SOURCES)
    if source is None:
        return stacks.capture_hint(ctx, rid)
    rows = stacks.launch_rows(ctx, rid, kind="kernel", max_gpu_ns=small_ns, start_ns=start_ns)
    total = max((r.total_calls or 0 for r in rows), default=0)
    top = stacks.top_user(rows, stacks.CALL_SOURCES, "calls", total)
    if top is not None or any(r.source in stacks.CALL_SOURCES for r in rows):
        return top if top is not None else stacks.no_user_frame_hint(ctx, rid, rows)
    for source in stacks.WINDOW_SOURCES:
        mine = [r for r in rows if r.source == source]
        if not mine or mine[0].stacked_calls < stacks.MIN_SAMPLED_CALLS:
            continue
        mine = [r for r in stacks.merge_native(mine, "calls") if r.calls >= stacks.MIN_NAMED_CALLS]
        top = stacks.top_user(mine, (source,), "calls", mine[0].stacked_calls) if mine else None
        if top is not None:
            return top
    few = stacks.sampled_too_few(ctx, rid, rows, "tiny-kernel launches")
    if few is not None:
        return few
    if not stacks.has_stacks(rows):
        return stacks.capture_hint(ctx, rid)
    return stacks.no_user_frame_hint(ctx, rid, rows)
