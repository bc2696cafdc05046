"""ncu's source page (`--page source`) and the source_hotspots query.

hot.cu (fixtures/captures/hot.cu, built with -lineinfo) has two kernels with known hot spots:
`gather` loads `src[idx[i]]` from scattered addresses (line 9) and uses the value on line 10,
`fma_chain` runs a chain of dependent FMAs (line 19). Expected rows are computed here from the
CSV with the csv module: per kernel block, the row with the most `Warp Stall Sampling (All
Samples)` and, on it, the `stall_*` column with the most samples.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import pytest

import nsight_analytics as nsa
from nsight_analytics.errors import InputError
from nsight_analytics.ingest.ncu.ncu import parse_ncu

VARIANTS = Path(__file__).parent / "data" / "ncu" / "variants"
HOT_CU = Path(__file__).parents[1] / "fixtures" / "captures" / "hot.cu"


def _rows(name: str) -> list[list[str]]:
    text = gzip.decompress((VARIANTS / f"{name}.gz").read_bytes()).decode()
    return list(csv.reader(io.StringIO(text)))


def _blocks(name: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(kernel name, header, data rows) per block, in file order."""
    blocks: list[tuple[str, list[str], list[list[str]]]] = []
    for row in _rows(name):
        if not row or row[0] == "File Path":
            continue
        if row[0] in ("Kernel Name", "Function Name"):
            blocks.append((row[1], [], []))
        elif row[0] in ("Address", "Line No"):
            blocks[-1][1].extend(row)
        else:
            blocks[-1][2].append(row)
    return blocks


def _hottest(head: list[str], rows: list[list[str]]) -> tuple[list[str], str, int]:
    """(row, top stall reason, its samples) of the row with the most samples."""
    at = head.index("Warp Stall Sampling (All Samples)")
    best = max(rows, key=lambda r: int(r[at]))
    stalls = {
        c.removeprefix("stall_"): int(best[i])
        for i, c in enumerate(head)
        if c.startswith("stall_") and not c.endswith("(Not Issued)")
    }
    reason = max(stalls, key=lambda r: (stalls[r], r))
    return best, reason, stalls[reason]


@pytest.fixture(scope="module")
def hot(tmp_path_factory):
    con = nsa.connect(tmp_path_factory.mktemp("source") / "w.duckdb")
    ids = {
        name: nsa.ingest(con, VARIANTS / f"{name}.gz").report_id
        for name in ("hot_source_cuda_sass.csv", "hot_source_sass.csv", "source_sass.csv")
    }
    yield con, ids
    con.close()


def _hotspots(con, report_id: int, top_n: int | None = 1) -> list[dict]:
    df = nsa.query(con, "source_hotspots", report_id=report_id, top_n=top_n).df()
    return df.to_dict("records")


def test_hot_lines_of_hot_cu(hot) -> None:
    con, ids = hot
    blocks = _blocks("hot_source_cuda_sass.csv")
    assert [b[0] for b in blocks] == [
        "gather(const float *, float *, const int *, int)",
        "fma_chain(float *, int, int)",
    ]
    got = _hotspots(con, ids["hot_source_cuda_sass.csv"], top_n=2)
    source = HOT_CU.read_text().splitlines()
    for launch, (name, head, rows) in enumerate(blocks):
        lines = [r for r in rows if r[0]]  # line rows; instruction rows have no line number
        best, reason, samples = _hottest(head, lines)
        mine = [g for g in got if g["launch_id"] == launch]
        top = mine[0]
        assert (top["name"], top["granularity"], top["line"], top["code"]) == (
            name,
            "line",
            int(best[0]),
            best[1],
        )
        assert top["samples"] == int(best[head.index("Warp Stall Sampling (All Samples)")])
        assert (top["top_reason"], top["top_reason_samples"]) == (reason, samples)
        total = sum(int(r[head.index("Warp Stall Sampling (All Samples)")]) for r in lines)
        assert top["share_pct"] == pytest.approx(100.0 * top["samples"] / total)
        assert source[top["line"] - 1].strip() == top["code"].strip()
    gather = [g for g in got if g["launch_id"] == 0]
    fma = [g for g in got if g["launch_id"] == 1]
    # gather: the scattered load (9) and the first use of its value (10) hold the samples, both
    # waiting on the long scoreboard (global memory)
    assert {g["line"] for g in gather} == {9, 10}
    assert {g["top_reason"] for g in gather} == {"long_sb"}
    assert sum(g["share_pct"] for g in gather) > 90
    # fma_chain: the dependent FMA line, waiting on the previous FMA's fixed latency
    assert fma[0]["line"] == 19 and fma[0]["top_reason"] == "wait"


