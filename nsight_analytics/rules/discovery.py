"""Finding the rules: every module of a package that defines one rule, as sqlfluff finds its rules.

Adding a rule is adding a module to `nsight_analytics.rules.checks`; nothing lists them by hand.
Another package of rule modules (a plugin, a test's toy rule) is found the same way:

    from nsight_analytics.rules import discover, rules, run_rules
    run_rules(con, ruleset=[*rules(), *discover("my_rules")])
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import cache

from .model import Rule

BUILTIN = "nsight_analytics.rules.checks"


def discover(package: str) -> list[Rule]:
    """The rules of a package's modules (one per module; `_name` modules are helpers), by order then id."""
    pkg = importlib.import_module(package)
    found: dict[str, Rule] = {}
    for info in pkgutil.iter_modules(pkg.__path__, f"{package}."):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        here = [v for v in vars(module).values() if isinstance(v, Rule) and v.check.__module__ == info.name]
        if len(here) != 1:
            ids = ", ".join(r.id for r in here) or "none"
            raise ValueError(f"rule module {info.name} must define exactly one rule, found: {ids}")
        r = here[0]
        if r.id in found:
            raise ValueError(f"rule {r.id} is defined twice: {found[r.id].check.__module__} and {info.name}")
        found[r.id] = r
    return sorted(found.values(), key=lambda r: (r.order, r.id))


@cache
def builtin() -> tuple[Rule, ...]:
    """The rules that ship with nsa."""
    return tuple(discover(BUILTIN))


# Rules added beside the built-in ones: a team's rule files (rules/files.py) and plugins' rules.
_ADDED: list[Rule] = []


def add(new: Iterable[Rule]) -> None:
    """Run these rules too, wherever the built-in ones run (`nsa findings`, the diff, `nsa
    rules`); an id already taken is an error."""
    taken = {r.id: r for r in registered()}
    for r in new:
        if not isinstance(r, Rule):
            raise TypeError(f"not a rule: {r!r}")
        if r.id in taken and taken[r.id] is not r:
            raise ValueError(
                f"rule {r.id} is defined twice: {taken[r.id].check.__module__} and {r.check.__module__}"
            )
        if r.id not in taken:
            _ADDED.append(r)
            taken[r.id] = r


def reset() -> None:
    """Forget the added rules: the built-in ones only."""
    _ADDED.clear()


def registered() -> tuple[Rule, ...]:
    """The built-in rules, then the added ones, by order then id."""
    return tuple(sorted((*builtin(), *_ADDED), key=lambda r: (r.order, r.id)))
