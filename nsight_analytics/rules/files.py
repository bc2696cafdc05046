"""Rules written as TOML files: a team's own checks, run by `nsa findings` beside the built-in ones.

A rule pack is a `.toml` file of `[[rule]]` tables. Each rule runs one library query (built-in,
or one of the team's `.sql` files), judges its rows with SQL boolean conditions that DuckDB
evaluates (no Python is ever evaluated), and words the worst row as a finding:

    [[rule]]
    id = "long-idle-gap"
    summary = "One idle gap on a GPU is long enough to matter."
    query = "gaps"                          # the query whose rows are judged
    params = { min_gap_ns = 100000 }        # its parameters (report_id is nsa's)
    needs = ["kernel"]                      # activity kinds a report must hold (default: any)
    title = "GPU {device_id} idle for {gap_ns} at once"
    message = "The longest gap lasts {gap_ns}, over {long_gap_ns} ..."
    fix = "Look at what the host did before {start_ns} ..."
    savings = "gap_ns"                      # optional: a column (ns) the fix could give back

    [rule.thresholds]                       # user-tunable numbers: --set, [thresholds], [long-idle-gap]
    long_gap_ns = { default = 5000000, unit = "ns", doc = "A gap this long is a warning." }

    [rule.severity]                         # one condition per severity, over one row
    warning = "gap_ns >= $long_gap_ns"
    critical = "gap_ns >= 10 * $long_gap_ns"

A condition is one SQL expression over the query's columns; `$name` is a threshold (the rule's
own, or a built-in rule's, e.g. `$idle_share_warning`). The query must have a `report_id`
column: the rule judges each report, and files one finding per report, from the row at the
highest severity (ties: the largest saving, then the query's row order). `{placeholder}`s in
title, message and fix name columns or thresholds, written in their unit (a column's contract
unit: ns as a duration, byte as a size, GB/s, %; a fraction threshold as a percentage);
`{name:.1%}` formats the raw value. The finding's evidence is the row, in base units, and the
thresholds its conditions read.

A file with an error stops nsa with one sentence naming the file, the line and the field.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli is the same parser (a dependency on 3.10 only)
    import tomli as tomllib  # type: ignore[no-redef]

from .. import queries
from ..errors import InputError, QueryError
from ..params import connect
from ..units import count, dur, pct, size
from .context import Context
from .model import ACTIVITY_KINDS, SEVERITIES, SEVERITY_RANK, UNIT_RANGES, Finding, Rule, Threshold

FIELDS = {
    "id": "the rule's id, as `nsa rules` lists it and --config names it (lowercase words and dashes)",
    "summary": "what the rule looks for, one sentence (default: the title)",
    "query": "the library query whose rows are judged",
    "params": "the query's parameters",
    "needs": "activity kinds a report must hold for the rule to run on it",
    "thresholds": "the rule's tunable numbers: name = { default, unit, doc }",
    "severity": "severity = SQL condition over one row: info, warning, critical",
    "title": "the finding's title, with {placeholders}",
    "message": "the finding's sentence, with {placeholders}",
    "fix": "what to do, with {placeholders}",
    "savings": "a column (ns) the fix could give back",
    "order": "where `nsa rules` lists the rule (built-in rules: 10 to 1000)",
}
REQUIRED = ("id", "query", "severity", "title", "message", "fix")
_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_NAME = re.compile(r"^[A-Za-z_]\w*$")
_PARAM_USE = re.compile(r"\$([A-Za-z_]\w*)")
_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


class RuleFileError(InputError):
    """A rule pack that cannot be read: the message names the file, the line and the field."""


@dataclass(frozen=True)
class _Spec:
    """A rule pack's rule, checked: what its check function needs at run time."""

    id: str
    query: queries.Query
    params: dict[str, Any]
    conditions: dict[str, str]  # severity -> SQL expression, as DuckDB's parser wrote it back
    title: str
    message: str
    fix: str
    savings: str | None
    units: dict[str, str]  # placeholder name -> unit, for formatting


