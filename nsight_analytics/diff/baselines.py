"""Named baselines: a name for the report(s) a CI job compares every new run against.

`nsa diff --baseline main --save run.sqlite` stores the run under `main` (replacing what the
name held); `nsa diff --baseline main new.sqlite` compares a new run with it. The table
(`diff_baselines`, schema.py) keeps one row per report of the baseline, so a baseline can be a
group (every rank of a run).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

import duckdb

from .. import params
from ..errors import QueryError


def save_baseline(con: duckdb.DuckDBPyConnection, name: str, report_ids: Sequence[int]) -> None:
    """Store (or replace) baseline `name` as these reports, in one transaction."""
    if not name.strip():
        raise QueryError("a baseline needs a name: --baseline NAME.")
    con.execute("BEGIN TRANSACTION")
    try:
        params.execute(con, "DELETE FROM diff_baselines WHERE name = $name", {"name": name})
        saved = datetime.now(timezone.utc).replace(tzinfo=None)  # naive UTC, as reports.ingested_at
        for rid in report_ids:
            params.execute(
                con,
                "INSERT INTO diff_baselines (name, report_id, saved_at) VALUES ($name, $rid, $saved)",
                {"name": name, "rid": int(rid), "saved": saved},
            )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def baseline_reports(con: duckdb.DuckDBPyConnection, name: str) -> list[int]:
    """The reports of baseline `name`; QueryError naming the known baselines when it is unknown."""
    rows = params.execute(
        con, "SELECT report_id FROM diff_baselines WHERE name = $name ORDER BY report_id", {"name": name}
    ).fetchall()
    if not rows:
        known = ", ".join(baselines(con)) or "none yet"
        raise QueryError(
            f"no baseline named {name!r} in the workspace (known: {known}); store one with "
            f"`nsa diff --baseline {name} --save REPORT`."
        )
    return [int(r[0]) for r in rows]


def baselines(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        str(r[0]) for r in con.execute("SELECT DISTINCT name FROM diff_baselines ORDER BY name").fetchall()
    ]
