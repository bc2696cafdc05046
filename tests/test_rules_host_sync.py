"""host-sync's "blocked while the GPUs were idle" time against plain Python interval arithmetic."""

from __future__ import annotations

import random

import duckdb
import pytest

from nsight_analytics import schema
from nsight_analytics.queries import install_macros, run
from rows import union_within

SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy")


@pytest.mark.parametrize("starts", [100, 3])
@pytest.mark.parametrize("seed", range(25))
def test_beyond_gpu_time_matches_interval_arithmetic(seed: int, starts: int) -> None:
    """`starts` even start times to draw from: with 3, many activities of a device start at once
    (ties longer than the query's blocks of rows, which then begin in the middle of a tie)."""
    rnd = random.Random(seed)
    con = duckdb.connect()
    for stmt in schema.ddl_statements():
        con.execute(stmt)
    install_macros(con)
    act: list[tuple[int, int, int, int, int]] = []  # report, device, pid, start, end
    for table in ("kernels", "memcpy", "memset"):
        for _ in range(rnd.randint(0, 25)):
            start, dur = rnd.randint(0, starts) * 2, rnd.choice([0, rnd.randint(0, 40)])  # even: ties
            row = (rnd.randint(1, 2), rnd.randint(0, 1), rnd.choice([5, 6]), start, start + dur)
            act.append(row)
            con.execute(
                f"INSERT INTO {'kernel_rows' if table == 'kernels' else table} "
                "(report_id, device_id, pid, start_ns, end_ns, duration_ns) VALUES (?, ?, ?, ?, ?, ?)",
                [*row, dur],
            )
    calls = []
    for _ in range(rnd.randint(1, 15)):
        start, dur = rnd.randint(0, 110) * 2, rnd.choice([0, rnd.randint(0, 60)])
        call = (
            rnd.randint(1, 2),
            rnd.choice([5, 6, 7]),
            start,
            start + dur,
            rnd.choice([*SYNC, "cudaLaunchKernel"]),
        )
        calls.append(call)
        con.execute(
            "INSERT INTO cuda_api (report_id, pid, tid, start_ns, end_ns, duration_ns, name) "
            "VALUES (?, ?, 1, ?, ?, ?, ?)",
            [*call[:4], dur, call[4]],
        )
    expected: dict[tuple[int, int, str], list[int]] = {}
    for rid, pid, s, e, name in calls:
        if name not in SYNC:
            continue
        devices = {d for r, d, p, _, _ in act if r == rid and p == pid}
        # busy: the most any GPU of the process was busy (any process's work) during the call
        busy = max(
            (
                union_within([(a, b) for r, d, _, a, b in act if r == rid and d == dev], s, e)
                for dev in devices
            ),
            default=0,
        )
        agg = expected.setdefault((rid, pid, name), [0, 0, 0])
        agg[0] += 1
        agg[1] += e - s
        agg[2] += max(0, e - s - busy)
    got = {(r[0], r[1], r[2]): [r[3], r[4], r[5]] for r in run(con, "sync_beyond_gpu").fetchall()}
    assert got == expected


def test_estimate_is_the_named_process(tmp_path) -> None:
    # pid 5 blocks 5 ms of its 10 ms run (50%), pid 6 blocks 20 ms of its 100 ms (20%): the
    # finding names pid 5 (largest share) and must estimate pid 5's 5 ms, not pid 6's 20 ms.
    from test_rules_cases import load_case

    import nsight_analytics as nsa
    from nsight_analytics.rules import run_rules

    ms = 1_000_000

    def call(pid: int, start: int, end: int, name: str) -> dict:
        return {
            "report_id": 1,
            "pid": pid,
            "tid": pid,
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "name": name,
        }

    rows = {
        "cuda_api": [
            call(5, 0, 5 * ms, "cudaStreamSynchronize"),
            call(5, 10 * ms - 1, 10 * ms, "cudaLaunchKernel"),
            call(6, 0, 20 * ms, "cudaDeviceSynchronize"),
            call(6, 100 * ms - 1, 100 * ms, "cudaLaunchKernel"),
        ]
    }
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, rows)
        (f,) = run_rules(con, only=["host-sync"])
    finally:
        con.close()
    assert (f.evidence["pid"], f.evidence["beyond_gpu_ns"], f.est_savings_ns) == (5, 5 * ms, 5 * ms)
    assert "idle for 5 ms" in f.message


@pytest.mark.parametrize(
    ("calls", "title"),
    [
        # the sync ends with the kernel: blocked only while the GPU works
        ([("cudaStreamSynchronize", 0, 10)], "Host blocked 100% of the run in cudaStreamSynchronize, while the GPU was busy"),
        # a 7 ms sync from 5 ms, 2 ms of it past the kernel: 17% of the run, under the warning share
        ([("cudaStreamSynchronize", 5, 12)], "Host blocked 58% of the run in cudaStreamSynchronize, the GPU idle for 29% of that"),
        # two calls: a 6 ms and a 4.5 ms one, the last 0.5 ms of the second past the kernel
        ([("cudaStreamSynchronize", 0, 6), ("cudaDeviceSynchronize", 6, 10.5)],
         "Host blocked 100% of the run, mostly in cudaStreamSynchronize, the GPU idle for 4.8% of that"),
    ],
)  # fmt: skip
def test_an_info_title_says_how_busy_the_gpu_was(tmp_path, calls, title) -> None:
    """An info finding's title says the GPU was busy only when it was busy for all of the blocked
    time; else how much of it the GPU idled, as the message does. A 10 ms kernel from 0 and a
    launch at 0; the shares are worked out from the rows by hand below."""
    from test_rules_cases import load_case

    import nsight_analytics as nsa
    from nsight_analytics.rules import run_rules

    ms = 1_000_000
    api = [{"report_id": 1, "pid": 5, "tid": 5, "start_ns": 0, "end_ns": 1, "duration_ns": 1,
            "name": "cudaLaunchKernel"}]  # fmt: skip
    for name, start, end in calls:
        s, e = int(start * ms), int(end * ms)
        api.append(
            {
                "report_id": 1,
                "pid": 5,
                "tid": 5,
                "start_ns": s,
                "end_ns": e,
                "duration_ns": e - s,
                "name": name,
            }
        )
    kernel = {"report_id": 1, "device_id": 0, "stream_id": 7, "pid": 5, "start_ns": 0, "end_ns": 10 * ms,
              "duration_ns": 10 * ms, "name": "gemm", "short_name": "gemm"}  # fmt: skip
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        load_case(con, {"kernels": [kernel], "cuda_api": api})
        (f,) = run_rules(con, only=["host-sync"])
    finally:
        con.close()
    assert f.severity == "info", f.message
    assert f.title == title
    span = max(e for _, _, e in calls) * ms
    blocked = sum((e - s) * ms for _, s, e in calls)
    beyond = sum(max(0.0, e - max(s, 10)) * ms for _, s, e in calls)
    assert f.evidence["blocked_share"] == pytest.approx(blocked / span)
    assert f.evidence["beyond_gpu_ns"] == pytest.approx(beyond, abs=1)