def load_folder(folder: str | Path, known: Sequence[Rule] = ()) -> list[Rule]:
    """The rules of every `.toml` file under `folder` (recursively, by path). `known`: the rules
    already registered, whose ids the new ones must not take and whose thresholds they may use."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise RuleFileError(f"rule folder {folder} is not a directory; give a folder of .toml rule packs.")
    found: list[Rule] = []
    for path in sorted(root.rglob("*.toml")):
        found += load_file(path, [*known, *found])
    return found


def load_file(path: str | Path, known: Sequence[Rule] = ()) -> list[Rule]:
    """The rules of one rule pack (see the module doc); RuleFileError names what is wrong."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleFileError(f"cannot read rule file {p}: {exc.strerror or exc}.") from exc
    except UnicodeDecodeError as exc:
        raise RuleFileError(f"{p}: not a text file (UTF-8): {exc.reason}.") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_AT.search(str(exc))
        where = f"{p}:{m[1]}:{m[2]}" if m else str(p)
        raise RuleFileError(f"{where}: not valid TOML: {_TOML_AT.sub('', str(exc)).strip()}.") from exc
    lines = _Lines(p, text)
    extra = sorted(set(data) - {"rule"})
    if extra:
        raise lines.error(
            None, extra[0], f"unknown table or key {extra[0]!r}; a rule pack holds [[rule]] tables"
        )
    entries = data.get("rule")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise lines.error(None, "rule", "a rule pack holds one or more [[rule]] tables")
    taken = {r.id: r for r in known}
    shared = {t.name: t for r in known for t in r.declared}
    rules: list[Rule] = []
    for i, entry in enumerate(entries):
        r = _rule(entry, i, lines, taken, shared)
        taken[r.id] = r
        rules.append(r)
    return rules


