"""The `.ncu-rep` container, read just far enough to tell a whole report from a cut one.

NVIDIA's ncu_report loads a truncated report without complaint: it returns the launches stored
before the cut. The container is simple enough to check on our side: `NVR\\0`, a u32 size and a
file header, then blocks to the end of the file, each a u32 size, a protobuf block header
(field 2: the profile results in the block, field 5: the payload's size in bytes) and the
payload. Walking the sizes finds a cut at any byte, and the results counted on the way must be
the launches ncu_report then reads.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from ...errors import InputError
from ..formats import NCU_REP_MAGIC

_U32 = struct.Struct("<I")
_RESULTS_FIELD = 2
_PAYLOAD_FIELD = 5
_MAX_HEADER = 64 << 20  # block headers are bytes to kilobytes; larger is damage, not a header


class _Damaged(Exception):
    """The container's structure is broken at `offset`."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def count_results(path: Path) -> int:
    """The profile results (kernel launches, ranges) the report's blocks hold; InputError for a
    file that is cut short or whose block structure is broken."""
    try:
        with path.open("rb") as fh:
            size = path.stat().st_size
            return _walk(fh, size)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc}).") from exc
    except _Damaged as exc:
        raise InputError(
            f"{path} is a damaged or truncated Nsight Compute report (its block structure breaks "
            f"at byte {exc.offset:,} of {size:,}): copy it again, or profile again with `ncu -o`."
        ) from exc


def _walk(fh: BinaryIO, size: int) -> int:
    if fh.read(4) != NCU_REP_MAGIC:
        raise _Damaged(0)
    offset = 4 + _skip_sized(fh, 4, size)
    results = 0
    while offset < size:
        header_len = _read_u32(fh, offset, size)
        header = fh.read(header_len)
        if len(header) != header_len:
            raise _Damaged(offset)
        fields = _varint_fields(header, offset)
        offset += 4 + header_len + fields.get(_PAYLOAD_FIELD, 0)
        if offset > size:
            raise _Damaged(size)
        fh.seek(offset)
        results += fields.get(_RESULTS_FIELD, 0)
    return results


def _read_u32(fh: BinaryIO, offset: int, size: int) -> int:
    raw = fh.read(4)
    if len(raw) != 4:
        raise _Damaged(offset)
    value: int = _U32.unpack(raw)[0]
    if value > _MAX_HEADER or offset + 4 + value > size:
        raise _Damaged(offset)
    return value


def _skip_sized(fh: BinaryIO, offset: int, size: int) -> int:
    """Skip a u32-sized record (the file header); bytes skipped, size included."""
    length = _read_u32(fh, offset, size)
    fh.seek(offset + 4 + length)
    return 4 + length


def _varint_fields(buf: bytes, offset: int) -> dict[int, int]:
    """The varint fields of a protobuf message (field number -> value); other wire types are
    stepped over. A field that runs past the message is damage."""
    fields: dict[int, int] = {}
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i, offset)
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields[number], i = _varint(buf, i, offset)
        elif wire == 2:
            length, i = _varint(buf, i, offset)
            i += length
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise _Damaged(offset)
        if i > len(buf):
            raise _Damaged(offset)
    return fields


def _varint(buf: bytes, i: int, offset: int) -> tuple[int, int]:
    value = shift = 0
    while i < len(buf) and shift < 64:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
    raise _Damaged(offset)
