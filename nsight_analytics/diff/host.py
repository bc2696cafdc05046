"""What the step's thread ran on the host, step by step, and the GPU idle time under it.

The phases say which GPU work the GPU waited for, not what the host did meanwhile: in a
PyTorch profiler trace the DataLoader fetch at the top of a step launches nothing, so the GPU
idle time it causes is charged to the copy it waited for. The trace's host ops say it. Per
steady step (an NVTX / `ProfilerStep#N` range, or a replayed graph's launch-to-launch period), the outermost ops (`cpu_ops`, categories
`cpu_op` and `user_annotation`; Python frames left out) nested in the range on the step's
thread, by name (numbers folded, as phases are): their host time, and the GPU idle time under
them (the GPU running none of the process's work, a mean over its GPUs). What is left of the
range is `OUTSIDE_OPS`. Values are kept per step, so the diff can take medians: a few steps
with an outlier or two is where this is read, and there a mean describes no step.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import duckdb

from .. import params
from ..units import dur, signed
from . import stats
from .model import Attribution, HostOpChange
from .timeline import PHASE_LABEL

# The part of a step range no op covers: Python between the ops, waits.
OUTSIDE_OPS = "(outside ops)"

STEPS_SQL = """
SELECT series, pid, step, number, start_ns, end_ns FROM steps
WHERE report_id = $rid AND steady AND source IN ('nvtx', 'graphs') AND end_ns > start_ns
ORDER BY series, step
"""

# The outermost ops inside each steady step range on the step's thread: each op joined (ASOF)
# to the last step starting before it on its thread, kept when it ends inside that step.
OPS_SQL = f"""
WITH s AS (
    SELECT series, step, start_ns, end_ns FROM steps
    WHERE report_id = $rid AND steady AND source IN ('nvtx', 'graphs') AND end_ns > start_ns
),
o AS (
    SELECT global_tid, start_ns, end_ns, name FROM cpu_ops
    WHERE report_id = $rid AND category IN ('cpu_op', 'user_annotation')
      AND start_ns IS NOT NULL AND end_ns >= start_ns
),
placed AS (
    SELECT s.series, s.step, o.start_ns, o.end_ns, {PHASE_LABEL.format(col="o.name")} AS name,
           s.start_ns AS step_start, s.end_ns AS step_end
    FROM o ASOF JOIN s ON s.series = o.global_tid AND o.start_ns >= s.start_ns
),
inside AS (
    SELECT series, step, start_ns, end_ns, name,
           max(end_ns) OVER (PARTITION BY series, step ORDER BY start_ns, end_ns DESC
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS outer_end
    FROM placed
    WHERE end_ns <= step_end AND NOT (start_ns = step_start AND end_ns = step_end)
)
SELECT series, step, name, start_ns, end_ns FROM inside
WHERE outer_end IS NULL OR outer_end <= start_ns
ORDER BY series, step, start_ns
"""

BUSY_SQL = """
SELECT device_id, start_ns, end_ns FROM nsa_gpu_activity($rid)
WHERE pid = $pid AND end_ns > $lo AND start_ns < $hi
ORDER BY device_id, start_ns
"""


@dataclass
class HostSteps:
    """One report's steady steps on the host: per step (in step order) the range's duration,
    the GPU idle time during it, and per op name its host time and the GPU idle under it."""

    numbers: list[int] = field(default_factory=list)
    host_ns: list[float] = field(default_factory=list)
    idle_ns: list[float] = field(default_factory=list)
    ops: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.numbers)


class _Busy:
    """The union of one GPU's busy intervals, to measure the busy time inside any interval."""

    def __init__(self, rows: list[tuple[int, int]]) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        for s, e in rows:  # sorted by start
            if self.ends and s <= self.ends[-1]:
                self.ends[-1] = max(self.ends[-1], e)
            else:
                self.starts.append(s)
                self.ends.append(e)
        self.before = [0]  # busy time of the intervals before index i
        for s, e in zip(self.starts, self.ends):
            self.before.append(self.before[-1] + e - s)

    def busy(self, lo: int, hi: int) -> int:
        if hi <= lo or not self.starts:
            return 0
        i = max(bisect.bisect_right(self.ends, lo), 0)  # first interval ending after lo
        j = bisect.bisect_left(self.starts, hi)  # intervals starting before hi
        if i >= j:
            return 0
        total = self.before[j] - self.before[i]
        total -= max(0, lo - self.starts[i])
        total -= max(0, self.ends[j - 1] - hi)
        return total


def host_steps(con: duckdb.DuckDBPyConnection, rid: int) -> HostSteps:
    """The report's steady NVTX steps as its host ops fill them (module doc); empty without
    NVTX steps or without host ops in them. Several step series: the first one that has ops."""
    steps = params.execute(con, STEPS_SQL, {"rid": rid}).fetchall()
    if not steps:
        return HostSteps()
    ops = params.execute(con, OPS_SQL, {"rid": rid}).fetchall()
    by_series: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for r in ops:
        by_series[int(r[0])].append(r)
    for series in dict.fromkeys(int(s[0]) for s in steps):
        if by_series.get(series):
            return _series([s for s in steps if int(s[0]) == series], by_series[series], con, rid)
    return HostSteps()


def _series(
    steps: list[tuple[Any, ...]], ops: list[tuple[Any, ...]], con: duckdb.DuckDBPyConnection, rid: int
) -> HostSteps:
    lo, hi = min(int(s[4]) for s in steps), max(int(s[5]) for s in steps)
    rows = params.execute(con, BUSY_SQL, {"rid": rid, "pid": steps[0][1], "lo": lo, "hi": hi}).fetchall()
    per_device: dict[Any, list[tuple[int, int]]] = defaultdict(list)
    for dev, s, e in rows:
        per_device[dev].append((int(s), int(e)))
    gpus = [_Busy(r) for r in per_device.values()]

    def idle(a: int, b: int) -> float:
        if not gpus:
            return float(b - a)
        return sum((b - a) - g.busy(a, b) for g in gpus) / len(gpus)

    out = HostSteps()
    index = {int(s[2]): k for k, s in enumerate(steps)}
    n = len(steps)
    host_op: dict[str, list[float]] = defaultdict(lambda: [0.0] * n)
    idle_op: dict[str, list[float]] = defaultdict(lambda: [0.0] * n)
    for k, s in enumerate(steps):
        a, b = int(s[4]), int(s[5])
        out.numbers.append(int(s[3]) if s[3] is not None else int(s[2]))
        out.host_ns.append(float(b - a))
        out.idle_ns.append(idle(a, b))
    for _, step, name, start, end in ops:
        pos = index.get(int(step))
        if pos is None:
            continue
        a, b = int(start), int(end)
        host_op[str(name)][pos] += b - a
        idle_op[str(name)][pos] += idle(a, b)
    host_op[OUTSIDE_OPS] = [out.host_ns[k] - sum(v[k] for v in host_op.values()) for k in range(n)]
    idle_op[OUTSIDE_OPS] = [out.idle_ns[k] - sum(v[k] for v in idle_op.values()) for k in range(n)]
    out.ops = {name: (host_op[name], idle_op[name]) for name in host_op}
    return out


def merge(sides: list[HostSteps]) -> HostSteps:
    """A group's step k: the mean over its reports of their step k, aligned by position (as the
    GPU step times are)."""
    used = [s for s in sides if s]
    if len(used) <= 1:
        return used[0] if used else HostSteps()
    n = min(len(s.numbers) for s in used)

    def mean(lists: list[list[float]]) -> list[float]:
        return [sum(v[k] for v in lists) / len(used) for k in range(n)]

    zeros = [0.0] * n
    names = list(dict.fromkeys(name for s in used for name in s.ops))
    return HostSteps(
        numbers=used[0].numbers[:n],
        host_ns=mean([s.host_ns for s in used]),
        idle_ns=mean([s.idle_ns for s in used]),
        ops={
            name: (
                mean([s.ops.get(name, (zeros, zeros))[0] for s in used]),
                mean([s.ops.get(name, (zeros, zeros))[1] for s in used]),
            )
            for name in names
        },
    )


def attribute_host_ops(att: Attribution, a: HostSteps, b: HostSteps, top: int) -> None:
    """What the step's thread ran on the host, A against B: the `top` ops whose GPU idle time
    (then host time) moved most, medians per step, into `att`, and in words what moved."""
    zeros_a, zeros_b = [0.0] * len(a.numbers), [0.0] * len(b.numbers)
    ops = []
    for name in dict.fromkeys([*a.ops, *b.ops]):
        ha, ia = a.ops.get(name, (zeros_a, zeros_a))
        hb, ib = b.ops.get(name, (zeros_b, zeros_b))
        ma, mb = statistics.median(ha), statistics.median(hb)
        ja, jb = statistics.median(ia), statistics.median(ib)
        ops.append(
            HostOpChange(
                name, ma, mb, mb - ma, ja, jb, jb - ja, statistics.fmean(ha), statistics.fmean(hb),
                list(ha), list(hb),
            )
        )  # fmt: skip
    ops.sort(key=lambda o: (-abs(o.idle_delta_ns), -abs(o.delta_ns), o.name))
    att.by_host_op = ops[:top]
    att.a_host_steps, att.b_host_steps = list(a.numbers), list(b.numbers)
    att.a_host_idle_ns, att.b_host_idle_ns = list(a.idle_ns), list(b.idle_ns)
    att.summary = _summary(att, a, b)


def _summary(att: Attribution, a: HostSteps, b: HostSteps) -> list[str]:
    """The GPU idle per step and the host op it moved under, medians; the op's outlier steps."""
    out = []
    ia, ib = statistics.median(a.idle_ns), statistics.median(b.idle_ns)
    top = next((o for o in att.by_host_op if o.name != OUTSIDE_OPS), None)
    line = (
        f"Per step (medians over {len(a.numbers)} and {len(b.numbers)} step ranges), the GPU idles "
        f"{dur(ia)} -> {dur(ib)} ({signed(ib - ia)})"
    )
    moved = top is not None and abs(top.idle_delta_ns) >= 0.5 * abs(ib - ia) and abs(ib - ia) > 0
    if top is not None and moved:
        line += (
            f", most of it under {top.name}: {dur(top.a_ns)} -> {dur(top.b_ns)} of host time per step "
            f"({signed(top.delta_ns)}), GPU idle under it {signed(top.idle_delta_ns)}."
        )
    else:
        line += "."
    out.append(line)
    if top is not None:
        for label, steps, numbers, mean in (
            ("A", top.a_steps_ns, a.numbers, top.a_mean_ns),
            ("B", top.b_steps_ns, b.numbers, top.b_mean_ns),
        ):
            slow = stats.slow_outliers(steps)
            if slow:
                each = [f"{dur(steps[i])} in step {numbers[i]}" for i in slow]
                where = ", ".join(each[:-1]) + " and " + each[-1] if len(each) > 1 else each[0]
                out.append(
                    f"In {label}, {top.name} takes {where} (its median {dur(statistics.median(steps))}, "
                    f"mean {dur(mean)})."
                )
    return out
