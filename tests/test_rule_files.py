"""A team's own queries (.sql files) and rules (TOML rule packs), from the CLI, on real captures:
listed, run, judged (`nsa findings`, --fail-on, `nsa diff`), and bad files refused with
file:line and field. Expected numbers come from sqlite3 on the source exports."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsight_analytics as nsa
from nsight_analytics import api, queries
from nsight_analytics.cli import EXIT_ERROR, EXIT_FINDINGS, main
from nsight_analytics.render import diff as render_diff
from nsight_analytics.render.diff_panels import diff_sections
from nsight_analytics.render.rows import jsonable
from nsight_analytics.rules import discovery
from tests.conftest import realdata

BEFORE = ("nsys", "h100x2_nsys2026.2_train_before.sqlite")
AFTER = ("nsys", "h100x2_nsys2026.2_train_after.sqlite")

QUERY = """\
-- The longest kernel of each report, beside its count of kernels and their summed time.
-- reads kernel_rows, kernel_names
-- param report_id INTEGER = NULL: only this report (NULL: every report).
-- param min_kernels BIGINT = 1: reports with fewer kernels are left out.
-- col report_id INTEGER: workspace report id.
-- col kernels BIGINT: kernels in the report.
-- col kernel_ns BIGINT: summed kernel time (ns).
-- col longest_ns BIGINT: the longest kernel's duration (ns).
-- col longest_share DOUBLE: the longest kernel's share of the summed kernel time.
-- col longest_name VARCHAR: the longest kernel's short name.
-- col longest_class VARCHAR: its class (the library's nsa_kernel_class macro).
SELECT k.report_id, count(*) AS kernels, sum(k.end_ns - k.start_ns) AS kernel_ns,
       max(k.end_ns - k.start_ns) AS longest_ns,
       max(k.end_ns - k.start_ns) / sum(k.end_ns - k.start_ns) AS longest_share,
       arg_max(n.short_name, k.end_ns - k.start_ns) AS longest_name,
       nsa_kernel_class(arg_max(n.short_name, k.end_ns - k.start_ns)) AS longest_class
FROM kernel_rows AS k JOIN kernel_names AS n USING (report_id, name_id)
WHERE $report_id IS NULL OR k.report_id = $report_id
GROUP BY k.report_id HAVING count(*) >= $min_kernels
"""

RULES = """\
# The team's own checks.
[[rule]]
id = "one-kernel-dominates"
summary = "One kernel takes a large share of all kernel time."
query = "longest_kernel"
params = { min_kernels = 2 }
needs = ["kernel"]
title = "{longest_name} runs {longest_ns}, {longest_share:.1%} of kernel time"
message = "The longest kernel, {longest_name}, ran {longest_ns} of {kernel_ns} in {kernels} kernels, over {dominant_share_warning}."
fix = "Profile {longest_name} with ncu first."
savings = "longest_ns"

[rule.thresholds]
dominant_share_warning = { default = 0.015, unit = "fraction", doc = "One kernel's share of kernel time that is a warning." }
dominant_share_critical = { default = 0.5, unit = "fraction", doc = "One kernel's share of kernel time that is critical." }

[rule.severity]
warning = "longest_share >= $dominant_share_warning"
critical = "longest_share >= $dominant_share_critical"
"""

# Independent of nsa: the kernels of the export, named through StringIds.
LONGEST_SQL = """
    SELECT count(*), sum(k."end" - k.start), max(k."end" - k.start),
           (SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL AS k2 JOIN StringIds AS s ON s.id = k2.shortName
            ORDER BY k2."end" - k2.start DESC LIMIT 1)
    FROM CUPTI_ACTIVITY_KIND_KERNEL AS k"""


def _expected(path: Path) -> tuple[int, int, int, str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        n, total, longest, name = con.execute(LONGEST_SQL).fetchone()
    return int(n), int(total), int(longest), str(name)


def _forget() -> None:
    """The CLI runs in this process, where added folders stay: take them out (a new `nsa` starts
    without them)."""
    queries.reset_folders()
    discovery.reset()
    api._RULE_FOLDERS.clear()


@pytest.fixture(autouse=True)
def _forget_extensions() -> Iterator[None]:
    yield
    _forget()


@pytest.fixture
def team(tmp_path: Path) -> Path:
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "longest_kernel.sql").write_text(QUERY)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "team.toml").write_text(RULES)
    return tmp_path


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    before, after = realdata(*BEFORE), realdata(*AFTER)
    path = tmp_path_factory.mktemp("team") / "w.duckdb"
    con = nsa.connect(path)
    nsa.ingest(con, before)  # report 1
    nsa.ingest(con, after)  # report 2
    con.close()
    return path


def _run(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_a_query_folder_is_listed_and_runs_with_the_librarys_macros(team: Path, db: Path) -> None:
    listed = _run("query", "--list", "--queries", str(team / "q"))
    assert listed.exit_code == 0
    assert re.search(r"^  longest_kernel +The longest kernel of each report", listed.output, re.MULTILINE)
    contract = _run("query", "--list", "longest_kernel", "--queries", str(team / "q"))
    assert str(team / "q" / "longest_kernel.sql") in contract.output
    r = _run("query", "longest_kernel", "--queries", str(team / "q"), "--db", str(db), "--format", "json",
             "-p", "min_kernels=2")  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = {row["report_id"]: row for row in json.loads(r.output)}
    for rid, side in ((1, BEFORE), (2, AFTER)):
        n, total, longest, name = _expected(realdata(*side))
        row = rows[rid]
        assert (row["kernels"], row["kernel_ns"], row["longest_ns"], row["longest_name"]) == (
            n,
            total,
            longest,
            name,
        )
        assert row["longest_share"] == pytest.approx(longest / total)
        assert row["longest_class"] == "attention"  # flash_fwd_kernel, through nsa_kernel_class
    kept = _run("query", "longest_kernel", "--queries", str(team / "q"), "--db", str(db), "--format", "json",
                "-p", "min_kernels=4000")  # fmt: skip
    n_before, n_after = _expected(realdata(*BEFORE))[0], _expected(realdata(*AFTER))[0]
    assert n_before >= 4000 > n_after
    assert [row["report_id"] for row in json.loads(kept.output)] == [1]


def test_a_query_named_like_a_builtin_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "gaps.sql").write_text(QUERY)
    r = _run("query", "--list", "--queries", str(tmp_path))
    assert r.exit_code == EXIT_ERROR
    assert f"{tmp_path / 'gaps.sql'}: query gaps has the name of a built-in query" in r.output
    assert "Traceback" not in r.output


def test_the_rule_pack_judges_each_report_with_its_numbers(team: Path, db: Path) -> None:
    r = _run("findings", "--db", str(db), "--format", "json", "--no-config",
             "--queries", str(team / "q"), "--rules", str(team / "r"))  # fmt: skip
    assert r.exit_code == 0, r.output
    mine = {f["report_id"]: f for f in json.loads(r.output) if f["rule_id"] == "one-kernel-dominates"}
    n, total, longest, name = _expected(realdata(*AFTER))
    assert longest / total >= 0.015  # the after side's flash_fwd_kernel: over the warning
    f = mine[2]
    assert f["severity"] == "warning"
    assert f["est_savings_ns"] == longest
    assert f["evidence"]["longest_ns"] == longest and f["evidence"]["kernel_ns"] == total
    assert f["evidence"]["kernels"] == n and f["evidence"]["dominant_share_warning"] == 0.015
    assert f["title"] == f"{name} runs {longest / 1e6:.3g} ms, {longest / total:.1%} of kernel time"
    assert f["message"] == (
        f"The longest kernel, {name}, ran {longest / 1e6:.3g} ms of {total / 1e6:.3g} ms in {n:,} kernels, over 1.5%."
    )
    assert f["recommendation"] == f"Profile {name} with ncu first."
    _, total_b, longest_b, _ = _expected(realdata(*BEFORE))
    assert longest_b / total_b < 0.015 and 1 not in mine  # the before side stays under it


def test_thresholds_of_a_rule_file_are_set_like_the_builtin_ones(team: Path, db: Path) -> None:
    args = (
        "findings",
        "--db",
        str(db),
        "--format",
        "json",
        "--queries",
        str(team / "q"),
        "--rules",
        str(team / "r"),
    )
    r = _run(*args, "--no-config", "--set", "dominant_share_critical=0.015")
    crit = [f for f in json.loads(r.output) if f["rule_id"] == "one-kernel-dominates"]
    assert [(f["report_id"], f["severity"]) for f in crit] == [(2, "critical")]
    (team / "settings.toml").write_text("[one-kernel-dominates]\ndominant_share_warning = 0.01\n")
    r = _run(*args, "--config", str(team / "settings.toml"))
    assert sorted(f["report_id"] for f in json.loads(r.output) if f["rule_id"] == "one-kernel-dominates") == [
        1,
        2,
    ]


def test_the_gate_fails_on_a_file_rules_finding(team: Path, db: Path) -> None:
    args = (
        "findings",
        "--db",
        str(db),
        "--no-config",
        "--queries",
        str(team / "q"),
        "--rules",
        str(team / "r"),
    )
    assert _run(*args, "--report", "2", "--fail-on", "warning").exit_code == EXIT_FINDINGS
    assert _run(*args, "--report", "1", "--fail-on", "warning").exit_code == 0
    # without the rule pack (a new process) the built-in rules find nothing at warning on report 2
    _forget()
    assert (
        _run("findings", "--db", str(db), "--no-config", "--report", "2", "--fail-on", "warning").exit_code
        == 0
    )


def test_the_settings_file_names_the_folders_and_the_diff_pairs_the_finding(
    team: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = team / "project"
    project.mkdir()
    (project / "nsa.toml").write_text('queries = ["../q"]\nrules = ["../r"]\n')
    monkeypatch.chdir(project)
    listed = _run("rules", "--format", "json")
    row = next(x for x in json.loads(listed.output) if x["rule"] == "one-kernel-dominates")
    assert row["looks for"] == "One kernel takes a large share of all kernel time."
    assert row["thresholds"] == "dominant_share_warning=0.015, dominant_share_critical=0.5"
    assert row["severity"] == "warning / critical" and row["reads"] == "kernel"
    d = json.loads(_run("diff", "1", "2", "--db", str(db), "--format", "json").output)
    change = next(c for c in d["findings"] if c["rule_id"] == "one-kernel-dominates")
    assert change["status"] == "new" and change["b_savings_ns"] == _expected(realdata(*AFTER))[2]
    found = json.loads(_run("findings", "--db", str(db), "--format", "json").output)
    assert [f["report_id"] for f in found if f["rule_id"] == "one-kernel-dominates"] == [2]
    _forget()  # as a new process: --no-config leaves the settings file's folders out too
    found = json.loads(_run("findings", "--db", str(db), "--format", "json", "--no-config").output)
    assert not [f for f in found if f["rule_id"] == "one-kernel-dominates"]
    (project / "nsa.toml").write_text('rules = "../r"\nqueries = [1]\n')
    _forget()
    r = _run("rules")
    assert r.exit_code == EXIT_ERROR
    assert f"settings file {project / 'nsa.toml'}: queries wants a list of folders" in r.output


def test_rules_explain_documents_a_file_rule(team: Path) -> None:
    r = _run(
        "rules", "--explain", "one-kernel-dominates", "--queries", str(team / "q"), "--rules", str(team / "r")
    )
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert text.startswith("one-kernel-dominates (warning / critical; reads kernel; per report)")
    assert f"Rule file {team / 'r' / 'team.toml'}:{_line(RULES, 'id = ')}" in text
    assert "critical when (longest_share >= $dominant_share_critical)" in text
    assert "Fix: Profile {longest_name} with ncu first." in text
    assert (
        "dominant_share_warning = 0.015 (fraction): One kernel's share of kernel time that is a warning."
        in text
    )
    _forget()  # as a new process: no rule pack
    unknown = _run("rules", "--explain", "one-kernel-dominates")
    assert unknown.exit_code == EXIT_ERROR
    assert "no rule 'one-kernel-dominates'; `nsa rules` lists them: copy-dominated," in unknown.output


def _bad(tmp_path: Path, text: str) -> tuple[str, Path]:
    (tmp_path / "r").mkdir(exist_ok=True)
    path = tmp_path / "r" / "bad.toml"
    path.write_text(text)
    r = _run("rules", "--queries", str(tmp_path / "q"), "--rules", str(tmp_path / "r"))
    assert r.exit_code == EXIT_ERROR, r.output
    assert "Traceback" not in r.output
    return r.output, path


def _line(text: str, fragment: str) -> int:
    return next(i for i, s in enumerate(text.splitlines(), 1) if fragment in s)


@pytest.mark.parametrize(
    ("change", "fragment", "field", "why"),
    [
        (("title = ", "title = \"unclosed"), "title = ", None, "not valid TOML"),
        (("fix = \"Profile {longest_name} with ncu first.\"\n", ""), "[[rule]]", "field fix", "missing"),
        (("{longest_name} with ncu", "{longest_nam} with ncu"), "fix = ", "field fix", "{longest_nam} is neither"),
        (("query = \"longest_kernel\"", "query = \"longest_kernels\""), "query = ", "field query", "no query named"),
        (("critical = \"", "fatal = \""), "fatal = ", "field severity.fatal", "'fatal' is no severity"),
        (("\"longest_share >= $dominant_share_critical\"", "\"longest_sahre >= 1\""), "longest_sahre", "field severity.critical", "longest_sahre"),
        (("\"longest_share >= $dominant_share_critical\"", "\"1=1); DROP TABLE reports; --\""), "DROP", "field severity.critical", "not one SQL expression"),
        (("min_kernels = 2", "min_kernel = 2"), "min_kernel = ", "field params.min_kernel", "has no parameter"),
        (("savings = \"longest_ns\"", "savings = \"longest_share\""), "savings = ", "field savings", "not in ns"),
    ],
)  # fmt: skip
def test_a_bad_rule_file_names_the_file_line_and_field(
    team: Path, change: tuple[str, str], fragment: str, field: str | None, why: str
) -> None:
    text = RULES.replace(*change, 1)
    assert text != RULES
    out, path = _bad(team, text)
    line = _line(text, fragment)
    assert f"{path}:{line}:" in out
    if field:
        assert f"rule one-kernel-dominates, {field}: " in out
    assert why in out
    assert len(out.strip().splitlines()) == 1  # one sentence


def test_a_rule_id_taken_by_a_builtin_rule_is_refused(team: Path) -> None:
    out, path = _bad(team, RULES.replace('id = "one-kernel-dominates"', 'id = "gpu-idle"'))
    assert f"{path}:{_line(RULES, 'id = ')}: rule gpu-idle, field id: rule gpu-idle exists already" in out


def test_the_diff_gate_fails_on_a_new_or_worse_file_rule_finding(team: Path, db: Path) -> None:
    """--fail-on-new-finding judges a rule file's findings as the built-in ones: the after
    capture's longest kernel crosses the pack's warning share (sqlite3 below), a new warning;
    with thresholds between the two shares, the warning of before becomes a critical after."""
    _, total_a, longest_a, _ = _expected(realdata(*BEFORE))
    _, total_b, longest_b, _ = _expected(realdata(*AFTER))
    share_a, share_b = longest_a / total_a, longest_b / total_b
    assert share_a < 0.015 <= share_b < 0.5  # the pack's warning and critical shares
    args = ("diff", "1", "2", "--db", str(db), "--queries", str(team / "q"), "--rules", str(team / "r"))
    new = _run(*args, "--format", "json", "--fail-on-new-finding")
    assert new.exit_code == EXIT_FINDINGS, new.output
    gate = json.loads(new.stdout)["gate"]
    assert gate["failed"] and "new [warning] one-kernel-dominates: " in gate["message"]
    assert _run(*args, "--fail-on-new-finding", "critical").exit_code == 0
    # the same pair, thresholds set between the two shares: warning -> critical is worse
    middle = (share_a + share_b) / 2
    config = {"dominant_share_warning": share_a * 0.9, "dominant_share_critical": middle}
    con = nsa.connect(db)
    try:
        worse = nsa.diff(con, 1, 2, config=config)
        better = nsa.diff(con, 2, 1, config=config)
    finally:
        con.close()
    (change,) = [c for c in worse.findings if c.rule_id == "one-kernel-dominates"]
    assert (change.status, change.a_severity, change.severity) == ("persisting", "warning", "critical")
    for severity in ("warning", "critical"):
        g = api.diff_gate(worse, None, new_findings=severity)
        assert g.failed and [c.rule_id for c in g.failing_findings] == ["one-kernel-dominates"]
        assert "worse [warning -> critical] one-kernel-dominates: " in g.message
    g = api.diff_gate(better, None, new_findings="warning")
    assert not g.failed, g.message
    # people see both severities of a finding whose severity changed, in every format
    shown = "[warning -> critical] one-kernel-dominates: "
    assert f"persisting {shown}" in render_diff.render(worse, "table")
    assert "| warning -> critical | " in render_diff.render(worse, "markdown")
    assert "persisting [critical -> warning] one-kernel-dominates: " in render_diff.render(better, "table")
    page = "".join(diff_sections(jsonable(worse.to_dict())))
    assert "warning -&gt; critical" in page


TEAM_MACRO = """\
-- Our GPU activity: kernels only.
CREATE MACRO nsa_gpu_activity(rid) AS TABLE SELECT * FROM kernel_rows WHERE report_id = rid;
"""


def test_a_team_macro_named_like_a_library_macro_is_refused(team: Path, tmp_path: Path) -> None:
    """A team `_macros.sql` runs after the library's: a macro of the same name would change every
    built-in query and rule that calls it. Refused with file:line, unless the file says
    `-- override NAME`; two team folders defining one macro are refused too."""
    library = queries.query_root() / "nsys" / "_macros.sql"
    lib_line = _line(library.read_text(), "MACRO nsa_gpu_activity(")
    macros = team / "q" / "_macros.sql"
    macros.write_text(TEAM_MACRO)
    r = _run("query", "--list", "--queries", str(team / "q"))
    assert r.exit_code == EXIT_ERROR, r.output
    assert r.output == (
        f"Error: {macros}:2: macro nsa_gpu_activity would replace the library's ({library}:{lib_line}) in "
        "every built-in query and rule; rename it, or write `-- override nsa_gpu_activity` in the file to "
        "replace it on purpose.\n"
    )
    _forget()
    macros.write_text("-- override nsa_gpu_activity\n" + TEAM_MACRO)
    ok = _run("query", "--list", "--queries", str(team / "q"))
    assert ok.exit_code == 0, ok.output
    assert "longest_kernel" in ok.output
    _forget()
    (tmp_path / "q2").mkdir()
    (tmp_path / "q2" / "_macros.sql").write_text(
        "\n" + TEAM_MACRO.replace("nsa_gpu_activity", "team_kernels")
    )
    macros.write_text(TEAM_MACRO.replace("nsa_gpu_activity", "team_kernels"))
    twice = _run("query", "--list", "--queries", str(team / "q"), "--queries", str(tmp_path / "q2"))
    assert twice.exit_code == EXIT_ERROR
    assert twice.output == (
        f"Error: {tmp_path / 'q2' / '_macros.sql'}:3: macro team_kernels is defined in {macros}:2 as well; "
        "keep one of the two.\n"
    )
