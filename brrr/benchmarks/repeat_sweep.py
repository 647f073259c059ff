"""The essay's repeat sweep: ``x = x * 2`` repeated 1…256 times, compiled into one kernel.

The kernel writes into a preallocated output (:func:`times_two_into`), so the
times are the kernel's and not the allocator's.

Each repeat adds one FLOP per element and no memory traffic, because the compiled
kernel keeps ``x`` in registers: it reads ``n`` elements once and writes ``n``
once whatever the count. With ``s`` bytes per element::

    FLOPs = repeats · n        bytes = 2 · n · s        intensity = repeats / (2 s)

The runtime is the larger of memory time ``2 n s / B`` and compute time
``repeats · n / P``. It stays flat while memory dominates and grows linearly once
compute does. The two meet at the knee::

    repeats* = 2 s P / B

:func:`predicted_knee` computes it from measured ceilings, :func:`measured_knee`
finds it in a measured sweep, and :func:`place` puts any (size, dtype, repeats)
on the roofline without running it, for the explorer in
``notebooks/11-repeat-sweep``.

After 128 doublings an fp32 value overflows to ``inf``; the hardware multiplies
``inf`` at full speed, so the timing is unaffected (the essay's sweep did the same).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import torch

from brrr import counting, roofline, targets, units
from brrr.benchmarks.compiling import Compiled, compile_for_timing
from brrr.roofline import Roof
from brrr.device import DEVICE, per_device
from brrr.timing import Timing, bench, bench_together, median_per_round, thread_clock_for

# On a CPU the knee sits near 16 repeats and 128 shows the rising line well; compiling the 256-op
# chain alone took longer than the rest of the sweep. A GPU's knee is 8·P/B repeats for fp32: 79 on
# the recorded H100, but 100-145 on a T4 (about 4 TFLOP/s of plain multiplies against 250-290 GB/s),
# where 256 repeats cost less than the 2x the flat level that measured_knee needs to find the rising
# line. 512 gives it 3.5x there and about 6x on an H100.
REPEATS = per_device(cpu=(1, 2, 4, 8, 16, 32, 64, 128), gpu=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
# Rounds of the sweep at least (one call of every repeat count each). On a CPU the 128-repeat call
# alone takes 0.27 s, past the budget in two rounds, so this sets the count: 7 rounds, about 3.4 s.
SWEEP_ROUNDS = 7

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


def times_two(x: torch.Tensor, repeats: int) -> torch.Tensor:
    """The essay's ``f``: ``repeats`` multiplies per element. Compiled, one read and one write."""
    for _ in range(repeats):
        x = x * 2
    return x


def times_two_into(out: torch.Tensor, x: torch.Tensor, repeats: int) -> None:
    """``times_two`` with its result written into ``out``: compiled, still one kernel, and nothing
    to allocate.

    A function that returns a fresh 256 MiB tensor makes every call ask the
    allocator for memory, and on a CPU the operating system then maps it in page
    by page; that can cost more than the arithmetic. Writing into a preallocated
    ``out`` keeps the sweep's times about the kernel.
    """
    out.copy_(times_two(x, repeats))


def compile_chain(repeats: int, example: torch.Tensor, *, threads: int | None = None) -> Compiled:
    """``times_two_into`` with ``repeats`` fixed, compiled for ``example``'s shape and dtype (loop
    unrolled).

    Call the result as ``compiled(out, x)``.
    """

    def chain(out, x):
        times_two_into(out, x, repeats)

    chain.__name__ = f"times_two_x{repeats}"
    return compile_for_timing(chain, torch.empty_like(example), example, threads=threads)


@dataclass(frozen=True)
class SweepPoint:
    repeats: int
    n: int
    element_size: int
    timing: Timing
    compile_s: float = 0.0

    @property
    def seconds(self) -> float:
        return self.timing.median_s

    @property
    def flops(self) -> int:
        return self.repeats * self.n  # one multiply per element per repeat

    @property
    def bytes_moved(self) -> int:
        return 2 * self.n * self.element_size  # read x once, write the result once

    @property
    def achieved_flops(self) -> float:
        return self.timing.rate(self.flops)

    @property
    def achieved_bandwidth(self) -> float:
        return self.timing.rate(self.bytes_moved)


