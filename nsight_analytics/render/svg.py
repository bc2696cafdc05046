"""Small static SVG charts for the report page's panels: horizontal bars (plain or stacked),
lines over time, a log-log roofline scatter, a waterfall and overlaid histograms.

Panels hold tens to a few thousand marks, which static SVG draws at once with no script and no
library; only the timeline, with up to a million marks, needs the canvas (assets/timeline.js).
Every mark carries a `<title>` (the browser's hover text) with its exact value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from ..units import metric, page_dur, timestamp

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")  # fmt: skip
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg class="chart" role="img" aria-label="{escape(label)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT}>' + "".join(body) + "</svg>"
    )


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


CHAR_W = 7.0  # the widest average advance of FONT's 11 px digits and letters (px), to fit text


def _fit(text: str, px: float) -> str:
    """`text` shortened (with …) to fit `px` pixels of FONT."""
    return _short(text, max(4, int(px // CHAR_W)))


def hbars(
    items: Sequence[tuple[str, Sequence[float]]],
    series: Sequence[str],
    label: str,
    fmt: object = page_dur,
    width: int = 760,
    colors: Sequence[str] = PALETTE,
    stacked: bool = True,
    maximum: float | None = None,
) -> str:
    """One row per item, its values stacked left to right (one value: a plain bar), or with
    `stacked=False` side by side, one thin bar per series (shares of different peaks)."""
    sub = 1 if stacked else len(series)
    row = 4 + 14 * sub
    # the label column: as wide as the longest label needs, at most 40 % of the chart
    left = int(min(width * 0.4, max([60.0, *(CHAR_W * len(name) + 12 for name, _ in items)])))
    top = 18 if len(series) > 1 else 4
    sums = [
        sum(v or 0 for v in vals) if stacked else max((v or 0 for v in vals), default=0) for _, vals in items
    ]
    # room right of the longest bar for the longest value written there
    values = sums if stacked else [v for _, vals in items for v in vals]
    right = int(max([60.0, *(CHAR_W * len(fmt(v)) + 8 for v in values)]))  # type: ignore[operator]
    scale = (width - left - right) / (max([*sums, maximum or 0]) or 1)  # `maximum`: 100 for % of peak
    body, top = _legend(series, colors, width) if len(series) > 1 else ([], top)
    for i, (name, vals) in enumerate(items):
        y = top + i * row
        body.append(
            f'<text x="{left - 6}" y="{y + 7 * sub + 5}" text-anchor="end">{escape(_fit(name, left - 10))}'
            f"<title>{escape(name)}</title></text>"
        )
        x = float(left)
        for j, v in enumerate(vals):
            w = (v or 0) * scale
            yj, h = (y + 2, row - 4) if stacked else (y + 2 + 14 * j, 12)
            tip = f"{name} · {series[j]}: {fmt(v)}"  # type: ignore[operator]
            body.append(
                f'<rect class="mark" x="{x:.1f}" y="{yj}" width="{max(w, 0):.1f}" height="{h}" '
                f'fill="{colors[j % len(colors)]}"><title>{escape(tip)}</title></rect>'
            )
            if stacked:
                x += w
            else:
                body.append(f'<text x="{x + w + 4:.1f}" y="{yj + 10}">{escape(fmt(v))}</text>')  # type: ignore[operator]
        if stacked:
            body.append(f'<text x="{x + 4:.1f}" y="{y + 12}">{escape(fmt(sums[i]))}</text>')  # type: ignore[operator]
    return _svg(width, top + len(items) * row + 4, body, label)


def _legend(series: Sequence[str], colors: Sequence[str], width: int) -> tuple[list[str], int]:
    """The series' colour keys, wrapped onto as many 15 px rows as `width` needs; (marks, height)."""
    out: list[str] = []
    x, y = 4.0, 0
    for j, name in enumerate(series):
        label = _fit(name, width - 22)
        w = 24 + CHAR_W * len(label)
        if x > 4 and x + w > width:
            x, y = 4.0, y + 15
        out.append(
            f'<rect class="key" x="{x:.0f}" y="{y + 3}" width="10" height="10" fill="{colors[j % len(colors)]}"/>'
        )
        out.append(f'<text x="{x + 14:.0f}" y="{y + 12}">{escape(label)}<title>{escape(name)}</title></text>')
        x += w
    return out, y + 18


