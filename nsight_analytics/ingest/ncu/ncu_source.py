"""ncu's source page (`ncu -i REPORT --csv --page source`): per-line and per-instruction stall samples.

The page has no launch IDs and no CSV header of the usual kind. Each kernel is a block:

- `--print-source sass`: a `"Kernel Name","<name>",` line, a header (`"Address","Source",` then
  the metric columns) and one row per SASS instruction. ncu 2025.3 prints each kernel's block
  twice in a row; when every block equals the next one, the copies are dropped.
- `--print-source cuda,sass` (kernels built with `-lineinfo`): `"File Path"`, `"Function Name"`
  lines, a header `"Line No","Source","Address","Source",...`, then per source line a row with its
  number, text and metrics (address `-`), followed by its instructions (line empty; repeated and
  separated by `...` rows, which are dropped). Kernels without line info are left out with a
  `==WARNING== No lineinfo available` line.

Metric columns are found by name: `Warp Stall Sampling (All Samples)`, `(Not-issued Samples)`,
`Instructions Executed`, and one `stall_<reason>` / `stall_<reason> (Not Issued)` pair per reason.
A kernel's launch_id is its block's 0-based position in the file.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ...errors import InputError

if TYPE_CHECKING:  # ncu imports this module when it meets a source page
    from .ncu import NcuParsed

_SAMPLES = "Warp Stall Sampling (All Samples)"
_NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"
_EXECUTED = "Instructions Executed"
_NOT_ISSUED_SUFFIX = " (Not Issued)"


@dataclass
class _Block:
    name: str
    file: str | None
    head: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


def parse_source(path: Path, text: str) -> NcuParsed:
    """The source page as ncu_kernels (launch_id, name), ncu_source and ncu_source_stalls rows."""
    from .ncu import NcuParsed, _empty, _tool_version, canonical_frame

    blocks, logs = _blocks(path, text)
    if not blocks:
        raise InputError(f"{path} has ncu source-page headers but no kernel; export it again.")
    blocks = _drop_copies(blocks)
    source_frames, stall_frames = [], []
    for launch_id, block in enumerate(blocks):
        source, stalls = _rows(path, block, launch_id)
        source_frames.append(source)
        stall_frames.append(stalls)
    kernels = pd.DataFrame({"launch_id": range(len(blocks)), "name": [b.name for b in blocks]})
    source = pd.concat(source_frames, ignore_index=True)
    stalls = pd.concat(stall_frames, ignore_index=True)
    return NcuParsed(
        kernels=canonical_frame(kernels, "ncu_kernels"),
        metrics=_empty("ncu_metrics"),
        rules=_empty("ncu_rules"),
        tool_version=_tool_version("\n".join(logs)),
        page="source",
        source=canonical_frame(source, "ncu_source"),
        source_stalls=canonical_frame(stalls, "ncu_source_stalls"),
    )


def _blocks(path: Path, text: str) -> tuple[list[_Block], list[str]]:
    """Split the page into kernel blocks; ncu's log lines are set aside."""
    blocks: list[_Block] = []
    logs: list[str] = []
    file: str | None = None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("=="):
            logs.append(ln)
    body = "\n".join(ln for ln in lines if not ln.startswith("=="))
    reader = csv.reader(io.StringIO(body), strict=True)
    try:
        for fields in reader:
            first = fields[0] if fields else ""
            if first == "File Path":
                file = fields[1]
            elif first in ("Kernel Name", "Function Name"):
                blocks.append(_Block(name=fields[1], file=file if first == "Function Name" else None))
                file = None if first == "Kernel Name" else file
            elif first in ("Address", "Line No") and len(fields) > 1 and fields[1] == "Source":
                blocks[-1].head = fields
            elif blocks and blocks[-1].head:
                blocks[-1].rows.append(fields)
            else:
                raise InputError(
                    f"{path}: line {reader.line_num} of the ncu source page comes before any kernel "
                    "header; export it again with `ncu -i REPORT --csv --page source`."
                )
    except csv.Error as exc:
        if "end of data" in str(exc):
            raise InputError(
                f"{path} ends in the middle of a row: the source-page CSV is truncated; export it again."
            ) from exc
        raise InputError(
            f"{path}: line {reader.line_num} is not valid CSV ({exc}); export it again."
        ) from exc
    return blocks, logs


def _drop_copies(blocks: list[_Block]) -> list[_Block]:
    """ncu prints each kernel's SASS block twice in a row: keep one when every pair is a copy."""
    if len(blocks) % 2 or not all(
        a.name == b.name and a.head == b.head and a.rows == b.rows for a, b in zip(blocks[::2], blocks[1::2])
    ):
        return blocks
    return blocks[::2]


def _rows(path: Path, block: _Block, launch_id: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    head = block.head
    with_lines = head[0] == "Line No"
    at = {name: i for i, name in enumerate(head) if name != "Source"}  # Source: line text, SASS
    for needed in (_SAMPLES, _EXECUTED):
        if needed not in at:
            raise InputError(
                f"{path}: the source page of {block.name!r} has no {needed!r} column; export it "
                "again from a report profiled with `--set full` (or `--section SourceCounters "
                "--section WarpStateStats`)."
            )
    reasons = [
        c[len("stall_") :] for c in head if c.startswith("stall_") and not c.endswith(_NOT_ISSUED_SUFFIX)
    ]
    source: list[dict[str, object]] = []
    stalls: list[dict[str, object]] = []
    line_no: int | None = None
    seen: set[tuple[int | None, str]] = set()
    width = len(head)
    for fields in block.rows:
        if len(fields) < width - 1:  # the trailing comma's empty field may be missing
            raise InputError(
                f"{path}: a source-page row of {block.name!r} has {len(fields)} fields where the "
                f"header has {width}; the file is truncated or edited; export it again."
            )
        if with_lines and fields[0]:
            line_no = int(fields[0])
            granularity, text, address, sass = "line", fields[1], None, None
        else:
            address = fields[2 if with_lines else 0]
            sass = fields[3 if with_lines else 1].strip()
            if address in ("...", "-") or (line_no, address) in seen:
                continue
            seen.add((line_no, address))
            granularity, text = "sass", None
        seq = len(source)
        source.append(
            {
                "launch_id": launch_id,
                "seq": seq,
                "granularity": granularity,
                "file": block.file,
                "line": line_no if with_lines else None,
                "source": text,
                "address": address,
                "sass": sass,
                "samples": _int(fields, at.get(_SAMPLES)),
                "samples_not_issued": _int(fields, at.get(_NOT_ISSUED)),
                "instructions_executed": _int(fields, at.get(_EXECUTED)),
            }
        )
        for reason in reasons:
            samples = _int(fields, at.get(f"stall_{reason}"))
            if samples:
                stalls.append(
                    {
                        "launch_id": launch_id,
                        "seq": seq,
                        "reason": reason,
                        "samples": samples,
                        "samples_not_issued": _int(fields, at.get(f"stall_{reason}{_NOT_ISSUED_SUFFIX}")),
                    }
                )
    return pd.DataFrame(source), pd.DataFrame(
        stalls, columns=["launch_id", "seq", "reason", "samples", "samples_not_issued"]
    )


def _int(fields: list[str], i: int | None) -> int | None:
    if i is None or i >= len(fields):
        return None
    cell = fields[i].replace(",", "").strip()
    return int(float(cell)) if cell not in ("", "-") else None
