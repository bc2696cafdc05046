"""Transparent `.gz`: a gzip file is decompressed to a temporary file for its reader.

Any format may arrive compressed (nsys exports shrink ~5x); the reader sniffing the decompressed
content reads the temporary copy, and the report keeps the `.gz` path and hash.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20


def is_gzip(head: bytes) -> bool:
    return head.startswith(GZIP_MAGIC)


def gunzip_head(path: Path, size: int) -> bytes:
    """The first `size` decompressed bytes; b"" for a damaged gzip."""
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read(size)
    except (OSError, EOFError, zlib.error):
        return b""


@contextmanager
def decompressed(path: Path) -> Iterator[Path]:
    """The content of the gzip file `path` as a temporary file, named as `path` without `.gz`,
    in the system's temporary folder (`$TMPDIR`), where a copy left by a killed process gets
    cleaned up; removed on exit, whatever happens."""
    tmp = Path(tempfile.mkdtemp(prefix="nsa-gunzip-"))
    try:
        out = tmp / (path.name.removesuffix(".gz") or "content")
        try:
            with gzip.open(path, "rb") as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise InputError(f"{path} is a damaged or truncated gzip file ({exc}); copy it again.") from exc
        except OSError as exc:
            raise InputError(
                f"{path}: cannot decompress it into {tmp.parent} ({exc.strerror or exc}); free some space "
                "there or set TMPDIR to a folder with room."
            ) from exc
        yield out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
