"""Nsight Compute (ncu) CSV exports in, canonical ncu_kernels / ncu_metrics / ncu_rules rows out.

ncu has no stable machine format short of its binary report, so users hand us whatever
`ncu --csv` printed. What that looks like varies a lot, and each variant below was seen in a real
export:

- details page (`--page details`, the default): one row per kernel x metric. Since ncu 2023 the
  header has 20 columns, the last five for rule results, yet metric rows stop after 16 fields
  (ragged); `--metrics` exports have a 15-column header; the 2019-2020 layout has 12 columns with
  `Kernel Time` and no Block/Grid/Device/CC.
- raw page (`--page raw`): one row per kernel, one column per metric name, units on line 2.
- summary (`--print-summary per-kernel` or `per-gpu`): no `ID` column; one row per kernel x
  metric with `Invocations` (launches aggregated) and `Minimum`, `Maximum`, `Average` instead of
  `Metric Value`. The column order differs between the two (`per-gpu` puts `Device`, `CC` before
  `Kernel Name`). Each kernel's group of rows becomes one ncu_kernels row whose launch_id is the
  group's 0-based index in file order; `value` is the Average, value_min / value_max the others.
- `--print-units auto` scales values (`us`, `Ghz`, `Mbyte/s`); `--print-units base` does not;
  `--print-metric-name` switches the Metric Name column between labels (`Duration`), names
  (`gpu__time_duration.sum`) and both.
- numbers follow the locale: `84,809` (en_US) or `84809` (C); `n/a` or empty marks a missing value.
- a report captured with `--nvtx` has NVTX columns between `Host Name` and `Kernel Name`
  (`--print-summary per-nvtx` starts with them instead of the process columns).
- `--print-metric-instances values|details` follows a value with its instances, `44 (44)`
  (ncu_instances.py); `--print-details body|all` adds a `Body Item Label` column, body metric rows,
  and section text and tables as plain lines between the rows (ncu_section_text).
- the source page (`--page source`) is a different file altogether (ncu_source.py); the session page
  has no kernel data and is refused with a sentence saying what to export.
- live `ncu --csv app > out` mixes the app's stdout and `==PROF==` lines in before the CSV; files
  written on Windows carry a UTF-8 BOM and CRLF line ends.

All of it is normalised here (base units, metric names), so queries never see any of it.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import duckdb
import pandas as pd

from ... import schema
from ...errors import InputError
from .ncu_instances import split_instances
from .ncu_metric_names import LABEL_TO_NAME
from .ncu_sniff import BOM as _BOM
from .ncu_sniff import HEADER_RE as _HEADER_RE
from .ncu_sniff import LOG_RE as _LOG_RE
from .ncu_sniff import SESSION_RE as _SESSION_RE
from .ncu_sniff import SOURCE_RE as _SOURCE_RE
from .ncu_sniff import sniff_head

Page = Literal["details", "raw", "summary", "source"]
Rows = list[tuple[int, list[str]]]  # (line number in the file, CSV fields)

# A quoted CSV header naming kernels or metrics, for telling an unknown ncu layout apart.
_OTHER_HEADER_RE = re.compile(r'^"[^"\n]+"(?:,"[^"\n]*")*,"(?:Kernel Name|Metric Name)"', re.MULTILINE)
_SNIFF_BYTES = 4 << 20

# Columns describing the launch rather than a metric, in every layout -> ncu_kernels column.
_KERNEL_COLS: dict[str, str | None] = {
    "ID": "launch_id",
    "Process ID": "pid",
    "Process Name": "process_name",
    "Host Name": "host_name",
    "Kernel Name": "name",
    "Kernel Time": None,  # 2019-2020 layouts: a wall-clock string, nothing to join on
    "Context": "context_id",
    "Stream": "stream_id",
    "Block Size": "block",
    "Grid Size": "grid",
    "Device": "device_id",
    "CC": "cc",
    "Invocations": "invocations",  # summaries: launches aggregated into the row
}
_BODY_ITEM = "Body Item Label"  # `--print-details body|all`
_INT_KERNEL_COLS = ("pid", "device_id", "context_id", "stream_id", "invocations")
_DETAILS_COLS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
_SUMMARY_COLS = (
    "Kernel Name",
    "Invocations",
    "Section Name",
    "Metric Name",
    "Metric Unit",
    "Minimum",
    "Maximum",
    "Average",
)
_RULE_COLS = {
    "Section Name": "section",
    "Rule Name": "rule_name",
    "Rule Type": "rule_type",
    "Rule Description": "description",
    "Estimated Speedup Type": "est_speedup_type",
}

# A metric name as ncu spells it, `unit__counter.rollup`, e.g. `gpu__time_duration.sum`.
_METRIC_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*__[A-Za-z0-9_.]+$")
# `--print-metric-name label-name`: `Duration (gpu__time_duration.sum)`.
_LABEL_NAME_RE = re.compile(r"^(.*\S)\s+\(([a-z][a-z0-9_]*__[A-Za-z0-9_.]+)\)$")
_EN_US_NUMBER_RE = r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$"
_NUMBER_RE = r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$"
# ncu's version, when a `==PROF==`-style line or a pasted `ncu --version` banner carries it.
_VERSION_RES = (
    re.compile(r"^==[A-Z]+==.*?Nsight Compute\D{0,40}?(\d{4}\.\d+(?:\.\d+)*)", re.MULTILINE),
    re.compile(r"Nsight Compute Command Line Profiler\s*\n.*\n\s*Version (\d{4}\.\d+(?:\.\d+)*)"),
)

_PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_PREFIXED_RE = re.compile(r"^([KkMGTP]?)(byte|hz)$", re.IGNORECASE)
_TIME_NS = {
    "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
    "s": 1e9, "second": 1e9,
}  # fmt: skip

# name -> label, for exports that print names: by section where the row has one (a metric can
# carry different labels in two sections, sm__cycles_active.avg), else the first label seen.
_NAME_TO_LABEL_IN: dict[tuple[str, str], str] = {(s, n): lb for (s, lb), n in LABEL_TO_NAME.items()}
_NAME_TO_LABEL: dict[str, str] = {}
for (_section, _label), _name in LABEL_TO_NAME.items():
    _NAME_TO_LABEL.setdefault(_name, _label)
# label -> name regardless of section, only where the label is unambiguous: section titles
# change between ncu versions more often than labels do.
_LABEL_ONLY: dict[str, str] = {}
for _label in {lb for _, lb in LABEL_TO_NAME}:
    _names = {n for (_, lb), n in LABEL_TO_NAME.items() if lb == _label}
    if len(_names) == 1:
        _LABEL_ONLY[_label] = _names.pop()


def _empty(table: str) -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series(dtype=object) for c in schema.BY_NAME[table].col_names if c != "report_id"}
    )


@dataclass(frozen=True)
class NcuParsed:
    """One ncu CSV as canonical rows, without report_id (the caller assigns it)."""

    kernels: pd.DataFrame
    metrics: pd.DataFrame
    rules: pd.DataFrame
    tool_version: str | None
    page: Page
    instances: pd.DataFrame = field(default_factory=lambda: _empty("ncu_metric_instances"))
    section_text: pd.DataFrame = field(default_factory=lambda: _empty("ncu_section_text"))
    source: pd.DataFrame = field(default_factory=lambda: _empty("ncu_source"))
    source_stalls: pd.DataFrame = field(default_factory=lambda: _empty("ncu_source_stalls"))


# Rows per table of an NcuParsed, in insertion order.
TABLES = (
    ("ncu_kernels", "kernels"),
    ("ncu_metrics", "metrics"),
    ("ncu_rules", "rules"),
    ("ncu_metric_instances", "instances"),
    ("ncu_section_text", "section_text"),
    ("ncu_source", "source"),
    ("ncu_source_stalls", "source_stalls"),
)


def sniff_ncu(path: Path) -> bool:
    """True when the file is ncu's output: its CSV, or only ncu's log lines (a failed run).

    A failed run counts as ncu so that parse_ncu, rather than a generic "unknown file" error,
    tells the user what ncu complained about. Only the content is looked at: ncu output arrives
    as .csv, .txt or whatever the shell redirect was called.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return False
    return sniff_head(head)


