"""Shared test helpers: where the real exports live, and fresh workspaces."""

from __future__ import annotations

from collections.abc import Iterator
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


# The GPU time of the kernels launched inside closed NVTX ranges, summed over the ranges (nested
# ranges each count a kernel): a range join on the export itself, independent of nsa's running
# totals and ASOF joins.
NVTX_KERNEL_NS_SQL = """
    SELECT sum(k."end" - k.start) FROM NVTX_EVENTS e
    JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = e.globalTid AND r.start BETWEEN e.start AND e."end"
    JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
         AND k.globalPid / 16777216 = r.globalTid / 16777216
    WHERE e.eventType IN (59, 60) AND e."end" IS NOT NULL"""


@pytest.fixture(autouse=True, scope="session")
def _template_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """New workspaces are copies of a template cached per library version (workspace.cache_dir):
    the session's own folder, not the user's cache, and shared by its tests, as by a user's runs."""
    from nsight_analytics.workspace import ENV_CACHE

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_CACHE, str(tmp_path_factory.mktemp("nsa_cache")))
        yield


@pytest.fixture(autouse=True)
def _printed_to_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables and findings are as wide as the terminal, $COLUMNS first: the tests read them as
    printed to a pipe, whatever the shell exports or pytest-xdist's workers set (COLUMNS=80)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture
def workspace(tmp_path: Path):
    """A fresh writable workspace connection."""
    import nsight_analytics as nsa

    con = nsa.connect(tmp_path / "w.duckdb")
    yield con
    con.close()


# --- nsys query library fixtures (tests/test_nsys_queries.py, tests/test_query_contracts.py) ---


@pytest.fixture(scope="session")
def nsys_real_workspace(tmp_path_factory):
    """(connection, {file name: report_id}): every real nsys export, ingested once per session."""
    import nsight_analytics as nsa

    if not NSYS_FILES:
        pytest.skip(
            f"real data not available: {REALDATA / 'nsys'} (tests expect ../shared/realdata beside the repo)"
        )
    con = nsa.connect(tmp_path_factory.mktemp("nsys_real") / "w.duckdb")
    # and our GPU-metrics capture: the one export whose metrics cover every phase the queries split
    gpu_metrics = ROOT / "tests" / "data" / "h100_nsys2025.3_saturation_gpumetrics.sqlite.gz"
    ids = {path.name: nsa.ingest(con, path).report_id for path in [*NSYS_FILES, gpu_metrics]}
    nsa.query(con, "nvtx_summary")  # copies the deferred nvtx_ranges table once
    yield con, ids
    con.close()


@pytest.fixture(scope="session")
def nsys_any_workspace(request, tmp_path_factory):
    """(connection, {file name: report_id}) for checks that hold on any set of exports with rows
    (query contracts, the queries the rules declare): `nsys_real_workspace` when ../shared/realdata
    is there; otherwise what ships in the repository, so a clone without it still runs them: the
    bundled demo export, tests/data's nsys captures, a PyTorch profiler trace of tests/data/kineto
    (its memory events feed the memory queries) and every code-built fixture export of
    fixtures/nsys_fixtures.py (the old 2.x and 3.0.0 schemas, edge cases, no GPU activity)."""
    if NSYS_FILES:
        yield request.getfixturevalue("nsys_real_workspace")
        return
    import nsight_analytics as nsa
    from fixtures.nsys_fixtures import write_all

    folder = tmp_path_factory.mktemp("nsys_repo")
    write_all(folder / "fixtures")
    data = ROOT / "tests" / "data"
    files = [
        ROOT / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite",
        *sorted(data.glob("*.sqlite*")),
        data / "kineto" / "h100_torch2.11_train_fused_rerun.json.gz",
        *sorted((folder / "fixtures").glob("*.sqlite")),
    ]
    con = nsa.connect(folder / "w.duckdb")
    ids = {path.name: nsa.ingest(con, path).report_id for path in files}
    nsa.query(con, "nvtx_summary")  # copies the deferred nvtx_ranges table once
    yield con, ids
    con.close()


# --- end of nsys query library fixtures ---


@pytest.fixture(scope="session")
def real_sqlite(tmp_path_factory):
    """real_sqlite(name): a real nsys export as an SQLite path; `.sqlite.gz` files are unpacked
    once per session (the test is skipped when ../shared/realdata is absent)."""
    import gzip
    import shutil

    cache = tmp_path_factory.mktemp("realdata")

    def get(name: str) -> Path:
        plain = REALDATA / "nsys" / name
        if plain.exists():
            return plain
        packed = realdata("nsys", name + ".gz")
        out = cache / name
        if not out.exists():
            with gzip.open(packed) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        return out

    return get
