"""Files users have that nsa cannot read yet, each told apart by its first bytes.

Each gets its own sentence naming the format and the step that turns it into something nsa
reads, instead of the generic "not an SQLite file nor an ncu CSV".
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from ..errors import InputError
from .sqlite_source import SQLITE_MAGIC

GZIP_MAGIC = b"\x1f\x8b"
NCU_REP_MAGIC = b"NVR\x00"  # Nsight Compute reports (.ncu-rep)
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"  # Nsight Systems reports (.nsys-rep, .qdrep)


def refuse_unsupported(path: Path, head: bytes) -> None:
    """Raise InputError for an empty file or a known format nsa does not ingest; `head` is the
    file's first bytes (64 KiB is plenty)."""
    if not head:
        raise InputError(f"{path} is empty (0 bytes); copy or export it again.")
    if head.startswith(NSYS_REP_MAGIC):
        raise InputError(
            f"{path} is an Nsight Systems report (.nsys-rep), which nsa reads as an SQLite export: "
            f"run `nsys export --type sqlite {path.name}` and ingest the .sqlite file it writes."
        )
    if head.startswith(NCU_REP_MAGIC):
        raise InputError(
            f"{path} is an Nsight Compute report (.ncu-rep), which nsa cannot read yet; export it "
            f"as CSV with `ncu --import {path.name} --csv --page details > {Path(path.name).stem}.csv` "
            "and ingest the .csv file."
        )
    if head.startswith(GZIP_MAGIC):
        inner = _gunzip_head(path)
        if inner.startswith(SQLITE_MAGIC):
            raise InputError(
                f"{path} is a gzip-compressed SQLite export; decompress it first "
                f"(`gunzip -k {path.name}`) and ingest the .sqlite file."
            )
        if is_chrome_trace(inner):
            raise InputError(_kineto_message(path, compressed=True))
        raise InputError(
            f"{path} is gzip-compressed; decompress it first (`gunzip -k {path.name}`) and ingest "
            "the file inside."
        )
    if is_chrome_trace(head):
        raise InputError(_kineto_message(path, compressed=False))


def is_chrome_trace(head: bytes) -> bool:
    """A Chrome trace JSON object, as the PyTorch profiler (Kineto) writes: `{"schemaVersion":
    ..., "deviceProperties": [...], "traceEvents": [...]}`."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    keys = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"')
    return text.startswith(b"{") and any(k in head for k in keys)


def _kineto_message(path: Path, compressed: bool) -> str:
    what = "a gzip-compressed PyTorch profiler trace" if compressed else "a PyTorch profiler trace"
    return (
        f"{path} is {what} (Chrome trace JSON), which nsa cannot read yet; profile the same run "
        "with `nsys profile -t cuda,nvtx -o report python train.py`, then "
        "`nsys export --type sqlite report.nsys-rep` and ingest the .sqlite file."
    )


def _gunzip_head(path: Path, size: int = 65536) -> bytes:
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read(size)
    except (OSError, EOFError, zlib.error):
        return b""  # damaged gzip: still gzip, and the caller says to decompress it
