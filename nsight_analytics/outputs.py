"""Files nsa writes appear whole or not at all.

Each regular file is written to a temporary file in the target's folder and renamed onto the target only
once complete: a full disk, a failed query or Ctrl-C part-way leaves the previous file (or no
file), never half of one. The rename is atomic because source and target share a file system.
Special files (`/dev/null`, a named pipe, `/dev/stdout`) are written in place, never replaced.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], content: str | bytes | Callable[[Path], None]) -> Path:
    """Write `content` (text as UTF-8, bytes, or a function that writes the file at the path it
    is given, such as a DuckDB `COPY ... TO`) to `path` all at once; the path written.

    Raises what the write raised (OSError, DuckDB's IOException, KeyboardInterrupt) after
    removing the temporary file; the target is then as it was."""
    target = Path(path).expanduser()
    if target.is_symlink():  # replace the file the link points at, and keep the link
        target = target.resolve()
    if target.exists() and not target.is_file():  # /dev/null, a FIFO, /dev/stdout: never replaced
        _write_in_place(target, content)
        return target
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:64]}.", suffix=".tmp")
    tmp = Path(name)
    try:
        if callable(content):
            os.close(fd)
            content(tmp)
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.chmod(tmp, _mode(target))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _write_in_place(target: Path, content: str | bytes | Callable[[Path], None]) -> None:
    """A device, pipe or other special file is written as it is: renaming a file onto it would
    replace the device (as root, /dev/null itself) instead of writing to it."""
    if callable(content):
        content(target)
        return
    with target.open("wb") as f:
        f.write(content.encode("utf-8") if isinstance(content, str) else content)


def _mode(target: Path) -> int:
    """The permissions the file would have had if written in place: the old file's, or those
    of a new file under this process's umask (mkstemp creates its file readable by its owner only)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
