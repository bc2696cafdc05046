"""nsys GPU metrics sampling (`--gpu-metrics-devices`) -> the canonical `gpu_metrics` table.

nsys writes one row per sample and metric (`GPU_METRICS`) and names the metrics per GPU
(`TARGET_INFO_GPU_METRICS`): the names change with the architecture and the nsys version
('SM Active' in 2021, 'SMs Active [Throughput %]' on Hopper in 2025, 'Tensor Active / FP16
Active' on Turing, 'DRAM Read Throughput' before 'DRAM Read Bandwidth'). Queries and rules read
stable canonical names (`CANONICAL`); the raw name stays beside each value.

Facts this module relies on, checked on the H100 captures of ../shared/realdata:
- a sample describes the interval from its timestamp to the next sample's: SM Active correlates
  at 0.998 with the kernel-busy share of [t, t + period) against 0.96 for [t - period, t);
- the device is the low byte of `typeId` (TARGET_INFO_GPU.id, whose `cuDevice` is the CUDA id);
- '[MHz]' clocks hold hertz (1,980,000,000 for an H100 boosting at 1980 MHz); a value below
  100,000 is read as MHz (no clock runs below 100 kHz, none above 100 GHz);
- all metrics of a GPU are sampled at the same times, so a sample lasts until the GPU's next one;
- percentages are of the unit's peak over the sample ('pct_of_peak_sustained_elapsed').
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from ... import params

if TYPE_CHECKING:
    from .nsys import Source

SAMPLES = "GPU_METRICS"
NAMES = "TARGET_INFO_GPU_METRICS"
GPU = "TARGET_INFO_GPU"
MAP = "_nsa_gpu_metric_map"

# A '[MHz]' clock whose samples all stay below this holds MHz; otherwise hertz.
MHZ_BELOW = 100_000
# The bracketed unit of a raw name: 'SM Issue [Throughput %]' -> ('SM Issue', 'Throughput %').
_NAME = re.compile(r"^\s*(?P<base>.*?)\s*(?:\[(?P<unit>[^\]]*)\])?\s*$")
# Byte-rate units a raw name may carry, to bytes per second.
_RATES = {"b/s": 1.0, "bytes/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12}


@dataclass(frozen=True)
class Canonical:
    """One canonical metric: the names it is written under (a regex over the name without its
    bracketed unit, case-insensitive) and what it means."""

    metric: str
    pattern: str
    unit: str
    doc: str


# Percentages of the unit's peak over the sample, as nsys computes them; one canonical name for
# every spelling seen across architectures and nsys versions.
CANONICAL: tuple[Canonical, ...] = (
    Canonical("gpc_clock", r"gpc clock( frequency)?", "hz", "GPC (SM) clock."),
    Canonical("sys_clock", r"sys clock( frequency)?", "hz", "SYS clock (front end, copy engines)."),
    Canonical("gr_active", r"gr(aphics)? active", "%", "Cycles the graphics/compute engine had work."),
    Canonical(
        "sm_active", r"sms? active", "%", "Cycles SMs had at least one warp resident, averaged over SMs."
    ),
    Canonical("sm_issue", r"sm issue( active)?", "%", "Cycles SM sub-partitions issued an instruction."),
    Canonical(
        "tensor_active",
        r"tensor( pipe)? active( / fp16 active)?",
        "%",
        "Cycles the tensor cores (Turing: tensor or FP16 pipe) were busy.",
    ),
    Canonical(
        "warps_in_flight",
        r"compute warps in flight",
        "%",
        "Compute warps resident, as a share of the warp slots of all SMs (achieved occupancy).",
    ),
    Canonical(
        "unallocated_warps",
        r"unallocated warps in active sms",
        "%",
        "Warp slots left free on SMs that had work: occupancy head-room.",
    ),
    Canonical("dram_read", r"dram read (bandwidth|throughput)", "%", "DRAM read bandwidth, % of peak."),
    Canonical("dram_write", r"dram write (bandwidth|throughput)", "%", "DRAM write bandwidth, % of peak."),
    Canonical("pcie_rx", r"pcie rx( throughput)?", "%", "PCIe traffic into the GPU, % of the link's peak."),
    Canonical("pcie_tx", r"pcie tx( throughput)?", "%", "PCIe traffic out of the GPU, % of the link's peak."),
    Canonical("nvlink_rx", r"nvlink rx( throughput)?", "%", "NVLink traffic into the GPU, % of peak."),
    Canonical("nvlink_tx", r"nvlink tx( throughput)?", "%", "NVLink traffic out of the GPU, % of peak."),
    *(
        Canonical(
            f"nvlink_{d}_{kind}_{data}",
            rf"nvlink {d} {kind} {data} data",
            "%",
            f"NVLink {d.upper()} {kind}, {data} data, % of peak.",
        )
        for d in ("rx", "tx")
        for kind in ("requests", "responses")
        for data in ("user", "protocol")
    ),
)
# Derived at ingest: bandwidth in bytes/s from the percentage and the GPU's peak
# (TARGET_INFO_GPU.memoryBandwidth); NVLink per direction as the sum of its components when nsys
# gives only those.
BYTE_RATES = {"dram_read": "dram_read_bytes", "dram_write": "dram_write_bytes"}
NVLINK_PARTS = {
    d: tuple(c.metric for c in CANONICAL if c.metric.startswith(f"nvlink_{d}_")) for d in ("rx", "tx")
}
# Percent-like units as nsys brackets them; no bracket (nsys 2021-2022) is a percentage too.
_PERCENT_UNITS = {"", "throughput %", "%", "percent"}
# Per-cycle warp counts: '[Avg Warps per Cycle]'.
_WARP_RATES = {
    "warps_in_flight": "warps_in_flight_per_cycle",
    "unallocated_warps": "unallocated_warps_per_cycle",
}


@dataclass(frozen=True)
class Mapped:
    """What a raw metric name becomes: canonical name, unit, and the factor to that unit
    (`auto_mhz`: a clock whose factor depends on its values)."""

    metric: str
    unit: str
    scale: float
    known: bool
    auto_mhz: bool = False


def slug(text: str) -> str:
    """'Pixel Warps in Flight [Avg]' -> 'pixel_warps_in_flight_avg': the name of a metric nsa
    has no canonical name for, so it is still queryable."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "unnamed"