def test_sass_hot_spots_without_line_info(hot) -> None:
    con, ids = hot
    blocks = _blocks("hot_source_sass.csv")
    # ncu prints each kernel's block twice: gather, gather, fma_chain, fma_chain
    assert [b[0][:6] for b in blocks] == ["gather", "gather", "fma_ch", "fma_ch"]
    assert blocks[0][2] == blocks[1][2]
    got = _hotspots(con, ids["hot_source_sass.csv"])
    assert [g["launch_id"] for g in got] == [0, 1]
    for top, (name, head, rows) in zip(got, blocks[::2], strict=True):
        best, reason, samples = _hottest(head, rows)
        assert (top["granularity"], top["line"], top["address"]) == ("sass", None, best[0])
        assert top["code"] == best[1].strip()
        assert (top["top_reason"], top["top_reason_samples"]) == (reason, samples)
    # gather's hottest instruction is the FFMA that consumes the scattered load
    assert got[0]["code"].startswith("FFMA") and got[0]["top_reason"] == "long_sb"


def test_pytorch_source_page_has_the_reports_ten_launches(hot) -> None:
    con, ids = hot
    blocks = _blocks("source_sass.csv")
    assert len(blocks) == 20  # each of the ten launches printed twice
    rid = ids["source_sass.csv"]
    kernels = con.execute(
        "SELECT launch_id FROM ncu_kernels WHERE report_id = ? ORDER BY 1", [rid]
    ).fetchall()
    assert [k[0] for k in kernels] == list(range(10))
    at = blocks[0][1].index("Warp Stall Sampling (All Samples)")
    expected = [sum(int(r[at]) for r in rows) for _, _, rows in blocks[::2]]
    got = con.execute(
        "SELECT launch_id, sum(samples) FROM ncu_source WHERE report_id = ? GROUP BY 1 ORDER BY 1", [rid]
    ).fetchall()
    assert [g[1] for g in got] == expected
    hotspots = _hotspots(con, rid, top_n=None)
    assert {h["launch_id"] for h in hotspots} == {i for i, n in enumerate(expected) if n}


def test_stalls_add_up_to_the_samples(hot) -> None:
    con, _ = hot
    # per row, the stall_* columns sum to `Warp Stall Sampling (All Samples)` in the CSV; so do ours
    bad = con.execute(
        """
        SELECT count(*) FROM ncu_source AS s
        LEFT JOIN (SELECT report_id, launch_id, seq, sum(samples) AS n FROM ncu_source_stalls GROUP BY ALL) AS t
          USING (report_id, launch_id, seq)
        WHERE coalesce(t.n, 0) <> s.samples
        """
    ).fetchone()
    assert bad == (0,)
    _, head, rows = _blocks("hot_source_cuda_sass.csv")[0]
    at = head.index("Warp Stall Sampling (All Samples)")
    stall_cols = [i for i, c in enumerate(head) if c.startswith("stall_") and not c.endswith("(Not Issued)")]
    assert all(sum(int(r[i]) for i in stall_cols) == int(r[at]) for r in rows if r[at] not in ("-", ""))


def test_cut_source_page_errors(tmp_path: Path) -> None:
    text = gzip.decompress((VARIANTS / "hot_source_sass.csv.gz").read_bytes()).decode()
    cut = text[: len(text) // 2]
    cut = cut[: cut.rindex('","') + 1]  # mid-row, after a closing quote
    path = tmp_path / "cut.csv"
    path.write_text(cut)
    with pytest.raises(InputError, match="truncated"):
        parse_ncu(path)
