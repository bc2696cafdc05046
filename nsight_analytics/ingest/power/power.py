"""What the power-log readers (reader_nvml.py, reader_smi.py) share: the CSV
header test, number parsing with the units loggers write, the insert into power_samples and
what a load reports.

A power log is a report of its own: its samples carry UTC wall-clock times, and the `energy`
query lines them up with the reports whose sessions they cover, so one log serves every capture
made while it ran (docs/energy.md).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ... import schema
from ...errors import InputError
from ..reader import LoadResult

COLUMNS = [c for c in schema.BY_NAME["power_samples"].col_names if c != "report_id"]
# the columns stored as integers: a scaled value (MHz -> Hz, MiB -> bytes) is rounded for them
INTEGER = {c.name for c in schema.BY_NAME["power_samples"].cols if c.type in ("INTEGER", "BIGINT")} - {
    "report_id"
}
# a value nvidia-smi could not read: `[N/A]`, `[Not Supported]`, `N/A`, `[Unknown Error]`
_MISSING = re.compile(
    r"^\[?(N/?A|Not Supported|Unknown Error|GPU is lost|Insufficient Permissions)\]?$", re.IGNORECASE
)
_NUMBER = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z%/]*)\s*$")


@dataclass
class Samples:
    """Parsed rows, column by column (power_samples' columns but report_id)."""

    values: dict[str, list[object]] = field(default_factory=lambda: {c: [] for c in COLUMNS})
    start_ns: int = 0  # the first sample's time: the report's session start
    warnings: list[str] = field(default_factory=list)

    def add(self, ts_utc_ns: int, **row: object) -> None:
        self.start_ns = min(self.start_ns, ts_utc_ns) if len(self) else ts_utc_ns
        row["ts_utc_ns"] = ts_utc_ns
        for c in COLUMNS:
            self.values[c].append(row.get(c))

    def __len__(self) -> int:
        return len(self.values["ts_utc_ns"])


def header(head: bytes) -> list[str]:
    """The first line's fields, stripped and lower-cased ([] when it is not text)."""
    text = head[:4096].decode("utf-8-sig", errors="replace")
    first = text.splitlines()[0] if text else ""
    return [f.strip().lower() for f in first.split(",")]


def rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]], list[str]]:
    """The header fields (stripped, lower-cased), (line number, fields) of each data row, and
    warnings. A last line without its line end is what a logger killed mid-write leaves, its
    last value possibly cut short: it is left out, and a warning says so."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the power log ({exc}).") from exc
    lines = csv.reader(io.StringIO(text), skipinitialspace=True)
    head = [f.strip().lower() for f in next(lines, [])]
    data = [(i, [f.strip() for f in r]) for i, r in enumerate(lines, start=2) if any(f.strip() for f in r)]
    warnings = []
    if data and not text.endswith("\n") and text.splitlines()[-1].strip():
        line, _ = data.pop()
        warnings.append(
            f"{path.name} line {line} has no line end (the logger stopped mid-line); it was left out."
        )
    return head, data, warnings


def number(path: Path, line: int, column: str, text: str) -> float | None:
    """`72.40 W`, `345 MHz`, `0 %`, `72432`: the number; None for a value the logger could not read."""
    if text == "" or _MISSING.match(text):
        return None
    m = _NUMBER.match(text)
    if m is None:
        raise InputError(f"{path} line {line}: {column} is {text!r}, not a number; fix or remove that line.")
    return float(m.group(1))


def insert(con: duckdb.DuckDBPyConnection, samples: Samples, report_id: int) -> int:
    """Insert the samples under `report_id` in one statement: the column lists are bound as
    parameters (not written into the SQL: an hour of 10 ms samples is 360,000 rows) and unnested
    side by side."""
    if not len(samples):
        return 0
    types = {c.name: c.type for c in schema.BY_NAME["power_samples"].cols}
    select = ", ".join(f'unnest(CAST(${i} AS {types[c]}[])) AS "{c}"' for i, c in enumerate(COLUMNS, start=2))
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    con.execute(
        f"INSERT INTO power_samples (report_id, {cols}) SELECT CAST($1 AS INTEGER), * FROM (SELECT {select})",
        [report_id, *(samples.values[c] for c in COLUMNS)],
    )
    return len(samples)


def loaded(con: duckdb.DuckDBPyConnection, samples: Samples, report_id: int, label: str) -> LoadResult:
    """Insert the samples and say what was loaded: `label` names them in the ingest summary."""
    return LoadResult(
        rows={label: insert(con, samples, report_id)},
        activity_kinds=["power"],
        metadata={"session_start_utc_ns": samples.start_ns},
        warnings=samples.warnings,
    )
