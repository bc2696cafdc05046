"""Run the rules over a workspace, each on every report (a run rule: every run) that has the data
it needs, and rank what they find."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import duckdb

from ..ingest.pipeline import memory_cap, past_the_cap
from .config import load_config
from .context import Context
from .discovery import registered
from .model import SEVERITY_RANK, Finding, Rule

log = logging.getLogger(__name__)


def rules() -> list[Rule]:
    """The rules `nsa findings` runs, in the order `nsa rules` lists them: the built-in ones
    (`nsight_analytics.rules.checks`) and those added from rule files and plugins (discovery.add)."""
    return list(registered())


def rank_key(f: Finding) -> tuple[Any, ...]:
    """Severity first, then the finding's weight: the time at stake of the kernel a kernel
    finding (ncu) is about, so that a report's kernel findings come heaviest kernel first, else
    the estimated (steady-state) saving (None last); then the saving."""
    weight = f.evidence.get("time_at_stake_ns") or f.est_savings_ns
    return (
        -SEVERITY_RANK[f.severity],
        weight is None,
        -(weight or 0),
        -(f.est_savings_ns or 0),
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
    run_id: int | Iterable[int] | None = None,
    context: Callable[..., Context] = Context,
) -> list[Finding]:
    """All findings for one report (or every report), ranked; `config` overrides thresholds.

    A rule runs on every report whose activity kinds give it the data it `needs`, whichever
    tool wrote the report; a run rule (scope "run") once on every run whose reports' activity
    kinds, together, give it. With `report_id`, run rules judge the runs that report belongs
    to; with `run_id` (one id, or several the user names together), only those runs and their
    reports are judged. `ruleset`: the rules to choose from (default: the built-in ones).
    `skip`: (report id, rule id) pairs not to run; a run rule is skipped on a run when any of
    its reports is. `context`: what makes the rules' Context from (con, thresholds, report_id,
    run_ids); the Spark engine passes one whose library queries run on Spark.
    """
    # Loads nothing: the facade (api.findings) materialises the deferred tables the rules read.
    ruleset = rules() if ruleset is None else list(ruleset)
    values = load_config(overrides=config, ruleset=ruleset)
    run_ids = [run_id] if isinstance(run_id, int) else None if run_id is None else list(run_id)
    ctx = context(con, values, report_id, run_ids)
    selected = [r for r in ruleset if only is None or r.id in only]
    per_report = [r for r in selected if r.scope == "report"]
    per_run = [r for r in selected if r.scope == "run"]
    found: list[Finding] = []
    # DuckDB's memory under the judged inputs' size, as while their deferred steps ran: past it
    # the rules' sorts and joins spill to the temporary folder beside the workspace, and the
    # blocks they scanned are evicted instead of kept (a 596 MB export: 0.8 GB -> 0.5 GB)
    with memory_cap(con, [int(r.report_id) for r in ctx.reports()]) as uncapped:
        if per_report:
            for report in ctx.reports():
                kinds = report.activity_kinds or ()
                for r in per_report:
                    if r.runs_on(kinds) and (int(report.report_id), r.id) not in skip:
                        found.extend(_check(con, r, ctx, int(report.report_id), uncapped))
        if per_run:  # table runs is read only when a run rule is selected
            for run in ctx.runs():
                kinds = run.activity_kinds or ()
                for r in per_run:
                    if r.runs_on(kinds) and not any((int(rid), r.id) in skip for rid in run.report_ids):
                        found.extend(_check(con, r, ctx, int(run.run_id), uncapped))
    return sorted(found, key=rank_key)


def _check(
    con: duckdb.DuckDBPyConnection, rule: Rule, ctx: Context, target: int, uncapped: str | None = None
) -> list[Finding]:
    """The rule's findings on a report (a run, for a run rule). A rule that runs out of the
    inputs'-size cap runs once more under the limit the cap lowered (`uncapped`): DuckDB spills
    most work past the cap, but not all of it (a window's partition, an allocation at the
    edge); past that limit too, it is said as such, with the limit and the rule, not as an
    internal error."""
    what = "run" if rule.scope == "run" else "report"
    return past_the_cap(
        con,
        uncapped,
        lambda: list(rule.check(ctx, target)),
        f"rule {rule.id} on {what} {target}",
        f"the rule cannot judge a {what} this large yet",
    )
