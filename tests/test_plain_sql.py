"""Plain SQL and the library's table macros on a connection from `nsa.connect()` see what
`nsa.query` sees: what queries work out on first use (the GPU timeline, its launch calls and
communication flag) is worked out when the connection opens, not left empty for SQL that
cannot ask for it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import nsight_analytics as nsa
from rows import gunzipped_sqlite

DATA = Path(__file__).resolve().parent / "data"
IDLE = DATA / "h100_nsys2025.3_idle_gaps.sqlite"
DDP = sorted((DATA / "ddp" / "nsys").glob("h200x2_nsys2025.3_ddp_w2_rank*.sqlite.gz"))


def _ingested(db: Path, files: list[Path], run: str | None = None) -> None:
    """`files` ingested as `nsa ingest` does (nothing worked out beyond the ingest)."""
    con = nsa.connect(db, load_deferred=False)
    try:
        ids = [nsa.ingest(con, f).report_id for f in files]
        if run:
            nsa.make_run(con, ids, run)
    finally:
        con.close()


@pytest.mark.parametrize("name", ["gaps", "utilization", "stream_gaps"])
def test_a_table_macro_first_answers_as_the_query(tmp_path: Path, name: str) -> None:
    db = tmp_path / "w.duckdb"
    _ingested(db, [IDLE])
    con = nsa.connect(db)
    try:
        raw = sorted(con.sql(f"SELECT * FROM {name}()").fetchall(), key=repr)
        assert raw  # the idle-gaps program idles between its bursts
        assert raw == sorted(nsa.query(con, name).fetchall(), key=repr)
        with sqlite3.connect(IDLE) as src:
            kernels = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        assert con.execute("SELECT count(*) FROM gpu_timeline WHERE kind = 'kernel'").fetchone()[0] == kernels
    finally:
        con.close()


def test_a_run_macro_first_counts_the_communication(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    _ingested(db, DDP, "w2")
    con = nsa.connect(db)
    try:
        raw = con.sql("SELECT rank, comm_ns, steps FROM comm_overlap() ORDER BY rank").fetchall()
        # each rank's NCCL kernels, from its export: communication is at most their summed time
        for (rank, comm_ns, steps), path in zip(raw, DDP):
            with gunzipped_sqlite(path, tmp_path) as src:
                nccl = src.execute(
                    "SELECT sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                    "ON s.id = k.shortName WHERE s.value LIKE 'nccl%'"
                ).fetchone()[0]
            assert steps > 0 and 0 < comm_ns <= nccl, rank
        lib = nsa.query(con, "comm_overlap").fetchall()
        cols = [d[0] for d in nsa.query(con, "comm_overlap").description]
        assert raw == [(r[cols.index("rank")], r[cols.index("comm_ns")], r[cols.index("steps")]) for r in lib]
    finally:
        con.close()
