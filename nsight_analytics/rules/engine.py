"""Run the registered rules over a workspace and rank what they find."""

from __future__ import annotations

from typing import Any

import duckdb

# Importing a rules module registers its rules; this order is the order `nsa rules` lists them.
from . import (
    copy_rules,  # noqa: F401
    kernel_rules,  # noqa: F401
    ncu_rules,  # noqa: F401
    nsys_rules,  # noqa: F401
)
from .config import load_config
from .context import Context
from .model import REGISTRY, SEVERITY_RANK, Finding, Rule


def rules() -> list[Rule]:
    """Every registered rule, in registration order."""
    return list(REGISTRY.values())


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


# Canonical tables an ingest may defer that the rules read (through queries or their own SQL);
# NVTX and OS runtime rows are not among them, so findings never pay for copying those. The
# graph tables are deferred only for reports ingested before nsa read them.
DEFERRED_TABLES_READ = frozenset({"cuda_api", "host_waits", "steps", "graph_executions", "graph_events"})


def run_rules(
    con: duckdb.DuckDBPyConnection,
    report_id: int | None = None,
    config: dict[str, Any] | None = None,
    only: list[str] | None = None,
) -> list[Finding]:
    """All findings for one report (or every report), ranked; `config` overrides thresholds."""
    from ..api import is_read_only
    from ..ingest import ensure_loaded

    if not is_read_only(con):
        ensure_loaded(con, DEFERRED_TABLES_READ)
    values = load_config(overrides=config)
    ctx = Context(con, values, report_id)
    selected = [r for r in rules() if only is None or r.id in only]
    found: list[Finding] = []
    for kind in ("nsys", "ncu"):
        for rid in ctx.reports(kind).values("report_id"):
            for r in selected:
                if r.kind == kind:
                    found.extend(r.check(ctx, int(rid)))
    return sorted(found, key=rank_key)
