"""The import-layering contract (pyproject.toml's [tool.importlinter]) holds: cli -> api -> rules
-> queries -> ingest/workspace -> schema; the CLI reaches the library only through the facade
and the renderers."""

from __future__ import annotations

import ast
import os
import subprocess

from test_lint import _tool

from conftest import ROOT


def test_import_layers_contract() -> None:
    # the checkout's package, whatever else the interpreter could import
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


def test_every_input_format_is_in_the_independence_contract() -> None:
    """A format subpackage under ingest/ that the contract does not list could import another."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (independent,) = [c["modules"] for c in config["contracts"] if c["type"] == "independence"]
    ingest = ROOT / "nsight_analytics" / "ingest"
    packages = {f"nsight_analytics.ingest.{p.parent.name}" for p in ingest.glob("*/__init__.py")}
    assert {"nsight_analytics.ingest.nsys", "nsight_analytics.ingest.kineto"} <= packages
    assert sorted(independent) == sorted(packages)


def test_cli_imports_only_the_facade_and_the_renderers() -> None:
    tree = ast.parse((ROOT / "nsight_analytics" / "cli.py").read_text(encoding="utf-8"))
    local = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            local |= {f"{node.module}.{a.name}" if node.module else a.name for a in node.names}
    allowed = {
        "api",
        "render",
        "mcp_server",  # `nsa mcp`: the other front end over the same facade
        "errors.NsaError",
        "errors.WorkspaceError",
        "errors.INTERRUPTED",
        "errors.os_problem",
        "timing.timed",
        "names.ENV_DB",
        "names.GATE_METRICS",
        "names.DATASET_MANIFEST",
    }
    assert local <= allowed, sorted(local - allowed)
