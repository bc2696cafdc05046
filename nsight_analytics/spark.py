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
import uuid
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
UNSUPPORTED: dict[str, str] = {}

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


def _asof_condition(
    cond: exp.Expr, right: str
) -> tuple[list[tuple[exp.Expr, exp.Expr, bool]], exp.Expr, exp.Expr, bool, bool]:
    """An ASOF condition taken apart: its equalities as (left side, right side, NULL-safe), the
    left's and the right's ordering expressions, whether the latest match is wanted (`left >=
    right.ts`; the earliest for `<=`) and whether a tie matches (`>=`, `<=`)."""
    from sqlglot import exp

    def side(e: exp.Expr) -> str | None:
        tables = {c.table for c in e.find_all(exp.Column)}
        if not tables:
            return None
        return "right" if tables == {right} else "left" if right not in tables else None

    eqs: list[tuple[exp.Expr, exp.Expr, bool]] = []
    order: tuple[exp.Expr, exp.Expr, bool, bool] | None = None
    for part in cond.flatten() if isinstance(cond, exp.And) else [cond]:
        part = part.unnest()
        sides = [side(part.this), side(part.expression)] if isinstance(part, exp.Binary) else []
        if sorted(map(str, sides)) != ["left", "right"]:
            raise QueryError(
                f"an ASOF JOIN condition neither side of which is the right table's: {part.sql()}"
            )
        lhs, rhs = (part.this, part.expression) if sides[0] == "left" else (part.expression, part.this)
        if isinstance(part, (exp.EQ, exp.NullSafeEQ)):
            eqs.append((lhs, rhs, isinstance(part, exp.NullSafeEQ)))
            continue
        if not isinstance(part, (exp.GTE, exp.GT, exp.LTE, exp.LT)) or order is not None:
            raise QueryError(
                f"an ASOF JOIN condition that is no equality and not its one inequality: {part.sql()}"
            )
        # as `left OP right`: flip the operator when the right table is written first
        flipped = {exp.GTE: exp.LTE, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.LT: exp.GT}
        op = type(part) if sides[0] == "left" else flipped[type(part)]
        order = (lhs, rhs, op in (exp.GTE, exp.GT), op in (exp.GTE, exp.LTE))
    if order is None:
        raise QueryError("an ASOF JOIN without an inequality on the right table: cannot translate it.")
    return eqs, *order


