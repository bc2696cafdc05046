"""The rules run under DuckDB's memory cap (the judged inputs' size), and a rule that runs out
of it is named in one clear error instead of DuckDB's internal message."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from nsight_analytics import api, params
from nsight_analytics.errors import NsaError, QueryError
from nsight_analytics.ingest import pipeline
from nsight_analytics.rules.engine import run_rules
from nsight_analytics.rules.model import Rule

EXPORT = Path(__file__).parent / "data" / "h100_nsys2025.3_idle_gaps.sqlite"


def _rule(check, rule_id: str = "probe") -> Rule:
    return Rule(id=rule_id, needs=(), severities=("info",), declared=(), check=check)


def _limit(con: duckdb.DuckDBPyConnection) -> float | None:
    return params.limit_bytes(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])


def _out_of_memory_under(cap: int, limits: list[float | None]):
    """A rule's check that notes DuckDB's memory limit and runs out of memory under `cap`."""

    def edge(ctx, rid):
        limits.append(_limit(ctx.con))
        if limits[-1] is not None and limits[-1] <= cap * 1.01:
            raise duckdb.OutOfMemoryException(
                "Out of Memory Error: could not allocate block of size 256.0 KiB"
            )
        return []

    return edge


@pytest.fixture
def con(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    con = api.connect(tmp_path / "w.duckdb", load_deferred=False)
    api.ingest(con, EXPORT)
    return con


def test_rules_run_under_the_inputs_size_and_the_limit_comes_back(con) -> None:
    before = _limit(con)
    seen: list[tuple[int, float | None]] = []
    run_rules(con, ruleset=[_rule(lambda ctx, rid: seen.append((rid, _limit(ctx.con))) or [])])
    cap = max(pipeline.MEMORY_FLOOR, EXPORT.stat().st_size - pipeline.MEMORY_OUTSIDE)
    assert len(seen) == 1 and seen[0][0] == 1
    assert seen[0][1] is not None and seen[0][1] <= cap * 1.01  # as DuckDB shows it (GiB, 2 decimals)
    assert before is not None and before > cap  # the default (80 % of the machine) was lowered
    after = _limit(con)
    assert after is not None and abs(after - before) <= 0.01 * before


@pytest.mark.parametrize("limit", ["2GB", "1000MB", "3.3GiB", "2147483647B"])
def test_a_users_limit_is_the_same_after_many_capped_calls(con, limit: str) -> None:
    # DuckDB shows a limit rounded down ('2GB' shows '1.8 GiB') and setting the shown text gave a
    # lower one ('1.7 GiB'): each capped call (a query, the rules, a retry under the lowered
    # limit) took another step off the user's limit.
    con.execute(f"SET memory_limit = '{limit}'")
    shown = params.memory_limit(con)
    for _ in range(5):
        with api.memory_limit(con) as lowered:
            assert lowered == shown and params.memory_limit(con) != shown  # capped: the export is small
            with pipeline.raised_limit(con, shown):
                assert params.memory_limit(con) == shown
        assert params.memory_limit(con) == shown
    run_rules(con, ruleset=[_rule(lambda ctx, rid: [])])
    assert params.memory_limit(con) == shown


def test_a_rule_out_of_memory_is_named_with_the_limit(con) -> None:
    def greedy(ctx, rid):
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block of size 256.0 KiB")

    with pytest.raises(NsaError) as caught:
        run_rules(con, ruleset=[_rule(greedy, "greedy")])
    text = str(caught.value)
    assert text.startswith("rule greedy on report 1 needed more than DuckDB's memory limit of ")
    assert "could not allocate block" in text and "free disk space there" in text

    # through a library query, whose failure the query layer wraps in a QueryError
    def wrapped(ctx, rid):
        try:
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block")
        except duckdb.Error as exc:
            raise QueryError("query gaps failed: Out of Memory Error") from exc

    with pytest.raises(NsaError, match=r"^rule wrapped on report 1 needed more .*failed to pin block\)$"):
        run_rules(con, ruleset=[_rule(wrapped, "wrapped")])
    assert _limit(con) is not None and _limit(con) > EXPORT.stat().st_size  # restored after the error


def test_a_rule_out_of_memory_under_the_cap_runs_again_under_the_limit_it_lowered(con) -> None:
    """DuckDB cannot spill everything past the cap: a rule that runs out under it runs once more
    under the limit the cap lowered, gives its findings there, and the cap comes back for the
    rules after it."""
    before = _limit(con)
    cap = max(pipeline.MEMORY_FLOOR, EXPORT.stat().st_size - pipeline.MEMORY_OUTSIDE)
    limits: list[float | None] = []
    edge = _out_of_memory_under(cap, limits)

    after: list[float | None] = []
    run_rules(
        con,
        ruleset=[_rule(edge, "edge"), _rule(lambda ctx, rid: after.append(_limit(ctx.con)) or [], "next")],
    )
    assert before is not None and len(limits) == 2
    assert limits[0] is not None and limits[0] <= cap * 1.01
    assert limits[1] is not None and abs(limits[1] - before) <= 0.01 * before  # the limit the cap lowered
    assert after and after[0] is not None and after[0] <= cap * 1.01  # the next rule: under the cap again
    assert _limit(con) is not None and abs(_limit(con) - before) <= 0.01 * before


def test_a_deferred_step_out_of_memory_under_the_cap_runs_again_under_the_limit_it_lowered(
    con, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy DuckDB cannot spill past the cap (seen: CPU samples with stacks at the 256 MiB
    floor) is rolled back and runs once more under the limit the cap lowered, instead of failing
    every query that needs it; the cap comes back after it."""
    import sqlite3

    from nsight_analytics.ingest.nsys.reader_sqlite import NsysSqliteReader

    real = NsysSqliteReader.load_deferred
    cap = max(pipeline.MEMORY_FLOOR, EXPORT.stat().st_size - pipeline.MEMORY_OUTSIDE)
    limits: list[float | None] = []

    def edge(self, c, handle, rid, step):
        if step != "cuda_api":
            return real(self, c, handle, rid, step)
        limits.append(_limit(c))
        n = real(self, c, handle, rid, step)  # copied, then out of memory: must be rolled back
        if limits[-1] is not None and limits[-1] <= cap * 1.01:
            try:
                raise duckdb.OutOfMemoryException(
                    "Out of Memory Error: failed to allocate data of size 16.0 KiB"
                )
            except duckdb.Error as exc:  # as the reader says it
                raise NsaError(f"{EXPORT} could not be ingested: {exc}") from exc
        return n

    monkeypatch.setattr(NsysSqliteReader, "load_deferred", edge)
    before = _limit(con)
    api.materialise(con, ["cuda_api"])
    with sqlite3.connect(EXPORT) as src:
        calls = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    assert con.execute("SELECT count(*) FROM cuda_api").fetchone()[0] == calls > 0  # once, not twice
    assert before is not None and len(limits) == 2
    assert limits[0] is not None and limits[0] <= cap * 1.01
    assert limits[1] is not None and abs(limits[1] - before) <= 0.01 * before
    assert "cuda_api" not in con.execute("SELECT deferred_steps FROM reports").fetchone()[0]
    assert _limit(con) is not None and abs(_limit(con) - before) <= 0.01 * before


