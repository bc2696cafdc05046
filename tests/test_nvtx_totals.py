"""nvtx_summary's rows (the table nvtx_totals) group the ranges by their raw name columns first
(thread, domain id, text or string id) and fold those keys per domain name and base name after:
names that fold, the same name written inline and as a registered string, one domain name under
different ids in two processes, a domain id used in a process that did not create it (no domain
name: domain ids belong to a process), and a name whose ranges are all open must give the rows of
one aggregation over the ranges themselves. Once the ranges are copied (names resolved), the
step aggregates them directly: the "ranges" case.
Expected rows are worked out in Python from the ranges as the test builds them."""

from __future__ import annotations

import statistics
from pathlib import Path

import duckdb
import pytest

import nsight_analytics as nsa
from fixtures import nsys_fixtures as fx
from nsight_analytics.ingest import ensure_loaded
from nsight_analytics.ingest.nsys import nsys
from nsight_analytics.ingest.sqlite_source import attach

US = 1_000


def _export(path: Path) -> list[tuple[str | None, str, str, int, int | None, int]]:
    """Processes 100 (threads a1, a2) and 200 (b1); a1 and b1 launch. Returns each range as
    (domain, full name, base name, start, end, global tid), and the launches as kernels
    (host start, duration, global tid) on `_export.launches`."""
    b = fx.ExportBuilder()
    b.gpu()
    a1 = b.process(100, "python")
    a2 = b.thread(100, 101, "worker")
    b1 = b.process(200, "other")
    lib_a = b.nvtx_domain("MyLib", 10, gtid=a1)  # domain id 1 in process 100
    other = b.nvtx_domain("Other", 11, gtid=b1)  # id 2 in process 200
    lib_b = b.nvtx_domain("MyLib", 12, gtid=b1)  # id 3: the same name in process 200
    launches = [(1100, 1000, a1), (1300, 3000, a1), (2100, 500, a1), (1200, 7000, b1), (3100, 900, b1)]
    for host, dur, gtid in launches:
        b.launch_kernel(host * US, host * US + 50 * US, dur, "k", gtid=gtid)
    ranges: list[tuple[str | None, str, str, int, int | None, int]] = []

    def rng(
        start: int, end: int | None, name: str, gtid: int, *, domain: int = 0, registered: bool = False
    ) -> None:
        b.nvtx(start, end, None if registered else name, gtid=gtid, domain=domain,
               registered=name if registered else None)  # fmt: skip
        names = {0: None, lib_a: "MyLib", lib_b: "MyLib", other: "Other"}
        dom = names[domain] if (domain, gtid >> 24) != (lib_a, b1 >> 24) else None
        ranges.append((dom, name, name.split(", ")[0] if " = " in name else name, start, end, gtid))

    rng(1000 * US, 1400 * US, "aten::mm, seq = 1, op_id = 10", a1)  # launches 1100, 1300
    rng(2000 * US, 2200 * US, "aten::mm, seq = 2, op_id = 11", a1)  # 2100
    rng(1000 * US, 1250 * US, "aten::mm, seq = 3, op_id = 12", a2)  # nothing on its thread
    rng(5000 * US, 5001 * US, "aten::mm, seq = 4, op_id = 13", a2)
    rng(6000 * US, None, "aten::mm, seq = 5, op_id = 14", a1)  # open
    rng(1000 * US, 1500 * US, "step", a1, registered=True)
    rng(3000 * US, 3200 * US, "step", b1)  # inline text: the same name, another process
    rng(1100 * US, 1300 * US, "io", a1, domain=lib_a)
    rng(1150 * US, 1250 * US, "io", b1, domain=lib_b)  # MyLib under id 3
    rng(3050 * US, 3150 * US, "io", b1, domain=lib_a)  # id 1 names nothing in process 200
    rng(7000 * US, None, "never", a2)  # only open ranges
    rng(7100 * US, None, "never", b1)
    b.write(path)
    _export.launches = launches  # type: ignore[attr-defined]
    return ranges


def _expected(ranges, launches) -> dict[tuple[str | None, str], tuple]:
    groups: dict[tuple[str | None, str], list] = {}
    for r in ranges:
        groups.setdefault((r[0], r[2]), []).append(r)
    out = {}
    for key, rs in groups.items():
        closed = [r for r in rs if r[4] is not None]
        durs = [r[4] - r[3] for r in closed]

        def kern(r, same: bool) -> tuple[int, int]:
            inside = [
                d for host, d, g in launches
                if r[3] <= host * US <= r[4] and (g == r[5] if same else g >> 24 == r[5] >> 24)
            ]  # fmt: skip
            return len(inside), sum(inside)

        thread = [kern(r, True) for r in closed]
        process = [kern(r, False) for r in closed]
        out[key] = (
            len({r[1] for r in rs}), len(closed), len(rs) - len(closed),
            sum(durs) if durs else None, statistics.mean(durs) if durs else None,
            statistics.median(durs) if durs else None, min(durs, default=None), max(durs, default=None),
            sum(k for k, _ in thread), sum(ns for _, ns in thread),
            sum(k for k, _ in process), sum(ns for _, ns in process),
        )  # fmt: skip
    return out


