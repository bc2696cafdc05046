"""Python 3.10 is supported (README, `requires-python`): the rules config reads TOML through the
standard library's `tomllib` on 3.11+ and through `tomli`, the same parser, on 3.10.

The fallback is also run on newer Pythons, in a subprocess where importing `tomllib` fails as it
does on 3.10; `.ci/run` runs the whole suite on 3.10 and 3.13 as well.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsight_analytics.rules import config

ROOT = Path(__file__).resolve().parents[1]

CONFIG_TOML = """\
# nsa-rules.toml
[thresholds]
small_kernel_ns = 5000
idle_share_warning = 0.125
"""


def test_the_toml_parser_in_use_matches_the_python() -> None:
    expected = "tomllib" if sys.version_info >= (3, 11) else "tomli"
    assert config.tomllib.__name__ == expected


def test_config_file_is_read_through_the_active_parser(tmp_path: Path) -> None:
    path = tmp_path / "nsa-rules.toml"
    path.write_text(CONFIG_TOML, encoding="utf-8")
    values = config.load_config(path)
    assert values["small_kernel_ns"] == 5000
    assert values["idle_share_warning"] == 0.125
    # The parser's own decode error becomes a ConfigError (its class comes from the same module).
    path.write_text("[thresholds\nsmall_kernel_ns = ", encoding="utf-8")
    with pytest.raises(config.ConfigError, match="not valid TOML"):
        config.load_config(path)


def test_tomli_is_a_dependency_below_python_311() -> None:
    pyproject = config.tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    deps = [d.replace(" ", "").replace('"', "'") for d in pyproject["project"]["dependencies"]]
    assert any(d.startswith("tomli>=") and d.endswith(";python_version<'3.11'") for d in deps), deps
    assert pyproject["project"]["requires-python"] == ">=3.10"


def test_config_falls_back_to_tomli_without_tomllib(tmp_path: Path) -> None:
    """As on Python 3.10: `import tomllib` fails, and the rules config, `nsa rules` and a config
    file still work through tomli."""
    if importlib.util.find_spec("tomli") is None:
        pytest.skip(
            f"tomli is not installed on Python {sys.version.split()[0]}; the 3.10 fallback needs it "
            "(pip install -e '.[test]' installs it)"
        )
    path = tmp_path / "nsa-rules.toml"
    path.write_text(CONFIG_TOML, encoding="utf-8")
    script = textwrap.dedent(
        f"""
        import sys

        class NoTomllib:
            # A meta path finder that makes `import tomllib` fail, as on Python 3.10.
            def find_spec(self, name, path=None, target=None):
                if name == "tomllib" or name.startswith("tomllib."):
                    raise ModuleNotFoundError("No module named 'tomllib'", name="tomllib")
                return None

        sys.meta_path.insert(0, NoTomllib())
        for name in [m for m in sys.modules if m == "tomllib" or m.startswith("tomllib.")]:
            del sys.modules[name]

        from nsight_analytics.rules import config
        from nsight_analytics.cli import main

        assert config.tomllib.__name__ == "tomli", config.tomllib
        values = config.load_config({str(path)!r})
        assert values["small_kernel_ns"] == 5000 and values["idle_share_warning"] == 0.125, values
        main(["rules", "--format", "json"], standalone_mode=False)
        print("fallback ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], check=False, cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "fallback ok" in proc.stdout
    assert "small_kernel_ns" in proc.stdout
