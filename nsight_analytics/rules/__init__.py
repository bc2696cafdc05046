"""Findings: rules that turn query results into ranked, evidenced advice.

    from nsight_analytics.rules import run_rules
    for f in run_rules(con):            # ranked: est. savings, then severity
        print(f.severity, f.title)

One module per topic: `model` (Finding, registry), `config` (thresholds), `nsys_rules`,
`copy_rules`, `kernel_rules`, `ncu_rules`, `engine` (run and rank), `render` (text/markdown/json).
Rules read library queries and canonical tables; nothing here imports click.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import DEFAULTS, ConfigError, load_config
from .model import SEVERITIES, Finding, Rule

if TYPE_CHECKING:
    from .engine import rank_key, rules, run_rules


def __getattr__(name: str) -> Any:
    # The engine imports every rule module: only when rules are run or listed, not when
    # `nsa query` merely parses `-p name=value` with config.parse_assignments.
    if name in ("rank_key", "rules", "run_rules"):
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULTS",
    "SEVERITIES",
    "ConfigError",
    "Finding",
    "Rule",
    "load_config",
    "rank_key",
    "rules",
    "run_rules",
]
