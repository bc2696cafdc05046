"""GPU metrics sampling (table gpu_metrics): canonical names across GPUs and nsys versions, the
gpu_metrics_* queries against plain SQL on the real H100 exports, and the four rules that read
them, on rule cases and on the foreach / fused AdamW training pair."""

from __future__ import annotations

import bisect
import gzip
import itertools
import shutil
import sqlite3
import statistics
from pathlib import Path

import pytest
from rules.build_gpu_metrics import GPU_RULES

import nsight_analytics as nsa
from conftest import realdata
from fixtures.nsys_fixtures import T0, ExportBuilder, add_gpu_metrics
from nsight_analytics.api import materialise
from nsight_analytics.ingest.nsys.nsys_gpu_metrics import canonical

MS = 1_000_000
TRAIN = {
    "foreach": "h100_nsys2025.3_train_foreach_gpumetrics.sqlite",
    "fused": "h100_nsys2025.3_train_fused_gpumetrics.sqlite",
}


# --- canonical names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "metric", "unit"),
    [
        # nsys 2025.3 on H100 (the real captures)
        ("SMs Active [Throughput %]", "sm_active", "%"),
        ("SM Issue [Throughput %]", "sm_issue", "%"),
        ("Tensor Active [Throughput %]", "tensor_active", "%"),
        ("Compute Warps in Flight [Throughput %]", "warps_in_flight", "%"),
        ("Compute Warps in Flight [Avg Warps per Cycle]", "warps_in_flight_per_cycle", "warp"),
        ("Unallocated Warps in Active SMs [Throughput %]", "unallocated_warps", "%"),
        ("DRAM Read Bandwidth [Throughput %]", "dram_read", "%"),
        ("DRAM Write Bandwidth [Throughput %]", "dram_write", "%"),
        ("PCIe RX Throughput [Throughput %]", "pcie_rx", "%"),
        ("PCIe TX Throughput [Throughput %]", "pcie_tx", "%"),
        ("GPC Clock Frequency [MHz]", "gpc_clock", "hz"),
        ("GR Active [Throughput %]", "gr_active", "%"),
        # Ampere desktop GPUs name one SM 'SM Active'
        ("SM Active [Throughput %]", "sm_active", "%"),
        # nsys 2021-2022: no bracketed unit; Turing's tensor pipe shares FP16
        ("SM Active", "sm_active", "%"),
        ("Tensor Active / FP16 Active", "tensor_active", "%"),
        ("DRAM Read Throughput", "dram_read", "%"),
        ("Compute Warps In Flight", "warps_in_flight", "%"),
        ("GPC Clock Frequency", "gpc_clock", "hz"),
        # A100 / H100 NVLink components
        ("NVLink RX Responses User Data [Throughput %]", "nvlink_rx_responses_user", "%"),
        ("NVLink TX Requests Protocol Data", "nvlink_tx_requests_protocol", "%"),
        # a byte rate, should a version state one
        ("PCIe RX Throughput [GB/s]", "pcie_rx_bytes", "byte/s"),
        # no canonical name: kept, queryable, under its own
        ("Pixel Warps in Flight [Avg]", "pixel_warps_in_flight_avg", "Avg"),
        ("PCIe Read Requests to BAR1 [Requests]", "pcie_read_requests_to_bar1_requests", "Requests"),
    ],
)
def test_canonical_names(raw: str, metric: str, unit: str) -> None:
    m = canonical(raw)
    assert (m.metric, m.unit) == (metric, unit)
    assert m.known == (unit not in ("Avg", "Requests"))


def test_a_gb_per_s_name_is_scaled_to_bytes() -> None:
    assert canonical("PCIe RX Throughput [GB/s]").scale == 1e9


# --- ingest of a code-built export with other name variants --------------------------------


