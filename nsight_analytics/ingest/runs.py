"""Runs: the ranks of one distributed job, made from the reports that hold them.

A run is made after its files are ingested (each file is still its own report, all or nothing):
`make_run` numbers the ranks, finds each rank's GPU, aligns the ranks' clocks and writes `runs`
and `ranks` (and the rank columns of `reports`) in one transaction. `group_runs` finds the runs
that files say they form without help: Kineto traces with `distributedInfo`, file names that
differ only by a rank number, and single nsys reports holding several processes on several
GPUs. docs/runs.md describes the model.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from .. import params
from ..errors import InputError

# `rank3`, `rank_3`, `rank-03`, `RANK3` in a file name (not `ranked`, not `frank3`)
_RANK_WORD = re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)(?![0-9])", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_SUFFIXES = (".gz", ".sqlite", ".nsys-rep", ".json", ".pt.trace", ".trace", ".csv", ".tar", ".tgz")


@dataclass(frozen=True)
class RankOf:
    """Where one rank lives: a report (pid None) or one process of it."""

    report_id: int
    pid: int | None
    rank: int
    source: str  # 'distributedInfo', 'environment', 'file name', 'processes', 'order'
    device_id: int | None = None
    host: str | None = None
    local_rank: int | None = None  # as the launcher set it, when the file says


def stem(path: str | Path) -> str:
    """The file name without compression and format suffixes."""
    name = Path(path).name
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    return name


def rank_in_name(path: str | Path) -> int | None:
    """The rank a file's name states (`..._rank3...`), else None."""
    found = _RANK_WORD.findall(stem(path))
    return int(found[-1]) if len(set(found)) == 1 else None


def ranks_from_names(paths: Sequence[str | Path]) -> list[int] | None:
    """Rank numbers read from file names: `rankN` in each, or else the one number in which
    otherwise identical names differ (nsys `-o out_%q{RANK}` writes `out_0`, `out_1`...).
    None unless every file gets a distinct number."""
    if len(paths) < 2:
        return None
    named = [rank_in_name(p) for p in paths]
    if all(r is not None for r in named) and len(set(named)) == len(named):
        return [int(r) for r in named if r is not None]
    stems = [stem(p) for p in paths]
    skeletons = {_DIGITS.sub("#", s) for s in stems}
    if len(skeletons) != 1:
        return None
    numbers = [[int(n) for n in _DIGITS.findall(s)] for s in stems]
    varying = [i for i in range(len(numbers[0])) if len({n[i] for n in numbers}) > 1]
    if len(varying) != 1:
        return None
    ranks = [n[varying[0]] for n in numbers]
    return ranks if len(set(ranks)) == len(ranks) else None


def run_name(paths: Sequence[str | Path]) -> str:
    """A name for the run of these files: their common name without the rank part."""
    stems = [_RANK_WORD.sub("", stem(p)).strip("_-. ") for p in paths]
    if not any(stems):  # `rank0.json`, `rank1.json`: the folder names the run
        return Path(paths[0]).parent.name or "run"
    if len(set(stems)) == 1 and stems[0]:
        return stems[0]
    common = stems[0]
    for s in stems[1:]:
        while not s.startswith(common):
            common = common[:-1]
    return common.rstrip("_-. 0123456789") or "run"


def _report_processes(con: duckdb.DuckDBPyConnection, rid: int) -> list[tuple[int, int, int]]:
    """(pid, device_id, kernels) of the processes that ran kernels in the report: for each
    process, its busiest GPU."""
    rows = params.execute(
        con,
        "SELECT pid, device_id, count(*) AS n FROM kernel_rows WHERE report_id = $rid AND pid IS NOT NULL "
        "GROUP BY pid, device_id ORDER BY pid, n DESC, device_id",
        {"rid": rid},
    ).fetchall()
    best: dict[int, tuple[int, int, int]] = {}
    for pid, dev, n in rows:
        if int(pid) not in best:
            best[int(pid)] = (int(pid), int(dev) if dev is not None else -1, int(n))
    return list(best.values())


def multi_rank_processes(con: duckdb.DuckDBPyConnection, rid: int) -> list[tuple[int, int, int]] | None:
    """The processes of a report that are ranks of one job (two or more processes each running
    kernels on its own GPU), in GPU order; None when the report is one process's."""
    procs = _report_processes(con, rid)
    devices = {d for _, d, _ in procs}
    if len(procs) < 2 or len(devices) != len(procs):
        return None
    return sorted(procs, key=lambda p: (p[1], p[0]))