def sweep(
    n: int,
    dtype: torch.dtype = torch.float32,
    repeats: Sequence[int] = REPEATS,
    *,
    threads: int | None = None,
    budget_s: float | None = None,
) -> list[SweepPoint]:
    """Compile ``times_two`` for each repeat count on one tensor of ``n`` elements, then time them.

    On a CPU the repeat counts are timed in turns, one call of each per round
    (:func:`brrr.timing.bench_together`), so that a burst of other work slows every point of a round
    alike and the shape of the curve, the knee, survives it. Timed one after the other, two of the
    book's sweeps beside the test suite's other worker ran their 4- and 8-repeat points with runs
    spread by 31-63% of their median, and put the knee at 7.2 and 7.4 repeats against the 16 their
    roofs predicted (the page then said the claim did not hold); a quiet sweep on the same machine
    put it at 13 against 17.
    """
    x = torch.rand(n, device=DEVICE, dtype=dtype)
    out = torch.empty_like(x)
    budget = per_device(cpu=0.3, gpu=0.1) if budget_s is None else budget_s
    compiled = {count: compile_chain(count, x, threads=threads) for count in repeats}
    timings = bench_together(
        {str(count): (lambda chain=chain: chain(out, x)) for count, chain in compiled.items()},
        threads=threads,
        warmup=1,
        min_runs=SWEEP_ROUNDS,
        budget_s=budget,
        on_cpu_clock=thread_clock_for(threads),
    )
    return [
        SweepPoint(count, n, x.element_size(), timings[str(count)], chain.compile_s)
        for count, chain in compiled.items()
    ]


# The first three repeat counts (1, 2, 4) sit far below any ridge point: their times must agree
# within this factor, or a stall on a shared machine slowed one of them.
FLAT_SPREAD = 1.5


def low_spread(points: Sequence[SweepPoint]) -> float:
    """Slowest over fastest of the sweep's first three points, which should all take the memory
    time."""
    times = [point.seconds for point in points[:3]]
    return max(times) / min(times)


# Past the knee the sweep's last point must cost at least this many times its first, and at least
# this share of the rise the roofline predicts (pinned in tests/book/test_pinned_targets.py).
RISE_MIN = 2.0
RISE_SHARE_OF_PREDICTED = 1 / 3


def rise_past_knee(points: Sequence[SweepPoint], knee: float) -> tuple[bool, str]:
    """Whether the sweep's last point costs far more than its first, as compute-bound work must: at
    least a third of the ``repeats / knee`` the roofline predicts, and at least 2x; and the line
    that says so.

    Past the knee time grows with the repeats (about 6x on an H100 at 512 repeats, where the knee
    sits higher than on a CPU). A chain whose multiplies were folded into one, doing less work,
    stays flat."""
    rise, predicted = points[-1].seconds / points[0].seconds, points[-1].repeats / knee
    return rise > max(RISE_MIN, predicted * RISE_SHARE_OF_PREDICTED), (
        f"{points[-1].repeats} repeats should cost far more than {points[0].repeats} "
        f"(compute-bound): {rise:.2f}x the time, the multiply-rate knee predicts {predicted:.2f}x"
    )


def steady_sweep(
    n: int,
    dtype: torch.dtype = torch.float32,
    repeats: Sequence[int] = REPEATS,
    *,
    threads: int | None = None,
    attempts: int = 3,
) -> tuple[list[SweepPoint], list[str]]:
    """:func:`sweep`, measured again (:func:`brrr.targets.measurements`, ``attempts`` runs at most)
    while its memory-bound first points disagree by more than :data:`FLAT_SPREAD`; the steadiest
    run, and a line for each run set aside.

    A book built beside other work once timed 2 repeats at 1.5x the time of 4: the table, the plot
    and the knee all came from that run, while only the flatness check's own re-measurement passed.
    """
    again = functools.partial(sweep, n, dtype, repeats, threads=threads)
    runs = targets.measurements(
        again(), again, lambda run: low_spread(run) <= FLAT_SPREAD, attempts=attempts
    )
    notes = [
        f"a sweep whose 1 to 4 repeats differed by "
        f"{units.beside(low_spread(run), 2, (FLAT_SPREAD,))}x (a stall on a busy machine: they all "
        "take the memory time) was measured again"
        for run in runs
        if low_spread(run) > FLAT_SPREAD
    ]
    return min(runs, key=low_spread), notes