def _asof(node: exp.Expr) -> exp.Expr:
    """`L AS p ASOF [LEFT] JOIN R AS s ON eq AND p.t >= s.ts` as one sorted pass, Spark's way:
    the left rows and the right rows in one stream (UNION ALL), partitioned by the equality keys
    and ordered by the time, each left row taking the last right row before it (`last_value(...)
    IGNORE NULLS` over the rows so far; a descending order for `<=`, a tie placed by the side
    that comes first). No range join: linear after the sort, as DuckDB's ASOF join is. The joined
    rows are packed so the rest of the statement reads them unchanged: the right row is one
    struct column named like the right (`s.x` reads its field, NULL without a match); the left's
    columns stay columns (an unqualified `x`) and are once more a struct named like the left
    (`p.x`), or, when the ASOF join follows other joins, each table before it becomes a struct
    only. `p.*` lists a struct's fields, so a star over the join lists what DuckDB lists (a bare
    `*` is written as each table's). Of right rows tied on the key one is taken, as in DuckDB."""
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
    eqs, left_t, right_t, latest, tie = _asof_condition(join.args["on"], right)
    outer = (join.args.get("side") or "").upper() == "LEFT"
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
    one = len(lefts) == 1
    packs = [f"__nsa_l{n}"] if one else lefts
    keys = [f"__nsa_k{n}_{i}" for i in range(len(eqs))]
    t, s, r = f"__nsa_t{n}", f"__nsa_s{n}", f"__nsa_r{n}"
    # where left and right rows tie on the time, the side that sorts first: the right row when
    # a tie matches (>=, <=), else the left row
    left_s, right_s = (1, 0) if tie else (0, 1)
    # a left row with a NULL key or time matches nothing (`=` is not NULL-safe)
    guard = " AND ".join(
        [f"{t} IS NOT NULL", *(f"{k} IS NOT NULL" for k, (_, _, safe) in zip(keys, eqs) if not safe)]
    )
    key_cols = "".join(f"__nsa_key AS {k}, " for k in keys)
    template = sqlglot.parse_one(
        f"SELECT {f'__nsa_l{n}.*, __nsa_l{n} AS {lefts[0]}' if one else ', '.join(lefts)}, {right}"
        f" FROM (SELECT {s}, {', '.join(packs)},"
        f" CASE WHEN {guard} THEN LAST_VALUE({r}) IGNORE NULLS OVER ("
        f"{'PARTITION BY ' + ', '.join(keys) if keys else ''}"
        f" ORDER BY {t} {'ASC' if latest else 'DESC'}, {s} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
        f" END AS {right}"
        f" FROM (SELECT {', '.join(f'STRUCT({a}.*) AS {p}' for a, p in zip(lefts, packs))},"
        f" {key_cols}__nsa_time AS {t}, {left_s} AS {s}, NULL AS {r} FROM __nsa_left"
        f" UNION ALL SELECT {', '.join(f'NULL AS {p}' for p in packs)}, {key_cols}__nsa_time AS {t},"
        f" {right_s} AS {s}, STRUCT({right}.*) AS {r} FROM __nsa_right"
        f" WHERE __nsa_time IS NOT NULL) AS __nsa_u{n}) AS __nsa_w{n}"
        f" WHERE {s} = {left_s}{'' if outer else f' AND {right} IS NOT NULL'}",
        read="spark",
    )
    union = template.args["from_"].this.this.args["from_"].this.this
    lhs, rhs = union.this, union.expression
    lhs.find(exp.From).this.replace(before[0].copy())
    lhs.set("joins", [j.copy() for j in joins[:at]] or None)
    rhs.find(exp.From).this.replace(join.this.copy())
    for branch, exprs, time in ((lhs, [e[0] for e in eqs], left_t), (rhs, [e[1] for e in eqs], right_t)):
        placed = iter(exprs)
        for col in list(branch.find_all(exp.Column)):
            if col.name == "__nsa_key":
                col.replace(next(placed).copy())
            elif col.name == "__nsa_time":
                col.replace(time.copy())
    # right rows that cannot match (a NULL in an `=` key) are left out
    where = rhs.args["where"].this
    for _, key, safe in eqs:
        if not safe:
            where = exp.And(
                this=where, expression=exp.Not(this=exp.Is(this=key.copy(), expression=exp.Null()))
            )
    rhs.set("where", exp.Where(this=where))
    name = f"__nsa_asof{n}"
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
    len(list) size(list), list[i] / map[k] try_element_at(), list[a:b] slice(), quantile_disc(x, q) percentile_disc ... WITHIN GROUP,
    histogram(x) a map counted from collect_list(x), a tuple's field by position a struct's by name."""
    import sqlglot
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
        index = node.expressions[0]
        # sqlglot reads DuckDB's 1-based index as a 0-based one where it knows an integer (a
        # literal one less, an integer expression `+ -1`; a column it leaves): 1-based again
        if isinstance(index, exp.Literal) and not index.is_string:
            index = exp.Literal.number(int(index.this) + 1)
        elif isinstance(index, exp.Add) and index.expression.sql() == "-1":
            index = index.this
        inner = node.this.copy()  # rewritten here: transform() does not enter what it replaced
        tuples = _tuple_lambdas(inner)
        if tuples and isinstance(index, exp.Literal):
            # a tuple's field by position, `list_max(list_transform(l, e -> (a, b)))[2]`: the
            # tuple becomes a struct of fields f1, f2, ... and its field is read by name
            for tup in tuples:
                fields: list[exp.Expr] = []
                for i, value in enumerate(tup.expressions, 1):
                    fields += [exp.Literal.string(f"f{i}"), value.copy()]
                tup.replace(exp.Anonymous(this="named_struct", expressions=fields))
            inner = inner.transform(_functions)
            return exp.Dot(this=exp.Paren(this=inner), expression=exp.to_identifier(f"f{index.this}"))
        # list[i] is 1-based, NULL out of range, and map[k] NULL for a missing key: try_element_at
        return exp.Anonymous(
            this="try_element_at", expressions=[inner.transform(_functions), index.transform(_functions)]
        )
    if (
        isinstance(node, exp.Anonymous)
        and str(node.name).lower() == "histogram"
        and len(node.expressions) == 1
    ):
        # histogram(x): {value: count} of the group's non-NULL values, counted from its list
        items = exp.Anonymous(this="collect_list", expressions=[node.expressions[0].copy()])
        distinct = exp.Anonymous(this="array_distinct", expressions=[items])
        count = sqlglot.parse_one(
            "transform(__nsa_k, __nsa_v -> CAST(size(filter(__nsa_l, __nsa_y -> __nsa_y = __nsa_v)) AS BIGINT))",
            read="spark",
        )
        for col in list(count.find_all(exp.Column)):
            if col.name in ("__nsa_k", "__nsa_l"):
                col.replace((distinct if col.name == "__nsa_k" else items).copy())
        return exp.Anonymous(this="map_from_arrays", expressions=[distinct, count])
    if isinstance(node, (exp.PercentileDisc, exp.PercentileCont)) and node.args.get("expression"):
        # quantile_disc(x, q): Spark's percentile_disc(q) WITHIN GROUP (ORDER BY x)
        name = "percentile_disc" if isinstance(node, exp.PercentileDisc) else "percentile_cont"
        return exp.WithinGroup(
            this=exp.Anonymous(this=name, expressions=[node.expression.copy()]),
            expression=exp.Order(expressions=[exp.Ordered(this=node.this.copy(), nulls_first=False)]),
        )
    return node


def _tuple_lambdas(node: exp.Expr) -> list[exp.Tuple]:
    """The tuples a list-of-tuples expression is built of: `list_max/list_min(list_transform(l,
    e -> (a, b)))` (or the transform alone); none for anything else."""
    from sqlglot import exp

    if isinstance(node, (exp.ArrayMax, exp.ArrayMin)):
        node = node.this
    lam = node.expression if isinstance(node, exp.Transform) else None
    if isinstance(lam, exp.Lambda) and isinstance(lam.this, exp.Tuple):
        return [lam.this]
    return []


def _query_table(node: exp.Expr) -> exp.Expr:
    """`FROM query_table('name')` (a macro reading a table or CTE named by its argument, as
    nsa_stack_described): Spark's plain `FROM name`."""
    from sqlglot import exp

    if not (isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous)):
        return node
    if str(node.this.name).lower() != "query_table" or len(node.this.expressions) != 1:
        return node
    arg = node.this.expressions[0]
    while isinstance(arg, exp.Paren):
        arg = arg.this
    if not (isinstance(arg, exp.Literal) and arg.is_string):
        return node
    alias = node.args.get("alias")
    return exp.Table(this=exp.to_identifier(arg.this), alias=alias.copy() if alias else None)


