"""The grader's clock for the timed kernel checks (Labs 2, 3, 5, 6): rounds that no shortcut
survives.

Runs in the grader process, on kernels the grader launches itself. Each timed
thing (the student's kernels, the baseline, another launch order) has one call
per input set; :func:`time_rounds` runs them in rounds, one call of each per
round, so load that lands on one lands on all (issue 29, item 2's one clock).
Every call, outside its timed span:

- its output buffer is filled with NaN first, and checked against the expected
  result right after: a kernel that computes the right answer on its first call
  only, or leaves work undone, fails on the call where it does so. The output is
  poisoned because the buffer of an input set still holds the previous call's
  result, which a kernel that does nothing would leave in place. Checking every
  call costs about one more read of the output and the expected result per call,
  outside the clock; checking every k-th call would let k - 1 calls in k be wrong.
  Scratch buffers the grader hands the kernels are filled with NaN too, and the
  inputs are compared with a host snapshot after the rounds, so no result kept
  from one call serves the next.
- the L2 cache is evicted by reading a buffer twice its size (:func:`brrr.timing.flush_l2`),
  and the input sets rotate, so no call finds its inputs in the cache (:class:`Plan`).
- the whole device is synchronized (every stream) before the call and after it.

The time of a call is the whole device's: the CUDA events around it time the
grader's stream (the GPU spins a moment before the start event, so the event
fires once the call is queued, not while Python launches it), and the host clock
times from the moment the call had returned and its start event had fired to the
moment the whole device is idle again (``torch.cuda.synchronize()`` waits for
every stream), less that wait for an empty call. Work left on another stream, or
running after its stream's end event, counts in the second; the larger of the
two is the call's time. The grader launches the student's kernels itself, on its
own stream, so no submission can choose another one; the second clock is there
for whatever this misses (a kernel that outlives its launch, a baseline library
that forks a stream), and costs one synchronize per call, outside the clock.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from brrr import units
from brrr.checks import core
from brrr.checks.kernels import poison
from brrr.timing import Timing, summarize

# Where the device reports no L2 size: over twice an H100's (50 MiB), so that a flush sized from it
# errs on the side of evicting too much.
DEFAULT_L2_BYTES = 128 * 2**20
# Elements compared at once when a timed output is checked: the comparison's temporaries stay small
# beside the timed working set (a 1 GiB output checked whole would need several GiB more).
CHECK_CHUNK = 1 << 24


def drawn(rng, published: int, *, low: float, align: int = 1) -> int:
    """A size drawn by ``rng`` in ``[ceil(low * published), published]``: a multiple of ``align``
    and not of ``2 * align`` (``align=1``: odd), so no power-of-two block above ``align`` divides it
    and the last block is partial. The band stays under the published size, which the lab sized to
    fit the GPU's memory; each lab's ``low`` keeps the timed size bandwidth- or compute-bound (its
    docstring says why)."""
    first = math.ceil(low * published)
    candidates = range(
        first + (align - first % (2 * align)) % (2 * align), published + 1, 2 * align
    )
    if not candidates:
        raise ValueError(f"no size in [{first}, {published}] is {align} modulo {2 * align}")
    return rng.choice(candidates)


def l2_bytes() -> int:
    """The L2 cache of this GPU, from its device properties; :data:`DEFAULT_L2_BYTES` where none is
    reported."""
    if torch.cuda.is_available():
        reported = int(
            getattr(
                torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0
            )
        )
        if reported > 0:
            return reported
    return DEFAULT_L2_BYTES


@dataclass(frozen=True)
class Plan:
    """How the timed calls get fresh inputs: ``sets`` input sets of ``set_bytes`` each (inputs and
    output), rotated call by call, and an L2 flush by reading ``flush_bytes`` before every call."""

    sets: int
    set_bytes: int
    l2_bytes: int
    flush_bytes: int

    @property
    def rotated_bytes(self) -> int:
        return self.sets * self.set_bytes

    def describe(self) -> str:
        side = "over" if self.rotated_bytes > 2 * self.l2_bytes else "under"
        return (
            f"{self.sets} input sets rotated ({units.binary_bytes(self.rotated_bytes)}, {side} "
            f"twice the {units.binary_bytes(self.l2_bytes)} L2), the L2 flushed by reading "
            f"{units.binary_bytes(self.flush_bytes)} before every call, every call's output checked"
        )


def plan(set_bytes: int, *, sets: int = 2, l2: int | None = None) -> Plan:
    """The plan for input sets of ``set_bytes``: ``sets`` of them (at least 2: no call reuses the
    inputs of the call before it), and an L2 flush of twice the L2 before every call, as the issue
    asks, whether or not the sets alone already exceed it (where they do, the flush costs a few
    microseconds per call)."""
    if sets < 2:
        raise ValueError(f"need at least 2 input sets to rotate, got {sets}")
    l2 = l2 or l2_bytes()
    return Plan(sets=sets, set_bytes=set_bytes, l2_bytes=l2, flush_bytes=2 * l2)


@dataclass
class Timed:
    """One thing the rounds time: ``calls[i]`` runs it on input set ``i``. Where it writes a checked
    output, ``outs[i]`` is that buffer and ``expected[i]`` what it must hold after every call;
    ``scratch[i]`` are buffers of set ``i`` poisoned before every call too (a result kept there from
    an earlier call is gone), and ``inputs[i]`` its inputs by name, which must be unchanged after
    the rounds (a kernel that left a result in its input for the next call fails)."""

    calls: Sequence[Callable[[], object]]
    outs: Sequence[torch.Tensor] = ()
    expected: Sequence[torch.Tensor] = ()
    scratch: Sequence[Sequence[torch.Tensor]] = ()
    inputs: Sequence[dict[str, torch.Tensor]] = ()
    runs: list[float] = field(default_factory=list)
    snapshots: list[dict[str, torch.Tensor]] = field(
        default_factory=list
    )  # of inputs, on the host, taken once


class HostEvent:
    """An event on the host's clock, for a CPU (where every op is done when it returns) and for
    fakes."""

    def __init__(self) -> None:
        self.at = 0.0

    def record(self) -> None:
        self.at = time.perf_counter()

    def query(self) -> bool:
        return True

    def seconds_to(self, other: HostEvent) -> float:
        return other.at - self.at


class CudaEvent:
    """A CUDA event on the current stream, with :class:`HostEvent`'s methods."""

    def __init__(self) -> None:
        self.event = torch.cuda.Event(enable_timing=True)

    def record(self) -> None:
        self.event.record()

    def query(self) -> bool:
        return self.event.query()

    def seconds_to(self, other: CudaEvent) -> float:
        return self.event.elapsed_time(other.event) / 1e3