def parse_ncu(path: Path) -> NcuParsed:
    """Read an ncu CSV export (details or raw page, summary, source page) into canonical frames."""
    text = _read_text(path)
    header = _HEADER_RE.search(text)
    if header is None:
        if _SOURCE_RE.search(text):
            from .ncu_source import parse_source

            return parse_source(path, text)
        if _SESSION_RE.search(text):
            raise _session_error(path)
        raise _no_csv_error(path, text)
    rows = _csv_rows(path, text[header.start() :], text.count("\n", 0, header.start()) + 1)
    raw_lines = text[header.start() :].split("\n")
    blocks, logs = _blocks(rows)
    last_line = rows[-1][0]
    pages = {_page_of(head) for head, _ in blocks}
    if len(pages) > 1:
        raise InputError(
            f"{path} mixes ncu's {' and '.join(sorted(pages))} layouts; export each to its own "
            "file (`ncu -i REPORT --csv --page details`, `--page raw`, `--print-summary "
            "per-kernel`) and ingest them separately."
        )
    page: Page = pages.pop()
    parse = {"raw": _parse_raw, "details": _parse_details, "summary": _parse_summary}[page]
    first = rows[0][0]
    parts = [
        parse(path, head, body, _Where(last_line, raw_lines, first), i)
        for i, (head, body) in enumerate(blocks)
    ]
    kernels = pd.concat([p[0] for p in parts], ignore_index=True)
    if kernels.empty:
        raise InputError(
            f"{path} has ncu's CSV header but no kernel rows: ncu profiled no kernel (check the "
            "--kernel-name / --launch-skip filters) or the file was cut short; profile again."
        )
    frames = [pd.concat([p[i] for p in parts], ignore_index=True) for i in range(5)]
    frames = _number_launches(frames)
    return NcuParsed(
        kernels=canonical_frame(frames[0], "ncu_kernels"),
        metrics=canonical_frame(frames[1], "ncu_metrics"),
        rules=canonical_frame(frames[2], "ncu_rules"),
        tool_version=_tool_version(text[: header.start()] + "\n" + "\n".join(logs)),
        page=page,
        instances=canonical_frame(frames[3], "ncu_metric_instances"),
        section_text=canonical_frame(frames[4], "ncu_section_text"),
    )