class _Lines:
    """Where a rule's field is written in its file (tomllib gives no positions for values)."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.starts = [i for i, s in enumerate(self.lines) if re.match(r"^\s*\[\[\s*rule\s*\]\]", s)]

    def line(self, index: int | None, field: str) -> int:
        """1-based line of `field` (dotted: `severity.warning`) in the index-th rule, else of
        its `[[rule]]` header (a missing field), else 1."""
        if index is None or index >= len(self.starts):
            hits = [n for n, s in enumerate(self.lines) if re.match(rf"^\s*\[*\s*{re.escape(field)}\b", s)]
            return hits[0] + 1 if hits else 1
        lo = self.starts[index]
        hi = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.lines)
        for part in reversed(field.split(".")):
            key = re.escape(part)
            pattern = re.compile(rf"^\s*\[\s*rule\.(?:[\w.-]+\.)?{key}\s*\]|(?:^|[\s{{,.])\"?{key}\"?\s*=")
            for n in range(lo, hi):
                if pattern.search(self.lines[n].split("#", 1)[0]):
                    return n + 1
        return lo + 1

    def error(self, index: int | None, field: str, why: str, rule_id: str | None = None) -> RuleFileError:
        who = f"rule {rule_id}, " if rule_id else ""
        return RuleFileError(f"{self.path}:{self.line(index, field)}: {who}field {field}: {why}.")


def _rule(
    entry: dict[str, Any], i: int, lines: _Lines, taken: dict[str, Rule], shared: dict[str, Threshold]
) -> Rule:
    rid = entry.get("id") if isinstance(entry.get("id"), str) else None

    def fail(field: str, why: str) -> RuleFileError:
        return lines.error(i, field, why, rid)

    unknown = [k for k in entry if k not in FIELDS]
    if unknown:
        raise fail(unknown[0], f"unknown field; a rule's fields: {', '.join(FIELDS)}")
    for name in REQUIRED:
        if name not in entry:
            raise fail(name, f"missing ({FIELDS[name]})")
    for name in ("id", "query", "title", "message", "fix", "summary", "savings"):
        if name in entry and not (isinstance(entry[name], str) and entry[name].strip()):
            raise fail(name, "wants a non-empty string")
    if not _ID.match(entry["id"]):
        raise fail("id", f"{entry['id']!r} is not lowercase words joined by dashes (e.g. long-idle-gap)")
    if entry["id"] in taken:
        raise fail(
            "id", f"rule {entry['id']} exists already ({_origin(taken[entry['id']])}); choose another id"
        )
    try:
        q = queries.get(entry["query"])
    except QueryError as exc:
        raise fail("query", f"no query named {entry['query']!r} (`nsa query --list` lists them)") from exc
    columns = {c.name: c for c in q.columns}
    if "report_id" not in columns:
        raise fail(
            "query", f"query {q.name} has no report_id column: a file rule judges one report at a time"
        )
    params = _params(entry.get("params", {}), q, fail)
    declared = _thresholds(entry.get("thresholds", {}), shared, params, fail)
    own = {t.name: t for t in declared}
    severity = entry["severity"]
    if not isinstance(severity, dict) or not severity:
        raise fail(
            "severity", 'wants a table: severity = SQL condition, e.g. warning = "gap_ns > $long_gap_ns"'
        )
    conditions: dict[str, str] = {}
    used: dict[str, Threshold] = {}
    for level, cond in severity.items():
        field = f"severity.{level}"
        if level not in SEVERITY_RANK:
            raise fail(field, f"{level!r} is no severity; use {', '.join(SEVERITIES)}")
        if not isinstance(cond, str) or not cond.strip():
            raise fail(field, "wants a SQL condition over the query's columns, as a string")
        for name in _PARAM_USE.findall(cond):
            t = own.get(name) or shared.get(name)
            if t is None:
                raise fail(field, f"${name} is no threshold: declare it under [rule.thresholds]")
            used[name] = t
        conditions[level] = _condition(cond, q, fail, field)
    declared = [*declared, *(t for n, t in used.items() if n not in own)]
    units = {c.name: c.unit or "" for c in q.columns}
    units.update({t.name: t.unit for t in declared})
    for name in ("title", "message", "fix"):
        for placeholder in _placeholders(entry[name], name, fail):
            if placeholder not in units:
                raise fail(name, f"{{{placeholder}}} is neither a column of query {q.name} nor a threshold")
    savings = entry.get("savings")
    if savings is not None and columns.get(savings) is None:
        raise fail("savings", f"{savings!r} is not a column of query {q.name}")
    if savings is not None and columns[savings].unit != "ns":
        raise fail("savings", f"column {savings} is not in ns (its contract says {columns[savings].doc!r})")
    needs = entry.get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        raise fail("needs", "wants a list of activity kinds")
    bad = sorted(set(needs) - ACTIVITY_KINDS)
    if bad:
        raise fail(
            "needs", f"{', '.join(bad)}: not activity kinds; choose among {', '.join(sorted(ACTIVITY_KINDS))}"
        )
    order = entry.get("order", 2000)
    if not isinstance(order, int) or isinstance(order, bool):
        raise fail("order", "wants a whole number")
    spec = _Spec(
        entry["id"], q, params, conditions, entry["title"], entry["message"], entry["fix"], savings, units
    )
    check = _check(spec)
    summary = entry.get("summary", entry["title"])
    check.__doc__ = (
        f"{summary}\n\nRule file {lines.path}:{lines.line(i, 'id')}; judges query {q.name}: "
        + "; ".join(
            f"{lvl} when {c}" for lvl, c in sorted(conditions.items(), key=lambda kv: -SEVERITY_RANK[kv[0]])
        )
        + f".\n\nFix: {entry['fix']}"
    )
    severities = tuple(s for s in SEVERITIES if s in conditions)
    return Rule(
        spec.id, tuple(frozenset({n}) for n in needs), severities, tuple(declared), check, order, (q.name,)
    )


def _origin(r: Rule) -> str:
    doc = r.doc
    m = re.search(r"Rule file (\S+):", doc)
    return (
        f"in {m[1]}"
        if m
        else "a built-in rule"
        if r.check.__module__.startswith("nsight_analytics")
        else "a plugin's rule"
    )


def _params(values: Any, q: queries.Query, fail: Any) -> dict[str, Any]:
    if not isinstance(values, dict):
        raise fail("params", "wants a table: params = { name = value }")
    known = {p.name: p for p in q.params}
    out: dict[str, Any] = {}
    for name, value in values.items():
        field = f"params.{name}"
        if name == "report_id":
            raise fail(field, "nsa sets report_id: the rule judges each report")
        if name not in known:
            raise fail(
                field, f"query {q.name} has no parameter {name}; its parameters: {', '.join(known) or 'none'}"
            )
        try:
            out[name] = known[name].convert(value)
        except QueryError as exc:
            raise fail(field, str(exc).rstrip(".")) from exc
    return out


def _thresholds(
    values: Any, shared: dict[str, Threshold], params: dict[str, Any], fail: Any
) -> list[Threshold]:
    if not isinstance(values, dict):
        raise fail("thresholds", 'wants a table: name = { default = 1, unit = "ns", doc = "..." }')
    out: list[Threshold] = []
    for name, spec in values.items():
        field = f"thresholds.{name}"
        if not _NAME.match(name):
            raise fail(field, "a threshold's name is one word (letters, digits, _)")
        if not isinstance(spec, dict) or set(spec) - {"default", "unit", "doc"} or "default" not in spec:
            raise fail(field, 'wants { default = NUMBER, unit = "...", doc = "..." }')
        default, unit, doc = spec["default"], spec.get("unit", "count"), spec.get("doc", "")
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            raise fail(field, f"default wants a number, got {default!r}")
        if unit not in UNIT_RANGES:
            raise fail(field, f"unit {unit!r} is not one of {', '.join(UNIT_RANGES)}")
        if not isinstance(doc, str) or not doc.strip():
            raise fail(field, "doc wants a sentence: what the threshold means (`nsa rules` shows it)")
        t = Threshold(name, default, unit, doc.strip())
        low, high = t.bounds()
        if (low is not None and default < low) or (high is not None and default > high):
            raise fail(field, f"default {default} is outside what a {unit} threshold takes")
        if name in shared and shared[name] != t:
            raise fail(
                field, f"threshold {name} is declared by another rule: use it as ${name} without declaring it"
            )
        if name in params:
            raise fail(field, f"{name} is also a parameter of the query; give the threshold another name")
        out.append(t)
    return out


def _condition(text: str, q: queries.Query, fail: Any, field: str) -> str:
    """The condition as one SQL expression (DuckDB's parser writes it back: nothing but one
    expression reaches the SQL), checked against the query's declared columns."""
    try:
        expr = str(duckdb.SQLExpression(text))
    except duckdb.Error as exc:
        raise fail(field, f"not one SQL expression: {str(exc).splitlines()[0]}") from exc
    cols = ", ".join(f"NULL::{c.type} AS {c.name}" for c in q.columns)
    con = connect()
    try:
        con.execute(f"PREPARE nsa_check AS SELECT CAST(({expr}) AS BOOLEAN) FROM (SELECT {cols}) AS q")
    except duckdb.Error as exc:
        raise fail(
            field,
            f"{str(exc).splitlines()[0]} (columns of query {q.name}: {', '.join(c.name for c in q.columns)})",
        ) from exc
    finally:
        con.close()
    return expr


