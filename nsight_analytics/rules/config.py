"""Rule thresholds: documented defaults, changed by a TOML file and `name=value` overrides.

A config file (TOML) holds threshold names as top-level keys, under a `[thresholds]` table, or
under a table named after the rule that uses them (`nsa rules` lists each rule's thresholds):

    # nsa-rules.toml
    [thresholds]
    small_kernel_ns = 5000

    [gpu-idle]
    idle_share_warning = 0.10

Unknown names are errors (a typo must not silently keep the default). Thresholds are shared by
the rules that list them (`heavy_kernel_share` by every ncu rule), so a threshold takes one value:
setting it twice to different values is an error too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomllib is new in 3.11; tomli is the same parser.
    import tomli as tomllib  # type: ignore[no-redef]  # a dependency on 3.10 only (pyproject.toml)

from ..errors import NsaError


class ConfigError(NsaError):
    """A rules config file or a --set override is wrong."""


@dataclass(frozen=True)
class Threshold:
    name: str
    default: float | int
    unit: str
    doc: str


def _t(name: str, default: float, unit: str, doc: str) -> Threshold:
    return Threshold(name, default, unit, doc)


DEFAULTS: dict[str, Threshold] = {
    t.name: t
    for t in (
        # gpu-idle
        _t(
            "idle_share_warning",
            0.20,
            "fraction",
            "GPU idle share of the steady-state span (the whole span without steps) that is a warning.",
        ),
        _t(
            "idle_share_critical",
            0.50,
            "fraction",
            "GPU idle share of the steady-state span that is critical.",
        ),
        _t(
            "min_gap_ns",
            100_000,
            "ns",
            "Idle gaps shorter than this are not attributed to a cause (launch jitter).",
        ),
        _t(
            "idle_min_span_ns",
            50_000_000,
            "ns",
            "Steady-state spans shorter than this are too short to judge idleness (a smoke test, not a run).",
        ),
        # startup
        _t(
            "startup_share_info",
            0.20,
            "fraction",
            "Start-up (before the first steady step) share of the capture's GPU timeline worth an info finding.",
        ),
        _t("startup_min_ns", 100_000_000, "ns", "Start-up shorter than this is not reported."),
        # copy-dominated / pageable-memcpy
        _t("copy_share_warning", 0.30, "fraction", "Host<->device copy share of the span that is a warning."),
        _t("copy_share_critical", 0.60, "fraction", "Host<->device copy share of the span that is critical."),
        _t(
            "copy_kernel_share_max",
            0.30,
            "fraction",
            "copy-dominated fires only while kernels fill less than this share of the span.",
        ),
        _t("pageable_min_ns", 1_000_000, "ns", "Pageable copy time below this is not reported."),
        _t("pageable_share_warning", 0.05, "fraction", "Pageable copy share of the span that is a warning."),
        _t("pageable_share_critical", 0.25, "fraction", "Pageable copy share of the span that is critical."),
        # small-kernel-storm
        _t(
            "small_kernel_ns",
            10_000,
            "ns",
            "A kernel shorter than this is small: launch overhead is comparable.",
        ),
        _t("storm_min_kernels", 500, "count", "Fewest small kernels in a report for a storm."),
        _t(
            "storm_max_gap_ns",
            50_000,
            "ns",
            "Idle gaps between two small kernels up to this long count as launch gaps (longer: gpu-idle).",
        ),
        _t(
            "storm_gap_share_warning",
            0.02,
            "fraction",
            "Launch-gap idle share of the kernel span (first to last kernel) that makes a storm a warning (else info).",
        ),
        _t(
            "storm_gap_share_critical",
            0.20,
            "fraction",
            "Launch-gap idle share of the kernel span that is critical.",
        ),
        _t("top_kernels", 3, "count", "How many kernels a finding names."),
        # host-sync
        _t(
            "sync_share_warning",
            0.20,
            "fraction",
            "Share of a process's run its host threads spend blocked in synchronising calls, beyond GPU work, "
            "that is a warning.",
        ),
        _t("sync_share_critical", 0.50, "fraction", "The same share that is critical."),
        _t(
            "sync_share_info",
            0.20,
            "fraction",
            "Blocked share (all of it, GPU busy or not) worth an info finding even when the GPU was busy.",
        ),
        # ncu
        _t(
            "heavy_kernel_share",
            0.05,
            "fraction",
            "A kernel is heavy when it holds at least this share of the report's kernel time.",
        ),
        _t("max_kernel_findings", 3, "count", "At most this many kernels per ncu rule and report."),
        _t("stall_share_min", 40.0, "%", "A stall reason dominates at this share of all stall cycles."),
        _t("sol_busy_pct", 60.0, "%", "Throughput at or above which a unit counts as busy (speed_of_light)."),
        _t(
            "latency_bound_max_pct",
            40.0,
            "%",
            "latency-bound fires when both compute and memory throughput are below this.",
        ),
        _t("occupancy_low_pct", 40.0, "%", "Achieved occupancy below this is low."),
        _t(
            "occupancy_theoretical_low_pct",
            50.0,
            "%",
            "low-occupancy is a warning when the theoretical occupancy is below this (a limiter bites).",
        ),
    )
}


def defaults() -> dict[str, float | int]:
    return {name: t.default for name, t in DEFAULTS.items()}


def _coerce(name: str, value: Any) -> float | int:
    if name not in DEFAULTS:
        known = ", ".join(sorted(DEFAULTS))
        raise ConfigError(f"unknown rule threshold {name!r}; `nsa rules` lists them: {known}.")
    want = type(DEFAULTS[name].default)
    if isinstance(value, bool):
        raise ConfigError(f"threshold {name} wants a number, got {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"threshold {name} wants a number, got {value!r}.") from exc
    return int(number) if want is int else number


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> dict[str, float | int]:
    """Defaults, then the TOML file, then `overrides` (the CLI's --set)."""
    values = defaults()
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read rules config {p}: {exc.strerror or exc}.") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"rules config {p} is not valid TOML: {exc}.") from exc
        values.update(_file_values(p, data))
    for k, v in (overrides or {}).items():
        values[k] = _coerce(k, v)
    return values


def _file_values(path: Path, data: dict[str, Any]) -> dict[str, float | int]:
    """The thresholds a parsed config file sets: top-level keys, `[thresholds]`, `[rule-id]`."""
    found: dict[str, tuple[float | int, str]] = {}  # name -> (value, where it was set)

    def put(name: str, value: Any, where: str) -> None:
        try:
            number = _coerce(name, value)
        except ConfigError as exc:
            raise ConfigError(f"rules config {path}{where}: {exc}") from exc
        if name in found and found[name][0] != number:
            raise ConfigError(
                f"rules config {path} sets {name} twice ({found[name][1] or 'top level'} and "
                f"{where.strip() or 'top level'}); thresholds are shared by the rules that use them, "
                "so give it one value."
            )
        found[name] = (number, where.strip())

    for key, value in data.items():
        if not isinstance(value, dict):
            put(key, value, "")
            continue
        allowed = None if key == "thresholds" else _rule_thresholds(path, key)
        for name, v in value.items():
            if allowed is not None and name not in allowed:
                raise ConfigError(
                    f"rules config {path}: [{key}] has no threshold {name!r}; its thresholds: "
                    f"{', '.join(allowed) or 'none'}{_owners(name)}."
                )
            put(name, v, f" [{key}]")
    return {name: number for name, (number, _) in found.items()}


def _rule_thresholds(path: Path, rule_id: str) -> tuple[str, ...]:
    from .engine import rules  # registers every rule; only files with rule tables pay for it

    by_id = {r.id: r for r in rules()}
    if rule_id not in by_id:
        raise ConfigError(
            f"rules config {path}: [{rule_id}] is neither [thresholds] nor a rule; rule ids: "
            f"{', '.join(by_id)}."
        )
    return by_id[rule_id].thresholds


def _owners(name: str) -> str:
    from .engine import rules

    owners = [r.id for r in rules() if name in r.thresholds]
    return f" ({name} belongs to {', '.join(f'[{o}]' for o in owners)})" if owners else ""


def parse_overrides(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    return parse_assignments(pairs, "--set", "small_kernel_ns=5000")


def parse_assignments(pairs: tuple[str, ...] | list[str], option: str, example: str) -> dict[str, str]:
    """NAME=VALUE command-line pairs (`--set`, `-p`) as a dict; a malformed pair is a usage error."""
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"{option} {pair!r} should look like name=value, e.g. {example}.")
        k, v = pair.split("=", 1)
        out[k.strip()] = v.strip()
    return out