def _ordered_list(node: exp.Expr) -> exp.Expr:
    """`list(x ORDER BY k1, k2)`: Spark's collect_list keeps no order (sqlglot drops the ORDER
    BY), so each element travels with its keys and the list is sorted on them: `transform(
    array_sort(collect_list(named_struct(k1 IS NULL, k1, ..., x))), e -> e.x)`, NULL keys last
    as DuckDB sorts them, NULL elements kept as DuckDB's list() keeps them. Descending keys: no
    translation (the query is refused)."""
    from sqlglot import exp

    if not isinstance(node, exp.ArrayAgg) or not isinstance(node.this, exp.Order):
        return node
    keys = node.this.expressions
    if any(k.args.get("desc") or k.args.get("nulls_first") for k in keys):
        raise QueryError("list(x ORDER BY ... DESC / NULLS FIRST): no Spark translation.")
    fields: list[exp.Expr] = []
    for i, key in enumerate(keys):
        fields += [exp.Literal.string(f"n{i}"), exp.Is(this=key.this.copy(), expression=exp.Null())]
        fields += [exp.Literal.string(f"k{i}"), key.this.copy()]
    fields += [exp.Literal.string("v"), node.this.this.copy()]
    packed = exp.Anonymous(
        this="array_sort",
        expressions=[
            exp.Anonymous(
                this="collect_list", expressions=[exp.Anonymous(this="named_struct", expressions=fields)]
            )
        ],
    )
    pick = exp.Lambda(
        this=exp.Dot(this=exp.column("__nsa_e"), expression=exp.to_identifier("v")),
        expressions=[exp.to_identifier("__nsa_e")],
    )
    return exp.Anonymous(this="transform", expressions=[packed, pick])


def _zipped_unnests(node: exp.Expr) -> exp.Expr:
    """`SELECT unnest(a) AS x, unnest(b) AS y` (no FROM): DuckDB walks the lists side by side
    (the shorter padded with NULLs); Spark takes one generator per SELECT, so the rows come from
    one position list instead: `SELECT try_element_at(a, i) AS x, ... FROM (SELECT explode(
    sequence(0, greatest(size(a), ...))) AS i) WHERE i >= 1`."""
    import sqlglot
    from sqlglot import exp

    if not isinstance(node, exp.Select) or node.args.get("from_") or node.args.get("joins"):
        return node
    cols = node.expressions
    if len(cols) < 2 or not all(isinstance(c, exp.Alias) and isinstance(c.this, exp.Explode) for c in cols):
        return node
    lists = [c.this.this for c in cols]
    sizes = ", ".join(f"coalesce(size(__nsa_list{i}), 0)" for i in range(len(lists)))
    template = sqlglot.parse_one(
        "SELECT "
        + ", ".join(f"try_element_at(__nsa_list{i}, __nsa_i) AS {c.alias}" for i, c in enumerate(cols))
        + f" FROM (SELECT explode(sequence(0, greatest({sizes}, 0))) AS __nsa_i) AS __nsa_positions"
        " WHERE __nsa_i >= 1",
        read="spark",
    )
    for col in list(template.find_all(exp.Column)):
        if col.name.startswith("__nsa_list"):
            col.replace(lists[int(col.name.removeprefix("__nsa_list"))].copy())
    return template


