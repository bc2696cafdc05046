"""The synthetic nsys exports hold exactly the answers their scenario functions return.

Checked with plain SQL through sqlite3, independent of the project's ingest, so a failure
here means the fixture is wrong, not the consumer.
"""

from __future__ import annotations

import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

# fixtures/ is a top-level folder, not an installed package: make it importable under plain `pytest`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.nsys_fixtures import DTOH, HTOD, PAGEABLE, SCENARIOS, write_all

Answers = dict[str, Any]
NVTX_NAME = "coalesce(n.text, (SELECT value FROM StringIds WHERE id = n.textId))"


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Answers]:
    return write_all(tmp_path_factory.mktemp("nsys"))


def _db(a: Answers) -> closing[sqlite3.Connection]:
    return closing(sqlite3.connect(a["path"]))


def q(db: sqlite3.Connection, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    return db.execute(sql, args).fetchall()


def tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in q(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in q(db, f"PRAGMA table_info({table})")}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_common_shape_and_totals(answers: dict[str, Answers], name: str) -> None:
    a = answers[name]
    with _db(a) as db:
        assert q(db, "PRAGMA integrity_check") == [("ok",)]
        assert q(db, f"SELECT value FROM {a['meta_table']} WHERE name = 'EXPORT_SCHEMA_VERSION'") == [
            (a["schema_version"],)
        ]
        present = tables(db)
        for t in present - {"StringIds"}:  # lazy export: no empty tables (except ENUMs, always there)
            assert t.startswith("ENUM_") or q(db, f"SELECT count(*) FROM {t}")[0][0] > 0, t
        assert set(a["tables_with_rows"]) <= present
        if a["kernel_count"]:
            assert q(db, "SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL") == [
                (a["kernel_count"], a["kernel_total_ns"])
            ]
            # every kernel has its launch call: same correlationId, same process, issued before
            assert (
                q(
                    db,
                    """SELECT count(DISTINCT k.rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
                 AND (r.globalTid >> 24) = (k.globalPid >> 24)
                JOIN StringIds s ON s.id = r.nameId
                WHERE s.value LIKE 'cudaLaunchKernel%' AND r.start <= k.start""",
                )[0][0]
                == a["kernel_count"]
            )
        by_kind = {k: (v["count"], v["bytes"], v["ns"]) for k, v in a["memcpy_by_kind"].items()}
        if by_kind:
            rows = q(
                db,
                "SELECT copyKind, count(*), sum(bytes), sum(end - start) "
                "FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1",
            )
            assert {r[0]: r[1:] for r in rows} == by_kind
        # globalPid encodes pid in bits 24..47 (with vm bits above, like real files)
        for gpid, pid in q(db, "SELECT globalPid, pid FROM PROCESSES"):
            assert (gpid >> 24) & 16777215 == pid and gpid >> 48 == 1
        for t, key in (
            ("CUPTI_ACTIVITY_KIND_RUNTIME", "api_count"),
            ("NVTX_EVENTS", "nvtx_count"),
            ("OSRT_API", "osrt_count"),
            ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "sync_count"),
        ):
            assert (q(db, f"SELECT count(*) FROM {t}")[0][0] if t in present else 0) == a[key], t


