"""What the host did while the GPU idled (query `gap_host`), in words.

The gpu-idle rule asks: which activity of the thread that launches the GPU's work holds most of
the idle time (a sleep, a synchronising call, an MPI call, a named NVTX range, a PyTorch op or
a Python frame), what runs inside it or around it, and how much of the idle time no trace
covers. The query gives, per activity, its time inside the gaps (`in_gaps_ns`, enclosing
ranges and ops left out), the NVTX range or profiler op around it (`parent_*`) and the CPU
samples taken there; this module folds its rows over the report's GPUs, picks the lead and
words it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..ingest.nvtx import WAIT_RANGES
from ..units import dur, pct

_SLEEPS = frozenset({"sleep", "usleep", "nanosleep", "clock_nanosleep"})
_IO = re.compile(r"^(p?readv?|pread64|fread|recv\w*|accept4?|connect)$")
_FILES = re.compile(r"^(p?writev?|pwrite64|fwrite|fflush|fsync|fdatasync|f?open(64)?|f?close|send\w*)$")
_OS_WAITS = re.compile(r"wait|poll|select|futex|lock$|join|^sem_")
_COMM = re.compile(WAIT_RANGES)
_BLOCKING = re.compile(
    r"^(cu|cuda|hip)(Device|Thread|Ctx|Stream|Event)Synchronize|^(cu|cuda|hip)Mem(cpy|set)(?!.*Async)"
)
_LOADS = re.compile(r"^cu(Library|Module)Load")
_CODE = re.compile(r"\(\d+\): ")  # a Python frame with a file position: `loader.py(28): __getitem__`
_BUILTIN = "<built-in"

# An activity that holds at least this share of its lead's time is what runs inside it.
_INSIDE = 0.5
# An activity listed in the summary holds at least this share of the idle time.
_LISTED = 0.05
# A range or op that encloses launches is named as where the idle time falls from this share.
_PHASE = 0.25


@dataclass
class Activity:
    """One activity of the launching threads in the idle gaps, summed over the report's GPUs."""

    source: str
    name: str
    in_gaps_ns: int = 0
    self_ns: int = 0
    instances: int = 0
    depth: int = 0
    parent: tuple[str, str] | None = None
    parent_ns: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.source, self.name)

    @property
    def kind(self) -> str:
        """'named' (an NVTX range, a profiler op), 'call' (CUDA, OS, MPI, a communication
        range), 'python' (a frame) or 'sample' (CPU samples)."""
        if self.source in ("python", "sample"):
            return self.source
        if self.source == "cpu_op" or (self.source == "nvtx" and not _COMM.search(self.name)):
            return "named"
        return "call"

    def label(self) -> str:
        """'NVTX range `host_work`', '`aten::item`', or the name."""
        if self.source == "nvtx":
            return f"NVTX range `{self.name}`"
        return f"`{self.name}`" if self.source == "cpu_op" else self.name

    def doing(self) -> str:
        """What the host does, after 'the host': 'sleeps (clock_nanosleep)'."""
        return self._phrase()[0]

    def being(self) -> str:
        """The same as a participle: 'sleeping in clock_nanosleep', 'in NVTX range `host_work`'."""
        return self._phrase()[1]

    def _phrase(self) -> tuple[str, str]:
        n, s = self.name, self.source
        if s == "osrt" and n in _SLEEPS:
            return f"sleeps ({n})", f"sleeping in {n}"
        if s == "osrt" and _IO.search(n):
            return f"waits on I/O ({n})", f"waiting on I/O in {n}"
        if s == "osrt" and _FILES.search(n):
            return f"does I/O ({n})", f"doing I/O in {n}"
        if (s == "osrt" and _OS_WAITS.search(n)) or s == "mpi" or (s == "nvtx" and self.kind == "call"):
            return f"waits in {n}", f"waiting in {n}"
        if s == "cuda" and _BLOCKING.search(n):
            return f"blocks in {n}", f"blocked in {n}"
        if s == "cuda" and _LOADS.search(n):
            return f"loads GPU code ({n})", f"loading GPU code in {n}"
        if s == "cuda" and ("Launch" in n or "Memcpy" in n or "Memset" in n):
            what = "launches" if "Launch" in n else ("copies" if "Memcpy" in n else "memsets")
            return f"issues {what} ({n})", f"issuing {what} in {n}"
        if s == "nvtx":
            return f"is in NVTX range `{n}`", f"in NVTX range `{n}`"
        if s == "cpu_op":
            return f"runs `{n}`", f"running `{n}`"
        if s == "python":
            return f"runs Python code at {n}", f"running Python code at {n}"
        if s == "sample":
            return f"runs {n} (CPU samples)", f"running {n} (CPU samples)"
        return f"is in {n}", f"in {n}"