# Sizes for measuring the multiply rate where memory cannot be the limit. On a GPU: enough
# multiplies per element that compute takes several times longer than moving the tensor, and the
# launch is noise. On a CPU the rate depends on the chain's length, so the roof is the best of
# several (:func:`multiply_rates`), on a tensor whose 16 MiB working set stays in the 32 MiB L3 and
# whose calls are long enough (about a millisecond) that the compiled call's own ~40 µs barely
# counts. Measured on our 2-core CI machine (AMD EPYC, one thread, 2^21 elements): 8 repeats 38
# GFLOP/s, 16 39, 32 30, 64 22 (2^20 elements, 128 repeats: 16). Inductor unrolls the chain into one
# dependent multiply after another on the same vector register; while a chain is short the core
# overlaps several elements' chains and runs at its multiply throughput, and once one chain fills
# its out-of-order window it waits on each multiply's latency. Far above the cache the sweep's 16,
# 32, 64 and 128 repeats ran at 32-34, 31, 23 and 16 GFLOP/s: the code, not memory, sets that fall.
# The roof had been the 64-repeat chain alone, on 2^17 elements where the call's own time also
# counted: 20 GFLOP/s, which the sweep then beat by half at 16 and 32 repeats.
# On a GPU the roof is the best of 256 and 512 multiplies on 2^26 elements (about a millisecond a
# call at
# 512): the recorded H100 swept 256 repeats at 32.4 TFLOP/s, 1.09x the 29.8 that 512 repeats on 2^24
# elements had measured as its roof, which the sweep's roof check (at most 1.05x) would have failed.
MULTIPLY_PEAK_N = per_device(cpu=2**21, gpu=2**26)
MULTIPLY_PEAK_CHAINS: tuple[int, ...] = per_device(cpu=(8, 16, 32, 64), gpu=(256, 512))
# Where memory cannot limit the roof's chains: a CPU's 2^21 elements stay in its cache; a GPU's 2^26
# (256 MiB) do not fit any L2, but 256 or more multiplies per element keep them compute-bound.
MULTIPLY_PEAK_PLACE = per_device(cpu="in cache", gpu="compute-bound")


# How far the sweep's best FLOP/s may rise over the multiply roof measured in the same rounds. A
# GPU's roof is compute-bound on data no L2 holds: the noise of two medians (roofline.ROOF_NOISE). A
# CPU's roof chains run on data in the L3 cache, which a neighbour streaming memory shares and
# evicts, while the sweep's points far above the cache lose nothing to it: beside the suite's other
# worker and .ci/neighbour_load.py the 32-repeat point ran at 1.08-1.12x the roof timed in the same
# rounds, and at
# 0.8x on a quiet machine. A roof measured 2x low puts the best point near 2x.
OVER_ROOF_TOLERANCE = per_device(cpu=1.25, gpu=1 + roofline.ROOF_NOISE)


def multiply_rates(
    dtype: torch.dtype = torch.float32,
    *,
    threads: int | None = None,
    chains: Sequence[int] = MULTIPLY_PEAK_CHAINS,
) -> dict[int, float]:
    """FLOP/s of the compiled multiply chain of each length in ``chains``, where memory cannot limit
    it (:data:`MULTIPLY_PEAK_PLACE`: in cache on a CPU, long enough to be compute-bound on a GPU).

    Compiled and timed as :func:`sweep` does (:func:`compile_chain`, ``threads``), so the roof and
    the workload run the same code.
    """
    x = torch.rand(MULTIPLY_PEAK_N, device=DEVICE, dtype=dtype)
    out = torch.empty_like(x)
    rates = {}
    for repeats in chains:
        compiled = compile_chain(repeats, x, threads=threads)
        timing = bench(
            lambda: compiled(out, x),
            threads=threads,
            budget_s=per_device(cpu=0.3, gpu=0.1),
            on_cpu_clock=thread_clock_for(threads),
        )
        rates[repeats] = timing.rate(repeats * MULTIPLY_PEAK_N)
    return rates


def flops_over_roof(points: Sequence[SweepPoint], roof_flops: float) -> float:
    """The sweep's highest achieved FLOP/s over the compute roof: at most 1, less the noise, if it
    is one."""
    return max(point.achieved_flops for point in points) / roof_flops


def over_roof_in_turns(
    n: int, repeats: int, dtype: torch.dtype = torch.float32, *, threads: int | None = None
) -> float:
    """:func:`flops_over_roof` of the sweep's ``repeats`` point on ``n`` elements, measured again
    with the roof's chains (:func:`multiply_rates`) timed in the same rounds: the median over rounds
    of the point's FLOP/s over the best chain's. A roof timed seconds after the point could catch a
    burst of load that the point missed (a neighbour streaming memory evicts the roof's data from
    the cache) and read low."""
    x = torch.rand(n, device=DEVICE, dtype=dtype)
    out = torch.empty_like(x)
    small = torch.rand(MULTIPLY_PEAK_N, device=DEVICE, dtype=dtype)
    small_out = torch.empty_like(small)
    point = compile_chain(repeats, x, threads=threads)
    chains = {
        length: compile_chain(length, small, threads=threads) for length in MULTIPLY_PEAK_CHAINS
    }
    timed = {
        "point": lambda: point(out, x),
        **{
            length: (lambda chain=chain: chain(small_out, small))
            for length, chain in chains.items()
        },
    }

    def per_round(seconds: dict) -> float:
        roof = max(length * MULTIPLY_PEAK_N / seconds[length] for length in chains)
        return repeats * n / seconds["point"] / roof

    return median_per_round(
        timed,
        per_round,
        threads=threads,
        warmup=1,
        min_runs=SWEEP_ROUNDS,
        budget_s=per_device(cpu=0.5, gpu=0.2),
        on_cpu_clock=thread_clock_for(threads),
    )


