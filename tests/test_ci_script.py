""".ci/run's install step says what happened: not on CI, not root, no apt-get, or what it would
install. Run with NSA_CI_DRY_RUN=1 (nothing installed, no tests run) and a PATH of stubs: no nsys,
no chromium, `id` and `apt-get` as each case needs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

NSYS_SKIPS = "the nsys stats comparison and the .nsys-rep end-to-end tests will skip"
BROWSER_SKIPS = "the report browser tests (tests/test_report_browser.py) will skip"
SPARK_SKIPS = "the Spark engine tests (tests/test_spark.py) will skip"


def run_ci(tmp_path: Path, ci: str | None, uid: int, apt_get: bool) -> subprocess.CompletedProcess[str]:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for tool in ("dirname", "grep", "sed"):
        found = shutil.which(tool)
        assert found, tool
        (stubs / tool).symlink_to(found)
    (stubs / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (stubs / "id").chmod(0o755)
    if apt_get:  # would fail the test if run: the dry run must not call it
        (stubs / "apt-get").write_text("#!/bin/sh\necho apt-get ran >&2\nexit 99\n")
        (stubs / "apt-get").chmod(0o755)
    env = {"PATH": str(stubs), "NSA_CI_DRY_RUN": "1", **({"CI": ci} if ci is not None else {})}
    bash = shutil.which("bash")
    assert bash
    return subprocess.run([bash, str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("ci", [None, "", "1"])
def test_root_outside_ci_installs_nothing_and_says_so(tmp_path: Path, ci: str | None) -> None:
    res = run_ci(tmp_path, ci, uid=0, apt_get=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        (
            f"no nsys here and not on CI (CI is not 'true'), so nothing is installed: {NSYS_SKIPS}; "
            "install nsys (Debian: apt-get install nsight-systems, from non-free) to run them."
        ),
        (
            f"no chromium and chromedriver here and not on CI (CI is not 'true'), so nothing is installed: "
            f"{BROWSER_SKIPS}; install chromium and chromedriver (Debian: apt-get install chromium "
            "chromium-driver) to run them."
        ),
        (
            f"no Java here and not on CI (CI is not 'true'), so nothing is installed: {SPARK_SKIPS}; "
            "install Java (Debian: apt-get install openjdk-17-jre-headless) to run them."
        ),
        "dry run: the tests are not run.",
    ]
    assert "apt-get ran" not in res.stderr


def test_ci_without_root(tmp_path: Path) -> None:
    res = run_ci(tmp_path, "true", uid=1000, apt_get=True)
    lines = res.stdout.splitlines()
    assert lines[0] == (
        "no nsys on this CI machine and not root (uid 1000), so it cannot be installed: "
        f"{NSYS_SKIPS}; run .ci/run as root or install nsys (Debian: apt-get install nsight-systems, "
        "from non-free)."
    )
    assert lines[1].startswith("no chromium and chromedriver on this CI machine and not root (uid 1000)")


def test_ci_root_without_apt_get(tmp_path: Path) -> None:
    res = run_ci(tmp_path, "true", uid=0, apt_get=False)
    lines = res.stdout.splitlines()
    assert lines[0] == (
        f"no nsys on this CI machine and no apt-get to install it: {NSYS_SKIPS}; install nsys "
        "(Debian: apt-get install nsight-systems, from non-free) by other means."
    )
    assert lines[1].startswith("no chromium and chromedriver on this CI machine and no apt-get")


def test_ci_root_with_apt_get_would_install(tmp_path: Path) -> None:
    res = run_ci(tmp_path, "true", uid=0, apt_get=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "dry run: would install nsight-systems with apt-get (adding the contrib and non-free components).",
        "dry run: would install chromium chromium-driver with apt-get.",
        "dry run: would install openjdk-17-jre-headless with apt-get.",
        "dry run: the tests are not run.",
    ]
    assert "apt-get ran" not in res.stderr
