"""Two runs compared (`nsa diff --run A B`): the ranks of one job before and after, or the same
program at two world sizes.

- **One world size**: the job before and after. The run's step k is the mean over its ranks of
  their GPU step k, paired by step number (`compare(..., by_number=True)`), and the step-time
  statistic, verdict, attribution, kernels and metrics are those of `compare`. On top, rank by
  rank (`rank_balance`: compute, exposed communication, GPU idle, the wait inside collectives
  for later ranks, the lateness of the rank's own arrival) and collective by collective
  (`collective_skew`: arrival skew, latency, bus bandwidth), and in words: which rank's
  lateness the change comes from, and what the others did meanwhile.
- **Two world sizes**: a scaling comparison, as the `scaling` query makes it (mode 'auto',
  from the smaller world): throughput, efficiency, and the step time lost against ideal scaling
  split into exposed communication, slower compute, imbalance and the rest. Verdict 'scaling'.
- **One run twice**: said, nothing computed.

The findings are each run's, as `nsa findings --run` gives them (each run rule once a run);
for a scaling the two runs are judged together, so scaling-loss compares this pair, and their
findings pair by rule (`findings`).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

import duckdb

from .. import params, queries
from ..rules.runs import ranks_text
from ..units import decimal, dur, pct, plural, signed
from .compare import NOISE_FLOOR, compare, describe, gpu_text, tool_check
from .findings import finding_changes, series_findings, side_findings
from .model import (
    Check,
    CollectiveChange,
    Diff,
    RankChange,
    RankNumbers,
    RunChanges,
    RunSide,
    Scaling,
    ScalingSide,
    Side,
)

# The library queries a run diff reads besides the diff's own tables (the facade loads theirs).
QUERIES = ("rank_balance", "collective_skew", "scaling")

RUN_SQL = "SELECT name, world_size, ranks_seen FROM runs WHERE run_id = $run"
RUN_REPORTS_SQL = "SELECT report_id FROM ranks WHERE run_id = $run GROUP BY report_id ORDER BY min(rank)"
# The compute kernels' time by name (communication kernels, those comm_ops lists, left out): a
# run at another world size runs the same compute and a different amount of communication.
COMPUTE_MIX_SQL = """
SELECT nsa_kernel_key(k.name) AS key, sum(k.duration_ns) AS ns
FROM kernels AS k
WHERE list_contains($ids, k.report_id)
  AND k.name NOT IN (SELECT DISTINCT name FROM comm_ops WHERE list_contains($ids, report_id))