@dataclass
class HostTime:
    """The launching threads' time in the idle gaps of one report's window, over its GPUs."""

    activities: dict[tuple[str, str], Activity]
    idle_ns: int
    attributed_ns: int
    traced_ns: int
    devices: int

    @property
    def untraced_ns(self) -> int:
        return max(0, self.attributed_ns - self.traced_ns)

    def loading_ns(self) -> int:
        """Time the launching threads spent loading GPU code (cuModuleLoad*, cuLibraryLoad*) in
        the gaps, per GPU: start-up work wherever it happens."""
        total = sum(
            a.in_gaps_ns for a in self.activities.values() if a.source == "cuda" and _LOADS.search(a.name)
        )
        return int(total / max(1, self.devices))

    def get(self, key: tuple[str, str] | None) -> Activity | None:
        return None if key is None else self.activities.get(key)

    def ranked(self, kinds: Iterable[str]) -> list[Activity]:
        """Activities of these kinds by time in the gaps, most first (ranges and ops before calls
        of the same time: the outer of two nested ones)."""
        keep = set(kinds)
        acts = [a for a in self.activities.values() if a.kind in keep and a.in_gaps_ns > 0]
        return sorted(acts, key=lambda a: (-a.in_gaps_ns, a.kind != "named", a.source, a.name))

    def ancestors(self, a: Activity) -> set[tuple[str, str]]:
        """The ranges and ops around `a`: its parent, the parent's parent..."""
        seen: set[tuple[str, str]] = set()
        key = a.parent
        while key is not None and key not in seen:
            seen.add(key)
            up = self.activities.get(key)
            key = up.parent if up else None
        return seen

    def nested(self, a: Activity, b: Activity) -> bool:
        """Is one of the two inside the other?"""
        return a.key in self.ancestors(b) or b.key in self.ancestors(a)

    def inside(self, outer: Activity, kinds: Iterable[str]) -> list[Activity]:
        """Activities of these kinds inside `outer` (at any depth) for most of its time, most first."""
        keep = set(kinds)
        return sorted(
            (
                a
                for a in self.activities.values()
                if a.kind in keep
                and outer.key in self.ancestors(a)
                and a.parent_ns >= _INSIDE * outer.in_gaps_ns
            ),
            key=lambda a: (-a.parent_ns, a.name),
        )


def host_time(rows: Iterable[Any]) -> HostTime | None:
    """Fold the `gap_host` rows of one report over its GPUs (None without rows)."""
    acts: dict[tuple[str, str], Activity] = {}
    parents: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
    totals: dict[Any, tuple[int, int, int]] = {}
    for r in rows:
        totals[r.device_id] = (int(r.idle_ns or 0), int(r.attributed_ns or 0), int(r.traced_ns or 0))
        a = acts.setdefault((r.source, r.name), Activity(r.source, r.name, depth=int(r.depth or 0)))
        a.in_gaps_ns += int(r.in_gaps_ns or 0)
        a.self_ns += int(r.self_ns or 0)
        a.instances += int(r.instances or 0)
        a.depth = min(a.depth, int(r.depth or 0))
        if r.parent_name is not None:
            by = parents.setdefault(a.key, {})
            by[(r.parent_source, r.parent_name)] = by.get((r.parent_source, r.parent_name), 0) + int(
                r.parent_ns or 0
            )
    if not totals:
        return None
    for key, by in parents.items():
        parent, ns = max(by.items(), key=lambda kv: (kv[1], kv[0]))
        acts[key].parent, acts[key].parent_ns = parent, ns
    idle, attributed, traced = (sum(t[i] for t in totals.values()) for i in range(3))
    return HostTime(acts, idle, attributed, traced, len(totals))


@dataclass
class Lead:
    """The activity holding most of the idle time, with what runs inside it or around it."""

    act: Activity
    inner: Activity | None = None  # a call inside a range or op
    outer: Activity | None = None  # the range or op around a call
    code: Activity | None = None  # the deepest Python frame with a file position inside it
    builtin: Activity | None = None  # the Python built-in inside it (`<built-in function sleep>`)
    sampled: Activity | None = None  # the function CPU samples inside it name most
    second: Activity | None = None  # another activity, apart from this one, that holds as much

    def related(self) -> set[tuple[str, str]]:
        return {a.key for a in (self.act, self.inner, self.outer, self.code, self.builtin, self.sampled) if a}