def canonical(raw_name: str) -> Mapped:
    """The canonical name, unit and scale of one raw nsys metric name."""
    m = _NAME.match(raw_name)
    base = (m.group("base") if m else raw_name).strip()
    unit = ((m.group("unit") if m else None) or "").strip()
    for c in CANONICAL:
        if not re.fullmatch(c.pattern, base, flags=re.IGNORECASE):
            continue
        u = unit.lower()
        if c.unit == "hz" and u in ("", "hz", "mhz"):
            return Mapped(c.metric, "hz", 1.0, True, auto_mhz=u != "hz")
        if c.unit == "%" and u in _PERCENT_UNITS:
            return Mapped(c.metric, "%", 1.0, True)
        if u == "avg warps per cycle" and c.metric in _WARP_RATES:
            return Mapped(_WARP_RATES[c.metric], "warp", 1.0, True)
        if u.replace(" ", "") in _RATES:
            return Mapped(f"{c.metric}_bytes", "byte/s", _RATES[u.replace(" ", "")], True)
        break  # a known metric in a unit nsa does not convert: kept under its own name
    return Mapped(slug(raw_name), "%" if unit.lower() in _PERCENT_UNITS - {""} else unit, 1.0, False)


def source_sql(src: Source) -> str | None:
    """The export's raw samples, or None when it has no GPU metrics (the loader's presence test)."""
    if not (src.has(SAMPLES) and src.has(NAMES)):
        return None
    if not {"timestamp", "typeId", "metricId", "value"} <= src.tables[SAMPLES]:
        return None
    return f"SELECT timestamp, typeId, metricId, value FROM {src.ref(SAMPLES)}"


def _devices(con: duckdb.DuckDBPyConnection, src: Source) -> dict[int, tuple[int, float | None]]:
    """{TARGET_INFO_GPU.id: (CUDA device id, peak DRAM bytes/s)}."""
    if not src.has(GPU) or "id" not in src.tables[GPU]:
        return {}
    cu = src.col(GPU, "cuDevice", "g")
    bw = src.col(GPU, "memoryBandwidth", "g")
    rows = con.execute(f"SELECT g.id, coalesce({cu}, g.id), {bw} FROM {src.ref(GPU)} g").fetchall()
    return {int(i): (int(d), float(b) if b else None) for i, d, b in rows}


