"""PyTorch profiler traces (Kineto's Chrome trace JSON: `prof.export_chrome_trace`, the
TensorBoard plugin's `*.pt.trace.json`), torch 1.8 to today, CUDA and ROCm.

The trace is streamed (kineto_events.py, kineto_scan.py), never loaded whole, into staging tables that
kineto.py turns into the canonical tables. Nothing is deferred: every row comes out of
the one pass over the file, so the steps and the ranges' kernels are worked out at ingest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import duckdb

from ... import params
from ...errors import InputError
from .. import stacks
from ..kineto_sniff import is_kineto_trace
from ..reader import SNIFF_BYTES, LoadResult, Progress, Reader
from . import kineto, kineto_events, kineto_scan

# canonical table -> the activity kind its rows evidence (reports.activity_kinds)
KINDS = {
    "kernels": "kernel",
    "memcpy": "memcpy",
    "memset": "memset",
    "cuda_api": "cuda_api",
    "nvtx_ranges": "nvtx",
    "gpus": "gpu_info",
    "processes": "processes",
    "memory_events": "memory",
    "comm_ops": "comm",
}
# DuckDB's memory while a trace is staged (see _limit_memory): a quarter of the trace's size,
# within these. The floor grows with DuckDB's threads, each filling its own row groups: below
# ~64 MiB a thread the staging thrashes, spending more CPU and memory, not less.
MEMORY_LIMIT_BYTES = 1 << 30
MEMORY_FLOOR_BYTES = 128 << 20
MEMORY_PER_THREAD_BYTES = 64 << 20
# the rows `nsa ingest` reports, in this order
SHOWN = (
    "kernels", "comm_ops", "memcpy", "memset", "cuda_api", "cpu_ops", "nvtx_ranges", "memory_events", "steps"
)  # fmt: skip


@dataclass
class Trace:
    """A trace whose top-level keys are read; its events are read by load."""

    path: Path
    meta: kineto_events.TraceMeta
    # the staging tables DuckDB's JSON reader made; None: the exact reader reads the events in load
    scanned: tuple[kineto_scan.Scanned, kineto_events.Staged] | None = None


class KinetoReader(Reader[Trace]):
    name = "kineto"
    # The call stacks of the Python frames (with_stack=True) are worked out from cpu_ops on first use.
    deferrable = derived = worked_out = ("stack_events",)
    step_writes: ClassVar[dict[str, tuple[str, ...]]] = {"stack_events": stacks.TABLES}

    def sniff(self, head: bytes) -> bool:
        return is_kineto_trace(head)

    @contextmanager
    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[Trace]:
        with path.open("rb") as fh:
            if not is_kineto_trace(fh.read(SNIFF_BYTES)):
                raise InputError(f"{path} is not a PyTorch profiler trace (no traceEvents); export one with "
                                 "`prof.export_chrome_trace(path)`.")  # fmt: skip
        try:
            meta = kineto_events.read_meta(path)
        except kineto_events.ijson.JSONError as exc:
            raise kineto_events.json_error(path, exc) from exc
        previous = _limit_memory(con, path.stat().st_size // 4)
        scanned = None
        try:
            # Before the pipeline's transaction: an event DuckDB's reader rejects fails its own
            # statement, and the exact reader takes over in load.
            scanned = kineto_events.scan(con, path)
            yield Trace(path, meta, scanned)
        finally:
            if scanned is not None:  # after the transaction, whatever its end
                scanned[0].drop()
            params.set_memory_limit(con, previous)

    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: Trace,
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        path = handle.path
        if progress:
            progress("events", 0, 2)
        stager, staged = handle.scanned or kineto_events.read_exactly(con, path)
        try:
            if not any(n for what, n in staged.counts.items() if what != "meta"):
                raise InputError(
                    f"{path} is a PyTorch profiler trace with no events: the profiler recorded nothing; "
                    "export the trace from inside the profiled region (`on_trace_ready`) or after a step ran."
                )
            if progress:
                progress("tables", 1, 2)
            rows = kineto.load_all(con, report_id, handle.meta, staged)
        finally:
            stager.drop()
        if progress:
            progress("done", 2, 2)
        result = _result(path, report_id, handle.meta, rows)
        if stacks.has_kineto_frames(con, report_id):
            result.deferred.append("stack_events")
            result.activity_kinds.append("stacks")
        return result

    def steps_for(self, tables: Iterable[str]) -> list[str]:
        return ["stack_events"] if set(tables) & set(stacks.TABLES) else []

    def load_deferred(
        self, con: duckdb.DuckDBPyConnection, handle: Trace | None, report_id: int, step: str
    ) -> int:
        return stacks.load_kineto(con, report_id)


def _limit_memory(con: duckdb.DuckDBPyConnection, wanted: int) -> str:
    """Cap DuckDB's memory while a trace is staged (at `wanted` bytes, within the floor and
    MEMORY_LIMIT_BYTES), so that the staged events spill to the workspace's temporary folder
    instead of growing with the file; returns the setting to restore."""
    threads = int(params.first_row(con.execute("SELECT current_setting('threads')"))[0])
    floor = max(MEMORY_FLOOR_BYTES, MEMORY_PER_THREAD_BYTES * threads)
    cap = min(MEMORY_LIMIT_BYTES, max(floor, wanted))
    previous = params.memory_limit(con)
    now = params.limit_bytes(previous)
    if now is None or now > cap:
        con.execute(f"SET memory_limit = '{cap >> 20}MiB'")
    return previous


def _result(path: Path, rid: int, meta: kineto_events.TraceMeta, rows: dict[str, int]) -> LoadResult:
    base, origin = meta.base_ns, rows.pop("origin")
    if base is not None:
        start: int | None = base + origin
    else:  # before torch 2.0 the times are microseconds since the Unix epoch
        start = origin if origin > 10**17 else None
    info = meta.distributed
    versions = [
        f"{k} {meta.values[k]}" for k in ("cupti_version", "cuda_runtime_version") if k in meta.values
    ]
    result = LoadResult(
        rows={t: rows.get(t, 0) for t in SHOWN},
        activity_kinds=[kind for table, kind in KINDS.items() if rows.get(table, 0) > 0],
        metadata={
            "tool_version": ("PyTorch profiler (" + ", ".join(versions) + ")")
            if versions
            else "PyTorch profiler",
            "schema_version": None
            if "schemaVersion" not in meta.values
            else str(meta.values["schemaVersion"]),
            "session_start_utc_ns": start,
            "rank": kineto_events.as_int(info.get("rank")),
            "world_size": kineto_events.as_int(info.get("world_size")),
            "rank_source": "distributedInfo" if kineto_events.as_int(info.get("rank")) is not None else None,
        },
    )
    if not any(rows.get(t, 0) for t in ("kernels", "memcpy", "memset")):
        result.warnings.append(
            f"report {rid} ({path.name}) has no kernel, memcpy or memset events: the profiler did not "
            "record the GPU; profile with `activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]`."
        )
    return result


READER = KinetoReader()