def _device_of(con: duckdb.DuckDBPyConnection, rid: int, pid: int | None) -> int | None:
    row = params.execute(
        con,
        "SELECT device_id FROM kernel_rows WHERE report_id = $rid AND ($pid IS NULL OR pid = $pid) "
        "AND device_id IS NOT NULL GROUP BY device_id ORDER BY count(*) DESC, device_id LIMIT 1",
        {"rid": rid, "pid": pid},
    ).fetchone()
    return None if row is None else int(row[0])


def find_ranks(con: duckdb.DuckDBPyConnection, report_ids: Sequence[int]) -> list[RankOf]:
    """Number the ranks of these reports: one report holding several GPU processes is one rank
    per process (GPU order); otherwise each report is a rank, numbered by its trace's
    `distributedInfo`, else the rank in its file name, else the order given. Raises InputError
    when two reports claim the same rank."""
    info = {
        int(r[0]): r[1:]
        for r in params.execute(
            con,
            "SELECT report_id, rank, source_path, host, rank_source, local_rank FROM reports "
            "WHERE list_contains($ids, report_id)",
            {"ids": list(report_ids)},
        ).fetchall()
    }
    missing = [r for r in report_ids if r not in info]
    if missing:
        raise InputError(f"no report {missing[0]} in the workspace; `nsa reports` lists them.")
    if len(report_ids) == 1:
        rid = report_ids[0]
        procs = multi_rank_processes(con, rid)
        if procs:
            host = info[rid][2]
            return [RankOf(rid, pid, i, "processes", dev, host) for i, (pid, dev, _) in enumerate(procs)]
    ranks: list[RankOf] = []
    stated = [info[r][0] for r in report_ids]
    by_name = ranks_from_names([info[r][1] for r in report_ids])
    if all(s is not None for s in stated) and len(set(stated)) < len(stated):
        twice = next(s for s in stated if stated.count(s) > 1)
        a, b = [r for r in report_ids if info[r][0] == twice][:2]
        raise InputError(
            f"reports {a} and {b} both hold rank {twice}; ingest the ranks of one job together "
            "(`nsa ingest --run NAME FILES...`)."
        )
    if all(s is not None for s in stated):
        numbers = [int(s) for s in stated if s is not None]
        source = "+".join(sorted({str(info[r][3] or "distributedInfo") for r in report_ids}))
    elif by_name is not None:
        numbers, source = by_name, "file name"
    else:
        numbers, source = list(range(len(report_ids))), "order"
    for rid, rank in zip(report_ids, numbers):
        local = info[rid][4] if source != "order" else None
        ranks.append(RankOf(rid, None, rank, source, _device_of(con, rid, None), info[rid][2], local))
    return ranks


def _session_starts(con: duckdb.DuckDBPyConnection, ranks: Sequence[RankOf]) -> dict[int, int | None]:
    ids = sorted({r.report_id for r in ranks})
    rows = params.execute(
        con,
        "SELECT report_id, session_start_utc_ns FROM reports WHERE list_contains($ids, report_id)",
        {"ids": ids},
    ).fetchall()
    return {int(r): (None if s is None else int(s)) for r, s in rows}


def _collective_ends(
    con: duckdb.DuckDBPyConnection, ranks: Sequence[RankOf]
) -> dict[int, dict[tuple[str, int], int]]:
    """{rank: {(channel, seq): end_ns on the report's own clock}} of each rank's comm ops."""
    out: dict[int, dict[tuple[str, int], int]] = {}
    for r in ranks:
        rows = params.execute(
            con,
            "SELECT channel, seq, end_ns FROM comm_ops WHERE report_id = $rid AND ($pid IS NULL OR pid = $pid) "
            "AND ($dev IS NULL OR device_id = $dev) AND seq IS NOT NULL AND end_ns IS NOT NULL",
            {"rid": r.report_id, "pid": r.pid, "dev": r.device_id},
        ).fetchall()
        out[r.rank] = {(str(c), int(s)): int(e) for c, s, e in rows}
    return out


