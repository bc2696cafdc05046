"""op_kernels on an nsys export, which has no PyTorch ops: every kernel, copy and memset is
'(no op)' when the export holds the CUDA API call that launched it (same correlation id and
process) and '(no launch call)' otherwise; worked out here with plain SQL on the SQLite export."""

from __future__ import annotations

import sqlite3

import pytest

import nsight_analytics as nsa
from conftest import realdata

# GPU work that can be placed on a timeline, and whether a runtime call of its process has its
# correlation id (the process is the high bits of nsys' globalPid / globalTid)
_EXPECTED_SQL = """
WITH work AS (
    SELECT 'kernel' AS kind, correlationId AS corr, globalPid / 16777216 AS pid, "end" - start AS ns
    FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start IS NOT NULL AND "end" >= start
    UNION ALL
    SELECT 'copy', correlationId, globalPid / 16777216, "end" - start
    FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE start IS NOT NULL AND "end" >= start
    UNION ALL
    SELECT 'copy', correlationId, globalPid / 16777216, "end" - start
    FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE start IS NOT NULL AND "end" >= start
)
SELECT CASE WHEN EXISTS (
           SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r
           WHERE r.correlationId = w.corr AND r.globalTid / 16777216 = w.pid
       ) THEN '(no op)' ELSE '(no launch call)' END AS op_name,
       sum(kind = 'kernel'), sum(kind = 'copy'), sum(ns)
FROM work AS w
GROUP BY 1
"""


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    path = realdata("nsys", "h100_nsys2025.3_transformer_train.sqlite")
    con = nsa.connect(tmp_path_factory.mktemp("op_kernels") / "w.duckdb")
    nsa.ingest(con, path)
    yield con, path
    con.close()


@pytest.mark.one_python  # a heavy sweep of real captures; lighter cases cover its code on every Python
@pytest.mark.parametrize("level", ["top", "leaf", "annotation"])
def test_nsys_work_is_no_op_or_no_launch_call(transformer, level):
    con, path = transformer
    with sqlite3.connect(path) as src:
        expected = {name: (kernels, copies, ns) for name, kernels, copies, ns in src.execute(_EXPECTED_SQL)}
    total = sum(ns for _, _, ns in expected.values())
    assert expected["(no op)"][0] > 0  # the capture's kernels have their launch calls

    rows = nsa.query(con, "op_kernels", level=level).fetchall()
    got = {r[1]: (r[3], r[4], r[5]) for r in rows}
    assert got == expected
    for r in rows:
        assert r[2] == 0 and r[6] is None and r[8] is None  # no op instances, no host time
        assert r[7] == pytest.approx(100.0 * r[5] / total)
