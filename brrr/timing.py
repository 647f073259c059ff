"""``bench()``: timings that mean what they say, on a GPU and on a CPU.

GPU
    Each run is bracketed by CUDA events on the current stream. Before each run
    the L2 cache is flushed by reading a buffer twice its size (:func:`flush_l2`),
    so a kernel cannot read its inputs from L2 left warm by the previous run.
    Runs are queued in two batches (``min_runs``, then as many as the budget has
    left); event times are read after one synchronize per batch, so the host
    never stalls a timed run.

CPU
    Ops run synchronously, so ``time.perf_counter`` around the call is exact. The
    function is warmed up first (allocations, compilation, page faults), then run
    until a time budget is spent. ``threads=1`` pins torch to one thread: with two
    threads on a two-core machine, runs stall for milliseconds at random.

Either way the result is the median of many runs, with its spread and run count.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from brrr import units
from brrr.device import DEVICE, ON_GPU, last_level_cache_bytes


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median, 20th and 80th percentiles, over ``runs`` calls."""

    median_s: float
    p20_s: float
    p80_s: float
    runs: int
    device: str

    def rate(self, amount: float) -> float:
        """``amount`` per second at the median time, e.g. ``t.rate(bytes_moved)`` in B/s."""
        return amount / self.median_s

    @property
    def spread(self) -> float:
        """(p80 - p20) / median: how noisy the runs were."""
        return (self.p80_s - self.p20_s) / self.median_s

    def __str__(self) -> str:
        return (
            f"{units.seconds(self.median_s)} median of {self.runs} runs "
            f"(p20 {units.seconds(self.p20_s)}, p80 {units.seconds(self.p80_s)}) on {self.device}"
        )


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(count)``; ``None`` leaves it alone."""
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def no_gc_pauses() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector off, so that no collection lands inside
    a timing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def bench(
    fn: Callable[[], object],
    *,
    warmup: int = 3,
    min_runs: int = 5,
    max_runs: int = 1000,
    budget_s: float = 0.5,
    threads: int | None = None,
    flush_l2: bool = True,
    on_cpu_clock: bool = False,
) -> Timing:
    """Time ``fn()`` and return the median of many runs.

    ``fn`` takes no arguments: close over the inputs (rotate them yourself if a
    repeat must not see the same data). Runs continue until ``budget_s`` seconds
    of measured time are spent, at least ``min_runs`` and at most ``max_runs``.
    ``on_cpu_clock``: see :func:`rounds_in_turns`.
    """
    if ON_GPU:
        _require_run_counts(min_runs, max_runs)
        with torch_threads(threads):
            times = _gpu_times(fn, warmup, min_runs, max_runs, budget_s, flush_l2)
        return summarize(times, str(DEVICE))
    times = rounds_in_turns(
        {"fn": fn},
        warmup=warmup,
        min_runs=min_runs,
        max_runs=max_runs,
        budget_s=budget_s,
        threads=threads,
        on_cpu_clock=on_cpu_clock,
    )
    return summarize(times["fn"], str(DEVICE))


def bench_together(
    fns: dict[str, Callable[[], object]],
    *,
    warmup: int = 3,
    min_runs: int = 5,
    max_runs: int = 1000,
    budget_s: float = 0.5,
    threads: int | None = None,
    flush_l2: bool = True,
    on_cpu_clock: bool = False,
) -> dict[str, Timing]:
    """Time several functions whose times will be compared: a :class:`Timing` for each, by name.

    CPU: the functions take turns, one call of each per round, until one of them
    has had ``budget_s`` of measured time (the slowest: all get the same number
    of runs) and each has had ``min_runs``. Timed one after the other, a burst of
    load from another process lands on one of them and skews their ratio; in
    turns it lands on all of them alike.

    GPU: each is timed with :func:`bench` in turn. CUDA events time the device, and
    load on the host's cores, which is what moves CPU timings, reaches them only
    through kernels too short to hide their launch.
    """
    if not fns:
        raise ValueError("nothing to time")
    if ON_GPU:
        return {
            name: bench(
                fn,
                warmup=warmup,
                min_runs=min_runs,
                max_runs=max_runs,
                budget_s=budget_s,
                threads=threads,
                flush_l2=flush_l2,
            )
            for name, fn in fns.items()
        }
    times = rounds_in_turns(
        fns,
        warmup=warmup,
        min_runs=min_runs,
        max_runs=max_runs,
        budget_s=budget_s,
        threads=threads,
        flush_l2=flush_l2,
        on_cpu_clock=on_cpu_clock,
    )
    return {name: summarize(runs, str(DEVICE)) for name, runs in times.items()}


def median_per_round(
    fns: dict[str, Callable[[], object]], per_round: Callable[[dict[str, float]], float], **timing
) -> float:
    """The median over rounds of ``per_round(seconds)``, where ``seconds`` maps each of ``fns`` to
    its run in that round (:func:`rounds_in_turns`, which takes ``timing``'s keywords): a workload's
    time over a roof's, say, each pair timed side by side, so a burst of load that spans a round
    cancels."""
    times = rounds_in_turns(fns, **timing)
    rounds = len(next(iter(times.values())))
    return statistics.median(
        per_round({name: runs[k] for name, runs in times.items()}) for k in range(rounds)
    )


def rounds_in_turns(
    fns: dict[str, Callable[[], object]],
    *,
    warmup: int = 3,
    min_runs: int = 5,
    max_runs: int = 1000,
    budget_s: float = 0.5,
    threads: int | None = None,
    flush_l2: bool = True,
    on_cpu_clock: bool = False,
) -> dict[str, list[float]]:
    """Every run's seconds, by name, timed as :func:`bench_together` times them: on a CPU the k-th
    run of each function lies in the same round, so a ratio taken round by round cancels a burst of
    load that spans the round (a per-round median of ratios, where medians taken apart would not
    cancel it). On a GPU each is timed as :func:`bench` times it, and the runs are cut to the
    shortest list.

    ``on_cpu_clock`` (a CPU, ``threads=1``): time each run by the calling thread's CPU time, not the
    wall clock. With one thread torch runs every kernel, eager or compiled, in the calling thread
    (wall and thread time agree within 1% on a quiet machine), and the thread's clock stops while
    the scheduler runs another process. On a machine with more runnable processes than cores a long
    call is preempted and a short one often is not, so wall times of calls of unlike lengths stop
    cancelling round by round: a 70 ms workload beside 2-8 ms roof kernels read up to 2.1x its
    roofline time beside .ci/neighbour_load.py and a busy neighbour (load average 4 on 2 cores).
    Memory stalls and a neighbour's traffic still count: they are the work running slower, not
    waiting to run."""
    if not fns:
        raise ValueError("nothing to time")
    _require_run_counts(min_runs, max_runs)
    if ON_GPU:
        with torch_threads(threads):
            times = {
                name: _gpu_times(fn, warmup, min_runs, max_runs, budget_s, flush_l2)
                for name, fn in fns.items()
            }
        runs = min(len(values) for values in times.values())
        return {name: values[:runs] for name, values in times.items()}
    if on_cpu_clock and threads != 1:
        raise ValueError("the calling thread's CPU time counts a kernel's work only with threads=1")
    with torch_threads(threads):
        return _cpu_times_in_turns(
            fns,
            warmup,
            min_runs,
            max_runs,
            budget_s,
            clock=time.thread_time if on_cpu_clock else time.perf_counter,
        )


def thread_clock_for(threads: int | None) -> bool:
    """Whether timings with ``threads`` can use the calling thread's CPU clock (``on_cpu_clock``):
    on a CPU, with one thread, where every kernel runs in the calling thread."""
    return not ON_GPU and threads == 1


def _require_run_counts(min_runs: int, max_runs: int) -> None:
    if min_runs < 1 or max_runs < min_runs:
        raise ValueError(f"need 1 <= min_runs <= max_runs, got {min_runs} and {max_runs}")


def summarize(times: list[float], device: str) -> Timing:
    ordered = sorted(times)
    if len(ordered) == 1:
        only = ordered[0]
        return Timing(only, only, only, 1, device)
    deciles = statistics.quantiles(ordered, n=10, method="inclusive")
    return Timing(statistics.median(ordered), deciles[1], deciles[7], len(ordered), device)


def _cpu_times_in_turns(
    fns, warmup, min_runs, max_runs, budget_s, clock=time.perf_counter
) -> dict[str, list[float]]:
    """Warm each up, then rounds of one timed call each, until the one with the most time has had
    ``budget_s`` of it (and ``min_runs`` rounds), or ``max_runs`` rounds. Each run is read on
    ``clock``; the budget is always wall time, so a busy machine makes no timing take longer than it
    did.

    Every other round takes its turns in reverse order: in a fixed order the same function always
    ran first, after the same other call, and a neighbour's periodic load settled on one place in
    the round (two identical calls beside .ci/neighbour_load.py read 0.83-1.10x apart, median 0.90x,
    in a fixed order)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    spent = dict.fromkeys(fns, 0.0)
    forward = list(fns.items())
    rounds = 0
    while rounds < max_runs and (rounds < min_runs or max(spent.values()) < budget_s):
        for name, fn in forward if rounds % 2 == 0 else reversed(forward):
            start, wall = clock(), time.perf_counter()
            fn()
            times[name].append(clock() - start)
            spent[name] += time.perf_counter() - wall
        rounds += 1
    return times


_flush_buffers: tuple[torch.Tensor, torch.Tensor] | None = None


def flush_l2(buffer: torch.Tensor | None = None, sink: torch.Tensor | None = None) -> torch.Tensor:
    """Evict the last-level cache by reading every element of ``buffer`` into ``sink``; returns
    ``sink``.

    By default ``buffer`` is float32, twice the last-level cache, on the device,
    allocated once with its 0-d ``sink``. The flush is a read, a sum into the
    preallocated scalar: writing the buffer (``zero_()``) would leave the cache
    full of dirty lines, whose write-backs to memory would then land inside the
    next timed run. Any tensor works, on any device.
    """
    global _flush_buffers
    if buffer is None:
        if _flush_buffers is None:
            flush = torch.zeros(
                2 * last_level_cache_bytes() // 4, dtype=torch.float32, device=DEVICE
            )
            _flush_buffers = (flush, torch.zeros((), dtype=torch.float32, device=DEVICE))
        buffer, sink = _flush_buffers
    elif sink is None:
        sink = torch.zeros((), dtype=buffer.dtype, device=buffer.device)
    torch.sum(buffer.reshape(-1), dim=0, out=sink)
    return sink


def _gpu_times(fn, warmup, min_runs, max_runs, budget_s, flush) -> list[float]:
    """Warm up, time ``min_runs`` runs, then one more batch sized to the budget left.

    Every call after the warm-up is a timed run (no extra call to estimate the
    time), so ``fn`` runs exactly ``warmup + runs`` times, as on a CPU. The host
    waits for the device only between batches, never inside a timed run.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    batch = min_runs
    while batch > 0:
        times += _timed_batch(fn, batch, flush)
        spent = sum(times)
        if spent >= budget_s or len(times) >= max_runs:
            break
        per_run = max(spent / len(times), 1e-7)
        batch = int(min(max_runs - len(times), (budget_s - spent) / per_run))
    return times


def _timed_batch(fn, runs: int, flush: bool) -> list[float]:
    """Queue ``runs`` runs, each between two CUDA events (after an L2 flush), then read the events
    once."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for begin, finish in zip(starts, ends):
        if flush:
            flush_l2()
        begin.record()
        fn()
        finish.record()
    torch.cuda.synchronize()
    return [begin.elapsed_time(finish) / 1e3 for begin, finish in zip(starts, ends)]
