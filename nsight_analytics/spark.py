"""The query library on Apache Spark, over a Parquet dataset written by `nsa export DIR`.

The library stays DuckDB SQL, one dialect to write and test. For Spark each query is translated
when it is asked for: its shared macros (queries/**/_*.sql, queries/_kernels.sql) are expanded in
place, scalar macros as expressions and table macros as subqueries, with sqlglot's DuckDB parser,
then sqlglot writes Spark SQL, after a few rewrites of ours for what it leaves to the engine
(`_spark_rewrites`). Parameters stay named markers (`:min_gap_ns`) that Spark binds, never text.
Every dataset table (and the canonical views over them) becomes a temp view of the session.

What Spark cannot run is listed in UNSUPPORTED with the reason; `query` refuses those by name.
pyspark and sqlglot are the optional extra `spark` (`pip install 'nsight-analytics[spark]'`);
this module imports them only inside its functions, so the rest of nsa never needs them.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from . import dataset, params, queries
from .errors import QueryError
from .rules.context import Context, Rows, _key
from .schema import TABLES

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from sqlglot import exp

    from .rules.model import Finding

# query -> why Spark cannot run it (the same rows as DuckDB, or at all).
UNSUPPORTED: dict[str, str] = {
    "launch_stacks": (
        "it stacks its three sources of stacks with UNION ALL BY NAME (columns matched by name, "
        "each side naming its own), which Spark's SQL does not parse"
    ),
    "memory_steps": (
        "its windows end a per-row number of rows ahead (ROWS BETWEEN CURRENT ROW AND frame_rows "
        "FOLLOWING, a column), and Spark takes only literal frame bounds"
    ),
    "gap_calls": (
        "its parameters are lists (thread_ids, starts_ns, ends_ns), and spark.sql's named "
        "arguments refused them (INVALID_SQL_ARG) as array() columns"
    ),
    "kernel_sequences": (
        "its window frame ends a parameter's number of rows ahead (ROWS BETWEEN CURRENT ROW AND "
        "least(greatest($length, 2), 8) - 1 FOLLOWING), and Spark takes only literal frame bounds"
    ),
    "stream_gaps": (
        "it names activities by their position in a list built in label order (list(... ORDER "
        "BY ...)), and Spark's collect_list keeps no order: the labels come out wrong"
    ),
    "gpu_metrics_by_range": (
        "its windows end a per-row number of rows ahead (ROWS BETWEEN CURRENT ROW AND ahead "
        "FOLLOWING, a column), and Spark takes only literal frame bounds"
    ),
}

_ASOF_JOINS = itertools.count()
_SPARK_TYPES = {
    "BIGINT": "BIGINT",
    "INTEGER": "INT",
    "DOUBLE": "DOUBLE",
    "BOOLEAN": "BOOLEAN",
    "VARCHAR": "STRING",
    "TIMESTAMP": "TIMESTAMP",
    "VARCHAR[]": "ARRAY<STRING>",
}


def _require() -> None:
    try:
        import pyspark  # noqa: F401
        import sqlglot  # noqa: F401
    except ImportError as exc:
        raise QueryError(
            "the Spark engine needs pyspark and sqlglot: pip install 'nsight-analytics[spark]' "
            "(and Java 17 for a local session)."
        ) from exc


@dataclass(frozen=True)
class _Macro:
    name: str
    params: tuple[str, ...]
    body: exp.Expr
    table: bool


@cache
def _macros() -> dict[str, _Macro]:
    """The shared macros of queries/**/_*.sql, parsed once: {name: macro}."""
    import sqlglot
    from sqlglot import exp

    found: dict[str, _Macro] = {}
    for path in queries.macro_files():
        for stmt in sqlglot.parse(path.read_text(encoding="utf-8"), read="duckdb"):
            if not isinstance(stmt, exp.Create) or not isinstance(stmt.this, exp.UserDefinedFunction):
                continue
            udf = stmt.this
            name = udf.this.name
            params = tuple(p.name for p in udf.expressions)
            body = stmt.expression
            found[name] = _Macro(name, params, body, table=isinstance(body, exp.Query))
    return found


def _call_args(macro: _Macro, call: exp.Expr) -> dict[str, exp.Expr]:
    from sqlglot import exp

    bound: dict[str, exp.Expr] = {}
    positional = [a for a in call.expressions if not isinstance(a, (exp.PropertyEQ, exp.Kwarg))]
    for name, arg in zip(macro.params, positional):
        bound[name] = arg
    for arg in call.expressions:
        if isinstance(arg, (exp.PropertyEQ, exp.Kwarg)):
            bound[arg.this.name] = arg.expression
    missing = [p for p in macro.params if p not in bound]
    if missing:
        raise QueryError(f"macro {macro.name} called without {', '.join(missing)}.")
    return bound


def _substitute(macro: _Macro, args: Mapping[str, exp.Expr], number: int) -> exp.Expr:
    """The macro's body with each parameter replaced by its argument: inside a DuckDB macro a
    parameter shadows a column of the same name, so every unqualified column named like one is it."""
    from sqlglot import exp

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in args:
            return exp.Paren(this=args[node.name].copy())
        return node

    body = macro.body.copy().transform(swap)
    # Spark takes one WITH per statement (sqlglot hoists nested ones), where a name is defined
    # once: the body's CTEs get names of their own, a new suffix for each expansion
    suffix = f"__{macro.name}_{number}"
    names = {cte.alias for cte in body.find_all(exp.CTE)}
    for cte in list(body.find_all(exp.CTE)):
        cte.set("alias", exp.TableAlias(this=exp.to_identifier(cte.alias + suffix)))
    for table in list(body.find_all(exp.Table)):
        if not table.args.get("db") and isinstance(table.this, exp.Identifier) and table.name in names:
            if not table.args.get("alias"):
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(table.name + suffix))
    return body


def _call_name(node: exp.Expr) -> str | None:
    from sqlglot import exp

    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return None


def expand_macros(tree: exp.Expr) -> exp.Expr:
    """The statement with every shared macro expanded, until none is left (macros call macros)."""
    from sqlglot import exp

    macros = _macros()
    number = itertools.count()
    for _ in range(50):
        changed = False
        for table in list(tree.find_all(exp.Table)):
            name = _call_name(table.this)
            if name in macros and macros[name].table:
                macro = macros[name]
                body = _substitute(macro, _call_args(macro, table.this), next(number))
                alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(name))
                table.replace(exp.Subquery(this=body, alias=alias.copy()))
                changed = True
        for call in list(tree.find_all(exp.Anonymous)):
            name = _call_name(call)
            if name in macros and not macros[name].table:
                macro = macros[name]
                call.replace(exp.Paren(this=_substitute(macro, _call_args(macro, call), next(number))))
                changed = True
        if not changed:
            return tree
    raise QueryError("shared macros nest more than 50 deep: a macro calls itself?")


def _window_filter(node: exp.Expr) -> exp.Expr:
    """`agg(x) FILTER (WHERE c) OVER (...)`: Spark takes FILTER only on plain aggregates, so the
    condition moves into the argument (`agg(CASE WHEN c THEN x END)`; count(*) counts 1s)."""
    from sqlglot import exp

    if not isinstance(node, exp.Window) or not isinstance(node.this, exp.Filter):
        return node
    agg = node.this.this.copy()
    cond = node.this.expression.this.copy()
    arg = agg.this
    value = exp.Literal.number(1) if arg is None or isinstance(arg, exp.Star) else arg.copy()
    agg.set("this", exp.Case(ifs=[exp.If(this=cond, true=value)]))
    node.set("this", agg)
    return node


def _asof_key(cond: exp.Expr, right: str) -> tuple[exp.Expr, bool]:
    """The right side's ordering column of an ASOF condition, and whether the latest (largest)
    match is wanted (`left >= right.ts`) or the earliest (`left <= right.ts`)."""
    from sqlglot import exp

    for part in cond.flatten() if isinstance(cond, exp.And) else [cond]:
        if not isinstance(part, (exp.GTE, exp.GT, exp.LTE, exp.LT)):
            continue
        sides = [part.this, part.expression]
        on_right = [
            bool(s.find(exp.Column)) and all(c.table == right for c in s.find_all(exp.Column)) for s in sides
        ]
        if on_right == [False, True]:
            return sides[1], isinstance(part, (exp.GTE, exp.GT))
        if on_right == [True, False]:
            return sides[0], isinstance(part, (exp.LTE, exp.LT))
    raise QueryError("an ASOF JOIN without an inequality on the right table: cannot translate it.")


def _asof(node: exp.Expr) -> exp.Expr:
    """`L AS p ASOF [LEFT] JOIN R AS s ON eq AND p.t >= s.ts` as a Spark join: every match, then
    per left row only the one with the latest s.ts (the earliest for `<=`). The joined rows are
    packed so the rest of the statement reads them unchanged: the right's columns become one
    struct column named like the right (`s.x` reads its field); the left's stay columns (an
    unqualified `x`) and are once more a struct named like the left (`p.x`), or, when the ASOF
    join follows other joins, each table before it becomes a struct only. `p.*` lists a struct's
    fields, so a star over the join lists what DuckDB lists (a bare `*` is written as each
    table's). Left rows are told apart by all their values: equal rows get the same matches, as
    ASOF gives them. Unlike DuckDB's, right rows tied on the key are all kept."""
    import sqlglot
    from sqlglot import exp

    if not isinstance(node, exp.Select):
        return node
    joins = node.args.get("joins") or []
    asof = [i for i, j in enumerate(joins) if (j.args.get("method") or "").upper() == "ASOF"]
    if not asof:
        return node
    at = asof[0]
    join = joins[at]
    before = [node.args["from_"].this, *(j.this for j in joins[:at])]
    lefts = [t.alias_or_name for t in before]
    right = join.this.alias_or_name
    key, latest = _asof_key(join.args["on"], right)
    pick = "MAX" if latest else "MIN"
    outer = "LEFT JOIN" if (join.args.get("side") or "").upper() == "LEFT" else "JOIN"
    n = next(_ASOF_JOINS)  # helper columns named apart: one ASOF join's left may be another's result
    # `*` over the join: DuckDB lists the left tables' columns, then the right's; here each
    # table's `t.*`, which a struct column expands to its fields
    stars = [f"{a}.*" for a in [*lefts, right]]
    node.set(
        "expressions",
        [
            s
            for e in node.expressions
            for s in ([sqlglot.parse_one(x, read="spark") for x in stars] if isinstance(e, exp.Star) else [e])
        ],
    )
    if len(lefts) == 1:
        # the left's columns as they are (an unqualified `x`), and once more as a struct named
        # like the left (`p.x`, and `p.*` lists only the left's columns)
        columns, name = f"{lefts[0]}.*, STRUCT({lefts[0]}.*) AS {lefts[0]}", f"__nsa_asof{n}"
    else:
        columns, name = ", ".join(f"STRUCT({a}.*) AS {a}" for a in lefts), "__nsa_asof"
    partition = ", ".join(f"STRUCT({a}.*)" for a in lefts)
    template = sqlglot.parse_one(
        f"SELECT * FROM (SELECT {columns}, STRUCT({right}.*) AS {right}, __nsa_key AS __nsa_asof_key{n},"
        f" {pick}(__nsa_key) OVER (PARTITION BY {partition}) AS __nsa_asof_pick{n}"
        f" FROM __nsa_left {outer} __nsa_right ON __nsa_on) AS {name}"
        f" WHERE __nsa_asof_key{n} = __nsa_asof_pick{n} OR __nsa_asof_pick{n} IS NULL",
        read="spark",
    )
    inner = template.args["from_"].this.this
    inner.find(exp.From).this.replace(before[0].copy())
    packed_join = inner.args["joins"][0]
    packed_join.this.replace(join.this.copy())
    packed_join.args["on"].replace(join.args["on"].copy())
    inner.set("joins", [j.copy() for j in joins[:at]] + [packed_join])
    for col in list(inner.find_all(exp.Column)):
        if col.name == "__nsa_key":
            col.replace(key.copy())
    packed = exp.Subquery(this=template, alias=exp.TableAlias(this=exp.to_identifier(name)))
    node.set("from_", exp.From(this=packed))
    node.set("joins", joins[at + 1 :] or None)
    return _asof(node)


def _lateral_values(node: exp.Expr) -> exp.Expr:
    """`CROSS JOIN LATERAL (VALUES (c.a, -1), (c.b, 1)) AS t(x, side)`, rows built from the
    joined row's own columns: Spark's inline tables take no outer references, so the rows become
    `LATERAL VIEW inline(array(named_struct('x', c.a, 'side', -1), ...)) t AS x, side`, the same
    rows per joined row. A lateral view applies to every relation before it: the join must be the
    statement's last."""
    from sqlglot import exp

    if not isinstance(node, exp.Select):
        return node
    joins = node.args.get("joins") or []
    for i, join in enumerate(joins):
        lateral = join.this
        if not (
            isinstance(lateral, exp.Lateral)
            and isinstance(lateral.this, exp.Subquery)
            and isinstance(lateral.this.this, exp.Values)
        ):
            continue
        if i != len(joins) - 1 or join.args.get("on") or (join.args.get("side") or "").upper() == "LEFT":
            raise QueryError(
                "a LATERAL (VALUES ...) join that is not the last inner join: no Spark translation."
            )
        alias = lateral.args["alias"]
        cols = [c.name for c in alias.columns]
        rows = []
        for row in lateral.this.this.expressions:
            fields: list[exp.Expr] = []
            for col, value in zip(cols, row.expressions, strict=True):
                fields += [exp.Literal.string(col), value.copy()]
            rows.append(exp.Anonymous(this="named_struct", expressions=fields))
        generator = exp.Anonymous(this="inline", expressions=[exp.Array(expressions=rows)])
        view = exp.Lateral(this=generator, view=True, alias=alias.copy())
        node.set("joins", joins[:i] or None)
        node.set("laterals", [*(node.args.get("laterals") or []), view])
        return node
    return node


def _named_windows(node: exp.Expr) -> exp.Expr:
    """`OVER w` with `WINDOW w AS (...)`: each window written out in place (sqlglot's Spark
    output garbles a named window followed by an operator)."""
    from sqlglot import exp

    if not isinstance(node, exp.Select) or not node.args.get("windows"):
        return node
    named = {w.name: w for w in node.args["windows"]}
    for window in list(node.find_all(exp.Window)):
        ref = window.args.get("alias")
        if ref is None or ref.name not in named or window.parent_select is not node:
            continue
        spec = named[ref.name]
        window.set("alias", None)
        for key in ("partition_by", "order", "spec"):
            if spec.args.get(key) and not window.args.get(key):
                value = spec.args[key]
                window.set(key, [v.copy() for v in value] if isinstance(value, list) else value.copy())
    node.set("windows", None)
    return node


def _unmaterialise(node: exp.Expr) -> exp.Expr:
    """`WITH x AS MATERIALIZED (...)`: a DuckDB planner hint Spark does not parse; dropped."""
    from sqlglot import exp

    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)
    return node


