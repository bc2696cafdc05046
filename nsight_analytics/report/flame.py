"""The flame graph of the idle time: `gap_stacks`' rows (the stacks sampled on the launching
thread while the GPU idled, grouped by their innermost user frame) as one tree per stack source.

A row's path, outermost first, is its callers (`train_step < main < <module>`, read right to
left), then the user frame (function, file, line), then the library frame it was calling; its
weight the idle time it explains. Rows sharing a prefix share those nodes, so a node's time is
the sum of what is below it. The root is the window's idle time, so what no stack explains
stays visible as the part of the root with nothing under it.
"""

from __future__ import annotations

from typing import Any

SOURCES = ("python_sample", "kineto_python", "kineto_callstack", "cpu_sample")  # drawing order


def _node(name: str, kind: str, file: str | None = None, line: int | None = None) -> dict[str, Any]:
    return {"name": name, "kind": kind, "file": file, "line": line, "ns": 0, "children": []}


def _child(
    parent: dict[str, Any], name: str, kind: str, file: str | None, line: int | None
) -> dict[str, Any]:
    for c in parent["children"]:
        if (c["name"], c["kind"], c["file"], c["line"]) == (name, kind, file, line):
            return c
    c = _node(name, kind, file, line)
    parent["children"].append(c)
    return c


def flames(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """{"trees": one per source, "note": why there are none (gap_stacks' note row) or None}.
    A tree: {"source", "idle_ns", "explained_ns", "root"}; a node: name, kind ('idle', 'caller',
    'user', 'library'), file, line, ns and its children, the largest first."""
    notes = [r["note"] for r in rows if r.get("source") is None and r.get("note")]
    idle: dict[str, dict[Any, int]] = {}
    trees: dict[str, dict[str, Any]] = {}
    for r in rows:
        source, ns = r.get("source"), r.get("explained_ns") or 0
        if source is None or ns <= 0:
            continue
        idle.setdefault(source, {})[(r["report_id"], r["device_id"])] = r.get("idle_ns") or 0
        path = [trees.setdefault(source, _node("idle time", "idle"))]
        callers = [c.strip() for c in (r.get("callers") or "").split(" < ") if c.strip()]
        for name in reversed(callers):
            path.append(_child(path[-1], name, "caller", None, None))
        if r.get("user_function") is not None:
            path.append(_child(path[-1], r["user_function"], "user", r.get("user_file"), r.get("user_line")))
        if r.get("library_frame") is not None:
            path.append(_child(path[-1], r["library_frame"], "library", None, None))
        elif r.get("user_function") is None:
            path.append(_child(path[-1], "(no frame)", "library", None, None))
        for node in path:
            node["ns"] += ns
    out = []
    for source in sorted(trees, key=lambda s: (SOURCES.index(s) if s in SOURCES else len(SOURCES), s)):
        root = trees[source]
        explained = root["ns"]
        root["ns"] = max(explained, sum(idle[source].values()))
        _sort(root)
        out.append({"source": source, "idle_ns": root["ns"], "explained_ns": explained, "root": root})
    return {"trees": out, "note": notes[0] if notes and not out else None}


def _sort(node: dict[str, Any]) -> None:
    node["children"].sort(key=lambda c: (-c["ns"], c["name"]))
    for c in node["children"]:
        _sort(c)
