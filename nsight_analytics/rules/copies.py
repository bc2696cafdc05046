"""Copy groups shared by the copy rules: host memory kind, pinned bandwidth, what pinning saves."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

HOST_DEVICE = ("HtoD", "DtoH")
MIN_BANDWIDTH_BYTES = 1 << 20  # average copy size below which a copy group measures no bandwidth


def host_memory(row: Any) -> str:
    """The host side of a copy: 'pageable' or 'pinned' (or whatever the export says)."""
    host = row.src_memory if row.direction == "HtoD" else row.dst_memory
    return str(host) if host is not None else "unknown"


def copy_phrase(row: Any) -> str:
    prep = "from" if row.direction == "HtoD" else "into"
    return f"{row.direction} copies {prep} {host_memory(row)} memory"


@dataclass
class CopyGroup:
    """memcpy_summary rows of one (copy kind, source, destination memory), all devices summed."""

    direction: str | None
    src_memory: str | None
    dst_memory: str | None
    copies: int = 0
    bytes: int = 0
    total_ns: int = 0
    busy_ns: int = 0
    apis: set[str] = field(default_factory=set)


def copy_groups(rows: Iterable[Any], order_by: str) -> list[CopyGroup]:
    """Copy groups, `order_by` largest first (ties: copy kind, source, destination; NULL last)."""
    found: dict[tuple[Any, ...], CopyGroup] = {}
    for r in rows:
        g = found.setdefault(
            (r.direction, r.src_memory, r.dst_memory), CopyGroup(r.direction, r.src_memory, r.dst_memory)
        )
        g.copies += r.copies
        g.bytes += r.bytes
        g.total_ns += r.total_ns
        g.busy_ns += r.busy_ns
        g.apis |= set(filter(None, (r.launch_apis or "").split(",")))
    by_key = sorted(found.items(), key=lambda kv: [(v is None, v or "") for v in kv[0]])
    return sorted((g for _, g in by_key), key=lambda g: getattr(g, order_by), reverse=True)


def _pinned_gbps(copies: Iterable[Any], direction: str) -> tuple[float | None, str]:
    """Measured pinned bandwidth in this report: same direction first, else the other one."""
    # tiny copies measure latency, not bandwidth
    pinned = [r for r in copies if host_memory(r) == "pinned" and r.bytes >= MIN_BANDWIDTH_BYTES * r.copies]
    for scope, rows in (
        ("same direction", [r for r in pinned if r.direction == direction]),
        ("other direction", pinned),
    ):
        b, ns = sum(r.bytes for r in rows), sum(r.total_ns for r in rows)
        if ns > 0 and b > 0:
            return float(b / ns), scope
    return None, ""


def pinning_savings(copies: Iterable[Any]) -> tuple[dict[int, int], dict[str, float]]:
    """Per device: time the pageable host<->device copies would save at this report's pinned rate."""
    copies = list(copies)
    per_device: dict[int, int] = {}
    rates: dict[str, float] = {}
    for r in copies:
        if not (r.pageable and r.direction in HOST_DEVICE):
            continue
        gbps, _ = _pinned_gbps(copies, r.direction)
        if gbps is None:
            continue
        rates[r.direction] = gbps
        saved = max(0.0, r.total_ns - r.bytes / gbps)
        per_device[r.device_id] = per_device.get(r.device_id, 0) + int(saved)
    return per_device, rates


def direction_savings(rows: Iterable[Any]) -> dict[int, int]:
    """Per device (copy_directions rows): what running HtoD and DtoH side by side would save.

    At most the smaller direction's busy time less the time the two directions already ran
    together (the most that can still be hidden), and no more than the time the copies were held
    back by stream order alone (serialised_ns): copies that depend on each other, or that the
    host issued late, gain nothing from a second stream."""
    out: dict[int, int] = {}
    for r in rows:
        room = min(r.htod_busy_ns, r.dtoh_busy_ns) - r.both_busy_ns
        out[r.device_id] = int(max(0, min(r.serialised_ns, room)))
    return out
