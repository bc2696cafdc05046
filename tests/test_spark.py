"""The query library on Apache Spark: every query that can run there returns the rows DuckDB
returns on the same Parquet dataset (`nsa export`), and the rest are refused by name.

One local SparkSession serves the whole run (local[2], UI off, quiet logs); without pyspark,
sqlglot or Java the file is skipped with the reason (CI's 3.10 / 3.13 runs install `.[test-core]`
only). The dataset holds real captures of each kind the queries read: an nsys training loop
(../shared/realdata, when it is there), a PyTorch profiler trace, and a two-rank DDP run.
"""

from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REALDATA, ROOT

pytest.importorskip(
    "pyspark", reason="the Spark engine is the optional extra `spark` (pip install '.[spark]')"
)
pytest.importorskip(
    "sqlglot", reason="the Spark engine is the optional extra `spark` (pip install '.[spark]')"
)
if shutil.which("java") is None:
    pytest.skip("Spark needs Java (openjdk-17-jre-headless); none on PATH", allow_module_level=True)

from nsight_analytics import dataset, queries
from nsight_analytics import spark as nspark
from nsight_analytics.errors import QueryError

CAPTURES = [
    REALDATA / "nsys" / "h100_nsys2025.3_transformer_train.sqlite",
    ROOT / "tests" / "data" / "kineto" / "h100_torch2.11_train_fused_rerun.json.gz",
    ROOT / "tests" / "data" / "ddp" / "nsys" / "h200x2_nsys2025.3_ddp_w2_rank0.sqlite.gz",
    ROOT / "tests" / "data" / "ddp" / "nsys" / "h200x2_nsys2025.3_ddp_w2_rank1.sqlite.gz",
    # the smallest capture with GPU metrics (gpu_metrics_by_range): 24k kernels, 155k samples
    ROOT / "tests" / "data" / "h100_nsys2025.3_saturation_gpumetrics.sqlite.gz",
]


