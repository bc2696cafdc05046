"""The findings of A and B, paired: a rule that fired on A only is resolved, on B only new, on
both persisting.

A side is reports (a report, or a group of them) or a run. The report rules judge each report
once; the run rules judge each run once, whether the side names the run or the reports it holds
(running the rules report by report would judge a run once per rank report, and a straggler
found once would be listed once per rank). Findings pair by rule and by slot: the position of
the report they were filed on within its side (a rank, for ranks in rank order), or the side
itself for a run finding; within a slot, in rank order. Runs of two world sizes have no rank to
pair with rank: their findings pair by rule alone, each rule once a side (`by_rule`), and the
two runs are judged together, so a rule that compares runs (scaling-loss) takes them as its
series, as the diff's scaling does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import duckdb

from .. import params
from .model import FindingChange

RUNS_OF_SQL = "SELECT DISTINCT run_id FROM ranks WHERE list_contains($ids, report_id) ORDER BY run_id"


def side_findings(
    con: duckdb.DuckDBPyConnection,
    report_ids: Sequence[int],
    run_id: int | None = None,
    config: dict[str, Any] | None = None,
) -> list[Any]:
    """The findings of one side, ranked: of run `run_id` (its reports and the run, as
    `nsa findings --run`), else of the reports and, once each, the runs they belong to."""
    from ..rules.engine import rank_key, rules, run_rules

    if run_id is not None:
        return run_rules(con, run_id=run_id, config=config)
    ruleset = rules()
    per_report = [r for r in ruleset if r.scope == "report"]
    per_run = [r for r in ruleset if r.scope == "run"]
    found: list[Any] = []
    for rid in report_ids:
        found += run_rules(con, report_id=rid, config=config, ruleset=per_report)
    runs = [
        int(r[0]) for r in params.execute(con, RUNS_OF_SQL, {"ids": [int(i) for i in report_ids]}).fetchall()
    ]
    if runs and per_run:
        found += run_rules(con, run_id=runs, config=config, ruleset=per_run)
    return sorted(found, key=rank_key)


def series_findings(
    con: duckdb.DuckDBPyConnection,
    sides: Sequence[tuple[Sequence[int], int]],
    config: dict[str, Any] | None = None,
) -> list[list[Any]]:
    """The findings of runs judged together (each side: its report ids and run id), split by
    side, each ranked: a rule that compares runs takes the runs named as its series."""
    from ..rules.engine import run_rules

    out: list[list[Any]] = [[] for _ in sides]
    for f in run_rules(con, run_id=[run for _, run in sides], config=config):
        for i, (ids, run) in enumerate(sides):
            if (f.run_id == run) if f.run_id is not None else int(f.report_id) in ids:
                out[i].append(f)
                break
    return out


def finding_changes(
    a_found: list[Any],
    a_ids: Sequence[int],
    b_found: list[Any],
    b_ids: Sequence[int],
    by_rule: bool = False,
) -> list[FindingChange]:
    """Findings of A and B paired by rule and slot, or with `by_rule` by rule alone, each rule
    once a side (its first finding: the highest ranked); new first, then resolved, then
    persisting, each by the savings at stake."""

    def by_slot(found: list[Any], ids: Sequence[int]) -> dict[tuple[str, int | None], list[Any]]:
        position = {int(rid): i for i, rid in enumerate(ids)}
        out: dict[tuple[str, int | None], list[Any]] = defaultdict(list)
        for f in found:
            if by_rule:
                out[(f.rule_id, None)][:1] = out[(f.rule_id, None)][:1] or [f]
                continue
            slot = None if f.run_id is not None else position.get(int(f.report_id))
            out[(f.rule_id, slot)].append(f)
        return out

    fa, fb = by_slot(a_found, a_ids), by_slot(b_found, b_ids)
    changes = []
    for key in sorted(set(fa) | set(fb), key=lambda k: (k[0], k[1] is not None, k[1] or 0)):
        la, lb = fa.get(key, []), fb.get(key, [])
        for i in range(max(len(la), len(lb))):
            x = la[i] if i < len(la) else None
            y = lb[i] if i < len(lb) else None
            status = "persisting" if x and y else "resolved" if x else "new"
            shown = y if y is not None else x
            assert shown is not None  # one of the two exists within max(len(la), len(lb))
            changes.append(
                FindingChange(
                    status,
                    shown.rule_id,
                    shown.severity,
                    shown.title,
                    x.est_savings_ns if x else None,
                    y.est_savings_ns if y else None,
                    x.severity if x else None,
                )
            )
    order = {"new": 0, "resolved": 1, "persisting": 2}
    changes.sort(key=lambda c: (order[c.status], -(c.a_savings_ns or c.b_savings_ns or 0), c.rule_id))
    return changes
