"""Numbers in words: durations, sizes, rates, percentages and counts as people read them.

The one module that turns a number into text for people: finding sentences, terminal and
Markdown tables, `nsa summary`, the diff and the report page all call it, so 45.2 ms reads the
same everywhere. Sentences keep ASCII (`us`); tables and the page write `µs`. `none` is what a
missing value reads as where it is shown: `n/a` in sentences, `-` in text tables, `–` on the page.
"""

from __future__ import annotations

import math
from typing import Any


def dur(ns: float | None, micro: str = "us", none: str = "n/a") -> str:
    """A duration in the unit that keeps 3 significant digits: 1.7 us, 45.2 ms, 1.51 s, 1,234 s."""
    if ns is None:
        return none
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), (micro, 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if ns / scale < 1000 else f"{ns / scale:,.0f} {unit}"
    return f"{ns:.0f} ns"


def signed(ns: float | None, micro: str = "us", none: str = "n/a", zero: str | None = None) -> str:
    """A change of duration with its sign: +1.2 ms, -450 us; `zero` (if given) for less than
    half a nanosecond either way."""
    if ns is None:
        return none
    if zero is not None and abs(ns) < 0.5:
        return zero
    return ("+" if ns > 0 else "-" if ns < 0 else "") + dur(abs(ns), micro)


def timestamp(ns: float | None, none: str = "–") -> str:
    """A point in time since the capture started, to the millisecond: 11.912 s."""
    return none if ns is None else f"{ns / 1e9:.3f} s"


def size(n: float | None, none: str = "n/a", kilo: str = "KB") -> str:
    """Bytes in decimal units (GB = 1e9 B), matching GB/s. The page's charts write `kB`."""
    if n is None:
        return none
    n = float(n)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), (kilo, 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def rate(gb_per_s: float | None, none: str = "-") -> str:
    """GB/s with three significant digits, never in exponent notation (1,510 GB/s)."""
    if gb_per_s is None:
        return none
    return f"{gb_per_s:.3g} GB/s" if gb_per_s < 1000 else f"{gb_per_s:,.0f} GB/s"


def bw(bytes_: float | None, ns: float | None) -> str:
    """Bandwidth of `bytes_` moved in `ns` (bytes per ns = GB/s)."""
    if not bytes_ or not ns:
        return "n/a"
    return rate(bytes_ / ns)


def pct(fraction: float | None, none: str = "n/a") -> str:
    """A fraction as a sentence says it: 12%, 4.5%, 0.31%."""
    if fraction is None:
        return none
    p = 100.0 * fraction
    return f"{p:.0f}%" if p >= 10 else f"{p:.2g}%"


def pct_of(part: float, whole: float, none: str = "-") -> str:
    """`part` of `whole` to a tenth of a percent, as tables show it: 12.3%."""
    return f"{100 * part / whole:.1f}%" if whole else none


def percent(value: float | None, none: str = "–", space: bool = True) -> str:
    """A value already in percent (ncu's `% of peak`), to a tenth: 42.5 % on the page, 42.5% in
    text tables (`space=False`)."""
    if value is None:
        return none
    return f"{value:.1f}{' ' if space else ''}%"


def signed_pct(fraction: float) -> str:
    """A relative change with its sign: +12.3%, -0.4%."""
    return f"{fraction * 100:+.1f}%"


def count(n: float) -> str:
    return f"{int(n):,}"


def plural(n: float, word: str) -> str:
    """'1 gap', '2 gaps', '1,024 kernels'."""
    return f"{count(n)} {word}" + ("" if int(n) == 1 else "s")


def decimal(v: float | None, none: str = "-") -> str:
    """A measure to a tenth with thousands separators: 1,234.5."""
    return none if v is None else f"{v:,.1f}"


def num(v: Any, none: str = "–") -> str:
    """A count with thousands separators, a measure to 4 significant digits; never 1.7e+07."""
    if v is None:
        return none
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 1e4:
        return f"{v:,.0f}"
    if v == 0 or abs(v) >= 1e-3:
        return f"{v:.4g}"
    return f"{v:.6f}"


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, the cut marked with `...`."""
    return text if len(text) <= width else text[: width - 3] + "..."


# SI prefixes for values in a metric's own unit (Hz, B/s, W, ...)
_PREFIXES = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))
_UNITS = {
    "flop/s": "FLOP/s",
    "hz": "Hz",
    "b/s": "B/s",
    "byte/s": "B/s",
    "bytes/s": "B/s",
    "w": "W",
    "b": "B",
    "byte": "B",
    "bytes": "B",
}


def unit_name(unit: str | None) -> str:
    """A metric's unit as people write it: Hz, B/s (the capture may say hz, byte/s)."""
    u = (unit or "").strip()
    return _UNITS.get(u.lower(), u)


def metric(v: float | None, unit: str | None, none: str = "–") -> str:
    """A value in its unit: 1.99 GHz, 168 GB/s, 42.5 %; a unit that takes no SI prefix keeps it
    apart: 67.7M Avg; 1.98 PFLOP/s, never 1.98e+03 TFLOP/s."""
    if v is None:
        return none
    try:
        if math.isnan(v):
            return none
    except TypeError:  # pandas' NA, which no comparison tells true or false
        return none
    u = (unit or "").strip()
    if u in ("%", "percent", "pct"):
        return f"{v:.3g} %"
    known = _UNITS.get(u.lower())
    for prefix, scale in _PREFIXES:
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{known}" if known else f"{v / scale:.3g}{prefix} {u}".rstrip()
    return f"{v:.3g} {known or u}".rstrip()


# The report page's style, as one-argument functions for its table columns and chart labels: µs,
# kB, and an en dash for no value.


def page_dur(ns: float | None) -> str:
    """A duration on the page: 1.23 ms, 456 µs, 2.5 s."""
    return dur(ns, micro="µs", none="–")


def page_size(n: float | None) -> str:
    """Bytes on the page: 3.4 GB, 512 kB."""
    return size(n, none="–", kilo="kB")


def page_percent(value: float | None) -> str:
    """A value already in percent, on the page: 42.5 %."""
    return percent(value)


# Text and Markdown tables (`nsa summary`, `nsa diff`, `nsa query --format table`): µs, and a
# hyphen for no value.


def table_dur(ns: float | None) -> str:
    """A duration in a text table: 1.23 ms, 456 µs."""
    return dur(ns, micro="µs", none="-")


def table_signed(ns: float | None) -> str:
    """A change of duration in a text table: +1.2 ms, -456 µs, 0."""
    return signed(ns, micro="µs", none="-", zero="0")


def whole_pct(fraction: float | None, none: str = "-") -> str:
    """A fraction to the whole percent, as tables show a share: 12%, 0%."""
    return none if fraction is None else f"{fraction * 100:.0f}%"