def predicted_knee(peak_flops: float, bandwidth: float, element_size: int = 4) -> float:
    """Repeats at which compute time equals memory time: ``2 · s · P / B``."""
    return 2 * element_size * peak_flops / bandwidth


def measured_knee(
    repeats: Sequence[int], seconds: Sequence[float], *, floor_points: int = 3, rise: float = 2.0
) -> float:
    """Where the measured curve's flat part and its rising part cross.

    The flat (memory-bound) level is the lowest time among the ``floor_points``
    smallest repeat counts: on a shared machine a stall only ever adds time, so the
    lowest is the most trustworthy. The rising part starts at the first point from
    which every later point is at least ``rise`` times the level; one slow outlier
    in the flat part therefore cannot pass for the knee. That point is taken as
    compute-bound, ``t ≈ repeats · c``, which gives the seconds per repeat ``c``,
    and the knee is ``level / c``: the repeat count at which compute alone would
    take as long as the flat part. Using the first clearly-risen point, rather than
    the last, keeps the estimate close to the knee.
    """
    if len(repeats) != len(seconds) or len(repeats) <= floor_points:
        raise ValueError(
            f"need more than {floor_points} (repeats, seconds) pairs, got {len(repeats)} and "
            f"{len(seconds)}"
        )
    order = sorted(range(len(repeats)), key=lambda i: repeats[i])
    level = min(seconds[i] for i in order[:floor_points])
    for position, i in enumerate(order):
        if position >= floor_points and all(seconds[j] >= rise * level for j in order[position:]):
            return level / (seconds[i] / repeats[i])
    raise ValueError(
        f"the runtime never stayed above {rise}x its flat level of {units.seconds(level)}: "
        f"the sweep looks memory-bound up to {max(repeats)} repeats; sweep further"
    )


# ---------------------------------------------------------------- placing a workload on the
# roofline


@dataclass(frozen=True)
class Placement:
    """Where ``times_two(x, repeats)`` on ``n`` elements of ``dtype`` sits on ``roof`` (a model, not
    a run)."""

    n: int
    dtype: str
    repeats: int
    roof: Roof

    @property
    def element_size(self) -> int:
        return counting.element_size(DTYPES[self.dtype])

    @property
    def flops(self) -> int:
        return self.repeats * self.n

    @property
    def bytes_moved(self) -> int:
        return 2 * self.n * self.element_size

    @property
    def intensity(self) -> float:
        return roofline.intensity(self.flops, self.bytes_moved)

    @property
    def predicted_s(self) -> float:
        return roofline.predicted_time(self.flops, self.bytes_moved, self.roof)

    @property
    def regime(self) -> roofline.Regime:
        return roofline.regime(self.flops, self.bytes_moved, self.roof)

    @property
    def attainable_flops(self) -> float:
        """FLOP/s the model allows: the roofline, or less where the overhead floor dominates."""
        return self.flops / self.predicted_s

    def describe(self) -> str:
        roof = self.roof
        share = units.fraction_of(self.attainable_flops, roof.peak_flops, "FLOP/s", roof.label)
        return "\n".join(
            [
                f"x = x * 2 repeated {self.repeats}x on n = {self.n:,} {self.dtype} elements",
                f"  FLOPs {units.si(self.flops, 'FLOP')}, bytes {units.si(self.bytes_moved, 'B')} "
                f"-> intensity {self.intensity:.3g} FLOP/B (ridge point {roof.ridge_point:.3g} "
                "FLOP/B)",
                f"  compute {units.seconds(roofline.compute_time(self.flops, roof))} "
                f"at {units.flops(roof.peak_flops)}, "
                f"memory {units.seconds(roofline.memory_time(self.bytes_moved, roof))} "
                f"at {units.bandwidth(roof.bandwidth)}, "
                f"overhead {units.seconds(roof.overhead_s)}",
                f"  predicted {units.seconds(self.predicted_s)}: {self.regime}; {share}",
            ]
        )


def place(n: int, dtype: str, repeats: int, roof: Roof) -> Placement:
    """The roofline's prediction for one (size, dtype, repeats) point."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
    if n < 1 or repeats < 1:
        raise ValueError(f"need n >= 1 and repeats >= 1, got n={n}, repeats={repeats}")
    return Placement(n, dtype, repeats, roof)
