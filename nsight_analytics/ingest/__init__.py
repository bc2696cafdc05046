"""Ingest: one subpackage per input format (nsys/, ncu/, kineto/, power/), each with its
reader modules, and one pipeline around them (pipeline.py).

The formats import nothing of each other (pyproject.toml's import-linter contract): what two of
them share lives here, beside the pipeline (steps.py, nvtx.py, comm.py, stacks.py, ...). See
reader.py for the interface a format implements and docs/readers.md for adding one.
"""

from __future__ import annotations

from .pipeline import (
    REPORT_TABLES,
    IngestResult,
    content_hash_file,
    deferred_for,
    delete_reports,
    detect_format,
    ensure_loaded,
    ingest_file,
    sha256_file,
)
from .reader import LoadResult, Progress, Reader, all_readers, register, unregister

__all__ = [
    "REPORT_TABLES",
    "IngestResult",
    "LoadResult",
    "Progress",
    "Reader",
    "all_readers",
    "content_hash_file",
    "deferred_for",
    "delete_reports",
    "detect_format",
    "ensure_loaded",
    "ingest_file",
    "register",
    "sha256_file",
    "unregister",
]