def test_a_deferred_step_out_of_memory_past_the_lowered_limit_names_it(
    con, monkeypatch: pytest.MonkeyPatch
) -> None:
    # past the limit the cap lowered too: one sentence naming the step and the limit (the rules'
    # wording), the step still deferred and nothing of it kept, as before the query
    from nsight_analytics.ingest.nsys.reader_sqlite import NsysSqliteReader

    real = NsysSqliteReader.load_deferred

    def greedy(self, c, handle, rid, step):
        n = real(self, c, handle, rid, step)
        if step == "cuda_api":
            try:
                raise duckdb.OutOfMemoryException(
                    "Out of Memory Error: failed to allocate data of size 16.0 KiB"
                )
            except duckdb.Error as exc:
                raise NsaError(f"{EXPORT} could not be ingested: {exc}") from exc
        return n

    monkeypatch.setattr(NsysSqliteReader, "load_deferred", greedy)
    before = params.memory_limit(con)
    with pytest.raises(NsaError) as caught:
        api.materialise(con, ["cuda_api"])
    text = str(caught.value)
    assert text.startswith(f"report 1's cuda_api needed more than DuckDB's memory limit of {before}; "), text
    assert "free disk space there" in text and text.endswith("failed to allocate data of size 16.0 KiB)")
    assert "\n" not in text
    assert "cuda_api" in con.execute("SELECT deferred_steps FROM reports").fetchone()[0]
    assert con.execute("SELECT count(*) FROM cuda_api").fetchone()[0] == 0
    assert params.memory_limit(con) == before


