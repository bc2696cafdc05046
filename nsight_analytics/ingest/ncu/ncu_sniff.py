"""Telling an ncu CSV from other files, without importing the parser (and pandas)."""

from __future__ import annotations

import re

# The first columns of every ncu CSV layout, details and raw, 2019 to 2026 (a report captured
# with `--nvtx` puts its NVTX columns before `Kernel Name`); summaries (`--print-summary`) have no
# ID column and are told by their `Invocations` column, `per-nvtx` ones start with the NVTX domain.
HEADER_RE = re.compile(
    r'^(?:"ID","Process ID","Process Name","Host Name",(?:"[^"\n]*",)*?"Kernel Name",'
    r'|"Process ID","Process Name","Host Name",(?=[^\n]*"Kernel Name")(?=[^\n]*"Invocations")'
    r'|"Domain","Range[^"\n]*",(?=[^\n]*"Kernel Name")(?=[^\n]*"Invocations"))',
    re.MULTILINE,
)
# The source page (`--page source`): a kernel's name line, then its column header.
SOURCE_RE = re.compile(
    r'^(?:"Kernel Name","[^\n]*\n"Address","Source",'
    r'|"File Path","[^\n]*\n"Function Name","[^\n]*\n"Line No","Source",)',
    re.MULTILINE,
)
# The session page (`--page session`): launch settings and device attributes, no kernel.
SESSION_RE = re.compile(r'^"(?:Launch Attribute|Session Attribute|Device Attribute)","', re.MULTILINE)
# ncu's own log lines (`==PROF==`, `==ERROR==`, `==WARNING==`), as opposed to the app's output.
LOG_RE = re.compile(r"^==[A-Z]+==", re.MULTILINE)
BOM = "\ufeff"


def sniff_head(head: bytes) -> bool:
    """ncu.sniff_ncu on the file's first bytes (4 MiB of them); ncu's own failure logs count
    too, so that parse_ncu explains what went wrong. A CSV is text: no NUL byte."""
    if b"\0" in head:
        return False
    if b"==PROF==" in head[:65536] or b"==ERROR==" in head[:65536]:
        return True
    text = head.decode("utf-8", errors="replace").replace(BOM, "")
    return bool(
        HEADER_RE.search(text) or SOURCE_RE.search(text) or SESSION_RE.search(text) or LOG_RE.search(text)
    )