def load_ncu(con: duckdb.DuckDBPyConnection, path: Path, report_id: int) -> dict[str, object]:
    """Parse `path` and append its rows under `report_id`, inside the caller's transaction."""
    parsed = parse_ncu(path)
    counts = insert_parsed(con, parsed, report_id)
    return {
        "tool_version": parsed.tool_version,
        "kernels": counts["ncu_kernels"],
        "metrics": counts["ncu_metrics"],
        "rules": counts["ncu_rules"],
        "activity_kinds": activity_kinds(counts),
    }


def insert_parsed(con: duckdb.DuckDBPyConnection, parsed: NcuParsed, report_id: int) -> dict[str, int]:
    """Append parsed rows under `report_id`, inside the caller's transaction; rows per table."""
    counts: dict[str, int] = {}
    for table, attr in TABLES:
        frame: pd.DataFrame = getattr(parsed, attr)
        counts[table] = len(frame)
        if not frame.empty:
            insert_frame(con, table, frame, report_id)
    return counts


def insert_frame(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame, report_id: int) -> None:
    """Append a frame of canonical columns to `table` under `report_id` (one bulk INSERT)."""
    cols = ", ".join(f'"{c}"' for c in frame.columns)
    view = f"_nsa_ingest_{table}"
    con.register(view, frame)
    try:
        con.execute(
            f'INSERT INTO "{table}" ("report_id", {cols}) SELECT $rid, {cols} FROM "{view}"',
            {"rid": report_id},
        )
    finally:
        con.unregister(view)


def activity_kinds(counts: dict[str, int]) -> list[str]:
    return [t for t in ("ncu_metrics", "ncu_rules", "ncu_source") if counts.get(t)]


# --- reading the text ------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc}).") from exc
    if b"\0" in data[:_SNIFF_BYTES]:
        raise InputError(
            f"{path} is a binary file, not an ncu CSV; if it is an .ncu-rep report, export it "
            "with `ncu -i REPORT --csv --page details > out.csv` and ingest that."
        )
    # A BOM starts the file, but Windows consoles also leave one wherever ncu's output begins.
    text = data.decode("utf-8", errors="replace").replace(_BOM, "")
    if not text.strip():
        raise InputError(f"{path} is empty; export the ncu report again with `ncu -i REPORT --csv`.")
    return text


def _no_csv_error(path: Path, text: str) -> InputError:
    """Why a file without ncu's CSV header cannot be ingested, in ncu's own words if it has any."""
    errors = [ln.strip() for ln in text.splitlines() if ln.lstrip().startswith("==ERROR==")]
    option = re.search(r"Option '(--[\w-]+)'", errors[0]) if errors else None
    if option:
        return InputError(
            f"{path} holds ncu's error instead of results: ncu refused `{option.group(1)}` "
            f"(ncu said: {errors[0]}); export again without that option, or with the page it "
            "supports, and ingest the new file."
        )
    if "No lineinfo available" in text and not _OTHER_HEADER_RE.search(text):
        return InputError(
            f"{path} is a source-page export without any source line: ncu said the kernels have no "
            "line info; export `ncu -i REPORT --csv --page source --print-source sass`, or build "
            "with `-lineinfo` and profile again."
        )
    if errors:
        return InputError(
            f"{path} is an ncu log without results (ncu said: {errors[0]}); fix that and "
            "profile again with `ncu --csv`."
        )
    other = _OTHER_HEADER_RE.search(text)
    if other:
        head = text[other.start() :].split("\n", 1)[0].strip()
        return InputError(
            f"{path} is an ncu CSV layout nsa does not know (header {head[:160]}); export the "
            "report with `ncu -i REPORT --csv --page details` (or `--page raw`) and ingest that."
        )
    if _LOG_RE.search(text):
        return InputError(
            f"{path} holds ncu's log lines but no CSV: ncu profiled no kernel or ran without "
            "--csv; profile again with `ncu --csv` (or export a report with `ncu -i REPORT --csv`)."
        )
    return InputError(
        f'{path} is not an ncu CSV (no `"ID","Process ID",...` or `--print-summary` header '
        "line); export one with "
        "`ncu -i REPORT --csv --page details` (or `--page raw`)."
    )


