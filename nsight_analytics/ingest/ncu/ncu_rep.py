"""Nsight Compute reports (`.ncu-rep`) in, canonical ncu_* rows out, through NVIDIA's ncu_report.

The PyPI package `ncu-report` ships the module with its native library, so a report opens on a
machine without a GPU or Nsight Compute. What it gives, and where it goes:

- each action (a profiled launch) of each range -> one ncu_kernels row; launch_id counts the
  actions across ranges in order, as the `ID` column of `ncu -i REPORT --csv` does, so a report
  and its CSV export join on (launch_id, metric_name);
- every metric with an aggregate value -> ncu_metrics, in base units (ncu.py's
  conversion), section and label from the report's sections where one shows the metric;
- every instance of an instanced metric (per SM, per L2 slice, per PC, per PM sample...) ->
  ncu_metric_instances, keyed by the metric's correlation id;
- the guided-analysis rule results -> ncu_rules, their messages written as ncu's CSV writes them;
- the kernel's code with its per-instruction samples -> ncu_source / ncu_source_stalls, as the
  CSV's source page (ncu_rep_source.py).

ncu_report does not expose the process id, process name or host name of a launch: those
ncu_kernels columns stay NULL. The file's block structure is checked first (ncu_rep_container.py:
ncu_report reads a truncated report without a word), and ncu_report itself runs in a child
process per report (ncu_rep_child.py: it keeps state across reports).
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from ...errors import InputError
from . import ncu
from .ncu_rep_container import count_results
from .ncu_rep_source import source_rows

CSV_HINT = "`ncu --import REPORT.ncu-rep --csv --page raw > REPORT.csv`"
_DEFAULT_DOMAIN = "<default domain>"
_RULE_TYPES = {1: "INF", 2: "OPT", 3: "WRN", 4: "ERR"}  # ncu_report.MsgType -> CSV `Rule Type`
_SPEEDUP_TYPES = {1: "local", 2: "global"}  # ncu_report.SpeedupType
# Rule messages link with `@kind:target:text@`; the CSV prints the text, URLs in parentheses.
_LINK_RE = re.compile(r"@(\w+):([^@:]*):([^@]*)@")
# ncu's CSV shortens demangled names: the kernel's own namespaces (`at::native::`, `at::`) and
# `std::` are dropped wherever they appear, `<unnamed>::` becomes `unnamed>::`, and casts on literal
# template arguments go (`(int)4` -> `4`); other qualifiers stay (`c10::Scalar`, lambda scopes).
_NAMESPACES_RE = re.compile(r"^(?:void\s+)?((?:[A-Za-z_]\w*::)*)")
_CAST_RE = re.compile(r"\((?:[A-Za-z_][\w:]*)(?:\s+[A-Za-z_]\w*)*\)\s*(?=-?\d)")


@dataclass(frozen=True)
class NcuRep:
    """One report as canonical frames, without report_id (the caller assigns it)."""

    kernels: pd.DataFrame
    metrics: pd.DataFrame
    instances: pd.DataFrame
    rules: pd.DataFrame
    source: pd.DataFrame
    source_stalls: pd.DataFrame
    tool_version: str | None


def read_report(path: Path) -> NcuRep:
    """Validate `path` and read all of it: InputError for a cut or damaged report, or when
    ncu_report is missing or cannot read it. ncu_report runs in a child process
    (ncu_rep_child.py says why)."""
    expected = count_results(path)
    launches = _read_in_child(path, _ncu_report_folder(path))
    if not launches:
        raise InputError(
            f"{path} is an Nsight Compute report without any profiled launch; profile again "
            "(check --kernel-name, --launch-skip and --launch-count)."
        )
    if len(launches) != expected:
        raise InputError(
            f"{path} is damaged: its blocks hold {expected} profile results but ncu_report reads "
            f"{len(launches)}; copy it again, or profile again with `ncu -o`."
        )
    for launch_id, launch in enumerate(launches):
        if launch["name"] is None or not launch["metrics"]:
            raise InputError(
                f"{path} is damaged: ncu_report reads no name or no metrics for launch "
                f"{launch_id}; copy it again, or profile again with `ncu -o`."
            )
    return _frames(launches)


def _ncu_report_folder(path: Path) -> str:
    """The folder to import ncu_report from; InputError saying what to install when it is missing."""
    try:
        import ncu_report  # type: ignore[import-untyped]
    except ImportError as exc:
        raise InputError(
            f"{path} is an Nsight Compute report, and reading one needs NVIDIA's ncu_report module: "
            f"`pip install ncu-report` (wheels for Linux and Windows x86-64), or export it as CSV "
            f"with {CSV_HINT} and ingest that."
        ) from exc
    return str(Path(ncu_report.__file__).resolve().parent.parent)


def _read_in_child(path: Path, folder: str) -> list[dict[str, Any]]:
    script = Path(__file__).with_name("ncu_rep_child.py")
    child = subprocess.run(
        [sys.executable, "-I", str(script), str(path), folder], capture_output=True, check=False
    )
    outcome = pickle.loads(child.stdout) if child.returncode == 0 and child.stdout else None
    if not isinstance(outcome, dict):
        raise InputError(
            f"{path}: NVIDIA's ncu_report stopped while reading this report (exit status "
            f"{child.returncode}); open it with `ncu -i` to check it, or export it as CSV with "
            f"{CSV_HINT} and ingest that."
        )
    if "error" in outcome:
        raise InputError(
            f"{path}: NVIDIA's ncu_report cannot read this report ({outcome['error']}); open it "
            f"with `ncu -i` to check it, or export it as CSV with {CSV_HINT} and ingest that."
        )
    launches: list[dict[str, Any]] = outcome["launches"]
    return launches


def _frames(launches: list[dict[str, Any]]) -> NcuRep:
    metrics = [(i, *m) for i, launch in enumerate(launches) for m in launch["metrics"]]
    instances = [(i, *m) for i, launch in enumerate(launches) for m in launch["instances"]]
    rules = [r for i, launch in enumerate(launches) for r in _rule_rows(i, launch["rules"])]
    source, stalls = source_rows(launches)
    metric_cols = ["launch_id", "metric_name", "section", "metric_label", "unit", "value", "value_text"]
    instance_cols = ["launch_id", "metric_name", "metric_label", "instance", "instance_key", "unit", "value"]
    return NcuRep(
        kernels=ncu.canonical_frame(
            pd.DataFrame([_kernel_row(i, k) for i, k in enumerate(launches)]), "ncu_kernels"
        ),
        metrics=ncu.canonical_frame(
            _in_base_units(pd.DataFrame(metrics, columns=metric_cols)), "ncu_metrics"
        ),
        instances=ncu.canonical_frame(
            _in_base_units(pd.DataFrame(instances, columns=[*instance_cols, "value_text"])),
            "ncu_metric_instances",
        ),
        rules=ncu.canonical_frame(pd.DataFrame(rules, columns=_RULE_COLS), "ncu_rules"),
        source=ncu.canonical_frame(source, "ncu_source"),
        source_stalls=ncu.canonical_frame(stalls, "ncu_source_stalls"),
        tool_version=None,  # ncu_report tells its own version only, not the report's
    )


def _in_base_units(frame: pd.DataFrame) -> pd.DataFrame:
    """Units and values as ncu.py writes them for a CSV (`Kbyte` -> byte, ...)."""
    conversion = {u: ncu.base_unit(u) for u in frame["unit"].unique()}
    factor = frame["unit"].map(lambda u: conversion[u][1]).astype(float)
    frame["unit"] = frame["unit"].map(lambda u: conversion[u][0])
    frame["value"] = frame["value"].astype(float) * factor
    return frame


def insert(con: duckdb.DuckDBPyConnection, rep: NcuRep, report_id: int) -> dict[str, int]:
    """Append the report's rows under `report_id`, inside the caller's transaction."""
    counts: dict[str, int] = {}
    for table, frame in (
        ("ncu_kernels", rep.kernels),
        ("ncu_metrics", rep.metrics),
        ("ncu_metric_instances", rep.instances),
        ("ncu_rules", rep.rules),
        ("ncu_source", rep.source),
        ("ncu_source_stalls", rep.source_stalls),
    ):
        ncu.insert_frame(con, table, frame, report_id)
        counts[table] = len(frame)
    return counts


def display_name(demangled: str) -> str:
    """The kernel name as `ncu --csv` prints it (its default `--print-kernel-base demangled`);
    checked on every kernel of the CSV exports in tests/test_ncu_rep.py."""
    found = _NAMESPACES_RE.match(demangled)
    chain = [part for part in (found.group(1) if found else "").split("::") if part]
    name = demangled
    for depth in range(len(chain), 0, -1):
        name = name.replace("::".join(chain[:depth]) + "::", "")
    name = name.replace("std::", "").replace("<unnamed>::", "unnamed>::")
    return _CAST_RE.sub("", name)


def rule_text(message: str) -> str:
    """A rule message with ncu's link markup written as its CSV writes it."""

    def link(m: re.Match[str]) -> str:
        kind, target, text = m.groups()
        return f"{target} ({text})" if kind == "url" else text

    return _LINK_RE.sub(link, message)