def lines(
    series: dict[str, list[tuple[float, float]]],
    label: str,
    x_fmt: object = timestamp,
    y_fmt: object = str,
    width: int = 760,
    height: int = 160,
    x_range: tuple[float, float] | None = None,
) -> str:
    """Lines over a shared x axis (time since the capture started); one colour per series.
    `x_range` clips them to the timeline's span, so every chart lines up with it."""
    if x_range:
        series = {k: [p for p in ps if x_range[0] <= p[0] <= x_range[1]] for k, ps in series.items()}
        series = {k: ps for k, ps in series.items() if ps}
    pts = [p for ps in series.values() for p in ps]
    if not pts:
        return ""
    x0, x1 = x_range or (min(p[0] for p in pts), max(p[0] for p in pts))
    y1 = max(max(p[1] for p in pts), 0) or 1
    body, top = _legend(list(series), PALETTE, width)
    height += top - 18
    left, bottom = 76, 20
    sx = (width - left - 10) / ((x1 - x0) or 1)
    sy = (height - top - bottom) / y1
    body.append(f'<text x="{left - 4}" y="{top + 8}" text-anchor="end">{escape(y_fmt(y1))}</text>')  # type: ignore[operator]
    body.append(f'<text x="{left - 4}" y="{height - bottom}" text-anchor="end">0</text>')
    body.append(f'<text x="{left}" y="{height - 4}">{escape(x_fmt(x0))}</text>')  # type: ignore[operator]
    body.append(f'<text x="{width - 10}" y="{height - 4}" text-anchor="end">{escape(x_fmt(x1))}</text>')  # type: ignore[operator]
    for j, (name, ps) in enumerate(series.items()):
        path = " ".join(
            f"{'M' if i == 0 else 'L'}{left + (x - x0) * sx:.1f},{height - bottom - y * sy:.1f}"
            for i, (x, y) in enumerate(ps)
        )
        peak = max(p[1] for p in ps)
        body.append(
            f'<path class="mark" d="{path}" fill="none" stroke="{PALETTE[j % len(PALETTE)]}" stroke-width="1.5">'
            f"<title>{escape(name)}: peak {escape(y_fmt(peak))}</title></path>"  # type: ignore[operator]
        )
    return _svg(width, height, body, label)