def _session_error(path: Path) -> InputError:
    return InputError(
        f"{path} is ncu's session page (`--page session`: launch settings, session and device "
        "attributes), which holds no kernel results; export `ncu -i REPORT --csv --page details` "
        "(or `--page raw`) and ingest that."
    )


def _csv_rows(path: Path, body: str, first_line: int) -> Rows:
    """Every non-empty CSV row with its line number; a quote left open at the end = a cut file."""
    reader = csv.reader(io.StringIO(body, newline=""), strict=True)
    rows: Rows = []
    try:
        start = 1
        for fields in reader:
            if fields:
                rows.append((first_line + start - 1, fields))
            start = reader.line_num + 1
    except csv.Error as exc:
        line = first_line + reader.line_num - 1
        if "end of data" in str(exc):
            raise _truncated(path, line) from exc
        raise InputError(f"{path}: line {line} is not valid CSV ({exc}); export it again.") from exc
    return rows


def _truncated(path: Path, line: int) -> InputError:
    return InputError(
        f"{path} ends in the middle of a row (line {line}): the CSV is truncated, probably "
        "copied or read while ncu was still writing it; export it again."
    )


def _blocks(rows: Rows) -> tuple[list[tuple[list[str], Rows]], list[str]]:
    """Split the rows at header lines; set aside ncu log lines that follow the CSV.

    Runs that profile several processes may print a header per process, each with its rows.
    """
    blocks: list[tuple[list[str], Rows]] = []
    logs: list[str] = []
    for line, fields in rows:
        if fields[:2] == ["ID", "Process ID"] or _is_summary_header(fields):
            blocks.append((fields, []))
        elif fields[0].startswith("=="):
            logs.append(",".join(fields))
        else:
            blocks[-1][1].append((line, fields))
    return blocks, logs


def _check_width(path: Path, body: Rows, width: int, last_line: int, what: str) -> None:
    for line, fields in body:
        if len(fields) < width:
            if line == last_line:
                raise _truncated(path, line)
            raise InputError(
                f"{path}: line {line} has {len(fields)} fields where ncu's {what} rows have "
                f"{width}; the file was edited or mixes other output into the CSV; export it again."
            )


def _check_row_kinds(path: Path, head: list[str], body: Rows, last_line: int) -> None:
    """Each details row is a metric row or a full-width rule row; the last may not stop short.

    A row cut after a complete field still parses as CSV, so a cut file is caught by comparing
    the last row with the width its kind has everywhere else in the file.
    """
    name_at = head.index("Metric Name")
    rule_at = head.index("Rule Name") if "Rule Name" in head else len(head)
    widths: dict[str, int] = {}
    kinds = []
    for line, fields in body:
        is_rule = len(fields) > rule_at and fields[rule_at] != ""
        if not is_rule and fields[name_at] == "":
            if line == last_line:
                raise _truncated(path, line)
            raise InputError(f"{path}: line {line} has neither a metric nor a rule; export it again.")
        kind = "rule" if is_rule else "metric"
        kinds.append(kind)
        if line != last_line:
            widths[kind] = max(widths.get(kind, 0), len(fields))
    line, fields = body[-1] if body else (0, [])
    if body and line == last_line:
        usual = len(head) if kinds[-1] == "rule" else widths.get("metric", 0)
        if len(fields) < usual:
            raise _truncated(path, line)


def _tool_version(text: str) -> str | None:
    for rx in _VERSION_RES:
        found = rx.search(text)
        if found:
            return found.group(1)
    return None


# --- the pages ---------------------------------------------------------------------------------

# kernels, metrics, rules, metric instances, section text: each with a `_block` column.
Parts = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]
_INSTANCE_COLS = [
    "launch_id",
    "metric_name",
    "metric_label",
    "instance",
    "instance_key",
    "unit",
    "value",
    "value_text",
]
_TEXT_COLS = [
    "launch_id",
    "section",
    "after_section",
    "entry",
    "seq",
    "item",
    "metric_label",
    "unit",
    "value",
    "text",
]


@dataclass(frozen=True)
class _Where:
    """Where a block's rows sit in the file: the last row's line, and the raw lines from the header
    on (line `first`), for text ncu prints between the rows."""

    last_line: int
    raw_lines: list[str]
    first: int

    def raw(self, line: int) -> str:
        return self.raw_lines[line - self.first].rstrip("\r")


def _is_summary_header(fields: list[str]) -> bool:
    """A `--print-summary` header: no ID column, kernels counted in `Invocations`."""
    return fields[:1] in (["Process ID"], ["Domain"]) and "Invocations" in fields and "Kernel Name" in fields


def _page_of(head: list[str]) -> Page:
    if _is_summary_header(head):
        return "summary"
    return "details" if "Metric Value" in head else "raw"


def _nvtx_cols(head: list[str]) -> list[str]:
    """The NVTX columns of a report captured with `--nvtx` (`thread Domain:Push/Pop_Range:...`)."""
    return [c for c in head if c not in _KERNEL_COLS and ("Range:" in c or c == "Domain")]


