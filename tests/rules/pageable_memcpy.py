"""Cases of pageable-memcpy."""

from __future__ import annotations

from typing import Any

from rules.build import MS, copy, kernel

# 300 MB from pageable memory in 50 ms (6 GB/s) and 100 MB pinned in 2 ms (50 GB/s), over 100 ms:
# at the pinned rate the pageable copy takes 300e6 / 50 GB/s = 6 ms, saving 44 ms
_PAGEABLE, _PAGEABLE_NS, _PINNED, _PINNED_NS = 300_000_000, 50 * MS, 100_000_000, 2 * MS

CASES: list[dict[str, Any]] = [
    {
        "id": "pageable-critical",
        "rules": ["pageable-memcpy"],
        "rows": {
            "memcpy": [
                copy(0, _PAGEABLE_NS, _PAGEABLE, "DtoH", "pageable"),
                copy(60 * MS, _PINNED_NS, _PINNED),
            ],
            "kernels": [kernel(62 * MS, 38 * MS)],
        },
        "expect": [("pageable-memcpy", "critical")],
        "detail": [
            {
                "est_savings_ns": _PAGEABLE_NS - _PAGEABLE / (_PINNED / _PINNED_NS),
                "evidence": {
                    "copies": 1,
                    "bytes": _PAGEABLE,
                    "total_ns": _PAGEABLE_NS,
                    "busy_ns": _PAGEABLE_NS,
                    "span_share": _PAGEABLE_NS / (100 * MS),
                    "groups": [
                        {
                            "direction": "DtoH",
                            "src_memory": "device",
                            "dst_memory": "pageable",
                            "copies": 1,
                            "bytes": _PAGEABLE,
                            "total_ns": _PAGEABLE_NS,
                            "gb_per_s": _PAGEABLE / _PAGEABLE_NS,
                        }
                    ],
                    "pinned_gb_per_s": {"DtoH": _PINNED / _PINNED_NS},
                },
            }
        ],
    },
    {
        # 10 MB pageable in 2 ms of a 100 ms capture, no pinned copy to measure a rate: no saving
        "id": "pageable-info",
        "rules": ["pageable-memcpy"],
        "rows": {
            "memcpy": [copy(0, 2 * MS, 10_000_000, "HtoD", "pageable")],
            "kernels": [kernel(2 * MS, 98 * MS)],
        },
        "expect": [("pageable-memcpy", "info")],
        "detail": [
            {
                "est_savings_ns": None,
                "evidence": {
                    "copies": 1,
                    "bytes": 10_000_000,
                    "total_ns": 2 * MS,
                    "span_share": 0.02,
                    "groups": [
                        {
                            "direction": "HtoD",
                            "src_memory": "pageable",
                            "dst_memory": "device",
                            "copies": 1,
                            "bytes": 10_000_000,
                            "total_ns": 2 * MS,
                            "gb_per_s": 10_000_000 / (2 * MS),
                        }
                    ],
                    "pinned_gb_per_s": None,
                },
            }
        ],
    },
    {
        "id": "pinned-passes",
        "rules": ["pageable-memcpy"],
        "rows": {"memcpy": [copy(0, 50 * MS, 2_500_000_000)], "kernels": [kernel(50 * MS, 50 * MS)]},
        "expect": [],
    },
]
