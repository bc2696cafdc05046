"""Lint, format and type checks run with the tests, so CI keeps them (versions pinned in the
`test` extra of pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

# the pinned ruff and mypy check the sources the same from any Python: on README's Python only (.ci/run)
pytestmark = pytest.mark.one_python

SOURCES = ["nsight_analytics", "tests", "fixtures", "benchmarks"]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `pip install -e '.[test]'` installs it")
    return path


def test_ruff_check() -> None:
    res = _run(_tool("ruff"), "check", *SOURCES)
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_format() -> None:
    res = _run(_tool("ruff"), "format", "--check", *SOURCES)
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy() -> None:
    # mypy reads [tool.mypy] in pyproject.toml (files, overrides); run it on this interpreter
    res = _run(sys.executable, "-m", "mypy")
    assert res.returncode == 0, res.stdout + res.stderr