def lead(ht: HostTime, share: float) -> Lead | None:
    """The lead: the range, op or call holding the most idle time, when that is at least `share`
    of it; else the deepest Python frame (with a file position) that holds that much."""
    floor = share * ht.idle_ns
    pool = ht.ranked(("named", "call"))
    if pool and pool[0].in_gaps_ns >= floor and ht.idle_ns > 0:
        found = Lead(pool[0])
    else:
        frames = [a for a in ht.ranked(("python",)) if _CODE.search(a.name) and a.in_gaps_ns >= floor > 0]
        if not frames:
            return None
        found = Lead(max(frames, key=lambda a: (a.depth, a.in_gaps_ns)))
    top = found.act
    if top.kind in ("named", "python"):
        calls = ht.inside(top, ("call",))
        found.inner = calls[0] if calls else None
        frames = [a for a in ht.inside(top, ("python",)) if _CODE.search(a.name)]
        found.code = (
            max(frames, key=lambda a: (a.depth, a.parent_ns)) if frames and top.kind == "named" else None
        )
        builtins = [a for a in ht.inside(top, ("python",)) if a.name.startswith(_BUILTIN)]
        found.builtin = builtins[0] if builtins and found.code else None
        samples = ht.inside(top, ("sample",))
        found.sampled = samples[0] if samples and not (found.inner or found.code) else None
    else:
        outer = ht.get(top.parent)
        if (
            outer
            and outer.kind == "named"
            and outer.in_gaps_ns > 0
            and top.parent_ns >= _INSIDE * top.in_gaps_ns
        ):
            found.outer = outer
    taken = [x for x in (found.act, found.inner, found.outer) if x]
    for a in pool:
        if any(a.key == x.key or ht.nested(a, x) for x in taken):
            continue
        if a.in_gaps_ns >= floor:
            found.second = a
        break
    return found


def amount(ns: float, steps: int, step_ns: float, idle_ns: float) -> str:
    """'2.0 ms of each 2.7 ms step', or '118 ms of the 392 ms idle' without steps."""
    if steps:
        return f"{dur(ns / steps)} of each {dur(step_ns)} step"
    return f"{dur(ns)} of the {dur(idle_ns)} idle"


def describe(found: Lead, ht: HostTime, steps: int, step_ns: float, idle_ns: float) -> str:
    """The lead as a clause after 'the thread that launches its work': what it does, how long
    per step, its share of the idle time, and what runs inside it or around it."""
    a, per_gpu = found.act, ht.devices or 1
    total = f"{dur(a.in_gaps_ns)}, " if steps or per_gpu > 1 else ""
    text = (
        f"{a.doing()} {amount(a.in_gaps_ns / per_gpu, steps, step_ns, idle_ns)} "
        f"({total}{pct(a.in_gaps_ns / ht.idle_ns)} of the idle time)"
    )
    if found.outer:
        text += f", inside {found.outer.label()}"
    if found.inner:
        text += f", {dur(found.inner.parent_ns)} of it {found.inner.being()}"
    if found.code:
        text += f"; in the code: {found.code.name} ({dur(found.code.parent_ns)})"
        if found.builtin:
            text += f", mostly in {found.builtin.name} ({dur(found.builtin.parent_ns)})"
    if found.sampled:
        text += f"; CPU samples there name {found.sampled.name} ({dur(found.sampled.parent_ns)})"
    if found.second:
        b = found.second
        doing = b.doing()
        also = f"is also {doing[3:]}" if doing.startswith("is ") else f"also {doing}"
        text += f"; it {also} {amount(b.in_gaps_ns / per_gpu, steps, step_ns, idle_ns)}"
        text += f" ({pct(b.in_gaps_ns / ht.idle_ns)} of the idle time)"
    return text


def summary(ht: HostTime, python: bool) -> str:
    """' While the GPU idled (X), the launching thread spent A in ..., B ...; C in host code no
    trace covers (...)', for a report with no lead."""
    listed: list[Activity] = []
    for a in ht.ranked(("named", "call")):
        if len(listed) == 3 or a.in_gaps_ns < _LISTED * ht.idle_ns:
            break
        if any(ht.nested(a, b) for b in listed):
            continue  # inside one already listed, or around one
        listed.append(a)
    rest = ht.untraced_ns
    if python:
        hint = " (Python, data loading, I/O)"
    else:
        samples = sorted(
            (a for a in ht.activities.values() if a.kind == "sample" and a.self_ns >= _LISTED * rest > 0),
            key=lambda a: (-a.self_ns, a.name),
        )[:3]
        if samples:
            hint = " (CPU samples there: " + ", ".join(f"{a.name} {dur(a.self_ns)}" for a in samples) + ")"
        elif any(a.kind == "sample" for a in ht.activities.values()):
            hint = ""
        else:
            hint = " (CPU samples, `nsys profile -s cpu`, would show which)"
    parts = [_listed(ht, a) for a in listed]
    if rest > 0 and ht.idle_ns:
        parts.append(f"{dur(rest)} ({pct(rest / ht.idle_ns)}) in host code no trace covers{hint}")
    if not parts:
        return _where(ht)
    head = f" While the GPU idled ({dur(ht.idle_ns)}), the launching thread spent "
    done = ", ".join(parts[: len(listed)])
    untraced = parts[len(listed) :]
    body = "; ".join([done, *untraced]) if done else untraced[0]
    return head + body + "." + _where(ht)