@pytest.fixture(scope="session")
def spark():
    session = nspark.session(
        "local[2]",
        app="nsa-tests",
        # small data: one shuffle partition, and no code generation (compiling it costs more
        # than running a plan over a few thousand rows)
        conf={
            "spark.sql.shuffle.partitions": "1",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "2g",
            "spark.sql.codegen.wholeStage": "false",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_data(tmp_path_factory) -> Path:
    """The captures ingested into one workspace (the DDP ranks form a run on their own), exported
    once."""
    from nsight_analytics import api

    folder = tmp_path_factory.mktemp("spark")
    con = api.connect(folder / "w.duckdb")
    ids = [api.ingest(con, path).report_id for path in CAPTURES if path.exists()]  # realdata may be absent
    api.group_runs(con, ids)  # the DDP ranks form a run, as `nsa ingest` makes it
    con.close()
    api.export(folder / "ds", db=folder / "w.duckdb")
    return folder / "ds"


@pytest.fixture(scope="session")
def duck(spark_data):
    con = dataset.open_dataset(spark_data)
    assert queries.install_macros(con) == {}
    yield con
    con.close()


def _params(name: str, duck) -> dict:
    """Values for the required parameters: gap_calls' intervals cover each launching thread of
    the first nsys report in three windows."""
    if name != "gap_calls":
        return {}
    tids = [t for (t,) in duck.sql("SELECT DISTINCT global_tid FROM cuda_api ORDER BY 1 LIMIT 3").fetchall()]
    return {"thread_ids": tids, "starts_ns": [0, 10**9, 0], "ends_ns": [10**9, 2 * 10**9, 10**12]}


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _key(row: tuple) -> tuple:
    return tuple((v is None, str(v) if isinstance(v, (list, tuple, dict)) else v) for v in row)


def _same(duck_rows: list[tuple], spark_rows: list[tuple]) -> str | None:
    """None when both hold the same rows in any order (floats within 1e-9 relative), else the
    first difference in words."""
    if len(duck_rows) != len(spark_rows):
        return f"{len(duck_rows)} rows on DuckDB, {len(spark_rows)} on Spark"
    for a, b in zip(sorted(duck_rows, key=_key), sorted(spark_rows, key=_key)):
        for x, y in zip(a, b):
            if isinstance(x, float) or isinstance(y, float):
                if (x is None) != (y is None) or (
                    x is not None and not math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-9)
                ):
                    return f"DuckDB {a} / Spark {b}"
            elif isinstance(x, (list, tuple)) or isinstance(y, (list, tuple)):
                if list(x or []) != list(y or []):
                    return f"DuckDB {a} / Spark {b}"
            elif x != y:
                return f"DuckDB {a} / Spark {b}"
    return None


RUNS_ON_SPARK = sorted(n for n in queries.library() if n not in nspark.UNSUPPORTED)


@pytest.mark.parametrize("name", RUNS_ON_SPARK)
def test_spark_returns_the_rows_duckdb_returns(name, spark, spark_data, duck):
    values = _params(name, duck)
    expected = queries.run(duck, name, values).fetchall()
    # one run: the rows and the columns of the same DataFrame (a second `query` would compute
    # every shared CTE again)
    df = nspark.query(spark, name, spark_data, values)
    got = [tuple(r) for r in df.collect()]
    assert got or not expected
    assert _same(expected, got) is None, _same(expected, got)
    assert df.columns == [c.name for c in queries.get(name).columns]


def test_the_dataset_has_rows_for_the_queries(duck):
    """The comparison means something only where the queries see rows: kernels of the three
    kinds of capture, the run's ranks, NVTX, steps, memory events, GPU metrics; and the queries
    whose window frames end at a column or a parameter (`_variable_frames`) return rows."""
    kinds = dict(duck.sql("SELECT format, count(*) FROM reports GROUP BY 1").fetchall())
    assert kinds.get("kineto") == 1 and kinds.get("nsys", 0) >= 2
    assert duck.sql("SELECT count(*) FROM ranks").fetchone()[0] == 2
    for table in (
        "kernel_rows",
        "cuda_api",
        "nvtx_ranges",
        "steps",
        "comm_ops",
        "memory_events",
        "gpu_metrics",
    ):
        assert duck.sql(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
    for name in ("kernel_sequences", "memory_steps", "gpu_metrics_by_range"):
        assert queries.run(duck, name, {}).fetchall(), name


def test_what_spark_cannot_run_is_refused_by_name(spark, spark_data, monkeypatch):
    """Every query runs on Spark today (UNSUPPORTED is empty); a query listed there is refused by
    name with its reason, before Spark sees it."""
    monkeypatch.setitem(nspark.UNSUPPORTED, "kernel_summary", "a reason given here")
    with pytest.raises(QueryError, match="query kernel_summary does not run on Spark.*a reason given here"):
        nspark.query(spark, "kernel_summary", spark_data)


def test_asof_join_takes_the_latest_match_per_left_row(spark, duck):
    """The ASOF rewrite against DuckDB's own ASOF JOIN on inline rows: repeated left rows, a
    left row with no match (dropped; kept with NULLs by LEFT ASOF), equal keys on the right."""
    left = "SELECT * FROM (VALUES (1, 5), (1, 5), (1, 20), (2, 3), (3, 1)) AS l(k, t)"
    right = "SELECT * FROM (VALUES (1, 0, 'a'), (1, 4, 'b'), (1, 10, 'c'), (2, 1, 'd'), (3, 2, 'e')) AS r(k, ts, v)"
    for join in ("ASOF JOIN", "ASOF LEFT JOIN"):
        sql = (
            f"SELECT l.k, l.t, r.v FROM ({left}) AS l {join} ({right}) AS r ON r.k = l.k AND l.t >= r.ts "
            "WHERE l.t < 100"
        )
        expected = duck.sql(sql).fetchall()
        got = [tuple(r) for r in spark.sql(nspark.translate(sql)).collect()]
        assert _same(expected, got) is None, (join, expected, got)
        # a star over the join lists the left's columns, then the right's, as DuckDB's does
        for select in ("*", "l.*", "r.*, l.t"):
            sql = f"SELECT {select} FROM ({left}) AS l {join} ({right}) AS r ON r.k = l.k AND l.t >= r.ts"
            expected = duck.sql(sql).fetchall()
            df = spark.sql(nspark.translate(sql))
            assert df.columns == duck.sql(sql).columns, (select, df.columns)
            got = [tuple(r) for r in df.collect()]
            assert _same(expected, got) is None, (join, select, expected, got)


def test_asof_join_directions_ties_and_null_keys(spark, duck):
    """Each inequality of an ASOF join (latest match for >= and >, earliest for <= and <; a tie
    matches only the non-strict ones), written either way round, with a NULL key on either side
    (it matches nothing), against DuckDB's own ASOF JOIN. (A NULL time is left out: DuckDB
    matches a left NULL time to a right one, the translation to nothing; no query has one.)"""
    left = "SELECT * FROM (VALUES (1, 4), (1, 10), (1, 11), (NULL, 4), (2, 0)) AS l(k, t)"
    right = "SELECT * FROM (VALUES (1, 4, 'a'), (1, 10, 'b'), (NULL, 4, 'c'), (2, 1, 'e')) AS r(k, ts, v)"
    for cond in ("l.t >= r.ts", "l.t > r.ts", "l.t <= r.ts", "l.t < r.ts", "r.ts < l.t", "r.ts >= l.t"):
        for join in ("ASOF JOIN", "ASOF LEFT JOIN"):
            sql = f"SELECT l.k, l.t, r.v FROM ({left}) AS l {join} ({right}) AS r ON r.k = l.k AND {cond}"
            got = [tuple(r) for r in spark.sql(nspark.translate(sql)).collect()]
            assert _same(duck.sql(sql).fetchall(), got) is None, (cond, join, got)


def test_by_name_ordered_lists_and_zipped_unnests_translate(spark, duck):
    """UNION ALL BY NAME (sides in other orders, a column one side lacks, a star over a CTE),
    list(x ORDER BY k) with NULLs in keys and values, and unnests walked side by side."""
    cases = [
        (
            "WITH a AS (SELECT 1 AS x, 'p' AS y) SELECT * FROM a UNION ALL BY NAME SELECT 'q' AS y, 2 AS x, "
            "3 AS z UNION ALL BY NAME SELECT 4 AS z"
        ),
        (
            "SELECT g, list(v ORDER BY k, v) AS vs FROM (VALUES (1, 3, 'c'), (1, 1, 'a'), (1, NULL, 'n'), "
            "(1, 2, NULL), (2, 5, 'e')) AS t(g, k, v) GROUP BY g"
        ),
        "SELECT unnest([1, 2, 3]) AS a, unnest(['x', 'y']) AS b",
    ]
    for sql in cases:
        got = [tuple(r) for r in spark.sql(nspark.translate(sql)).collect()]
        assert _same(duck.sql(sql).fetchall(), got) is None, (sql, got)


def test_lateral_values_with_outer_references_translate(spark, duck):
    """Each row joined to rows built from its own columns (sync_beyond_gpu's two ends of a call)."""
    sql = (
        "SELECT c.id, t.probe, t.side FROM (VALUES (1, 10, 20), (2, 30, 35), (2, 30, 35)) AS c(id, a, b) "
        "JOIN (VALUES (1), (2), (2)) AS d(id) ON d.id = c.id "
        "CROSS JOIN LATERAL (VALUES (c.a, -1), (c.b, 1)) AS t(probe, side)"
    )
    got = [tuple(r) for r in spark.sql(nspark.translate(sql)).collect()]
    assert len(got) == 2 + 8
    assert _same(duck.sql(sql).fetchall(), got) is None


def test_histogram_and_a_tuple_field_by_position_translate(spark, duck):
    """launch_stacks' most frequent name (ties: the greatest), histogram() counts, and a list's
    element by a literal position (sqlglot reads DuckDB's [2] as a 0-based 1)."""
    cases = [
        (
            "SELECT g, list_max(list_transform(map_entries(histogram(v)), e -> (e.value, e.key)))[2] AS top "
            "FROM (VALUES (1, 'a'), (1, 'b'), (1, 'b'), (1, NULL), (2, 'x'), (2, 'y'), (3, NULL)) AS t(g, v) "
            "GROUP BY g"
        ),
        "SELECT l[2] AS b, l[len(l)] AS c, l[5] AS none FROM (SELECT [10, 20, 30] AS l)",
    ]
    for sql in cases:
        got = [tuple(r) for r in spark.sql(nspark.translate(sql)).collect()]
        assert _same(duck.sql(sql).fetchall(), got) is None, (sql, got)


def test_a_shared_cte_is_computed_once_and_its_view_dropped(spark, duck):
    """A CTE read twice (through another CTE read twice: four copies inlined) that aggregates
    becomes one view, computed once; one read once, or a bare filter, stays a CTE. The rows are
    DuckDB's, and no view is left in the session after the query, whose DataFrame still runs."""
    sql = (
        "WITH t AS (SELECT * FROM (VALUES (1, 10), (1, 20), (2, 5), (3, 7)) AS v(k, x)), "
        "agg AS (SELECT k, sum(x) AS s, count(*) AS n FROM t GROUP BY k), "
        "pair AS (SELECT a.k, a.s + b.n AS y FROM agg AS a JOIN agg AS b ON a.k = b.k), "
        "once AS (SELECT k, max(x) AS m FROM t GROUP BY k), "
        "bare AS (SELECT k FROM t WHERE x > 6) "
        "SELECT p.k, p.y, q.y AS y2, o.m, (SELECT count(*) FROM bare) AS nb, (SELECT count(*) FROM bare) AS nb2 "
        "FROM pair AS p JOIN pair AS q ON p.k = q.k JOIN once AS o ON o.k = p.k"
    )
    plan = nspark._plan(nspark.translate(sql))
    assert sorted(view.split("_", 5)[-1] for view, _ in plan.steps) == ["agg", "pair"]
    df = nspark._execute(spark, plan, {})
    assert not [t.name for t in spark.catalog.listTables() if t.name.startswith(nspark._VIEW)]
    got = [tuple(r) for r in df.collect()]
    assert _same(duck.sql(sql).fetchall(), got) is None, got
    # the sum is computed in agg's step only, not where pair's view is read
    assert "SUM(" not in plan.sql.upper() and "SUM(" in plan.steps[0][1].upper()


def test_the_session_keeps_its_warehouse_out_of_the_working_directory(spark):
    """Spark's warehouse folder (./spark-warehouse by default) goes to a temporary folder."""
    folder = spark.conf.get("spark.sql.warehouse.dir")
    assert "nsa-spark-warehouse-" in folder and ROOT.as_uri() not in folder, folder


def test_window_frames_ending_at_a_column_translate(spark, duck):
    """Frames whose bounds are expressions (a column, a parameter's expression), which Spark's
    parser refuses, computed from dyadic blocks: each function the rewrite takes, frames from
    before the partition to past its end, empty frames, NULL values and a NULL partition key,
    other windows and a QUALIFY beside them, against DuckDB's own frames. (Frames whose end
    comes before their start are left out: DuckDB's count(*) counts them negative.)"""
    import random

    rng = random.Random(7)
    rows = [
        f"({k}, {i}, {rng.choice(['NULL', str(rng.randint(-50, 50))])}, {rng.randint(0, 12)}, {rng.randint(0, 3)})"
        for k in ("1", "2", "NULL")
        for i in range(rng.randint(20, 60))
    ]
    rows.append("(3, 0, 5, 0, 0)")
    src = f"(VALUES {', '.join(rows)}) AS t(k, o, x, c, d)"
    frames = [
        "CURRENT ROW AND c FOLLOWING",
        "d PRECEDING AND c FOLLOWING",
        "UNBOUNDED PRECEDING AND c FOLLOWING",
        "c PRECEDING AND CURRENT ROW",
        "c PRECEDING AND UNBOUNDED FOLLOWING",
        "d + 1 PRECEDING AND 2 FOLLOWING",
    ]
    for frame in frames:
        sql = (
            "SELECT k, o, sum(x) OVER w AS s, count(x) OVER w AS n, count(*) OVER w AS m, min(x) OVER w AS lo, "
            "max(x) OVER w AS hi, last_value(x) OVER w AS l, first_value(x) OVER w AS f, "
            f"lead(x) OVER (PARTITION BY k ORDER BY o) AS nx FROM {src} "
            f"WINDOW w AS (PARTITION BY k ORDER BY o ROWS BETWEEN {frame}) QUALIFY o % 3 <> 1"
        )
        expected = duck.sql(sql).fetchall()
        got = [tuple(r) for r in spark.sql(nspark.translate(sql)).collect()]
        assert len(expected) > 60 and _same(expected, got) is None, (frame, _same(expected, got))
    # a parameter's expression, no partition; and a frame on row_number, which DuckDB ignores
    sql = (
        "SELECT o, sum(x) OVER (ORDER BY k, o ROWS BETWEEN CURRENT ROW AND least(greatest($n, 2), 8) - 1 "
        f"FOLLOWING) AS s, row_number() OVER (ORDER BY k, o RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) "
        f"AS rn FROM {src}"
    )
    for n in (1, 3, 9):
        got = [tuple(r) for r in spark.sql(nspark.translate(sql), args={"n": n}).collect()]
        assert _same(duck.execute(sql, {"n": n}).fetchall(), got) is None, n
    with pytest.raises(QueryError, match="no Spark translation"):
        nspark.translate(
            f"SELECT avg(x) OVER (ORDER BY o ROWS BETWEEN CURRENT ROW AND c FOLLOWING) AS a FROM {src}"
        )


def test_window_filter_and_named_windows_translate(spark, duck):
    sql = (
        "SELECT k, count(*) FILTER (WHERE t > 2) OVER (PARTITION BY k) AS n, "
        "lead(t) OVER w - t AS step FROM (VALUES (1, 1), (1, 3), (1, 6), (2, 5)) AS x(k, t) "
        "WINDOW w AS (PARTITION BY k ORDER BY t)"
    )
    got = [tuple(r) for r in spark.sql(nspark.translate(sql)).collect()]
    assert _same(duck.sql(sql).fetchall(), got) is None


def test_cli_query_on_spark_prints_what_duckdb_prints(spark, spark_data, monkeypatch):
    """`nsa query NAME --engine spark --data DIR` and the DuckDB run give the same CSV (the
    session of this test run is the one `getOrCreate` returns)."""
    from nsight_analytics.cli import main

    runner = CliRunner()
    base = ["query", "kernel_summary", "--data", str(spark_data), "--format", "csv"]
    on_duckdb = runner.invoke(main, base)
    on_spark = runner.invoke(main, [*base, "--engine", "spark"])
    assert on_duckdb.exit_code == 0, on_duckdb.output
    assert on_spark.exit_code == 0, on_spark.output
    duck_lines, spark_lines = on_duckdb.stdout.splitlines(), on_spark.stdout.splitlines()
    assert spark_lines[0] == duck_lines[0]  # the header: the contract's columns

    def rows(lines: list[str]) -> list[tuple]:  # numbers as numbers: sums may differ in the last bit
        return [tuple(_number(v) for v in row) for row in csv.reader(lines[1:])]

    assert len(duck_lines) > 10
    assert _same(rows(duck_lines), rows(spark_lines)) is None


def test_cli_spark_needs_a_dataset(tmp_path):
    from nsight_analytics.cli import main

    result = CliRunner().invoke(
        main, ["query", "gaps", "--engine", "spark", "--db", str(tmp_path / "w.duckdb")]
    )
    assert result.exit_code == 2
    assert "--engine spark reads a Parquet dataset: give --data DIR" in result.stderr


def test_findings_with_spark_queries_are_the_duckdb_findings(spark, spark_data, duck):
    """Rules over every report of the dataset, their library queries run by Spark: the same
    findings as the rules on DuckDB (fp32-matmul: kernel_classes and utilization on Spark,
    firing on the PyTorch trace; the two copy rules: memcpy_summary and copy_directions too;
    the reports and the rules' own SQL stay on DuckDB)."""
    from nsight_analytics.rules.engine import run_rules

    only = ["fp32-matmul", "copy-dominated", "pageable-memcpy"]
    expected = run_rules(duck, only=only)
    got = nspark.findings(spark, spark_data, only=only)

    def key(f):
        return (f.rule_id, f.report_id, f.severity, f.title, f.message, f.est_savings_ns)

    assert expected
    assert sorted(map(key, got)) == sorted(map(key, expected))
