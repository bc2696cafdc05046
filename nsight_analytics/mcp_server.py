"""`nsa mcp`: the workspace served to AI assistants over the Model Context Protocol (stdio).

The tools are the CLI's everyday commands, answered in the words and units the CLI prints:
list the reports and the runs, ingest a file, run a library query with parameters, run
read-only SQL, get the findings, diff two reports. Every answer is bounded - a table shows at
most `MAX_ROWS` rows and says how many more there are and how to get them, and no answer is
longer than `MAX_CHARS` characters - so one call cannot flood an assistant's context. Two
resources hold the reference: the canonical tables (`nsa://schema`) and the query library
(`nsa://queries`).

Each call opens the workspace for that call only (read-only except `ingest`), so `nsa` in a
terminal and other readers keep working beside the server. A mistake (an unknown query, a bad
parameter, a missing report) comes back as a tool error of one sentence, the CLI's own.

The `mcp` package is an optional extra (`pip install 'nsight-analytics[mcp]'`); this module
imports it only in `build_server`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import api, render
from .errors import NsaError, QueryError, os_problem

if TYPE_CHECKING:
    import duckdb
    from mcp.server.mcpserver import MCPServer

MAX_ROWS = 200
DEFAULT_ROWS = 30
MAX_CHARS = 20_000
INSTRUCTIONS = (
    "nsight-analytics (nsa) answers questions about GPU profiles (Nsight Systems, Nsight Compute, "
    "PyTorch profiler) ingested into one workspace. Start with list_reports, then findings for the "
    "ranked problems with evidence and fixes; query runs a library query by name (list_queries, "
    "or the nsa://queries resource, says what each answers and its parameters); sql runs read-only "
    "SQL on the canonical tables (nsa://schema). Times are nanoseconds in raw columns."
)


class McpUnavailable(NsaError):
    """The optional `mcp` package is not installed."""


def _bounded(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    cut = text.rfind("\n", 0, MAX_CHARS)
    cut = cut if cut > 0 else MAX_CHARS
    return text[:cut] + f"\n... (answer cut at {MAX_CHARS:,} characters; ask for fewer rows or columns)"


def _rows_text(rel: duckdb.DuckDBPyRelation | None, limit: int, units: Any = None, how_more: str = "") -> str:
    """A markdown table of the relation's first `limit` rows, and a line saying how many more."""
    if rel is None:
        return "(the statement returned no rows)"
    n = max(1, min(limit, MAX_ROWS))
    res, total = render.head(rel, n, units)
    text = render.render(res, "markdown")
    if total > len(res.rows):
        text += f"\n{total - len(res.rows):,} more rows of {total:,}: {how_more or 'raise limit'}."
    elif not res.rows:
        text = "(no rows)"
    return _bounded(text)


