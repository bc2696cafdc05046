"""Metric instances as `--print-metric-instances values|details` prints them after the value.

ncu writes an instanced metric's aggregate, then its instances in parentheses:

- values:  `44 (44)`, `1,024 (4; 4; 8)` (or `(4;4;8)`), `1 (0-15)`, or only `(0.00; 0; 0.16)` on the raw page
  when the metric has no aggregate (PM sampling counters);
- details: `29.95 (0: 29.95)` or `(0 (+0): 0.00; 1795530245220513216 (+1795530245220513216): 0)`,
  each instance prefixed by its correlation id (a PC, an SM, a timestamp) and, in parentheses, its
  offset from the first one.

The aggregate is what the export without the option prints; the instances go to
ncu_metric_instances. Everything else (`CachePreferNone`, `(128, 1, 1)` launch columns) passes
through unchanged.
"""

from __future__ import annotations

import re

import pandas as pd

# `aggregate (instances)`: an aggregate without parentheses of its own, then one parenthesized list.
_WITH_AGGREGATE_RE = re.compile(r"^([^()]*?\S) \((.*)\)$", re.DOTALL)
# `(instances)` alone: a list, a keyed instance, or one value without `, ` (so that a launch
# dimension such as `(128, 1, 1)` stays a value).
_ONLY_INSTANCES_RE = re.compile(
    r"^\(((?:[^;]*;\s*)+[^;]*|-?\d+(?: \(\+?-?\d+\))?: .*|(?:(?!, )[^;()])+)\)$", re.DOTALL
)
_SEPARATOR_RE = re.compile(r";\s*")
# A details-form instance: `key: value` or `key (+offset): value`.
_KEYED_RE = re.compile(r"^(-?\d+)(?: \(\+?-?\d+\))?: (.*)$", re.DOTALL)


def split_instances(texts: pd.Series) -> tuple[pd.Series, pd.DataFrame]:
    """(aggregate texts, instances): instances has the row's index label as `row`, then
    `instance` (0-based), `instance_key` (None in the values form) and `value_text`.

    A cell with instances but no aggregate gets None as its aggregate text.
    """
    aggregates = texts.copy()
    rows: list[tuple[object, int, str | None, str]] = []
    candidates = texts[texts.str.endswith(")", na=False)]
    for label, cell in candidates.items():
        parsed = _parse(str(cell))
        if parsed is None:
            continue
        aggregate, parts = parsed
        aggregates.at[label] = aggregate
        rows += [(label, i, key, value) for i, (key, value) in enumerate(parts)]
    frame = pd.DataFrame(rows, columns=["row", "instance", "instance_key", "value_text"])
    return aggregates, frame


def _parse(cell: str) -> tuple[str | None, list[tuple[str | None, str]]] | None:
    with_aggregate = _WITH_AGGREGATE_RE.match(cell)
    if with_aggregate:
        aggregate, inner = with_aggregate.group(1), with_aggregate.group(2)
    else:
        only = _ONLY_INSTANCES_RE.match(cell)
        if only is None:
            return None
        aggregate, inner = None, only.group(1)
    parts = _SEPARATOR_RE.split(inner)
    keyed = [_KEYED_RE.match(p) for p in parts]
    if all(keyed):
        return aggregate, [(m.group(1), m.group(2)) for m in keyed if m]
    return aggregate, [(None, p) for p in parts]
