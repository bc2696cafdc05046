"""`nsa export DIR` and `--data DIR`: a workspace as a hive-partitioned Parquet dataset, read back
with the query library, the rules and the summary unchanged; appending; bad input."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from conftest import ROOT, realdata
from nsight_analytics.cli import main
from nsight_analytics.dataset import _id_filter
from rows import required_params

DATA = ROOT / "tests" / "data"
GAPS = DATA / "h100_nsys2025.3_idle_gaps.sqlite"
W2 = sorted((DATA / "ddp" / "nsys").glob("h200x2_nsys2025.3_ddp_w2_rank*.sqlite.gz"))
NCU = DATA / "ncu" / "h100_ncu2025.3_summary_per_kernel.csv"
KINETO = DATA / "kineto" / "h100_torch2.11_train_fused_rerun.json.gz"


def _nsa(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args))
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A workspace of an nsys export with idle gaps, a real export, an ncu CSV and a two-rank DDP
    run, and the dataset exported from it."""
    tmp = tmp_path_factory.mktemp("dataset")
    db = tmp / "a.duckdb"
    files = [GAPS, realdata("nsys", "h200_nsys2024.6_nvfuser.sqlite"), NCU, KINETO]
    for f in files:
        assert _nsa("ingest", str(f), "--db", str(db), "-q")[0] == 0
    assert _nsa("ingest", *map(str, W2), "--db", str(db), "-q", "--run", "ddp_w2")[0] == 0
    out = tmp / "ds"
    code, stdout, _ = _nsa("export", str(out), "--db", str(db))
    assert code == 0, stdout
    return db, out


def _sorted(rows: list[tuple]) -> list[tuple]:
    """Rows in one order, floats to 12 significant digits: a sum over Parquet files adds in
    another order than over the workspace's table (the last bits of a double differ)."""
    rows = [tuple(float(f"{v:.12g}") if isinstance(v, float) else v for v in r) for r in rows]
    return sorted(rows, key=lambda r: tuple((v is None, str(v)) for v in r))


def test_layout_and_manifest(first):
    _, out = first
    manifest = json.loads((out / "_nsa_dataset.json").read_text())
    assert manifest["format"] == "nsa-dataset" and manifest["partition_by"] == ["run_id", "report_id"]
    assert [r["report_id"] for r in manifest["reports"]] == [1, 2, 3, 4, 5, 6]
    assert manifest["runs"] == [{"run_id": 1, "name": "ddp_w2"}]
    ddp = [r for r in manifest["reports"] if r["run_id"] == 1]
    assert len(ddp) == 2 and {Path(r["source_path"]).name for r in ddp} == {p.name for p in W2}
    for r in manifest["reports"]:
        assert (out / "reports" / r["partition"]).is_dir()
    assert (out / "kernel_rows" / "run_id=__HIVE_DEFAULT_PARTITION__" / "report_id=1").is_dir()
    assert (out / "runs" / "run_id=1").is_dir()
    assert not list(out.glob(".nsa-tmp-*"))
    # the kernels of the gaps export, counted on the export itself
    with sqlite3.connect(GAPS) as src:
        kernels = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    import duckdb

    files = str(out / "kernel_rows" / "**" / "*.parquet")
    got = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{files}', hive_partitioning = true) WHERE report_id = 1"
    ).fetchone()[0]
    assert got == kernels
    # nothing deferred: the NVTX ranges are there, with their kernels worked out
    from nsight_analytics import api

    con = api.connect(out)
    try:
        assert con.execute("SELECT count(*) FROM reports WHERE len(deferred_steps) > 0").fetchone()[0] == 0
        with sqlite3.connect(GAPS) as src:
            nvtx = src.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)").fetchone()[0]
        assert con.execute("SELECT count(*) FROM nvtx_ranges WHERE report_id = 1").fetchone()[0] == nvtx
    finally:
        con.close()


