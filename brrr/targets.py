"""Enforce a performance target where it is measured, with every attempt shown.

A notebook cell or a benchmark script that measures a target calls
:func:`require`. A miss is measured again (a stall on a shared machine is not a
regression), up to ``attempts`` times in all; each attempt is printed. What a
miss in every attempt does depends on where it happens (:func:`missed`):

- **Strict** (:data:`STRICT` set: ``make``, the test suite, every book build,
  ``make gpu-check``): :class:`TargetMissed` is raised, which fails the
  notebook's execution with the figures in the message.
- **A reader's own session** (Jupyter, Colab; the variable unset): the miss is
  printed with its likely causes and how to measure again, and the notebook
  goes on. There a miss is most often a busy laptop, and a traceback would say
  the code is broken.

:func:`check` does the same for a measured claim that is a condition rather
than a value (``brrr.roofline.require_memory_bound``, a notebook's claim).
:func:`measurements` is the one retry loop (measure, judge, measure again) that
every target, claim, benchmark script and grader check uses. Grading uses it
and nothing else here: a lab's verdict is computed by its grader process
(``brrr.grading``), whatever this variable says in the student's kernel.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Callable, Iterator, TypeVar

from brrr import column, units

Measured = TypeVar("Measured")  # what measurements() retries: a number or a whole result

# The one switch, read by strict() alone. Set to 1 by the Makefile (every target), tests/conftest.py
# (the suite and the book build it runs), brrr_book.book_pages (any book build) and .ci/gpu-check.
STRICT = "BRRR_STRICT"

READER_MISS = """\
Missed here: {message}
In your own session a miss is most often the machine, not the code:
  - other work busy at the same time (a browser, a sync, another notebook;
    on Colab, other users of the same host);
  - a laptop on battery power, or running hot;
  - a first run, which also compiles its kernels.
To measure again, close what you can and re-run this cell. Where the check
compares with this machine's roofs, measure those again first, then run the
notebook from the top:
  python -m brrr.ceilings --refresh; python -m brrr.ceilings --refresh --threads 1
