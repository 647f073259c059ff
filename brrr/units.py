"""Numbers with their units.

Every number the book prints carries a unit, and a rate carries the ceiling it is
measured against::

    >>> fraction_of(1.41e12, 3.0e12, "B/s", "measured copy bandwidth")
    '1.41 TB/s = 47% of 3.00 TB/s measured copy bandwidth'

Rates use decimal prefixes (1 GB/s = 1e9 bytes per second), as datasheets do.
Sizes of buffers use binary prefixes (1 MiB = 2**20 bytes).
"""

from __future__ import annotations

import math
from typing import Sequence

_DECIMAL = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]


def si(value: float, unit: str, digits: int = 3) -> str:
    """``si(2.5e12, 'FLOP/s') == '2.50 TFLOP/s'``: three significant digits by default."""
    if value != value:  # NaN
        return f"nan {unit}"
    magnitude = abs(value)
    for scale, prefix in _DECIMAL:
        if magnitude >= scale:
            return f"{_sig(value / scale, digits)} {prefix}{unit}"
    return f"{_sig(value, digits)} {unit}"


def _sig(x: float, digits: int) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1:
        decimals = max(digits - len(str(int(abs(x)))), 0)
    else:
        decimals = digits - 1 - math.floor(math.log10(abs(x)))
    return f"{x:.{decimals}f}"


def beside(value: float, decimals: int = 2, thresholds: tuple[float, ...] = ()) -> str:
    """``value`` to ``decimals`` places, or to more where fewer would round it onto or across one of
    ``thresholds``: a figure printed beside a verdict sits on the side of the line the verdict says.

    >>> beside(1.503, 2, (1.5,)), beside(3.46, 0, (4,)), beside(3.96, 0, (4,))
    ('1.503', '3', '3.96')
    """

    def side(x: float, threshold: float) -> int:
        return (x > threshold) - (x < threshold)

    text = f"{value:.{decimals}f}"
    for places in range(decimals + 1, decimals + 7):
        if all(side(float(text), threshold) == side(value, threshold) for threshold in thresholds):
            break
        text = f"{value:.{places}f}"
    return text


def ratio(value: float, thresholds: tuple[float, ...] = (), decimals: int = 2) -> str:
    """A ratio as "1.23x", kept on its side of each of ``thresholds`` (:func:`beside`)."""
    return beside(value, decimals, thresholds) + "x"


def seconds(value: float) -> str:
    """A duration with a fitting unit: '812 ns', '3.40 us', '12.1 ms', '2.05 s'."""
    magnitude = abs(value)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if magnitude >= scale:
            return f"{_sig(value / scale, 3)} {unit}"
    return f"{_sig(value / 1e-9, 3)} ns"


def binary_bytes(value: float) -> str:
    """A buffer size: '256 MiB', '1.50 GiB', '48.0 KiB'."""
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(value) >= scale:
            return f"{_sig(value / scale, 3)} {unit}"
    return f"{int(value)} B"


def bandwidth(bytes_per_s: float) -> str:
    return si(bytes_per_s, "B/s")


def flops(flop_per_s: float) -> str:
    return si(flop_per_s, "FLOP/s")


def percent(fraction: float, thresholds: tuple[float, ...] = ()) -> str:
    """``fraction`` as a whole percentage, with decimals only where it would round onto one of
    ``thresholds`` (fractions too): 0.7496 against 0.75 is "74.96%", not a "75%" that failed 75%.
    A fraction that would round to "0%" keeps two significant digits instead ("0.057%"): a small
    rate against a far larger roof is still a rate."""
    value, lines = fraction * 100, tuple(100 * t for t in thresholds)
    decimals = (
        1 - math.floor(math.log10(abs(value))) if value and f"{value:.0f}" in ("0", "-0") else 0
    )
    return beside(value, decimals, lines) + "%"


def fraction_of(
    value: float,
    ceiling: float,
    unit: str,
    ceiling_name: str,
    *,
    above: str = "",
    thresholds: tuple[float, ...] = (),
) -> str:
    """'<value> = <pct> of <ceiling> <ceiling_name>', both in ``unit`` with SI prefixes.

    A roof that a measurement exceeds needs its reason on the same line: ``above``
    is printed after the numbers when ``value`` is more than ``ceiling``. ``thresholds``
    (fractions of the ceiling) go to :func:`percent`.
    """
    if above:
        thresholds = (*thresholds, 1.0)  # a value flagged above its ceiling never prints as "100%"
    text = (
        f"{si(value, unit)} = {percent(value / ceiling, thresholds)} of {si(ceiling, unit)} "
        f"{ceiling_name}"
    )
    return f"{text} (above it: {above})" if above and value > ceiling else text


def footnoted(rows: Sequence[tuple[str, str]], reasons: dict[str, str], roof: str) -> list[str]:
    """Table lines from ``(line, mark)`` rows: a marked line ends in its mark, and each mark used is
    explained once under the table ("* above the <roof>: <reason>."), in the order the marks first
    appear. A reason repeated on every row it applies to drowns the table; said once, it is read."""
    used = list(dict.fromkeys(mark for _, mark in rows if mark))
    return [f"{line} {mark}" if mark else line for line, mark in rows] + [
        f"{mark} above the {roof}: {reasons[mark]}." for mark in used
    ]
