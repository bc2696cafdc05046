"""Files users have that no reader reads yet, each told apart by its first bytes.

Each gets its own sentence naming the format and the step that turns it into something nsa
reads, instead of the generic "not an SQLite file nor an ncu CSV".
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from ..errors import InputError
from .sqlite_source import EXPORT_HINT, check_sqlite_file

NCU_HINT = "`ncu --import report.ncu-rep --csv --page details > report.csv`"
NCU_REP_MAGIC = b"NVR\x00"  # Nsight Compute reports (.ncu-rep)
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"  # Nsight Systems reports (.nsys-rep, .qdrep)


def refuse_unsupported(path: Path, head: bytes) -> None:
    """Raise InputError for an empty file or a known format no reader ingests; `head` is the
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


def refuse_unknown(path: Path) -> NoReturn:
    """Raise InputError for a file no reader recognises (the nsys and ncu hints)."""
    check_sqlite_file(path)  # a missing file, a folder, or "not an SQLite file nor an ncu CSV"
    raise InputError(f"{path} is not a file nsa reads; for nsys, {EXPORT_HINT}; for ncu, {NCU_HINT}.")


def refuse_compressed(path: Path, inner: bytes) -> NoReturn:
    """Raise InputError for a gzip file whose content no reader recognises; `inner` is the
    decompressed head (empty when the gzip is damaged)."""
    if not inner:
        raise InputError(f"{path} is a damaged, truncated or empty gzip file; copy it again.")
    if is_chrome_trace(inner):
        raise InputError(_kineto_message(path, compressed=True))
    raise InputError(
        f"{path} is gzip-compressed, and the file inside is neither an nsys SQLite export nor an ncu "
        f"CSV; for nsys, {EXPORT_HINT}; for ncu, {NCU_HINT}."
    )
