"""Docs that tests keep true: generated reference pages, the real schema, README's command list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import nsight_analytics as nsa
from nsight_analytics import docs, queries, render, schema

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "regenerate it with `python -m nsight_analytics.docs` (or `nsa schema --format markdown -o docs/schema.md`)"


@pytest.mark.parametrize("rel", sorted(docs.pages()))
def test_generated_page_is_committed_and_current(rel: str) -> None:
    page = ROOT / rel
    assert page.is_file(), f"{rel} is missing; {REGENERATE}"
    assert page.read_text(encoding="utf-8") == docs.pages()[rel], f"{rel} is out of date; {REGENERATE}"


def test_schema_page_is_what_nsa_schema_prints() -> None:
    assert docs.pages()["docs/schema.md"] == render.schema_page(schema.TABLES) + "\n"


def test_queries_page_documents_every_query_column_and_parameter() -> None:
    text = render.queries_page()
    for q in queries.library().values():
        section = text.split(f"## `{q.name}`\n", 1)[1].split("\n## ", 1)[0]
        for c in q.columns:
            assert f"| `{c.name}` | {c.type} |" in section, (q.name, c.name)
        for p in q.params:  # a parameter row: its name, its name in SQL, its type
            row = f"| `{p.name}` | `{queries.macro_param_name(p.name, q)}` | {p.type} |"
            assert row in section, (q.name, p.name)


def test_docs_module_writes_the_pages(tmp_path: Path) -> None:
    assert docs.main([str(tmp_path)]) == 0
    for rel, text in docs.pages().items():
        assert (tmp_path / rel).read_text(encoding="utf-8") == text


def test_every_canonical_table_has_exactly_the_declared_columns(tmp_path: Path) -> None:
    con = nsa.connect(tmp_path / "w.duckdb")
    try:
        found = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert found == {t.name for t in schema.STORED}
        views = {
            r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
        }
        assert views == {t.name for t in schema.VIEWS}
        for t in schema.TABLES:
            described = [(r[0], r[1]) for r in con.execute(f'DESCRIBE "{t.name}"').fetchall()]
            assert described == [(c.name, c.type) for c in t.cols], t.name
    finally:
        con.close()


def _readme() -> str:
    readme = ROOT / "README.md"
    if not readme.is_file():
        pytest.skip("README.md not written yet")
    return readme.read_text(encoding="utf-8")


def _readme_command_rows() -> list[str]:
    readme = _readme()
    assert "\n## Commands\n" in readme, "README.md needs a `## Commands` section"
    table = readme.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `nsa ([\w-]+)", table, flags=re.MULTILINE)


def test_every_cli_command_is_in_readme_commands_table() -> None:
    """sqlite-utils style: a command nobody documented is a command nobody finds."""
    from nsight_analytics.cli import main

    missing = sorted(set(main.commands) - set(_readme_command_rows()))
    assert not missing, (
        f"README.md's Commands table lacks a row `| \\`nsa NAME ...\\` | ... |` for: {missing}"
    )


def test_readme_commands_table_lists_only_real_commands() -> None:
    from nsight_analytics.cli import main

    unknown = sorted(set(_readme_command_rows()) - set(main.commands))
    assert not unknown, f"README.md's Commands table lists commands `nsa` does not have: {unknown}"


def test_readme_links_the_reference_pages() -> None:
    readme = _readme()
    for rel in docs.pages():
        assert f"]({rel})" in readme, f"README.md should link {rel}"


def test_an_option_is_not_taken_for_the_folder(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert docs.main(["--help"]) == 0
    assert docs.main(["--frobnicate"]) == 2
    assert "usage: python -m nsight_analytics.docs [ROOT]" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # nothing written under ./--help
