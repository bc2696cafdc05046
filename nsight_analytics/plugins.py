"""Packages that extend nsa, found by their entry points (as sqlite-utils and datasette find theirs).

A package declares what it adds in its `pyproject.toml`; one group per extension point:

    [project.entry-points."nsa.readers"]
    toy = "nsa_toy.reader:READER"     # an ingest Reader (ingest/reader.py), or a module defining READER
    [project.entry-points."nsa.rules"]
    toy = "nsa_toy.rules"             # a Rule, a list of them, or a module / package of rule modules
    [project.entry-points."nsa.queries"]
    toy = "nsa_toy:QUERIES"           # a folder of .sql queries (a path), or a package holding them

`load` imports them once per process. A plugin that fails to load is named in one warning line
and left out; nsa works without it. `importlib.metadata` is all this needs: each extension point
takes one kind of object, so there is no hook to call and no need for pluggy.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from collections.abc import Iterable
from importlib import machinery, metadata
from pathlib import Path
from typing import Any

from . import queries
from .ingest import Reader, register

log = logging.getLogger(__name__)

GROUPS = ("nsa.readers", "nsa.rules", "nsa.queries")
_LOADED: dict[str, list[str]] = {}  # group -> names of the plugins it loaded
_PROBLEMS: list[str] = []


def load(groups: Iterable[str] = GROUPS) -> list[str]:
    """Load every installed plugin of `groups` (once); returns one line per plugin that failed."""
    todo = [g for g in groups if g not in _LOADED]
    if not todo:
        return list(_PROBLEMS)
    # one scan of the installed distributions for every group, when one could declare a plugin
    installed = metadata.entry_points() if _may_declare_plugins() else metadata.EntryPoints()
    for group in todo:
        _LOADED[group] = []
        for ep in sorted(installed.select(group=group), key=lambda e: e.name):
            try:
                _ADD[group](ep.load())
            except Exception as exc:  # noqa: BLE001  # a plugin's bug must not take nsa down: say it, go on
                line = (
                    f"plugin {ep.name} ({group} = {ep.value}) not loaded: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else 'no message'}; nsa runs without it."
                )
                _PROBLEMS.append(line)
                log.warning("%s", line)
                continue
            _LOADED[group].append(ep.name)
    return list(_PROBLEMS)


def _may_declare_plugins() -> bool:
    """Could an installed distribution declare an nsa entry point? No when no entry_points.txt of
    the distributions on sys.path mentions `nsa.` (reading those few files costs ~2 ms of CPU;
    `metadata.entry_points()` parses every distribution's, ~0.01-0.03 s, in every command); yes
    when unsure: a zip or egg on sys.path, or a distribution finder other than the path's."""
    if any(hasattr(f, "find_distributions") and f is not machinery.PathFinder for f in sys.meta_path):
        return True
    for entry in sys.path:
        if entry.endswith(".egg"):
            return True
        try:
            found = os.scandir(entry or ".")
        except NotADirectoryError:  # a zip file
            return True
        except OSError:  # not there: holds no distribution
            continue
        with found:
            for dist in found:
                if not dist.name.lower().endswith((".dist-info", ".egg-info")):
                    continue
                try:
                    with open(os.path.join(dist.path, "entry_points.txt"), "rb") as f:
                        if b"nsa." in f.read():
                            return True
                except (FileNotFoundError, NotADirectoryError):  # declares no entry point
                    continue
                except OSError:
                    return True
    return False


def loaded() -> dict[str, list[str]]:
    """{group: names of the plugins loaded from it}."""
    return {g: list(names) for g, names in _LOADED.items()}


def _readers(obj: Any) -> None:
    if isinstance(obj, types.ModuleType):
        obj = getattr(obj, "READER", None)
    if isinstance(obj, type) and issubclass(obj, Reader):
        obj = obj()
    if not isinstance(obj, Reader):
        raise TypeError(f"expected an ingest Reader (or a module defining READER), got {type(obj).__name__}")
    register(obj)


def _rules(obj: Any) -> None:
    from .rules import Rule  # here: a process with no rule plugin loads no rules
    from .rules.discovery import add, discover

    if isinstance(obj, types.ModuleType):
        if hasattr(obj, "__path__"):  # a package of rule modules, one rule each, as checks/
            found = discover(obj.__name__)
        else:
            found = [v for v in vars(obj).values() if isinstance(v, Rule)]
    elif isinstance(obj, Rule):
        found = [obj]
    else:
        found = list(obj)
    if not found or not all(isinstance(r, Rule) for r in found):
        raise TypeError("expected a Rule, a list of Rules, or a module defining rules")
    add(found)


def _queries(obj: Any) -> None:
    if callable(obj) and not isinstance(obj, types.ModuleType):
        obj = obj()
    if isinstance(obj, types.ModuleType):
        where = getattr(obj, "__path__", None)
        folder = Path(next(iter(where))) if where else Path(str(obj.__file__)).parent
    else:
        folder = Path(obj)
    queries.add_folder(folder)
    try:
        queries.library()  # a broken .sql file is this plugin's failure, found now
    except Exception:
        queries.remove_folder(folder)
        raise


_ADD = {"nsa.readers": _readers, "nsa.rules": _rules, "nsa.queries": _queries}
