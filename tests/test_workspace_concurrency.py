"""Several processes on one workspace: readers side by side, a second writer told plainly.

DuckDB's file lock is per process, so these tests hold connections in real subprocesses; inside
one process DuckDB shares the open database and no lock is ever taken.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

import nsight_analytics as nsa
from nsight_analytics import queries
from nsight_analytics.cli import demo_input

HOLD = textwrap.dedent(
    """
    import sys
    import nsight_analytics as nsa
    con = nsa.connect(sys.argv[1], read_only=sys.argv[2] == "ro")
    print("ready", flush=True)
    sys.stdin.readline()                      # hold the connection until the test says go
    n = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
    print(f"kernels {n}", flush=True)
    con.close()
    """
)

TRY = textwrap.dedent(
    """
    import sys
    import nsight_analytics as nsa
    try:
        nsa.connect(sys.argv[1], read_only=sys.argv[2] == "ro").close()
    except nsa.WorkspaceError as exc:
        print(f"WorkspaceError: {exc}")
        sys.exit(3)
    print("opened")
    """
)

NSA = "import sys; from nsight_analytics.cli import main; sys.argv[0] = 'nsa'; main()"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ws") / "w.duckdb"
    con = nsa.connect(path)
    nsa.ingest(con, demo_input())
    con.close()
    return path


@pytest.fixture(scope="module")
def kernel_count(db: Path) -> int:
    con = nsa.connect(db, read_only=True)
    try:
        return int(con.execute("SELECT count(*) FROM kernels").fetchone()[0])
    finally:
        con.close()


class Holder:
    """A subprocess holding a connection open until released."""

    def __init__(self, db: Path, mode: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(db), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            raise AssertionError(f"holder failed to open the workspace: {line}{self.proc.stderr.read()}")

    def release(self) -> str:
        out, err = self.proc.communicate("go\n", timeout=60)
        assert self.proc.returncode == 0, err
        return out.strip()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


NO_WAIT = {**os.environ, "NSA_LOCK_WAIT": "0"}


def try_open(db: Path, mode: str, env: dict[str, str] = NO_WAIT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", TRY, str(db), mode], capture_output=True, text=True, timeout=60, env=env
    )


def test_two_read_only_processes_at_once(db: Path, kernel_count: int) -> None:
    first = Holder(db, "ro")
    try:
        second = Holder(db, "ro")  # opens while the first still holds its connection
        try:
            third = try_open(db, "ro")
            assert third.returncode == 0 and third.stdout.strip() == "opened", third.stderr
            assert first.release() == f"kernels {kernel_count}"
            assert second.release() == f"kernels {kernel_count}"
        finally:
            second.kill()
    finally:
        first.kill()


def test_second_writer_gets_a_workspace_error(db: Path) -> None:
    writer = Holder(db, "rw")
    try:
        res = try_open(db, "rw")
        assert res.returncode == 3, res.stdout + res.stderr
        assert res.stdout.startswith(f"WorkspaceError: workspace {db} is open in another process (process ")
        assert "only one process write it" in res.stdout and "NSA_LOCK_WAIT" in res.stdout
        assert "--read-only" not in res.stdout  # it would not help a writer
        assert "Traceback" not in res.stdout + res.stderr
        writer.release()
    finally:
        writer.kill()


def test_reader_beside_a_writer_gets_a_workspace_error(db: Path) -> None:
    writer = Holder(db, "rw")
    try:
        res = try_open(db, "ro")
        assert res.returncode == 3, res.stdout + res.stderr
        assert "is being written by another process (process " in res.stdout
        assert "--read-only" not in res.stdout  # the reader already is one
        writer.release()
    finally:
        writer.kill()


def test_reader_waits_for_a_short_write(db: Path, kernel_count: int) -> None:
    """A query started during a short ingest waits for the lock instead of failing."""
    writer = Holder(db, "rw")
    try:
        reader = subprocess.Popen(
            [sys.executable, "-c", TRY, str(db), "ro"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "NSA_LOCK_WAIT": "30"},
        )
        time.sleep(1.5)  # the reader is retrying now
        assert reader.poll() is None, reader.communicate()
        assert writer.release() == f"kernels {kernel_count}"
        out, err = reader.communicate(timeout=60)
        assert reader.returncode == 0 and out.strip() == "opened", out + err
    finally:
        writer.kill()


def test_cli_second_writer_is_one_sentence_and_exit_2(db: Path) -> None:
    writer = Holder(db, "rw")
    try:
        res = subprocess.run(
            [sys.executable, "-c", NSA, "ingest", "--db", str(db), str(demo_input())],
            capture_output=True,
            text=True,
            timeout=60,
            env=NO_WAIT,
        )
        writer.release()
    finally:
        writer.kill()
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert "is open in another process" in res.stderr


# SQLAlchemy engine: pandas.read_sql on the workspace, with the library's table macros.


def test_read_sql_through_the_engine(db: Path, kernel_count: int) -> None:
    eng = nsa.engine(db, read_only=True)
    df = pd.read_sql("SELECT count(*) AS n FROM kernels", eng)
    assert df["n"].tolist() == [kernel_count]
    arrow_backed = pd.read_sql("SELECT name, duration_ns FROM kernels", eng, dtype_backend="pyarrow")
    assert len(arrow_backed) == kernel_count
    assert str(arrow_backed["duration_ns"].dtype) == "int64[pyarrow]"


def test_engine_beside_a_connection_in_the_same_process(db: Path, kernel_count: int) -> None:
    """duckdb-engine's own connect config would make DuckDB refuse a second connection here."""
    con = nsa.connect(db)
    try:
        df = pd.read_sql("SELECT count(*) AS n FROM kernels", nsa.engine(db))
        assert df["n"].tolist() == [kernel_count]
    finally:
        con.close()


