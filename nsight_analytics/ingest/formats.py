"""Files users have that no reader reads yet, each told apart by its first bytes.

Each gets its own sentence naming the format and the step that turns it into something nsa
reads, instead of the generic "not an SQLite file nor an ncu CSV"; so does JSON that is no
PyTorch profiler trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from ..errors import InputError
from .kineto_sniff import is_kineto_trace
from .sqlite_source import EXPORT_HINT, check_sqlite_file

NCU_HINT = "`ncu --import report.ncu-rep --csv --page details > report.csv`"
READS = (
    "nsa reads nsys reports (.nsys-rep) and their SQLite exports, ncu reports (.ncu-rep) and CSV "
    "exports, PyTorch profiler traces, and NVML or nvidia-smi power logs"
)
NCU_REP_MAGIC = b"NVR\x00"  # Nsight Compute reports (.ncu-rep)
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"  # Nsight Systems reports (.nsys-rep, .qdrep)


def refuse_unsupported(path: Path, head: bytes) -> None:
    """Raise InputError for an empty file or a known format no reader ingests; `head` is the
    file's first bytes (64 KiB is plenty)."""
    if not head:
        raise InputError(f"{path} is empty (0 bytes); copy or export it again.")
    if is_chrome_trace(head) and not is_kineto_trace(head):
        raise InputError(_kineto_message(path, compressed=False))


def is_chrome_trace(head: bytes) -> bool:
    """A Chrome trace JSON object, as the PyTorch profiler (Kineto) writes: `{"schemaVersion":
    ..., "deviceProperties": [...], "traceEvents": [...]}`."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    keys = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"')
    return text.startswith(b"{") and any(k in head for k in keys)


def _kineto_message(path: Path, compressed: bool) -> str:
    what = "a gzip-compressed Chrome trace JSON" if compressed else "a Chrome trace JSON"
    return (
        f"{path} is {what} that the PyTorch profiler did not write (no Kineto keys or event "
        f"categories); {READS} (`prof.export_chrome_trace(path)` writes a PyTorch trace)."
    )


def is_json(head: bytes) -> bool:
    """A JSON object or array, by its first bytes (a UTF-8 byte order mark and blanks aside)."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    rest = text[1:].lstrip(b" \t\r\n")
    if text.startswith(b"{"):
        return rest[:1] in (b'"', b"}")
    return text.startswith(b"[") and rest[:1] != b"" and rest[:1] in b'{["-0123456789tfn]'


def _json_message(path: Path, compressed: bool) -> str:
    what = "gzip-compressed JSON" if compressed else "JSON"
    return (
        f"{path} is {what}, but not a PyTorch profiler trace (no traceEvents list) nor anything else "
        f"nsa reads; {READS} (power logs as CSV)."
    )


def refuse_unknown(path: Path) -> NoReturn:
    """Raise InputError for a file no reader recognises (a JSON file, the nsys and ncu hints)."""
    if path.is_file():
        try:
            with path.open("rb") as fh:
                head = fh.read(4096)
        except OSError:
            head = b""
        if is_json(head):
            raise InputError(_json_message(path, compressed=False))
    check_sqlite_file(path)  # a missing file, a folder, or "not an SQLite file nor an ncu CSV"
    raise InputError(f"{path} is not a file nsa reads; for nsys, {EXPORT_HINT}; for ncu, {NCU_HINT}.")


def refuse_compressed(path: Path, inner: bytes) -> NoReturn:
    """Raise InputError for a gzip file whose content no reader recognises; `inner` is the
    decompressed head (empty when the gzip is damaged)."""
    if not inner:
        raise InputError(f"{path} is a damaged, truncated or empty gzip file; copy it again.")
    if is_chrome_trace(inner):
        raise InputError(_kineto_message(path, compressed=True))
    if is_json(inner):
        raise InputError(_json_message(path, compressed=True))
    raise InputError(f"{path} is gzip-compressed, and the file inside is none of them: {READS}.")