def _two_gpu_export(path: Path) -> dict[tuple[int, str], list[tuple[int, int]]]:
    """Two H100s, a kernel on each, and GPU metrics under 2021-style and 2025-style names."""
    b = ExportBuilder()
    gtid = b.process(4242, "python3")
    b.gpu(0)
    b.gpu(1)
    for dev in (0, 1):
        b.launch_kernel(T0, T0 + 10_000, 5 * MS, "sgemm", gtid=gtid, device=dev)
    b.write(path)
    ts = [T0 + i * MS for i in range(6)]
    series = {
        (0, "SM Active"): [(t, 10 * i) for i, t in enumerate(ts)],
        (0, "Tensor Active / FP16 Active"): [(t, 3) for t in ts],
        (0, "DRAM Read Throughput"): [(t, 40) for t in ts],
        (0, "GPC Clock Frequency"): [(t, 1410) for t in ts],  # MHz, as some versions write it
        (1, "SMs Active [Throughput %]"): [(t, 90) for t in ts],
        (1, "GPC Clock Frequency [MHz]"): [(t, 1_980_000_000) for t in ts],  # hertz under [MHz]
        (1, "NVLink RX Requests User Data [Throughput %]"): [(t, 20) for t in ts],
        (1, "NVLink RX Responses User Data [Throughput %]"): [(t, 30) for t in ts],
        (1, "Pixel Warps in Flight [Avg]"): [(t, 0) for t in ts],
    }
    add_gpu_metrics(path, series)
    return series


def test_ingest_maps_names_devices_and_units(tmp_path: Path, workspace) -> None:
    path = tmp_path / "two_gpus.sqlite"
    series = _two_gpu_export(path)
    rep = nsa.ingest(workspace, path)
    deferred = workspace.sql(
        f"SELECT deferred_steps FROM reports WHERE report_id = {rep.report_id}"
    ).fetchone()
    assert "gpu_metrics" in deferred[0]  # copied on first use
    assert materialise(workspace, ["gpu_metrics"]) == 1
    assert (
        "gpu_metrics"
        in workspace.sql(f"SELECT activity_kinds FROM reports WHERE report_id = {rep.report_id}").fetchone()[
            0
        ]
    )
    got = {
        (d, m): (raw, unit, n, lo, hi, p)
        for d, m, raw, unit, n, lo, hi, p in workspace.sql(
            "SELECT device_id, metric, any_value(raw_name), any_value(unit), count(*), min(value), max(value), "
            "max(period_ns) FROM gpu_metrics GROUP BY ALL"
        ).fetchall()
    }
    assert got[(0, "sm_active")] == ("SM Active", "%", 6, 0.0, 50.0, MS)
    assert got[(0, "tensor_active")][:3] == ("Tensor Active / FP16 Active", "%", 6)
    assert got[(0, "gpc_clock")][3:5] == (1410e6, 1410e6)  # MHz values become hertz
    assert got[(1, "gpc_clock")][3:5] == (1.98e9, 1.98e9)  # hertz stay hertz
    assert got[(1, "sm_active")][:3] == ("SMs Active [Throughput %]", "%", 6)
    # the bandwidth in bytes/s from the percentage and TARGET_INFO_GPU.memoryBandwidth
    assert got[(0, "dram_read_bytes")][4] == pytest.approx(0.40 * 3352320000000)
    # NVLink RX of its components, sample by sample
    assert got[(1, "nvlink_rx")][2:5] == (6, 50.0, 50.0)
    assert got[(1, "pixel_warps_in_flight_avg")][1] == "Avg"
    raw_rows = sum(len(v) for v in series.values())
    assert (
        workspace.sql(
            "SELECT count(*) FROM gpu_metrics WHERE metric NOT IN ('dram_read_bytes', 'nvlink_rx')"
        ).fetchone()[0]
        == raw_rows
    )


def test_export_without_gpu_metrics_has_none(tmp_path: Path, workspace) -> None:
    b = ExportBuilder()
    gtid = b.process(4242, "python3")
    b.gpu(0)
    b.launch_kernel(T0, T0 + 10_000, 5 * MS, "sgemm", gtid=gtid)
    b.write(tmp_path / "plain.sqlite")
    rep = nsa.ingest(workspace, tmp_path / "plain.sqlite")
    kinds = workspace.sql(f"SELECT activity_kinds FROM reports WHERE report_id = {rep.report_id}").fetchone()[
        0
    ]
    assert "gpu_metrics" not in kinds
    assert nsa.query(workspace, "gpu_metrics_summary").fetchall() == []


# --- rule cases ----------------------------------------------------------------------------


# The cases themselves (tests/rules/<rule>.py) run with every rule case in tests/test_rules_cases.py.


# --- the real training pair: numbers against plain SQL on the exports ----------------------