def _by_name(tree: exp.Expr) -> exp.Expr:
    """`a UNION [ALL] BY NAME b`, which Spark's SQL does not parse: each side becomes `SELECT
    <the union's columns> FROM (side)` in one order, NULL for a column the side lacks (DuckDB
    lists the left's columns, then the right's new ones). The sides' columns are found by
    sqlglot's qualify over the canonical tables' columns (it expands `*` through the CTEs); a
    side whose columns stay unknown is refused."""
    from sqlglot import exp
    from sqlglot.optimizer.qualify import qualify

    unions = [u for u in tree.find_all(exp.Union) if u.args.get("by_name")]
    if not unions:
        return tree
    schema: dict[str, object] = {t.name: {c.name: "BIGINT" for c in t.cols} for t in TABLES}
    try:
        resolved = qualify(tree.copy(), schema=schema, dialect="duckdb", validate_qualify_columns=False)
    except Exception as exc:  # sqlglot raises several kinds; all mean the same here
        raise QueryError(f"UNION BY NAME: the columns of its sides are unknown ({exc}).") from exc
    twins = [u for u in resolved.find_all(exp.Union) if u.args.get("by_name")]
    if len(twins) != len(unions):
        raise QueryError("UNION BY NAME: the columns of its sides are unknown.")

    def names(node: exp.Expr) -> list[str]:
        if isinstance(node, exp.Union) and node.args.get("by_name"):
            left = names(node.this)
            return left + [n for n in names(node.expression) if n not in left]
        if isinstance(node, exp.Subquery):
            return names(node.this)
        found = list(getattr(node, "named_selects", []))
        if not found or "*" in found:
            raise QueryError("UNION BY NAME over a side whose columns are unknown.")
        return found

    shapes = [(names(t), names(t.this), names(t.expression)) for t in twins]
    # innermost first: an outer union's side is copied with its inner unions already rewritten
    for i, (union, (cols, left, right)) in reversed(list(enumerate(zip(unions, shapes)))):
        for key, side, have in (("this", union.this, left), ("expression", union.expression, right)):
            select = exp.select(
                *[exp.column(c) if c in have else exp.alias_(exp.Null(), c) for c in cols]
            ).from_(
                exp.Subquery(
                    this=side.copy(), alias=exp.TableAlias(this=exp.to_identifier(f"__nsa_by_name{i}_{key}"))
                )
            )
            union.set(key, select)
        union.set("by_name", None)
    return tree


_VARIABLE_FRAMES = itertools.count()


def _variable_bound(bound: object) -> bool:
    """A frame bound Spark does not take: an expression (a column, a sum of parameters), where
    Spark's parser wants UNBOUNDED, CURRENT ROW, a literal or a bare parameter marker."""
    from sqlglot import exp

    return isinstance(bound, exp.Expr) and not isinstance(bound, (exp.Literal, exp.Placeholder))


def _variable_frame(node: exp.Expr) -> bool:
    """Whether the node is a window with a frame bound Spark does not take."""
    from sqlglot import exp

    spec = node.args.get("spec") if isinstance(node, exp.Window) else None
    return spec is not None and (
        _variable_bound(spec.args.get("start")) or _variable_bound(spec.args.get("end"))
    )


def _variable_frames(tree: exp.Expr) -> exp.Expr:
    """Window frames whose bounds are expressions, `agg(x) OVER (PARTITION BY p ORDER BY o ROWS
    BETWEEN CURRENT ROW AND n FOLLOWING)` with n a column or an expression of parameters (DuckDB
    evaluates n per row; Spark's parser takes only literal bounds). Each frame becomes a range of
    row positions [lo, hi) in its partition and is answered from dyadic blocks, as a segment tree
    does: the rows are numbered in the window's order, each row belongs to one block of 2^k rows
    per level k (block `(rn - 1) >> k`), whose aggregate is a GROUP BY; a range is the union of
    at most two blocks per level (the bottom-up walk of a segment tree, written in closed form:
    at level k, with l = ceil(lo / 2^k) and r = floor(hi / 2^k), block l when l is odd, block r
    - 1 when r is odd, while l < r), so each row meets its blocks through an equality join and
    a GROUP BY combines them. Rows and blocks grow by log2 of the widest frame of the partition:
    n log n, equality joins only. sum, count, min and max combine so; first_value/last_value
    (not ignoring NULLs) read the block of one row at the frame's start/end. The select keeps
    its other windows, and its QUALIFY becomes a filter after the frames."""
    from sqlglot import exp

    for select in reversed(list(tree.find_all(exp.Select))):
        windows = [
            w
            for w in select.expressions
            for w in [w.this if isinstance(w, exp.Alias) else w]
            if _variable_frame(w)
        ]
        if not windows:
            continue
        nested = [
            w
            for w in select.find_all(exp.Window)
            if w.parent_select is select and _variable_frame(w) and not any(w is v for v in windows)
        ]
        if nested:
            raise QueryError(
                "a window frame bounded by an expression inside an expression: no Spark translation."
            )
        replaced = _frames_by_blocks(select, windows)
        if select is tree:
            tree = replaced
        else:
            select.replace(replaced)
    return tree