def _parse_details(path: Path, head: list[str], body: Rows, where: _Where, block: int) -> Parts:
    """Details page: one row per kernel x metric, plus rule rows when the header has rule columns.

    With `--print-details body|all` (a `Body Item Label` column) rows of body items and the text
    and tables ncu prints between the rows go to ncu_section_text.
    """
    missing = [c for c in ("ID", "Kernel Name", *_DETAILS_COLS) if c not in head]
    if missing:
        raise InputError(
            f"{path}: ncu details header lacks {', '.join(missing)}; export it again with "
            "`ncu -i REPORT --csv --page details`."
        )
    width = head.index("Metric Value") + 1
    body, extra = _split_body_lines(body, width, where) if _BODY_ITEM in head else (body, [])
    _check_width(path, body, width, where.last_line, "details")
    _check_row_kinds(path, head, body, where.last_line)
    df = _frame(head, body)
    kernels = _kernels(path, df, body, block)
    is_metric = df["Metric Name"] != ""
    is_item = df[_BODY_ITEM] != "" if _BODY_ITEM in head else pd.Series(False, index=df.index)
    m = df[is_metric & ~is_item]
    names, labels = _names_and_labels(m["Section Name"], m["Metric Name"])
    metrics, instances = _metric_rows(
        m["ID"], m["Section Name"], names, labels, m["Metric Unit"], m["Metric Value"]
    )
    if "Rule Name" in head:
        r = df[df["Rule Name"] != ""]
        rules = r[list(_RULE_COLS)].rename(columns=_RULE_COLS).replace({"": None})
        rules["launch_id"] = _ints(r["ID"])
        rules["est_speedup"] = _numbers(r.get("Estimated Speedup", pd.Series("", index=r.index)))
    else:
        rules = pd.DataFrame(columns=["launch_id", *_RULE_COLS.values(), "est_speedup"])
    text = _section_text(head, df[is_metric & is_item], body, extra, where)
    if body and body[-1][0] == where.last_line:
        _check_last_launch_complete(path, df.loc[is_metric, "ID"], df.loc[is_metric, "Section Name"])
    return _tag(block, kernels, metrics, rules, instances, text)


def _tag(block: int, *frames: pd.DataFrame) -> Parts:
    for frame in frames:
        frame["_block"] = block
    kernels, metrics, rules, instances, text = frames
    return kernels, metrics, rules, instances, text


def _split_body_lines(body: Rows, width: int, where: _Where) -> tuple[Rows, Rows]:
    """(CSV rows, body lines): with `--print-details`, ncu prints a section's text lines and its
    tables (a header line, then rows, all narrower than a details row) between the CSV rows.
    A narrow last row is left among the CSV rows: there it means the file was cut."""
    rows: Rows = []
    extra: Rows = []
    for line, fields in body:
        if len(fields) < width and line != where.last_line:
            extra.append((line, fields))
        else:
            rows.append((line, fields))
    return rows, extra


def _section_text(
    head: list[str], items: pd.DataFrame, body: Rows, extra: Rows, where: _Where
) -> pd.DataFrame:
    """ncu_section_text rows: body item metrics, and each run of lines ncu printed between rows.

    A run of lines belongs to the launch of the row before it. The CSV does not name its section:
    after `--print-details all` a table follows its own section's rows (NUMA Affinity's), but
    after `body`, or for a section with no rows at all (NVLink's text), the row before belongs to
    another one. So `section` stays NULL and `after_section` tells what was printed before.
    """
    frames = []
    if not items.empty:
        unit = items["Metric Unit"]
        conv = {u: base_unit(u) for u in unit.unique()}
        aggregate, _ = split_instances(items["Metric Value"])
        frames.append(
            pd.DataFrame(
                {
                    "launch_id": _ints(items["ID"]),
                    "section": items["Section Name"].replace({"": None}),
                    "entry": "item",
                    "item": items[_BODY_ITEM],
                    "metric_label": items["Metric Name"],
                    "unit": unit.map(lambda u: conv[u][0]),
                    "value": _numbers(aggregate.fillna("")) * unit.map(lambda u: conv[u][1]).astype(float),
                    "text": items["Metric Value"],
                    "_line": [body[int(i)][0] for i in items.index],
                }
            )
        )
    runs = _runs(head.index("Section Name"), body, extra, where)
    if runs:
        frames.append(pd.DataFrame(runs, columns=["launch_id", "after_section", "entry", "text", "_line"]))
    if not frames:
        return pd.DataFrame(columns=_TEXT_COLS)
    out = pd.concat(frames, ignore_index=True).sort_values("_line", kind="stable")
    out["seq"] = out.groupby("launch_id").cumcount()
    return out.drop(columns="_line").reset_index(drop=True)