_SUPER = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _decade(e: int) -> str:
    """10**e on a log axis as people write it: 0.01, 1, 100, 10k, 1G; beyond, 10⁻⁵ or 10²¹."""
    if -3 <= e <= 2:
        return f"{10.0**e:g}"
    prefixes = {3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
    if e in range(3, 21):
        return f"{10 ** (e % 3)}{prefixes[e - e % 3]}"
    return "10" + str(e).translate(_SUPER)


def roofline(
    points: Sequence[dict[str, object]],
    roofs: Sequence[tuple[str, float, float]],
    label: str,
    width: int = 760,
    height: int = 320,
) -> str:
    """Achieved FLOP/s against arithmetic intensity on log-log axes, under each roof
    (name, peak FLOP/s, peak bytes/s): the flat compute roof meets each sloped memory roof
    at its ridge point."""
    xs = [float(p["x"]) for p in points] + [f / b for _, f, b in roofs if b]  # type: ignore[arg-type]
    ys = [float(p["y"]) for p in points] + [f for _, f, _ in roofs]  # type: ignore[arg-type]
    xs, ys = [x for x in xs if x > 0], [y for y in ys if y > 0]
    if not xs or not ys:
        return ""
    lx0, lx1 = math.floor(math.log10(min(xs))) - 1, math.ceil(math.log10(max(xs))) + 1
    ly0, ly1 = math.floor(math.log10(min(ys))) - 1, math.ceil(math.log10(max(ys))) + 0.3
    left, top, bottom, right = 60, 10, 30, 10

    def px(x: float) -> float:
        return left + (math.log10(x) - lx0) / (lx1 - lx0) * (width - left - right)

    def py(y: float) -> float:
        return height - bottom - (math.log10(y) - ly0) / (ly1 - ly0) * (height - top - bottom)

    body = []
    for e in range(lx0, lx1 + 1):
        body.append(
            f'<line x1="{px(10**e):.1f}" x2="{px(10**e):.1f}" y1="{top}" y2="{height - bottom}" stroke="#eee"/>'
        )
        body.append(
            f'<text x="{px(10**e):.1f}" y="{height - bottom + 12}" text-anchor="middle">{_decade(e)}</text>'
        )
    for e in range(int(ly0), math.ceil(ly1)):
        body.append(
            f'<line x1="{left}" x2="{width - right}" y1="{py(10**e):.1f}" y2="{py(10**e):.1f}" stroke="#eee"/>'
        )
        body.append(f'<text x="{left - 4}" y="{py(10**e) + 4:.1f}" text-anchor="end">{_decade(e)}</text>')
    body.append(f'<text x="{width / 2}" y="{height - 5}" text-anchor="middle">FLOP / byte</text>')
    for j, (name, peak, bw) in enumerate(roofs):
        ridge = peak / bw
        xa = 10**lx0
        body.append(
            f'<path d="M{px(xa):.1f},{py(max(xa * bw, 10**ly0)):.1f} L{px(ridge):.1f},{py(peak):.1f} '
            f'L{px(10**lx1):.1f},{py(peak):.1f}" fill="none" stroke="{PALETTE[j]}" stroke-width="1.5">'
            f"<title>{escape(name)} roof: {metric(peak, 'FLOP/s')}, {metric(bw, 'B/s')}, ridge {ridge:.3g} FLOP/B</title></path>"
        )
        body.append(
            f'<text x="{px(ridge) + 4:.1f}" y="{py(peak) - 4:.1f}" fill="{PALETTE[j]}">{escape(name)}</text>'
        )
    for p in points:
        body.append(
            f'<circle class="mark" cx="{px(float(p["x"])):.1f}" cy="{py(float(p["y"])):.1f}" r="4" '  # type: ignore[arg-type]
            f'fill="{p.get("color", "#e15759")}" fill-opacity="0.7"><title>{escape(str(p["tip"]))}</title></circle>'
        )
    return _svg(width, height, body, label)


def waterfall(parts: Sequence[tuple[str, float]], label: str, width: int = 760) -> str:
    """Each part moves a running total from 0 to their sum (red up: slower, green down: faster)."""
    row, left = 18, 260
    cum, lo, hi = 0.0, 0.0, 0.0
    for _, v in parts:
        cum += v
        lo, hi = min(lo, cum), max(hi, cum)
    scale = (width - left - 90) / ((hi - lo) or 1)
    body, cum = [], 0.0
    for i, (name, v) in enumerate(parts):
        y = 4 + i * row
        a, b = sorted((cum, cum + v))
        color = "#e15759" if v > 0 else "#59a14f"
        body.append(
            f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{escape(_fit(name, left - 10))}<title>{escape(name)}</title></text>'
        )
        body.append(
            f'<rect class="mark" x="{left + (a - lo) * scale:.1f}" y="{y + 2}" width="{max((b - a) * scale, 1):.1f}" '
            f'height="{row - 4}" fill="{color}"><title>{escape(name)}: {page_dur(v)}</title></rect>'
        )
        body.append(f'<text x="{left + (b - lo) * scale + 4:.1f}" y="{y + 12}">{escape(page_dur(v))}</text>')
        cum += v
    x0 = left + (0 - lo) * scale
    body.append(f'<line x1="{x0:.1f}" x2="{x0:.1f}" y1="0" y2="{4 + len(parts) * row}" stroke="#333"/>')
    return _svg(width, 8 + len(parts) * row, body, label)


def histograms(series: dict[str, Sequence[float]], label: str, width: int = 760, height: int = 170) -> str:
    """Overlaid histograms of durations on one axis (the per-step distributions of a diff)."""
    values = [v for vs in series.values() for v in vs]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    n = 40
    w = ((hi - lo) or 1) / n
    counts = {k: [0] * n for k in series}
    for k, vs in series.items():
        for v in vs:
            counts[k][min(int((v - lo) / w), n - 1)] += 1
    top = max(max(c) for c in counts.values()) or 1
    left, bottom = 40, 20
    bw = (width - left - 10) / n
    body, head = _legend(list(series), PALETTE, width)
    height += head - 18
    for j, (k, cs) in enumerate(counts.items()):
        for i, c in enumerate(cs):
            if c:
                h = c / top * (height - head - bottom)
                tip = f"{k}: {c} steps in {page_dur(lo + i * w)} – {page_dur(lo + (i + 1) * w)}"
                body.append(
                    f'<rect class="mark" x="{left + i * bw:.1f}" y="{height - bottom - h:.1f}" width="{bw - 1:.1f}" '
                    f'height="{h:.1f}" fill="{PALETTE[j]}" fill-opacity="0.55"><title>{escape(tip)}</title></rect>'
                )
    body.append(f'<text x="{left}" y="{height - 4}">{escape(page_dur(lo))}</text>')
    body.append(f'<text x="{width - 10}" y="{height - 4}" text-anchor="end">{escape(page_dur(hi))}</text>')
    return _svg(width, height, body, label)


FLAME_COLORS = {"idle": "#dddddd", "caller": "#a0cbe8", "user": "#4e79a7", "library": "#bab0ac"}
FLAME_ROW = 18
FLAME_DEPTH = 40  # rows drawn at most; deeper frames are in the tooltip of the last row's


def _where(node: dict[str, object]) -> str:
    """`file:line` of a frame, the file shortened to its last two parts."""
    file, line = node.get("file"), node.get("line")
    if not file:
        return ""
    short = "/".join(str(file).split("/")[-2:])
    return f"{short}:{line}" if line is not None else short


def flame(root: dict[str, object], label: str, width: int = 760) -> str:
    """An icicle flame graph: the root (all idle time) on top, each frame below its caller, as
    wide as the time it explains; the width left free under a frame is time no deeper frame
    explains. A frame's label is written inside when it fits; its `<title>` (hover) gives the
    function, file:line, the time and its share of the root."""
    total = float(root.get("ns") or 0)  # type: ignore[arg-type]
    if total <= 0:
        return ""
    scale = width / total
    body: list[str] = []
    deepest = 0

    def draw(node: dict[str, object], x: float, depth: int) -> None:
        nonlocal deepest
        ns = float(node.get("ns") or 0)  # type: ignore[arg-type]
        w = ns * scale
        if w < 0.5 or depth >= FLAME_DEPTH:
            return
        deepest = max(deepest, depth)
        kind = str(node.get("kind"))
        name = str(node.get("name"))
        where = _where(node)
        tip = "\n".join(
            t for t in (name, where, f"{page_dur(ns)} ({ns / total * 100:.1f} % of the idle time)") if t
        )
        y = depth * FLAME_ROW
        fill = FLAME_COLORS.get(kind, "#bab0ac")
        body.append(
            f'<g class="frame" data-name="{escape(name, quote=True)}" data-kind="{kind}" data-ns="{ns:.0f}"'
            f' data-where="{escape(where, quote=True)}"><title>{escape(tip)}</title>'
            f'<rect class="mark" x="{x:.2f}" y="{y}" width="{max(w - 0.5, 0.5):.2f}" height="{FLAME_ROW - 1}" '
            f'fill="{fill}"/>'
        )
        text = f"{name} {where}" if where else name
        if w > 3 * CHAR_W:
            color = "#ffffff" if kind == "user" else "#222222"
            body.append(
                f'<text x="{x + 3:.2f}" y="{y + 12.5}" fill="{color}">{escape(_fit(text, w - 6))}</text>'
            )
        body.append("</g>")
        at = x
        for child in node.get("children") or []:  # type: ignore[attr-defined]
            draw(child, at, depth + 1)
            at += float(child.get("ns") or 0) * scale

    draw(root, 0.0, 0)
    return _svg(width, (deepest + 1) * FLAME_ROW + 2, body, label)