def _frames_by_blocks(select: exp.Select, windows: list[exp.Window]) -> exp.Expr:
    """The SELECT holding `windows` (one partition, order and frame; each a whole column) as
    `_variable_frames` computes them: its rows, the frame functions' arguments and the row
    positions in a CTE, joined to the frames' combined blocks."""
    import sqlglot
    from sqlglot import exp

    def refuse(why: str) -> QueryError:
        return QueryError(f"a window frame bounded by an expression {why}: no Spark translation.")

    first = windows[0]
    spec = first.args["spec"]
    key = (
        [p.sql() for p in first.args.get("partition_by") or []],
        first.args["order"].sql() if first.args.get("order") else None,
        spec.sql(),
    )
    for w in windows:
        if (
            [p.sql() for p in w.args.get("partition_by") or []],
            w.args["order"].sql() if w.args.get("order") else None,
            w.args["spec"].sql(),
        ) != key:
            raise refuse("in windows of different partitions, orders or frames in one SELECT")
    if spec.args.get("kind", "").upper() != "ROWS":
        raise refuse("in a RANGE frame")
    if select.args.get("distinct") or select.args.get("order") or select.args.get("limit"):
        raise refuse("in a SELECT with DISTINCT, ORDER BY or LIMIT")
    n = next(_VARIABLE_FRAMES)
    fb, fa = f"__nsa_fb{n}", f"__nsa_fa{n}"
    parts = list(first.args.get("partition_by") or [])
    # how each frame function is computed per block and combined per frame
    kinds: list[tuple[str, str, str]] = []  # (block aggregate, combining aggregate, probe)
    args: list[exp.Expr] = []
    for w in windows:
        fn = w.this
        if (
            isinstance(fn, exp.Count)
            and not fn.args.get("distinct")
            and not isinstance(fn.this, exp.Distinct)
        ):
            args.append(
                exp.Literal.number(1) if fn.this is None or isinstance(fn.this, exp.Star) else fn.this.copy()
            )
            kinds.append(("count", "sum", "range"))
        elif isinstance(fn, (exp.Sum, exp.Min, exp.Max)) and not isinstance(fn.this, exp.Distinct):
            agg = {exp.Sum: "sum", exp.Min: "min", exp.Max: "max"}[type(fn)]
            args.append(fn.this.copy())
            kinds.append((agg, agg, "range"))
        elif isinstance(fn, (exp.FirstValue, exp.LastValue)):
            args.append(fn.this.copy())
            kinds.append(("first", "first", "first" if isinstance(fn, exp.FirstValue) else "last"))
        else:
            raise refuse(f"over {fn.sql(dialect='duckdb')}")
    # the select's own rows, with what the frames need: the aggregates' arguments, the
    # partition keys, the row's position in the window's order and the partition's size (in the
    # same SELECT as its other windows, so rows tied on the order are numbered as they see them)
    base = select.copy()
    var = {id(w): i for i, w in enumerate(windows)}
    outs: list[str] = []
    for e in select.expressions:
        inner = e.this if isinstance(e, exp.Alias) else e
        name = exp.to_identifier(e.alias_or_name).sql(dialect="spark") if e.alias_or_name else None
        if id(inner) in var:
            i = var[id(inner)]
            value = f"{fa}.__nsa_r{i}"
            outs.append(f"{f'coalesce({value}, 0)' if kinds[i][0] == 'count' else value} AS {name}")
        elif isinstance(e, (exp.Alias, exp.Column)) and name:
            outs.append(f"{fb}.{name}")
        else:
            raise refuse(f"beside an unnamed column ({e.sql(dialect='duckdb')})")
    kept = [e.copy() for e in select.expressions if id(e.this if isinstance(e, exp.Alias) else e) not in var]
    extra: list[exp.Expr] = []
    for i, a in enumerate(args):
        extra.append(exp.alias_(a, f"__nsa_v{i}"))
    for i, p in enumerate(parts):
        extra.append(exp.alias_(p.copy(), f"__nsa_p{i}"))
    numbered = first.copy()
    numbered.set("this", exp.RowNumber())
    numbered.set("spec", None)
    extra.append(exp.alias_(numbered, "__nsa_rn"))
    size = first.copy()
    size.set("this", exp.Count(this=exp.Star()))
    size.set("spec", None)
    size.set("order", None)
    extra.append(exp.alias_(size, "__nsa_n"))
    bounds = []
    for side, (bound, way) in enumerate(
        (
            (spec.args.get("start"), spec.args.get("start_side")),
            (spec.args.get("end"), spec.args.get("end_side")),
        )
    ):
        if isinstance(bound, exp.Expr) and _variable_bound(bound):
            extra.append(exp.alias_(bound.copy(), f"__nsa_o{side}"))
            offset = f"__nsa_o{side}"
        elif isinstance(bound, exp.Expr):
            offset = bound.sql(dialect="spark")
        else:
            offset = str(bound).upper()
        # [lo, hi): 0-based positions, the end excluded
        at = "__nsa_rn - 1" if side == 0 else "__nsa_rn"
        if offset == "UNBOUNDED":
            bounds.append("0" if side == 0 else "__nsa_n")
        elif offset == "CURRENT ROW":
            bounds.append(at)
        else:
            bounds.append(f"{at} {'-' if str(way).upper() == 'PRECEDING' else '+'} ({offset})")
    qualify = select.args.get("qualify")
    if qualify is not None:
        extra.append(exp.alias_(qualify.this.copy(), "__nsa_q"))
    base.set("expressions", kept + extra)
    base.set("qualify", None)
    keys = [f"__nsa_p{i}" for i in range(len(parts))]
    by = ", ".join(keys)
    lead = "".join(f"{k}, " for k in keys)

    def on(a: str, b: str) -> str:  # the partitions' keys equal, NULL to NULL
        return "".join(f"{a}.{k} <=> {b}.{k} AND " for k in keys)

    probes = {k[2] for k in kinds}
    low = -2 if "first" in probes else -1 if "last" in probes else 0
    blocks = ", ".join(f"{k[0]}(__nsa_v{i}) AS __nsa_a{i}" for i, k in enumerate(kinds))
    combined = ", ".join(
        f"{k[1]}(CASE WHEN q.__nsa_c {'>= 0' if k[2] == 'range' else '= -2' if k[2] == 'first' else '= -1'}"
        f" THEN b.__nsa_a{i} END){' IGNORE NULLS' if k[1] == 'first' else ''} AS __nsa_r{i}"
        for i, k in enumerate(kinds)
    )
    over = f"PARTITION BY {by}" if keys else ""
    template = (
        f"SELECT {', '.join(outs)} FROM __nsa_frames AS {fb}"
        f" LEFT JOIN (SELECT {''.join(f'q.{k}, ' for k in keys)}q.__nsa_rn, {combined} FROM ("
        # each frame's blocks: two at most per level, its first and last rows at level 0
        f"SELECT {lead}__nsa_rn, __nsa_c, __nsa_lvl, CASE WHEN __nsa_c = -2 THEN __nsa_lo"
        f" WHEN __nsa_c = -1 THEN __nsa_hi - 1 WHEN __nsa_c % 2 = 0 THEN __nsa_l ELSE __nsa_r - 1 END AS __nsa_blk"
        f" FROM (SELECT *, shiftright(__nsa_lo + shiftleft(CAST(1 AS BIGINT), __nsa_lvl) - 1, __nsa_lvl) AS __nsa_l,"
        f" shiftright(__nsa_hi, __nsa_lvl) AS __nsa_r"
        f" FROM (SELECT *, CASE WHEN __nsa_c < 0 THEN 0 ELSE shiftright(__nsa_c, 1) END AS __nsa_lvl"
        f" FROM (SELECT {lead}__nsa_rn, __nsa_lo, __nsa_hi,"
        f" explode(sequence({low}, 2 * CAST(log2(__nsa_hi - __nsa_lo) AS INT) + 3)) AS __nsa_c"
        f" FROM __nsa_frames WHERE __nsa_hi > __nsa_lo) AS __nsa_e) AS __nsa_x) AS __nsa_y"
        f" WHERE __nsa_c < 0 OR __nsa_l < __nsa_r AND CASE WHEN __nsa_c % 2 = 0 THEN __nsa_l % 2 = 1"
        f" ELSE __nsa_r % 2 = 1 END) AS q"
        # the blocks of each partition, up to the level of its widest frame
        f" JOIN (SELECT {lead}__nsa_lvl, shiftright(CAST(__nsa_rn AS BIGINT) - 1, __nsa_lvl) AS __nsa_blk, {blocks}"
        f" FROM (SELECT *, explode(sequence(0, CASE WHEN __nsa_w > 0 THEN CAST(log2(__nsa_w) AS INT) + 1 ELSE 0 END))"
        f" AS __nsa_lvl FROM (SELECT *, max(__nsa_hi - __nsa_lo) OVER ({over}) AS __nsa_w FROM __nsa_frames) AS __nsa_z)"
        f" AS __nsa_g GROUP BY {lead}__nsa_lvl, shiftright(CAST(__nsa_rn AS BIGINT) - 1, __nsa_lvl)) AS b"
        f" ON {on('q', 'b')}q.__nsa_lvl = b.__nsa_lvl AND q.__nsa_blk = b.__nsa_blk"
        f" GROUP BY {''.join(f'q.{k}, ' for k in keys)}q.__nsa_rn) AS {fa}"
        f" ON {on(fb, fa)}{fb}.__nsa_rn = {fa}.__nsa_rn"
        + (f" WHERE {fb}.__nsa_q" if qualify is not None else "")
    )
    tree = sqlglot.parse_one(template, read="spark")
    # the rows with their frames, read three times (the result, the frames' blocks, the blocks):
    # a CTE, which a plan computes once (`_plan`), placed before the CTE the select is in
    name = f"__nsa_frames{n}"
    cte = exp.CTE(
        this=sqlglot.parse_one(
            f"SELECT *, CAST(least(greatest({bounds[0]}, 0), __nsa_n) AS BIGINT) AS __nsa_lo,"
            f" CAST(least(greatest({bounds[1]}, 0), __nsa_n) AS BIGINT) AS __nsa_hi FROM __nsa_base",
            read="spark",
        ),
        alias=exp.TableAlias(this=exp.to_identifier(name)),
    )
    own = base.args.get("with_")
    base.set("with_", None)
    cte.this.find(exp.Table).replace(
        exp.Subquery(this=base, alias=exp.TableAlias(this=exp.to_identifier("__nsa_base")))
    )
    for table in list(tree.find_all(exp.Table)):
        if table.name == "__nsa_frames":
            table.set("this", exp.to_identifier(name))
    outer = select.parent
    while outer is not None and not (isinstance(outer, exp.CTE) and isinstance(outer.parent, exp.With)):
        outer = outer.parent
    if outer is not None and isinstance(outer.parent, exp.With) and own is None:
        siblings = outer.parent.expressions
        place = siblings.index(outer)
        outer.parent.set("expressions", [*siblings[:place], cte, *siblings[place:]])
    else:
        tree.set("with_", exp.With(expressions=[*(own.expressions if own else []), cte]))
    return tree