def test_every_query_same_rows(first):
    """Every library query gives the same rows on the dataset as on the workspace."""
    from nsight_analytics import api

    db, out = first
    ws, ds = api.reader(db, needs=api.dataset_reads()), api.connect(out)
    try:
        for q in api.library():
            args = required_params(q.name)
            if any(p.name == "run_id" for p in q.params):
                args["run_id"] = 1
            a = api.query(ws, q.name, **args)
            b = api.query(ds, q.name, **args)
            assert a.columns == b.columns, q.name
            assert _sorted(a.fetchall()) == _sorted(b.fetchall()), q.name
        for table in api.schema_tables():
            cols = ", ".join(f'"{c.name}"' for c in table.cols)
            a = ws.execute(f'SELECT {cols} FROM "{table.name}"').fetchall()
            b = ds.execute(f'SELECT {cols} FROM "{table.name}"').fetchall()
            if table.name == "nsa_workspace":
                assert a == b
                continue
            assert _sorted(a) == _sorted(b), table.name
    finally:
        ws.close()
        ds.close()


@pytest.mark.parametrize(
    "command",
    [
        ("findings", "--format", "json"),
        ("summary", "--format", "json"),
        ("reports", "--format", "csv"),
        ("runs", "--ranks", "--format", "csv"),
        ("query", "gaps", "--format", "csv"),
        ("sql", "SELECT report_id, count(*) FROM kernels GROUP BY 1 ORDER BY 1", "--format", "csv"),
        ("findings", "--run", "ddp_w2", "--format", "json"),
        ("diff", "5", "6", "--format", "json"),
    ],
)
def test_commands_same_output(first, command):
    db, out = first
    a = _nsa(*command, "--db", str(db))
    b = _nsa(*command, "--data", str(out))
    assert a[0] == b[0] and a[0] in (0, 1), (a, b)
    if command[0] == "reports":  # ingested_at aside, the same rows
        assert a[1].splitlines()[0] == b[1].splitlines()[0]
        assert len(a[1].splitlines()) == len(b[1].splitlines())
        return
    if "json" in command:
        assert _rounded(json.loads(a[1])) == _rounded(json.loads(b[1]))
    else:
        assert a[1] == b[1]


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def test_report_page(first, tmp_path):
    db, out = first
    code, _, err = _nsa("report", "--report", "1", "--data", str(out), "-o", str(tmp_path / "r.html"))
    assert code == 0, err
    code, _, err = _nsa("report", "--report", "1", "--db", str(db), "-o", str(tmp_path / "w.html"))
    assert code == 0, err
    page, want = (tmp_path / "r.html").read_text(), (tmp_path / "w.html").read_text()
    assert abs(len(page) - len(want)) < 200  # the same page but for the times it names


