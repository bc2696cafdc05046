"""What a rule produces (`Finding`) and how rules are declared and found (the registry)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import Context

SEVERITIES = ("info", "warning", "critical")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass
class Finding:
    """One piece of advice about one report, with the numbers that justify it.

    `est_savings_ns` is the timeline time the fix could give back, or None where no honest
    estimate exists (each rule's docstring says how it is computed). `evidence` holds the raw
    numbers behind `message`, in base units (ns, bytes, fractions), for machines.
    """

    rule_id: str
    severity: str
    report_id: int
    title: str
    message: str
    recommendation: str
    evidence: dict[str, Any] = field(default_factory=dict)
    est_savings_ns: int | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.est_savings_ns is not None:
            self.est_savings_ns = max(0, int(self.est_savings_ns))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


CheckFn = Callable[["Context", int], list[Finding]]


@dataclass(frozen=True)
class Rule:
    """A registered rule: `check(ctx, report_id)` returns its findings for one report."""

    id: str
    kind: str  # the report kind it reads: 'nsys' or 'ncu'
    severities: tuple[str, ...]
    thresholds: tuple[str, ...]
    check: CheckFn

    @property
    def doc(self) -> str:
        return (self.check.__doc__ or "").strip()

    @property
    def summary(self) -> str:
        return self.doc.split("\n\n")[0].replace("\n", " ").strip()


REGISTRY: dict[str, Rule] = {}


def rule(
    rule_id: str, *, kind: str, severities: tuple[str, ...], thresholds: tuple[str, ...] = ()
) -> Callable[[CheckFn], CheckFn]:
    """Register a check function under `rule_id`; its docstring is the rule's documentation."""

    def register(fn: CheckFn) -> CheckFn:
        if rule_id in REGISTRY:
            raise ValueError(f"rule {rule_id} registered twice")
        if not (fn.__doc__ or "").strip():
            raise ValueError(f"rule {rule_id} needs a docstring: the anti-pattern and the fix")
        REGISTRY[rule_id] = Rule(rule_id, kind, severities, thresholds, fn)
        return fn

    return register


def severity_for(value: float, warning: float, critical: float, below: str = "info") -> str:
    """The severity a measured share earns against a rule's warning and critical thresholds."""
    if value >= critical:
        return "critical"
    return "warning" if value >= warning else below


def max_severity(*levels: str) -> str:
    return max(levels, key=SEVERITY_RANK.__getitem__)
