"""Which line of code: the user frame a finding names, read from the stack queries (gap_stacks,
launch_stacks, hot_stacks), and the capture option that records stacks where a report has none.

A finding names the innermost frame of the program's own code (`stack_loop.py:57 in
scale_params`) and the library call beneath it; its evidence carries the same under `location`.
Where the report holds no stacks for the question, the rule says once per report (the first
finding of a `nsa findings` run that could have named a line) which capture option adds them.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..units import clip, count
from .context import Context

# The stack sources each query reports, the program's own frames first: Python frames name the
# user's line in a Python program; native frames (CPU samples, CUDA backtraces) are the user's own
# only in a compiled program.
SAMPLE_SOURCES = ("python_sample", "kineto_python", "cpu_sample")
CALL_SOURCES = ("python_cuda", "kineto_python", "cuda_call")
# Samples taken inside the calls (launch_stacks' window form): what names a call's line in a capture
# without backtraces of the calls; tried after the backtraces.
WINDOW_SOURCES = ("python_sample", "cpu_sample")
LAUNCH_SOURCES = CALL_SOURCES + WINDOW_SOURCES
# Fewest calls holding a sample for samples to name the line of a group of calls: below it the
# named frame is chance (short calls are sampled about once per sampling interval of their time).
MIN_SAMPLED_CALLS = 10
# Fewest sampled calls a named group of them must hold (one sample names a frame by chance).
MIN_NAMED_CALLS = 5
# The stack tables, which a rule can do without (it then says which capture option records them).
TABLES = ("stack_events", "stack_frames", "stacks")

# How much of a function's name a sentence shows (C++ template signatures run to thousands).
NAME_WIDTH = 80
# A group of stacks is named when it explains at least this share of what the finding is about.
MIN_SHARE = 0.05

NSYS_HINT = (
    "To see the line of code behind it, capture with `nsys profile -s cpu --python-sampling=true "
    "--cudabacktrace=all --python-backtrace=cuda` and export with `nsys export --type sqlite "
    "--include-blobs=true`: nsa then names the function and line (`nsa query gap_stacks`, `launch_stacks`)."
)
KINETO_HINT = (
    "To see the line of code behind it, profile with `torch.profiler.profile(with_stack=True)`: nsa then "
    "names the function and line (`nsa query gap_stacks`, `launch_stacks`)."
)

LIBRARY_ONLY_HINT = (
    "The call stacks of this capture hold only library frames, none of the program's own code: for a "
    "Python program capture its frames too (`nsys profile --python-sampling=true --python-backtrace=cuda`, "
    "exported with `--include-blobs=true`); for a native one keep its symbols (build with -g, do not strip)."
)

_hinted: weakref.WeakKeyDictionary[Context, set[int]] = weakref.WeakKeyDictionary()


def short_symbol(name: str) -> str:
    """A C++ symbol without its return type, template arguments and parameter lists:
    'void clover::par_ranged2<256ul, ...>(clover::Range2d const&, ...)' -> 'clover::par_ranged2<>'."""
    out: list[str] = []
    depth = 0
    for ch in name:
        if ch in "<(":
            if depth == 0:
                out.append(ch + (">" if ch == "<" else ")"))
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    text = "".join(out).strip()
    if " " in text and not text.startswith("operator"):  # a return type before the name
        head, _, tail = text.rpartition(" ")
        text = tail if tail and "::" not in head.split(" ")[-1] else text
    return text or name


def where(row: Any) -> str:
    """'stack_loop.py:57 in scale_params': a query row's user frame, its file by its last part."""
    file = str(row.user_file or "")
    raw = str(row.user_function)
    function = clip(short_symbol(raw) if row.user_line is None and len(raw) > NAME_WIDTH else raw, NAME_WIDTH)
    if row.user_line is None:  # a native frame: its binary
        binary = file.rsplit("/", 1)[-1]
        return function if binary in ("", raw) else f"{function} in {binary}"
    return f"{file.rsplit('/', 1)[-1]}:{row.user_line} in {function}"


def beneath(row: Any, api: str | None = None) -> str:
    """', calling mul_': the library frame beneath the user frame (or the CUDA call), '' when none."""
    lib = row.library_frame or api
    return f", calling {clip(_short(str(lib)), NAME_WIDTH)}" if lib else ""


def location(row: Any, **extra: Any) -> dict[str, Any]:
    """The evidence of a named frame: function, file, line, the library frame below, the callers."""
    return {
        "source": row.source,
        "function": row.user_function,
        "file": row.user_file,
        "line": None if row.user_line is None else int(row.user_line),
        "library_frame": row.library_frame,
        "callers": row.callers,
        **extra,
    }


def top_user(rows: Any, sources: tuple[str, ...], weight: str, whole: float) -> Any:
    """The group of stacks that explains the most of `whole` (by column `weight`) with a user frame,
    from the first source in `sources` that has one; None when none reaches MIN_SHARE."""
    for source in sources:
        mine = [r for r in rows if r.source == source and r.user_function is not None]
        if not mine:
            continue
        best = max(mine, key=lambda r: (getattr(r, weight) or 0, -(r.user_line or 0)))
        if whole > 0 and (getattr(best, weight) or 0) / whole >= MIN_SHARE:
            return best
        return None
    return None


