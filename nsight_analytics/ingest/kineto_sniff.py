"""Telling a PyTorch profiler (Kineto) trace from other JSON by its first bytes.

Kept apart from the reader so that `formats.py` can ask without importing the parser.
"""

from __future__ import annotations

import re

# Chrome trace JSON: an object with these keys near its start.
CHROME_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"')
# What only the PyTorch profiler writes: its top-level keys, and the categories of its events
# (torch 1.8-1.10 wrote `Operator`, `Kernel`, `Runtime`, `Memcpy`, `Memset`).
KINETO_KEYS = (b'"deviceProperties"', b'"baseTimeNanoseconds"', b'"distributedInfo"', b"PyTorch Profiler")
KINETO_CATEGORY = re.compile(
    rb'"cat"\s*:\s*"(cpu_op|user_annotation|python_function|kernel|gpu_memcpy|gpu_memset|cuda_runtime'
    rb'|cuda_driver|cpu_instant_event|Operator|Kernel|Runtime|Memcpy|Memset)"'
)


def _body(head: bytes) -> bytes:
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")


def is_chrome_trace(head: bytes) -> bool:
    """A JSON object with Chrome trace keys: `{"schemaVersion": ..., "traceEvents": [...]}`."""
    return _body(head).startswith(b"{") and any(k in head for k in CHROME_KEYS)


def is_kineto_trace(head: bytes) -> bool:
    """A Chrome trace the PyTorch profiler wrote: Chrome trace keys and either a key only Kineto
    writes or an event category of the profiler; another tool's Chrome trace is not claimed."""
    if not is_chrome_trace(head) or b'"traceEvents"' not in head:
        return False
    return any(k in head for k in KINETO_KEYS) or KINETO_CATEGORY.search(head) is not None
