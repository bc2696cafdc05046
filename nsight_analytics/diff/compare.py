"""Compare two reports (or two groups of reports): the checks, the verdict, the attribution.

A verdict is only as good as what it compares: the same program on the same GPUs, with
enough steady steps that noise cannot pass for a change. The checks say plainly which of
those fails ('not comparable'); otherwise the step-time shift and its confidence interval
(`stats.shift`) decide, and a shift inside the noise floor is 'no significant change' even
when the interval excludes zero (two runs of one program on one GPU differ by about a
percent: clocks, temperature, neighbours); an interval that holds zero and changes beyond
the floor is 'inconclusive' (`verdict` words it: the size of the change, the spread, and how
many steps would tell).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import duckdb

from .. import params, queries
from ..units import plural, signed
from . import stats
from .findings import finding_changes, side_findings
from .host import attribute_host_ops, host_steps
from .host import merge as merge_host
from .model import Attribution, Check, Diff, KernelChange, Metric, Part, Side
from .timeline import Charges, Timeline, align_mean, align_numbers, gpu_steps
from .verdict import outlier_note, same_reports, step_change, too_few, verdict

CONFIDENCE = 0.95
# A step-time change smaller than this share of A's median step is noise, whatever its CI.
NOISE_FLOOR = 0.02
# Programs whose kernel-time mixes overlap less than this (sum over kernels of the smaller of
# the two shares) are not the same program.
MIN_PROGRAM_OVERLAP = 0.3
# Kernels both sides run per step about as often as each other (within this factor), by kind
# (`nsa_kernel_class`: GEMM, attention, elementwise...), holding at least MIN_CLASS_MATCH of
# each side's kernel time: the same program with other kernels (bf16 autocast renames every
# GEMM and adds casts), though few kernel names match.
CLASS_COUNT_FACTOR = 2.0
MIN_CLASS_MATCH = 0.7
# Share of the step time in NVTX phases only one side names above which the diff warns.
MAX_UNLIKE_PHASES = 0.1
# Attribution lines listed by phase (and host ops); the rest is the remainder.
TOP_PHASES = 8

CAUSE_NAMES = {
    "kernels": "kernel time",
    "copies": "exposed copy time",
    "memsets": "memset time",
    "graphs": "CUDA graph replays",
    "idle": "GPU idle (waiting for work)",
}

GPUS_SQL = "SELECT name FROM gpus WHERE report_id = $rid ORDER BY device_id"
REPORT_SQL = "SELECT regexp_extract(source_path, '[^/]+$'), format FROM reports WHERE report_id = $rid"
# The most device memory held at once by one process on one GPU: the source's running total
# where it states one (Kineto), else the running sum of allocations and frees.
MEMORY_PEAK_SQL = """
SELECT max(held) FROM (
    SELECT coalesce(allocated_bytes, sum(delta_bytes) OVER (
               PARTITION BY device_id, pid ORDER BY ts_ns ROWS UNBOUNDED PRECEDING)) AS held
    FROM memory_events WHERE report_id = $rid AND device_id IS NOT NULL
)
"""


def compare(
    con: duckdb.DuckDBPyConnection,
    a: Sequence[int],
    b: Sequence[int],
    *,
    confidence: float = CONFIDENCE,
    noise_floor: float = NOISE_FLOOR,
    with_findings: bool = True,
    config: dict[str, Any] | None = None,
    by_number: bool = False,
) -> Diff:
    """The diff of reports `a` (before) and `b` (after); each a report id or a group of them
    (all ranks of one run). The caller has loaded what `READS` and the rules read.

    A group's step k is the mean of its reports' step k, paired by position, or with
    `by_number` by step number (the ranks of one run: `step 12` is one iteration on every rank)."""
    if sorted(set(a)) == sorted(set(b)):
        return same_reports(describe(con, sorted(set(a))), noise_floor)
    tl_a = [gpu_steps(con, rid) for rid in a]
    tl_b = [gpu_steps(con, rid) for rid in b]
    side_a, side_b = _side(con, list(a), tl_a, by_number), _side(con, list(b), tl_b, by_number)
    ch_a, ch_b = _merge([t.charges for t in tl_a]), _merge([t.charges for t in tl_b])
    checks = _checks(con, side_a, side_b, ch_a, ch_b)
    change = None
    if side_a.step_ns and side_b.step_ns:
        shift = stats.shift(side_a.step_ns, side_b.step_ns, confidence)
        change = step_change(shift, side_a, side_b, noise_floor)
        if change.ci_ns is None:
            checks.append(too_few(side_a, side_b, shift))
    verdict_, reason = verdict(checks, change, side_a, side_b, noise_floor)
    result = Diff(side_a, side_b, checks, verdict_, reason, noise_floor, change)
    if side_a.step_ns and side_b.step_ns:
        result.attribution = _attribution(ch_a, ch_b)
        host_a = merge_host([host_steps(con, rid) for rid in a])
        host_b = merge_host([host_steps(con, rid) for rid in b])
        if host_a and host_b:
            attribute_host_ops(result.attribution, host_a, host_b, TOP_PHASES)
        result.attribution.summary += outlier_note(side_a, side_b, noise_floor, bool(host_a and host_b))
    result.kernels = _kernels(ch_a, ch_b)
    result.metrics = _metrics(side_a, side_b, ch_a, ch_b)
    if with_findings:
        result.findings = finding_changes(
            side_findings(con, list(a), config=config),
            list(a),
            side_findings(con, list(b), config=config),
            list(b),
        )
    return result


def describe(con: duckdb.DuckDBPyConnection, ids: list[int]) -> Side:
    """A side's reports (files, GPUs, tools) without its steps."""
    files, gpus, tools = [], [], []
    for rid in ids:
        row = params.execute(con, REPORT_SQL, {"rid": rid}).fetchone()
        files.append(str(row[0]) if row else f"report {rid}")
        tools.append(str(row[1]) if row else "")
        gpus += [str(r[0]) for r in params.execute(con, GPUS_SQL, {"rid": rid}).fetchall()]
    return Side(ids, files, gpus, None, [], [], [], 0, None, None, None, tools=tools)


