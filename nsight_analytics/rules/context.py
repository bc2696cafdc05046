"""What a rule sees: the connection, the thresholds, and query results computed once per run.

Every rule asks the same few questions (utilization, gaps, copy summaries...). The context runs
each library query once for all the reports of the run and hands each rule its report's rows.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pandas as pd

from .. import queries


class Context:
    def __init__(
        self, con: duckdb.DuckDBPyConnection, config: dict[str, Any], report_id: int | None = None
    ) -> None:
        self.con = con
        self.config = config
        self.report_id = report_id
        self._cache: dict[tuple[Any, ...], pd.DataFrame] = {}

    def __getitem__(self, threshold: str) -> Any:
        return self.config[threshold]

    def reports(self, kind: str | None = None) -> pd.DataFrame:
        """The reports of this run (one, or all in the workspace)."""
        key = ("reports",)
        if key not in self._cache:
            self._cache[key] = self.con.execute(
                "SELECT report_id, kind, activity_kinds, has_kernels, has_memcpy, has_cuda_api, "
                "regexp_extract(source_path, '[^/]+$') AS file FROM reports "
                "WHERE $rid IS NULL OR report_id = $rid ORDER BY report_id",
                {"rid": self.report_id},
            ).df()
        df = self._cache[key]
        return df if kind is None else df[df["kind"] == kind]

    def report_file(self, report_id: int) -> str:
        df = self.reports()
        row = df[df["report_id"] == report_id]
        return str(row["file"].iloc[0]) if len(row) else f"report {report_id}"

    def query(self, name: str, report_id: int | None = None, **params: Any) -> pd.DataFrame:
        """A library query's rows for one report, computed once for all reports of the run."""
        key = ("q", name, tuple(sorted(params.items())))
        if key not in self._cache:
            q = queries.get(name)
            if any(p.name == "report_id" for p in q.params):
                params = {"report_id": self.report_id, **params}
            self._cache[key] = queries.run(self.con, name, params).df()
        return self._rows(self._cache[key], report_id)

    def sql(self, key: str, sql: str, report_id: int | None = None, **params: Any) -> pd.DataFrame:
        """Rows of a rule's own SQL (named parameters; $rid is the run's report filter)."""
        ck = ("sql", key, tuple(sorted(params.items())))
        if ck not in self._cache:
            self._cache[ck] = self.con.execute(sql, {"rid": self.report_id, **params}).df()
        return self._rows(self._cache[ck], report_id)

    @staticmethod
    def _rows(df: pd.DataFrame, report_id: int | None) -> pd.DataFrame:
        if report_id is None or "report_id" not in df.columns:
            return df
        return df[df["report_id"] == report_id]