def by_samples(row: Any) -> str:
    """How a launch_stacks row named its line, in words: 'Python backtraces of the CUDA calls', or
    for samples inside the calls 'CPU samples taken inside 418 of the 1,591 calls'."""
    words = SOURCE_WORDS[row.source]
    if row.source not in WINDOW_SOURCES:
        return words
    return f"{words} taken inside {count(row.stacked_calls)} of the {count(row.total_calls)} calls"


def callers_text(row: Any, n: int = 3) -> str:
    """' (called from train_step < main)': the user callers; a native frame's first n, short
    (`hydro()`, not its C++ signature)."""
    if not row.callers:
        return ""
    if row.user_line is not None:
        return f" (called from {row.callers})"
    text, _, paths = str(row.callers).partition(" (the most of ")
    names = text.split(" < ")
    short = [short_symbol(c) if row.user_line is None else c for c in names[:n]]  # native: C++ symbols
    most = f", the most of {paths.rstrip(')')}" if paths else ""
    return f" (called from {' < '.join(short)}{' < ...' if len(names) > n else ''}{most})"


def merge_native(rows: Any, weight: str) -> list[Any]:
    """launch_stacks rows with a native user frame merged by the frame's short name (C++ template
    instances of one function, `clover::par_ranged2<>()`, are one line of code): counts summed,
    the rest from the member with the most `weight`, its callers marked when the members' differ
    ('PdV_kernel < hydro < main (the most of 9 call paths)'). Python frames stay as they are."""
    out: list[Any] = []
    merged: dict[tuple[Any, str], list[Any]] = {}
    for r in rows:
        if r.user_function is None or r.user_line is not None:
            out.append(r)
        else:
            merged.setdefault((r.source, where(r)), []).append(r)
    for group in merged.values():
        best = max(group, key=lambda r: getattr(r, weight) or 0)
        sums = {c: sum(getattr(r, c) or 0 for r in group) for c in ("calls", "launched", "gpu_ns", "api_ns")}
        if best.samples is not None:
            sums["samples"] = sum(r.samples or 0 for r in group)
        paths = {r.callers for r in group}
        if len(paths) > 1 and best.callers:
            sums["callers"] = f"{best.callers} (the most of {len(paths)} call paths)"
        out.append(best._replace(**sums))
    return out


def sampled_too_few(ctx: Context, rid: int, rows: Any, what: str) -> str | None:
    """Where the report has samples but they name no line of these calls (launch_stacks' rows with
    no backtrace source): too few calls hold a sample (MIN_SAMPLED_CALLS), or no group of them
    holds MIN_NAMED_CALLS with a user frame. The sentence that says so and the capture hint; None
    where the report has no CPU or Python samples."""
    if not sources(ctx, rid) & set(WINDOW_SOURCES):
        return None
    mine = [r for r in rows if r.source in WINDOW_SOURCES]
    held = max((r.stacked_calls or 0 for r in mine), default=0)
    total = max((r.total_calls or 0 for r in rows), default=0)
    hint = capture_hint(ctx, rid) or ""
    if held == 0:
        text = f"None of the {count(total)} {what} held a CPU or Python sample: too few to name the line."
    elif held < MIN_SAMPLED_CALLS:
        text = f"Only {count(held)} of the {count(total)} {what} held a CPU or Python sample: too few to name the line."
    else:
        text = f"The CPU or Python samples inside {count(held)} of the {count(total)} {what} name no line of the program often enough."
    return f"{text} {hint}".strip()


def has_stacks(rows: Any) -> bool:
    """Did the query find stacks for the report (rows other than its note)?"""
    return any(r.source is not None for r in rows)


# Each stack source in words (findings say which stacks named the line, hints which kind is missing).
SOURCE_WORDS = {
    "python_sample": "Python samples",
    "kineto_python": "the profiler's Python frames",
    "cpu_sample": "CPU samples",
    "python_cuda": "Python backtraces of the CUDA calls",
    "cuda_call": "native backtraces of the CUDA calls",
    "osrt_call": "backtraces of OS runtime calls",
    "kineto_callstack": "the ops' call stacks",
}
MISSING_HINTS = {
    "calls": (
        "to see the line of code that issued the CUDA calls, add `--cudabacktrace=all` to `nsys profile` "
        "(for a Python program also `--python-backtrace=cuda`, exported with `--include-blobs=true`): nsa "
        "then names the function and line (`nsa query launch_stacks`)."
    ),
    "samples": (
        "to see the line of code the host was running, add `-s cpu` to `nsys profile` (for a Python "
        "program also `--python-sampling=true`, exported with `--include-blobs=true`): nsa then names "
        "the function and line (`nsa query gap_stacks`)."
    ),
}