def _side(con: duckdb.DuckDBPyConnection, ids: list[int], tls: list[Timeline], by_number: bool) -> Side:
    side = describe(con, ids)
    timed = [t for t in tls if t.step_ns]
    if by_number:
        step_ns, numbers = align_numbers([(t.step_ns, t.numbers) for t in timed])
        host_ns, _ = align_numbers([(t.host_step_ns, t.numbers) for t in timed if t.host_step_ns])
    else:
        step_ns = align_mean([t.step_ns for t in timed])
        numbers = timed[0].numbers[: len(step_ns)] if timed else []
        host_ns = align_mean([t.host_step_ns for t in timed if t.host_step_ns])
    sources = {t.source for t in tls if t.source}
    merged = _merge([t.charges for t in tls])
    side.steps_source = ", ".join(sorted(sources)) if sources else None
    side.step_ns = step_ns
    side.step_numbers = numbers
    side.host_step_ns = host_ns
    side.warmup_steps = sum(t.warmup_steps for t in tls)
    side.median_step_ns = statistics.median(step_ns) if step_ns else None
    side.mean_step_ns = statistics.fmean(step_ns) if step_ns else None
    side.kernels_per_step = sum(merged.kernel_count.values()) if step_ns else None
    side.memory_peak_bytes = _memory_peak(con, ids)
    side.energy_per_step_j = _energy_per_step(con, ids)
    return side


def _merge(charges: list[Charges]) -> Charges:
    """The mean per step over the reports of a group (each already a mean over its GPUs)."""
    out = Charges()
    used = [c for c in charges if c.by_part]
    for c in used:
        for name in ("by_part", "kernel_ns", "kernel_count", "phase_kernels"):
            target = getattr(out, name)
            for k, v in getattr(c, name).items():
                target[k] += v / len(used)
        for k, v in c.kernel_names.items():
            out.kernel_names.setdefault(k, v)
    return out


def _memory_peak(con: duckdb.DuckDBPyConnection, ids: list[int]) -> int | None:
    peaks = [params.execute(con, MEMORY_PEAK_SQL, {"rid": rid}).fetchone() for rid in ids]
    values = [int(p[0]) for p in peaks if p and p[0] is not None]
    return max(values) if values else None


