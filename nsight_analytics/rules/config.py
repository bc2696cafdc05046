"""Rule thresholds: documented defaults, changed by a TOML file and `name=value` overrides.

A config file (TOML) holds threshold names as top-level keys, under a `[thresholds]` table, or
under a table named after the rule that uses them (`nsa rules` lists each rule's thresholds):

    # nsa-rules.toml
    [thresholds]
    small_kernel_ns = 5000

    [gpu-idle]
    idle_share_warning = 0.10

Each rule declares its thresholds (name, default, unit, meaning) next to its check; the table
here is built from the rules. Unknown names are errors (a typo must not silently keep the
default). Thresholds are shared by the rules that list them (`heavy_kernel_share` by every ncu
rule), so a threshold takes one value: setting it twice to different values is an error too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomllib is new in 3.11; tomli is the same parser.
    import tomli as tomllib  # type: ignore[no-redef]  # a dependency on 3.10 only (pyproject.toml)

from ..errors import NsaError
from .model import Rule, Threshold

if TYPE_CHECKING:
    DEFAULTS: dict[str, Threshold]  # built from the rules on first use (__getattr__)


# Settings-file keys that name folders (of rule packs, of .sql queries), not thresholds.
FOLDER_KEYS = ("rules", "queries")


class ConfigError(NsaError):
    """A rules config file or a --set override is wrong."""


def table(ruleset: Sequence[Rule] | None = None) -> dict[str, Threshold]:
    """Every threshold the rules declare, by name, in the order `nsa rules` lists the rules."""
    found: dict[str, Threshold] = {}
    for r in _ruleset(ruleset):
        for t in r.declared:
            if found.setdefault(t.name, t) != t:
                raise ValueError(
                    f"threshold {t.name} is declared twice, differently (rule {r.id}): share one declaration"
                )
    return found


def _ruleset(ruleset: Sequence[Rule] | None) -> Sequence[Rule]:
    if ruleset is not None:
        return ruleset
    from .discovery import registered  # imports every rule module: only when thresholds are looked up

    return registered()


def __getattr__(name: str) -> Any:
    # DEFAULTS is built from the rules, so importing this module (`nsa query` parses `-p
    # name=value` with parse_assignments) does not import every rule module.
    if name == "DEFAULTS":
        return table()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _coerce(known: dict[str, Threshold], name: str, value: Any) -> float | int:
    if name not in known:
        names = ", ".join(sorted(known))
        raise ConfigError(f"unknown rule threshold {name!r}; `nsa rules` lists them: {names}.")
    want = type(known[name].default)
    if isinstance(value, bool):
        raise ConfigError(f"threshold {name} wants a number, got {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"threshold {name} wants a number, got {value!r}.") from exc
    low, high = known[name].bounds()
    if (
        not math.isfinite(number)
        or (low is not None and number < low)
        or (high is not None and number > high)
    ):
        raise ConfigError(f"threshold {name} must be {_range_text(known[name])}, got {value!r}.")
    if want is int and not number.is_integer():
        raise ConfigError(f"threshold {name} wants a whole number ({known[name].unit}), got {value!r}.")
    return int(number) if want is int else number


def _range_text(t: Threshold) -> str:
    """`between 0 and 1 (a fraction)`, `at least 0 (ns)`: the values a threshold takes, in words."""
    low, high = t.bounds()
    unit = f"a {t.unit}" if t.unit in {"fraction", "ratio", "count"} else t.unit
    if low is not None and high is not None:
        return f"between {low:g} and {high:g} ({unit})"
    if low is not None:
        return f"at least {low:g} ({unit})"
    if high is not None:
        return f"at most {high:g} ({unit})"
    return f"a finite number ({unit})"


def load_config(
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    ruleset: Sequence[Rule] | None = None,
) -> dict[str, float | int]:
    """Defaults, then the TOML file, then `overrides` (the CLI's --set); `ruleset`: the rules
    whose thresholds count (default: the built-in rules)."""
    rules = _ruleset(ruleset)
    known = table(rules)
    values = {name: t.default for name, t in known.items()}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read rules config {p}: {exc.strerror or exc}.") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"rules config {p} is not valid TOML: {exc}.") from exc
        values.update(_file_values(p, data, rules, known))
    for k, v in (overrides or {}).items():
        values[k] = _coerce(known, k, v)
    return values


def load_config_data(
    data: dict[str, Any],
    source: str,
    overrides: dict[str, Any] | None = None,
    ruleset: Sequence[Rule] | None = None,
) -> dict[str, float | int]:
    """`load_config` for settings already read: a settings file found by default
    (config_files.find; `source` names it in errors, `pyproject.toml [tool.nsa]`)."""
    rules = _ruleset(ruleset)
    known = table(rules)
    values = {name: t.default for name, t in known.items()}
    values.update(_file_values(Path(source), data, rules, known))
    return {**values, **{k: _coerce(known, k, v) for k, v in (overrides or {}).items()}}


def _file_values(
    path: Path, data: dict[str, Any], rules: Sequence[Rule], known: dict[str, Threshold]
) -> dict[str, float | int]:
    """The thresholds a parsed config file sets: top-level keys, `[thresholds]`, `[rule-id]`."""
    found: dict[str, tuple[float | int, str]] = {}  # name -> (value, where it was set)
    by_id = {r.id: r for r in rules}

    def put(name: str, value: Any, where: str) -> None:
        try:
            number = _coerce(known, name, value)
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
        if key in FOLDER_KEYS and isinstance(value, (list, str)):
            continue  # folders of rule files and queries (api.extend), not thresholds
        if not isinstance(value, dict):
            put(key, value, "")
            continue
        if key != "thresholds" and key not in by_id:
            raise ConfigError(
                f"rules config {path}: [{key}] is neither [thresholds] nor a rule; rule ids: "
                f"{', '.join(by_id)}."
            )
        allowed = None if key == "thresholds" else by_id[key].thresholds
        for name, v in value.items():
            if allowed is not None and name not in allowed:
                owners = [r.id for r in rules if name in r.thresholds]
                belongs = f" ({name} belongs to {', '.join(f'[{o}]' for o in owners)})" if owners else ""
                raise ConfigError(
                    f"rules config {path}: [{key}] has no threshold {name!r}; its thresholds: "
                    f"{', '.join(allowed) or 'none'}{belongs}."
                )
            put(name, v, f" [{key}]")
    return {name: number for name, (number, _) in found.items()}


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
