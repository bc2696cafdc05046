"""Findings: rules that turn query results into ranked, evidenced advice.

    from nsight_analytics.rules import run_rules
    for f in run_rules(con):            # ranked: est. savings, then severity
        print(f.severity, f.title)

One rule per module in `checks/`, found by `discovery` (adding a rule is adding a file; see
docs/rules.md). A rule declares the activity kinds it needs and its thresholds (`model`); the
`engine` runs it on every report that has that data and ranks the findings; `config` builds
the thresholds table from the rules and reads TOML / --set overrides. Shared pieces: `context`
(what a check sees), `copies` and `ncu` (helpers of several rules), `thresholds` (thresholds
several rules read), `units`. Rules read library queries and canonical tables; nothing here
imports click.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import ConfigError, load_config
from .model import GPU_ACTIVITY, SEVERITIES, Finding, Rule, Threshold, rule

if TYPE_CHECKING:
    from .config import DEFAULTS
    from .discovery import discover
    from .engine import rank_key, rules, run_rules


def __getattr__(name: str) -> Any:
    # These import every rule module: only when rules are run or listed, not when `nsa query`
    # merely parses `-p name=value` with config.parse_assignments.
    if name in ("rank_key", "rules", "run_rules"):
        from . import engine

        return getattr(engine, name)
    if name == "discover":
        from .discovery import discover

        return discover
    if name == "DEFAULTS":
        from .config import table

        return table()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULTS",
    "GPU_ACTIVITY",
    "SEVERITIES",
    "ConfigError",
    "Finding",
    "Rule",
    "Threshold",
    "discover",
    "load_config",
    "rank_key",
    "rule",
    "rules",
    "run_rules",
]