_RULE_COLS = [
    "launch_id",
    "section",
    "rule_name",
    "rule_type",
    "description",
    "est_speedup",
    "est_speedup_type",
]


def _kernel_row(launch_id: int, launch: dict[str, Any]) -> dict[str, object]:
    attrs = launch["attributes"]

    def whole(name: str) -> int | None:
        value = attrs.get(name)
        return None if value is None else int(value)

    def dims(prefix: str) -> str | None:
        xyz = [whole(f"{prefix}_{axis}") for axis in "xyz"]
        return None if None in xyz else f"({xyz[0]}, {xyz[1]}, {xyz[2]})"

    major = whole("device__attribute_compute_capability_major")
    minor = whole("device__attribute_compute_capability_minor")
    return {
        "launch_id": launch_id,
        "name": display_name(launch["demangled"] or launch["name"]),
        "device_id": whole("launch__device_id"),
        "cc": None if major is None or minor is None else f"{major}.{minor}",
        "grid": dims("launch__grid_dim"),
        "block": dims("launch__block_dim"),
        "context_id": whole("launch__context_id"),
        "stream_id": whole("launch__stream_id"),
        "demangled_name": launch["demangled"] or None,
        "mangled_name": launch["mangled"] or None,
        "nvtx_ranges": _nvtx_ranges(launch["nvtx"]),
    }


def _nvtx_ranges(ranges: list[tuple[str, str]]) -> str | None:
    names = [name if domain == _DEFAULT_DOMAIN else f"{domain}:{name}" for domain, name in ranges]
    return " > ".join(names) if names else None


def _rule_rows(launch_id: int, results: list[dict[str, Any]]) -> Iterator[dict[str, object]]:
    """One row per rule result that says something (a message), as the CSV's rule rows."""
    for result in results:
        message = result.get("rule_message") or {}
        if not message.get("message"):
            continue
        speedup = result.get("speedup_estimation") or {}
        yield {
            "launch_id": launch_id,
            "section": result.get("section_identifier") or None,
            "rule_name": result.get("rule_identifier") or None,
            "rule_type": _RULE_TYPES.get(int(message.get("type", 0))),
            "description": rule_text(message["message"]),
            "est_speedup": speedup.get("speedup"),
            "est_speedup_type": _SPEEDUP_TYPES.get(int(speedup.get("type", 0))),
        }