def _where(ht: HostTime) -> str:
    """' 96.2 ms (43%) of the idle time falls inside NVTX range `optimizer`.': the range or op that
    encloses launches (a phase of the step) and holds the most idle time as the innermost one."""
    phases = [
        a
        for a in ht.activities.values()
        if a.kind == "named" and a.in_gaps_ns == 0 and ht.idle_ns and a.self_ns >= _PHASE * ht.idle_ns
    ]
    if not phases:
        return ""
    a = max(phases, key=lambda a: (a.self_ns, a.name))
    return f" {dur(a.self_ns)} ({pct(a.self_ns / ht.idle_ns)}) of the idle time falls inside {a.label()}."


def _listed(ht: HostTime, a: Activity) -> str:
    """'201 ms in NVTX range `host_work` (200 ms of it sleeping (clock_nanosleep))'."""
    text = f"{dur(a.in_gaps_ns)} {a.being()}"
    calls = ht.inside(a, ("call",)) if a.kind == "named" else []
    return text + (f" ({dur(calls[0].parent_ns)} of it {calls[0].being()})" if calls else "")


def fix(found: Lead) -> str:
    """What to change for the lead, first in the finding's advice."""
    a = found.act
    n, doing = a.name, a.doing()
    if doing.startswith("sleeps"):
        return (
            f"The launching thread sleeps ({n}) while the GPU has nothing queued: take the sleep out of the "
            "loop, or queue the next step's GPU work before it sleeps."
        )
    if a.source == "mpi" or (a.kind == "call" and a.source == "nvtx"):
        return (
            f"The rank waits in {n} while its GPU idles: that is communication, or a wait for slower ranks "
            "(compare the ranks' time before the same call). Overlap it with GPU work: non-blocking "
            "MPI_I* calls with the next step's launches between post and wait, CUDA-aware MPI or NCCL "
            "on a side stream; balance the ranks' host work."
        )
    if doing.startswith("does I/O"):
        return (
            f"The launching thread does I/O ({n}) while the GPU idles: queue the next GPU work first, "
            "move the I/O to another thread (buffered or asynchronous writes, a logging thread) or do it "
            "every N steps."
        )
    if doing.startswith("waits on I/O"):
        return f"The launching thread waits on I/O ({n}): read ahead on another thread or process, or cache the data."
    if doing.startswith("waits"):
        return (
            f"The launching thread waits ({n}) for another thread, a queue or a lock while the GPU idles: "
            "make the producer faster (more DataLoader workers, prefetching) or queue GPU work before waiting."
        )
    if doing.startswith("blocks"):
        return (
            f"The launching thread blocks in {n} while the GPU idles: synchronise less often (every N "
            "steps, events instead of device-wide syncs); in PyTorch avoid .item(), .tolist(), .cpu() per "
            "step or read the previous step's result."
        )
    if doing.startswith("loads GPU code"):
        return (
            f"Modules are being loaded ({n}) while the GPU waits: start-up work. In a loop's steady state, "
            "warm every kernel up before the loop or load modules eagerly (CUDA_MODULE_LOADING=EAGER); in a "
            "capture without a loop, profile the loop instead (`nsys profile --delay`, or "
            "--capture-range=cudaProfilerApi around a few steps)."
        )
    if doing.startswith("issues launches"):
        return (
            f"The idle time goes to issuing launches ({n}): fewer, larger kernels (fusion, torch.compile) "
            "and a CUDA graph for the steady-state step cut the launch cost."
        )
    where = f" (in the code: {found.code.name})" if found.code else ""
    if "DataLoader" in n:
        return (
            f"The GPU waits for the next batch: `{n}` runs on the launching thread{where}. Load batches in "
            "background workers (DataLoader num_workers > 0, persistent_workers=True, prefetch_factor, "
            "pin_memory=True) and make the per-sample work cheaper."
        )
    return (
        f"The work in {a.label()}{where} runs on the launching thread while the GPU waits: queue the next "
        "GPU work before it so the two overlap, move it to another thread or process, or make it faster."
    )