def _ranking_frames(node: exp.Expr) -> exp.Expr:
    """A frame on a ranking or offset function (`row_number() OVER (ORDER BY t RANGE BETWEEN
    UNBOUNDED PRECEDING AND CURRENT ROW)`, from a named window shared with aggregates): DuckDB
    ignores it, Spark refuses any frame but the function's own, so it is dropped."""
    from sqlglot import exp

    ranking = (
        exp.RowNumber,
        exp.Rank,
        exp.DenseRank,
        exp.Ntile,
        exp.PercentRank,
        exp.CumeDist,
        exp.Lead,
        exp.Lag,
    )
    if isinstance(node, exp.Window) and isinstance(node.this, ranking) and node.args.get("spec") is not None:
        node.set("spec", None)
    return node


def _spark_rewrites(tree: exp.Expr) -> exp.Expr:
    tree = tree.transform(_query_table)
    tree = _by_name(tree)
    tree = tree.transform(_unmaterialise).transform(_named_windows).transform(_window_filter)
    tree = tree.transform(_lateral_values).transform(_ordered_list).transform(_zipped_unnests)
    tree = tree.transform(_functions).transform(_ranking_frames)
    tree = _variable_frames(tree)
    return tree.transform(_asof)


@cache
def translate(name_or_sql: str) -> str:
    """Spark SQL for a library query (by name) or for DuckDB SQL: macros expanded, parameters
    left as named markers (`:report_id`)."""
    _require()
    import sqlglot
    from sqlglot import exp

    sql, lists = name_or_sql, {}
    if re.fullmatch(r"[\w/.]+", name_or_sql):
        q = queries.get(name_or_sql)
        sql = q.sql
        lists = {p.name: p.type[:-2] for p in q.params if p.type.endswith("[]")}
    tree = sqlglot.parse_one(sql, read="duckdb")
    tree = _spark_rewrites(expand_macros(tree))
    if lists:
        # a list parameter is bound as JSON text (`_arg`) and read back typed: spark.sql's
        # arguments take array() of literals of one type only (INVALID_SQL_ARG for [0, 10**12])
        def typed(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Placeholder) and node.name in lists:
                element = _SPARK_TYPES.get(lists[node.name], lists[node.name])
                return exp.Anonymous(
                    this="from_json", expressions=[node.copy(), exp.Literal.string(f"array<{element}>")]
                )
            return node

        tree = tree.transform(typed)
    return tree.sql(dialect="spark")