def _energy_per_step(con: duckdb.DuckDBPyConnection, ids: list[int]) -> float | None:
    """Joules per steady step, as the `energy` query gives them (the driver's energy counter
    where the power log has one: the power readings are a one-second average that lags a
    sub-second steady state). None without power data."""
    have = con.execute("SELECT count(*) FROM power_samples").fetchone()
    if not have or not have[0]:
        return None
    values = []
    for rid in ids:
        rel = queries.run(con, "energy", {"report_id": rid})
        cols = list(rel.columns)
        for row in rel.fetchall():
            r = dict(zip(cols, row, strict=True))
            if r["scope"] == "run" and r["name"] == "steady" and r["energy_per_instance_j"] is not None:
                values.append(float(r["energy_per_instance_j"]))
    return statistics.fmean(values) if values else None


def _shares(c: Charges) -> dict[str, float]:
    total = sum(c.kernel_ns.values())
    return {k: v / total for k, v in c.kernel_ns.items()} if total else {}


def _checks(con: duckdb.DuckDBPyConnection, a: Side, b: Side, ch_a: Charges, ch_b: Charges) -> list[Check]:
    out = []
    for label, side in (("A", a), ("B", b)):
        if not side.step_ns:
            out.append(
                Check(
                    "steps",
                    False,
                    f"{label} ({', '.join(side.files)}) has no steady steps with GPU work: no NVTX step "
                    "ranges (`step N`, `ProfilerStep#N`...) and no repeating kernel pattern; "
                    "a step-time verdict needs steps.",
                )
            )
    if a.step_ns and b.step_ns:
        if a.steps_source != b.steps_source:
            out.append(
                Check(
                    "steps",
                    True,
                    f"steps found differently (A: {a.steps_source}, B: {b.steps_source}); "
                    "both are GPU-side step times.",
                    warning=True,
                )
            )
        else:
            out.append(
                Check(
                    "steps",
                    True,
                    f"{len(a.step_ns)} and {len(b.step_ns)} steady steps ({a.warmup_steps} and "
                    f"{b.warmup_steps} warm-up steps left out), found from {a.steps_source}.",
                )
            )
    out.append(_gpu_check(a, b))
    tools = tool_check(
        a.tools,
        b.tools,
        "kernels compare by name, but each profiler slows the program its own way (the PyTorch profiler "
        "recording shapes, memory and FLOPs adds host work and GPU time), so part of a step-time change "
        "may be the profilers'.",
    )
    if tools is not None:
        out.append(tools)
    sa, sb = _shares(ch_a), _shares(ch_b)
    if sa and sb:
        overlap = sum(min(v, sb.get(k, 0.0)) for k, v in sa.items())
        same = overlap >= MIN_PROGRAM_OVERLAP
        kinds = None if same else _class_match(con, ch_a, ch_b)
        if kinds is not None and kinds >= MIN_CLASS_MATCH:
            out.append(
                Check(
                    "program",
                    True,
                    f"{overlap:.0%} of the kernel time is in kernels both run, but {kinds:.0%} of it is in "
                    "kinds of kernels (GEMM, attention, elementwise...) both run about as often per step: "
                    "the same program with other kernels (a precision or library change); compare by phase "
                    "and cause, the kernels one by one differ.",
                    warning=True,
                )
            )
        else:
            detail = (
                f"{overlap:.0%} of the kernel time is in kernels both run"
                + (
                    ""
                    if same
                    else f" (under {MIN_PROGRAM_OVERLAP:.0%}): a different program, not a change to one"
                )
                + "."
            )
            out.append(Check("program", same, detail))
    phases = _phase_check(ch_a, ch_b)
    if phases is not None:
        out.append(phases)
    return out


