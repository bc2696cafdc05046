"""A plugin package, installed with pip into a throwaway venv, extends that venv's `nsa`: its reader
ingests a new format, its rule fires in `nsa findings`, its query runs; a broken entry point is
one warning line and the rest works.

Installing offline: `pip install --no-index --no-build-isolation` of the project folder needs the
`wheel` package to build with this setuptools (65: bdist_wheel), which the machine lacks and
cannot download, so the test writes the plugin's wheel itself (a zip: the package, METADATA,
WHEEL, entry_points.txt, RECORD) and pip installs that file: the venv holds a real installed
distribution whose entry points `importlib.metadata` finds. The venv is made with
`--system-site-packages --without-pip` (pip runs from this environment with `--python`); a `.pth`
line adds this environment's site-packages, where nsight_analytics and its dependencies live.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

PACKAGE = {
    "nsa_toy/__init__.py": '''"""A toy nsa plugin: a reader, a rule and a query."""
from pathlib import Path

QUERIES = Path(__file__).parent / "sql"
''',
    "nsa_toy/reader.py": '''"""Toy kernel logs: a first line `NSA-TOY`, then `name,start_ns,end_ns` per kernel."""
from contextlib import contextmanager

from nsight_analytics.errors import InputError
from nsight_analytics.ingest import LoadResult, Reader


class ToyReader(Reader):
    name = "toy"

    def sniff(self, head):
        return head.startswith(b"NSA-TOY\\n")

    @contextmanager
    def open(self, con, path):
        rows = []
        for line in path.read_text().splitlines()[1:]:
            name, start, end = line.split(",")
            rows.append((name, int(start), int(end)))
        if not rows:
            raise InputError(f"{path}: a toy log without kernels")
        yield rows

    def load(self, con, rows, report_id, defer, progress):
        names = sorted({r[0] for r in rows})
        for i, n in enumerate(names):
            con.execute(
                "INSERT INTO kernel_names (report_id, name_id, name, short_name, kernels) VALUES (?, ?, ?, ?, ?)",
                [report_id, i, n, n, sum(r[0] == n for r in rows)],
            )
        con.executemany(
            "INSERT INTO kernel_rows (report_id, device_id, start_ns, end_ns, duration_ns, name_id) "
            "VALUES (?, 0, ?, ?, ?, ?)",
            [[report_id, s, e, e - s, names.index(n)] for n, s, e in rows],
        )
        return LoadResult(rows={"kernels": len(rows)}, activity_kinds=["kernel"])


READER = ToyReader()
''',
    "nsa_toy/rules.py": '''from nsight_analytics.rules import Finding, Threshold, rule


@rule(
    "toy-long-kernel", needs=("kernel",), severities=("warning",), queries=("toy_kernels",),
    thresholds=(Threshold("toy_long_ns", 1000, "ns", "A kernel this long is a warning."),),
)
def toy_long_kernel(ctx, rid):
    """A toy kernel runs long.

    Fix: make it shorter."""
    rows = ctx.query("toy_kernels", rid)
    return [
        Finding("toy-long-kernel", "warning", rid, f"{r.name} ran {r.longest_ns} ns", "long", "shorten it",
                {"longest_ns": r.longest_ns, "kernels": r.kernels}, r.longest_ns)
        for r in rows if r.longest_ns >= ctx["toy_long_ns"]
    ]
''',
    "nsa_toy/sql/toy_kernels.sql": """-- Each kernel name of a report: how many ran and the longest one.
-- reads kernel_rows, kernel_names
-- param report_id INTEGER = NULL: only this report (NULL: every report).
-- col report_id INTEGER: workspace report id.
-- col name VARCHAR: kernel name.
-- col kernels BIGINT: kernels of that name.
-- col longest_ns BIGINT: the longest one (ns).
SELECT k.report_id, n.name, count(*) AS kernels, max(k.end_ns - k.start_ns) AS longest_ns
FROM kernel_rows AS k JOIN kernel_names AS n USING (report_id, name_id)
WHERE $report_id IS NULL OR k.report_id = $report_id
GROUP BY ALL ORDER BY k.report_id, n.name
""",
}
ENTRY_POINTS = """[nsa.readers]
toy = nsa_toy.reader:READER

[nsa.rules]
toy = nsa_toy.rules
broken = nsa_toy.missing

