"""GPU-side step times of a report and where each step's time went on the GPU timeline.

NVTX step ranges are host times: when the host runs ahead of the GPU (asynchronous launches)
a host step lasts a fraction of the GPU work it queued, and when the host waits (a `.item()`)
it lasts longer. A step's GPU time is taken instead from the work launched in it: the GPU
activity (kernels, copies, memsets, graph replays) whose launching CUDA API call starts inside
the step range (any thread of the range's process, as `nvtx_ranges.process_kernels` counts),
and the step time is the period from the first GPU start of that work to the first GPU start
of the next step's (the last step, which has no next one: as long as its work on the GPU or
its range on the host, whichever is longer). Their sum over the steady steps is the GPU
timeline those steps occupied: busy time and the idle time the host left between them.
Steps from a replayed CUDA graph (`steps.source = 'graphs'`: launch call to launch call) are
host ranges too; kernel-pattern steps (`'kernels'`) are GPU times already.

The window the steady steps occupy is then split exactly: every instant of each GPU's
timeline is busy (charged to the activity that covered it first: a copy under a running kernel
costs nothing, an exposed one costs its exposed time) or idle (charged to the activity the GPU
was waiting for, the next one to start). Each charge carries the activity's kind, its kernel
name and its phase, so the parts of a step add up to the step.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import duckdb

from .. import params
from .names import diff_key

# Phase labels for GPU work outside a named range: launched outside every step, inside a step
# range but outside its sub-ranges, or (kernel-pattern steps) outside every NVTX range.
OUTSIDE_STEPS = "(outside steps)"
STEP_BODY = "(step, outside sub-ranges)"
NO_RANGE = "(no NVTX range)"

# Step sources whose steps are host ranges (`steps.source`): NVTX / ProfilerStep ranges, and the
# launch-to-launch periods of a replayed CUDA graph; their work is what the process launched
# inside them. Kernel-pattern steps ('kernels') are GPU periods already.
HOST_RANGES = ("nvtx", "graphs")

STEPS_SQL = """
SELECT series, pid, device_id, step, number, name, source, start_ns, end_ns, steady
FROM steps WHERE report_id = $rid ORDER BY series, step
"""

# A phase is named without its numbers, so `blocks.21` and `blocks.22`, or `micro_batch 0` and
# `micro_batch 1`, are one phase: numbers that follow a letter stay (`h2d`, `conv2d`).
PHASE_LABEL = r"regexp_replace({col}, '(^|[^A-Za-z0-9])[0-9]+', '\1N', 'g')"

# GPU activity with the time its launch call started and the thread that launched it. A
# process without CUDA API records has the GPU start stand in for the launch; in one with them,
# work whose launch is not recorded was launched before the capture (a PyTorch profiler's
# first active step opens with the warm-up step's last kernels still running): no launch time,
# so it belongs to no step.
_ACTIVITY = """
launch AS (
    SELECT pid, correlation_id, min(start_ns) AS launch_ns, arg_min(global_tid, start_ns) AS launch_tid
    FROM cuda_api WHERE report_id = $rid AND correlation_id IS NOT NULL GROUP BY ALL
),
launching AS (SELECT DISTINCT pid FROM launch),
act AS (
    SELECT a.device_id, a.pid, a.start_ns, a.end_ns, a.kind, a.label,
           CASE WHEN a.kind = 'kernel' THEN nsa_kernel_key(a.label) END AS kernel_key,
           CASE WHEN l.launch_ns IS NOT NULL THEN l.launch_ns
                WHEN p.pid IS NULL THEN a.start_ns END AS launch_ns,
           l.launch_tid
    FROM nsa_gpu_activity($rid) AS a
    LEFT JOIN launch AS l USING (pid, correlation_id)
    LEFT JOIN launching AS p ON p.pid = a.pid
),
s AS (SELECT series, pid, device_id, step, start_ns, end_ns FROM steps WHERE report_id = $rid),
-- the outermost NVTX ranges of each thread
tops AS (
    SELECT global_tid, start_ns, end_ns, base_name FROM (
        SELECT global_tid, start_ns, end_ns, {label} AS base_name,
               max(end_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns DESC
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS outer_end
        FROM nvtx_ranges WHERE report_id = $rid AND end_ns IS NOT NULL
    ) WHERE outer_end IS NULL OR outer_end <= start_ns
)
"""

# NVTX steps: a step's work is what its process launched inside the range; its phase the
# outermost range nested in the step range on the step's thread that holds the launch call.
NVTX_ACTIVITY_SQL = f"""
WITH {_ACTIVITY.format(label=PHASE_LABEL.format(col="base_name"))},
kids AS (
    SELECT s.series, s.step, r.start_ns, r.end_ns, {PHASE_LABEL.format(col="r.base_name")} AS base_name,
           max(r.end_ns) OVER (PARTITION BY s.series, s.step ORDER BY r.start_ns, r.end_ns DESC
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS outer_end
    FROM s JOIN nvtx_ranges AS r
      ON r.report_id = $rid AND r.global_tid = s.series AND r.start_ns >= s.start_ns AND r.end_ns <= s.end_ns
     AND NOT (r.start_ns = s.start_ns AND r.end_ns = s.end_ns)
),
phase AS (SELECT series, step, start_ns, end_ns, base_name FROM kids WHERE outer_end IS NULL OR outer_end <= start_ns),
placed AS (
    SELECT act.*, s.series, s.step
    FROM act LEFT JOIN s ON act.pid = s.pid AND act.launch_ns BETWEEN s.start_ns AND s.end_ns
)
SELECT p.series, p.step, p.device_id, p.pid, p.start_ns, p.end_ns, p.kind, p.label, p.kernel_key,
       CASE WHEN p.step IS NULL THEN NULL WHEN p.launch_ns <= ph.end_ns THEN ph.base_name END AS phase
FROM placed AS p
ASOF LEFT JOIN phase AS ph ON ph.series = p.series AND ph.step = p.step AND p.launch_ns >= ph.start_ns
"""

# Kernel-pattern steps: a step's work is what starts on its GPU between its marker kernels;
# the phase is the outermost NVTX range of the launching thread around the launch call.
KERNEL_ACTIVITY_SQL = f"""
WITH {_ACTIVITY.format(label=PHASE_LABEL.format(col="base_name"))},
placed AS (
    SELECT act.*, s.series, s.step
    FROM act LEFT JOIN s ON s.device_id = act.device_id AND act.start_ns >= s.start_ns AND act.start_ns < s.end_ns
)
SELECT p.series, p.step, p.device_id, p.pid, p.start_ns, p.end_ns, p.kind, p.label, p.kernel_key,
       CASE WHEN p.launch_ns <= t.end_ns THEN t.base_name END AS phase
FROM placed AS p
ASOF LEFT JOIN tops AS t ON t.global_tid = p.launch_tid AND p.launch_ns >= t.start_ns
"""


@dataclass
class Charges:
    """GPU time per step of one report, split by (phase, category) and by kernel: the means
    over the report's timelines (a GPU of a step series) of each timeline's time / its steps."""

    by_part: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    kernel_ns: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    kernel_count: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    kernel_names: dict[str, str] = field(default_factory=dict)
    phase_kernels: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def step_ns(self) -> float:
        return sum(self.by_part.values())


@dataclass
class Timeline:
    """A report's steady steps on the GPU: per-step times, and where that time went."""

    report_id: int
    source: str | None  # 'nvtx' or 'kernels'; None without steps
    step_ns: list[float]  # GPU-side step times of the steady steps (series: mean per step)
    host_step_ns: list[float]  # the same steps' own durations (host time for NVTX steps)
    numbers: list[int]  # each step's number (NVTX `step 12` -> 12) or position
    series: int
    warmup_steps: int  # steps left out before the steady state
    charges: Charges
    windows: list[tuple[int, int]] = field(default_factory=list)  # each series' steady GPU window


def _rows(con: duckdb.DuckDBPyConnection, sql: str, rid: int) -> list[tuple[Any, ...]]:
    return params.execute(con, sql, {"rid": rid}).fetchall()


def gpu_steps(con: duckdb.DuckDBPyConnection, rid: int) -> Timeline:
    """The report's GPU-side steady step times and their decomposition (see module doc)."""
    steps = _rows(con, STEPS_SQL, rid)
    if not steps:
        return Timeline(rid, None, [], [], [], 0, 0, Charges())
    source = str(steps[0][6])
    acts = _rows(con, NVTX_ACTIVITY_SQL if source in HOST_RANGES else KERNEL_ACTIVITY_SQL, rid)
    by_series: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for s in steps:
        by_series[int(s[0])].append(s)
    result = Timeline(rid, source, [], [], [], len(by_series), 0, Charges())
    timelines = 0
    runs: list[tuple[list[float], list[float], list[int]]] = []
    for series, rows in by_series.items():
        run: tuple[list[float], list[float], list[int]] = ([], [], [])
        timelines += _series(result, run, series, rows, acts, source)
        if run[0]:
            runs.append(run)
    _average(result.charges, timelines)
    result.step_ns = align_mean([r[0] for r in runs])
    result.host_step_ns = align_mean([r[1] for r in runs])
    result.numbers = runs[0][2][: len(result.step_ns)] if runs else []
    return result


def align_mean(series: list[list[float]]) -> list[float]:
    """Step k of several series (GPUs, ranks) as one sample: their mean, aligned by position;
    the ranks of a synchronous job are not independent samples of a step."""
    if len(series) == 1:
        return list(series[0])
    n = min((len(s) for s in series), default=0)
    return [sum(s[k] for s in series) / len(series) for k in range(n)]


def align_numbers(series: list[tuple[list[float], list[int]]]) -> tuple[list[float], list[int]]:
    """Step n of several ranks of one run as one sample: the mean over the ranks of their step
    numbered n, for the numbers every rank has (a rank of a synchronous job cannot run a step
    ahead: each rank's GPU step is the job's step plus its own jitter). (times, numbers); by
    position (`align_mean`) when the ranks share no number."""
    if len(series) == 1:
        return list(series[0][0]), list(series[0][1][: len(series[0][0])])
    maps = [dict(zip(nums, times)) for times, nums in series]
    common = sorted(set.intersection(*(set(m) for m in maps))) if maps else []
    if not common:
        times = align_mean([t for t, _ in series])
        return times, list(series[0][1][: len(times)]) if series else []
    return [sum(m[n] for m in maps) / len(maps) for n in common], common


def _series(
    out: Timeline,
    run: tuple[list[float], list[float], list[int]],
    series: int,
    steps: list[tuple[Any, ...]],
    acts: list[tuple[Any, ...]],
    source: str,
) -> int:
    """Charge one step series to `out` and fill `run` with its (GPU, host) step times and step
    numbers; returns how many GPU timelines it charged. The steady steps follow each other
    (warm-up comes first), so their periods tile one window."""
    info = {int(s[3]): s for s in steps}
    ends: tuple[int, int, int] | None = None  # (end of the captured last step, series, step)
    if source in HOST_RANGES:
        pid = steps[0][1]
        mine = [a for a in acts if a[3] == pid]
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for a in mine:
            if a[0] == series and a[1] is not None:
                i = int(a[1])
                first[i] = min(first.get(i, a[4]), a[4])
                last[i] = max(last.get(i, a[5]), a[5])
        order = sorted(first)
        periods = [
            (i, first[j] - first[i])
            for i, j in itertools.pairwise(order)
            if info[i][9] and first[j] > first[i]
        ]
        if order and info[order[-1]][9]:
            # the last step has no next one: it lasts as long as its work on the GPU (first
            # start to last end) or its range on the host (a host-bound step), whichever is
            # longer. A period holds the host time before the next step's first GPU work (a
            # DataLoader fetch at the top of the step range); the last one's own stands in
            # for its successor's, which was not captured.
            i = order[-1]
            host_ns = int(info[i][8]) - int(info[i][7])
            periods.append((i, max(last[i] - first[i], host_ns)))
            ends = (max(last[i], int(info[i][8])), series, i)
    else:
        dev = steps[0][2]
        mine = [a for a in acts if a[2] == dev]
        periods = [(int(s[3]), int(s[8]) - int(s[7])) for s in steps if s[9] and s[8] > s[7]]
        first = {int(s[3]): int(s[7]) for s in steps}
    out.warmup_steps += sum(1 for s in steps if not s[9])
    if not periods:
        return 0
    for i, ns in periods:
        run[0].append(float(ns))
        run[1].append(float(info[i][8] - info[i][7]) if source in HOST_RANGES else float(ns))
        number = info[i][4]
        run[2].append(int(number) if number is not None else i)
    lo = first[periods[0][0]]
    hi = lo + sum(ns for _, ns in periods)
    out.windows.append((lo, hi))
    n = len(periods)
    devices = sorted({a[2] for a in mine if a[4] < hi and a[5] > lo}, key=lambda d: (d is None, d or 0))
    # the stand-in for the next step's host time, past the last step's end: charged as the
    # last step's own host time before its first GPU work was
    tail = ends if ends is not None and ends[0] < hi and ends[2] == periods[-1][0] else None
    for dev in devices:
        _charge(out.charges, [a for a in mine if a[2] == dev], lo, hi, n, source, tail)
    return len(devices)


def _charge(
    c: Charges,
    acts: list[tuple[Any, ...]],
    lo: int,
    hi: int,
    steps: int,
    source: str,
    tail: tuple[int, int, int] | None = None,
) -> None:
    """Split [lo, hi) of one GPU's timeline between its activities (module doc), per step;
    `tail` (from, series, step): the idle time from `from` on stands for the next step's wait,
    charged to what that step itself waited for, its first GPU work."""
    covered = lo
    ordered = sorted(acts, key=lambda r: (r[4], r[5]))
    for a in ordered:
        start, end = int(a[4]), int(a[5])
        if end <= lo or start >= hi:
            continue
        phase = _phase(a, source)
        idle = max(0, min(start, hi) - covered)
        busy = max(0, min(end, hi) - max(start, covered, lo))
        if idle:
            c.by_part[(phase, "idle")] += idle / steps
        if busy:
            c.by_part[(phase, _category(str(a[6])))] += busy / steps
        covered = max(covered, min(end, hi))
        if a[6] == "kernel" and start >= lo:
            key = diff_key(str(a[8]))
            c.kernel_names.setdefault(key, str(a[7]))
            c.kernel_ns[key] += (end - start) / steps
            c.kernel_count[key] += 1 / steps
            c.phase_kernels[phase] += 1 / steps
    if covered < hi:
        # the GPU waits for the next step's first work; after the last step, for its host tail
        end = hi
        if tail is not None:
            head = next((a for a in ordered if a[0] == tail[1] and a[1] == tail[2]), None)
            if head is not None:
                end = max(covered, tail[0])
                c.by_part[(_phase(head, source), "idle")] += (hi - end) / steps
        after = next((a for a in ordered if a[4] >= hi and a[1] is not None), None)
        before = [a for a in ordered if lo <= a[4] < hi]
        last = after or (before[-1] if before else None)
        phase = _phase(last, source) if last is not None else OUTSIDE_STEPS
        c.by_part[(phase, "idle")] += (end - covered) / steps


def _phase(a: tuple[Any, ...], source: str) -> str:
    if a[9] is not None:
        return str(a[9])
    if source in HOST_RANGES:
        return OUTSIDE_STEPS if a[1] is None else STEP_BODY
    return NO_RANGE


def _category(kind: str) -> str:
    return {"kernel": "kernels", "memcpy": "copies", "memset": "memsets", "graph": "graphs"}.get(kind, kind)


def _average(c: Charges, timelines: int) -> None:
    """Sums over timelines -> means, so a report of two GPUs reads per GPU and step."""
    if timelines <= 1:
        return
    for part in c.by_part:
        c.by_part[part] /= timelines
    for table in (c.kernel_ns, c.kernel_count, c.phase_kernels):
        for k in table:
            table[k] /= timelines