def _class_match(con: duckdb.DuckDBPyConnection, a: Charges, b: Charges) -> float | None:
    """The share of the kernel time (the smaller of A's and B's) in kernel classes both sides
    launch about as often per step (within CLASS_COUNT_FACTOR); None without the class macro."""
    names = {**a.kernel_names, **b.kernel_names}
    keys = sorted(names)
    try:
        rows = params.execute(
            con,
            "SELECT k, nsa_kernel_class(n) FROM (SELECT unnest($keys) AS k, unnest($names) AS n)",
            {"keys": keys, "names": [names[k] for k in keys]},
        ).fetchall()
    except duckdb.Error:
        return None
    kind = {str(k): str(c) for k, c in rows}

    def by_class(c: Charges) -> tuple[dict[str, float], dict[str, float]]:
        time: dict[str, float] = defaultdict(float)
        count: dict[str, float] = defaultdict(float)
        for k, v in c.kernel_ns.items():
            time[kind.get(k, "other")] += v
        for k, v in c.kernel_count.items():
            count[kind.get(k, "other")] += v
        return time, count

    (ta, ca), (tb, cb) = by_class(a), by_class(b)

    def held(time: dict[str, float], mine: dict[str, float], other: dict[str, float]) -> float:
        total = sum(time.values())
        alike = sum(
            v
            for k, v in time.items()
            if mine.get(k)
            and other.get(k)
            and 1 / CLASS_COUNT_FACTOR <= other[k] / mine[k] <= CLASS_COUNT_FACTOR
        )
        return alike / total if total else 0.0

    return min(held(ta, ca, cb), held(tb, cb, ca))


def _phase_check(a: Charges, b: Charges) -> Check | None:
    """A warning when much of the step time sits in NVTX phases only one side names (two tools,
    or new annotations): the phase attribution then compares unlike ranges."""

    def named(c: Charges) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (p, _), v in c.by_part.items():
            if not p.startswith("("):
                out[p] += v
        return out

    na, nb = named(a), named(b)
    only_a, only_b = set(na) - set(nb), set(nb) - set(na)
    step = max(a.step_ns, b.step_ns, 1.0)
    unlike = max(sum(na[p] for p in only_a), sum(nb[p] for p in only_b)) / step
    if unlike < MAX_UNLIKE_PHASES:
        return None

    def some(names: set[str]) -> str:
        shown = sorted(names)[:4]
        return ", ".join(shown) + (", ..." if len(names) > 4 else "") if names else "none"

    return Check(
        "phases",
        True,
        f"{unlike:.0%} of the step time is in NVTX phases only one side has (A only: {some(only_a)}; "
        f"B only: {some(only_b)}): the phase attribution compares unlike ranges; compare by cause "
        "and by kernel.",
        warning=True,
    )


def _gpu_check(a: Side, b: Side) -> Check:
    if not a.gpus or not b.gpus:
        return Check("gpu", True, "GPU model not recorded on both sides; not checked.", warning=True)
    ga, gb = gpu_text(a.gpus), gpu_text(b.gpus)
    if ga != gb:
        return Check("gpu", False, f"different GPUs: A ran on {ga}, B on {gb}.")
    return Check("gpu", True, f"same GPUs: {ga}.")


def tool_check(a_tools: list[str], b_tools: list[str], consequence: str) -> Check | None:
    """A warning when the two sides were recorded by different profilers (what it means for the
    comparison in `consequence`); None when the same ones recorded both."""
    ta, tb = sorted(set(a_tools)), sorted(set(b_tools))
    if ta == tb:
        return None
    return Check(
        "tool", True, f"A was recorded by {'/'.join(ta)}, B by {'/'.join(tb)}: {consequence}", warning=True
    )


