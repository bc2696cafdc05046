"""What a rule is and what it produces: `Rule`, its `Threshold`s and the data it `needs`, and `Finding`.

A rule is one decorated check function in a module of its own (see `discovery`):

    @rule("copy-dominated", order=10, needs=("memcpy",), severities=("warning", "critical"),
          thresholds=(Threshold("copy_share_warning", 0.30, "fraction", "..."), ...))
    def copy_dominated(ctx: Context, rid: int) -> list[Finding]:
        \"\"\"Summary line. Anti-pattern ... Fix: ... est_savings_ns: ...\"\"\"

A rule judges one report (`scope="report"`, the default: `check(ctx, report_id)`) or one run, the
ranks of a multi-GPU job taken together (`scope="run"`: `check(ctx, run_id)`; docs/runs.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import Context

SEVERITIES = ("info", "warning", "critical")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

# The values of reports.activity_kinds a rule can need: what a report holds at least one row of,
# whatever tool wrote it (schema: reports.activity_kinds).
ACTIVITY_KINDS = frozenset(
    {
        "kernel",
        "memcpy",
        "memset",
        "graph",
        "cuda_api",
        "sync",
        "nvtx",
        "osrt",
        "mpi",  # nsys' MPI event tables (their blocking calls are host_waits rows, source 'mpi')
        "cpu_samples",
        "gpu_info",
        "processes",
        "ncu_metrics",
        "ncu_rules",
        "gpu_metrics",
        "memory",
        "power",
        "comm",  # comm_ops: NCCL / RCCL / NVSHMEM kernels
    }
)
# Work on a GPU timeline: kernels, copies, memsets or CUDA graph replays (nsa_gpu_activity).
GPU_ACTIVITY = frozenset({"kernel", "memcpy", "memset", "graph"})
# What a rule judges: one report, or one run (the ranks of a distributed job, table `runs`).
SCOPES = ("report", "run")


@dataclass
class Finding:
    """One piece of advice about one report or run, with the numbers that justify it.

    `est_savings_ns` is the timeline time the fix could give back, or None where no honest
    estimate exists (each rule's docstring says how it is computed). `evidence` holds the raw
    numbers behind `message`, in base units (ns, bytes, fractions), for machines.

    A run rule's finding carries its `run_id` and the `ranks` it names; its `report_id` is the
    report of the rank it is about (a straggler's), else the run's lowest report id.
    """

    rule_id: str
    severity: str
    report_id: int
    title: str
    message: str
    recommendation: str
    evidence: dict[str, Any] = field(default_factory=dict)
    est_savings_ns: int | None = None
    # Another rule's id whose finding on this report estimates the same saving (one fix seen
    # twice): the two are shown as one and their savings must not be added.
    same_saving_as: str | None = None
    run_id: int | None = None  # the run a run rule judged (runs.run_id); None for report rules
    ranks: list[int] | None = None  # the ranks the finding names (run rules)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.est_savings_ns is not None:
            self.est_savings_ns = max(0, int(self.est_savings_ns))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The values a threshold of each unit can take (low, high; None: unbounded): a share is 0 to 1, a
# percentage 0 to 100, a ratio of one thing over another it should exceed at least 1.
UNIT_RANGES: dict[str, tuple[float | None, float | None]] = {
    "fraction": (0.0, 1.0),
    "%": (0.0, 100.0),
    "points": (0.0, 100.0),
    "ratio": (1.0, None),
    "ns": (0, None),
    "byte": (0, None),
    "count": (0, None),
}


@dataclass(frozen=True)
class Threshold:
    """A number a rule compares against, with its default; users change it by name (config).

    `low` / `high`: the values it can take, where they differ from its unit's (UNIT_RANGES)."""

    name: str
    default: float | int
    unit: str
    doc: str
    low: float | None = None
    high: float | None = None

    def bounds(self) -> tuple[float | None, float | None]:
        """(lowest, highest) value the threshold takes; None: no bound on that side."""
        low, high = UNIT_RANGES.get(self.unit, (None, None))
        return (low if self.low is None else self.low, high if self.high is None else self.high)


# check(ctx, report_id), or check(ctx, run_id) for a rule of scope "run"
CheckFn = Callable[["Context", int], list[Finding]]
# optional_when(ctx, report_id): True (all of the rule's optional_reads), False, or those it reads
OptionalWhen = Callable[["Context", int], "bool | tuple[str, ...]"]


@dataclass(frozen=True)
class Rule:
    """A rule: `check(ctx, report_id)` returns its findings for one report; a rule of scope
    "run", `check(ctx, run_id)`, for one run (the ranks of a job, table `runs`).

    `needs` says which reports it runs on: each entry is a set of activity kinds of which the
    report must hold at least one (reports.activity_kinds); no entries: every report. A run
    rule's needs are met by the union of its ranks' reports' activity kinds. `order`
    places it in `nsa rules` (then the id). `queries` and `reads` say what must be
    materialised before it runs (the queries' `-- reads` lines, plus `reads`); `optional_reads`,
    which of those tables it can do without: when their rows are still in a source export that is
    gone, it runs on what the workspace holds (`Context.unloaded` says what is missing) instead
    of being skipped. `optional_when(ctx, report_id)`, when given, says whether the check reads
    its `optional_reads` on that report at all (its cheaper tests passed), or which of them it
    reads (a tuple of tables): where it says no, `nsa findings` leaves them in the export (they
    are copied on first use) instead of copying them for a check that returns before it reads
    them, or whose rows there could not change what it finds. The check function's docstring
    is the rule's documentation: its first paragraph the summary, its `Fix:` paragraph the advice.
    """

    id: str
    needs: tuple[frozenset[str], ...]
    severities: tuple[str, ...]
    declared: tuple[Threshold, ...]
    check: CheckFn
    order: int = 1000
    queries: tuple[str, ...] = ()  # the library queries the check runs (ctx.query, ctx.query_df)
    reads: tuple[str, ...] = ()  # canonical tables it reads outside them (ctx.steady: steps)
    scope: str = "report"  # what check's id is: a report ("report") or a run ("run")
    optional_reads: tuple[str, ...] = ()  # of the tables above, those it can judge without
    optional_when: OptionalWhen | None = None  # None: reads them on every report

    @property
    def thresholds(self) -> tuple[str, ...]:
        """The names of the thresholds the rule reads, as config files and --set spell them."""
        return tuple(t.name for t in self.declared)

    @property
    def doc(self) -> str:
        return (self.check.__doc__ or "").strip()

    @property
    def summary(self) -> str:
        return self.doc.split("\n\n")[0].replace("\n", " ").strip()

    @property
    def fix(self) -> str:
        """The docstring's `Fix:` paragraph as one line, without its label ('' when none)."""
        for para in self.doc.split("\n\n"):
            text = " ".join(para.split())
            if text.startswith("Fix: "):
                return text.removeprefix("Fix: ")
        return ""

    @property
    def needs_text(self) -> str:
        """What the rule needs, in words: 'kernel', 'graph or kernel or memcpy or memset', 'any report'."""
        return " and ".join(" or ".join(sorted(group)) for group in self.needs) or "any report"

    def runs_on(self, activity_kinds: Iterable[str]) -> bool:
        """True when a report holding these activity kinds has the data the rule needs."""
        have = set(activity_kinds)
        return all(group & have for group in self.needs)


def rule(
    rule_id: str,
    *,
    needs: tuple[str | frozenset[str], ...],
    severities: tuple[str, ...],
    thresholds: tuple[Threshold, ...] = (),
    queries: tuple[str, ...] = (),
    reads: tuple[str, ...] = (),
    optional_reads: tuple[str, ...] = (),
    order: int = 1000,
    scope: str = "report",
    optional_when: OptionalWhen | None = None,
) -> Callable[[CheckFn], Rule]:
    """Declare a check function as the rule `rule_id`; its docstring is the rule's documentation.

    `needs`: activity kinds the report must hold, one per entry; an entry that is a set is
    satisfied by any of its kinds (`GPU_ACTIVITY`). `queries`: the library queries the check
    runs; `reads`: canonical tables it reads otherwise; `optional_reads`: of those two, the
    tables it can judge without (it then says so); `optional_when(ctx, report_id)`: whether the
    check reads those on that report, or which of them (default: all, always). `scope`:
    "report" (check(ctx, report_id), once per report) or "run" (check(ctx, run_id), once per run).
    """
    groups = tuple(frozenset({n}) if isinstance(n, str) else frozenset(n) for n in needs)
    unknown = set().union(*groups) - ACTIVITY_KINDS
    if unknown:
        raise ValueError(f"rule {rule_id} needs unknown activity kinds {sorted(unknown)}")
    bad = [s for s in severities if s not in SEVERITY_RANK]
    if bad:
        raise ValueError(f"rule {rule_id}: severities must be among {SEVERITIES}, got {bad}")
    if scope not in SCOPES:
        raise ValueError(f"rule {rule_id}: scope must be one of {SCOPES}, got {scope!r}")

    def declare(fn: CheckFn) -> Rule:
        if not (fn.__doc__ or "").strip():
            raise ValueError(f"rule {rule_id} needs a docstring: the anti-pattern and the fix")
        return Rule(
            rule_id,
            groups,
            severities,
            thresholds,
            fn,
            order,
            queries,
            reads,
            scope,
            optional_reads,
            optional_when,
        )

    return declare


def severity_for(value: float, warning: float, critical: float, below: str = "info") -> str:
    """The severity a measured share earns against a rule's warning and critical thresholds."""
    if value >= critical:
        return "critical"
    return "warning" if value >= warning else below
