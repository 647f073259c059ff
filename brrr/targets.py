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

from brrr.device import device_name


class TargetMissed(AssertionError):
    """A performance target missed in every attempt."""


def require(what: str, minimum: float, first: float, again: Callable[[], float] | None = None, *,
            attempts: int = 3, show: Callable[[float], str] = lambda value: f"{value:.2f}x") -> float:
    """Check ``first`` (and, on a miss, ``again()``) against ``minimum``; return the best value.

    ``what`` names the target, ``show`` formats a value (a speedup by default).
    Raises :class:`TargetMissed` when all ``attempts`` miss.
    """
    values = [first]
    while values[-1] < minimum and again is not None and len(values) < attempts:
        values.append(again())
    best = max(values)
    met = best >= minimum
    tried = ", ".join(show(value) for value in values)
    print(f"target: {what}: at least {show(minimum)}; measured {tried}: {'met' if met else 'NOT met'}")
    if not met:
        raise TargetMissed(f"{what}: at least {show(minimum)} wanted, measured {tried} "
                           f"in {len(values)} attempt(s) on {device_name()}")
    return best
