"""The one place that calls NVIDIA's ncu_report: run as `python ncu_rep_child.py REPORT`, it
reads the report and writes plain rows (tuples, dicts, numbers, strings), pickled, on stdout.
It runs isolated (`python -I`), finding ncu_report in the folder the parent found it in.

Each report is read in a process of its own: ncu_report keeps state across the reports one
process loads, and the units it gives some `derived__*` metrics change with what was read
before (seen: `inst` where ncu's CSV says `thread`, after a CC 10.0 report, or after reading a
derived metric before the metrics it is computed from). A fresh process that reads every metric
in ncu's own order gives what `ncu -i REPORT --csv` prints. The file imports only the standard
library and ncu_report, so that process starts in a fraction of a second.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator
from typing import Any

# IMetric value kinds (ncu_report.IMetric.ValueKind_*).
_STRING, _FLOAT, _DOUBLE, _UINT32, _UINT64 = 2, 3, 4, 5, 6
# Launch attributes ncu keeps as metrics.
ATTRIBUTES = (
    "launch__device_id", "launch__context_id", "launch__stream_id",
    "launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z",
    "launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z",
    "device__attribute_compute_capability_major", "device__attribute_compute_capability_minor",
)  # fmt: skip
FUNCTION_START = "launch__function_pcs"  # its instance: the kernel's first instruction address
_INSTRUCTION_BYTES = 16  # every SASS instruction since Volta, the oldest GPU ncu profiles
_MAX_INSTRUCTIONS = 1 << 20
Value = tuple[float | int | None, str | None]


def read(path: str) -> list[dict[str, Any]]:
    """Every launch of the report, in ncu's order (ranges, then actions), as plain data."""
    import ncu_report  # type: ignore[import-untyped]

    return [_launch(action) for action in _actions(ncu_report.load_report(path))]


def _actions(context: Any) -> Iterator[Any]:
    for r in range(context.num_ranges()):
        launches = context.range_by_idx(r)
        for a in range(launches.num_actions()):
            yield launches.action_by_idx(a)


def _launch(action: Any) -> dict[str, Any]:
    names = list(action.metric_names())
    launch: dict[str, Any] = {
        "name": action.name(),
        "demangled": action.name(action.NameBase_DEMANGLED),
        "mangled": action.name(action.NameBase_MANGLED),
        "metrics": [],  # (name, section, label, unit, value, text)
        "instances": [],  # (name, label, instance, key, unit, value, text)
        "attributes": {},
        "nvtx": _nvtx(action),
        "rules": list(action.rule_results_as_dicts()) if names else [],
        "source": None,
    }
    if not names:  # a launch ncu_report could not decode: the caller calls the report damaged
        return launch
    shown = _sections_of(action)
    for name in names:
        _metric(launch, name, action.metric_by_name(name), shown.get(name))
    launch["source"] = _source(action)
    return launch


def _source(action: Any) -> dict[str, Any] | None:
    """The kernel's SASS, from its first instruction on, with each instruction's source file and
    line when it was built with -lineinfo: {"pcs": [(pc, sass, file, line)], "lines": {(file,
    line): text}}. None when the report holds no code (no SourceCounters section)."""
    first = action.metric_by_name(FUNCTION_START)
    if first is None or not first.num_instances():
        return None
    start = first.as_uint64(0)
    pcs: list[tuple[int, str, str | None, int | None]] = []
    pc = start
    while len(pcs) < _MAX_INSTRUCTIONS and (sass := action.sass_by_pc(pc)):
        info = action.source_info(pc)
        where = (info.file_name(), info.line()) if info is not None else (None, None)
        pcs.append((pc, sass.strip(), *where))
        pc += _INSTRUCTION_BYTES
    texts = {name: text.splitlines() for name, text in action.source_files().items()}
    lines = {}
    for _, _, file, line in pcs:
        if file in texts and line and line <= len(texts[file]):
            lines[(file, line)] = texts[file][line - 1].strip()
    return {"pcs": pcs, "lines": lines} if pcs else None


def _metric(launch: dict[str, Any], name: str, metric: Any, shown: tuple[str, str] | None) -> None:
    section, label = shown if shown else (None, metric.label() or None)
    unit = metric.unit()
    if metric.has_value():
        value, text = _value(metric, ())
        launch["metrics"].append((name, section, label, unit, value, text))
        if name in ATTRIBUTES:
            launch["attributes"][name] = value
    count = metric.num_instances()
    if count:
        keys = metric.correlation_ids() if metric.has_correlation_ids() else None
        add = launch["instances"].append
        for i in range(count):
            value, text = _value(metric, (i,))
            key = _value(keys, (i,))[1] if keys is not None else None
            add((name, label, i, key, unit, value, text))


def _value(metric: Any, index: tuple[int, ...]) -> Value:
    """(number, text) of the aggregate (index `()`) or of one instance (`(i,)`); strings have
    no number, integers keep every digit in the text."""
    kind = metric.kind(*index)
    if kind == _DOUBLE or kind == _FLOAT:
        number = metric.as_double(*index)
        return number, repr(number)
    if kind == _UINT64 or kind == _UINT32:
        whole = metric.as_uint64(*index)
        return whole, str(whole)
    if kind == _STRING:
        return None, metric.as_string(*index)
    return None, None


def _sections_of(action: Any) -> dict[str, tuple[str, str]]:
    """metric name -> (section title, label) of the first section, in ncu's display order, that
    shows it: what the CSV's details page prints."""
    shown: dict[str, tuple[str, str]] = {}
    for section in sorted(action.sections(), key=lambda s: s.order()):
        for metric in (*section.header_metrics(), *section.body_metrics()):
            shown.setdefault(metric.name(), (section.name(), metric.label()))
    return shown


def _nvtx(action: Any) -> list[tuple[str, str]]:
    """(domain, range) of the push/pop ranges open at the launch, outermost first."""
    state = action.nvtx_state()
    if state is None:
        return []
    ranges: list[tuple[str, str]] = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        ranges.extend((domain.name(), name) for name in domain.push_pop_ranges())
    return ranges


def main(argv: list[str]) -> int:
    """`ncu_rep_child.py REPORT FOLDER`, FOLDER holding the ncu_report package: pickle
    {"launches": [...]} on stdout, or {"error": "..."} when ncu_report fails."""
    sys.path.insert(0, argv[2])
    outcome: dict[str, Any]
    try:
        outcome = {"launches": read(argv[1])}
    except Exception as exc:  # noqa: BLE001 - the native reader's own types, told to the parent
        outcome = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.buffer.write(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
