"""What a diff is, as data: the two sides, the checks, the verdict, the attribution and the
changes, so the CLI, a notebook and a CI script read the same result (`Diff.to_dict`,
`Diff.from_dict` for its JSON)."""

from __future__ import annotations

import types
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Union, get_args, get_origin, get_type_hints

VERDICTS = ("improvement", "regression", "no significant change", "not comparable")


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


@dataclass
class Part:
    """One line of the attribution: GPU time per step in A and in B, and what changed in it."""

    name: str
    a_ns: float
    b_ns: float
    delta_ns: float
    detail: str = ""


@dataclass
class Attribution:
    """Where the mean step time change came from: `by_phase` (NVTX range) and `by_cause`
    (kernel time, exposed copies, GPU idle...) each add up to `total_ns`: the parts listed plus
    `remainder_ns` (the parts too small to list)."""

    total_ns: float
    by_phase: list[Part]
    phase_remainder_ns: float
    by_cause: list[Part]
    cause_remainder_ns: float


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
    """A finding 'resolved' (in A only), 'new' (in B only) or 'persisting' (both)."""

    status: str
    rule_id: str
    severity: str
    title: str
    a_savings_ns: int | None
    b_savings_ns: int | None


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