def _metric(db: sqlite3.Connection, name: str) -> list[tuple[int, int, int]]:
    """(start, period, value) of every sample of one raw metric; a sample lasts until the next."""
    rows = db.execute(
        "SELECT g.timestamp, g.value FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS n "
        "ON n.typeId = g.typeId AND n.metricId = g.metricId WHERE n.metricName = ? ORDER BY g.timestamp",
        (name,),
    ).fetchall()
    ts = [t for t, _ in rows]
    periods = [b - a for a, b in itertools.pairwise(ts)]
    periods.append(periods[-1])
    return [(t, p, v) for (t, v), p in zip(rows, periods, strict=True)]


def _weighted(samples: list[tuple[int, int, int]], windows: list[tuple[int, int]]) -> float:
    """Mean of the samples weighted by their overlap with the windows (samples sorted by start)."""
    starts = [t for t, _, _ in samples]
    num = den = 0.0
    for s, e in windows:
        for t, p, v in samples[max(0, bisect.bisect_right(starts, s) - 1) : bisect.bisect_left(starts, e)]:
            w = min(t + p, e) - max(t, s)
            if w > 0:
                num, den = num + v * w, den + w
    return num / den


def _steady(db: sqlite3.Connection) -> tuple[int, int]:
    """The steady state as schema `steps` defines it: from the first NVTX `step N` no longer than
    1.5x the median step to the end of the last step or of the last GPU work, whichever is later."""
    steps = db.execute(
        'SELECT start, "end" FROM NVTX_EVENTS WHERE text GLOB \'step [0-9]*\' AND "end" IS NOT NULL ORDER BY start'
    ).fetchall()
    median = statistics.median(e - s for s, e in steps)
    start = next(s for s, e in steps if e - s <= 1.5 * median)
    gpu_end = max(
        db.execute(f'SELECT max("end") FROM {t}').fetchone()[0]
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
    )
    return start, max(max(e for _, e in steps), gpu_end)


def _projected(db: sqlite3.Connection, name: str, after: int) -> list[tuple[int, int]]:
    """GPU windows of the NVTX ranges `name`: first start to last end of the GPU work launched by
    CUDA API calls of the range's process that started inside it; those starting after `after`."""
    rows = db.execute(
        """
        WITH gpu AS (
            SELECT start, "end", correlationId, globalPid / 16777216 % 16777216 AS pid FROM CUPTI_ACTIVITY_KIND_KERNEL
            UNION ALL SELECT start, "end", correlationId, globalPid / 16777216 % 16777216 FROM CUPTI_ACTIVITY_KIND_MEMCPY
            UNION ALL SELECT start, "end", correlationId, globalPid / 16777216 % 16777216 FROM CUPTI_ACTIVITY_KIND_MEMSET
        )
        SELECT e.rowid, min(g.start), max(g."end")
        FROM NVTX_EVENTS e
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid / 16777216 % 16777216 = e.globalTid / 16777216 % 16777216
             AND r.start BETWEEN e.start AND e."end"
        JOIN gpu g ON g.correlationId = r.correlationId AND g.pid = r.globalTid / 16777216 % 16777216
        WHERE e.text = ? AND e.eventType IN (59, 60) AND e."end" IS NOT NULL
        GROUP BY e.rowid
        """,
        (name,),
    ).fetchall()
    return [(s, e) for _, s, e in rows if s >= after]


@pytest.fixture(scope="module")
def train(real_sqlite, tmp_path_factory):
    """(connection, {label: report_id}, {label: sqlite3 connection}) for the training pair."""
    paths = {label: real_sqlite(name) for label, name in TRAIN.items()}  # skips without ../shared
    con = nsa.connect(tmp_path_factory.mktemp("gpu_metrics") / "w.duckdb")
    # ingested as users keep them, gzip-compressed
    ids = {label: nsa.ingest(con, realdata("nsys", name + ".gz")).report_id for label, name in TRAIN.items()}
    materialise(con, ["gpu_metrics"])
    dbs = {label: sqlite3.connect(paths[label]) for label in TRAIN}
    yield con, ids, dbs
    for db in dbs.values():
        db.close()
    con.close()


