"""The user's own Nsight Systems CLI: finding it, and `nsys export --type sqlite` through it.

nsa never reads a `.nsys-rep` itself (the format is NVIDIA's and changes with each release):
the nsys that recorded the report, or a newer one, turns it into the SQLite export nsa reads.
Errors are sentences naming the nsys that was used, its version and what to do.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ...errors import InputError
from ..reader import Progress

ENV_NSYS = "NSYS"
DOWNLOAD = "https://developer.nvidia.com/nsight-systems"
# Where installers put nsys, newest version first within each pattern.
INSTALL_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/usr/local/cuda*/NsightSystems-cli-*/target-linux-*/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)
_VERSION = re.compile(r"(20\d\d\.\d+(?:\.\d+)*(?:-[0-9a-f]+)?)")
# What an nsys prints for a report written by a newer nsys ("Version not supported: 36398880",
# "Version number is invalid: 2025@5@1@121-...", both from 2022.4).
_TOO_OLD = re.compile(r"version (?:is )?not supported|version number is invalid|newer version", re.IGNORECASE)
_PERCENT = re.compile(rb"(\d{1,3})%")


@dataclass(frozen=True)
class Nsys:
    """An nsys executable and where it was found (for messages)."""

    path: Path
    origin: str  # "$NSYS", "PATH" or "the install folders" (read after "from")

    def version(self) -> str:
        """The version `nsys --version` prints (2022.4.2.1-df9881f), or "unknown version"."""
        try:
            out = subprocess.run(
                [str(self.path), "--version"], capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return "unknown version"
        found = _VERSION.search(out.stdout + out.stderr)
        return found.group(1) if found else "unknown version"

    def supports(self, option: str) -> bool:
        """Does this nsys's `nsys export --help` list `option`? (`--include-blobs` is absent from
        2022.4's, which refuses it as a usage error.)"""
        return option in _export_help(str(self.path))