(With {variable}=1 a miss is an error, as in the book's own build.)"""


class TargetMissed(AssertionError):
    """A performance target, or a measured claim, missed in every attempt."""


@contextlib.contextmanager
def said_only_if_missed() -> Iterator[None]:
    """Hold what the targets checked inside print, and show it only where one was missed
    (:func:`missed` ran, or a miss raised): a page whose targets all held keeps their bookkeeping
    out of the reader's way, and a miss (a target's, or a claim's :func:`check`) still shows every
    attempt."""
    held, misses_before = io.StringIO(), _misses
    try:
        with contextlib.redirect_stdout(held):
            yield
    except BaseException:
        sys.stdout.write(held.getvalue())
        raise
    if _misses > misses_before:
        sys.stdout.write(held.getvalue())


def strict() -> bool:
    """Whether a miss raises :class:`TargetMissed` (:data:`STRICT` set to anything but 0) or is
    printed."""
    return os.environ.get(STRICT, "") not in ("", "0")


_misses = 0  # every miss so far in this process, counted by missed(): said_only_if_missed reads it


def missed(message: str) -> None:
    """A target or a measured claim missed: raise :class:`TargetMissed` where :func:`strict`;
    elsewhere print the miss, its likely causes and how to measure again (:data:`READER_MISS`), and
    return."""
    global _misses
    _misses += 1
    if strict():
        raise TargetMissed(message)
    print(READER_MISS.format(message=message, variable=STRICT))


def recorded(kind: str, name: str, **check) -> None:
    """Put a check's verdict on the GPU record (:func:`brrr.reference.record_check`) when the GPU
    check is recording, before a miss raises; elsewhere nothing (and no torch imported: book_pages
    uses this module)."""
    if os.environ.get("BRRR_RECORD_REFERENCE"):
        from brrr import reference

        reference.record_check(kind, name, **check)


def check(held: bool, message: str) -> bool:
    """A measured claim that is a condition: ``held``, after :func:`missed` with ``message`` where
    it is not. Where a plain ``assert`` would put a reader's noise in a traceback."""
    recorded("condition", message, verdict="held" if held else "NOT held", value=held)
    if not held:
        missed(message)
    return held


def require(
    what: str,
    minimum: float,
    first: float,
    again: Callable[[], float] | None = None,
    *,
    attempts: int = 3,
    show: Callable[[float], str] | None = None,
) -> float:
    """Check ``first`` (and, on a miss, ``again()``) against ``minimum``; return the best value.

    ``what`` names the target, ``show`` formats a value (by default a ratio, "1.23x", with the
    decimals that keep it on its side of ``minimum``: 1.497 is not shown as a "1.50x" that missed
    1.50x). When all ``attempts`` miss, :func:`missed` raises :class:`TargetMissed` (strict) or
    prints why."""
    return _require(what, first, again, attempts, show, bound=minimum, at_least=True)


def require_at_most(
    what: str,
    maximum: float,
    first: float,
    again: Callable[[], float] | None = None,
    *,
    attempts: int = 3,
    show: Callable[[float], str] | None = None,
) -> float:
    """:func:`require` for a value that must stay at or below ``maximum`` (a ratio of times that
    should be flat, say); returns the lowest value measured."""
    return _require(what, first, again, attempts, show, bound=maximum, at_least=False)


def require_between(
    what: str,
    minimum: float,
    maximum: float,
    first: float,
    again: Callable[[], float] | None = None,
    *,
    attempts: int = 3,
    show: Callable[[float], str] | None = None,
) -> float:
    """:func:`require` for a value that must lie in ``[minimum, maximum]`` (a measured time over a
    model's lower bound, say: not far below it, which would break the bound, nor far above); returns
    the value closest to the range's middle (in ratio), the first one that meets it if any does."""

    def meets(value: float) -> bool:
        return minimum <= value <= maximum

    show = show or _ratio(minimum, maximum)
    values = measurements(first, again, meets, attempts=attempts)
    met = [value for value in values if meets(value)]
    middle = (minimum * maximum) ** 0.5
    best = met[0] if met else min(values, key=lambda value: max(value / middle, middle / value))
    recorded(
        "target",
        what,
        verdict="met" if met else "NOT met",
        value=best,
        bound=[minimum, maximum],
        attempts=values,
    )
    _report(what, f"between {show(minimum)} and {show(maximum)}", values, bool(met), show)
    return best


def measurements(
    first: Measured,
    again: Callable[[], Measured] | None,
    meets: Callable[[Measured], bool],
    *,
    attempts: int = 3,
) -> list[Measured]:
    """``first``, then ``again()`` while the latest value misses (``meets`` is false), ``attempts``
    values at most: a stall on a shared machine gets more chances, and every value is kept to be
    shown. The one retry loop: a value is a number here, or a whole measurement (a benchmark's
    result, a grader's attempt), and ``meets`` says whether it ends the retries (a pass, or a miss
    no retry can turn)."""
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
    wanted = {"at_least" if at_least else "at_most": bound}
    recorded(
        "target",
        what,
        verdict="met" if meets(best) else "NOT met",
        value=best,
        bound=wanted,
        attempts=values,
    )
    _report(
        what, f"{'at least' if at_least else 'at most'} {show(bound)}", values, meets(best), show
    )
    return best


def _ratio(*thresholds: float) -> Callable[[float], str]:
    """A ratio as "1.23x", with the decimals that keep it on its side of each threshold."""
    return lambda value: units.ratio(value, thresholds)


def _report(
    what: str, wanted: str, values: list[float], met: bool, show: Callable[[float], str]
) -> None:
    """Print the target's line with every attempt; if it was not met, :func:`missed`."""
    tried = ", ".join(show(value) for value in values)
    print(column.fit(f"target: {what}: {wanted}; measured {tried}: {'met' if met else 'NOT met'}"))
    if not met:
        from brrr.device import (
            device_name,
        )  # torch: this module imports without it (book_pages, roofline)

        missed(
            f"{what}: {wanted} wanted, measured {tried} in {len(values)} attempt(s) on "
            f"{device_name()}"
        )