@pytest.mark.parametrize("label", TRAIN)
def test_every_sample_is_ingested(train, label: str) -> None:
    con, ids, dbs = train
    expected = dict(
        dbs[label]
        .execute(
            "SELECT n.metricName, count(*) FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS n "
            "ON n.typeId = g.typeId AND n.metricId = g.metricId GROUP BY 1"
        )
        .fetchall()
    )
    got = dict(
        con.sql(
            f"SELECT raw_name, count(*) FROM gpu_metrics WHERE report_id = {ids[label]} "
            "AND unit <> 'byte/s' GROUP BY 1"
        ).fetchall()
    )
    assert got == expected
    assert len(expected) == 22


@pytest.mark.parametrize("label", TRAIN)
@pytest.mark.parametrize(
    ("metric", "raw"),
    [
        ("sm_active", "SMs Active [Throughput %]"),
        ("sm_issue", "SM Issue [Throughput %]"),
        ("tensor_active", "Tensor Active [Throughput %]"),
        ("dram_read", "DRAM Read Bandwidth [Throughput %]"),
        ("warps_in_flight", "Compute Warps in Flight [Throughput %]"),
    ],
)
def test_steady_state_averages_match_plain_sql(train, label: str, metric: str, raw: str) -> None:
    con, ids, dbs = train
    db = dbs[label]
    start, end = _steady(db)
    samples = _metric(db, raw)
    (row,) = [
        r
        for r in nsa.query(con, "gpu_metrics_summary", report_id=ids[label], scope="steady").fetchall()
        if r[2] == metric
    ]
    _, device, _, unit, scope, s, e, n, average, peak = row
    assert (device, unit, scope, s, e) == (0, "%", "steady", start, end)
    assert n == sum(1 for t, p, _ in samples if t < end and t + p > start)
    assert average == pytest.approx(_weighted(samples, [(start, end)]), rel=1e-9)
    assert peak == max(v for t, p, v in samples if t < end and t + p > start)


def test_dram_bytes_per_second_use_the_gpus_peak(train) -> None:
    con, ids, dbs = train
    peak = dbs["foreach"].execute("SELECT memoryBandwidth FROM TARGET_INFO_GPU").fetchone()[0]
    rows = {
        r[2]: r[8]
        for r in nsa.query(con, "gpu_metrics_summary", report_id=ids["foreach"], scope="steady").fetchall()
    }
    assert rows["dram_read_bytes"] == pytest.approx(rows["dram_read"] / 100 * peak, rel=1e-9)


@pytest.mark.parametrize("label", TRAIN)
def test_optimizer_range_matches_plain_sql(train, label: str) -> None:
    con, ids, dbs = train
    db = dbs[label]
    start, _ = _steady(db)
    windows = _projected(db, "optimizer", start)
    rows = {
        r[4]: r
        for r in nsa.query(
            con,
            "gpu_metrics_by_range",
            report_id=ids[label],
            metrics="sm_issue,tensor_active",
            phase="steady",
        ).fetchall()
        if r[2] == "nvtx" and r[3] == "optimizer"
    }
    for metric, raw in (
        ("sm_issue", "SM Issue [Throughput %]"),
        ("tensor_active", "Tensor Active [Throughput %]"),
    ):
        _, _, _, _, _, _, ranges, gpu_ns, s, e, average, _ = rows[metric]
        assert ranges == len(windows) == 24
        assert gpu_ns == sum(e_ - s_ for s_, e_ in windows)
        assert (s, e) == (min(w[0] for w in windows), max(w[1] for w in windows))
        assert average == pytest.approx(_weighted(_metric(db, raw), windows), rel=1e-9)


