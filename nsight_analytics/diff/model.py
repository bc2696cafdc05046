"""What a diff is, as data: the two sides, the checks, the verdict, the attribution and the
changes, so the CLI, a notebook and a CI script read the same result (`Diff.to_dict`,
`Diff.from_dict` for its JSON)."""

from __future__ import annotations

import types
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Union, get_args, get_origin, get_type_hints

# 'inconclusive': comparable, but the steps cannot tell a change beyond the noise floor from
# none (too few, or too spread); 'scaling': two runs of different world sizes, compared as a
# scaling (`Diff.scaling`); 'same report' / 'same run': A and B are one report or one run
# (nothing compared).
VERDICTS = (
    "improvement",
    "regression",
    "no significant change",
    "inconclusive",
    "not comparable",
    "scaling",
    "same report",
    "same run",
)


@dataclass
class Side:
    """One side of the diff (A, the before; B, the after): one report or a group of them."""

    report_ids: list[int]
    files: list[str]
    gpus: list[str]  # one entry per GPU of each report, as `gpus.name`
    steps_source: str | None  # 'nvtx' or 'kernels' (schema `steps.source`); None: no steps
    step_ns: list[float]  # GPU-side times of the steady steps; several GPUs/ranks: their mean per step
    step_numbers: list[int]  # their step numbers (NVTX `step 12` -> 12), else positions
    host_step_ns: list[float]  # the same steps' own durations (host time for NVTX steps)
    warmup_steps: int  # steps left out as warm-up
    median_step_ns: float | None
    mean_step_ns: float | None
    kernels_per_step: float | None
    tools: list[str] = field(default_factory=list)  # `reports.format` of each report: nsys, kineto...
    memory_peak_bytes: int | None = None  # largest device memory held, when memory_events has rows
    energy_per_step_j: float | None = None  # when the reports have power data


@dataclass
class Check:
    """One comparability check: `ok` false makes the verdict 'not comparable' unless it is
    only a `warning` (said, but the steps still compare)."""

    name: str
    ok: bool
    detail: str
    warning: bool = False


@dataclass
class StepChange:
    """B - A of the steady step time: the Hodges-Lehmann shift with the confidence interval
    of the Mann-Whitney test (`nsight_analytics.diff.stats`)."""

    statistic: str
    estimate_ns: float
    ci_ns: list[float] | None
    relative: float  # estimate / A's median step
    ci_relative: list[float] | None
    p_value: float
    confidence: float
    # P(a step of B is longer than a step of A), ties counted half: 0.5 is no change
    superiority: float | None = None
    # steady steps a side that would resolve a change of this size at this spread (`stats.steps_needed`)
    steps_needed: int | None = None


@dataclass
class Part:
    """One line of the attribution: GPU time per step in A and in B, and what changed in it."""

    name: str
    a_ns: float
    b_ns: float
    delta_ns: float
    detail: str = ""


@dataclass
class HostOpChange:
    """A host op of the step's thread (`cpu_ops`: outermost in the step range, by name; see
    `nsight_analytics.diff.host`) per steady step in A and B: its host time and the GPU idle time
    under it, medians over the steps, the means, and its time in each step."""

    name: str
    a_ns: float  # median host time per step
    b_ns: float
    delta_ns: float
    a_idle_ns: float  # median GPU idle time under it per step
    b_idle_ns: float
    idle_delta_ns: float
    a_mean_ns: float
    b_mean_ns: float
    a_steps_ns: list[float] = field(default_factory=list)  # host time in each step (host_steps order)
    b_steps_ns: list[float] = field(default_factory=list)


@dataclass
class Attribution:
    """Where the mean step time change came from: `by_phase` (NVTX range) and `by_cause`
    (kernel time, exposed copies, GPU idle...) each add up to `total_ns`: the parts listed plus
    `remainder_ns` (the parts too small to list). `by_host_op`: what the step's thread ran on the
    host (PyTorch profiler traces), medians per step; `summary` says in words what moved, and
    when outlier steps make the mean (the parts) and the median (the verdict) disagree."""

    total_ns: float
    by_phase: list[Part]
    phase_remainder_ns: float
    by_cause: list[Part]
    cause_remainder_ns: float
    by_host_op: list[HostOpChange] = field(default_factory=list)
    a_host_steps: list[int] = field(default_factory=list)  # step numbers of the per-step lists
    b_host_steps: list[int] = field(default_factory=list)
    a_host_idle_ns: list[float] = field(default_factory=list)  # GPU idle in each host step range
    b_host_idle_ns: list[float] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)


@dataclass
class KernelChange:
    """A kernel (names normalised with nsa_kernel_key, so nsys's and ncu's or Kineto's
    spellings meet) per steady step in A and B; status 'added', 'removed' or 'changed'."""

    key: str
    name: str
    status: str
    a_count: float
    b_count: float
    a_ns: float
    b_ns: float
    delta_ns: float


@dataclass
class FindingChange:
    """A finding 'resolved' (in A only), 'new' (in B only) or 'persisting' (both): its rule and
    title as B states them (A's for a resolved one), with both sides' savings and A's severity."""

    status: str
    rule_id: str
    severity: str
    title: str
    a_savings_ns: int | None
    b_savings_ns: int | None
    a_severity: str | None = None  # A's severity (None for a new finding); `severity` is B's where B has it

    @property
    def severity_shown(self) -> str:
        """B's severity, as 'A -> B' where a persisting finding's severity changed."""
        return severity_shown(self.status, self.a_severity, self.severity)


