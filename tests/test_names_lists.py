"""Names that stay one thing and lists that fit: `nsa reports` columns named as in SQL, shell
completion of query names, parameters, report ids and runs, ingest progress with a percentage and
time left, and diff kernel rows that never read the same for two kernels."""

from __future__ import annotations

import csv
import io
import sqlite3
from pathlib import Path

import duckdb
import pytest
from click.shell_completion import ShellComplete
from click.testing import CliRunner

from nsight_analytics import queries
from nsight_analytics.cli import EXIT_OK, _progress, main
from nsight_analytics.render.diff import _cut_distinct, _kernel_names

DEMO = Path(__file__).resolve().parents[1] / "nsight_analytics" / "data" / "demo_pageable_h2d.sqlite"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ws") / "w.duckdb"
    for args in (
        ["ingest", "--db", str(path), str(DEMO)],
        ["ingest", "--db", str(path), "--run", "pair", str(DEMO)],
    ):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == EXIT_OK, res.output
    return path


def test_reports_columns_are_the_sql_columns(db: Path) -> None:
    res = CliRunner().invoke(main, ["reports", "--db", str(db), "--format", "csv"])
    assert res.exit_code == EXIT_OK, res.output
    rows = list(csv.DictReader(io.StringIO(res.output)))
    with duckdb.connect(str(db), read_only=True) as con:
        columns = [r[0] for r in con.execute("DESCRIBE reports").fetchall()]
        paths = [r[0] for r in con.execute("SELECT source_path FROM reports ORDER BY report_id").fetchall()]
    assert set(rows[0]) <= set(columns), set(rows[0]) - set(columns)
    assert [r["source_path"] for r in rows] == paths == [str(DEMO)]


def complete(args: list[str], incomplete: str) -> list[str]:
    return [
        c.value for c in ShellComplete(main, {}, "nsa", "_NSA_COMPLETE").get_completions(args, incomplete)
    ]


def test_completion_knows_queries_and_their_parameters() -> None:
    lib = queries.library()
    assert complete(["query"], "ga") == sorted(n for n in lib if n.startswith("ga"))
    assert complete(["query"], "") == list(lib)
    gaps = [f"{p.name}=" for p in lib["gaps"].params]
    assert complete(["query", "gaps", "-p"], "") == gaps
    assert complete(["query", "gaps", "-p", "report_id=1", "-p"], "") == [
        g for g in gaps if g != "report_id="
    ]
    allowed = next(p.allowed for p in lib["op_kernels"].params if p.name == "level")
    assert allowed and complete(["query", "op_kernels", "-p"], "level=") == [f"level={v}" for v in allowed]
    assert complete(["query", "no_such_query", "-p"], "") == []


def test_completion_knows_report_ids_and_runs(db: Path, tmp_path: Path) -> None:
    with duckdb.connect(str(db), read_only=True) as con:
        ids = [str(r[0]) for r in con.execute("SELECT report_id FROM reports ORDER BY 1").fetchall()]
        runs = con.execute("SELECT run_id, name FROM runs ORDER BY run_id").fetchall()
    assert ids and runs
    assert complete(["findings", "--db", str(db), "--report"], "") == ids
    assert complete(["summary", "--db", str(db), "--run"], "") == [n for _, n in runs] + [
        str(i) for i, _ in runs
    ]
    assert complete(["query", "gaps", "--db", str(db), "--report"], "") == ids
    assert complete(["diff", "--db", str(db)], "")[: len(ids)] == ids
    assert complete(["findings", "--db", str(tmp_path / "none.duckdb"), "--report"], "") == []


def test_progress_shows_percentage_and_time_left() -> None:
    from rich.console import Console

    out = io.StringIO()
    bar, update = _progress(False, Console(file=out, force_terminal=True, width=120))
    assert bar is not None and update is not None
    bar.start()
    update("kernel_rows", 250, 1000)
    bar.refresh()
    bar.stop()
    text = out.getvalue()
    assert "ingest: kernel_rows" in text and "25%" in text and "left" in text
    assert _progress(True) == (None, None)