GROUP BY 1
"""
# Shares of the compute kernel time in kernels both runs run, below which two world sizes are
# not one program (as `compare.MIN_PROGRAM_OVERLAP` for the whole kernel time).
MIN_COMPUTE_OVERLAP = 0.3
_RANK_FIELDS = (
    "step_ns",
    "compute_ns",
    "comm_ns",
    "exposed_comm_ns",
    "idle_ns",
    "wait_ns",
    "late_ns",
    "last_share",
)


def run_side(con: duckdb.DuckDBPyConnection, run_id: int) -> RunSide:
    row = params.execute(con, RUN_SQL, {"run": run_id}).fetchone()
    if row is None:
        raise ValueError(f"no run {run_id}")  # the facade resolves names and ids first
    ids = [int(r[0]) for r in params.execute(con, RUN_REPORTS_SQL, {"run": run_id}).fetchall()]
    seen = int(row[2] or len(ids))
    return RunSide(run_id, str(row[0]), int(row[1] or seen), seen, ids)


def compare_runs(
    con: duckdb.DuckDBPyConnection,
    run_a: int,
    run_b: int,
    *,
    confidence: float = 0.95,
    noise_floor: float = NOISE_FLOOR,
    with_findings: bool = True,
    config: dict[str, Any] | None = None,
) -> Diff:
    """The diff of run `run_a` (before) and run `run_b` (after), by run id (module doc). The
    caller has loaded what `READS`, `QUERIES` and the rules read."""
    ra, rb = run_side(con, run_a), run_side(con, run_b)
    if run_a == run_b:
        return _same_run(con, ra, noise_floor)
    if ra.world_size != rb.world_size:
        result = _scaling(con, ra, rb, noise_floor)
    else:
        result = compare(
            con,
            ra.report_ids,
            rb.report_ids,
            confidence=confidence,
            noise_floor=noise_floor,
            with_findings=False,
            by_number=True,
        )
        result.run_changes = run_changes(con, ra, rb, noise_floor)
    result.run_a, result.run_b = ra, rb
    if with_findings and result.scaling is not None:
        fa, fb = series_findings(con, [(ra.report_ids, ra.run_id), (rb.report_ids, rb.run_id)], config)
        result.findings = finding_changes(fa, ra.report_ids, fb, rb.report_ids, by_rule=True)
    elif with_findings:
        result.findings = finding_changes(
            side_findings(con, ra.report_ids, ra.run_id, config),
            ra.report_ids,
            side_findings(con, rb.report_ids, rb.run_id, config),
            rb.report_ids,
        )
    return result


def _same_run(con: duckdb.DuckDBPyConnection, run: RunSide, floor: float) -> Diff:
    side = describe(con, run.report_ids)
    text = f"A and B are the same run (run {run.run_id}, {run.name}): nothing to compare; give two runs."
    d = Diff(side, side, [], "same run", text, floor)
    d.run_a = d.run_b = run
    d.same_run = True
    return d


# --- one world size: ranks and collectives ------------------------------------------------------


def _records(con: duckdb.DuckDBPyConnection, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    rel = queries.run(con, name, args)
    cols = list(rel.columns)
    return [dict(zip(cols, row, strict=True)) for row in rel.fetchall()]


def _balance(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[int, RankNumbers]:
    out = {}
    for r in _records(con, "rank_balance", {"run_id": run_id}):
        values = {k: None if r[k] is None else float(r[k]) for k in _RANK_FIELDS}
        out[int(r["rank"])] = RankNumbers(report_id=int(r["report_id"]), steps=int(r["steps"] or 0), **values)
    return out


def _collectives(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per kind of collective (op, dtype, message size): count, mean arrival skew, median
    latency and bus bandwidth, the rank last most often and its share."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in _records(con, "collective_skew", {"run_id": run_id}):
        groups[(str(r["op"]), r["dtype"], r["message_bytes"])].append(r)
    out = {}
    for key, rows in groups.items():
        last = Counter(int(r["last_rank"]) for r in rows if r["last_rank"] is not None)
        top = min(last.items(), key=lambda kv: (-kv[1], kv[0])) if last else None
        out[key] = {
            "count": len(rows),
            "skew": _mean([r["arrival_skew_ns"] for r in rows]),
            "latency": _median([r["latency_ns"] for r in rows]),
            "busbw": _median([r["busbw_gbps"] for r in rows]),
            "last_rank": top[0] if top else None,
            "last_share": top[1] / len(rows) if top else None,
            "last": last,
        }
    return out


def _mean(values: list[Any]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return statistics.fmean(xs) if xs else None


def _median(values: list[Any]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return float(statistics.median(xs)) if xs else None


def run_changes(con: duckdb.DuckDBPyConnection, a: RunSide, b: RunSide, floor: float) -> RunChanges:
    """Rank r of A against rank r of B, each kind of collective of A against B's, and the
    sentences that say what the change came from."""
    ba, bb = _balance(con, a.run_id), _balance(con, b.run_id)
    ranks = [RankChange(r, ba.get(r), bb.get(r)) for r in sorted(set(ba) | set(bb))]
    ca, cb = _collectives(con, a.run_id), _collectives(con, b.run_id)
    empty: dict[str, Any] = {"count": 0, "last": Counter()}
    colls = []
    for key in set(ca) | set(cb):
        x, y = ca.get(key, empty), cb.get(key, empty)
        colls.append(
            CollectiveChange(
                op=key[0], dtype=key[1], message_bytes=None if key[2] is None else int(key[2]),
                a_count=x["count"], b_count=y["count"], a_skew_ns=x.get("skew"), b_skew_ns=y.get("skew"),
                a_latency_ns=x.get("latency"), b_latency_ns=y.get("latency"),
                a_busbw_gbps=x.get("busbw"), b_busbw_gbps=y.get("busbw"),
                a_last_rank=x.get("last_rank"), b_last_rank=y.get("last_rank"),
                a_last_share=x.get("last_share"), b_last_share=y.get("last_share"),
            )
        )  # fmt: skip
    colls.sort(key=lambda c: (-max(c.a_count, c.b_count), c.op, str(c.dtype), c.message_bytes or 0))
    straggler, lines = _summary(ranks, floor)
    lines += _last_line(ca, cb)
    return RunChanges(ranks, colls, straggler, lines)


def _summary(ranks: list[RankChange], floor: float) -> tuple[int | None, list[str]]:
    """(the rank whose lateness explains the change, or None; sentences)."""
    both = [r for r in ranks if r.a is not None and r.b is not None and r.a.step_ns and r.b.step_ns]
    if not both:
        return None, ["No rank has steady steps on both sides: nothing to compare rank by rank."]

    def mean_delta(name: str, rs: list[RankChange]) -> float | None:
        return _mean([r.delta(name) for r in rs])

    step_a = _mean([r.a.step_ns for r in both if r.a is not None]) or 0.0
    dstep = mean_delta("step_ns", both) or 0.0
    notable = floor * step_a
    lines = []
    straggler = None
    # the rank whose arrival at the collectives moved most, in the direction of the step change
    sign = 1.0 if dstep >= 0 else -1.0
    cand = max(both, key=lambda r: (sign * (r.delta("late_ns") or 0.0), -r.rank))
    dl = cand.delta("late_ns") or 0.0
    others = [r for r in both if r.rank != cand.rank]
    dwait = mean_delta("wait_ns", others) if others else None
    if (
        others
        and sign * dl >= notable
        and sign * dl >= 0.5 * abs(dstep)
        and dwait is not None
        and sign * dwait > 0
    ):
        straggler = cand.rank
        assert cand.a is not None and cand.b is not None
        was, now = cand.a.last_share, cand.b.last_share
        last = f" (last at {pct(now)} of them, was {pct(was)})" if was is not None and now is not None else ""
        who = ranks_text(r.rank for r in others)
        if dl > 0:
            lines.append(
                f"Rank {cand.rank} arrives at the collectives {dur(dl)} later per step than in A{last}: "
                f"{who} wait {dur(dwait)} more per step inside them for it."
            )
        else:
            lines.append(
                f"Rank {cand.rank} no longer holds the others back: it arrives at the collectives "
                f"{dur(-dl)} earlier per step than in A{last}; {who} wait {dur(-dwait)} less per step "
                "inside them."
            )
        own = [
            f"{label} {signed(cand.delta(name))}"
            for name, label in (
                ("idle_ns", "GPU idle"),
                ("compute_ns", "compute"),
                ("comm_ns", "communication"),
            )
            if cand.delta(name) is not None and abs(cand.delta(name) or 0.0) >= 1000
        ]
        if own:
            instead = " (what it did instead: the run's straggler-rank finding)" if dl > 0 else ""
            lines.append(f"On rank {cand.rank} itself, per step: {', '.join(own)}{instead}.")
    parts = [
        f"{label} {signed(mean_delta(name, both))}"
        for name, label in (
            ("compute_ns", "compute"),
            ("exposed_comm_ns", "exposed communication"),
            ("wait_ns", "the wait inside collectives for later ranks"),
            ("idle_ns", "GPU idle"),
        )
        if mean_delta(name, both) is not None
    ]
    lines.append(f"Per step, mean over ranks: GPU step (median) {signed(dstep)}; " + ", ".join(parts) + ".")
    imb_a = _imbalance([r.a for r in both])
    imb_b = _imbalance([r.b for r in both])
    if imb_a is not None and imb_b is not None and abs(imb_b - imb_a) >= notable:
        lines.append(
            "Compute imbalance (the slowest rank's compute minus the mean) "
            f"{dur(imb_a)} -> {dur(imb_b)} per step."
        )
    return straggler, lines


def _imbalance(rs: list[RankNumbers | None]) -> float | None:
    xs = [r.compute_ns for r in rs if r is not None and r.compute_ns is not None]
    return max(xs) - statistics.fmean(xs) if xs else None


def _last_line(
    ca: dict[tuple[Any, ...], dict[str, Any]], cb: dict[tuple[Any, ...], dict[str, Any]]
) -> list[str]:
    def most(c: dict[tuple[Any, ...], dict[str, Any]]) -> str | None:
        last: Counter[int] = Counter()
        for v in c.values():
            last.update(v["last"])
        total = sum(last.values())
        if not total:
            return None
        rank, n = min(last.items(), key=lambda kv: (-kv[1], kv[0]))
        return f"rank {rank} ({pct(n / total)})"

    la, lb = most(ca), most(cb)
    if la is None and lb is None:
        return ["No collective was matched across the ranks (one rank, or no communication kernels)."]
    return [
        f"Last to arrive, over all matched collectives: most often {la or 'none'} in A, {lb or 'none'} in B."
    ]


# --- two world sizes: scaling -------------------------------------------------------------------


def _scaling(con: duckdb.DuckDBPyConnection, ra: RunSide, rb: RunSide, floor: float) -> Diff:
    side_a, side_b = describe(con, ra.report_ids), describe(con, rb.report_ids)
    rows = {
        int(r["run_id"]): r
        for r in _records(con, "scaling", {"run_ids": f"{ra.run_id},{rb.run_id}", "mode": "auto"})
    }
    checks = _scaling_checks(con, ra, rb, side_a, side_b, rows)
    base_id = next((int(r["base_run_id"]) for r in rows.values() if r["base_run_id"] is not None), None)
    if base_id is None:
        base_id = ra.run_id if ra.world_size < rb.world_size else rb.run_id
    scaled_id = rb.run_id if base_id == ra.run_id else ra.run_id
    base, scaled = rows.get(base_id), rows.get(scaled_id)
    failed = [c.detail for c in checks if not c.ok and not c.warning]
    if failed or base is None or scaled is None or scaled["efficiency"] is None:
        reason = " ".join(failed) or "the scaling query has no numbers for these runs."
        return Diff(side_a, side_b, checks, "not comparable", reason, floor)
    s = Scaling(
        mode=str(scaled["mode"]),
        throughput_unit="rank-steps/s" if scaled["mode"] == "weak" else "steps/s",
        base=_scaling_side(base),
        scaled=_scaling_side(scaled),
        **{k: _f(scaled[k]) for k in ("speedup", "efficiency", "ideal_ns", "lost_ns", "lost_comm_ns",
                                       "lost_compute_ns", "lost_imbalance_ns", "lost_other_ns")},
    )  # fmt: skip
    d = Diff(side_a, side_b, checks, "scaling", _scaling_reason(s, ra, rb), floor)
    d.scaling = s
    return d


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _scaling_side(r: dict[str, Any]) -> ScalingSide:
    return ScalingSide(
        run_id=int(r["run_id"]), name=str(r["run"]), world_size=int(r["world_size"]),
        ranks=int(r["ranks"] or 0),
        steps=None if r["steps"] is None else int(r["steps"]),
        **{k: _f(r[k]) for k in ("step_ns", "compute_ns", "exposed_comm_ns", "imbalance_ns", "throughput")},
    )  # fmt: skip


def _scaling_checks(
    con: duckdb.DuckDBPyConnection,
    ra: RunSide,
    rb: RunSide,
    a: Side,
    b: Side,
    rows: dict[int, dict[str, Any]],
) -> list[Check]:
    out = []
    for label, run in (("A", ra), ("B", rb)):
        r = rows.get(run.run_id)
        if r is None or r["step_ns"] is None:
            out.append(
                Check(
                    "steps",
                    False,
                    f"{label} (run {run.run_id}, {run.name}) has no steady steps with GPU work on its "
                    "ranks: a scaling comparison needs steps.",
                )
            )
    if not out:
        ra_, rb_ = rows[ra.run_id], rows[rb.run_id]
        out.append(
            Check(
                "steps",
                True,
                f"{ra_['steps']} and {rb_['steps']} steady steps (the rank with the fewest), "
                f"{ra.world_size} and {rb.world_size} ranks.",
            )
        )
    models_a, models_b = sorted(set(a.gpus)), sorted(set(b.gpus))
    if not models_a or not models_b:
        out.append(Check("gpu", True, "GPU model not recorded on both sides; not checked.", warning=True))
    elif models_a != models_b:
        out.append(
            Check(
                "gpu",
                False,
                f"different GPUs: A ran on {gpu_text(a.gpus)}, B on {gpu_text(b.gpus)}; a scaling "
                "comparison needs one GPU model.",
            )
        )
    else:
        out.append(Check("gpu", True, f"same GPU model: {', '.join(models_a)}."))
    tools = tool_check(
        a.tools,
        b.tools,
        "each profiler slows the program its own way, so part of the efficiency may be the profilers'.",
    )
    if tools is not None:
        out.append(tools)
    sa, sb = _mix(con, ra.report_ids), _mix(con, rb.report_ids)
    if sa and sb:
        overlap = sum(min(v, sb.get(k, 0.0)) for k, v in sa.items())
        same = overlap >= MIN_COMPUTE_OVERLAP
        out.append(
            Check(
                "program",
                same,
                f"{overlap:.0%} of the compute kernel time (communication left out) is in kernels both run"
                + (
                    ""
                    if same
                    else f" (under {MIN_COMPUTE_OVERLAP:.0%}): a different program, not a scaling of one"
                )
                + ".",
            )
        )
    return out


def _mix(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[str, float]:
    from .names import diff_key

    by_key: dict[str, float] = defaultdict(float)
    for key, ns in params.execute(con, COMPUTE_MIX_SQL, {"ids": ids}).fetchall():
        by_key[diff_key(str(key))] += float(ns or 0)
    total = sum(by_key.values())
    return {k: v / total for k, v in by_key.items()} if total else {}


def _scaling_reason(s: Scaling, ra: RunSide, rb: RunSide) -> str:
    base, scaled = s.base, s.scaled
    why = (
        f"each rank kept its work: compute per step {dur(base.compute_ns)} -> {dur(scaled.compute_ns)}"
        if s.mode == "weak"
        else f"the work was split: compute per rank and step {dur(base.compute_ns)} -> "
        f"{dur(scaled.compute_ns)}"
    )
    ideal = scaled.world_size / base.world_size
    order = "" if base.run_id == ra.run_id else " (B has the fewer ranks: the comparison runs from B to A)"
    text = (
        f"run {base.run_id} ({base.name}, {plural(base.world_size, 'rank')}) -> run {scaled.run_id} "
        f"({scaled.name}, {plural(scaled.world_size, 'rank')}){order}, {s.mode} scaling ({why}): "
        f"throughput {decimal(base.throughput, none='n/a')} -> "
        f"{decimal(scaled.throughput, none='n/a')} {s.throughput_unit} (x{s.speedup or 0:.2f}, ideal x{ideal:.3g}), "
        f"efficiency {pct(s.efficiency)}; the step is {dur(scaled.step_ns)} against {dur(s.ideal_ns)} ideal"
    )
    if s.lost_ns is not None:
        parts = ", ".join(
            f"{label} {signed(v)}"
            for label, v in (
                ("exposed communication", s.lost_comm_ns),
                ("slower compute", s.lost_compute_ns),
                ("imbalance", s.lost_imbalance_ns),
                ("the rest", s.lost_other_ns),
            )
        )
        text += f": {signed(s.lost_ns)} lost ({parts})"
    if s.efficiency is not None and s.efficiency > 1:
        text += (
            f". Above 100%: the larger run's ranks step faster than the smaller run's; look at the base "
            f"run {base.run_id} first (profiler overhead, a slow rank, a warm-up taken for steady steps)"
        )
    return text + "."
