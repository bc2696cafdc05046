"""NVML power sampler logs: a CSV with a `timestamp_ns` column of UTC epoch nanoseconds and the
power in mW (or W), optionally the driver's total-energy counter in mJ (or J), the SM clock and
the utilisation: what a few lines of pynvml write (`apps/power_log.py` in the test data:
`timestamp_ns,gpu,power_mw,energy_mj,sm_clock_mhz,gpu_util_pct`).

The whole file is parsed (and so validated) in `open`, before the workspace is touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from ...errors import InputError
from ..reader import LoadResult, Progress, Reader
from . import power

TIME = "timestamp_ns"
POWER = {"power_mw": 1e-3, "power_w": 1.0}
# CSV column -> (power_samples column, factor to its unit)
OPTIONAL = {
    "gpu": ("device_id", 1),
    "index": ("device_id", 1),
    "power_instant_mw": ("power_instant_w", 1e-3),
    "power_instant_w": ("power_instant_w", 1.0),
    "energy_mj": ("energy_j", 1e-3),
    "energy_j": ("energy_j", 1.0),
    "sm_clock_mhz": ("sm_clock_hz", 1e6),
    "mem_clock_mhz": ("memory_clock_hz", 1e6),
    "gpu_util_pct": ("gpu_util_pct", 1),
    "mem_used_mib": ("memory_used_bytes", 1 << 20),
    "temperature_c": ("temperature_c", 1),
}
# epoch nanoseconds after 1973: a column of seconds or of session-relative times is refused
MIN_EPOCH_NS = 10**17


class NvmlPowerReader(Reader[power.Samples]):
    name = "nvml"

    def sniff(self, head: bytes) -> bool:
        fields = power.header(head)
        return TIME in fields and any(p in fields for p in POWER)

    @contextmanager
    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[power.Samples]:
        yield parse(path)

    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: power.Samples,
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        return power.loaded(con, handle, report_id, "power samples")


def parse(path: Path) -> power.Samples:
    head, data, warnings = power.rows(path)
    watts = next(p for p in POWER if p in head)
    at = {c: head.index(c) for c in (TIME, watts, *OPTIONAL) if c in head}
    samples = power.Samples(warnings=warnings)
    for line, fields in data:
        if len(fields) < len(head):
            raise InputError(
                f"{path} line {line}: {len(fields)} fields where the header has {len(head)}; "
                "fix or remove that line."
            )
        ts = power.number(path, line, TIME, fields[at[TIME]])
        if ts is None or ts < MIN_EPOCH_NS or not fields[at[TIME]].isdigit():
            raise InputError(
                f"{path} line {line}: {TIME} is {fields[at[TIME]]!r}; it must be the UTC wall "
                "clock in integer nanoseconds since the Unix epoch (Python's time.time_ns())."
            )
        row: dict[str, object] = {"device_id": 0, "source": "nvml"}
        value = power.number(path, line, watts, fields[at[watts]])
        row["power_w"] = value * POWER[watts] if value is not None else None
        for col, (target, factor) in OPTIONAL.items():
            if col in at:
                value = power.number(path, line, col, fields[at[col]])
                scaled = value * factor if value is not None else None
                row[target] = round(scaled) if scaled is not None and target in power.INTEGER else scaled
        samples.add(int(fields[at[TIME]]), **row)
    if not len(samples):
        raise InputError(f"{path} is an NVML power log with a header and no samples; log for longer.")
    return samples


READER = NvmlPowerReader()
