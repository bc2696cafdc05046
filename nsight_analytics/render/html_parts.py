"""Building blocks of the report page's panels: a section that says when its data is absent,
and tables whose cells keep the exact value they show (`data-value`), for tests and scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

Col = tuple[str, str, Callable[[Any], str]]


def fmt_text(v: Any) -> str:
    return "–" if v is None else str(v)


def table(rows: Sequence[dict[str, Any]], cols: Sequence[Col], name: str) -> str:
    """An HTML table; each cell shows the formatted value and keeps the exact one in data-value."""
    head = "".join(f"<th>{escape(h)}</th>" for _, h, _ in cols)
    body = []
    for r in rows:
        cells = "".join(
            f'<td data-col="{k}" data-value="{escape(json.dumps(r.get(k)), quote=True)}">{escape(f(r.get(k)))}</td>'
            for k, _, f in cols
        )
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="data" data-table="{name}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def section(name: str, title: str, content: str | None, absent: str = "") -> str:
    """A panel: drawn when it has content, otherwise a one-line note saying what is missing."""
    state = "drawn" if content else "absent"
    inner = content if content else f'<p class="note">{escape(absent)}</p>'
    return (
        f'<section class="panel" id="panel-{name}" data-panel="{name}" data-state="{state}">'
        f"<h2>{escape(title)}</h2>{inner}</section>"
    )