def gpu_text(gpus: list[str]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for g in gpus:
        counts[g] += 1
    return ", ".join(f"{n}x {g}" for g, n in sorted(counts.items()))


def _attribution(a: Charges, b: Charges) -> Attribution:
    total = b.step_ns - a.step_ns
    phases = sorted({p for p, _ in a.by_part} | {p for p, _ in b.by_part})
    parts = []
    for phase in phases:
        pa = {k: v for (p, k), v in a.by_part.items() if p == phase}
        pb = {k: v for (p, k), v in b.by_part.items() if p == phase}
        delta = sum(pb.values()) - sum(pa.values())
        parts.append(
            Part(phase, sum(pa.values()), sum(pb.values()), delta, _phase_detail(phase, pa, pb, a, b))
        )
    parts.sort(key=lambda p: (-abs(p.delta_ns), p.name))
    listed = parts[:TOP_PHASES]
    causes = sorted({k for _, k in a.by_part} | {k for _, k in b.by_part})
    by_cause = []
    for cause in causes:
        ka = sum(v for (_, k), v in a.by_part.items() if k == cause)
        kb = sum(v for (_, k), v in b.by_part.items() if k == cause)
        by_cause.append(Part(CAUSE_NAMES.get(cause, cause), ka, kb, kb - ka))
    by_cause.sort(key=lambda p: (-abs(p.delta_ns), p.name))
    return Attribution(
        total_ns=total,
        by_phase=listed,
        phase_remainder_ns=total - sum(p.delta_ns for p in listed),
        by_cause=by_cause,
        cause_remainder_ns=total - sum(p.delta_ns for p in by_cause),
    )


def _phase_detail(phase: str, pa: dict[str, float], pb: dict[str, float], a: Charges, b: Charges) -> str:
    """What changed inside a phase: its kernel count per step and each cause of time."""
    bits = []
    na, nb = a.phase_kernels.get(phase, 0.0), b.phase_kernels.get(phase, 0.0)
    dk = nb - na
    if abs(dk) >= 0.5:
        bits.append(f"{plural(round(abs(dk)), 'fewer kernel' if dk < 0 else 'more kernel')} per step")
    for cause in sorted(set(pa) | set(pb)):
        d = pb.get(cause, 0.0) - pa.get(cause, 0.0)
        if abs(d) >= 1000:
            bits.append(f"{CAUSE_NAMES.get(cause, cause)} {signed(d)}")
    idle = pb.get("idle", 0.0) - pa.get("idle", 0.0)
    if dk <= -0.2 * max(na, 1.0) and idle < 0:
        bits.append("launch overhead")
    elif idle > 0 and abs(dk) < 0.5 and idle > 0.5 * abs(sum(pb.values()) - sum(pa.values())):
        bits.append("the GPU waits longer for the host")
    return ", ".join(bits)


def _kernels(a: Charges, b: Charges) -> list[KernelChange]:
    out = []
    for key in set(a.kernel_ns) | set(b.kernel_ns):
        ca, cb = a.kernel_count.get(key, 0.0), b.kernel_count.get(key, 0.0)
        ta, tb = a.kernel_ns.get(key, 0.0), b.kernel_ns.get(key, 0.0)
        status = "added" if not ca else "removed" if not cb else "changed"
        name = b.kernel_names.get(key) or a.kernel_names.get(key) or key
        out.append(KernelChange(key, name, status, ca, cb, ta, tb, tb - ta))
    out.sort(key=lambda k: (-abs(k.delta_ns), k.key))
    return out


def _metrics(a: Side, b: Side, ch_a: Charges, ch_b: Charges) -> list[Metric]:
    def busy(c: Charges, kinds: tuple[str, ...]) -> float | None:
        return sum(v for (_, k), v in c.by_part.items() if k in kinds) if c.by_part else None

    rows: list[tuple[str, str, float | None, float | None]] = [
        ("step_time", "ns", a.median_step_ns, b.median_step_ns),
        ("mean_step_time", "ns", a.mean_step_ns, b.mean_step_ns),
        ("host_step_time", "ns", _median(a.host_step_ns), _median(b.host_step_ns)),
        (
            "gpu_busy",
            "ns",
            busy(ch_a, ("kernels", "graphs", "memsets")),
            busy(ch_b, ("kernels", "graphs", "memsets")),
        ),
        ("exposed_copy", "ns", busy(ch_a, ("copies",)), busy(ch_b, ("copies",))),
        ("gpu_idle", "ns", busy(ch_a, ("idle",)), busy(ch_b, ("idle",))),
        ("kernels_per_step", "count", a.kernels_per_step, b.kernels_per_step),
        ("memory_peak", "byte", _f(a.memory_peak_bytes), _f(b.memory_peak_bytes)),
        ("energy_per_step", "J", a.energy_per_step_j, b.energy_per_step_j),
    ]
    out = []
    for name, unit, va, vb in rows:
        if va is None and vb is None:
            continue
        delta = vb - va if va is not None and vb is not None else None
        rel = delta / va if delta is not None and va else None
        out.append(Metric(name, unit, va, vb, delta, rel))
    return out


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _f(x: int | None) -> float | None:
    return float(x) if x is not None else None
