"""ncu queries: contracts hold, tiny hand-built inputs give the expected rows, real files make sense."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from nsight_analytics import schema
from nsight_analytics.ingest.ncu.ncu import load_ncu
from rows import insert

ROOT = Path(__file__).parents[1]
QUERIES = ROOT / "queries" / "ncu"
REAL = ROOT / ".." / "shared" / "realdata"
needs_real = pytest.mark.skipif(
    not (REAL / "ncu").is_dir(), reason="real exports not present: ../shared/realdata (see its README)"
)
QUERY_FILES = sorted(p for p in QUERIES.glob("*.sql") if not p.name.startswith("_"))

_PARAM_RE = re.compile(r"^-- param (\w+) (\w+) = ([^:]+): ")
_COL_RE = re.compile(r"^-- col (\w+) ([\w\[\]]+): ")


def _contract(path: Path) -> tuple[dict[str, object], list[tuple[str, str]]]:
    """Declared params (with defaults) and cols, from the comment header."""
    params: dict[str, object] = {}
    cols: list[tuple[str, str]] = []
    for line in path.read_text().splitlines():
        if not line.startswith("--"):
            break
        if p := _PARAM_RE.match(line):
            raw = p.group(3).strip()
            params[p.group(1)] = None if raw == "NULL" else float(raw) if p.group(2) == "DOUBLE" else int(raw)
        elif c := _COL_RE.match(line):
            cols.append((c.group(1), c.group(2)))
    return params, cols


def _con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for stmt in schema.ddl_statements():
        con.execute(stmt)
    con.execute((QUERIES / "_macros.sql").read_text())
    return con


def _run(con: duckdb.DuckDBPyConnection, name: str, **overrides: object) -> list[dict[str, object]]:
    path = QUERIES / f"{name}.sql"
    params, _ = _contract(path)
    assert set(overrides) <= set(params)
    cur = con.execute(path.read_text(), {**params, **overrides})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _kernel(con: duckdb.DuckDBPyConnection, rid: int, launch: int, name: str) -> None:
    con.execute("INSERT INTO ncu_kernels (report_id, launch_id, name) VALUES (?, ?, ?)", [rid, launch, name])


def _metrics(con: duckdb.DuckDBPyConnection, rid: int, launch: int, values: dict[str, float]) -> None:
    con.executemany(
        "INSERT INTO ncu_metrics (report_id, launch_id, metric_name, value, value_text) VALUES (?, ?, ?, ?, ?)",
        [[rid, launch, k, v, str(v)] for k, v in values.items()],
    )


# --- contracts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", QUERY_FILES, ids=[p.stem for p in QUERY_FILES])
def test_contract_matches_result(path: Path) -> None:
    params, cols = _contract(path)
    body = "\n".join(ln for ln in path.read_text().splitlines() if not ln.startswith("--"))
    assert set(re.findall(r"\$(\w+)", body)) == set(params), "params declared == params used"
    report_params = [p for p in params if p.endswith("report_id")]
    assert report_params, "every query can be narrowed to a report"
    for p in report_params:
        assert re.search(rf"\(\${p} IS NULL OR [\w.]*report_id = \${p}\)", body), p
    con = _con()
    cur = con.execute(path.read_text(), params)
    assert [(d[0], str(d[1])) for d in cur.description] == cols


def test_query_files_exist() -> None:
    assert {p.stem for p in QUERY_FILES} == {
        "stalls",
        "speed_of_light",
        "occupancy",
        "stall_time",
        "kernel_weights",
        "roofline",
        "source_hotspots",
        "bottleneck",
    }


# --- the name normaliser --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nsys", "ncu"),
    [
        (
            (
                "void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<float, float, "
                "float, at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)2>>"
                "(int, T2, T3)"
            ),
            (
                "void vectorized_elementwise_kernel<4, AUnaryFunctor<float, float, float, "
                "binary_internal::MulFunctor<float>>, array<char *, 2>>(int, T2, T3)"
            ),
        ),
        ("void at::native::<unnamed>::k<(bool)1, (bool)0>(int)", "void unnamed>::k<true, false>(int)"),
        (
            "(anonymous namespace)::saxpy_kernel(float, const float *)",
            "unnamed>::saxpy_kernel(float, const float*)",
        ),
        ("void k<(unsigned int)32, (long long)-1>(T1 *)", "k<32, -1>(T1*)"),
    ],
)
def test_kernel_key_matches_both_spellings(nsys: str, ncu: str) -> None:
    con = _con()
    a, b = con.execute("SELECT nsa_kernel_key(?), nsa_kernel_key(?)", [nsys, ncu]).fetchone()
    assert a == b


def test_kernel_key_keeps_different_kernels_apart() -> None:
    con = _con()
    keys = con.execute(
        "SELECT nsa_kernel_key(unnest(?))",
        [["void k<4>(int)", "void k<2>(int)", "void k<4>(long)", "void ns::j<4>(int)"]],
    ).fetchall()
    assert len({k for (k,) in keys}) == 4


# --- golden tests on tiny inputs ----------------------------------------------------------------

SOL = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DUR = "gpu__time_duration.sum"


def test_speed_of_light_bounds() -> None:
    con = _con()
    cases = {0: (80, 20), 1: (20, 85), 2: (30, 40), 3: (70, 75)}
    for launch, (sm, mem) in cases.items():
        _kernel(con, 1, launch, f"k{launch}")
        _metrics(con, 1, launch, {DUR: 1000.4 + launch, SOL: sm, MEM: mem})
    _kernel(con, 1, 4, "no_memory_metric")
    _metrics(con, 1, 4, {SOL: 99})
    _kernel(con, 2, 0, "other report")
    rows = _run(con, "speed_of_light", report_id=1)
    assert [(r["launch_id"], r["duration_ns"], r["bound"]) for r in rows] == [
        (0, 1000, "compute"),
        (1, 1001, "memory"),
        (2, 1002, "latency"),
        (3, 1003, "balanced"),
        (4, None, None),
    ]
    lowered = _run(con, "speed_of_light", report_id=1, busy_pct=35.0, balance_margin_pct=3.0)
    assert [r["bound"] for r in lowered] == ["compute", "memory", "memory", "memory", None]
    assert len(_run(con, "speed_of_light")) == 6


def test_bottleneck_busiest_pipe_tie_is_the_same_every_run() -> None:
    # two pipes at the same utilisation (xu and alu, 40 %): the one last by name, whatever order
    # the rows come in; fma below them
    for order in (("xu", "alu", "fma"), ("fma", "alu", "xu"), ("alu", "fma", "xu")):
        con = _con()
        _kernel(con, 1, 0, "k")
        pct = {"xu": 40.0, "alu": 40.0, "fma": 12.5}
        _metrics(
            con,
            1,
            0,
            {f"sm__pipe_{p}_cycles_active.avg.pct_of_peak_sustained_elapsed": pct[p] for p in order},
        )
        row = _run(con, "bottleneck", report_id=1)[0]
        assert (row["pipe"], row["pipe_pct"]) == ("xu", 40.0), order


def test_occupancy_limiter() -> None:
    con = _con()
    base = {
        "sm__maximum_warps_per_active_cycle_pct": 50.0,
        "sm__warps_active.avg.pct_of_peak_sustained_active": 40.0,
        "launch__occupancy_limit_registers": 2,
        "launch__occupancy_limit_shared_mem": 8,
        "launch__occupancy_limit_warps": 4,
        "launch__occupancy_limit_blocks": 32,
    }
    _kernel(con, 1, 0, "regs")
    _metrics(con, 1, 0, base)
    _kernel(con, 1, 1, "tie")
    _metrics(con, 1, 1, {**base, "launch__occupancy_limit_registers": 4})
    rows = _run(con, "occupancy")
    assert [(r["blocks_per_sm"], r["limiter"]) for r in rows] == [(2, "registers"), (4, "registers,warps")]
    assert rows[0]["achieved_of_theoretical_pct"] == pytest.approx(80.0)
    assert rows[0]["limit_barriers"] is None


def test_stalls_family_choice_shares_and_rank() -> None:
    con = _con()
    f1 = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    pc = "smsp__pcsamp_warps_issue_stalled_{}"
    _kernel(con, 1, 0, "ratio kernel")
    _metrics(
        con,
        1,
        0,
        {
            f1.format("long_scoreboard"): 6.0,
            f1.format("barrier"): 3.0,
            f1.format("math_pipe_throttle"): 1.0,
            pc.format("long_scoreboard"): 999,  # a lower-priority family: ignored for this launch
        },
    )
    _kernel(con, 1, 1, "sampled kernel")
    _metrics(
        con,
        1,
        1,
        {
            pc.format("no_instructions"): 30,
            pc.format("no_instructions_not_issued"): 30,  # subset of the above: skipped
            pc.format("wait"): 10,
            "smsp__average_warp_latency_per_inst_issued.ratio": 8.0,
        },
    )
    rows = _run(con, "stalls", report_id=1)
    got = [(r["launch_id"], r["reason"], r["rank"], r["cycles_per_issue"], r["share_pct"]) for r in rows]
    assert got == [
        (0, "long_scoreboard", 1, 6.0, 60.0),
        (0, "barrier", 2, 3.0, 30.0),
        (0, "math_pipe_throttle", 3, 1.0, 10.0),
        (1, "no_instruction", 1, 6.0, 75.0),
        (1, "wait", 2, 2.0, 25.0),
    ]
    assert rows[0]["name"] == "ratio kernel"
    assert rows[3]["source"] == "smsp__pcsamp_warps_issue_stalled_*"
    assert [r["reason"] for r in _run(con, "stalls", top_n=1)] == ["long_scoreboard", "no_instruction"]
    assert _run(con, "stalls", report_id=2) == []


def test_stall_time_splits_nsys_time_by_ncu_shares() -> None:
    con = _con()
    nsys_name = "void at::native::k<(int)4, std::array<char *, (unsigned long)2>>(int)"
    insert(
        con,
        "kernels",
        [
            dict(report_id=1, name=n, start_ns=s, end_ns=e, duration_ns=e - s)
            for n, s, e in [(nsys_name, 0, 600), (nsys_name, 1000, 1400), ("void other(int)", 0, 50)]
        ],
    )
    f1 = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    # two ncu launches of the same kernel, weighted by their ncu durations (1 and 3)
    _kernel(con, 2, 0, "void k<4, array<char *, 2>>(int)")
    _metrics(con, 2, 0, {DUR: 1, f1.format("long_scoreboard"): 1.0, f1.format("wait"): 1.0})
    _kernel(con, 2, 1, "void k<4, array<char *, 2>>(int)")
    _metrics(con, 2, 1, {DUR: 3, f1.format("long_scoreboard"): 3.0, f1.format("wait"): 1.0})
    rows = _run(con, "stall_time")
    # long_scoreboard: (50% * 1 + 75% * 3) / 4 = 68.75% of 1000 ns; wait: 31.25%; rounded half up
    assert [(r["reason"], r["rank"], r["share_pct"], r["stall_ns"]) for r in rows] == [
        ("long_scoreboard", 1, 68.75, 688),
        ("wait", 2, 31.25, 313),
    ]
    assert (rows[0]["nsys_launches"], rows[0]["nsys_total_ns"], rows[0]["ncu_launches"]) == (2, 1000, 2)
    assert rows[0]["name"] == nsys_name
    assert _run(con, "stall_time", nsys_report_id=1, ncu_report_id=3) == []


def test_stall_time_weights_summary_rows_by_invocations() -> None:
    con = _con()
    insert(con, "kernels", [dict(report_id=1, name="k(int)", start_ns=0, end_ns=1000, duration_ns=1000)])
    f1 = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    # a --print-summary row standing for 3 launches of Average duration 1, and one plain launch of 1
    con.execute(
        "INSERT INTO ncu_kernels (report_id, launch_id, name, invocations) VALUES (2, 0, 'k(int)', 3)"
    )
    _metrics(con, 2, 0, {DUR: 1, f1.format("long_scoreboard"): 1.0, f1.format("wait"): 1.0})
    _kernel(con, 2, 1, "k(int)")
    _metrics(con, 2, 1, {DUR: 1, f1.format("long_scoreboard"): 3.0, f1.format("wait"): 1.0})
    rows = _run(con, "stall_time")
    # long_scoreboard: (50% * 3 + 75% * 1) / 4 = 56.25%, not the (50 + 75) / 2 of two launches
    assert [(r["reason"], r["share_pct"], r["stall_ns"], r["ncu_launches"]) for r in rows] == [
        ("long_scoreboard", 56.25, 563, 4),
        ("wait", 43.75, 438, 4),
    ]


# --- real exports ---------------------------------------------------------------------------------


def _real_con(files: dict[int, str]) -> duckdb.DuckDBPyConnection:
    con = _con()
    for rid, name in files.items():
        load_ncu(con, REAL / "ncu" / name, rid)
    return con


@needs_real
def test_real_h100_raw_page() -> None:
    con = _real_con({1: "h100_ncu2025.3_transformer_train_raw.csv"})
    # raw page, launch 0: smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
    # 36.46 is the largest of the 19 reasons (no_instruction 6.38 next)
    top = _run(con, "stalls", report_id=1, top_n=2)
    assert [(r["reason"], r["cycles_per_issue"]) for r in top[:2]] == [
        ("long_scoreboard", 36.46),
        ("no_instruction", 6.38),
    ]
    assert len({r["launch_id"] for r in top}) == 60
    # gpu__time_duration.sum 3,072 ns; sm__throughput 1.69 %; gpu__compute_memory_throughput 16.63 %
    sol = _run(con, "speed_of_light", report_id=1)[0]
    assert (sol["duration_ns"], sol["compute_pct"], sol["memory_pct"], sol["bound"]) == (
        3072,
        1.69,
        16.63,
        "latency",
    )
    # launch__occupancy_limit_registers 16, _warps 16, _shared_mem 32, _blocks 32;
    # sm__maximum_warps_per_active_cycle_pct 100, sm__warps_active...pct 10.83
    occ = _run(con, "occupancy", report_id=1)[0]
    assert (occ["theoretical_pct"], occ["achieved_pct"], occ["blocks_per_sm"], occ["limiter"]) == (
        100.0,
        10.83,
        16,
        "registers,warps",
    )


@needs_real
def test_real_b200_details_page() -> None:
    con = _real_con({4: "b200_ncu2025_full_with_rules_ragged.csv"})
    # "Duration","ns","406240"; "Compute (SM) Throughput","%","23.59"; SOL "Memory Throughput","%","21.68"
    sol = _run(con, "speed_of_light", report_id=4)
    assert [(r["duration_ns"], r["compute_pct"], r["memory_pct"], r["bound"]) for r in sol] == [
        (406240, 23.59, 21.68, "latency")
    ]
    # "Theoretical Occupancy" 18.75, "Achieved Occupancy" 15.53; Block Limit Registers 1,
    # Shared Mem 1, Warps 5, SM 32, Barriers 9
    occ = _run(con, "occupancy", report_id=4)[0]
    assert (occ["theoretical_pct"], occ["achieved_pct"]) == (18.75, 15.53)
    assert (occ["limit_registers"], occ["limit_shared_memory"], occ["limit_warps"], occ["limit_blocks"]) == (
        1,
        1,
        5,
        32,
    )
    assert (occ["limit_barriers"], occ["blocks_per_sm"], occ["limiter"]) == (9, 1, "registers,shared_memory")
    # the details page of --set full carries no per-reason stall metrics
    assert _run(con, "stalls", report_id=4) == []


@needs_real
def test_real_h100_labels_file_gives_same_answers_as_names_file() -> None:
    con = _real_con(
        {1: "h100_ncu2025.3_details_base_units.csv", 2: "h100_ncu2025.3_details_metric_names.csv"}
    )
    a, b = (_run(con, "occupancy", report_id=r) for r in (1, 2))
    assert [r["limiter"] for r in a] == [r["limiter"] for r in b] and a[0]["limiter"] is not None
    sol = _run(con, "speed_of_light", report_id=1)
    assert sol[0]["duration_ns"] == 13728  # "Duration","ns","13,728"


@pytest.mark.one_python  # a heavy sweep of real captures; lighter cases cover its code on every Python
@needs_real
def test_real_transformer_pair_stall_time() -> None:
    con = _real_con({2: "h100_ncu2025.3_transformer_train_raw.csv"})
    db = sqlite3.connect(REAL / "nsys" / "h100_nsys2025.3_transformer_train.sqlite")
    rows = db.execute(
        "SELECT s.value, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
        "JOIN StringIds AS s ON s.id = k.demangledName"
    ).fetchall()
    pd.DataFrame(rows, columns=["name", "start_ns", "end_ns"]).assign(
        duration_ns=lambda d: d.end_ns - d.start_ns
    )
    insert(
        con,
        "kernels",
        [
            dict(report_id=1, name=n, start_ns=int(s), end_ns=int(e), duration_ns=int(e - s))
            for n, s, e in rows
        ],
    )
    # all 7 distinct ncu kernel names find their nsys kernel
    matched = con.execute(
        "SELECT count(DISTINCT name) FROM ncu_kernels WHERE nsa_kernel_key(name) IN "
        "(SELECT nsa_kernel_key(name) FROM kernels)"
    ).fetchone()[0]
    assert matched == 7
    result = _run(con, "stall_time", nsys_report_id=1, ncu_report_id=2)
    per_kernel: dict[str, list[dict[str, object]]] = {}
    for r in result:
        per_kernel.setdefault(r["kernel_key"], []).append(r)
    assert len(per_kernel) == 7
    for reasons in per_kernel.values():
        assert sum(r["share_pct"] for r in reasons) == pytest.approx(100.0)
        assert sum(r["stall_ns"] for r in reasons) == pytest.approx(
            reasons[0]["nsys_total_ns"], abs=len(reasons)
        )
    # sqlite3 on the nsys file: the AUnaryFunctor<..MulFunctor> kernel ran 1200 times for 2,490,591 ns
    aunary = next(v for k, v in per_kernel.items() if "AUnaryFunctor" in k)
    assert (aunary[0]["nsys_launches"], aunary[0]["nsys_total_ns"]) == (1200, 2490591)
    assert aunary[0]["reason"] == "long_scoreboard" and aunary[0]["rank"] == 1


DATA = ROOT / "tests" / "data" / "ncu"


def test_repo_summary_captures_read_by_the_queries() -> None:
    con = _con()
    load_ncu(con, DATA / "h100_ncu2025.3_summary_per_kernel.csv", 1)
    load_ncu(con, DATA / "h100_ncu2025.3_summary_per_gpu.csv", 2)
    # per-kernel: "Duration","ns" Averages "17,664.00", "4,064.00", "3,061.33"; Compute (SM)
    # Throughput "0.06", "21.39", "0.54"; Memory Throughput "2.11", "8.56", "12.16"; Invocations 1, 1, 3
    sol = _run(con, "speed_of_light", report_id=1)
    assert [
        (r["launch_id"], r["duration_ns"], r["compute_pct"], r["memory_pct"], r["invocations"]) for r in sol
    ] == [
        (0, 17664, 0.06, 2.11, 1),
        (1, 4064, 21.39, 8.56, 1),
        (2, 3061, 0.54, 12.16, 3),
    ]
    assert {r["bound"] for r in sol} == {"latency"}
    # per-gpu, auto units: "Duration","us" Averages "17.06", "4.06", "3.01"
    assert [r["duration_ns"] for r in _run(con, "speed_of_light", report_id=2)] == [17060, 4060, 3010]
    # SOL section only: no occupancy or stall metrics, yet every kernel is listed
    occ = _run(con, "occupancy", report_id=1)
    assert len(occ) == 3 and all(r["limiter"] is None for r in occ)
    assert _run(con, "stalls") == []


def test_repo_multi_process_capture_per_process() -> None:
    con = _con()
    load_ncu(con, DATA / "h100_ncu2025.3_multi_process.csv", 1)
    sol = _run(con, "speed_of_light", report_id=1)
    # 15 IDs; "Duration","ns": ID 4 (pid 621) "17,536", ID 9 (pid 699) "18,080", ID 14 (pid 773) "17,952"
    assert len(sol) == 15 and all(r["invocations"] is None for r in sol)
    assert [sol[i]["duration_ns"] for i in (4, 9, 14)] == [17536, 18080, 17952]
