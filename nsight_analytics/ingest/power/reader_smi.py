"""nvidia-smi query logs: `nvidia-smi --query-gpu=timestamp,index,power.draw,... --format=csv
-lms 100`. Timestamps are text in the local time of the machine that logged (`2026/11/24
06:27:21.599`), values carry units (`72.40 W`, `345 MHz`) unless `nounits` was asked.

Local times need a zone to become UTC: `nsa ingest --timezone ZONE` (an IANA name such as
Europe/Paris, or UTC); without it, the zone of the machine running nsa, which is right only
when it is the machine that logged. The summary line says which zone was assumed. The whole file
is parsed (and so validated) in `open`, before the workspace is touched.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb

from ...errors import InputError
from ..reader import LoadResult, Progress, Reader, Source
from . import power

TIME = "timestamp"
TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
# nvidia-smi field -> power_samples column; the first of power.draw / power.draw.average found is power_w
FIELDS = {
    "index": "device_id",
    "power.draw": "power_w",
    "power.draw.average": "power_w",
    "power.draw.instant": "power_instant_w",
    "clocks.current.sm": "sm_clock_hz",
    "clocks.sm": "sm_clock_hz",
    "clocks.current.memory": "memory_clock_hz",
    "clocks.mem": "memory_clock_hz",
    "utilization.gpu": "gpu_util_pct",
    "memory.used": "memory_used_bytes",
    "temperature.gpu": "temperature_c",
}
UNITS = {
    "": 1,
    "w": 1,
    "mw": 1e-3,
    "mhz": 1e6,
    "ghz": 1e9,
    "khz": 1e3,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "%": 1,
}
_HEADER_FIELD = re.compile(r"^(?P<name>[a-z0-9_.]+)\s*(\[(?P<unit>[^\]]*)\])?$")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class Handle:
    """The parsed log and the zone its times were read in."""

    def __init__(self, samples: power.Samples, zone: str) -> None:
        self.samples, self.zone = samples, zone


class SmiPowerReader(Reader[Handle]):
    name = "nvidia-smi"

    def sniff(self, head: bytes) -> bool:
        fields = power.header(head)
        return bool(fields) and fields[0] == TIME and any(f.startswith("power.draw") for f in fields)

    @contextmanager
    def open(self, con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[Handle]:
        zone, said = local_zone(None)
        yield Handle(parse(path, zone), said)

    @contextmanager
    def open_source(self, con: duckdb.DuckDBPyConnection, path: Path, source: Source) -> Iterator[Handle]:
        zone, said = local_zone(source.options.get("timezone"))
        yield Handle(parse(path, zone), said)

    def load(
        self,
        con: duckdb.DuckDBPyConnection,
        handle: Handle,
        report_id: int,
        defer: set[str],
        progress: Progress | None,
    ) -> LoadResult:
        return power.loaded(
            con, handle.samples, report_id, f"power samples (local times read as {handle.zone})"
        )


def local_zone(name: str | None) -> tuple[tzinfo | None, str]:
    """The zone nvidia-smi's local times are read in, and how the summary names it. None: the
    local time rules of this machine (its zone has no IANA name nsa can find)."""
    if name:
        if name.upper() == "UTC":
            return timezone.utc, "UTC, as --timezone said"
        try:
            return ZoneInfo(name), f"{name}, as --timezone said"
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise InputError(
                f"--timezone {name!r} is not a time zone nsa knows; give an IANA name such as "
                "Europe/Paris or America/New_York, or UTC."
            ) from exc
    here = _machine_zone()
    assumed = "this machine's zone: pass --timezone if the log was written elsewhere"
    if here:
        try:
            return ZoneInfo(here), f"{here}, {assumed}"
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return None, f"{datetime.now().astimezone().tzname()}, {assumed}"


def _machine_zone() -> str | None:
    """The IANA name of this machine's zone: $TZ, else where /etc/localtime points."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        return tz
    target = os.path.realpath("/etc/localtime")
    return target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else None


def parse(path: Path, zone: tzinfo | None) -> power.Samples:
    head, data, warnings = power.rows(path)
    names, units = [], []
    for field in head:
        m = _HEADER_FIELD.match(field)
        names.append(m.group("name") if m else field)
        units.append((m.group("unit") or "") if m else "")
    if TIME not in names:
        raise InputError(f"{path} has no timestamp column; log with `nvidia-smi --query-gpu=timestamp,...`.")
    at = {FIELDS[n]: i for i, n in reversed(list(enumerate(names))) if n in FIELDS}
    if "power.draw" in names:  # power.draw before power.draw.average
        at["power_w"] = names.index("power.draw")
    samples = power.Samples(warnings=warnings)
    for line, fields in data:
        if len(fields) != len(names):
            raise InputError(
                f"{path} line {line}: {len(fields)} fields where the header has {len(names)}; "
                "fix or remove that line."
            )
        row: dict[str, object] = {"device_id": 0, "source": "nvidia-smi"}
        for target, i in at.items():
            value = power.number(path, line, names[i], fields[i])
            if value is None:
                continue
            unit = units[i] or _unit_of(fields[i])
            scaled = value * UNITS.get(unit.lower(), 1)
            row[target] = round(scaled) if target in power.INTEGER else scaled
        samples.add(_utc_ns(path, line, fields[names.index(TIME)], zone), **row)
    if not len(samples):
        raise InputError(f"{path} is an nvidia-smi log with a header and no samples; log for longer.")
    return samples


def _unit_of(text: str) -> str:
    parts = text.split()
    return parts[1] if len(parts) > 1 else ""


def _utc_ns(path: Path, line: int, text: str, zone: tzinfo | None) -> int:
    for fmt in TIME_FORMATS:
        try:
            local = datetime.strptime(text, fmt)
            break
        except ValueError:
            continue
    else:
        raise InputError(
            f"{path} line {line}: timestamp {text!r} is not nvidia-smi's `YYYY/MM/DD HH:MM:SS.mmm`; "
            "fix or remove that line."
        )
    aware = local.replace(tzinfo=zone) if zone is not None else local.astimezone()
    return (aware - EPOCH) // timedelta(microseconds=1) * 1000


READER = SmiPowerReader()
