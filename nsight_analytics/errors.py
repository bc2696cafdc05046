"""Errors the CLI turns into one clear sentence and exit code 2."""

from __future__ import annotations

import errno
import os
import re


class NsaError(Exception):
    """Base class: any error a user can act on. The message says what is wrong and what to do."""


class InputError(NsaError):
    """The input file is missing, unreadable, or not what nsa can ingest."""


class WorkspaceError(NsaError):
    """The workspace cannot be opened or written (busy, unwritable, corrupt)."""


class QueryError(NsaError):
    """A query name, parameter or SQL statement is wrong."""


class SourceGoneError(NsaError):
    """Data left in the source file at ingest is needed, and that file is gone or has changed."""


INTERRUPTED = "interrupted; the workspace is unchanged."


def os_problem(exc: BaseException) -> str | None:
    """One sentence for a file-system failure nsa did not foresee at that spot (a symbolic link
    loop, a name too long, a full disk), or None when `exc` is none of them.

    DuckDB reports its own I/O failures as text (`... No space left on device`), Python as
    OSError; pathlib on Python 3.10-3.12 reports a symbolic link loop as RuntimeError."""
    text = str(exc)
    if isinstance(exc, RuntimeError) and text.startswith("Symlink loop from "):
        return _loop(text.removeprefix("Symlink loop from ").strip("'\""))
    if isinstance(exc, OSError):
        name = exc.filename if exc.filename is not None else ""
        if exc.errno == errno.ELOOP:
            return _loop(str(name))
        if exc.errno == errno.ENAMETOOLONG:
            return _too_long(str(name))
        if exc.errno == errno.ENOSPC:
            return _disk_full(str(name) or None)
    if "No space left on device" in text or "disk is full" in text.lower():
        where = re.search(r'file "([^"]+)"', text)
        return _disk_full(where[1] if where else None)
    return None


def _loop(path: str) -> str:
    return (
        f"{path} is a symbolic link loop (it leads back to itself); point the link at the real "
        "file or give that file's path."
    )


def _too_long(path: str) -> str:
    parts = [p for p in path.split(os.sep) if p]
    longest = max(parts, key=lambda p: len(os.fsencode(p)), default=path)
    size = len(os.fsencode(longest))
    shown = path if len(path) <= 120 else f"{path[:60]}...{path[-40:]}"
    if size > 255:
        which = "the name" if len(parts) == 1 else "a name in it"
        what = f"{which} is {size} bytes long, over the 255 the file system allows"
    else:
        what = f"the path is {len(os.fsencode(path))} bytes long, over what the system allows"
    return f"{shown}: {what}; give a shorter name or path."


def _disk_full(path: str | None) -> str:
    where = f" (writing {path})" if path else ""
    return (
        f"the disk is full{where}; free space there, or write to a disk with room (--db, --output, "
        "$TMPDIR for temporary files)."
    )
