"""The run parts of `nsa diff --run`: the runs named, the ranks and collectives that changed
(one world size) and the scaling (two), as 80-column text and as Markdown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..diff.model import CollectiveChange, Diff, RankChange, RunSide, Scaling
from ..units import decimal, rate, size, table_dur, table_signed, whole_pct

TOP_RANKS = 16  # ranks listed in text; the rest in --format json
RANK_COLUMNS = ("step_ns", "compute_ns", "exposed_comm_ns", "idle_ns", "wait_ns", "late_ns")
RANK_LABELS = ("step (median)", "compute", "exposed comm", "GPU idle", "wait", "late")


def ids_text(ids: list[int]) -> str:
    """'1-4', '1, 3, 5': report ids, consecutive ones as a range."""
    if len(ids) >= 3 and ids == list(range(ids[0], ids[0] + len(ids))):
        return f"{ids[0]}-{ids[-1]}"
    return ", ".join(map(str, ids))


def run_line(run: RunSide) -> str:
    ranks = f"{run.ranks_seen} rank{'s' if run.ranks_seen != 1 else ''}"
    if run.world_size != run.ranks_seen:
        ranks += f" of {run.world_size}"
    many = "s" if len(run.report_ids) != 1 else ""
    return f"run {run.run_id}  {run.name}: {ranks}, report{many} {ids_text(run.report_ids)}"


def headline(d: Diff) -> str | None:
    """The verdict line of a run diff, or None when the report headline applies."""
    if d.same_run and d.run_a is not None:
        return f"SAME RUN: A and B are both run {d.run_a.run_id} ({d.run_a.name})"
    s = d.scaling
    if s is not None and d.comparable and s.efficiency is not None:
        return (
            f"SCALES AT {s.efficiency * 100:.0f}% ({s.mode} scaling, {s.base.world_size} -> "
            f"{s.scaled.world_size} ranks)"
        )
    return None


def method(d: Diff) -> str | None:
    if d.scaling is not None:
        return (
            "From the `scaling` query (mode auto, from the smaller world): a run's step is the median "
            "over its ranks of their mean steady GPU step; weak scaling is ideal when the step stays "
            "the base's, strong when it shrinks with the world; the lost time splits into exposed "
            "communication (net of imbalance), slower compute, imbalance and the rest."
        )
    if d.run_a is not None and not d.same_run:
        return (
            "A run's step n is the mean over its ranks of their GPU step n (paired by step number: "
            "the ranks of a synchronous job are one sample per step, not one per rank)."
        )
    return None


# --- text -----------------------------------------------------------------------------------------

Grid = Callable[[list[list[str]]], list[str]]
Wrap = Callable[[str, int], list[str]]


def text_sections(d: Diff, grid: Grid, wrap: Wrap, top: int = TOP_RANKS) -> list[str]:
    out: list[str] = []
    if d.scaling is not None:
        out += _scaling_text(d.scaling, grid)
    rc = d.run_changes
    if rc is None:
        return out
    out += ["", "Ranks (per steady step, B - A; step: median, the rest means; rank_balance)"]
    ranks = _shown_ranks(rc.ranks, top)
    rows = [["", "step", "compute", "exp. comm", "idle", "wait", "late"]]
    for r in ranks:
        rows.append([f"rank {r.rank}", *(table_signed(r.delta(k)) for k in RANK_COLUMNS)])
    out += grid(rows)
    if len(rc.ranks) > len(ranks):
        out.append(f"  ... {len(rc.ranks) - len(ranks)} more ranks (--format json lists every rank)")
    for line in rc.summary:
        out += wrap(line, 2)
    if rc.collectives:
        bw = any(c.a_busbw_gbps is not None or c.b_busbw_gbps is not None for c in rc.collectives)
        what = "bus bandwidth" if bw else "latency"
        out += ["", f"Collectives matched across ranks (arrival skew: mean; {what}: median)"]
        head = ["collective", "A n", "B n", "skew A", "skew B"]
        head += ["busbw A", "busbw B"] if bw else ["latency A", "latency B"]
        rows = [head]
        for c in rc.collectives:
            pair = (
                [rate(c.a_busbw_gbps), rate(c.b_busbw_gbps)]
                if bw
                else [table_dur(c.a_latency_ns), table_dur(c.b_latency_ns)]
            )
            rows.append(
                [
                    collective_name(c),
                    str(c.a_count),
                    str(c.b_count),
                    table_dur(c.a_skew_ns),
                    table_dur(c.b_skew_ns),
                    *pair,
                ]
            )
        out += grid(rows)
    return out


def _shown_ranks(ranks: list[RankChange], top: int) -> list[RankChange]:
    """Every rank up to `top`; past that the `top` that changed most (step, then lateness)."""
    if len(ranks) <= top:
        return ranks
    keep = sorted(ranks, key=lambda r: -(abs(r.delta("late_ns") or 0) + abs(r.delta("step_ns") or 0)))[:top]
    return sorted(keep, key=lambda r: r.rank)


def collective_name(c: CollectiveChange) -> str:
    bits = [c.op] + ([c.dtype] if c.dtype else []) + ([size(c.message_bytes)] if c.message_bytes else [])
    return " ".join(bits)


def _scaling_text(s: Scaling, grid: Grid) -> list[str]:
    b, x = s.base, s.scaled
    head = f"{b.world_size} ranks", f"{x.world_size} ranks"
    out = ["", f"Scaling (per steady step; base: run {b.run_id}, the smaller world)"]
    rows = [["", *head, "change"]]
    for label, vb, vx in (
        ("GPU step", b.step_ns, x.step_ns),
        ("compute", b.compute_ns, x.compute_ns),
        ("exposed communication", b.exposed_comm_ns, x.exposed_comm_ns),
        ("imbalance", b.imbalance_ns, x.imbalance_ns),
    ):
        rows.append(
            [label, table_dur(vb), table_dur(vx), table_signed(None if vb is None or vx is None else vx - vb)]
        )
    rows.append(
        [
            f"throughput ({s.throughput_unit})",
            decimal(b.throughput),
            decimal(x.throughput),
            "-" if s.speedup is None else f"x{s.speedup:.2f}",
        ]
    )
    out += grid(rows)
    ideal = x.world_size / b.world_size
    eff = "-" if s.efficiency is None else f"{s.efficiency * 100:.1f}%"
    out += ["", f"Step time lost against ideal scaling (ideal x{ideal:.3g}; efficiency {eff})"]
    rows = [["", "per step"], ["ideal step", table_dur(s.ideal_ns)], ["actual step", table_dur(x.step_ns)]]
    rows += [
        [label, table_signed(v)]
        for label, v in (
            ("exposed communication", s.lost_comm_ns),
            ("slower compute", s.lost_compute_ns),
            ("imbalance", s.lost_imbalance_ns),
            ("the rest (idle, copies, clock)", s.lost_other_ns),
            ("total lost", s.lost_ns),
        )
    ]
    out += grid(rows)
    return out


# --- markdown -------------------------------------------------------------------------------------


def markdown_sections(d: Diff, table: Callable[[list[dict[str, Any]]], str]) -> list[str]:
    out: list[str] = []
    s = d.scaling
    if s is not None:
        b, x = s.base, s.scaled
        rows: list[dict[str, Any]] = [
            {"per steady step": label, f"{b.world_size} ranks (run {b.run_id})": table_dur(vb),
             f"{x.world_size} ranks (run {x.run_id})": table_dur(vx),
             "change": table_signed(None if vb is None or vx is None else vx - vb)}
            for label, vb, vx in (("GPU step", b.step_ns, x.step_ns), ("compute", b.compute_ns, x.compute_ns),
                                  ("exposed communication", b.exposed_comm_ns, x.exposed_comm_ns),
                                  ("imbalance", b.imbalance_ns, x.imbalance_ns))
        ]  # fmt: skip
        rows.append(
            {"per steady step": f"throughput ({s.throughput_unit})", f"{b.world_size} ranks (run {b.run_id})":
             decimal(b.throughput), f"{x.world_size} ranks (run {x.run_id})": decimal(x.throughput),
             "change": "-" if s.speedup is None else f"x{s.speedup:.2f}"}
        )  # fmt: skip
        out += [table(rows), ""]
        lost = [
            {"step time lost against ideal": label, "per step": table_signed(v)}
            for label, v in (("exposed communication", s.lost_comm_ns), ("slower compute", s.lost_compute_ns),
                             ("imbalance", s.lost_imbalance_ns), ("the rest", s.lost_other_ns),
                             ("**total lost**", s.lost_ns))
        ]  # fmt: skip
        out += [table(lost), ""]
    rc = d.run_changes
    if rc is None:
        return out
    out += ["<details open><summary>Ranks</summary>", ""]
    out += [line + "  " for line in rc.summary] + [""]
    rank_rows = []
    for r in rc.ranks:
        row: dict[str, Any] = {"rank": r.rank}
        for k, label in zip(RANK_COLUMNS, RANK_LABELS, strict=True):
            va = getattr(r.a, k) if r.a is not None else None
            vb = getattr(r.b, k) if r.b is not None else None
            row[label] = f"{table_dur(va)} → {table_dur(vb)} ({table_signed(r.delta(k))})"
        la = r.a.last_share if r.a is not None else None
        lb = r.b.last_share if r.b is not None else None
        row["last at"] = f"{whole_pct(la)} → {whole_pct(lb)}"
        rank_rows.append(row)
    out += [table(rank_rows), "</details>", ""]
    if rc.collectives:
        out += ["<details><summary>Collectives</summary>", ""]
        out.append(
            table(
                [
                    {"collective": collective_name(c), "A n": c.a_count, "B n": c.b_count,
                     "arrival skew (mean)": f"{table_dur(c.a_skew_ns)} → {table_dur(c.b_skew_ns)}",
                     "latency (median)": f"{table_dur(c.a_latency_ns)} → {table_dur(c.b_latency_ns)}",
                     "bus bandwidth (median)": f"{rate(c.a_busbw_gbps)} → {rate(c.b_busbw_gbps)}",
                     "last most often":
                         f"{_last(c.a_last_rank, c.a_last_share)} → {_last(c.b_last_rank, c.b_last_share)}"}
                    for c in rc.collectives
                ]
            )
        )  # fmt: skip
        out += ["</details>", ""]
    return out


def _last(rank: int | None, share: float | None) -> str:
    return "-" if rank is None else f"rank {rank} ({whole_pct(share)})"