def test_nsys_progress_moves_with_the_rows_copied(tmp_path: Path) -> None:
    from nsight_analytics import api

    with sqlite3.connect(DEMO) as src:
        kernels = src.execute("SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    seen: list[tuple[str, int, int]] = []
    con = api.connect(tmp_path / "p.duckdb")
    api.ingest(con, DEMO, progress=lambda step, done, total: seen.append((step, done, total)))
    con.close()
    totals = {t for _, _, t in seen}
    assert len(totals) == 1 and seen[-1][1] == seen[-1][2]
    done = [d for _, d, _ in seen]
    assert done == sorted(done)
    step = {s: d for s, d, _ in seen}
    after = seen[[s for s, _, _ in seen].index("kernel_rows") + 1][1]
    assert after - step["kernel_rows"] == kernels  # the kernel step weighs its rows


# kernel names of h100_nsys2025.3_train_foreach_gpumetrics (nsys 2025.3): four lambdas of one template
LAMBDAS = [
    (
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::<unnamed>::lerp_scalar_kernel("
        "at::TensorIteratorBase &, const c10::Scalar &)::[lambda() (instance 2)]::operator ()() const::[lambda() "
        "(instance 2)]::operator ()() const::[lambda(float, float) (instance 1)], std::array<char *, (unsigned long)3>>"
        "(int, T2, T3)"
    ),
    (
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::addcdiv_cuda_kernel(at::TensorIteratorBase &,"
        " const c10::Scalar &)::[lambda() (instance 2)]::operator ()() const::[lambda() (instance 7)]::operator ()() "
        "const::[lambda(float, float, float) (instance 1)], std::array<char *, (unsigned long)4>>(int, T2, T3)"
    ),
    (
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::sqrt_kernel_cuda(at::TensorIteratorBase &)::"
        "[lambda() (instance 2)]::operator ()() const::[lambda() (instance 2)]::operator ()() const::[lambda(float) "
        "(instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)"
    ),
    (
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::addcmul_cuda_kernel(at::TensorIteratorBase &,"
        " const c10::Scalar &)::[lambda() (instance 2)]::operator ()() const::[lambda() (instance 7)]::operator ()() "
        "const::[lambda(float, float, float) (instance 1)], std::array<char *, (unsigned long)4>>(int, T2, T3)"
    ),
    (
        "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
        "float, float>, unsigned int, float, (int)4, (int)4>>(T3)"
    ),
    (
        "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
        "at::native::sum_functor<float, float, float>::operator ()(at::TensorIterator &)::[lambda(float, float) "
        "(instance 1)]>, unsigned int, float, (int)4, (int)4>>(T3)"
    ),
    (
        "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)1>, "
        "at::native::<unnamed>::BinaryOpScalarFunctor<float, (int)1, (int)1, (int)0>, std::plus<float>, float>(T1, T2, T3...)"
    ),
    (
        "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::FusedOptimizerTensorListMetadata"
        "<(int)4>, at::native::<unnamed>::FusedAdamMathFunctor<float, (int)4, (at::native::ADAM_MODE)1, (bool)0>, "
        "const float *, double, double, double, double, double, bool, const float *, const float *>(T1, T2, T3...)"
    ),
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(T1::Params)",
]


def test_diff_kernel_names_stay_distinct() -> None:
    names = _kernel_names(LAMBDAS)
    assert len(set(names)) == len(names), names
    assert names[:4] == [
        "vectorized_elementwise_kernel<lerp_scalar_kernel>",
        "vectorized_elementwise_kernel<addcdiv_cuda_kernel>",
        "vectorized_elementwise_kernel<sqrt_kernel_cuda>",
        "vectorized_elementwise_kernel<addcmul_cuda_kernel>",
    ]
    for width in (12, 20, 36, 80):
        cut = _cut_distinct(names, width)
        assert len(set(cut)) == len(cut), (width, cut)
        assert all(len(c) <= width for c in cut), (width, cut)
    assert _cut_distinct(["x" * 50 + "<addcdiv>", "x" * 50 + "<addcmul>"], 30) == [
        "x" * 20 + "…<addcdiv>",
        "x" * 20 + "…<addcmul>",
    ]
    assert _cut_distinct(["same", "same"], 3) == ["sa…", "sa…"]  # one text twice is one name
