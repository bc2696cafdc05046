"""Run the rules over a workspace, each on every report that has the data it needs, and rank
what they find."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import duckdb

from .config import load_config
from .context import Context
from .discovery import builtin
from .model import SEVERITY_RANK, Finding, Rule


def rules() -> list[Rule]:
    """The built-in rules (`nsight_analytics.rules.checks`), in the order `nsa rules` lists them."""
    return list(builtin())


def rank_key(f: Finding) -> tuple[Any, ...]:
    """Severity first, then estimated (steady-state) savings (None last), then the time at stake."""
    stake = f.evidence.get("time_at_stake_ns") or 0
    return (
        -SEVERITY_RANK[f.severity],
        f.est_savings_ns is None,
        -(f.est_savings_ns or 0),
        -stake,
        f.report_id,
        f.rule_id,
    )


def run_rules(
    con: duckdb.DuckDBPyConnection,
    report_id: int | None = None,
    config: dict[str, Any] | None = None,
    only: list[str] | None = None,
    ruleset: Sequence[Rule] | None = None,
    skip: Collection[tuple[int, str]] = (),
) -> list[Finding]:
    """All findings for one report (or every report), ranked; `config` overrides thresholds.

    A rule runs on every report whose activity kinds give it the data it `needs`, whichever
    tool wrote the report. `ruleset`: the rules to choose from (default: the built-in ones).
    """
    # Loads nothing: the facade (api.findings) materialises the deferred tables the rules read.
    ruleset = rules() if ruleset is None else list(ruleset)
    values = load_config(overrides=config, ruleset=ruleset)
    ctx = Context(con, values, report_id)
    selected = [r for r in ruleset if only is None or r.id in only]
    found: list[Finding] = []
    for report in ctx.reports():
        kinds = report.activity_kinds or ()
        for r in selected:
            if r.runs_on(kinds) and (int(report.report_id), r.id) not in skip:
                found.extend(r.check(ctx, int(report.report_id)))
    return sorted(found, key=rank_key)
