"""Turning result frames into text: a table for humans, CSV or JSON for machines.

Machine formats print nothing but data; JSON is an array of row objects.
"""

from __future__ import annotations

import io
import json
import math
import shutil
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("table", "csv", "json")


def _jsonable(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    import pandas as pd

    if value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (list, tuple)) or getattr(value, "ndim", 0) > 0:  # list or numpy array
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # numpy scalar
        return _jsonable(value.item())
    return value


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _jsonable(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def to_json(df: pd.DataFrame) -> str:
    return json.dumps(records(df), indent=2, ensure_ascii=False)


def to_csv(df: pd.DataFrame) -> str:
    """Lists become `a;b;c` cells, so the CSV stays one value per cell."""
    flat = df.copy()
    for col in flat.columns:
        if flat[col].dtype == object:
            flat[col] = [";".join(map(str, _jsonable(v))) if isinstance(_jsonable(v), list) else v for v in flat[col]]
    buf = io.StringIO()
    flat.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def _cell(value: Any) -> str:
    value = _jsonable(value)
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def to_table(df: pd.DataFrame, title: str | None = None, width: int | None = None) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    import pandas as pd

    table = Table(title=title, show_lines=False)
    for col in df.columns:
        numeric = pd.api.types.is_numeric_dtype(df[col]) and not pd.api.types.is_bool_dtype(df[col])
        table.add_column(Text(str(col)), justify="right" if numeric else "left", overflow="fold")
    for row in df.itertuples(index=False):
        # Text, not str: kernel names such as `[lambda() (instance 1)]` are not rich markup
        table.add_row(*(Text(_cell(v)) for v in row))
    buf = io.StringIO()
    # The terminal's width ($COLUMNS wins); 160 when printing to a pipe or file.
    width = width or shutil.get_terminal_size((160, 24)).columns
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(table)
    if df.empty:
        buf.write("(no rows)\n")
    return buf.getvalue()


def render(df: pd.DataFrame, fmt: str, title: str | None = None) -> str:
    if fmt == "json":
        return to_json(df) + "\n"
    if fmt == "csv":
        return to_csv(df)
    return to_table(df, title)