def _placeholders(text: str, field: str, fail: Any) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise fail(field, f"{exc} (write a literal brace as {{{{ or }}}})") from exc
    names = []
    for _, name, _spec, conv in parsed:
        if name is None:
            continue
        if not _NAME.match(name) or conv:
            raise fail(field, f"{{{name}}}: a placeholder is a column or threshold name, optionally :format")
        names.append(name)
    return names


def _check(spec: _Spec) -> Any:
    levels = sorted(spec.conditions.items(), key=lambda kv: -SEVERITY_RANK[kv[0]])
    case = " ".join(f"WHEN ({cond}) THEN '{level}'" for level, cond in levels)
    # the query's parameters as $nsa_p_NAME: none can take a name Context.sql binds itself
    body = _PARAM_USE.sub(lambda m: f"$nsa_p_{m[1]}", spec.query.sql)
    sql = (
        f"SELECT * FROM (SELECT q.*, CASE {case} END AS nsa_severity FROM ({body}) AS q) "
        "WHERE nsa_severity IS NOT NULL"
    )
    thresholds = sorted({n for c in spec.conditions.values() for n in _PARAM_USE.findall(c)})

    def check(ctx: Context, rid: int) -> list[Finding]:
        values = {**spec.params}
        if any(p.name == "report_id" for p in spec.query.params):
            values["report_id"] = ctx.report_id
        bound = {f"nsa_p_{k}": v for k, v in spec.query.bind(values).items()}
        bound.update({name: ctx[name] for name in thresholds})
        rows = ctx.sql(f"rule-file:{spec.id}", sql, rid, **bound)
        if not rows:
            return []
        cols = [c for c in rows.columns if c != "nsa_severity"]

        def rank(item: tuple[int, Any]) -> tuple[Any, ...]:
            n, r = item
            saving = getattr(r, spec.savings) if spec.savings else None
            return (-SEVERITY_RANK[r.nsa_severity], saving is None, -(saving or 0), n)

        _, best = min(enumerate(rows), key=rank)
        row = {c: _plain(getattr(best, c)) for c in cols}
        words = {**{k: v for k, v in ctx.config.items() if k in spec.units}, **row}
        saving = row.get(spec.savings) if spec.savings else None
        return [
            Finding(
                spec.id,
                best.nsa_severity,
                rid,
                _format(spec.title, words, spec.units),
                _format(spec.message, words, spec.units),
                _format(spec.fix, words, spec.units),
                {**row, **{name: ctx[name] for name in thresholds}},
                int(saving) if saving is not None else None,
            )
        ]

    return check


def _plain(value: Any) -> Any:
    """A row value as JSON takes it (evidence is printed by `--format json`)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _format(text: str, values: dict[str, Any], units: dict[str, str]) -> str:
    out = []
    for literal_text, name, spec, _ in string.Formatter().parse(text):
        out.append(literal_text)
        if name is None:
            continue
        value = values.get(name)
        out.append(
            format(value, spec) if spec and value is not None else in_words(value, units.get(name, ""))
        )
    return "".join(out)


def in_words(value: Any, unit: str) -> str:
    """A number in its unit, as a finding's sentence writes it."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if unit == "ns":
        return dur(value)
    if unit == "byte":
        return size(value)
    if unit == "fraction":
        return pct(value)
    if unit in ("%", "points"):
        return f"{value:.3g}%"
    if unit == "GB/s":
        return f"{value:.3g} GB/s"
    if unit == "ratio":
        return f"{value:.3g}x"
    if isinstance(value, int) or float(value).is_integer():
        return count(value)
    return f"{value:.3g}"


def load_folders(folders: Iterable[str | Path], known: Sequence[Rule] = ()) -> list[Rule]:
    """`load_folder` over several folders, each rule's id unique across all of them."""
    found: list[Rule] = []
    for folder in folders:
        found += load_folder(folder, [*known, *found])
    return found