def test_engine_connections_have_the_query_macros(db: Path) -> None:
    """Macros are TEMP: every new DBAPI connection of the engine must get its own."""
    eng = nsa.engine(db, read_only=True)
    sql = "SELECT function_name FROM duckdb_functions() WHERE function_type = 'table_macro'"
    for _ in range(2):  # two separate connections (the engine does not pool)
        with eng.connect() as c:
            raw = c.connection.driver_connection  # duckdb-engine's wrapper of the duckdb connection
            expected = set(queries.library()) - set(queries.install_macros(raw))
            names = {r[0] for r in c.exec_driver_sql(sql).fetchall()}
            assert expected == set(queries.library()), "every library query should install as a macro"
            assert expected <= names


def test_library_query_macro_through_read_sql(db: Path) -> None:
    if "kernel_summary" not in queries.library():
        pytest.skip("no kernel_summary query yet")
    con = nsa.connect(db, read_only=True)
    failed = queries.install_macros(con)
    con.close()
    assert "kernel_summary" not in failed, (
        f"kernel_summary's table macro does not install: {failed['kernel_summary']}"
    )
    report = queries.macro_param_name("report_id", queries.get("kernel_summary"))
    via_engine = pd.read_sql(f"SELECT * FROM kernel_summary({report} := 1)", nsa.engine(db, read_only=True))
    con = nsa.connect(db, read_only=True)
    try:
        direct = nsa.query(con, "kernel_summary", report_id=1).df()
    finally:
        con.close()
    pd.testing.assert_frame_equal(via_engine, direct, check_dtype=False)


def test_read_only_engine_beside_another_reading_process(db: Path, kernel_count: int) -> None:
    other = Holder(db, "ro")
    try:
        df = pd.read_sql("SELECT count(*) AS n FROM kernels", nsa.engine(db, read_only=True))
        assert df["n"].tolist() == [kernel_count]
        assert other.release() == f"kernels {kernel_count}"
    finally:
        other.kill()


def test_engine_does_not_keep_the_workspace_locked(db: Path) -> None:
    """A notebook's engine must not block `nsa ingest` in a terminal between its queries."""
    eng = nsa.engine(db)
    pd.read_sql("SELECT 1 AS one", eng)
    res = try_open(db, "rw")
    assert res.returncode == 0, res.stdout + res.stderr