def test_append_and_skip(first, tmp_path):
    """A second workspace adds its reports with fresh ids, the same in every table; reports the
    dataset holds already are skipped."""
    _, first_out = first
    out = tmp_path / "ds"
    shutil.copytree(first_out, out)
    second = tmp_path / "b.duckdb"
    pageable = realdata("nsys", "h100_nsys2025.3_pageable_h2d.sqlite")
    w4 = sorted((DATA / "ddp" / "nsys").glob("h200x4_nsys2025.3_ddp_w4_rank[01].sqlite.gz"))
    assert _nsa("ingest", str(pageable), "--db", str(second), "-q")[0] == 0
    assert _nsa("ingest", *map(str, w4), "--db", str(second), "-q", "--run", "w4")[0] == 0
    assert _nsa("ingest", str(GAPS), "--db", str(second), "-q")[0] == 0  # also in the first: skipped
    code, stdout, stderr = _nsa("export", str(out), "--db", str(second))
    assert code == 0, stderr
    assert "report 4: skipped, already in" in stderr and "as report 1" in stderr
    assert stdout.splitlines()[:3] == [
        "report 1: exported as report 7",
        "report 2: exported as report 8",
        "report 3: exported as report 9",
    ]
    manifest = json.loads((out / "_nsa_dataset.json").read_text())
    assert [r["report_id"] for r in manifest["reports"]] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert manifest["runs"] == [{"run_id": 1, "name": "ddp_w2"}, {"run_id": 2, "name": "w4"}]

    from nsight_analytics import api

    con = api.connect(out)
    try:
        counts = dict(con.execute("SELECT report_id, count(*) FROM kernel_rows GROUP BY 1").fetchall())
        with sqlite3.connect(pageable) as src:
            assert counts[7] == src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        for rid, path in zip((8, 9), w4):
            with gzip.open(path) as fh:
                (tmp_path / "x.sqlite").write_bytes(fh.read())
            with sqlite3.connect(tmp_path / "x.sqlite") as src:
                want = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
                api_calls = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
            assert counts[rid] == want
            got = con.execute("SELECT count(*) FROM cuda_api WHERE report_id = $r", {"r": rid}).fetchone()[0]
            assert got == api_calls
        assert con.execute("SELECT report_id, run_id FROM reports ORDER BY 1").fetchall() == [
            (1, None), (2, None), (3, None), (4, None), (5, 1), (6, 1), (7, None), (8, 2), (9, 2),
        ]  # fmt: skip
        assert con.execute("SELECT run_id, rank, report_id FROM ranks ORDER BY 1, 2").fetchall() == [
            (1, 0, 5), (1, 1, 6), (2, 0, 8), (2, 1, 9),
        ]  # fmt: skip
        assert con.execute("SELECT run_id, name, world_size FROM runs ORDER BY 1").fetchall() == [
            (1, "ddp_w2", 2), (2, "w4", 4),
        ]  # fmt: skip
        # rowid stays a key: unique in each table across both exports
        for table in ("kernel_rows", "cuda_api", "nvtx_ranges"):
            n, distinct = con.execute(f"SELECT count(*), count(DISTINCT rowid) FROM {table}").fetchone()
            assert n == distinct, table
    finally:
        con.close()
    # the same workspace again: nothing new
    code, stdout, stderr = _nsa("export", str(out), "--db", str(second))
    assert code == 0 and stdout.strip().endswith("0 reports written, 4 skipped.")


def test_only_chosen_reports_and_runs(first, tmp_path):
    db, _ = first
    out = tmp_path / "ds"
    code, stdout, stderr = _nsa("export", str(out), "--db", str(db), "--report", "2", "--run", "ddp_w2")
    assert code == 0, stderr
    assert stdout.splitlines()[:3] == [
        "report 2: exported as report 1",
        "report 5: exported as report 2",
        "report 6: exported as report 3",
    ]
    code, stdout, _ = _nsa(
        "sql", "SELECT report_id, run_id FROM reports ORDER BY 1", "--data", str(out), "--format", "csv"
    )
    assert stdout.splitlines() == ["report_id,run_id", "1,", "2,1", "3,1"]


def test_interrupted_export_leaves_nothing_visible(first, tmp_path):
    """Partitions written without their manifest entry (an export cut short) are not read, and
    the next export removes them."""
    db, first_out = first
    out = tmp_path / "ds"
    shutil.copytree(first_out, out)
    stray = out / "kernel_rows" / "run_id=__HIVE_DEFAULT_PARTITION__" / "report_id=7"
    shutil.copytree(out / "kernel_rows" / "run_id=__HIVE_DEFAULT_PARTITION__" / "report_id=1", stray)
    (out / ".nsa-tmp-dead").mkdir()
    count = "SELECT count(DISTINCT report_id), count(*) FROM kernel_rows"
    assert _nsa("sql", count, "--data", str(out))[1] == _nsa("sql", count, "--db", str(db))[1]
    second = tmp_path / "b.duckdb"
    assert _nsa("ingest", str(realdata("nsys", "tiny_nsys2026.1.sqlite")), "--db", str(second), "-q")[0] == 0
    assert _nsa("export", str(out), "--db", str(second))[0] == 0
    assert not (out / ".nsa-tmp-dead").exists()
    _, stdout, _ = _nsa(
        "sql", "SELECT count(*) FROM kernel_rows WHERE report_id = 7", "--data", str(out), "--format", "csv"
    )
    with sqlite3.connect(realdata("nsys", "tiny_nsys2026.1.sqlite")) as src:
        want = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert stdout.splitlines()[1] == str(want)