def test_the_fused_optimizer_story(train) -> None:
    """Why the fused AdamW is faster, from nsa alone: the foreach optimizer keeps the GPU for
    ~4.9 ms a step at 3% SM issue (thousands of tiny kernels); the fused one takes ~0.14 ms at
    over 30%; both runs do their GEMMs in FP32 with the tensor cores idle."""
    con, ids, dbs = train

    def optimizer(label: str) -> dict[str, tuple[int, float]]:
        return {
            r[4]: (r[7], r[10])
            for r in nsa.query(
                con,
                "gpu_metrics_by_range",
                report_id=ids[label],
                metrics="sm_issue,gr_active",
                phase="steady",
            ).fetchall()
            if r[3] == "optimizer"
        }

    foreach, fused = optimizer("foreach"), optimizer("fused")
    assert foreach["sm_issue"][0] > 20 * fused["sm_issue"][0]  # GPU time of the optimizer
    assert foreach["sm_issue"][1] < 5
    assert fused["sm_issue"][1] > 20
    found = nsa.findings(con, only=list(GPU_RULES))
    by = {(f.report_id, f.rule_id): f for f in found}
    low = by[(ids["foreach"], "low-issue-while-busy")]
    assert low.evidence["range"] == "optimizer" and low.evidence["cause"] == "parallelism"
    assert low.evidence["sm_issue_pct"] == pytest.approx(foreach["sm_issue"][1])
    assert low.evidence["gpu_ns"] == foreach["sm_issue"][0]
    assert (ids["fused"], "low-issue-while-busy") not in by
    for label in TRAIN:
        tensor = by[(ids[label], "tensor-cores-idle")]
        assert tensor.evidence["gemm_share"] > 0.5 and tensor.evidence["gemm_tensor_active_pct"] < 5
        # by nsa_kernel_math: FP32 GEMMs and attention; cuBLASLt's splitK reduce states no math
        precision = tensor.evidence["gemm_ns_by_precision"]
        assert set(precision) <= {"fp32", "unknown"} and max(precision, key=precision.get) == "fp32"
        assert tensor.same_saving_as == "fp32-matmul"  # one fix with the finding from kernel names
        assert "TF32" in tensor.recommendation
        # silent for a stated reason: DRAM and PCIe never come near their limits (plain SQL)
        db = dbs[label]
        dram = max(
            a[2] + b[2]
            for a, b in zip(
                _metric(db, "DRAM Read Bandwidth [Throughput %]"),
                _metric(db, "DRAM Write Bandwidth [Throughput %]"),
                strict=True,
            )
        )
        pcie = max(
            v
            for name in ("PCIe RX Throughput [Throughput %]", "PCIe TX Throughput [Throughput %]")
            for _, _, v in _metric(db, name)
        )
        assert dram < 80 and pcie < 70
        assert (ids[label], "dram-saturated") not in by and (ids[label], "pcie-saturated") not in by


# --- our own capture: one phase at each limit (tests/data, no ../shared needed) -------------

SATURATION = Path(__file__).parent / "data" / "h100_nsys2025.3_saturation_gpumetrics.sqlite.gz"


@pytest.fixture(scope="module")
def saturation(tmp_path_factory):
    """(connection, report id, sqlite3 connection) for fixtures/captures/gpu_metrics_saturation.py."""
    plain = tmp_path_factory.mktemp("saturation") / "sat.sqlite"
    with gzip.open(SATURATION) as src, plain.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    con = nsa.connect(plain.parent / "w.duckdb")
    rid = nsa.ingest(con, SATURATION).report_id
    materialise(con, ["gpu_metrics"])
    db = sqlite3.connect(plain)
    yield con, rid, db
    db.close()
    con.close()


def _buckets_at(
    samples: list[tuple[int, int, int]], t0: int, bucket: int, span: tuple[int, int], limit: float
) -> int:
    """Time of the buckets (from t0, `bucket` long, starting inside `span`) whose samples, each
    weighted by its length and placed by its start, average at least `limit`."""
    sums: dict[int, list[float]] = {}
    for t, p, v in samples:
        bs = t0 + (t - t0) // bucket * bucket
        slot = sums.setdefault(bs, [0.0, 0.0])
        slot[0], slot[1] = slot[0] + v * p, slot[1] + p
    return sum(
        min(bs + bucket, span[1]) - bs
        for bs, (num, den) in sums.items()
        if span[0] <= bs < span[1] and num / den >= limit
    )


@pytest.mark.parametrize(
    ("phase", "raw", "metric"),
    [
        ("h2d", "PCIe RX Throughput [Throughput %]", "pcie_rx"),
        ("dram", "DRAM Read Bandwidth [Throughput %]", "dram_read"),
        ("matmul", "Tensor Active [Throughput %]", "tensor_active"),
        ("tiny", "SM Issue [Throughput %]", "sm_issue"),
        ("tiny", "GR Active [Throughput %]", "gr_active"),
    ],
)
def test_saturation_phases_match_plain_sql(saturation, phase: str, raw: str, metric: str) -> None:
    con, rid, db = saturation
    windows = _projected(db, phase, _steady(db)[0])
    (row,) = [
        r
        for r in nsa.query(con, "gpu_metrics_by_range", report_id=rid, metrics=metric).fetchall()
        if r[2] == "nvtx" and r[3] == phase
    ]
    assert row[6] == len(windows) == 8
    assert row[7] == sum(e - s for s, e in windows)
    assert row[10] == pytest.approx(_weighted(_metric(db, raw), windows), rel=1e-9)