def test_old_schema_shape(answers: dict[str, Answers]) -> None:
    with _db(answers["old_schema_2x"]) as db:
        present = tables(db)
        assert "EXPORT_META_DATA" in present and "META_DATA_EXPORT" not in present
        assert "ENUM_CUDA_KRENEL_LAUNCH_TYPE" in present
        assert not {"greenContextId", "graphNodeId"} & columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
        assert not {"copyCount", "virtualAddress"} & columns(db, "CUPTI_ACTIVITY_KIND_MEMCPY")
        assert "deprecatedSyncType" not in columns(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
        assert "vmId" not in columns(db, "TARGET_INFO_GPU")
        assert "jsonText" not in columns(db, "NVTX_EVENTS")
        names = [r[0] for r in q(db, f"SELECT {NVTX_NAME} FROM NVTX_EVENTS n ORDER BY start")]
        assert names == answers["old_schema_2x"]["nvtx_names"]


def test_edge_cases(answers: dict[str, Answers]) -> None:
    a = answers["edge_cases"]
    with _db(a) as db:
        rows = q(
            db,
            """SELECT d.value, s.value, k.demangledName = k.shortName, k.end - k.start
            FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName
            JOIN StringIds s ON s.id = k.shortName ORDER BY k.start""",
        )
        assert [r[0] for r in rows] == a["kernel_names"] and [r[1] for r in rows] == a["kernel_short_names"]
        assert [r[0] for r in rows if r[2]] == [a["shortname_only_kernel"]]
        assert sum(r[3] == 0 for r in rows) == a["zero_duration_kernels"]
        ranges = q(
            db,
            f"SELECT {NVTX_NAME}, n.end IS NULL, n.text IS NULL, n.domainId FROM NVTX_EVENTS n "
            "WHERE eventType IN (59, 60) ORDER BY start",
        )
        assert sorted(r[0] for r in ranges) == sorted(a["nvtx_range_names"])
        assert [r[0] for r in ranges if r[1]] == a["nvtx_null_end_ranges"]
        assert [r[0] for r in ranges if r[2]] == a["nvtx_registered"]
        domains = dict(q(db, "SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75"))
        assert domains == a["nvtx_domains"]
        assert {r[0]: domains[r[3]] for r in ranges if r[3]} == a["nvtx_domain_ranges"]
        assert q(db, "SELECT text, end FROM NVTX_EVENTS WHERE eventType = 34") == [
            (m, None) for m in a["nvtx_marks"]
        ]
        u = a["unknown_enums"]
        assert q(
            db,
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ? AND srcKind = ?",
            u["copyKind"],
            u["srcKind"],
        ) == [(1,)]
        assert q(db, "SELECT count(*) FROM ENUM_CUDA_MEMCPY_OPER WHERE id = ?", u["copyKind"]) == [(0,)]
        assert q(db, "SELECT count(*) FROM ENUM_CUPTI_SYNC_TYPE WHERE id = ?", u["syncType"]) == [(0,)]
        assert q(
            db,
            """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
            USING (correlationId) JOIN StringIds s ON s.id = r.nameId WHERE s.value = ?""",
            a["memcpy_api"],
        ) == [(2,)]


def test_no_gpu_activity(answers: dict[str, Answers]) -> None:
    a = answers["no_gpu_activity"]
    with _db(a) as db:
        present = tables(db)
        assert not present & set(a["absent_tables"])
        assert {"NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_RUNTIME", "EXPORT_META_DATA"} <= present
        assert [r[0] for r in q(db, f"SELECT {NVTX_NAME} FROM NVTX_EVENTS n ORDER BY start")] == a[
            "nvtx_names"
        ]


def test_idle_gaps(answers: dict[str, Answers]) -> None:
    a = answers["idle_gaps"]
    with _db(a) as db:
        gaps = q(
            db,
            """SELECT prev_end, start FROM (SELECT start, lag(end) OVER (ORDER BY start) AS prev_end
            FROM CUPTI_ACTIVITY_KIND_KERNEL) WHERE start - prev_end > ?""",
            a["gap_threshold_ns"],
        )
        assert gaps == [(g["start"], g["end"]) for g in a["gaps"]]
        others = q(
            db,
            """SELECT max(start - prev_end) FROM (SELECT start, lag(end) OVER (ORDER BY start) AS prev_end
            FROM CUPTI_ACTIVITY_KIND_KERNEL) WHERE start - prev_end <= ?""",
            a["gap_threshold_ns"],
        )[0][0]
        assert others <= a["other_gaps_max_ns"]
        for g in a["gaps"]:  # the host call named in the answer covers the gap (up to the next launch)
            sync = g["cause"] == "sync"
            table, corr = ("CUPTI_ACTIVITY_KIND_RUNTIME", "t.correlationId") if sync else ("OSRT_API", "NULL")
            cover = q(
                db,
                f"""SELECT {corr} FROM {table} t JOIN StringIds s ON s.id = t.nameId
                WHERE s.value = ? AND t.start <= ? AND t.end >= ?""",
                g["host_call"],
                g["start"],
                g["end"] - 20_000,
            )
            assert len(cover) == 1, g
            if sync:
                assert q(
                    db,
                    "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE correlationId = ?",
                    cover[0][0],
                ) == [(1,)]


def test_copy_scenarios(answers: dict[str, Answers]) -> None:
    h = answers["h2d_dominated"]
    assert 0.85 < h["htod_share"] < 0.95 and 0.02 < h["kernel_share"] < 0.05
    with _db(h) as db:
        ns = q(
            db,
            "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = ? AND srcKind = 1",
            HTOD,
        )[0][0]
        assert ns == h["htod_ns"]
    p = answers["pageable_copies"]
    assert 1.0 < p["dtoh_gbps"] < 7.0 and 1.0 < p["htod_gbps"] < 7.0 and p["copy_share"] < 0.2
    with _db(p) as db:
        assert q(
            db,
            """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE (copyKind = ? AND srcKind = ?)
            OR (copyKind = ? AND dstKind = ?)""",
            HTOD,
            PAGEABLE,
            DTOH,
            PAGEABLE,
        ) == [(p["pageable_copies"],)]


def test_storm_and_healthy(answers: dict[str, Answers]) -> None:
    s = answers["small_kernel_storm"]
    assert s["kernel_count"] == 20_000 and s["busy_fraction"] < 0.5 and 1_500 < s["mean_gap_ns"] < 3_500
    with _db(s) as db:
        assert q(db, "SELECT max(end - start) < 3000 FROM CUPTI_ACTIVITY_KIND_KERNEL") == [(1,)]
    ok = answers["healthy"]
    assert ok["busy_fraction"] > 0.9 and ok["min_kernel_ns"] > 1_000_000 and ok["sync_count"] == 1
    with _db(ok) as db:
        span = q(db, "SELECT max(end) - min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
        assert ok["kernel_total_ns"] / span > 0.9


def test_deterministic(tmp_path: Path, answers: dict[str, Answers]) -> None:
    again = SCENARIOS["idle_gaps"](tmp_path / "again.sqlite")
    assert again["gaps"] == answers["idle_gaps"]["gaps"]
