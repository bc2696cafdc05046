"""The example notebooks run headless, top to bottom, without a cell error.

Each runs from a temporary copy (so no output lands in the checkout) with $NSA_DB pointing at a
fresh workspace. Notebooks are committed without outputs; a test checks that too.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
REALDATA = ROOT.parent / "shared" / "realdata"

# Notebooks that cannot fall back to the bundled demo export, and the real files they need.
NEEDS_REALDATA = {
    "02_nsys_ncu_stalls.ipynb": [
        "nsys/h100_nsys2025.3_transformer_train.sqlite",
        "ncu/h100_ncu2025.3_transformer_train_details.csv",
        "ncu/h100_ncu2025.3_transformer_train_raw.csv",
    ],
}
# Figures each notebook must draw: a plotting cell that silently shows nothing is a failure too.
PLOTS = {"01_quickstart.ipynb": 2, "02_nsys_ncu_stalls.ipynb": 2, "03_write_your_own_query.ipynb": 1}
CELL_TIMEOUT_S = 120
BUDGET_S = 30  # each notebook should stay quick; checked loosely (kernel start-up excluded)


def test_the_three_example_notebooks_exist() -> None:
    names = {p.name for p in NOTEBOOKS}
    assert {"01_quickstart.ipynb", "02_nsys_ncu_stalls.ipynb", "03_write_your_own_query.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them before committing"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = [rel for rel in NEEDS_REALDATA.get(path.name, []) if not (REALDATA / rel).is_file()]
    if missing:
        pytest.skip(f"{path.name} needs real exports that are absent and has no fallback: {missing}")
    work = tmp_path / "notebooks"
    work.mkdir()
    copy = work / path.name
    shutil.copy(path, copy)
    monkeypatch.setenv("NSA_DB", str(tmp_path / "nsa.duckdb"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the notebooks use the inline (Agg) backend
    nb = nbformat.read(copy, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(work)}},
    )
    started = time.perf_counter()
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell failed:\n{exc}", pytrace=False)
    elapsed = time.perf_counter() - started
    images = sum(
        "image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    assert images >= PLOTS.get(path.name, 0), (
        f"{path.name} drew {images} figures, expected {PLOTS[path.name]}"
    )
    assert elapsed < BUDGET_S * 2, (
        f"{path.name} took {elapsed:.0f} s; keep example notebooks under {BUDGET_S} s"
    )
