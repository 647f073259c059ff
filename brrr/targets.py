"""Enforce a performance target where it is measured, with every attempt shown.

A notebook cell or a benchmark script that measures a target calls
:func:`require`. A miss is measured again (a stall on a shared machine is not a
regression), up to ``attempts`` times in all; each attempt is printed; if every
attempt misses, :class:`TargetMissed` is raised, which fails the notebook's
execution (the book build, nbval, ``make gpu-check``) with the figures in the
message.
"""

from __future__ import annotations

from typing import Callable

from brrr import units
from brrr.device import device_name


class TargetMissed(AssertionError):
    """A performance target, or a measured claim, missed in every attempt."""


def require(what: str, minimum: float, first: float, again: Callable[[], float] | None = None, *,
            attempts: int = 3, show: Callable[[float], str] | None = None) -> float:
    """Check ``first`` (and, on a miss, ``again()``) against ``minimum``; return the best value.

    ``what`` names the target, ``show`` formats a value (by default a ratio, "1.23x", with the decimals
    that keep it on its side of ``minimum``: 1.497 is not shown as a "1.50x" that missed 1.50x).
    Raises :class:`TargetMissed` when all ``attempts`` miss.
    """
    return _require(what, first, again, attempts, show, bound=minimum, at_least=True)


def require_at_most(what: str, maximum: float, first: float, again: Callable[[], float] | None = None, *,
                    attempts: int = 3, show: Callable[[float], str] | None = None) -> float:
    """:func:`require` for a value that must stay at or below ``maximum`` (a ratio of times that should
    be flat, say); returns the lowest value measured."""
    return _require(what, first, again, attempts, show, bound=maximum, at_least=False)


def require_between(what: str, minimum: float, maximum: float, first: float,
                    again: Callable[[], float] | None = None, *, attempts: int = 3,
                    show: Callable[[float], str] | None = None) -> float:
    """:func:`require` for a value that must lie in ``[minimum, maximum]`` (a measured time over a model's
    lower bound, say: not far below it, which would break the bound, nor far above); returns the value
    closest to the range's middle (in ratio), the first one that meets it if any does."""
    def meets(value: float) -> bool:
        return minimum <= value <= maximum

    show = show or _ratio(minimum, maximum)
    values = measurements(first, again, meets, attempts=attempts)
    met = [value for value in values if meets(value)]
    middle = (minimum * maximum) ** 0.5
    best = met[0] if met else min(values, key=lambda value: max(value / middle, middle / value))
    _report(what, f"between {show(minimum)} and {show(maximum)}", values, bool(met), show)
    return best


def measurements(first: float, again: Callable[[], float] | None, meets: Callable[[float], bool], *,
                 attempts: int = 3) -> list[float]:
    """``first``, then ``again()`` while the latest value misses (``meets`` is false), ``attempts`` values at
    most: a stall on a shared machine gets more chances, and every value is kept to be shown."""
    values = [first]
    while not meets(values[-1]) and again is not None and len(values) < attempts:
        values.append(again())
    return values


def _require(what, first, again, attempts, show, *, bound: float, at_least: bool) -> float:
    def meets(value: float) -> bool:
        return value >= bound if at_least else value <= bound

    show = show or _ratio(bound)
    values = measurements(first, again, meets, attempts=attempts)
    best = max(values) if at_least else min(values)
    _report(what, f"{'at least' if at_least else 'at most'} {show(bound)}", values, meets(best), show)
    return best


def _ratio(*thresholds: float) -> Callable[[float], str]:
    """A ratio as "1.23x", with the decimals that keep it on its side of each threshold."""
    return lambda value: units.ratio(value, thresholds)


def _report(what: str, wanted: str, values: list[float], met: bool, show: Callable[[float], str]) -> None:
    """Print the target's line with every attempt; raise :class:`TargetMissed` if it was not met."""
    tried = ", ".join(show(value) for value in values)
    print(f"target: {what}: {wanted}; measured {tried}: {'met' if met else 'NOT met'}")
    if not met:
        raise TargetMissed(f"{what}: {wanted} wanted, measured {tried} "
                           f"in {len(values)} attempt(s) on {device_name()}")
