"""Roofline math: arithmetic intensity, ridge point, predicted time and regime.

An op that does ``flops`` FLOPs and moves ``bytes`` bytes on a machine with
compute roof ``P`` (FLOP/s), memory roof ``B`` (B/s) and per-op overhead ``o``
(s) takes at least::

    t ≥ max(o, flops / P, bytes / B)        on a GPU: the host issues the next op while
                                            the device runs this one, so they overlap
    t ≥ o + max(flops / P, bytes / B)       on a CPU: dispatch and kernel run one after
                                            the other on the same thread, so they add

A :class:`Roof` says which (``overhead_adds``); ``brrr.ceilings`` sets it for the
device it measured.

Its arithmetic intensity is ``I = flops / bytes`` and the ridge point is
``P / B``: below the ridge an op is memory-bound, above it compute-bound. If
neither term beats the per-op overhead, it is overhead-bound, the essay's third
regime: the device finishes before the host can hand it the next op.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from brrr import targets, units


@dataclass(frozen=True)
class Roof:
    """One roofline: a compute roof, a memory roof and an overhead floor."""

    peak_flops: float  # FLOP/s
    bandwidth: float  # B/s
    overhead_s: float = 0.0  # s per op
    label: str = ""
    overhead_adds: bool = (
        False  # True where dispatch and kernel run on one thread (a CPU): the costs add
    )

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte at which compute time equals memory time."""
        return self.peak_flops / self.bandwidth


class Regime(str, enum.Enum):
    COMPUTE = "compute-bound"
    MEMORY = "memory-bound"
    OVERHEAD = "overhead-bound"

    def __str__(self) -> str:
        return self.value


def intensity(flops: float, bytes_moved: float) -> float:
    """FLOPs per byte moved to or from main memory."""
    if bytes_moved <= 0:
        raise ValueError(f"bytes_moved must be positive, got {bytes_moved}")
    return flops / bytes_moved


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The intensity (FLOPs/byte) at which compute time equals memory time."""
    return peak_flops / bandwidth


def attainable_flops(op_intensity: float, roof: Roof) -> float:
    """The roofline itself: min(peak, intensity × bandwidth), in FLOP/s."""
    return min(roof.peak_flops, op_intensity * roof.bandwidth)


def compute_time(flops: float, roof: Roof) -> float:
    return flops / roof.peak_flops


def memory_time(bytes_moved: float, roof: Roof) -> float:
    return bytes_moved / roof.bandwidth


def predicted_time(flops: float, bytes_moved: float, roof: Roof) -> float:
    """Lower bound on the op's time: the slower of compute and memory, then the overhead.

    The overhead overlaps the work where the host runs ahead of the device (a GPU),
    and adds to it where both run on one thread (``roof.overhead_adds``, a CPU).
    """
    work = max(compute_time(flops, roof), memory_time(bytes_moved, roof))
    return roof.overhead_s + work if roof.overhead_adds else max(roof.overhead_s, work)


def regime(flops: float, bytes_moved: float, roof: Roof) -> Regime:
    """Which of the three limits sets the op's predicted time."""
    compute, memory = compute_time(flops, roof), memory_time(bytes_moved, roof)
    if roof.overhead_s >= max(compute, memory):
        return Regime.OVERHEAD
    return Regime.COMPUTE if compute >= memory else Regime.MEMORY


def fraction_of_roof(flops: float, bytes_moved: float, measured_s: float, roof: Roof) -> float:
    """Measured speed as a fraction of what the roofline allows (1.0 = on the roof)."""
    return predicted_time(flops, bytes_moved, roof) / measured_s


def require_memory_bound(
    ops: dict, roof: Roof, measure_again: Callable[[], Roof] | None = None
) -> bool:
    """Whether every op in ``ops`` (name -> a count with ``flops`` and ``bytes``) is memory-bound
    against ``roof``; a miss goes to :func:`brrr.targets.check` (raised where strict, printed with
    how to measure again in a reader's session).

    For ops the book says are memory-bound on any machine (layer norm, softmax: a
    few FLOPs per element read and written). If one is not, the roof is suspect:
    a vector peak measured as a latency or under load, or a bandwidth measured in
    cache. So before the claim fails, ``measure_again()`` (the roofs measured
    anew, e.g. :func:`brrr.ceilings.measured_again`) gives the roof to judge by.
    """

    def wrong_against(judged: Roof) -> dict[str, str]:
        found = {name: regime(op.flops, op.bytes, judged) for name, op in ops.items()}
        return {name: str(kind) for name, kind in found.items() if kind is not Regime.MEMORY}

    wrong = wrong_against(roof)
    if wrong and measure_again is not None:
        print(
            f"{', '.join(wrong)}: not memory-bound against the {roof.label} roof "
            f"({roof.peak_flops:.3g} FLOP/s); measuring the roofs again"
        )
        roof = measure_again()
        wrong = wrong_against(roof)
    return targets.check(
        not wrong,
        (
            f"expected memory-bound, got {wrong} against {roof.label} roof "
            f"({roof.peak_flops:.3g} FLOP/s, {roof.bandwidth:.3g} B/s, ridge "
            f"{roof.ridge_point:.2f} FLOP/byte): "
            "check the ceilings (python -m brrr.ceilings --refresh)"
        ),
    )


# A measured rate may exceed a roof measured in the same run by its own spread plus this much before
# it counts as beating the roof: the roof is a median too, a few percent noisy on a shared machine.
ROOF_NOISE = 0.05


def above_roof(value: float, roof: float, spread: float, *, beyond: str = "") -> str:
    """Why ``value`` sits above ``roof``, for the same line (:func:`brrr.units.fraction_of`'s
    ``above``).

    Within ``spread`` (the measurement's (p80 - p20) / median) plus :data:`ROOF_NOISE` it is noise,
    and the line says so; beyond that the roof is wrong, and the line says that, with ``beyond``
    (what the roof was measured on) if given. An empty string where ``value`` is at or below
    ``roof``."""
    excess = value / roof - 1
    if excess <= 0:
        return ""
    if excess <= spread + ROOF_NOISE:
        return (
            f"{units.percent(excess)} over, within this run's spread ({units.percent(spread)}) "
            "and the roof's own noise"
        )
    return f"{units.percent(excess)} over, beyond this run's spread ({units.percent(spread)}): " + (
        beyond or "the roof is below what the same code reaches here: a low roof, not a fast kernel"
    )
