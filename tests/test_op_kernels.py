"""op_kernels on an nsys export, which has no PyTorch ops: every kernel, copy and memset is
'(no op)' when the export holds the CUDA API call that launched it (same correlation id and
process) and '(no launch call)' otherwise; worked out here with plain SQL on the SQLite export.
The workspace also holds a PyTorch trace, whose work is named by its ops."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

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


KINETO = Path(__file__).parent / "data" / "kineto" / "h100_torch2.11_train_fused_rerun.json.gz"


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    path = realdata("nsys", "h100_nsys2025.3_transformer_train.sqlite")
    con = nsa.connect(tmp_path_factory.mktemp("op_kernels") / "w.duckdb")
    rid = nsa.ingest(con, path).report_id
    torch_rid = nsa.ingest(con, KINETO).report_id
    yield con, path, rid, torch_rid
    con.close()


@pytest.mark.one_python  # a heavy sweep of real captures; lighter cases cover its code on every Python
@pytest.mark.parametrize("level", ["top", "leaf", "annotation"])
def test_nsys_work_is_no_op_or_no_launch_call(transformer, level):
    con, path, rid, _ = transformer
    with sqlite3.connect(path) as src:
        expected = {name: (kernels, copies, ns) for name, kernels, copies, ns in src.execute(_EXPECTED_SQL)}
    total = sum(ns for _, _, ns in expected.values())
    assert expected["(no op)"][0] > 0  # the capture's kernels have their launch calls

    rows = [r for r in nsa.query(con, "op_kernels", level=level).fetchall() if r[0] == rid]
    got = {r[1]: (r[3], r[4], r[5]) for r in rows}
    assert got == expected
    for r in rows:
        assert r[2] == 0 and r[6] is None and r[8] is None  # no op instances, no host time
        assert r[7] == pytest.approx(100.0 * r[5] / total)


@pytest.mark.one_python
@pytest.mark.parametrize("level", ["top", "leaf"])
def test_a_trace_with_ops_beside_it_names_its_work(transformer, level):
    """The PyTorch trace's kernels and copies are all counted, under its cpu_ops' names, while
    the nsys report beside it has none: the counts come from the trace's own JSON events."""
    con, _, _, torch_rid = transformer
    events = json.loads(gzip.decompress(KINETO.read_bytes()))["traceEvents"]
    kernels = sum(e.get("ph") == "X" and e.get("cat") == "kernel" for e in events)
    copies = sum(e.get("ph") == "X" and e.get("cat") in ("gpu_memcpy", "gpu_memset") for e in events)

    rows = [r for r in nsa.query(con, "op_kernels", level=level).fetchall() if r[0] == torch_rid]
    assert (sum(r[3] for r in rows), sum(r[4] for r in rows)) == (kernels, copies)
    assert any(r[1].startswith("aten::") and r[2] > 0 for r in rows)
    # the same rows as the trace alone
    assert rows == nsa.query(con, "op_kernels", level=level, report_id=torch_rid).fetchall()