def severity_shown(status: str, a_severity: str | None, severity: str) -> str:
    """A finding change's severity for people: 'warning -> critical' where it changed between A and B."""
    if status == "persisting" and a_severity and a_severity != severity:
        return f"{a_severity} -> {severity}"
    return severity


@dataclass
class Metric:
    """A number both sides have, with its change; lower is better for every one listed."""

    name: str
    unit: str
    a: float | None
    b: float | None
    delta: float | None
    relative: float | None


@dataclass
class RunSide:
    """A run on one side of a run diff (`nsa diff --run`): the ranks of one job."""

    run_id: int
    name: str
    world_size: int  # runs.world_size, else the ranks seen
    ranks_seen: int
    report_ids: list[int]  # in rank order


@dataclass
class RankNumbers:
    """One rank's steady steps as `rank_balance` measures them: step_ns the median GPU step,
    the rest means per step (ns); last_share the share of collectives it arrived last at."""

    report_id: int
    steps: int
    step_ns: float | None
    compute_ns: float | None
    comm_ns: float | None
    exposed_comm_ns: float | None
    idle_ns: float | None
    wait_ns: float | None
    late_ns: float | None
    last_share: float | None


@dataclass
class RankChange:
    """Rank `rank` of run A against rank `rank` of run B (None: the rank has no row there)."""

    rank: int
    a: RankNumbers | None
    b: RankNumbers | None

    def delta(self, name: str) -> float | None:
        va = getattr(self.a, name) if self.a is not None else None
        vb = getattr(self.b, name) if self.b is not None else None
        return vb - va if va is not None and vb is not None else None


@dataclass
class CollectiveChange:
    """One kind of collective (op, element type, message size) in A and B, from
    `collective_skew`: how many were matched across the ranks, the mean arrival skew (last
    arrival - first), the median latency (the shortest duration among the ranks) and bus
    bandwidth (None without message sizes), and the rank that arrived last most often."""

    op: str
    dtype: str | None
    message_bytes: int | None
    a_count: int
    b_count: int
    a_skew_ns: float | None
    b_skew_ns: float | None
    a_latency_ns: float | None
    b_latency_ns: float | None
    a_busbw_gbps: float | None
    b_busbw_gbps: float | None
    a_last_rank: int | None
    b_last_rank: int | None
    a_last_share: float | None  # share of these collectives a_last_rank arrived last at
    b_last_share: float | None


@dataclass
class RunChanges:
    """What changed between two runs of one world size, rank by rank (pairs by rank number)
    and collective by collective, and in words: `straggler` is the rank B's other ranks wait
    for more than in A (None when no rank's lateness explains the change)."""

    ranks: list[RankChange]
    collectives: list[CollectiveChange]
    straggler: int | None
    summary: list[str]


@dataclass
class ScalingSide:
    """One run's row of the `scaling` query (per steady step, ns; throughput per second)."""

    run_id: int
    name: str
    world_size: int
    ranks: int
    steps: int | None
    step_ns: float | None
    compute_ns: float | None
    exposed_comm_ns: float | None
    imbalance_ns: float | None
    throughput: float | None


@dataclass
class Scaling:
    """Two runs of different world sizes as the `scaling` query compares them: `base` is the
    smaller world (whichever side it is), `scaled` the larger; `lost_ns` (step time lost against
    ideal scaling from the base) is the sum of the four `lost_*` parts."""

    mode: str  # 'weak' (each rank keeps its batch) or 'strong' (the global batch is split)
    throughput_unit: str  # 'rank-steps/s' (weak) or 'steps/s' (strong)
    base: ScalingSide
    scaled: ScalingSide
    speedup: float | None
    efficiency: float | None
    ideal_ns: float | None
    lost_ns: float | None
    lost_comm_ns: float | None
    lost_compute_ns: float | None
    lost_imbalance_ns: float | None
    lost_other_ns: float | None


@dataclass
class Diff:
    a: Side
    b: Side
    checks: list[Check]
    verdict: str
    reason: str
    noise_floor: float  # relative step-time change below which a shift is called noise
    step_change: StepChange | None = None
    attribution: Attribution | None = None
    metrics: list[Metric] = field(default_factory=list)
    kernels: list[KernelChange] = field(default_factory=list)
    findings: list[FindingChange] = field(default_factory=list)
    # `nsa diff --run`: the two runs; with one world size the rank and collective changes, with
    # two the scaling comparison (verdict 'scaling'); `same_run` when A and B are one run.
    run_a: RunSide | None = None
    run_b: RunSide | None = None
    run_changes: RunChanges | None = None
    scaling: Scaling | None = None
    same_run: bool = False

    @property
    def comparable(self) -> bool:
        return self.verdict != "not comparable"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diff:
        return _build(cls, data)

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)


def _build(cls: Any, data: Any) -> Any:
    """A dataclass tree back from `asdict` output (its JSON), field types followed."""
    hints = get_type_hints(cls)
    kwargs = {}
    for f in fields(cls):
        if f.name in data:
            kwargs[f.name] = _value(hints[f.name], data[f.name])
    return cls(**kwargs)


def _value(tp: Any, v: Any) -> Any:
    if v is None:
        return None
    if is_dataclass(tp):
        return _build(tp, v)
    origin = get_origin(tp)
    if origin is list:
        (inner,) = get_args(tp)
        return [_value(inner, x) for x in v]
    if origin in (Union, types.UnionType):
        return _value(next(a for a in get_args(tp) if a is not type(None)), v)
    return v