# DuckDB functions that are Spark's under another name, same arguments
_RENAMED = {"error": "raise_error", "suffix": "endswith"}


def _functions(node: exp.Expr) -> exp.Expr:
    """DuckDB functions sqlglot leaves to the engine: error(msg) is Spark's raise_error(msg),
    suffix(s, t) endswith(s, t),
    len(list) size(list), list[i] / map[k] try_element_at(), list[a:b] slice(), quantile_disc(x, q) percentile_disc ... WITHIN GROUP."""
    from sqlglot import exp

    if isinstance(node, exp.Anonymous) and str(node.name).lower() in _RENAMED:
        return exp.Anonymous(
            this=_RENAMED[str(node.name).lower()], expressions=[e.copy() for e in node.expressions]
        )
    if isinstance(node, exp.Window) and isinstance(node.this, exp.RowNumber) and not node.args.get("order"):
        # row_number() OVER (): any numbering; Spark wants an order, the rows' own will do
        order = exp.Ordered(this=exp.Anonymous(this="monotonically_increasing_id", expressions=[]))
        node = node.copy()
        node.set("order", exp.Order(expressions=[order]))
        return node
    if isinstance(node, exp.First) and isinstance(node.this, exp.Order):
        # first(x ORDER BY k1, k2): min_by(x, struct(k1, k2)), where every key ascends (descending
        # keys: the query is refused); Spark orders a NULL key field first, DuckDB last
        keys = node.this.expressions
        if any(k.args.get("desc") for k in keys):
            raise QueryError("first(x ORDER BY ... DESC): no Spark translation.")
        key = exp.Struct(expressions=[k.this.copy() for k in keys]) if len(keys) > 1 else keys[0].this.copy()
        return exp.Anonymous(this="min_by", expressions=[node.this.this.copy(), key])
    if isinstance(node, exp.AggFunc) and isinstance(node.this, exp.Order):
        # sum(x ORDER BY k) and the like: an order that only fixes float rounding; Spark has none
        node = node.copy()
        node.set("this", node.this.this)
        return node
    if isinstance(node, exp.Length):
        # the library's len() counts list elements (it measures no strings): Spark's size()
        return exp.Anonymous(this="size", expressions=[node.this.copy()])
    if (
        isinstance(node, exp.Bracket)
        and len(node.expressions) == 1
        and isinstance(node.expressions[0], exp.Slice)
    ):
        # list[a:b] (1-based, both ends in): slice(list, a, b - a + 1)
        lo, hi = node.expressions[0].this, node.expressions[0].expression
        length = exp.Add(this=exp.Sub(this=hi.copy(), expression=lo.copy()), expression=exp.Literal.number(1))
        return exp.Anonymous(this="slice", expressions=[node.this.copy(), lo.copy(), length])
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
        # list[i] is 1-based, NULL out of range, and map[k] NULL for a missing key: try_element_at
        return exp.Anonymous(
            this="try_element_at", expressions=[node.this.copy(), node.expressions[0].copy()]
        )
    if isinstance(node, (exp.PercentileDisc, exp.PercentileCont)) and node.args.get("expression"):
        # quantile_disc(x, q): Spark's percentile_disc(q) WITHIN GROUP (ORDER BY x)
        name = "percentile_disc" if isinstance(node, exp.PercentileDisc) else "percentile_cont"
        return exp.WithinGroup(
            this=exp.Anonymous(this=name, expressions=[node.expression.copy()]),
            expression=exp.Order(expressions=[exp.Ordered(this=node.this.copy(), nulls_first=False)]),
        )
    return node


