"""Shared test helpers: where the real exports live, and fresh workspaces."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REALDATA = ROOT.parent / "shared" / "realdata"
NSYS_FILES = sorted((REALDATA / "nsys").glob("*.sqlite")) if REALDATA.is_dir() else []
NCU_DIR = REALDATA / "ncu"


def realdata(*parts: str) -> Path:
    """A file of ../shared/realdata; the test is skipped when the folder is absent."""
    path = REALDATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not available: {path} (tests expect ../shared/realdata beside the repo)")
    return path


@pytest.fixture
def workspace(tmp_path: Path):
    """A fresh writable workspace connection."""
    import nsight_analytics as nsa

    con = nsa.connect(tmp_path / "w.duckdb")
    yield con
    con.close()