def _summary(con, rid: int) -> dict[tuple[str | None, str], tuple]:
    rows = nsa.query(con, "nvtx_summary", report_id=rid).fetchall()
    got = {(r[1], r[2]): r[3:] for r in rows}
    assert len(got) == len(rows)
    return got


@pytest.mark.parametrize("path", ["deferred", "named", "ranges", "full"])
def test_keys_fold_into_the_rows_of_the_ranges_themselves(
    tmp_path: Path, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = tmp_path / "keys.sqlite"
    ranges = _export(export)
    want = _expected(ranges, _export.launches)  # type: ignore[attr-defined]
    assert want[("MyLib", "io")][:3] == (1, 2, 0) and want[(None, "io")][:3] == (1, 1, 0)
    assert want[(None, "aten::mm")][:3] == (5, 4, 1) and want[(None, "step")][:3] == (1, 2, 0)
    assert want[(None, "never")][1:] == (0, 2, None, None, None, None, None, 0, 0, 0, 0)
    # a range of a thread whose process another thread launches for: the process pass runs (on the
    # deferred path keyed by the raw name columns, after the keys) and counts more than its thread
    assert want[(None, "aten::mm")][8] < want[(None, "aten::mm")][10]
    if path == "named":  # the export's ranges named one by one, as where names hardly repeat
        monkeypatch.setattr(nsys, "_names_repeat", lambda *_: False)
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    rid = nsa.ingest(con, export, **({"defer": ()} if path == "full" else {})).report_id
    if path == "ranges":
        ensure_loaded(con, ["nvtx_ranges"])  # the workspace's ranges, their kernels not worked out
    got = _summary(con, rid)
    assert got.keys() == want.keys()
    for key, row in want.items():
        assert got[key][:4] == row[:4], key  # names, ranges, open_ranges, total_ns
        assert got[key][4] == pytest.approx(row[4]), key  # avg_ns
        assert got[key][5:] == row[5:], key  # median, min, max and the kernels, exact
    con.close()


@pytest.mark.parametrize("distinct", [1, 20, 5000])
def test_names_repeat_when_a_sample_finds_few_keys(tmp_path: Path, distinct: int) -> None:
    """5000 ranges on one thread under `distinct` names, each used 5000 / distinct times: the
    keys pay (one key per name) while they are under an eighth of the ranges."""
    b = fx.ExportBuilder()
    gtid = b.process(100, "python")
    for i in range(5000):
        b.nvtx(i * US, i * US + 10, f"op, op_id = {i % distinct}", gtid=gtid)
    b.write(tmp_path / "n.sqlite")
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    src = nsys.Source(attach(con, tmp_path / "n.sqlite"))
    rows = nsys._export_rows(con, src, nsys.NVTX)
    assert rows >= 5000
    assert nsys._names_repeat(con, src, rows) is (distinct < 5000 / 8)
    con.close()


def _failing_once(monkeypatch: pytest.MonkeyPatch, error: type[duckdb.Error] | None) -> list[int]:
    """nvtx_totals' step fails on its first call, after a statement of its own failed inside the
    step's transaction (which aborts it): with DuckDB's own error, or with `error` raised in its
    place; later calls run the step. Returns the calls made."""
    real = nsys.nvtx_totals
    calls: list[int] = []

    def step(con: duckdb.DuckDBPyConnection, *args: object) -> int:
        calls.append(1)
        if len(calls) == 1:
            try:
                con.execute("SELECT error('the totals failed')")
            except duckdb.Error:
                if error is None:
                    raise
                raise error("Out of Memory Error: failed to allocate (made by the test)") from None
        return real(con, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(nsys, "nvtx_totals", step)
    return calls


def test_a_failed_deferred_step_reports_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step's scratch table is dropped as it ends; when the step failed, its transaction is
    aborted and refuses that DROP: the user hears the step's own error, not DuckDB's "Current
    transaction is aborted", and the workspace is as before (the step can run again)."""
    export = tmp_path / "keys.sqlite"
    ranges = _export(export)
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    rid = nsa.ingest(con, export).report_id
    calls = _failing_once(monkeypatch, None)
    with pytest.raises(nsa.NsaError) as failed:
        nsa.query(con, "nvtx_summary", report_id=rid)
    assert str(failed.value) == (
        f"{export} could not be read for report {rid}'s nvtx_totals: Invalid Input Error: the totals failed"
    )
    assert calls == [1]
    got = _summary(con, rid)  # the second call runs the step
    assert got.keys() == _expected(ranges, _export.launches).keys()  # type: ignore[attr-defined]
    con.close()


def test_out_of_memory_in_a_deferred_step_runs_it_again_past_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of memory under the loads' memory cap (its transaction aborted), the step runs once
    more under the limit the cap lowered, as for any load: the rows come on the first query."""
    export = tmp_path / "keys.sqlite"
    ranges = _export(export)
    want = _expected(ranges, _export.launches)  # type: ignore[attr-defined]
    con = nsa.connect(tmp_path / "w.duckdb", load_deferred=False)
    rid = nsa.ingest(con, export).report_id
    calls = _failing_once(monkeypatch, duckdb.OutOfMemoryException)
    got = _summary(con, rid)
    assert calls == [1, 1]
    assert got.keys() == want.keys()
    assert {k: r[:4] for k, r in got.items()} == {k: r[:4] for k, r in want.items()}
    con.close()