def test_other_query_errors_pass_through(con) -> None:
    def wrong(ctx, rid):
        raise QueryError("query gaps failed: Binder Error")

    with pytest.raises(QueryError, match="^query gaps failed: Binder Error$"):
        run_rules(con, ruleset=[_rule(wrong)])


def test_a_real_limit_keeps_the_findings_or_names_the_rule(con, tmp_path: Path) -> None:
    """Held to a few tens of MB, DuckDB gives the findings of an unlimited run (evicting and
    spilling to the folder beside the workspace, which it removes when it closes), and below
    what a rule's query needs, the error names the rule and the limit."""
    free = [f.to_dict() for f in api.findings(con)]
    con.execute("SET threads = 1")
    con.execute("SET memory_limit = '64MB'")
    assert [f.to_dict() for f in api.findings(con)] == free and free
    con.execute("SET memory_limit = '24MB'")
    with pytest.raises(
        NsaError, match=r"^rule [a-z-]+ on report 1 needed more than DuckDB's memory limit of 2"
    ):
        api.findings(con)
    con.close()
    assert not (tmp_path / "w.duckdb.tmp").exists()


def test_spills_go_to_the_system_temp_folder_when_the_workspace_folder_is_not_writable(
    con, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import tempfile

    con.close()
    ro = api.connect(tmp_path / "w.duckdb", read_only=True, load_deferred=False)
    assert pipeline.spill_folder(ro) == str(tmp_path / "w.duckdb.tmp")  # writable here: kept
    monkeypatch.setattr(pipeline.os, "access", lambda path, mode: Path(path) != tmp_path)
    folder = Path(pipeline.spill_folder(ro) or "")
    assert folder.parent == Path(tempfile.gettempdir()) and str(os.getpid()) in folder.name
    assert ro.execute("SELECT current_setting('temp_directory')").fetchone()[0] == str(folder)
    ro.execute("SET memory_limit = '32MB'")
    ro.execute("SET threads = 1")
    sql = (
        "SELECT count(*), max(m) FROM (SELECT md5(i::VARCHAR) AS m FROM range(2000000) t(i) ORDER BY m DESC)"
    )
    assert ro.execute(sql).fetchone()[0] == 2_000_000
    assert folder.is_dir() and not (tmp_path / "w.duckdb.tmp").exists()  # it spilled there
    ro.close()
    assert not folder.exists()  # removed by DuckDB with the connection


def test_the_report_page_is_gathered_under_the_inputs_size(con, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    gather = importlib.import_module("nsight_analytics.report.gather")
    seen: list[float | None] = []
    real = gather.gather_timeline
    monkeypatch.setattr(gather, "gather_timeline", lambda c, *a: seen.append(_limit(c)) or real(c, *a))
    api.materialise(con, api.report_reads())
    before = _limit(con)
    page = api.report_data(con, 1)
    cap = max(pipeline.MEMORY_FLOOR, EXPORT.stat().st_size - pipeline.MEMORY_OUTSIDE)
    assert page["timeline"] and len(seen) == 1 and seen[0] is not None and seen[0] <= cap * 1.01
    after = _limit(con)
    assert before is not None and after is not None and abs(after - before) <= 0.01 * before


def test_a_rule_out_of_memory_in_the_report_runs_again_under_the_limit_the_report_lowered(
    con, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nsa report` holds the cap around the rules' own: the rules' second try still goes past
    it, to the limit the report's cap lowered, not to the cap again."""
    from nsight_analytics.rules import engine

    cap = max(pipeline.MEMORY_FLOOR, EXPORT.stat().st_size - pipeline.MEMORY_OUTSIDE)
    limits: list[float | None] = []
    edge = _out_of_memory_under(cap, limits)

    monkeypatch.setattr(engine, "rules", lambda: [_rule(edge, "edge")])
    api.materialise(con, api.report_reads())
    before = _limit(con)
    page = api.report_data(con, 1)
    assert page["timeline"] and before is not None and len(limits) == 2
    assert limits[0] is not None and limits[0] <= cap * 1.01
    assert limits[1] is not None and abs(limits[1] - before) <= 0.01 * before
    assert _limit(con) is not None and abs(_limit(con) - before) <= 0.01 * before


@pytest.mark.parametrize("fmt", ["csv", "json", "table"])
def test_nsa_query_writes_its_rows_under_the_inputs_size(
    con, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """`nsa query` returns a lazy relation whose rows DuckDB computes while they are written: the
    limit holds until the last row is out, for every output format."""
    import json
    import re

    from click.testing import CliRunner

    from nsight_analytics.cli import main

    con.close()
    real = api.query

    def probe(c: duckdb.DuckDBPyConnection, name: str, **params) -> duckdb.DuckDBPyRelation:
        real(c, name, **params)  # its checks and loads, then a relation that reads the limit when run
        return c.sql("SELECT current_setting('memory_limit') AS memory_limit FROM range(3)")

    monkeypatch.setattr(api, "query", probe)
    res = CliRunner().invoke(
        main, ["query", "kernel_summary", "--db", str(tmp_path / "w.duckdb"), "--format", fmt]
    )
    assert res.exit_code == 0, res.output
    if fmt == "json":
        shown = [r["memory_limit"] for r in json.loads(res.output)]
    else:
        shown = re.findall(r"[0-9.]+ [KMGT]?i?B", res.output)
    cap = max(pipeline.MEMORY_FLOOR, EXPORT.stat().st_size - pipeline.MEMORY_OUTSIDE)
    limits = [params.limit_bytes(s) for s in shown]
    assert len(limits) == 3 and all(x is not None and x <= cap * 1.01 for x in limits), res.output


def test_idle_gaps_too_many_for_the_limit_fall_back_to_the_long_ones(
    con, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib

    timeline = importlib.import_module("nsight_analytics.report.timeline")
    t0 = con.execute("SELECT min(start_ns) FROM kernel_rows WHERE report_id = 1").fetchone()[0]
    t1 = t0 + 4000 * 50_000  # a span whose 1/2000 (100 us) leaves some gaps out
    real = timeline.queries.run

    def run(c, name, p):
        if name == "gaps" and p["min_gap_ns"] == 10_000:
            try:
                raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")
            except duckdb.Error as exc:
                raise QueryError("query gaps failed: Out of Memory Error") from exc
        return real(c, name, p)

    monkeypatch.setattr(timeline.queries, "run", run)
    with caplog.at_level("WARNING"):
        got = timeline.idle_gaps(con, 1, t0, t1)
    assert "did not fit in DuckDB's memory limit" in caplog.text and "at least 0.100 ms" in caplog.text
    want = con.execute(
        "SELECT gap_start_ns - $t0, gap_ns FROM gaps(report := 1, min_gap_ns := 100000) "
        "ORDER BY gap_ns DESC, gap_start_ns",
        {"t0": t0},
    ).fetchall()
    assert want and [(g["s"], g["d"]) for g in got] == [tuple(w) for w in want]


def test_a_page_of_many_gaps_matches_the_phases_longest_among_the_longer_ones(
    con, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    timeline = importlib.import_module("nsight_analytics.report.timeline")
    api.materialise(con, {"gpu_timeline"})
    t0, t1 = con.execute("SELECT min(start_ns), max(end_ns) FROM gpu_timeline WHERE report_id = 1").fetchone()
    lengths = [r[0] or 0 for r in con.execute("SELECT start_ns - prev_end_ns FROM gpu_timeline").fetchall()]
    many, fewer = sum(d >= 10_000 for d in lengths), sum(d >= 100_000 for d in lengths)
    assert many > fewer > 0  # the export has gaps of 10-100 us to leave out
    monkeypatch.setattr(timeline, "GAP_ROWS", fewer)
    got = timeline.idle_gaps(con, 1, t0, t1)
    floor = max(10_000, (t1 - t0) // 2000)
    want = con.execute(
        "SELECT gap_start_ns - $t0, gap_ns FROM gaps(report := 1, min_gap_ns := 100000) "
        f"QUALIFY (gap_ns >= {floor} AND row_number() OVER (ORDER BY gap_ns DESC, gap_start_ns) <= 2000) "
        "OR row_number() OVER (PARTITION BY device_id, phase ORDER BY gap_ns DESC, gap_start_ns) <= 50 "
        "ORDER BY gap_ns DESC, gap_start_ns",
        {"t0": t0},
    ).fetchall()
    assert [(g["s"], g["d"]) for g in got] == [tuple(w) for w in want]
    assert min(g["d"] for g in got) >= 100_000
    monkeypatch.setattr(timeline, "GAP_ROWS", many)  # all fit: those of 10 us too
    assert min(g["d"] for g in timeline.idle_gaps(con, 1, t0, t1)) < 100_000