def capture_hint(ctx: Context, rid: int, needs: str = "calls") -> str | None:
    """The capture option that records the stacks a rule `needs` ('calls': backtraces of the CUDA
    calls; 'samples': samples of the host's threads), the first time a rule asks for this report in
    this run of the rules; None after (once per report, not on every finding). A capture with
    stacks of another kind (other than OS runtime backtraces) is told which option adds the
    missing kind, not all of them."""
    done = _hinted.setdefault(ctx, set())
    if rid in done:
        return None
    done.add(rid)
    fmt = next((r.format for r in ctx.reports() if r.report_id == rid), None)
    if fmt == "kineto":
        return KINETO_HINT
    # OS runtime backtraces (recorded by default for long calls) name no line any rule reads
    have = sorted(SOURCE_WORDS.get(s, s) for s in sources(ctx, rid) - {"osrt_call"})
    if not have:
        return NSYS_HINT
    return f"This capture's call stacks ({', '.join(have)}) do not cover it: " + MISSING_HINTS[needs]


def no_user_frame_hint(ctx: Context, rid: int, rows: Any) -> str | None:
    """Where the query found stacks but none with a frame of the program's own code and the capture
    holds no Python frames: the hint that says how to get them (once per report, as capture_hint);
    else None."""
    python = {"python_sample", "python_cuda", "kineto_python"}
    if any(r.user_function is not None for r in rows) or sources(ctx, rid) & python:
        return None
    done = _hinted.setdefault(ctx, set())
    if rid in done:
        return None
    done.add(rid)
    return LIBRARY_ONLY_HINT


def _short(frame: str) -> str:
    """A library frame without its site-packages path: 'mse_loss (torch/nn/functional.py:3952)'."""
    if " (" in frame and "site-packages/" in frame:
        name, path = frame.split(" (", 1)
        return f"{name} ({path.rsplit('site-packages/', 1)[-1]}"
    return frame


def sources(ctx: Context, rid: int) -> set[str]:
    """The stack sources of a report that carry frames (stack_events.source)."""
    rows = ctx.sql(
        "stack_sources",
        "SELECT DISTINCT report_id, source FROM stack_events WHERE stack_id IS NOT NULL "
        "AND ($rid IS NULL OR report_id = $rid)",
        rid,
    )
    return {str(r.source) for r in rows}


def could_name(ctx: Context, rid: int) -> bool:
    """Could the report's stacks step, where it is still to run, write a source a rule names a line
    from (every source but the OS runtime backtraces, which no rule reads: see capture_hint)? A
    rule's `optional_when` for the stack tables: where the export can hold nothing else, the
    rules judge the report alike with or without the step, and `nsa findings` skips it."""
    from ..ingest.stacks import deferred_sources

    possible = deferred_sources(ctx.con, rid)
    return possible is None or bool(possible - {"osrt_call"})


def first_source(ctx: Context, rid: int, order: tuple[str, ...]) -> str | None:
    """The first of `order` the report has stacks of: the one a rule asks its query about (Python
    frames name the user's line; native backtraces only in a compiled program)."""
    have = sources(ctx, rid)
    return next((s for s in order if s in have), None)


def launch_rows(ctx: Context, rid: int, **params: Any) -> Any:
    """launch_stacks' rows for a rule: of the report's first backtrace source (CALL_SOURCES) when it
    names a user frame; else of every source, so that the samples taken inside the calls
    (WINDOW_SOURCES) can name it (a capture without backtraces, or a Python program's native
    ones). The samples' ASOF pass runs only where it can help."""
    first = first_source(ctx, rid, CALL_SOURCES)
    if first is not None:
        rows = ctx.query("launch_stacks", rid, source=first, **params)
        if any(r.user_function is not None for r in rows) or not sources(ctx, rid) & set(WINDOW_SOURCES):
            return rows
    return ctx.query("launch_stacks", rid, **params)


def hot_user(rows: Any) -> Any:
    """The hot_stacks row of the user frame the most samples ran under (Python samples first, then
    CPU samples), when it holds at least MIN_SHARE of its source's samples; else None."""
    for source in ("python_sample", "cpu_sample"):
        mine = [r for r in rows if r.source == source and r.user and r.user_samples]
        if mine:
            best = max(mine, key=lambda r: (r.user_samples, -(r.frame_id or 0)))
            return best if best.user_samples >= MIN_SHARE * best.samples else None
    return None


def frame_text(row: Any) -> str:
    """A hot_stacks frame: 'stack_loop.py:23 in <module>' (Python), 'main in cuda-cloverleaf' (native)."""
    function = clip(str(row.function), NAME_WIDTH)
    if row.line is not None:
        return f"{str(row.file).rsplit('/', 1)[-1]}:{row.line} in {function}"
    return f"{function} in {str(row.module or '').rsplit('/', 1)[-1]}"


def frame_location(row: Any) -> dict[str, Any]:
    """The evidence of a hot_stacks frame."""
    return {
        "source": row.source,
        "function": row.function,
        "file": row.file,
        "line": None if row.line is None else int(row.line),
        "module": row.module,
        "samples": int(row.user_samples),
        "of_samples": int(row.samples),
        "ns": int(row.user_ns),
    }
