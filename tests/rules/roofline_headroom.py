"""Cases of roofline-headroom (one 1 ms Nsight Compute launch)."""

from __future__ import annotations

from typing import Any

from rules.build import MS, ncu

# DRAM peak: 1280 bytes per cycle at 2.6 GHz
_PEAK = 1280 * 2.6e9

CASES: list[dict[str, Any]] = [
    {
        # at 20% of the DRAM roof, reaching the roof would save 80% of the 1 ms
        "id": "roofline-headroom-far-below-dram-roof",
        "rules": ["roofline-headroom"],
        "rows": ncu(
            dram__bytes__DOT__sum__DOT__per_second=0.2 * _PEAK,
            dram__bytes__DOT__sum__DOT__peak_sustained=1280,
            dram__cycles_elapsed__DOT__avg__DOT__per_second=2.6e9,
        ),
        "expect": [("roofline-headroom", "warning")],
        "detail": [
            {
                "est_savings_ns": 0.8 * MS,
                "evidence": {
                    "ncu_ns": 1 * MS,
                    "roof_fraction": 0.2,
                    "save_at_roof_ns": 0.8 * MS,
                    "limiter": "dram",
                    "bound": "memory",
                    "dram_bytes_per_s": 0.2 * _PEAK,
                    "peak_dram_bytes_per_s": _PEAK,
                    "mean_launch_ns": 1 * MS,
                },
            }
        ],
    },
    {
        "id": "roofline-headroom-near-roof-passes",
        "rules": ["roofline-headroom"],
        "rows": ncu(
            dram__bytes__DOT__sum__DOT__per_second=0.85 * _PEAK,
            dram__bytes__DOT__sum__DOT__peak_sustained=1280,
            dram__cycles_elapsed__DOT__avg__DOT__per_second=2.6e9,
        ),
        "expect": [],
    },
]