# Cycles the GPU spins before each timed call (torch.cuda._sleep; about 0.5 ms at 2 GHz), so that
# the start event fires after the host has queued the call, not while Python is still launching it.
SPIN_CYCLES = 1_000_000


class Clock:
    """The device's clock as :func:`time_rounds` uses it: this GPU's (CUDA events, device-wide
    synchronize), or the host's on a CPU, where every op is done when it returns. Tests replace
    it."""

    def __init__(self, on_gpu: bool | None = None):
        self.on_gpu = torch.cuda.is_available() if on_gpu is None else on_gpu

    def synchronize(self) -> None:
        """Wait until the whole device is idle: ``torch.cuda.synchronize()`` waits for every
        stream."""
        if self.on_gpu:
            torch.cuda.synchronize()

    def event(self):
        return CudaEvent() if self.on_gpu else HostEvent()

    def spin(self) -> None:
        """Keep the device busy while the host queues the timed call."""
        if self.on_gpu:
            torch.cuda._sleep(SPIN_CYCLES)

    def flush(self, nbytes: int) -> None:
        """Evict the L2 by reading ``nbytes`` (on a GPU; a CPU's cache is the host's business)."""
        if self.on_gpu:
            from brrr.timing import flush_l2

            flush_l2(*_flush_buffers(nbytes))

    def span(self, fn: Callable[[], object]) -> tuple[float, float]:
        """Run ``fn`` once: (seconds between the events around it on the current stream, seconds
        from the moment both its start event had fired and it had returned to the whole device
        idle)."""
        self.spin()
        begin, end = self.event(), self.event()
        begin.record()
        fn()
        end.record()
        while not begin.query():
            pass
        started = time.perf_counter()
        self.synchronize()
        return begin.seconds_to(end), time.perf_counter() - started


