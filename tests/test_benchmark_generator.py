"""benchmarks/make_large_export.py: N time-shifted copies of a real export, checked with plain SQL."""

from __future__ import annotations

import gzip
import importlib.util
import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A real capture committed with the tests (tests/data/README.md): kernels, CUDA API calls, copies,
# memsets, syncs and NVTX ranges, all of them tables the generator tiles.
PACKED = ROOT / "tests" / "data" / "h100_nsys2025.3_sync_loop_before.sqlite.gz"
TIME_COLS = ("start", "end")


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Path:
    """The capture as a plain SQLite file."""
    path = tmp_path_factory.mktemp("src") / PACKED.name.removesuffix(".gz")
    path.write_bytes(gzip.decompress(PACKED.read_bytes()))
    return path


def _generator():
    spec = importlib.util.spec_from_file_location(
        "make_large_export", ROOT / "benchmarks" / "make_large_export.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _count(con: sqlite3.Connection, table: str) -> int:
    return con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


@pytest.fixture(scope="module")
def tiled(tmp_path_factory, real: Path):
    out = tmp_path_factory.mktemp("bench") / "x3.sqlite"
    info = _generator().make_large_export(real, 3, out)
    src = sqlite3.connect(f"file:{real}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    yield info, src, dst
    src.close()
    dst.close()


def test_activity_tables_triple_others_copied_once(tiled):
    info, src, dst = tiled
    tables = [r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables == [r[0] for r in dst.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"):  # fmt: skip
        assert t in info["tiled_tables"]
        assert _count(dst, t) == 3 * _count(src, t) > 0, t
    for t in (
        "StringIds",
        "PROCESSES",
        "META_DATA_EXPORT",
        "ENUM_CUDA_MEMCPY_OPER",
        "TARGET_INFO_SESSION_START_TIME",
    ):
        assert t not in info["tiled_tables"]
        assert _count(dst, t) == _count(src, t) > 0, t


def test_copies_are_shifted_in_time(tiled):
    info, src, dst = tiled
    period = info["period_ns"]
    lo, hi = src.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    assert period > hi - lo
    lo3, hi3 = dst.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    assert (lo3, hi3) == (lo, hi + 2 * period)
    # Each copy holds exactly the source's rows, moved by i * period.
    for i in range(3):
        n = dst.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start BETWEEN ? AND ?",
            (lo + i * period, hi + i * period),
        ).fetchone()[0]
        assert n == _count(src, "CUPTI_ACTIVITY_KIND_KERNEL")
    durations = lambda con: con.execute(
        'SELECT sum("end" - start), count(DISTINCT "end" - start) FROM NVTX_EVENTS'
    ).fetchone()
    (s1, d1), (s3, d3) = durations(src), durations(dst)
    assert (s3, d3) == (3 * s1, d1)


def test_kernel_api_pairs_stay_consistent(tiled):
    _, src, dst = tiled
    pairs = (
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)"
    )
    assert dst.execute(pairs).fetchone()[0] == 3 * src.execute(pairs).fetchone()[0] > 0
    # Correlation ids never collide across copies, and the API call still precedes its kernel.
    dup = (
        "SELECT count(*) - count(DISTINCT correlationId || ':' || globalTid) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
    )
    assert dst.execute(dup).fetchone()[0] == src.execute(dup).fetchone()[0]
    late = pairs + " WHERE r.start > k.start"
    assert dst.execute(late).fetchone()[0] == src.execute(late).fetchone()[0] == 0


def test_cli_entry_point(tmp_path, real: Path):
    out = tmp_path / "x2.sqlite"
    assert _generator().main([str(real), "2", str(out)]) == 0
    src = sqlite3.connect(f"file:{real}?mode=ro", uri=True)
    kernels = _count(src, "CUPTI_ACTIVITY_KIND_KERNEL")
    src.close()
    con = sqlite3.connect(out)
    assert _count(con, "CUPTI_ACTIVITY_KIND_KERNEL") == 2 * kernels > 0
    con.close()


STACKS = ROOT / "tests" / "data" / "stacks" / "nsys" / "h100_nsys2025.3_stack_loop_stacks.sqlite.gz"


def test_call_stacks_are_tiled_with_their_owners(tmp_path: Path) -> None:
    """CPU samples, CUDA and OS runtime calls keep their own backtraces in every copy: the chain
    tables get N copies with the ids offset as their owners' (CUDA_CALLCHAINS has an id 0; OSRT_API's
    callchainId 0 means none)."""
    real = tmp_path / "stacks.sqlite"
    real.write_bytes(gzip.decompress(STACKS.read_bytes()))
    out = tmp_path / "x3.sqlite"
    _generator().make_large_export(real, 3, out)
    src = sqlite3.connect(f"file:{real}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    pairs = (
        ("SAMPLING_CALLCHAINS", "COMPOSITE_EVENTS", "id", ""),
        ("CUDA_CALLCHAINS", "CUPTI_ACTIVITY_KIND_RUNTIME", "callchainId", ""),
        ("OSRT_CALLCHAINS", "OSRT_API", "callchainId", " AND o.callchainId <> 0"),
    )
    for chains, owner, col, none in pairs:
        assert _count(dst, chains) == 3 * _count(src, chains)
        # each owner row's chain: the same frames as the source row's, copy by copy
        sql = (
            f"SELECT o.start, group_concat(c.symbol || '@' || c.stackDepth, ',') FROM {owner} o "
            f"JOIN (SELECT * FROM {chains} ORDER BY id, stackDepth) c ON c.id = o.{col} WHERE o.{col} IS NOT NULL{none} GROUP BY o.rowid ORDER BY 1"
        )
        before, after = src.execute(sql).fetchall(), dst.execute(sql).fetchall()
        assert before and len(after) == 3 * len(before)
        period = (after[len(before)][0] - before[0][0]) if len(after) > len(before) else 0
        assert period > 0
        for i in range(3):
            assert [(t + i * period, f) for t, f in before] == after[i * len(before) : (i + 1) * len(before)]
        (ids,) = dst.execute(f"SELECT count(DISTINCT id) FROM {chains}").fetchone()
        assert ids == 3 * src.execute(f"SELECT count(DISTINCT id) FROM {chains}").fetchone()[0]
    assert (
        dst.execute("SELECT count(*) FROM OSRT_API WHERE callchainId = 0").fetchone()[0]
        == 3 * (src.execute("SELECT count(*) FROM OSRT_API WHERE callchainId = 0").fetchone()[0])
    )
    src.close()
    dst.close()


DDP_RANK = ROOT / "tests" / "data" / "ddp" / "nsys" / "h200x2_nsys2025.3_ddp_w2_rank0.sqlite.gz"


def _numbered_source(tmp_path: Path) -> Path:
    """A real DDP rank's export (NVTX names inline in `text` and NCCL's as string ids in `textId`)
    with PyTorch emit_nvtx counters put into some of its names, both ways they are stored: every
    third inline name gets ', seq = S, op_id = O', and the rows of two NCCL string ids point at
    new string ids whose value carries an ', op_id = O' of their own."""
    real = tmp_path / "rank0.sqlite"
    real.write_bytes(gzip.decompress(DDP_RANK.read_bytes()))
    con = sqlite3.connect(real)
    con.execute(
        "UPDATE NVTX_EVENTS SET text = text || ', seq = ' || (rowid * 2) || ', op_id = ' || (500 + rowid * 3) "
        "WHERE text IS NOT NULL AND rowid % 3 = 0"
    )
    top = con.execute("SELECT max(id) FROM StringIds").fetchone()[0]
    ids = [
        r[0]
        for r in con.execute("SELECT DISTINCT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL ORDER BY 1")
    ]
    assert len(ids) >= 2
    for j, sid in enumerate(ids[:2]):
        (value,) = con.execute("SELECT value FROM StringIds WHERE id = ?", (sid,)).fetchone()
        con.execute(
            "INSERT INTO StringIds (id, value) VALUES (?, ?)", (top + 1 + j, f"{value}, op_id = {7000 + j}")
        )
        con.execute("UPDATE NVTX_EVENTS SET textId = ? WHERE textId = ?", (top + 1 + j, sid))
    con.commit()
    con.close()
    return real


def _names(con: sqlite3.Connection) -> list[tuple]:
    """Every NVTX row in rowid order: (name, stored as text?, eventType, domainId, category)."""
    return con.execute(
        "SELECT coalesce(n.text, s.value), n.text IS NOT NULL, n.eventType, n.domainId, n.category "
        "FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId ORDER BY n.rowid"
    ).fetchall()


def _shift(name: str | None, i: int, steps: dict[str, int]) -> str | None:
    """The name with each ', seq = N' / ', op_id = N' moved on by i steps (plain string work)."""
    if name is None:
        return None
    parts = name.split(", ")
    for j, part in enumerate(parts):
        key, eq, num = part.partition(" = ")
        if eq and key in steps and num.isdigit():
            parts[j] = f"{key} = {int(num) + i * steps[key]}"
    return ", ".join(parts)


def test_unique_nvtx_numbers_every_copy(tmp_path: Path) -> None:
    """--unique-nvtx: copy i continues the counters of the numbered names, inline or by string
    id; the other names, the domains, categories and event types stay the source's."""
    real = _numbered_source(tmp_path)
    src = sqlite3.connect(f"file:{real}?mode=ro", uri=True)
    before = _names(src)
    n = len(before)
    # each counter's step: its max - min + 1 over the source's names, worked out by hand
    values: dict[str, list[int]] = {"seq": [], "op_id": []}
    for name, *_ in before:
        for part in (name or "").split(", "):
            key, eq, num = part.partition(" = ")
            if eq and key in values and num.isdigit():
                values[key].append(int(num))
    steps = {k: max(v) - min(v) + 1 for k, v in values.items()}
    assert steps["seq"] > 1 and steps["op_id"] > 1
    numbered = {name for name, *_ in before if name and " = " in name}
    by_id = {name for name, inline, *_ in before if name and " = " in name and not inline}
    assert len(by_id) == 2 and len(numbered) > 10

    out = tmp_path / "u3.sqlite"
    assert _generator().main([str(real), "3", str(out), "--unique-nvtx"]) == 0
    dst = sqlite3.connect(out)
    after = _names(dst)
    assert len(after) == 3 * n
    for i in range(3):
        expect = [(_shift(name, i, steps), *rest) for name, *rest in before]
        assert after[i * n : (i + 1) * n] == expect, i
    # copy 0 is the source, row for row, text and textId alike
    cols = "text, textId, eventType, domainId, category, globalTid"
    assert (
        dst.execute(f"SELECT {cols} FROM NVTX_EVENTS ORDER BY rowid LIMIT {n}").fetchall()
        == src.execute(f"SELECT {cols} FROM NVTX_EVENTS ORDER BY rowid").fetchall()
    )
    # every numbered name is its own in each copy; the others repeat in all three
    distinct = "SELECT count(DISTINCT coalesce(n.text, s.value)) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId"
    unnumbered = src.execute(distinct).fetchone()[0] - len(numbered)
    assert dst.execute(distinct).fetchone()[0] == unnumbered + 3 * len(numbered)
    # the numbered string ids get one new StringIds row per further copy, ids above the source's
    top = src.execute("SELECT max(id) FROM StringIds").fetchone()[0]
    assert _count(dst, "StringIds") == _count(src, "StringIds") + 2 * len(by_id)
    assert (
        dst.execute(f"SELECT count(DISTINCT textId) FROM NVTX_EVENTS WHERE textId > {top}").fetchone()[0] == 4
    )
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        assert _count(dst, table) == 3 * _count(src, table)
    src.close()
    dst.close()


def test_without_unique_nvtx_names_repeat(tmp_path: Path) -> None:
    real = _numbered_source(tmp_path)
    out = tmp_path / "x3.sqlite"
    _generator().make_large_export(real, 3, out)
    src = sqlite3.connect(f"file:{real}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    before, after = _names(src), _names(dst)
    assert after == before * 3
    assert _count(dst, "StringIds") == _count(src, "StringIds")
    src.close()
    dst.close()