@functools.lru_cache(maxsize=8)
def _export_help(path: str) -> str:
    try:
        out = subprocess.run(
            [path, "export", "--help"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout + out.stderr if out.returncode == 0 else ""


# The export's binary columns (NVTX_EVENTS.binaryData: the Python frames of `--python-sampling`
# and `--python-backtrace`, NVTX extended payloads) are left out unless asked for.
INCLUDE_BLOBS = "--include-blobs"


def export_options(nsys: Nsys) -> list[str]:
    """The `nsys export` options nsa adds where this nsys has them."""
    return [f"{INCLUDE_BLOBS}=true"] if nsys.supports(INCLUDE_BLOBS) else []


class TooOld(InputError):
    """The nsys cannot open the report: it was written by a newer Nsight Systems."""


def _version_key(path: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", path)]


def candidates() -> list[Nsys]:
    """Every nsys to try, in order: `$NSYS`, then `nsys` on PATH, then the install folders
    (newest first). `$NSYS` set to something that is not an executable is an error: the user
    meant that one."""
    found: list[Nsys] = []
    env = os.environ.get(ENV_NSYS)
    if env:
        path = Path(env).expanduser()
        if path.is_dir():
            path = next((p for p in (path / "bin" / "nsys", path / "nsys") if p.is_file()), path / "nsys")
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise InputError(
                f"${ENV_NSYS} is {env}, which is not an nsys executable; point it at the nsys of an "
                f"Nsight Systems install (for example /opt/nvidia/nsight-systems/2025.3.1/bin/nsys) or unset it."
            )
        found.append(Nsys(path, f"${ENV_NSYS}"))
    on_path = shutil.which("nsys")
    if on_path:
        found.append(Nsys(Path(on_path), "PATH"))
    for pattern in INSTALL_GLOBS:
        for hit in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if os.access(hit, os.X_OK):
                found.append(Nsys(Path(hit), "the install folders"))
    unique: dict[Path, Nsys] = {}
    for nsys in found:
        unique.setdefault(nsys.path.resolve(), nsys)
    return list(unique.values())


def not_found(report: Path) -> InputError:
    return InputError(
        f"{report} is an Nsight Systems report, and no nsys was found to export it (not on PATH, "
        f"${ENV_NSYS} unset, none in the usual install folders); install Nsight Systems ({DOWNLOAD}, or Debian's "
        f"non-free `nsight-systems`) and set ${ENV_NSYS} to its nsys if it is not on PATH, or run "
        f"`nsys export --type sqlite {report.name}` where nsys is and ingest the .sqlite file."
    )


def report_version(report: Path) -> str | None:
    """The Nsight Systems version that wrote the report, as the file says it.

    The header line names a format version ("1", "36398880", or "2025@5@1@121-..." from 2025.5);
    a trailer near the end of the file holds the product version as text ("2022.4.2.1-df9881f",
    "2025.3.1.0")."""
    try:
        with report.open("rb") as fh:
            head = fh.read(256)
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - (64 << 10)))
            tail = fh.read()
    except OSError:
        return None
    dotted = re.search(rb"Report (20\d\d(?:@\d+)+)", head)
    if dotted:
        return dotted.group(1).decode().replace("@", ".")
    versions = re.findall(rb"(20\d\d\.\d+\.\d+(?:\.\d+)?(?:-[0-9a-f]+)?):", tail)
    return versions[-1].decode() if versions else None


def export(report: Path, out: Path, progress: Progress | None) -> Nsys:
    """Export `report` into `out` with the first nsys that can open it (an older one on PATH
    may be followed by a newer one in /opt/nvidia); returns the nsys used."""
    found = candidates()
    if not found:
        raise not_found(report)
    too_old: TooOld | None = None
    for nsys in found:
        try:
            export_sqlite(nsys, report, out, progress)
            return nsys
        except TooOld as exc:
            too_old = too_old or exc
    assert too_old is not None
    raise too_old


def export_sqlite(nsys: Nsys, report: Path, out: Path, progress: Progress | None) -> None:
    """`nsys export --type sqlite` of `report` into `out` (which must not exist), reporting nsys's
    percentages through `progress`. On failure `out` is removed and InputError (TooOld when nsys
    says the report is too new for it) carries nsys's own last line."""
    cmd = [
        str(nsys.path),
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        *export_options(nsys),
        "-o",
        str(out),
        str(report),
    ]
    try:
        with tempfile.TemporaryFile() as stdout:
            try:
                proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            except OSError as exc:
                raise InputError(
                    f"{nsys.path} (from {nsys.origin}) could not be run ({exc.strerror or exc}); "
                    f"set ${ENV_NSYS} to a working nsys."
                ) from exc
            try:
                assert proc.stderr is not None
                stderr = _follow(proc.stderr, progress)
                rc = proc.wait()
            finally:
                if proc.poll() is None:  # interrupted (Ctrl-C): stop nsys too
                    proc.kill()
                    proc.wait()
                if proc.stderr:
                    proc.stderr.close()
            stdout.seek(0)
            said = _messages(stderr) or _messages(stdout.read()[-_TAIL:])
        if rc != 0 or not out.is_file() or out.stat().st_size == 0:
            raise _failure(nsys, report, rc, said)
    except BaseException:
        out.unlink(missing_ok=True)
        raise


_TAIL = 64 << 10
_BAR = re.compile(r"\[[= ]*\d{1,3}%[= ]*\]$")  # "Exporting 396 events: [====50%    ]"


def _follow(stderr: IO[bytes], progress: Progress | None) -> bytes:
    """Read what nsys writes on stderr, passing each new percentage of its progress bar (redrawn
    with \\r) on; returns the last 64 KiB for the error message."""
    last, tail = -1, b""
    while chunk := stderr.read1(4096) if hasattr(stderr, "read1") else stderr.read(4096):
        tail = (tail + chunk)[-_TAIL:]
        found = _PERCENT.findall(chunk)
        if found and progress:
            pct = min(int(found[-1]), 100)
            if pct != last:
                progress("nsys export", pct, 100)
                last = pct
    return tail


def _messages(text: bytes) -> list[str]:
    """nsys's lines, without the progress bar's."""
    lines = re.split(r"[\r\n]+", text.decode(errors="replace"))
    return [line.strip() for line in lines if line.strip() and not _BAR.search(line.strip())]


def _failure(nsys: Nsys, report: Path, rc: int, lines: list[str]) -> InputError:
    quiet = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}, no message"
    last = lines[-1] if lines else quiet
    if any(_TOO_OLD.search(line) for line in lines):
        written = report_version(report)
        by = f"Nsight Systems {written}" if written else "a newer Nsight Systems"
        return TooOld(
            f"{report} was recorded by {by}, and the nsys found ({nsys.path}, version {nsys.version()}, "
            f"from {nsys.origin}) is too old to open it ({last}); set ${ENV_NSYS} to the nsys that "
            f"recorded it or a newer one, or run `nsys export --type sqlite {report.name}` on the "
            "machine that recorded it and ingest the .sqlite file."
        )
    return InputError(
        f"`nsys export --type sqlite {report.name}` failed with {nsys.path} (version {nsys.version()}): "
        f"{last}; run it yourself to see why, then ingest the .sqlite file it writes."
    )