def _runs(section_at: int, body: Rows, extra: Rows, where: _Where) -> list[list[object]]:
    """Consecutive body lines of one kind (text or table), each with the CSV row before it."""
    if not extra:
        return []
    rows = iter(body)
    prev: tuple[int, list[str]] | None = None
    current = next(rows, None)
    runs: list[tuple[list[int], tuple[int, list[str]] | None]] = []
    for line, _ in extra:
        while current is not None and current[0] < line:
            prev, current = current, next(rows, None)
        last = runs[-1][0] if runs else []
        if last and line == last[-1] + 1 and _is_text(where.raw(line)) == _is_text(where.raw(last[-1])):
            last.append(line)
        else:
            runs.append(([line], prev))
    out: list[list[object]] = []
    for lines, row in runs:
        if row is None:  # before the first row: not a section's
            continue
        launch = int(row[1][0])
        after = row[1][section_at] or None
        if _is_text(where.raw(lines[0])):
            out.append([launch, after, "text", "\n".join(where.raw(ln).strip() for ln in lines), lines[0]])
        else:
            out.append([launch, after, "table", "\n".join(where.raw(ln) for ln in lines), lines[0]])
    return out


def _is_text(raw: str) -> bool:
    """A text line of a section body; table lines are quoted CSV."""
    return not raw.startswith('"')


def _parse_raw(path: Path, head: list[str], body: Rows, where: _Where, block: int) -> Parts:
    """Raw page: one row per kernel, a column per metric name, a units row right after the header.

    Empty cells are metrics ncu did not collect for that kernel and produce no row.
    """
    has_units = bool(body) and body[0][1][0] == ""
    units = body[0][1] if has_units else [""] * len(head)
    data = body[1:] if has_units else body
    _check_width(path, data, len(head), where.last_line, "raw-page")
    df = _frame(head, data)
    kernels = _kernels(path, df, data, block)
    nvtx = set(_nvtx_cols(head))
    metric_cols = [c for c in head if c not in _KERNEL_COLS and c not in nvtx]
    long = df.melt(id_vars=["ID"], value_vars=metric_cols, var_name="metric", value_name="text")
    long = long[long["text"] != ""]
    unit_of = dict(zip(head, units, strict=False))
    metric = long["metric"]
    metrics, instances = _metric_rows(
        long["ID"],
        pd.Series(None, index=long.index, dtype=object),
        metric,
        metric.map(_NAME_TO_LABEL),
        metric.map(unit_of),
        long["text"],
    )
    rules = pd.DataFrame(columns=["launch_id", *_RULE_COLS.values(), "est_speedup"])
    return _tag(block, kernels, metrics, rules, instances, pd.DataFrame(columns=_TEXT_COLS))


def _parse_summary(path: Path, head: list[str], body: Rows, where: _Where, block: int) -> Parts:
    """`--print-summary per-kernel|per-gpu|per-nvtx`: one row per kernel x metric, over
    `Invocations` launches.

    There is no launch ID: a kernel's rows are consecutive and share every kernel column
    (process or NVTX range, device, name, block, grid, invocations), so a group starts where those
    change, or where a (section, metric) repeats within the current group. Its 0-based index in
    file order is the launch_id. `Average` gives value (and value_text); `Minimum` / `Maximum`
    give value_min / value_max, all in the row's unit.
    """
    missing = [c for c in _SUMMARY_COLS if c not in head]
    if missing:
        raise InputError(
            f"{path}: ncu summary header lacks {', '.join(missing)}; export it again with "
            "`ncu -i REPORT --csv --print-summary per-kernel`."
        )
    _check_width(path, body, len(head), where.last_line, "summary")
    nvtx = set(_nvtx_cols(head))
    key_at = [i for i, c in enumerate(head) if c in _KERNEL_COLS or c in nvtx]
    metric_at = (head.index("Section Name"), head.index("Metric Name"))
    ids: list[int] = []
    group, key, seen = -1, None, set[object]()
    for line, fields in body:
        metric = tuple(fields[i] for i in metric_at)
        if metric[1] == "":
            raise InputError(f"{path}: line {line} has no metric name; export it again.")
        row_key = tuple(fields[i] for i in key_at)
        if row_key != key or metric in seen:
            group, key, seen = group + 1, row_key, set()
        seen.add(metric)
        ids.append(group)
    df = _frame(head, body)
    df.insert(0, "ID", [str(i) for i in ids])
    kernels = _kernels(path, df, body, block)
    bad = _ints(df["Invocations"])
    if bad.isna().any() or (bad < 1).any():
        line = body[int((bad.isna() | (bad < 1)).to_numpy().argmax())][0]
        raise InputError(f"{path}: line {line} has no launch count in `Invocations`; export it again.")
    if body and body[-1][0] == where.last_line:
        _check_last_launch_complete(path, df["ID"], df["Section Name"])
    names, labels = _names_and_labels(df["Section Name"], df["Metric Name"])
    metrics, instances = _metric_rows(
        df["ID"],
        df["Section Name"],
        names,
        labels,
        df["Metric Unit"],
        df["Average"],
        mins=df["Minimum"],
        maxs=df["Maximum"],
    )
    rules = pd.DataFrame(columns=["launch_id", *_RULE_COLS.values(), "est_speedup"])
    return _tag(block, kernels, metrics, rules, instances, pd.DataFrame(columns=_TEXT_COLS))


