"""The settings file `nsa` reads when no --config is given: the first of

1. `nsa.toml` in the working folder;
2. the `[tool.nsa]` table of the nearest `pyproject.toml` at or above the working folder (the
   project root: a `pyproject.toml` without the table ends the search there, so a parent
   project's settings never leak into this one);
3. the user's file, `$XDG_CONFIG_HOME/nsa/config.toml` (default `~/.config/nsa/config.toml`).

The settings have the --config file's meaning and layout (rules/config.py: threshold names at the
top, under `[thresholds]` or under a rule's id); in `pyproject.toml` they sit under `[tool.nsa]`
(`[tool.nsa.gpu-idle]`). Only the first file found counts: settings are not merged across files.
Two keys name folders instead of thresholds, relative to the file: `queries = ["dir", ...]` (a
team's .sql queries) and `rules = ["dir", ...]` (TOML rule packs; docs/extending.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli is the same parser (a dependency on 3.10 only)
    import tomli as tomllib  # type: ignore[no-redef]

from .errors import InputError

PROJECT_FILE = "nsa.toml"
PYPROJECT = "pyproject.toml"
USER_FILE = Path("nsa") / "config.toml"


@dataclass(frozen=True)
class ConfigFile:
    """A settings file found by `find`: where it is and the nsa settings it holds."""

    path: Path
    data: dict[str, Any] = field(compare=False)
    table: str | None = None  # "tool.nsa" inside pyproject.toml; None: the whole file

    def __str__(self) -> str:
        return f"{self.path} [{self.table}]" if self.table else str(self.path)


def xdg_home(var: str, fallback: str, environ: Mapping[str, str] | None = None) -> Path:
    """An XDG base directory ($XDG_CONFIG_HOME, $XDG_CACHE_HOME): the variable's value where it
    is absolute (a relative one is ignored, as the rule says), else `fallback` in the home folder.
    Raises RuntimeError where no home folder is known."""
    env = os.environ if environ is None else environ
    base = env.get(var, "")
    if base and Path(base).is_absolute():
        return Path(base)
    return Path(env.get("HOME") or Path.home()) / fallback


def user_file(environ: Mapping[str, str] | None = None) -> Path:
    """The user's settings file, by the XDG base directory rule."""
    return xdg_home("XDG_CONFIG_HOME", ".config", environ) / USER_FILE


def searched(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> str:
    """Where `find` looks, in words (for --verbose when it finds nothing)."""
    here = Path.cwd() if cwd is None else cwd
    return (
        f"{here / PROJECT_FILE}, [tool.nsa] in the nearest {PYPROJECT} at or above {here}, "
        f"{user_file(environ)}"
    )


def find(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> ConfigFile | None:
    """The settings file that applies in `cwd` (default: the working folder), or None."""
    here = (Path.cwd() if cwd is None else cwd).resolve()
    local = here / PROJECT_FILE
    if local.is_file():
        return ConfigFile(local, _read(local))
    for folder in (here, *here.parents):
        pyproject = folder / PYPROJECT
        if pyproject.is_file():
            tool = _read(pyproject).get("tool", {})
            nsa = tool.get("nsa") if isinstance(tool, dict) else None
            if isinstance(nsa, dict):
                return ConfigFile(pyproject, nsa, "tool.nsa")
            break  # the project root, without nsa settings
    user = user_file(environ)
    if user.is_file():
        return ConfigFile(user, _read(user))
    return None


def read(path: Path) -> dict[str, Any]:
    """A settings file given by name (--config): its TOML, or InputError saying what is wrong."""
    return _read(path)


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read settings file {path}: {exc.strerror or exc}.") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(
            f"settings file {path} is not valid TOML: {exc}; fix it, or pass --no-config to ignore it."
        ) from exc