_flush: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def _flush_buffers(nbytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A float32 buffer of ``nbytes`` on the GPU and the 0-d sink its sum goes to, made once."""
    if nbytes not in _flush:
        buffer = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device="cuda")
        _flush[nbytes] = (buffer, torch.zeros((), dtype=torch.float32, device="cuda"))
    return _flush[nbytes]


def clock() -> Clock:
    """The clock of this process's device (a function, so that a test can hand the checks a fake
    one)."""
    return Clock()


def sync_latency(device: Clock, samples: int = 5) -> float:
    """Seconds from an empty call's return to the idle device: what :meth:`Clock.span`'s second
    number reads when no work is left, subtracted from every call's."""
    return statistics.median(device.span(lambda: None)[1] for _ in range(samples))


def matches(out: torch.Tensor, expected: torch.Tensor) -> bool:
    """``out`` within the grader's tolerance of ``expected`` (NaN only where expected is NaN),
    compared in chunks of :data:`CHECK_CHUNK` elements."""
    rtol, atol = core.tolerance(expected.dtype)
    flat_out, flat_expected = out.reshape(-1), expected.reshape(-1)
    for start in range(0, flat_out.numel(), CHECK_CHUNK):
        part, want = (
            flat_out[start : start + CHECK_CHUNK],
            flat_expected[start : start + CHECK_CHUNK],
        )
        if bool(torch.isclose(part, want, rtol=rtol, atol=atol, equal_nan=True).all()):
            continue
        part, want = part.double(), want.double()  # decided in float64, as core.diff_report decides
        if not bool(torch.isclose(part, want, rtol=rtol, atol=atol, equal_nan=True).all()):
            return False
    return True


class WrongWhileTimed(Exception):
    """A timed call's output was wrong: ``name``, the 0-based ``call`` and ``set``; the buffer still
    holds it. With ``input_name``: that input of the set had changed after the rounds."""

    def __init__(self, name: str, call: int, input_set: int, *, input_name: str = ""):
        super().__init__(
            f"{name}: call {call + 1}, input set {input_set + 1} {input_name}".rstrip()
        )
        self.name, self.call, self.input_set, self.input_name = name, call, input_set, input_name


def time_rounds(
    timed: dict[str, Timed],
    the_plan: Plan,
    *,
    budget_s: float = 0.3,
    warmup: int = 2,
    min_runs: int = 5,
    max_runs: int = 1000,
    device: Clock | None = None,
) -> dict[str, Timing]:
    """Time each of ``timed`` in rounds (one call of each per round, input sets in rotation) until
    one has spent ``budget_s`` (and ``min_runs`` rounds), or ``max_runs``; a :class:`Timing` for
    each, by name.

    Warm-up calls are checked too. Raises :class:`WrongWhileTimed` at the first wrong output (see
    the module docstring for what happens around every call, and why).
    """
    if min_runs < 1 or max_runs < min_runs:
        raise ValueError(f"need 1 <= min_runs <= max_runs, got {min_runs} and {max_runs}")
    device = device or clock()
    latency = sync_latency(device)
    for entry in timed.values():
        if len(entry.calls) != the_plan.sets:
            raise ValueError(
                f"the plan rotates {the_plan.sets} input sets, a timed entry has {len(entry.calls)}"
            )
        entry.runs.clear()
    for entry in timed.values():
        if len(entry.snapshots) != len(entry.inputs):
            entry.snapshots = [
                {k: t.to("cpu", copy=True) for k, t in one.items()} for one in entry.inputs
            ]
    rounds = 0
    spent = dict.fromkeys(timed, 0.0)
    while rounds < warmup + max_runs and (
        rounds < warmup + min_runs or max(spent.values()) < budget_s
    ):
        for name, entry in timed.items():
            seconds = _one_call(name, entry, rounds, the_plan, device, latency)
            if rounds >= warmup:
                entry.runs.append(seconds)
                spent[name] += seconds
        rounds += 1
    for name, entry in timed.items():
        for number, (snapshot, now) in enumerate(zip(entry.snapshots, entry.inputs)):
            for input_name, tensor in now.items():
                if not _unchanged(snapshot[input_name], tensor):
                    raise WrongWhileTimed(name, rounds - 1, number, input_name=input_name)
    return {name: summarize(entry.runs, "device, every stream") for name, entry in timed.items()}