def test_each_limit_is_found_where_it_was_reached(saturation) -> None:
    """PCIe at 91% during `h2d`, DRAM at 90% during `dram`, tensor cores at 93% during `matmul`
    (so tensor-cores-idle stays silent, and low-issue-while-busy too: few instructions feed a
    busy tensor core), and the 3,000 one-block kernels of `tiny`: busy, 1% issue."""
    con, rid, db = saturation
    start, end = _steady(db)
    found = {}
    for f in nsa.findings(con, report_id=rid, only=list(GPU_RULES)):
        found.setdefault(f.rule_id, []).append(f)
    assert set(found) == {"pcie-saturated", "dram-saturated", "low-issue-while-busy"}
    (pcie,) = found["pcie-saturated"]
    samples = _metric(db, "PCIe RX Throughput [Throughput %]")
    # the timeline's buckets start at the first PCIe sample
    t0 = min(t for name in ("RX", "TX") for t, _, _ in _metric(db, f"PCIe {name} Throughput [Throughput %]"))
    assert pcie.evidence["link"] == "pcie_rx"
    assert pcie.evidence["saturated_ns"] == _buckets_at(samples, t0, 2 * MS, (start, end), 70.0)
    assert pcie.evidence["observed_ns"] == _buckets_at(samples, t0, 2 * MS, (start, end), float("-inf"))
    assert [r["name"] for r in pcie.evidence["ranges"]] == ["h2d"]
    (dram,) = found["dram-saturated"]
    assert [r["name"] for r in dram.evidence["ranges"]] == ["dram"]
    assert dram.evidence["ranges"][0]["dram_pct"] == pytest.approx(
        sum(
            _weighted(_metric(db, f"DRAM {d} Bandwidth [Throughput %]"), _projected(db, "dram", start))
            for d in ("Read", "Write")
        ),
        rel=1e-9,
    )
    (low,) = found["low-issue-while-busy"]
    assert low.evidence["range"] == "tiny" and low.evidence["cause"] == "parallelism"
    matmul = _weighted(_metric(db, "Tensor Active [Throughput %]"), _projected(db, "matmul", start))
    assert matmul > 90


@pytest.mark.parametrize("label", TRAIN)
def test_kernel_metrics_match_plain_sql(train, label: str) -> None:
    """gpu_metrics_by_kernel for the most frequent kernel name against Python over the export:
    the samples each kernel of the name overlaps, weighted by the overlap (the query meets kernels
    and samples in time buckets; this walks every kernel's samples)."""
    con, ids, dbs = train
    db = dbs[label]
    kernels = "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"
    (name,) = db.execute(
        f"SELECT s.value FROM {kernels} GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
    ).fetchone()
    windows = db.execute(
        f'SELECT k.start, k."end" FROM {kernels} WHERE s.value = ? AND k."end" >= k.start', (name,)
    )
    windows = windows.fetchall()
    rows = {
        r[3]: r
        for r in nsa.query(
            con, "gpu_metrics_by_kernel", report_id=ids[label], metrics="sm_issue, tensor_active"
        ).fetchall()
        if r[2] == name
    }
    assert set(rows) == {"sm_issue", "tensor_active"}
    for metric, raw in (
        ("sm_issue", "SM Issue [Throughput %]"),
        ("tensor_active", "Tensor Active [Throughput %]"),
    ):
        samples = _metric(db, raw)
        starts = [t for t, _, _ in samples]
        touched = [
            (v, min(t + p, e) - max(t, s))
            for s, e in windows
            for t, p, v in samples[max(0, bisect.bisect_right(starts, s) - 1) : bisect.bisect_left(starts, e)]
            if t < e and t + p > s
        ]
        _, device, _, _, unit, n, kernel_ns, sampled_ns, _, average, peak = rows[metric]
        assert (device, unit, n, kernel_ns) == (0, "%", len(windows), sum(e - s for s, e in windows))
        assert len(windows) > 1000 and len(touched) >= len(windows)
        assert sampled_ns == sum(w for _, w in touched)
        assert average == pytest.approx(_weighted(samples, windows), rel=1e-9)
        assert peak == max(v for v, _ in touched)