def _frame(head: list[str], body: Rows) -> pd.DataFrame:
    width = len(head)
    cells = [(f + [""] * (width - len(f)))[:width] for _, f in body]
    return pd.DataFrame(cells, columns=head, dtype=object)


def _kernels(path: Path, df: pd.DataFrame, body: Rows, block: int) -> pd.DataFrame:
    """One row per launch; the NVTX columns, joined, go to `nvtx` (kept where ncu_kernels has it)."""
    ids = _ints(df["ID"])
    if ids.isna().any():
        line = body[int(ids.isna().to_numpy().argmax())][0]
        raise InputError(f"{path}: line {line} has no numeric launch ID; export the report again.")
    first = df.loc[~ids.duplicated()]
    out = pd.DataFrame({"launch_id": ids[first.index]})
    for col, target in _KERNEL_COLS.items():
        if target and target != "launch_id":
            values = first[col] if col in first else pd.Series(None, index=first.index, dtype=object)
            out[target] = _ints(values) if target in _INT_KERNEL_COLS else values.replace({"": None})
    push_pop = [c for c in df.columns if "Push/Pop_Range" in c]
    if push_pop:
        out["nvtx_ranges"] = first[push_pop[0]].map(_nvtx_ranges)
    elif "Domain" in df.columns:  # --print-summary per-nvtx: the domain has its own column
        ranges = [c for c in df.columns if c.startswith("Range:")]
        if ranges:
            pairs = zip(first[ranges[0]], first["Domain"], strict=True)
            out["nvtx_ranges"] = [_nvtx_ranges(cell, domain) for cell, domain in pairs]
    return out


# One NVTX range in ncu's CSV: `domain:name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg` (no
# `domain:` in a per-nvtx summary, whose Domain column says it); names may hold colons.
_NVTX_ENTRY_RE = re.compile(r'"([^"]*)"')
_NVTX_TAIL = 6
_DEFAULT_DOMAIN = "<default domain>"


def _nvtx_ranges(cell: str, domain: str | None = None) -> str | None:
    """ncu_kernels.nvtx_ranges from an NVTX cell: outermost first, joined by ` > `, the default
    domain left out and any other written `domain:range`."""
    names = []
    for entry in _NVTX_ENTRY_RE.findall(cell):
        parts = entry.split(":")
        if domain is None:
            dom, parts = parts[0], parts[1:]
        else:
            dom = domain
        name = ":".join(parts[: len(parts) - _NVTX_TAIL]) if len(parts) > _NVTX_TAIL else parts[0]
        names.append(name if dom == _DEFAULT_DOMAIN else f"{dom}:{name}")
    return " > ".join(names) or None


