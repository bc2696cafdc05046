"""What a rule sees: the connection, the thresholds, and query results computed once per run.

Every rule asks the same few questions (utilization, gaps, copy summaries...). The context runs
each library query once for all the reports of the run and hands each rule its report's rows.
Rules of scope "run" (the ranks of a multi-GPU job, table `runs`) ask `runs`, `run_ranks` and
`run_query` (a query of queries/runs/ for one run).

Timeline rules read `Rows` (tuples with named fields): their inputs are a few rows per device,
and importing pandas would add ~0.3 s to every `nsa findings` (a third of the run at 1M
kernels). The ncu rules, whose merges and weighted means are DataFrame code, ask for
DataFrames (`query_df`, `sql_df`); pandas is imported only when one of them runs.
"""

from __future__ import annotations

import copy
from collections import namedtuple
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import duckdb

from .. import queries
from ..params import sql as params_sql

if TYPE_CHECKING:
    import pandas as pd


class Rows(Sequence[Any]):
    """A query's result rows as tuples whose fields are the column names (`r.gap_ns`)."""

    def __init__(self, columns: Sequence[str], rows: Sequence[tuple[Any, ...]] = ()) -> None:
        self.columns = tuple(columns)
        # a column name that is no identifier (`count(*)`) raises here: name it in the SQL
        self._type: Any = namedtuple("Row", self.columns)  # type: ignore[misc]  # names known at run time
        make: Callable[[tuple[Any, ...]], Any] = cast(Any, self._type)._make
        self._rows = [make(r) for r in rows]

    @classmethod
    def of(cls, rel: duckdb.DuckDBPyRelation) -> Rows:
        return cls(rel.columns, rel.fetchall())

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def __getitem__(self, i: Any) -> Any:
        return self._rows[i]

    def __repr__(self) -> str:
        return f"Rows({list(self.columns)}, {len(self)} rows)"

    def where(self, keep: Callable[[Any], bool]) -> Rows:
        out = copy.copy(self)  # same columns and row type
        out._rows = [r for r in self._rows if keep(r)]
        return out

    def total(self, column: str) -> Any:
        """Sum of a column, NULLs skipped (0 for no rows)."""
        return sum(v for v in self.values(column) if v is not None)

    def values(self, column: str) -> list[Any]:
        i = self.columns.index(column)
        return [r[i] for r in self._rows]

    def sum_by(self, key: str, value: str, *, nulls: bool = False) -> list[tuple[Any, Any]]:
        """(key, summed value) per distinct key, largest sum first (ties: smaller key first).
        Rows whose key is NULL are left out, unless `nulls`: then they form one group, last
        among equals."""
        sums: dict[Any, Any] = {}
        for k, v in zip(self.values(key), self.values(value)):
            if (k is not None or nulls) and v is not None:
                sums[k] = sums.get(k, 0) + v
        by_key = sorted(sums.items(), key=lambda kv: (kv[0] is None, kv[0] if kv[0] is not None else 0))
        return sorted(by_key, key=lambda kv: kv[1], reverse=True)