@dataclass(frozen=True)
class Clocks:
    offsets: dict[int, int]  # rank -> ns to add to its report's times
    source: str
    uncertainty_ns: int | None
    shifts: dict[int, int] = field(default_factory=dict)  # rank -> seq offset


_MAX_SHIFT = 16


def _shifts(ends: dict[int, dict[tuple[str, int], int]], offsets: dict[int, int], ref: int) -> dict[int, int]:
    """Per rank, the shift of its collective numbering that best lines its aligned collective
    ends up with the reference rank's (0 when its window opened at the same collective)."""
    out = {ref: 0}
    for rank, mine in ends.items():
        if rank == ref or not mine:
            out.setdefault(rank, 0)
            continue
        best: tuple[float, int] = (float("inf"), 0)
        for shift in range(-_MAX_SHIFT, _MAX_SHIFT + 1):
            diffs = [
                abs(ends[ref][(c, s + shift)] + offsets[ref] - (e + offsets[rank]))
                for (c, s), e in mine.items()
                if (c, s + shift) in ends[ref]
            ]
            if len(diffs) >= max(1, min(len(mine), len(ends[ref])) // 2):
                cost = statistics.median(diffs)
                if cost < best[0] or (cost == best[0] and abs(shift) < abs(best[1])):
                    best = (cost, shift)
        out[rank] = best[1]
    return out


def _shifted(
    ends: dict[int, dict[tuple[str, int], int]], shifts: dict[int, int]
) -> dict[int, dict[tuple[str, int], int]]:
    return {r: {(c, s + shifts.get(r, 0)): e for (c, s), e in mine.items()} for r, mine in ends.items()}


# Session starts that leave the same collective's ends further apart than this are not trusted
# when the collectives' ends line the ranks up better (hosts whose clocks drift, traces whose
# base time is missing or rounded).
WALL_CLOCK_TRUSTED_NS = 1_000_000


def align(con: duckdb.DuckDBPyConnection, ranks: Sequence[RankOf]) -> Clocks:
    """Offsets that put every rank on one clock (docs/runs.md, Clocks)."""
    if len({r.report_id for r in ranks}) == 1:
        return Clocks({r.rank: 0 for r in ranks}, "one report", 0)
    starts = _session_starts(con, ranks)
    ends = _collective_ends(con, ranks)
    hosts = {r.host for r in ranks if r.host}
    by_ends = _align_on_ends(ranks, ends)
    if all(starts.get(r.report_id) is not None for r in ranks):
        origin = min(int(starts[r.report_id] or 0) for r in ranks)
        offsets = {r.rank: int(starts[r.report_id] or 0) - origin for r in ranks}
        shifts = _shifts(ends, offsets, min(r.rank for r in ranks))
        wall = Clocks(offsets, "session start", _end_spread(_shifted(ends, shifts), offsets), shifts)
        if by_ends is None:
            return wall
        if len(hosts) <= 1 and (wall.uncertainty_ns or 0) <= WALL_CLOCK_TRUSTED_NS:
            return wall
        if len(hosts) <= 1 and (by_ends.uncertainty_ns or 0) * 2 > (wall.uncertainty_ns or 0):
            return wall  # the ends do no better
    return by_ends or Clocks({r.rank: 0 for r in ranks}, "none", None)


def _align_on_ends(ranks: Sequence[RankOf], ends: dict[int, dict[tuple[str, int], int]]) -> Clocks | None:
    """Offsets that make each rank's collective ends meet the lowest rank's (the median
    difference over the collectives they share); None when a rank shares none."""
    ref = min(ranks, key=lambda r: r.rank).rank
    offsets = {ref: 0}
    for r in ranks:
        if r.rank == ref:
            continue
        shared = sorted(set(ends[ref]) & set(ends[r.rank]))
        if not shared:
            return None
        offsets[r.rank] = int(statistics.median(ends[ref][k] - ends[r.rank][k] for k in shared))
    low = min(offsets.values())
    offsets = {k: v - low for k, v in offsets.items()}
    return Clocks(offsets, "collective ends", _end_spread(ends, offsets))


def _end_spread(ends: dict[int, dict[tuple[str, int], int]], offsets: dict[int, int]) -> int | None:
    """The median, over collectives seen on every rank, of how far apart their ends fall once
    aligned: what the alignment leaves uncertain (a collective ends within microseconds on
    every rank that took part)."""
    keys = set.intersection(*(set(e) for e in ends.values())) if ends else set()
    spreads = [
        max(ends[r][k] + offsets[r] for r in ends) - min(ends[r][k] + offsets[r] for r in ends) for k in keys
    ]
    return int(statistics.median(spreads)) if spreads else None


def make_run(
    con: duckdb.DuckDBPyConnection,
    report_ids: Sequence[int],
    name: str | None = None,
    world_size: int | None = None,
) -> int:
    """Make (or remake) the run of these reports in one transaction; returns its run_id.

    A run of the same name is replaced; a report leaves any other run it was in."""
    report_ids = list(dict.fromkeys(int(r) for r in report_ids))
    ranks = find_ranks(con, report_ids)
    seen: dict[int, RankOf] = {}
    for r in ranks:
        if r.rank in seen:
            raise InputError(
                f"reports {seen[r.rank].report_id} and {r.report_id} both hold rank {r.rank}; "
                "ingest the ranks of one job together (`nsa ingest --run NAME FILES...`)."
            )
        seen[r.rank] = r
    if name is None:
        paths = [
            str(p)
            for (p,) in params.execute(
                con,
                "SELECT source_path FROM reports WHERE list_contains($ids, report_id) ORDER BY report_id",
                {"ids": report_ids},
            ).fetchall()
        ]
        name = run_name(paths)
    stated = params.execute(
        con, "SELECT max(world_size) FROM reports WHERE list_contains($ids, report_id)", {"ids": report_ids}
    ).fetchone()
    world = world_size or (int(stated[0]) if stated and stated[0] is not None else None) or len(ranks)
    clocks = align(con, ranks)
    hosts = len({r.host for r in ranks if r.host}) or 1
    sources = sorted({r.source for r in ranks})
    params.execute(con, "BEGIN TRANSACTION")
    try:
        old = [
            int(r[0])
            for r in params.execute(
                con,
                "SELECT run_id FROM runs WHERE name = $name UNION "
                "SELECT run_id FROM ranks WHERE list_contains($ids, report_id)",
                {"name": name, "ids": report_ids},
            ).fetchall()
        ]
        if old:
            params.execute(con, "DELETE FROM ranks WHERE list_contains($old, run_id) AND list_contains($ids, report_id)",
                        {"old": old, "ids": report_ids})  # fmt: skip
            params.execute(
                con,
                "DELETE FROM ranks WHERE run_id IN (SELECT run_id FROM runs WHERE name = $name)",
                {"name": name},
            )
            params.execute(
                con, "UPDATE reports SET run_id = NULL WHERE list_contains($old, run_id)", {"old": old}
            )
        same = params.execute(con, "SELECT run_id FROM runs WHERE name = $name", {"name": name}).fetchone()
        run_id = (
            int(same[0])
            if same
            else int(
                params.first_row(params.execute(con, "SELECT coalesce(max(run_id), 0) + 1 FROM runs"))[0]
            )
        )
        params.execute(con, "DELETE FROM runs WHERE run_id = $run", {"run": run_id})
        params.execute(con, 
            "INSERT INTO runs VALUES ($run, $name, $world, $seen, $hosts, $source, $clock, $unc, $at)",
            {
                "run": run_id, "name": name, "world": world, "seen": len(ranks), "hosts": hosts,
                "source": ", ".join(sources), "clock": clocks.source, "unc": clocks.uncertainty_ns,
                "at": datetime.now(timezone.utc).replace(tzinfo=None),
            },
        )  # fmt: skip
        local = _local_ranks(ranks)
        for r in sorted(ranks, key=lambda x: x.rank):
            params.execute(con, 
                "INSERT INTO ranks VALUES ($run, $rank, $local_rank, $host, $rid, $pid, $dev, $source, $clock_offset, $shift)",
                {
                    "run": run_id, "rank": r.rank, "local_rank": local.get(r.rank), "host": r.host, "rid": r.report_id,
                    "pid": r.pid, "dev": r.device_id, "source": r.source, "clock_offset": clocks.offsets.get(r.rank, 0),
                    "shift": clocks.shifts.get(r.rank, 0),
                },
            )  # fmt: skip
            whole = r.pid is None
            params.execute(con, 
                "UPDATE reports SET run_id = $run, world_size = $world, "
                "rank = CASE WHEN $whole THEN $rank ELSE NULL END, "
                "local_rank = CASE WHEN $whole THEN $local_rank ELSE NULL END, rank_source = $source "
                "WHERE report_id = $rid",
                {"run": run_id, "world": world, "whole": whole, "rank": r.rank, "local_rank": local.get(r.rank),
                 "source": r.source, "rid": r.report_id},
            )  # fmt: skip
        # runs left without ranks are gone
        params.execute(con, "DELETE FROM runs WHERE run_id NOT IN (SELECT DISTINCT run_id FROM ranks)")
        params.execute(
            con, "UPDATE runs SET ranks_seen = (SELECT count(*) FROM ranks WHERE ranks.run_id = runs.run_id)"
        )
        params.execute(con, "COMMIT")
    except BaseException:
        params.execute(con, "ROLLBACK")
        raise
    return run_id


def _local_ranks(ranks: Sequence[RankOf]) -> dict[int, int]:
    """Rank among the ranks of the same host (all one host when hosts are unknown)."""
    out: dict[int, int] = {}
    by_host: dict[str | None, list[int]] = {}
    for r in sorted(ranks, key=lambda x: x.rank):
        if r.local_rank is not None:
            out[r.rank] = r.local_rank
        by_host.setdefault(r.host, []).append(r.rank)
    if len(out) == len(ranks):
        return out
    out = {}
    for members in by_host.values():
        for i, rank in enumerate(members):
            out[rank] = i
    return out


def group_runs(con: duckdb.DuckDBPyConnection, report_ids: Iterable[int]) -> list[list[int]]:
    """The runs these newly ingested reports form without being told: traces whose
    `distributedInfo` says they are ranks of one job of N (same world size, distinct ranks),
    files whose names differ only by a rank number, and single reports holding several GPU
    processes. Reports already in a run are left where they are, unless the run was formed
    this way from fewer ranks than its world size: ranks ingested one command at a time join it."""
    ids = [int(r) for r in report_ids]
    rows = params.execute(
        con,
        "SELECT report_id, rank, world_size, source_path, format, run_id FROM reports "
        "WHERE list_contains($ids, report_id) ORDER BY report_id",
        {"ids": ids},
    ).fetchall()
    free = [r for r in rows if r[5] is None and r[4] not in ("ncu", "ncu-rep", "nvml", "nvidia-smi")]
    free += _partial_runs(con, ids, free)
    groups: list[list[int]] = []
    used: set[int] = set()
    # stated ranks (distributedInfo, the launcher's RANK): the files of one world size in one
    # folder are one job when their ranks are distinct (the profiler's own file names carry a
    # host, a pid and a time: `node1_4242.1690000000000.pt.trace.json`); else split them by the
    # shape of the file name without its rank (its digits left out). A trace of one rank of N,
    # or of a job of one, is a run too.
    by_world: dict[tuple[int, str], list[tuple[int, int, str]]] = {}
    for rid, rank, world, path, _, _ in free:
        if rank is not None and world is not None:
            by_world.setdefault((int(world), str(Path(path).parent)), []).append((int(rid), int(rank), path))
    for members in by_world.values():
        parts = [members]
        if len({m[1] for m in members}) < len(members):
            by_name: dict[str, list[tuple[int, int, str]]] = {}
            for m in members:  # the name's shape: hosts, pids and times vary within one job
                by_name.setdefault(_DIGITS.sub("#", run_name([m[2]])), []).append(m)
            parts = list(by_name.values())
        for part in parts:
            if len({m[1] for m in part}) == len(part):
                groups.append([m[0] for m in part])
                used.update(m[0] for m in part)
    # file names that differ by a rank number (the same format)
    rest = [r for r in free if int(r[0]) not in used]
    by_skeleton: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for rid, _, _, path, fmt, _ in rest:
        by_skeleton.setdefault((fmt, _DIGITS.sub("#", stem(path))), []).append((int(rid), path))
    for named in by_skeleton.values():
        if len(named) >= 2 and ranks_from_names([m[1] for m in named]) is not None:
            groups.append([m[0] for m in named])
            used.update(m[0] for m in named)
    # one report, several GPU processes
    for rid, *_ in rest:
        if int(rid) not in used and multi_rank_processes(con, int(rid)):
            groups.append([int(rid)])
    return groups


def _partial_runs(con: duckdb.DuckDBPyConnection, ids: list[int], free: list[Any]) -> list[Any]:
    """Reports of runs found from stated ranks (not named by the user) that hold fewer ranks than
    their world size, in the folder and of the world size of a new report stating its rank."""
    keys = {(int(r[2]), str(Path(r[3]).parent)) for r in free if r[1] is not None and r[2] is not None}
    if not keys:
        return []
    rows = params.execute(
        con,
        "SELECT r.report_id, r.rank, r.world_size, r.source_path, r.format, r.run_id, u.name FROM reports AS r "
        "JOIN runs AS u USING (run_id) WHERE u.ranks_seen < u.world_size AND r.rank IS NOT NULL "
        "AND NOT list_contains($ids, r.report_id)",
        {"ids": ids},
    ).fetchall()
    return [
        r[:6]
        for r in rows
        if (int(r[2]), str(Path(r[3]).parent)) in keys
        and r[6] == run_name([r[3]])  # named by nsa, not the user
    ]


def resolve_run(con: duckdb.DuckDBPyConnection, run: str | int) -> int:
    """A run's id from its id or its name; InputError naming the runs there are otherwise."""
    text = str(run).strip()
    row = None
    if text.isdigit():
        row = params.execute(con, "SELECT run_id FROM runs WHERE run_id = $id", {"id": int(text)}).fetchone()
    if row is None:
        row = params.execute(con, "SELECT run_id FROM runs WHERE name = $name", {"name": text}).fetchone()
    if row is None:
        names = [
            f"{i} ({n})"
            for i, n in params.execute(con, "SELECT run_id, name FROM runs ORDER BY run_id").fetchall()
        ]
        there = f"the runs are {', '.join(names)}" if names else "the workspace has no runs yet"
        raise InputError(
            f"no run {text!r} in the workspace ({there}); make one with `nsa ingest --run NAME FILES...`."
        )
    return int(row[0])


def run_reports(con: duckdb.DuckDBPyConnection, run_id: int) -> list[int]:
    """The report ids of a run, in rank order."""
    rows = params.execute(
        con,
        "SELECT report_id FROM ranks WHERE run_id = $run GROUP BY report_id ORDER BY min(rank)",
        {"run": run_id},
    ).fetchall()
    return [int(r[0]) for r in rows]


def expand_inputs(paths: Iterable[str | Path], extract_to: Path) -> tuple[list[Path], list[Path]]:
    """The files to ingest: each file as given, a folder's files (recursively, in name order),
    a `.tar` / `.tar.gz` of rank files unpacked into `extract_to/<its name>/` (kept: deferred
    tables are read from the files later). Returns (files, skipped): in folders and archives,
    files no reader knows are skipped, not failed."""
    from .pipeline import detect  # the pipeline imports nothing from here

    files: list[Path] = []
    skipped: list[Path] = []

    def folder(root: Path) -> None:
        for f in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
            try:
                detect(f)
            except InputError:
                skipped.append(f)
                continue
            files.append(f)

    for given in paths:
        path = Path(given).expanduser()
        if path.is_dir():
            folder(path)
        elif path.is_file() and _is_tar(path):
            target = extract_to / stem(path)
            _untar(path, target)
            folder(target)
        else:
            files.append(path)
    return files, skipped


def _is_tar(path: Path) -> bool:
    import tarfile
    import zlib

    try:
        return tarfile.is_tarfile(path)
    except (
        OSError,
        EOFError,
        zlib.error,
        tarfile.TarError,
    ):  # damaged or truncated: its reader will say what it is
        return False


def _untar(path: Path, target: Path) -> None:
    """Unpack an archive's regular files under `target`, refusing names that would land outside it."""
    import shutil
    import tarfile

    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                dest = (tmp / member.name).resolve()
                if not member.isfile():
                    continue
                if tmp.resolve() not in dest.parents:
                    raise InputError(
                        f"{path}: the archive member {member.name!r} points outside its folder; unpack it yourself."
                    )
                dest.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                if src is None:
                    continue
                with src, dest.open("wb") as out:
                    shutil.copyfileobj(src, out)
    except (tarfile.TarError, OSError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError(
            f"{path}: cannot unpack the archive ({exc}); unpack it and ingest the folder."
        ) from exc
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