def _number_launches(frames: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """Keep ncu's launch ID unless several headers restart it; then number launches in file order."""
    kernels = frames[0]
    if not kernels["launch_id"].duplicated().any():
        return frames
    key = pd.MultiIndex.from_frame(kernels[["_block", "launch_id"]])
    new_id = pd.Series(range(len(kernels)), index=key)
    for frame in frames:
        if frame.empty:
            continue
        idx = pd.MultiIndex.from_frame(frame[["_block", "launch_id"]].astype("int64"))
        frame["launch_id"] = new_id.reindex(idx).to_numpy()
    return frames


def _check_last_launch_complete(path: Path, ids: pd.Series, sections: pd.Series) -> None:
    """A file cut at a row boundary parses, but its last launch stops early: every other launch
    of the block ends with the same section, and the last one has fewer of its metric rows.

    `ids` and `sections` are the launch and section of each metric row of the file's last block,
    in file order.
    """
    order = _ints(ids).astype("int64")
    launches = order.drop_duplicates().tolist()
    if len(launches) < 2:
        return
    sections = sections.fillna("")
    last_section = sections.groupby(order, sort=False).last()
    ends = set(last_section.loc[launches[:-1]])
    if len(ends) != 1:
        return
    final = ends.pop()
    counts = (sections == final).groupby(order, sort=False).sum()
    if counts.loc[launches[-1]] < counts.loc[launches[:-1]].min():
        raise InputError(
            f"{path} ends early: its last kernel (launch {launches[-1]}) has "
            f"{int(counts.loc[launches[-1]])} metric rows of section {final or '(none)'!r} where "
            f"every other kernel has at least {int(counts.loc[launches[:-1]].min())}; the CSV is "
            "truncated (cut at a row boundary); export it again."
        )


# --- values ------------------------------------------------------------------------------------


def _names_and_labels(sections: pd.Series, cells: pd.Series) -> tuple[pd.Series, pd.Series]:
    """The Metric Name cell holds a name, a label, or `label (name)`: return both when known."""
    cache: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for key in set(zip(sections, cells, strict=True)):
        _section, cell = key
        if _METRIC_NAME_RE.match(cell):
            cache[key] = (cell, _NAME_TO_LABEL_IN.get(key) or _NAME_TO_LABEL.get(cell))
        elif both := _LABEL_NAME_RE.match(cell):
            cache[key] = (both.group(2), both.group(1))
        else:
            cache[key] = (LABEL_TO_NAME.get(key) or _LABEL_ONLY.get(cell), cell)
    pairs = [cache[k] for k in zip(sections, cells, strict=True)]
    names = pd.Series([p[0] for p in pairs], index=cells.index, dtype=object)
    labels = pd.Series([p[1] for p in pairs], index=cells.index, dtype=object)
    return names, labels


def _metric_rows(
    ids: pd.Series,
    sections: pd.Series,
    names: pd.Series,
    labels: pd.Series,
    units: pd.Series,
    texts: pd.Series,
    mins: pd.Series | None = None,
    maxs: pd.Series | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metric rows, instance rows) in base units; mins / maxs are a summary's Minimum / Maximum.

    A value followed by its instances (`--print-metric-instances`) keeps the aggregate, as the
    export without instances prints it; the instances become ncu_metric_instances rows.
    """
    conv = {u: base_unit(u) for u in units.unique()}
    factor = units.map(lambda u: conv[u][1]).astype(float)
    base = units.map(lambda u: conv[u][0])
    aggregate, found = split_instances(texts)
    out = pd.DataFrame(
        {
            "launch_id": _ints(ids),
            "section": sections.replace({"": None}),
            "metric_name": names,
            "metric_label": labels,
            "unit": base,
            "value": _numbers(aggregate.fillna("")) * factor,
            "value_text": aggregate,
        }
    )
    if mins is not None and maxs is not None:
        out["value_min"] = _numbers(mins) * factor
        out["value_max"] = _numbers(maxs) * factor
    rows = found["row"]
    instances = pd.DataFrame(
        {
            "launch_id": out["launch_id"].loc[rows].to_numpy(),
            "metric_name": names.loc[rows].to_numpy(),
            "metric_label": labels.loc[rows].to_numpy(),
            "instance": found["instance"].to_numpy(),
            "instance_key": found["instance_key"].to_numpy(),
            "unit": base.loc[rows].to_numpy(),
            "value": (_numbers(found["value_text"]) * factor.loc[rows].to_numpy()).to_numpy(),
            "value_text": found["value_text"].to_numpy(),
        },
        columns=_INSTANCE_COLS,
    )
    return out, instances


def _numbers(texts: pd.Series) -> pd.Series:
    """Numbers in either locale (`2,608,823,529.41` or `2608823529.41`); anything else -> NaN."""
    s = texts.astype(str).str.strip()
    s = s.where(~s.str.match(_EN_US_NUMBER_RE), s.str.replace(",", "", regex=False))
    return pd.to_numeric(s.where(s.str.match(_NUMBER_RE)), errors="coerce").astype(float)


def _ints(texts: pd.Series) -> pd.Series:
    values = _numbers(texts)
    whole = values.where(values == values.round())
    return whole.astype("Int64")


def base_unit(unit: str) -> tuple[str | None, float]:
    """(base unit, factor to multiply values by): ns, byte, hz, byte/s, x/s; others unchanged.

    ncu's byte prefixes are decimal (32,768 byte prints as 32.77 Kbyte), and `cycle/nsecond`
    is a clock rate, so it becomes hz.
    """
    unit = unit.strip()
    if not unit:
        return None, 1.0
    if "/" not in unit:
        return _base_simple(unit)
    num, den = unit.split("/", 1)
    num_unit, num_factor = _base_simple(num)
    if den in _TIME_NS:
        per_second = num_factor * 1e9 / _TIME_NS[den]
        return ("hz" if num_unit == "cycle" else f"{num_unit}/s"), per_second
    den_unit, den_factor = _base_simple(den)
    return f"{num_unit}/{den_unit}", num_factor / den_factor


def _base_simple(unit: str) -> tuple[str, float]:
    if unit in _TIME_NS:
        return "ns", _TIME_NS[unit]
    prefixed = _PREFIXED_RE.match(unit)
    if prefixed:
        return prefixed.group(2).lower(), _PREFIX[prefixed.group(1)]
    return unit, 1.0


def canonical_frame(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """Columns of `table` (less report_id) in schema order, with pandas types DuckDB maps back."""
    out = pd.DataFrame(index=frame.index)
    for col in schema.BY_NAME[table].cols:
        if col.name == "report_id":
            continue
        values = frame[col.name] if col.name in frame else pd.Series(None, index=frame.index)
        if col.type in ("INTEGER", "BIGINT"):
            out[col.name] = pd.array(values, dtype="Int32" if col.type == "INTEGER" else "Int64")
        elif col.type == "DOUBLE":
            out[col.name] = values.astype(float)
        else:
            out[col.name] = values.astype(object).where(values.notna(), None)
    return out.reset_index(drop=True)