def test_bad_input(first, tmp_path):
    db, out = first
    afile = tmp_path / "file"
    afile.write_text("x")
    code, _, err = _nsa("export", str(afile), "--db", str(db))
    assert (
        code == 2
        and err
        == f"Error: cannot export into {afile}: it is a file; choose a folder (new or an nsa dataset).\n"
    )
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    code, _, err = _nsa("export", str(other), "--db", str(db))
    assert code == 2 and "holds other files and is not an nsa dataset" in err and len(err.splitlines()) == 1
    code, _, err = _nsa("export", str(tmp_path / "no" / "ds"), "--db", str(db))
    assert (
        code == 2
        and err
        == f"Error: cannot export into {tmp_path / 'no' / 'ds'}: folder {tmp_path / 'no'} does not exist.\n"
    )
    old = tmp_path / "old"
    shutil.copytree(out, old)
    manifest = json.loads((old / "_nsa_dataset.json").read_text())
    manifest["schema_version"] = 99
    (old / "_nsa_dataset.json").write_text(json.dumps(manifest))
    for args in (("export", str(old), "--db", str(db)), ("reports", "--data", str(old))):
        code, _, err = _nsa(*args)
        assert (
            code == 2 and "schema version 99" in err and "upgrade nsa" in err and len(err.splitlines()) == 1
        )
    newer = tmp_path / "newer"
    shutil.copytree(out, newer)
    manifest = json.loads((newer / "_nsa_dataset.json").read_text())
    manifest["tables"]["memcpy"]["columns"].insert(-1, ["added_later", "BIGINT"])
    (newer / "_nsa_dataset.json").write_text(json.dumps(manifest))
    code, _, err = _nsa("export", str(newer), "--db", str(db))
    assert code == 2 and err == (
        f"Error: dataset {newer} holds table memcpy with other columns than this nsa writes (made by "
        "another nsa version); export into a new folder.\n"
    )
    code, _, err = _nsa("reports", "--data", str(other))
    assert code == 2 and err == (
        f"Error: {other} is not an nsa dataset (no _nsa_dataset.json in it); write one with `nsa export {other}`.\n"
    )
    code, _, err = _nsa("ingest", str(GAPS), "--data", str(out))
    assert code == 2 and "is a Parquet dataset, which nsa only reads" in err and len(err.splitlines()) == 1
    code, _, err = _nsa("diff", "--baseline", "main", "--save", "1", "--data", str(out))
    assert code == 2 and err == (
        f"Error: {out} is a Parquet dataset, which nsa only reads; store baselines in a workspace (--db).\n"
    )
    code, _, err = _nsa("reports", "--data", str(out), "--db", str(db))
    assert code == 2 and "give --db or --data, not both." in err
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        code, _, err = _nsa("export", str(locked / "ds"), "--db", str(db))
        assert code == 2 and "permission denied" in err


def test_the_manifest_ids_filter_is_ranges_and_exact():
    """A dataset view keeps the manifest's reports as id ranges (cheap against each file's hive
    partition, unlike a 1,000-id IN list) and nothing else, gaps and orphans included."""
    con = duckdb.connect()
    wanted = [3, 1, 2, 5, 7, 8, 8]
    where = _id_filter("report_id", wanted)
    assert where == "report_id BETWEEN 1 AND 3 OR report_id BETWEEN 5 AND 5 OR report_id BETWEEN 7 AND 8"
    got = con.sql(f"SELECT report_id FROM range(0, 12) AS t(report_id) WHERE {where} ORDER BY 1").fetchall()
    assert [r[0] for r in got] == sorted(set(wanted))
    assert con.sql(
        f"SELECT count(*) FROM range(5) AS t(report_id) WHERE {_id_filter('report_id', [])}"
    ).fetchone() == (0,)
    many = list(range(1, 200, 2))  # 100 runs of one id: an IN list
    assert _id_filter("report_id", many).startswith("report_id IN (1, 3, ")