@contextmanager
def _reading(db: str | None, needs: set[str] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    con = api.reader(db, needs=needs)
    try:
        yield con
    finally:
        con.close()


def tools(db: str | None) -> dict[str, Callable[..., str]]:
    """The server's tools as plain functions of the workspace `db` (None: $NSA_DB or ./nsa.duckdb),
    so they can be called and tested without a client."""

    def list_reports() -> str:
        """The reports in the workspace: id, name, kind, source file, GPU, time span."""
        with _reading(db) as con:
            return _rows_text(api.reports(con), MAX_ROWS)

    def list_runs() -> str:
        """The runs (the ranks of one multi-GPU job, grouped at ingest) with their world size."""
        with _reading(db) as con:
            return _rows_text(api.runs(con), MAX_ROWS)

    def list_queries() -> str:
        """The library queries, one line each: name and what it answers. nsa://queries has their
        parameters and columns."""
        return _bounded("\n".join(f"{q.name}: {render.query_headline(q)}" for q in api.library()))

    def describe_query(name: str) -> str:
        """One library query's contract: what it answers, its parameters (with defaults and
        allowed values) and its columns with units."""
        return _bounded(render.query_contract(api.get_query(name)))

    def ingest(path: str, replace: bool = False) -> str:
        """Ingest a profile into the workspace: an nsys .sqlite export or .nsys-rep, an ncu CSV or
        .ncu-rep, a PyTorch profiler (Kineto) JSON trace, or a power log. Returns the report id."""
        con = api.connect(db, load_deferred=False)
        try:
            r = api.ingest(con, os.path.expanduser(path), replace=replace)
        finally:
            con.close()
        rows = sum(r.rows.values())
        return f"report {r.report_id} ({r.format}, {r.status}): {r.path}, {rows:,} rows" + "".join(
            f"\nwarning: {w}" for w in r.warnings
        )

    def query(
        name: str,
        params: dict[str, str] | None = None,
        report_id: int | None = None,
        limit: int = DEFAULT_ROWS,
    ) -> str:
        """Run a library query by name, e.g. name='gaps', params={'min_gap_ns': '100000'}.
        report_id restricts it to one report where the query takes one. At most `limit` rows
        (up to 200) come back, with how many more there are."""
        q = api.get_query(name)
        values: dict[str, Any] = dict(params or {})
        if report_id is not None:
            if "report_id" not in {p.name for p in q.params}:
                raise QueryError(f"query {q.name} takes no report_id; its parameters: "
                                     f"{', '.join(p.name for p in q.params) or 'none'}.")  # fmt: skip
            values["report_id"] = report_id
        bound = q.bind(values)
        reports = [v for k, v in bound.items() if k.endswith("report_id")]
        with _reading(db, q.tables()) as con:
            api.require_reports(con, reports)
            rel = api.query(con, name, **values)
            return _rows_text(rel, limit, q.units(), f"`nsa query {name} --all -o FILE.csv` writes them all")

    def sql(statement: str, limit: int = DEFAULT_ROWS) -> str:
        """Run one read-only SQL statement on the workspace's canonical tables (nsa://schema lists
        them; the library's macros are there too). Writes and extensions are refused."""
        api.refuse_extensions(statement)
        api.refuse_canonical_writes(statement)
        with _reading(db, api.tables_needed(statement)) as con:
            return _rows_text(api.sql(con, statement), limit, None, "add LIMIT/OFFSET or aggregate")

    def findings(report_id: int | None = None, run: str | None = None, top: int = 10) -> str:
        """Ranked findings - what is wrong, the evidence in numbers, the time to win and the fix -
        for one report, one run (id or name) or every report."""
        if run is not None and report_id is not None:
            raise QueryError("give a run or a report_id, not both.")
        con = api.findings_reader(db, report_id)
        try:
            found = api.findings(con, report_id=report_id, run=run)
            names = api.report_names(con)
        finally:
            con.close()
        n = max(1, min(top, 50))
        text = render.render_findings(found[:n], "markdown", names)
        if len(found) > n:
            text += f"\n{len(found) - n} more findings: raise top."
        return _bounded(text if found else "No findings: nothing crossed a rule's threshold.")

    def diff(a: str, b: str) -> str:
        """What changed from report A (before) to report B (after) - ids like '1' or '1,2' for the
        ranks of one job - and whether the step-time change is beyond noise."""
        for side in (a, b):
            if not api.is_report_ids(side):
                raise QueryError(
                    f"diff takes report ids such as 1 or 1,2 (list_reports gives them), got {side!r}."
                )
        with _reading(db, api.diff_reads(True)) as con:
            return _bounded(render.render_diff(api.diff(con, a, b), "markdown"))

    return {
        f.__name__: f
        for f in (list_reports, list_runs, list_queries, describe_query, ingest, query, sql, findings, diff)
    }


READ_ONLY_TOOLS = frozenset(
    {"list_reports", "list_runs", "list_queries", "describe_query", "query", "sql", "findings", "diff"}
)


def build_server(db: str | None = None) -> MCPServer:
    """The MCP server over workspace `db`; `.run()` serves it on stdio."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.types import ToolAnnotations
    except ImportError as e:
        raise McpUnavailable(
            "nsa mcp needs the Model Context Protocol SDK: pip install 'nsight-analytics[mcp]'."
        ) from e

    server = MCPServer("nsight-analytics", instructions=INSTRUCTIONS, log_level="WARNING")
    for name, fn in tools(db).items():
        notes = ToolAnnotations(read_only_hint=name in READ_ONLY_TOOLS, open_world_hint=False)
        server.tool(name=name, annotations=notes, structured_output=False)(_as_tool(fn))

    @server.resource("nsa://schema", name="schema", mime_type="text/markdown",
                     description="The canonical tables of an nsa workspace: columns, types, units.")  # fmt: skip
    def schema_page() -> str:
        return render.schema_page(api.schema_tables())

    @server.resource("nsa://queries", name="queries", mime_type="text/markdown",
                     description="The query library: what each query answers, parameters, columns.")  # fmt: skip
    def queries_page() -> str:
        return render.queries_page()

    return server


def problem(exc: Exception) -> str | None:
    """The one sentence the CLI would print for `exc`, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, NsaError):
        return str(exc)
    said = os_problem(exc)
    if said is not None:
        return said
    import duckdb

    return str(exc).strip().splitlines()[0] if isinstance(exc, duckdb.Error) else None


def _as_tool(fn: Callable[..., str]) -> Callable[..., str]:
    """`fn` with nsa's one-sentence errors raised as the SDK's tool errors (the client sees the
    sentence, not a traceback)."""
    import functools

    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            said = problem(e)
            if said is None:
                raise
            raise ToolError(said) from None

    return call