# a materialised CTE's view: this marker, the query run's own tag, the CTE's number and name
_VIEW = "__nsa_cte_"


@dataclass(frozen=True)
class _Plan:
    """A translated statement split at its shared CTEs: `steps` compute each (a view name with
    the marker `_VIEW`, and the Spark SQL that fills it), in order; `sql` reads them."""

    steps: tuple[tuple[str, str], ...]
    sql: str


@cache
def _plan(sql: str) -> _Plan:
    """The CTEs of a translated statement that Spark would compute more than once, set apart to
    be computed once each. Spark inlines a CTE at every place it is read, and the library's
    macros read each other's CTEs over and over (rank_balance's plan scanned Parquet 455 times):
    a CTE whose inlined copies would number more than one - counted through the CTEs that read
    it, those set apart counting once - becomes a view of its own. Every WITH of the statement
    (a table macro's, inside a subquery) is one namespace here: their names are unique (the
    macro expansion suffixes them), else nothing is set apart."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, read="spark")
    withs = list(tree.find_all(exp.With))
    ctes = [c for w in withs for c in w.expressions]
    names = [c.alias for c in ctes]
    # a nested WITH's CTE named like a table would shadow it outside its scope once hoisted
    tables = {t.name for t in TABLES}
    nested = {c.alias for w in withs if w.parent is not tree for c in w.expressions}
    if (
        len(ctes) < 2
        or len(set(names)) != len(names)
        or nested & tables
        or any(w.args.get("recursive") for w in withs)
    ):
        return _Plan((), sql)
    body = {c.alias: c.this for c in ctes}
    # a CTE naming its columns (`x(a, b) AS ...`) stays where it is
    fixed = {c.alias for c in ctes if c.args["alias"].columns}
    reads: dict[str | None, dict[str, int]] = {n: {} for n in [None, *names]}  # reader -> {CTE: times}
    refs: list[exp.Table] = []
    for table in tree.find_all(exp.Table):
        if table.args.get("db") or not isinstance(table.this, exp.Identifier) or table.name not in body:
            continue
        reader = next((p.alias for p in _parents(table) if isinstance(p, exp.CTE) and p.alias in body), None)
        reads[reader][table.name] = reads[reader].get(table.name, 0) + 1
        refs.append(table)
    order: list[str] = []  # each CTE after those it reads

    def visit(name: str | None, seen: set[str | None]) -> None:
        if name in seen:
            return
        seen.add(name)
        for dep in reads[name]:
            visit(dep, seen)
        if name is not None:
            order.append(name)

    visit(None, set())
    copies: dict[str | None, int] = {None: 1}
    shared: list[str] = []
    for name in reversed(order):  # each CTE after those that read it
        n = sum(times * copies[reader] for reader, read in reads.items() if (times := read.get(name, 0)))
        if n > 1 and name not in fixed and _costly(body[name], body):
            shared.append(name)
            n = 1
        copies[name] = n
    if not shared:
        return _Plan((), sql)
    views = {name: f"{_VIEW}{i}_{name}" for i, name in enumerate(order) if name in shared}
    for table in refs:
        if table.name in views:
            if not table.args.get("alias"):
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(views[table.name]))
    for w in withs:
        w.pop()

    def statement(node: exp.Expr, reader: str | None) -> str:
        # the node with a WITH of the CTEs it reads that stay CTEs (and those they read)
        need: list[str] = []

        def gather(name: str | None) -> None:
            for dep in reads[name]:
                if dep not in views and dep not in need:
                    gather(dep)
                    need.append(dep)

        gather(reader)
        node = node.copy()
        if need:
            node.set(
                "with_",
                exp.With(
                    expressions=[
                        exp.CTE(this=body[d].copy(), alias=exp.TableAlias(this=exp.to_identifier(d)))
                        if d not in fixed
                        else next(c for c in ctes if c.alias == d).copy()
                        for d in sorted(need, key=order.index)
                    ]
                ),
            )
        return node.sql(dialect="spark")

    steps = tuple((views[n], statement(body[n], n)) for n in order if n in views)
    return _Plan(steps, statement(tree, None))


def _costly(node: exp.Expr, ctes: Mapping[str, exp.Expr]) -> bool:
    """Whether a CTE's own body (not the CTEs it reads) does work worth computing once: a join,
    an aggregate, a window, a sort, a union, or a canonical view (a join). A filter or projection
    of a table costs less read twice than a job of its own."""
    from sqlglot import exp

    work = (exp.Join, exp.Window, exp.Group, exp.AggFunc, exp.Distinct, exp.Order, exp.SetOperation)
    views = {t.name for t in TABLES if t.view}
    for sub in node.walk(prune=lambda n: isinstance(n, exp.With)):
        if isinstance(sub, work) or (
            isinstance(sub, exp.Table) and sub.name in views and sub.name not in ctes
        ):
            return True
    return False


def _parents(node: exp.Expr) -> Any:
    while node.parent is not None:
        node = node.parent
        yield node


def _run(spark: SparkSession, sql: str, args: Mapping[str, Any]) -> DataFrame:
    """`spark.sql` with the arguments SQL names (a step of a plan names only some)."""
    used = {k: v for k, v in args.items() if re.search(rf":{re.escape(k)}\b", sql)}
    return spark.sql(sql, args=used)


def _execute(spark: SparkSession, plan: _Plan, args: Mapping[str, Any]) -> DataFrame:
    """Run a plan: each shared CTE computed once (`localCheckpoint`: the rows kept by Spark as
    long as a DataFrame reading them lives, the lineage cut, so the statement's plan reads them
    as one scan), as a temp view named for this run alone; then the statement. The views are
    dropped before returning: the DataFrame's plan holds the rows, not the names (a Spark
    Connect session resolves names when it runs a plan: there they stay, named apart)."""
    if not plan.steps:
        return _run(spark, plan.sql, args)
    tag = f"{_VIEW}{uuid.uuid4().hex[:12]}_"
    created: list[str] = []
    try:
        for view, sql in plan.steps:
            df = _run(spark, sql.replace(_VIEW, tag), args).localCheckpoint()
            df.createOrReplaceTempView(view.replace(_VIEW, tag))
            created.append(view.replace(_VIEW, tag))
        return _run(spark, plan.sql.replace(_VIEW, tag), args)
    finally:
        if type(spark).__module__.startswith("pyspark.sql.session"):  # not Spark Connect's
            for view in created:
                spark.catalog.dropTempView(view)


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
    if not (master or remote or "").startswith("sc://"):
        # Spark makes its warehouse folder (./spark-warehouse) where it starts: nsa writes no
        # tables, so a temporary folder of this process's, removed at exit, not the cwd
        settings.setdefault("spark.sql.warehouse.dir", _warehouse())
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not (master or remote or "").startswith("sc://"):  # a Spark Connect client has no SparkContext
        spark.sparkContext.setLogLevel("ERROR")
    return spark


@cache
def _warehouse() -> str:
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="nsa-spark-warehouse-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return Path(folder).as_uri()


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
    return _execute(live, _plan(translate(q.name)), {k: _arg(v) for k, v in bound.items()})


def _arg(value: Any) -> Any:
    """A bound parameter as Spark takes it: a list as JSON text (the translation reads it with
    from_json as the contract types it), the rest as literals."""
    if isinstance(value, (list, tuple)):
        import json

        return json.dumps(list(value))
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
