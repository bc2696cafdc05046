"""The settings file read without --config: ./nsa.toml, else [tool.nsa] of the nearest
pyproject.toml (a pyproject.toml without it ends the search), else the user's config.toml."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nsight_analytics import config_files
from nsight_analytics.cli import EXIT_ERROR, EXIT_OK, main
from nsight_analytics.errors import InputError

DEMO = Path(__file__).resolve().parents[1] / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """project/ (pyproject.toml with [tool.nsa]) / sub / here; a user config folder beside."""
    project = tmp_path / "project"
    here = project / "sub" / "here"
    here.mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.nsa.gpu-idle]\nidle_gap_min_ns = 2\n'
    )
    user = tmp_path / "xdg" / "nsa"
    user.mkdir(parents=True)
    (user / "config.toml").write_text("idle_gap_min_ns = 3\n")
    return here, {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}


def test_nsa_toml_in_the_working_folder_wins(tree) -> None:
    here, env = tree
    (here / "nsa.toml").write_text("[thresholds]\nidle_gap_min_ns = 1\n")
    found = config_files.find(here, env)
    assert found is not None
    assert (found.path, found.data, found.table) == (
        here / "nsa.toml",
        {"thresholds": {"idle_gap_min_ns": 1}},
        None,
    )


def test_then_the_projects_pyproject(tree) -> None:
    here, env = tree
    found = config_files.find(here, env)
    assert found is not None
    assert found.path == here.parents[1] / "pyproject.toml"
    assert found.data == {"gpu-idle": {"idle_gap_min_ns": 2}}
    assert str(found) == f"{here.parents[1] / 'pyproject.toml'} [tool.nsa]"


def test_a_nearer_pyproject_without_the_table_ends_the_search(tree) -> None:
    here, env = tree
    (here / "pyproject.toml").write_text('[project]\nname = "inner"\n')
    found = config_files.find(here, env)
    assert found is not None and found.path == Path(env["XDG_CONFIG_HOME"]) / "nsa" / "config.toml"
    assert found.data == {"idle_gap_min_ns": 3}


def test_then_the_user_file_and_else_nothing(tree, tmp_path: Path) -> None:
    here, env = tree
    (here.parents[1] / "pyproject.toml").unlink()
    found = config_files.find(here, env)
    assert found is not None and found.data == {"idle_gap_min_ns": 3}
    # without XDG_CONFIG_HOME (or with a relative one): ~/.config/nsa/config.toml
    assert config_files.user_file({"HOME": "/h"}) == Path("/h/.config/nsa/config.toml")
    assert config_files.user_file({"HOME": "/h", "XDG_CONFIG_HOME": "rel"}) == Path(
        "/h/.config/nsa/config.toml"
    )
    (Path(env["XDG_CONFIG_HOME"]) / "nsa" / "config.toml").unlink()
    assert config_files.find(here, env) is None


def test_a_broken_file_is_an_error_naming_it(tree) -> None:
    here, env = tree
    (here / "nsa.toml").write_text("[thresholds\n")
    with pytest.raises(InputError, match=r"settings file .*nsa\.toml is not valid TOML.*--no-config"):
        config_files.find(here, env)


@pytest.fixture
def demo_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("ws") / "w.duckdb"
    res = CliRunner().invoke(main, ["ingest", "--db", str(db), str(DEMO)])
    assert res.exit_code == EXIT_OK, res.output
    return db


def test_findings_reads_the_file_found_and_says_which(tree, demo_db: Path, monkeypatch) -> None:
    here, env = tree
    monkeypatch.chdir(here)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    (here / "nsa.toml").write_text("[gpu-idle]\nno_such_threshold = 1\n")
    res = CliRunner().invoke(main, ["-v", "findings", "--db", str(demo_db)])
    assert res.exit_code == EXIT_ERROR, res.output
    assert f"nsa: config: {here / 'nsa.toml'}" in res.output
    assert "no_such_threshold" in res.output and str(here / "nsa.toml") in res.output
    res = CliRunner().invoke(main, ["-v", "findings", "--db", str(demo_db), "--no-config"])
    assert res.exit_code == EXIT_OK, res.output
    assert "nsa: config: none (--no-config)" in res.output
    # the found file has --config's meaning: the same thresholds give the same findings
    (here / "nsa.toml").write_text(
        "[copy-dominated]\ncopy_share_warning = 0.99\ncopy_share_critical = 0.999\n"
    )
    found = CliRunner().invoke(main, ["findings", "--db", str(demo_db), "--format", "json"])
    given = CliRunner().invoke(
        main, ["findings", "--db", str(demo_db), "--format", "json", "--config", str(here / "nsa.toml")]
    )
    default = CliRunner().invoke(main, ["findings", "--db", str(demo_db), "--format", "json", "--no-config"])
    assert found.exit_code == given.exit_code == default.exit_code == EXIT_OK
    assert found.output == given.output
    assert found.output != default.output  # the demo's copy-dominated finding is judged on other limits
    both = CliRunner().invoke(main, ["findings", "--db", str(demo_db), "--config", "x.toml", "--no-config"])
    assert both.exit_code == EXIT_ERROR and "not both" in both.output