def _map_rows(
    names: list[tuple[int, int, str]], devices: dict[int, tuple[int, float | None]]
) -> list[tuple[int, int, int, str, str, str, float, bool]]:
    """(type_id, metric_id, device_id, metric, raw_name, unit, scale, auto_mhz) per raw metric,
    plus one row per byte rate derived from a percentage."""
    out = []
    for type_id, metric_id, raw in names:
        device, peak = devices.get(int(type_id) & 255, (int(type_id) & 255, None))
        m = canonical(raw)
        out.append((type_id, metric_id, device, m.metric, raw, m.unit, m.scale, m.auto_mhz))
        if m.metric in BYTE_RATES and m.unit == "%" and peak:
            out.append((type_id, metric_id, device, BYTE_RATES[m.metric], raw, "byte/s", peak / 100.0, False))
    return out


# nsys samples all metrics of a GPU at once: the period comes from the GPU's distinct sample
# times (one window over ~1/20 of the rows; a window over every row took 2.2 s of 5.7 at 2M rows).
INSERT = f"""
INSERT INTO gpu_metrics (report_id, device_id, ts_ns, period_ns, metric, raw_name, unit, value)
WITH s AS (SELECT typeId, metricId, timestamp AS ts, value FROM ({{samples}})),
t AS (
    SELECT typeId, ts, coalesce(lead(ts) OVER w - ts, ts - lag(ts) OVER w) AS period
    FROM (SELECT DISTINCT typeId, ts FROM s)
    WINDOW w AS (PARTITION BY typeId ORDER BY ts)
)
SELECT $rid, m.device_id, s.ts, t.period, m.metric, m.raw_name, m.unit,
       CASE WHEN m.auto_mhz AND s.value < {MHZ_BELOW} THEN s.value * 1e6 ELSE s.value * m.scale END
FROM s
JOIN {MAP} AS m ON m.type_id = s.typeId AND m.metric_id = s.metricId
JOIN t ON t.typeId = s.typeId AND t.ts = s.ts
"""

# NVLink per direction, when the export has only its request/response components.
NVLINK_SUM = """
INSERT INTO gpu_metrics (report_id, device_id, ts_ns, period_ns, metric, raw_name, unit, value)
SELECT report_id, device_id, ts_ns, any_value(period_ns), $metric,
       string_agg(DISTINCT raw_name, ' + ' ORDER BY raw_name), '%', sum(value)
FROM gpu_metrics
WHERE report_id = $rid AND list_contains($parts, metric)
GROUP BY report_id, device_id, ts_ns
"""


def load(con: duckdb.DuckDBPyConnection, src: Source, report_id: int) -> int:
    """Copy a report's GPU metric samples into `gpu_metrics`; returns the rows written."""
    samples = source_sql(src)
    if samples is None:
        return 0
    names = [
        (int(t), int(m), str(n))
        for t, m, n in con.execute(
            f"SELECT DISTINCT typeId, metricId, metricName FROM {src.ref(NAMES)} WHERE metricName IS NOT NULL"
        ).fetchall()
    ]
    rows = _map_rows(names, _devices(con, src))
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {MAP} (type_id BIGINT, metric_id BIGINT, device_id INTEGER, "
        "metric VARCHAR, raw_name VARCHAR, unit VARCHAR, scale DOUBLE, auto_mhz BOOLEAN)"
    )
    with params.dropped_after(con, MAP):
        if rows:
            values = ", ".join(
                "(" + ", ".join(params.literal(v) for v in r) + ")" for r in rows
            )  # a few dozen rows
            con.execute(f"INSERT INTO {MAP} VALUES {values}")
        row = params.execute(con, INSERT.format(samples=samples), {"rid": report_id}).fetchone()
        n = int(row[0]) if row else 0
        have = {r[3] for r in rows}
        for direction, parts in NVLINK_PARTS.items():
            metric = f"nvlink_{direction}"
            if metric not in have and have & set(parts):
                row = params.execute(
                    con, NVLINK_SUM, {"rid": report_id, "metric": metric, "parts": list(parts)}
                ).fetchone()
                n += int(row[0]) if row else 0
    return n
