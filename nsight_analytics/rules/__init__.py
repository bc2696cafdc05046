"""Findings: rules that turn query results into ranked, evidenced advice.

    from nsight_analytics.rules import run_rules
    for f in run_rules(con):            # ranked: est. savings, then severity
        print(f.severity, f.title)

One module per topic: `model` (Finding, registry), `config` (thresholds), `nsys_rules`,
`copy_rules`, `kernel_rules`, `ncu_rules`, `engine` (run and rank), `render` (text/markdown/json).
Rules read library queries and canonical tables; nothing here imports click.
"""

from __future__ import annotations

from .config import DEFAULTS, ConfigError, load_config
from .engine import rank_key, rules, run_rules
from .model import SEVERITIES, Finding, Rule

__all__ = ["DEFAULTS", "SEVERITIES", "ConfigError", "Finding", "Rule", "load_config", "rank_key", "rules", "run_rules"]