[nsa.queries]
toy = nsa_toy:QUERIES
"""
DIST = "nsa_toy-0.1"


def _wheel(folder: Path) -> Path:
    """The plugin as a wheel file, written as `pip wheel` would (RECORD hashes included)."""
    files = {
        **{k: v.encode() for k, v in PACKAGE.items()},
        f"{DIST}.dist-info/METADATA": b"Metadata-Version: 2.1\nName: nsa-toy\nVersion: 0.1\n",
        f"{DIST}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{DIST}.dist-info/entry_points.txt": ENTRY_POINTS.encode(),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{DIST}.dist-info/RECORD,,")
    files[f"{DIST}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / "nsa_toy-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def toy_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pip", reason="the plugin is installed with this environment's pip (`pip --python`)")
    root = tmp_path_factory.mktemp("plugin")
    env = root / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    here = sysconfig.get_paths()["purelib"]  # this environment's: nsight_analytics, duckdb, click
    Path(purelib, "nsa_here.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--no-deps",
         "--no-build-isolation", str(_wheel(root))],
        capture_output=True, text=True,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return python


def _nsa(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NSA_DB", "PYTHONPATH")}
    env["XDG_CONFIG_HOME"] = str(cwd)  # no user settings file
    return subprocess.run(
        [str(python), "-m", "nsight_analytics", *args], cwd=cwd, capture_output=True, text=True, env=env
    )


def test_the_plugin_is_installed_in_the_venv_only(toy_venv: Path) -> None:
    from importlib import metadata

    assert not list(metadata.entry_points(group="nsa.readers"))  # this environment has none
    out = subprocess.run(
        [str(toy_venv), "-c", (
            "from importlib import metadata as m; print(m.version('nsa-toy'), "
            "sorted(e.name for e in m.entry_points(group='nsa.rules')))"
        )],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.split() == ["0.1", "['broken',", "'toy']"]


def test_a_plugin_reads_rules_and_queries_from_the_cli(toy_venv: Path, tmp_path: Path) -> None:
    log = tmp_path / "run.toy"
    log.write_text("NSA-TOY\ngemm,0,5000\ngemm,6000,6500\nrelu,7000,7200\n")
    db = str(tmp_path / "w.duckdb")
    ingest = _nsa(toy_venv, tmp_path, "ingest", str(log), "--db", db, "-q")
    assert ingest.returncode == 0, ingest.stderr
    assert "ingested as report 1 (toy)" in ingest.stdout
    # the broken entry point: one line, naming it; nothing else on stderr
    broken = [line for line in ingest.stderr.splitlines() if line.strip()]
    assert len(broken) == 1 and broken[0].startswith(
        "plugin broken (nsa.rules = nsa_toy.missing) not loaded:"
    )
    assert "ModuleNotFoundError" in broken[0] and "nsa runs without it" in broken[0]

    q = _nsa(toy_venv, tmp_path, "query", "toy_kernels", "--db", db, "--format", "json")
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout) == [
        {"report_id": 1, "name": "gemm", "kernels": 2, "longest_ns": 5000},
        {"report_id": 1, "name": "relu", "kernels": 1, "longest_ns": 200},
    ]
    listed = _nsa(toy_venv, tmp_path, "query", "--list")
    assert "toy_kernels" in listed.stdout

    f = _nsa(toy_venv, tmp_path, "findings", "--db", db, "--format", "json", "--fail-on", "warning")
    assert f.returncode == 1, f.stderr  # the toy rule's warning fails the gate
    toy = [x for x in json.loads(f.stdout) if x["rule_id"] == "toy-long-kernel"]
    assert [(x["title"], x["est_savings_ns"]) for x in toy] == [("gemm ran 5000 ns", 5000)]
    f = _nsa(toy_venv, tmp_path, "findings", "--db", db, "--format", "json", "--set", "toy_long_ns=6000")
    assert not [x for x in json.loads(f.stdout) if x["rule_id"] == "toy-long-kernel"]

    rules = _nsa(toy_venv, tmp_path, "rules", "--format", "json")
    row = next(r for r in json.loads(rules.stdout) if r["rule"] == "toy-long-kernel")
    assert row["looks for"] == "A toy kernel runs long." and row["thresholds"] == "toy_long_ns=1000"


def _dist(site: Path, name: str, entry_points: str | None) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def test_the_entry_point_scan_is_skipped_only_when_no_distribution_names_an_nsa_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nsight_analytics import plugins

    site = tmp_path / "site"
    _dist(site, "other", "[console_scripts]\nother = other:main\n")
    _dist(site, "bare", None)
    (site / "old.egg-info").write_text("Name: old\n")  # an egg-info file, not a folder
    monkeypatch.setattr(sys, "path", [str(site), str(tmp_path / "gone")])
    assert not plugins._may_declare_plugins()
    _dist(site, "toy", "[nsa.rules]\ntoy = nsa_toy.rules\n")
    assert plugins._may_declare_plugins()
    zipped = tmp_path / "lib.zip"
    zipfile.ZipFile(zipped, "w").close()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "gone"), str(zipped)])  # a zip: unsure, so scan
    assert plugins._may_declare_plugins()


def test_plugins_load_reads_no_entry_points_when_none_can_be_declared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib import metadata

    from nsight_analytics import plugins

    def scanned() -> None:
        raise AssertionError("entry points scanned")

    monkeypatch.setattr(plugins, "_LOADED", {})
    monkeypatch.setattr(plugins, "_may_declare_plugins", lambda: False)
    monkeypatch.setattr(metadata, "entry_points", scanned)
    assert plugins.load() == []
    assert plugins.loaded() == {g: [] for g in plugins.GROUPS}