class Context:
    """`report_id`: only this report (and the runs it belongs to); `run_ids`: only these runs
    and their reports (None: every report and run of the workspace)."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        config: dict[str, Any],
        report_id: int | None = None,
        run_ids: Collection[int] | None = None,
    ) -> None:
        self.con = con
        self.config = config
        self.report_id = report_id
        self.run_ids = None if run_ids is None else sorted({int(r) for r in run_ids})
        self._cache: dict[tuple[Any, ...], Any] = {}

    def __getitem__(self, threshold: str) -> Any:
        return self.config[threshold]

    def reports(self, format: str | None = None) -> Rows:
        """The reports of this run (one, or all in the workspace; with `run_ids`, theirs)."""
        rows: Rows = self._run_sql(
            "reports",
            "SELECT report_id, format, activity_kinds, has_kernels, has_memcpy, has_cuda_api, "
            "regexp_extract(source_path, '[^/]+$') AS file FROM reports "
            "WHERE ($rid IS NULL OR report_id = $rid) AND ($runs IS NULL OR report_id IN "
            f"(SELECT report_id FROM ({_MEMBERS}) WHERE list_contains($runs, run_id))) ORDER BY report_id",
            {},
            as_df=False,
        )
        return rows if format is None else rows.where(lambda r: r.format == format)

    def runs(self) -> Rows:
        """The runs in scope: with `report_id`, the runs that report belongs to; with `run_ids`,
        those. Columns: run_id, name, world_size, ranks_seen, report_ids (the reports holding
        its ranks, ascending) and activity_kinds (the union of theirs)."""
        rows: Rows = self._run_sql(
            "runs",
            "SELECT r.run_id, r.name, r.world_size, r.ranks_seen, "
            "list_sort(list(DISTINCT m.report_id)) AS report_ids, "
            "list_sort(list_distinct(flatten(list(coalesce(p.activity_kinds, []::VARCHAR[]))))) AS activity_kinds "
            f"FROM runs AS r JOIN ({_MEMBERS}) AS m USING (run_id) JOIN reports AS p ON p.report_id = m.report_id "
            f"WHERE ($rid IS NULL OR r.run_id IN (SELECT run_id FROM ({_MEMBERS}) WHERE report_id = $rid)) "
            "AND ($runs IS NULL OR list_contains($runs, r.run_id)) "
            "GROUP BY r.run_id, r.name, r.world_size, r.ranks_seen ORDER BY r.run_id",
            {},
            as_df=False,
        )
        return rows

    def all_runs(self) -> Rows:
        """Every run of the workspace, whatever the scope (run_id, name, world_size): the runs a
        scaling rule compares a run with."""
        rows: Rows = self._run_sql(
            "all_runs",
            "SELECT run_id, name, world_size, ranks_seen FROM runs ORDER BY run_id",
            {},
            as_df=False,
        )
        return rows

    def run(self, run_id: int) -> Any:
        """One run of `runs` (None when it is out of scope)."""
        return next((r for r in self.runs() if r.run_id == run_id), None)

    def run_ranks(self, run_id: int) -> Rows:
        """The ranks of a run (table `ranks`: rank, report_id, pid, device_id, ...), by rank."""
        rows: Rows = self._run_sql("ranks", "SELECT * FROM ranks ORDER BY run_id, rank", {}, as_df=False)
        return rows.where(lambda r: r.run_id == run_id)

    def run_label(self, run_id: int) -> str:
        """'run 2 (ddp_w4)': how a finding names a run."""
        name = next((r.name for r in self.all_runs() if r.run_id == run_id), None)
        return f"run {run_id}" + (f" ({name})" if name else "")

    def run_query(self, name: str, run_id: int, **params: Any) -> Rows:
        """A query of one run (a query with a `run_id` parameter), computed once per run and
        parameters, whatever the context's report."""
        if any(p.name == "report_id" for p in queries.get(name).params):
            params = {"report_id": None, **params}
        rows: Rows = self._run_query(name, {"run_id": int(run_id), **params}, as_df=False)
        return rows if "run_id" not in rows.columns else rows.where(lambda r: r.run_id == run_id)

    def steady(self, report_id: int) -> Any:
        """The report's steady-state window (nsa_steady: start_ns, end_ns, steps,
        steady_steps, first_step, last_step, source), or None when it has no steps."""
        rows = self._run_sql("steady", "SELECT * FROM nsa_steady($rid)", {}, as_df=False)
        return next((r for r in rows if r.report_id == report_id), None)

    def steps_unknown(self, report_id: int) -> bool:
        """True when the report's steps could not be looked for (its export moved since ingest)."""
        rows = self._run_sql(
            "steps_pending",
            "SELECT report_id FROM reports WHERE list_contains(deferred_steps, 'steps') "
            "AND ($rid IS NULL OR report_id = $rid)",
            {},
            as_df=False,
        )
        return any(r.report_id == report_id for r in rows)

    def unloaded(self, report_id: int, tables: Sequence[str]) -> list[str]:
        """Those of `tables` whose rows the report still leaves in its source export: a rule's
        `optional_reads` that could not be loaded (the export moved or changed since ingest)."""
        from ..ingest import deferred_for

        return [t for t in tables if deferred_for(self.con, {t}, [report_id])]

    def report_file(self, report_id: int) -> str:
        for r in self.reports():
            if r.report_id == report_id:
                return str(r.file)
        return f"report {report_id}"

    def query(self, name: str, report_id: int | None = None, **params: Any) -> Rows:
        """A library query's rows for one report, computed once for all reports of the run."""
        return self._rows(self._run_query(name, params, as_df=False), report_id)

    def sql(self, key: str, sql: str, report_id: int | None = None, **params: Any) -> Rows:
        """Rows of a rule's own SQL (named parameters; $rid is the run's report filter)."""
        return self._rows(self._run_sql(key, sql, params, as_df=False), report_id)

    def query_df(self, name: str, report_id: int | None = None, **params: Any) -> pd.DataFrame:
        """`query` as a pandas DataFrame (imports pandas)."""
        return self._frame(self._run_query(name, params, as_df=True), report_id)

    def sql_df(self, key: str, sql: str, report_id: int | None = None, **params: Any) -> pd.DataFrame:
        """`sql` as a pandas DataFrame (imports pandas)."""
        return self._frame(self._run_sql(key, sql, params, as_df=True), report_id)

    def _run_query(self, name: str, params: dict[str, Any], as_df: bool) -> Any:
        key = ("q", name, _key(params), as_df)
        if key not in self._cache:
            q = queries.get(name)
            if any(p.name == "report_id" for p in q.params):
                params = {"report_id": self.report_id, **params}
            self._cache[key] = self._convert(queries.run(self.con, name, params), as_df)
        return self._cache[key]

    def _run_sql(self, key: str, sql: str, params: dict[str, Any], as_df: bool) -> Any:
        ck = ("sql", key, _key(params), as_df)
        if ck not in self._cache:
            bound = {"rid": self.report_id, "runs": self.run_ids, **params}
            self._cache[ck] = self._convert(params_sql(self.con, sql, bound), as_df)
        return self._cache[ck]

    @staticmethod
    def _convert(rel: duckdb.DuckDBPyRelation, as_df: bool) -> Any:
        return rel.df() if as_df else Rows.of(rel)

    @staticmethod
    def _rows(rows: Rows, report_id: int | None) -> Rows:
        if report_id is None or "report_id" not in rows.columns:
            return rows
        return rows.where(lambda r: r.report_id == report_id)

    @staticmethod
    def _frame(df: pd.DataFrame, report_id: int | None) -> pd.DataFrame:
        if report_id is None or "report_id" not in df.columns:
            return df
        return df[df["report_id"] == report_id]


# The reports of each run: those holding its ranks, and those that name it (reports.run_id).
_MEMBERS = (
    "SELECT run_id, report_id FROM ranks UNION SELECT run_id, report_id FROM reports WHERE run_id IS NOT NULL"
)


def _key(params: dict[str, Any]) -> tuple[Any, ...]:
    """Parameters as a cache key (list parameters as tuples)."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))


def steady_scope(window: Any, unknown: bool = False) -> str:
    """The denominator a timeline finding states: the steady-state window, or the whole run."""
    if window is None and unknown:
        return "over the whole run (its steps are not known: the export moved since ingest)"
    if window is None:
        return "over the whole run (no repeating steps found)"
    return f"in the steady state (from step {window.first_step} of {window.steps} to the end of the capture)"


def steady_evidence(window: Any) -> dict[str, Any]:
    if window is None:
        return {"steps": 0}
    return {
        "steps": int(window.steps),
        "steady_steps": int(window.steady_steps),
        "steady_start_ns": int(window.start_ns),
        "steady_end_ns": int(window.end_ns),
        "steps_source": str(window.source),
    }
