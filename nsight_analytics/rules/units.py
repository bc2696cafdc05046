"""Numbers with units, as a performance engineer reads them in a finding's sentence."""

from __future__ import annotations


def dur(ns: float | None, micro: str = "us") -> str:
    """A duration in the unit that keeps 3 significant digits: 1.7 us, 45.2 ms, 1.51 s. Tables
    write microseconds as `µs` (`micro`); finding sentences keep ASCII `us`."""
    if ns is None:
        return "n/a"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), (micro, 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if ns / scale < 1000 else f"{ns / scale:,.0f} {unit}"
    return f"{ns:.0f} ns"


def size(n: float | None) -> str:
    """Bytes in decimal units (GB = 1e9 B), matching GB/s."""
    if n is None:
        return "n/a"
    n = float(n)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def bw(bytes_: float | None, ns: float | None) -> str:
    """Bandwidth in GB/s (bytes per ns = GB/s)."""
    if not bytes_ or not ns:
        return "n/a"
    return f"{bytes_ / ns:.3g} GB/s"


def pct(fraction: float | None) -> str:
    if fraction is None:
        return "n/a"
    p = 100.0 * fraction
    return f"{p:.0f}%" if p >= 10 else f"{p:.2g}%"


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, the cut marked with `...`."""
    return text if len(text) <= width else text[: width - 3] + "..."


def count(n: float) -> str:
    return f"{int(n):,}"


def plural(n: float, word: str) -> str:
    """'1 gap', '2 gaps', '1,024 kernels'."""
    return f"{count(n)} {word}" + ("" if int(n) == 1 else "s")