def _spark_rewrites(tree: exp.Expr) -> exp.Expr:
    tree = tree.transform(_unmaterialise).transform(_named_windows).transform(_window_filter)
    tree = tree.transform(_lateral_values)
    tree = tree.transform(_functions)
    return tree.transform(_asof)


@cache
def translate(name_or_sql: str) -> str:
    """Spark SQL for a library query (by name) or for DuckDB SQL: macros expanded, parameters
    left as named markers (`:report_id`)."""
    _require()
    import sqlglot

    sql = name_or_sql
    if re.fullmatch(r"[\w/.]+", name_or_sql):
        sql = queries.get(name_or_sql).sql
    tree = sqlglot.parse_one(sql, read="duckdb")
    tree = _spark_rewrites(expand_macros(tree))
    return tree.sql(dialect="spark")


def session(
    master: str | None = None, *, app: str = "nsa", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A SparkSession: a cluster by URL (`spark://host:7077`, `sc://host` for Spark Connect, or
    $SPARK_REMOTE), else local mode on this machine's cores. UTC session time like DuckDB's."""
    _require()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    remote = os.environ.get("SPARK_REMOTE")
    if master and master.startswith("sc://"):
        builder = builder.remote(master)
    elif master:
        builder = builder.master(master)
    elif not remote:
        builder = builder.master("local[*]")
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # both fail on the translated library (Spark 4.x): dynamic partition pruning's IN
        # subquery ("requirement failed" in InSubqueryExec, memcpy_summary), and the plan
        # validation after ReplaceCTERefWithRepartition (stream_gaps)
        "spark.sql.optimizer.dynamicPartitionPruning.enabled": "false",
        "spark.sql.planChangeValidation": "false",
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not (master or remote or "").startswith("sc://"):  # a Spark Connect client has no SparkContext
        spark.sparkContext.setLogLevel("ERROR")
    return spark


_REGISTERED = "spark.nsa.dataset"


def register(spark: SparkSession, data: str | os.PathLike[str], *, refresh: bool = False) -> None:
    """Make every canonical table of the dataset a temp view as `dataset.open_dataset` makes
    them for DuckDB: the canonical columns and types plus `rowid`, only the manifest's reports
    (or runs), an empty view where no export wrote rows; then the canonical views over them. A
    session remembers the dataset it registered and does it once; `refresh` lists the files
    again (reports appended since)."""
    from pyspark.sql import functions as F

    root = Path(data).expanduser().resolve()
    manifest = dataset.read_manifest(root)
    if not refresh and spark.conf.get(_REGISTERED, None) == str(root):
        return
    ids = {
        "report_id": [int(r["report_id"]) for r in manifest.get("reports", [])],
        "run_id": [int(r["run_id"]) for r in manifest.get("runs", [])],
    }
    for table in dataset.tables():
        cols = (*table.cols, dataset.ROWID)
        # the canonical columns as the schema: no inference pass over the files, partition
        # columns typed as the workspace types them, NULL for a column an older export lacks
        ddl = ", ".join(f"`{c.name}` {_SPARK_TYPES[c.type]}" for c in cols)
        if dataset.has_files(root, table.name):
            path = str(root / table.name)
            df: DataFrame = spark.read.schema(ddl).option("basePath", path).parquet(path)
            key = "report_id" if "report_id" in table.col_names else "run_id"
            df = df.where(F.col(key).isin(ids[key])).select(*[f"`{c.name}`" for c in cols])
        else:
            df = spark.createDataFrame([], ddl)
        df.createOrReplaceTempView(table.name)
    for view in TABLES:
        if view.view:
            spark.sql(f"CREATE OR REPLACE TEMP VIEW `{view.name}` AS {translate(view.view)}")
    spark.conf.set(_REGISTERED, str(root))


def query(
    spark: SparkSession | str | None,
    name: str,
    data: str | os.PathLike[str],
    params: Mapping[str, Any] | None = None,
) -> DataFrame:
    """Run library query NAME on Spark over dataset DATA: a Spark DataFrame with the query's
    columns. `spark` is a session, or a master URL for a new one (None: $SPARK_REMOTE or local)."""
    q = queries.get(name)
    if q.name in UNSUPPORTED:
        raise QueryError(f"query {q.name} does not run on Spark: {UNSUPPORTED[q.name]}")
    bound = q.bind(dict(params or {}))
    dataset.read_manifest(data)  # not a dataset: said before a session starts
    live = session(spark) if spark is None or isinstance(spark, str) else spark
    register(live, data)
    return live.sql(translate(q.name), args={k: _arg(v) for k, v in bound.items()})


def _arg(value: Any) -> Any:
    """A bound parameter as Spark takes it: a list as an array() column, the rest as literals."""
    if isinstance(value, (list, tuple)):
        from pyspark.sql import functions as F

        return F.array(*[F.lit(v) for v in value])
    return value


def relation(
    con: duckdb.DuckDBPyConnection, name: str, df: DataFrame, *, chunk: int = 2000
) -> duckdb.DuckDBPyRelation:
    """A Spark result brought back as a DuckDB relation typed as the query's contract declares
    its columns, so the renderers (`nsa query --format ...`) treat it as any other. The rows
    travel as SQL literals (params.literal) into a TEMP table: no pandas or Arrow round trip,
    exact integers (a pandas frame would turn an integer column with NULLs into floats)."""
    q = queries.get(name)
    declared = {c.name: c.type for c in q.columns}
    names = df.columns
    table = f"nsa_spark_{q.name}"
    cols = ", ".join(f'"{n}" {declared.get(n, "VARCHAR")}' for n in names)
    con.execute(f'CREATE OR REPLACE TEMP TABLE "{table}" ({cols})')
    batch: list[str] = []
    for row in df.toLocalIterator():
        batch.append("(" + ", ".join(params.literal(_plain(v)) for v in row) + ")")
        if len(batch) >= chunk:
            con.execute(f'INSERT INTO "{table}" VALUES {", ".join(batch)}')
            batch = []
    if batch:
        con.execute(f'INSERT INTO "{table}" VALUES {", ".join(batch)}')
    order = ", ".join(f'"{n}"' for n in names)
    return con.sql(f'SELECT {order} FROM "{table}" ORDER BY rowid')


def _plain(value: Any) -> Any:
    """A value of a Spark Row as params.literal takes it (Decimal as float; Rows do not occur)."""
    from decimal import Decimal

    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def findings(
    spark: SparkSession | str | None,
    data: str | os.PathLike[str],
    *,
    report_id: int | None = None,
    run_id: int | None = None,
    config: dict[str, Any] | None = None,
    only: list[str] | None = None,
) -> list[Finding]:
    """The rules' findings over every report of the dataset (or one report / run), with the
    library queries the rules read run by Spark: the heavy part, a few queries over every
    report at once, each computed once and shared by the rules. The rest of what the rules read
    (the reports and runs in scope, their own small SQL) is answered by DuckDB over the same
    files, and the rules' Python runs here, on the driver."""
    from .rules.engine import run_rules

    live = session(spark) if spark is None or isinstance(spark, str) else spark
    register(live, data)
    con = dataset.open_dataset(data)
    try:
        queries.install_macros(con)

        def context(*args: Any) -> Context:
            return SparkContext(session_, data, *args)

        session_ = live
        return run_rules(con, report_id=report_id, config=config, only=only, run_id=run_id, context=context)
    finally:
        con.close()


class SparkContext(Context):
    """A rules Context whose library queries run on Spark over the dataset (see `findings`);
    its other reads (reports, runs, the rules' own SQL) stay on the DuckDB connection."""

    def __init__(self, spark: SparkSession, data: str | os.PathLike[str], *args: Any) -> None:
        super().__init__(*args)
        self.spark = spark
        self.data = data

    def _run_query(self, name: str, params: dict[str, Any], as_df: bool) -> Any:
        key = ("q", name, _key(params), as_df)
        if key not in self._cache:
            if any(p.name == "report_id" for p in queries.get(name).params):
                params = {"report_id": self.report_id, **params}
            df = query(self.spark, name, self.data, params)
            rows = Rows(df.columns, [tuple(r) for r in df.collect()])
            if as_df:
                import pandas as pd

                self._cache[key] = pd.DataFrame.from_records(list(rows), columns=list(rows.columns))
            else:
                self._cache[key] = rows
        return self._cache[key]
