"""A report's source view as ncu_source / ncu_source_stalls rows: what `ncu -i REPORT --csv --page
source --print-source cuda,sass` prints (only `sass` for kernels built without -lineinfo).

The child (ncu_rep_child.py) lists the kernel's instructions with their source file and line;
the numbers come from the PC-keyed instances of ncu's sampling and execution metrics, which the
report stores per instruction address (an address missing there counted 0):

- samples: `smsp__pcsamp_sample_count` (the page's `Warp Stall Sampling (All Samples)`);
- samples_not_issued: the `smsp__pcsamp_warps_issue_stalled_*_not_issued` counts, summed;
- instructions_executed: `inst_executed`;
- per stall reason: `smsp__pcsamp_warps_issue_stalled_<reason>` (and `_not_issued`), named as
  the page names its `stall_*` columns.

A source line's row sums its instructions; rows go line by line, each line followed by its
instructions, as the page lists them (without its repeats).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pandas as pd

_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
_NOT_ISSUED = "_not_issued"
# metric reason -> the source page's column (`stall_long_sb`); others keep the metric's word
_COLUMN = {
    "dispatch_stall": "dispatch", "imc_miss": "imc", "lg_throttle": "lg",
    "long_scoreboard": "long_sb", "math_pipe_throttle": "math", "mio_throttle": "mio",
    "no_instructions": "no_inst", "short_scoreboard": "short_sb", "sleeping": "sleep",
    "tex_throttle": "tex",
}  # fmt: skip
STALL_COLS = ["launch_id", "seq", "reason", "samples", "samples_not_issued"]
# ncu_report names branch targets (`BRA \`(.L_x_0) 0x7f...`); the page prints the address alone.
_LABEL_RE = re.compile(r"`\(\.L_x_\d+\)\s*")


class _Counters:
    """One launch's per-PC counters: pc -> value, by what they count."""

    def __init__(self, instances: list[tuple[Any, ...]]) -> None:
        self.samples: dict[int, int] = {}
        self.executed: dict[int, int] = {}
        self.reasons: dict[str, dict[int, int]] = defaultdict(dict)
        self.not_issued: dict[str, dict[int, int]] = defaultdict(dict)
        self.sampled = self.counted = False
        for name, _label, _i, key, _unit, value, _text in instances:
            if key is None or value is None or not key.isdigit():
                continue
            pc, count = int(key), int(value)
            if name == "smsp__pcsamp_sample_count":
                self.samples[pc], self.sampled = count, True
            elif name == "inst_executed":
                self.executed[pc], self.counted = count, True
            elif name.startswith(_PREFIX):
                reason = name[len(_PREFIX) :]
                if reason.endswith(_NOT_ISSUED):
                    self.not_issued[_COLUMN.get(reason[: -len(_NOT_ISSUED)], reason[: -len(_NOT_ISSUED)])][
                        pc
                    ] = count
                else:
                    self.reasons[_COLUMN.get(reason, reason)][pc] = count

    def row(self, pcs: list[int]) -> dict[str, int | None]:
        """The counters summed over `pcs` (one instruction, or a source line's)."""

        def total(values: dict[int, int], known: bool) -> int | None:
            return sum(values.get(pc, 0) for pc in pcs) if known else None

        return {
            "samples": total(self.samples, self.sampled),
            "samples_not_issued": (
                sum(v.get(pc, 0) for v in self.not_issued.values() for pc in pcs) if self.sampled else None
            ),
            "instructions_executed": total(self.executed, self.counted),
        }

    def stalls(self, launch_id: int, seq: int, pcs: list[int]) -> list[tuple[object, ...]]:
        rows: list[tuple[object, ...]] = []
        for reason in sorted(self.reasons):
            samples = sum(self.reasons[reason].get(pc, 0) for pc in pcs)
            if samples:
                not_issued = sum(self.not_issued.get(reason, {}).get(pc, 0) for pc in pcs)
                rows.append((launch_id, seq, reason, samples, not_issued))
        return rows


def source_rows(launches: list[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ncu_source rows, ncu_source_stalls rows) of every launch whose report holds its code."""
    source: list[dict[str, object]] = []
    stalls: list[tuple[object, ...]] = []
    for launch_id, launch in enumerate(launches):
        listing = launch.get("source")
        if listing:
            counters = _Counters(launch["instances"])
            for seq, entry in enumerate(_entries(listing)):
                source.append(
                    {"launch_id": launch_id, "seq": seq, **entry["row"], **counters.row(entry["pcs"])}
                )
                stalls.extend(counters.stalls(launch_id, seq, entry["pcs"]))
    return pd.DataFrame(source), pd.DataFrame(stalls, columns=STALL_COLS)


def _entries(listing: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows in page order: with line info, each source line then its instructions; without, the
    instructions alone."""
    pcs = listing["pcs"]
    if not any(line for _, _, _, line in pcs):
        return [_instruction(pc, sass, None, None) for pc, sass, _, _ in pcs]
    by_line: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
    for pc, sass, file, line in pcs:
        by_line[(file, line)].append((pc, sass))
    entries = []
    for (file, line), code in sorted(by_line.items(), key=lambda item: (item[0][0] or "", item[0][1] or 0)):
        text = listing["lines"].get((file, line))
        row = {
            "granularity": "line",
            "file": file,
            "line": line,
            "source": text,
            "address": None,
            "sass": None,
        }
        entries.append({"row": row, "pcs": [pc for pc, _ in code]})
        entries.extend(_instruction(pc, sass, file, line) for pc, sass in code)
    return entries


def _instruction(pc: int, sass: str, file: str | None, line: int | None) -> dict[str, Any]:
    row = {
        "granularity": "sass", "file": file, "line": line, "source": None, "address": f"0x{pc:x}",
        "sass": _LABEL_RE.sub("", sass),
    }  # fmt: skip
    return {"row": row, "pcs": [pc]}
