"""Cases of copy-dominated."""

from __future__ import annotations

from typing import Any

from rules.build import MS, copy, kernel


def _copies(direction: str, nbytes: int, copy_ns: int, kernel_ns: int, span_ns: int) -> dict[str, Any]:
    """One pinned copy beside kernels that never overlap it: overlapping the two would save the
    shorter of them."""
    return {
        "est_savings_ns": min(copy_ns, kernel_ns),
        "evidence": {
            "span_ns": span_ns,
            "copy_busy_ns": copy_ns,
            "copy_share": copy_ns / span_ns,
            "kernel_busy_ns": kernel_ns,
            "kernel_share": kernel_ns / span_ns,
            "dominant": {
                "direction": direction,
                "host_memory": "pinned",
                "copies": 1,
                "bytes": nbytes,
                "total_ns": copy_ns,
                "busy_ns": copy_ns,
                "share": copy_ns / span_ns,
                "gb_per_s": nbytes / copy_ns,
            },
            "overlap_savings_ns": min(copy_ns, kernel_ns),
            "lever": "overlap",
        },
    }


CASES: list[dict[str, Any]] = [
    {
        "id": "h2d-critical",
        "rules": ["copy-dominated"],
        "rows": {"memcpy": [copy(0, 90 * MS, 4_500_000_000)], "kernels": [kernel(90 * MS, 5 * MS)]},
        "expect": [("copy-dominated", "critical")],
        "detail": [_copies("HtoD", 4_500_000_000, 90 * MS, 5 * MS, 95 * MS)],
    },
    {
        "id": "d2h-warning",
        "rules": ["copy-dominated"],
        "rows": {
            "memcpy": [copy(0, 40 * MS, 2_000_000_000, "DtoH")],
            "kernels": [kernel(40 * MS, 10 * MS), kernel(90 * MS, 10 * MS)],
        },
        "expect": [("copy-dominated", "warning")],
        "detail": [_copies("DtoH", 2_000_000_000, 40 * MS, 20 * MS, 100 * MS)],
    },
    {
        "id": "kernels-busy-passes",
        "rules": ["copy-dominated"],
        "rows": {"memcpy": [copy(0, 40 * MS, 2_000_000_000)], "kernels": [kernel(40 * MS, 60 * MS)]},
        "expect": [],
    },
    {
        "id": "dtod-not-counted",
        "rules": ["copy-dominated"],
        "rows": {
            "memcpy": [
                {
                    **copy(0, 90 * MS, 10**10),
                    "direction": "DtoD",
                    "src_memory": "device",
                    "dst_memory": "device",
                }
            ],
            "kernels": [kernel(90 * MS, 5 * MS)],
        },
        "expect": [],
    },
]
