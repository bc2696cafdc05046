"""Reference pages generated from code, so no test-less doc can drift from what ships.

docs/schema.md comes from the schema declarations (`nsa schema --format markdown`), docs/queries.md
from the query contracts, both written by the render layer (render/schema.py, render/queries.py).
`python -m nsight_analytics.docs` rewrites both; tests/test_docs.py fails when a committed page
differs from its generator.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import render, schema


def pages() -> dict[str, str]:
    """Every generated page, by path relative to the repository root, as committed."""
    return {
        "docs/schema.md": render.schema_page(schema.TABLES) + "\n",
        "docs/queries.md": render.queries_page() + "\n",
    }


def write(root: Path) -> list[Path]:
    written = []
    for rel, text in pages().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """`python -m nsight_analytics.docs [ROOT]`: rewrite the generated pages under ROOT.

    ROOT defaults to the checkout this module lives in (else the current folder), so the
    command does the same thing from any directory.
    """
    args = sys.argv[1:] if argv is None else argv
    if any(a.startswith("-") for a in args) or len(args) > 1:
        # an option is no folder: `--help` would have written the pages under ./--help
        print(
            "usage: python -m nsight_analytics.docs [ROOT]  (rewrites docs/schema.md and docs/queries.md under ROOT)"
        )
        return 0 if args and args[0] in ("-h", "--help") else 2
    checkout = Path(__file__).resolve().parents[1]
    root = Path(args[0]) if args else checkout if (checkout / "pyproject.toml").is_file() else Path.cwd()
    for path in write(root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