def _unchanged(before: torch.Tensor, now: torch.Tensor) -> bool:
    """``now`` equal to the host copy ``before``, element for element (NaN equal to NaN), compared
    on ``now``'s device in chunks of :data:`CHECK_CHUNK` elements."""
    flat_before, flat_now = before.reshape(-1), now.reshape(-1)
    for start in range(0, flat_now.numel(), CHECK_CHUNK):
        a = flat_before[start : start + CHECK_CHUNK].to(now.device)
        b = flat_now[start : start + CHECK_CHUNK]
        same = (a == b) | (a.isnan() & b.isnan()) if a.dtype.is_floating_point else a == b
        if not bool(same.all()):
            return False
    return True


def _one_call(
    name: str, entry: Timed, call: int, the_plan: Plan, device: Clock, latency: float
) -> float:
    """Call ``entry`` on its next input set as the module docstring says; its seconds."""
    index = call % the_plan.sets
    out = entry.outs[index] if entry.outs else None
    if out is not None:
        poison(out)
    for buffer in entry.scratch[index] if entry.scratch else ():
        poison(buffer)
    device.flush(the_plan.flush_bytes)
    device.synchronize()
    on_stream, to_idle = device.span(entry.calls[index])  # ends with the whole device idle
    if out is not None and not matches(out, entry.expected[index]):
        raise WrongWhileTimed(name, call, index)
    return max(on_stream, to_idle - latency)


def time_checked(
    student: str,
    timed: dict[str, Timed],
    the_plan: Plan,
    *,
    budget_s: float,
    out_name: str,
    seed: int,
) -> dict[str, Timing]:
    """:func:`time_rounds`, with a wrong output while timed turned into the student's failed check
    (:func:`wrong_while_timed`): what every timed kernel check calls."""
    try:
        return time_rounds(timed, the_plan, budget_s=budget_s)
    except WrongWhileTimed as error:
        raise wrong_while_timed(student, error, timed, out_name, seed) from None


def wrong_while_timed(
    student: str, error: WrongWhileTimed, timed: dict[str, Timed], out_name: str, seed: int
):
    """The AssertionError for a wrong timed output: which call, which input set, and the diff."""
    if error.input_name:
        return core.fail(
            f"{student}'s kernels wrote into their input `{error.input_name}` while timed (input "
            f"set {error.input_set + 1}, seed {seed}): they must only read it."
        )
    entry = timed[error.name]
    out, expected = entry.outs[error.input_set], entry.expected[error.input_set]
    rtol, atol = core.tolerance(expected.dtype)
    call, input_set = error.call + 1, error.input_set + 1
    report = core.diff_report(
        out_name,
        out,
        expected,
        rtol=rtol,
        atol=atol,
        context=f" on timed call {call} (input set {input_set}, seed {seed}; {error.name})",
    )
    where = f"{out_name} was wrong on timed call {call} (input set {input_set})."
    return core.fail(
        f"{student}'s kernels did not compute the right result while timed: the grader checks the "
        f"output of every timed call, its buffer filled with NaN before the call.\n"
        f"{report or where}"
    )


def below_roof(
    what: str,
    seconds: float,
    *,
    moved: int | None = None,
    bandwidth: float | None = None,
    flops: int | None = None,
    peak: float | None = None,
    over: float = 1.25,
) -> str | None:
    """Why ``seconds`` for ``what`` is impossible (faster than ``moved`` bytes at ``over`` x the
    measured ``bandwidth``, or ``flops`` at ``over`` x the measured ``peak``), or None."""
    if moved is not None and bandwidth and seconds < moved / (over * bandwidth):
        return (
            f"{what} took {units.seconds(seconds)}, less than the "
            f"{units.seconds(moved / bandwidth)} that {moved / 1e9:.2f} GB need at the copy "
            f"bandwidth measured now ({units.bandwidth(bandwidth)}; {over:g}x that allowed): "
            "impossible for a kernel that does the work."
        )
    if flops is not None and peak and flops / seconds > over * peak:
        return (
            f"{what} took {units.seconds(seconds)}, {flops / seconds / 1e12:.0f} TFLOP/s, more "
            f"than {over:g}× the {peak / 1e12:.0f} TFLOP/s measured now: impossible for a kernel "
            "that does the work."
        )
    return None
