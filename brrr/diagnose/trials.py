"""``--try``: the fixes that can be tried without touching the user's code, measured on the user's
step.

Each trial runs the step as it is and as the fix changes it, in interleaved rounds
(:func:`brrr.timing.median_per_round`: one call of each per round, the ratio taken round by round,
so load from other processes lands on both alike), and takes the median ratio. It does so
:data:`MIN_REPEATS` times or more (up to :data:`MAX_REPEATS` while the readings straddle 1): the
gain is the median of the repeats, and the lowest and highest of them are its interval. A trial
whose interval holds 1 shows no measurable gain, and is neither advice nor a reason to withdraw any.

compile
    ``torch.compile(step)``, compiled before the timing.
bf16
    the step under ``torch.autocast(device, torch.bfloat16)``.
batch
    twice the batch, where the step's factory says how to build one: the factory (the
    ``module:callable`` the command takes, ``factory=`` for :func:`brrr.diagnose.diagnose`) has a
    ``batch`` parameter with a default, and ``factory(batch=n)`` returns ``(step, args)`` for a
    batch of ``n``. The gain is in examples per second, since the work per step changes.
channels_last
    the step's 4-D floating-point arguments (images) in ``torch.channels_last``: oneDNN and cuDNN
    follow the layout of a convolution's input, so the network runs in it from there on (converting
    the model too, in the user's code, is what the advice says).
dropout
    the step with every dropout off (``nn.Dropout`` modules in eval mode,
    ``nn.MultiheadAttention``'s dropout at 0) among the modules the step reaches: its arguments, the
    step itself if it is a module or a bound method of one, and the modules its closure holds. This
    shows what dropout costs; it is never advice, since it changes the model.
"""

from __future__ import annotations

import contextlib
import inspect
import statistics
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

import torch

from brrr.device import DEVICE
from brrr.diagnose.errors import DiagnoseError
from brrr.timing import median_per_round, torch_threads

TRIES = ("compile", "bf16", "batch", "channels_last", "dropout")
BUDGET_S = 0.5  # measured seconds per reading of a trial, split between the two versions
# Readings per trial: three give a spread; up to five while they straddle 1. A batch trial once read
# 1.22x and became advice; four repeats of it read 0.88-0.98x (a 2-core CPU shared part of the
# time).
MIN_REPEATS = 3
MAX_REPEATS = 5
# at least: a fix that makes the step 40x slower (bf16 on a CPU without bf16 units) stays cheap
MIN_ROUNDS = 3


@dataclass(frozen=True)
class Trial:
    """One fix tried on the step: the measured gain (time now / time with the fix; examples per
    second for the batch), or None with the reason it was not measured."""

    name: str  # one of TRIES
    what: str  # the change, in code
    gain: float | None  # the median of the readings
    note: str = ""
    low: float | None = None  # the lowest and highest readings: the interval (None: the gain alone)
    high: float | None = None

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.gain is None:
            return None
        return (
            self.low if self.low is not None else self.gain,
            self.high if self.high is not None else self.gain,
        )

    @property
    def slower(self) -> bool:
        """Measured slower: every reading below 1."""
        return self.gain is not None and self.interval[1] < 1.0

    @property
    def faster(self) -> bool:
        """Measured faster: every reading above 1."""
        return self.gain is not None and self.interval[0] > 1.0

    @property
    def no_measurable_gain(self) -> bool:
        """The readings straddle 1: the fix's effect is inside the noise of this machine."""
        return self.gain is not None and not self.slower and not self.faster

    def to_json(self) -> dict:
        return asdict(self)


def parse(names: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The trials asked for: ``"all"`` (or True) for all of :data:`TRIES`, else names from them."""
    if names in (None, False, (), []):
        return ()
    if names is True or names == "all":
        return TRIES
    listed = names.split(",") if isinstance(names, str) else list(names)
    unknown = [name for name in listed if name not in TRIES]
    if unknown:
        raise DiagnoseError(
            f"cannot try {', '.join(unknown)}: the fixes that can be tried are {', '.join(TRIES)}"
        )
    return tuple(name for name in TRIES if name in listed)


def _gain(
    now: Callable, fixed: Callable, threads: int | None, budget_s: float, per_call=(1.0, 1.0)
) -> tuple[float, float, float]:
    """``(gain, low, high)``: readings of the median over interleaved rounds of (now's seconds /
    per_call[0]) / (fixed's seconds / per_call[1]), :data:`MIN_REPEATS` of them, more (up to
    :data:`MAX_REPEATS`) while they straddle 1; their median, lowest and highest."""
    readings = []
    while len(readings) < MIN_REPEATS or (
        len(readings) < MAX_REPEATS and min(readings) <= 1.0 <= max(readings)
    ):
        readings.append(
            median_per_round(
                {"now": now, "fixed": fixed},
                lambda s: (s["now"] / per_call[0]) / (s["fixed"] / per_call[1]),
                warmup=1,
                min_runs=MIN_ROUNDS,
                budget_s=budget_s,
                threads=threads,
            )
        )
    return statistics.median(readings), min(readings), max(readings)


def _measured(name: str, what: str, readings: tuple[float, float, float], note: str = "") -> Trial:
    gain, low, high = readings
    return Trial(name, what, gain, note, low, high)


def _failed(name: str, what: str, error: Exception) -> Trial:
    first = (str(error).strip().splitlines() or [""])[0][:200]
    return Trial(name, what, None, f"the step raised {type(error).__name__} with it: {first}")


def try_compile(step, args, threads, budget_s) -> Trial:
    what = "torch.compile(step)"
    try:
        compiled = torch.compile(step)
        for _ in range(
            2
        ):  # compile, and any recompile for the second call's guards, outside the timing
            compiled(*args)
        readings = _gain(lambda: step(*args), lambda: compiled(*args), threads, budget_s)
        return _measured("compile", what, readings)
    except Exception as error:  # a step dynamo or inductor cannot compile: reported, not raised
        return _failed("compile", what, error)


def try_bf16(step, args, threads, budget_s) -> Trial:
    what = f"torch.autocast('{DEVICE.type}', torch.bfloat16)"

    def autocast():
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            return step(*args)

    try:
        autocast()
        return _measured("bf16", what, _gain(lambda: step(*args), autocast, threads, budget_s))
    except Exception as error:
        return _failed("bf16", what, error)


def batch_parameter(factory: Callable | None) -> int | None:
    """The default of the factory's ``batch`` parameter, the batch the step was built with; None
    when the factory has no such parameter with an integer default."""
    if factory is None:
        return None
    try:
        parameter = inspect.signature(factory).parameters.get("batch")
    except (TypeError, ValueError):
        return None
    default = getattr(parameter, "default", None)
    return (
        default
        if isinstance(default, int) and not isinstance(default, bool) and default > 0
        else None
    )


def try_batch(step, args, threads, budget_s, factory) -> Trial:
    batch = batch_parameter(factory)
    if batch is None:
        return Trial(
            "batch",
            "factory(batch=2n)",
            None,
            "not tried: the step's factory has no batch parameter with a default (the contract: "
            "make_step(batch=n) returns (step, args) for a batch of n)",
        )
    what = f"factory(batch={2 * batch}) against batch {batch}"
    try:
        bigger, bigger_args = factory(batch=2 * batch)
        bigger(*bigger_args)
        readings = _gain(
            lambda: step(*args), lambda: bigger(*bigger_args), threads, budget_s, (batch, 2 * batch)
        )
        return _measured("batch", what, readings, "examples per second")
    except Exception as error:
        return _failed("batch", what, error)


def try_channels_last(step, args, threads, budget_s) -> Trial:
    what = "inputs .to(memory_format=torch.channels_last)"
    images = [
        isinstance(arg, torch.Tensor) and arg.dim() == 4 and arg.is_floating_point() for arg in args
    ]
    if not any(images):
        return Trial(
            "channels_last", what, None, "not tried: the step takes no 4-D floating-point input"
        )
    converted = tuple(
        arg.contiguous(memory_format=torch.channels_last) if image else arg
        for arg, image in zip(args, images)
    )
    try:
        step(*converted)
        readings = _gain(lambda: step(*args), lambda: step(*converted), threads, budget_s)
        return _measured("channels_last", what, readings)
    except Exception as error:
        return _failed("channels_last", what, error)


def reachable_modules(step, args) -> list[torch.nn.Module]:
    """The modules a step reaches: its arguments, itself (a module, or a bound method of one), its
    closure's."""
    roots = list(args) + [step, getattr(step, "__self__", None)]
    roots += [
        cell.cell_contents for cell in (getattr(step, "__closure__", None) or ()) if _filled(cell)
    ]
    return [root for root in roots if isinstance(root, torch.nn.Module)]


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


@contextlib.contextmanager
def dropout_off(modules: list[torch.nn.Module]) -> Iterator[None]:
    """Every dropout under ``modules`` off for the duration, restored after."""
    dropouts = [
        m
        for root in modules
        for m in root.modules()
        if isinstance(m, torch.nn.modules.dropout._DropoutNd)
    ]
    attention = [
        m for root in modules for m in root.modules() if isinstance(m, torch.nn.MultiheadAttention)
    ]
    saved = [(m, m.training) for m in dropouts], [(m, m.dropout) for m in attention]
    try:
        for m in dropouts:
            m.training = False
        for m in attention:
            m.dropout = 0.0
        yield
    finally:
        for m, training in saved[0]:
            m.training = training
        for m, p in saved[1]:
            m.dropout = p


def has_dropout(modules: list[torch.nn.Module]) -> bool:
    return any(
        (isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training and m.p > 0)
        or (isinstance(m, torch.nn.MultiheadAttention) and m.training and m.dropout > 0)
        for root in modules
        for m in root.modules()
    )


def try_dropout(step, args, threads, budget_s) -> Trial:
    what = "dropout off (nn.Dropout in eval mode, nn.MultiheadAttention's dropout 0)"
    modules = reachable_modules(step, args)
    if not has_dropout(modules):
        return Trial(
            "dropout", what, None, "not tried: no active dropout in the modules the step reaches"
        )

    def without():
        with dropout_off(modules):
            return step(*args)

    try:
        without()
        return _measured("dropout", what, _gain(lambda: step(*args), without, threads, budget_s))
    except Exception as error:
        return _failed("dropout", what, error)


def run(
    step: Callable,
    args: tuple,
    names: tuple[str, ...],
    *,
    threads: int | None,
    factory: Callable | None = None,
    budget_s: float = BUDGET_S,
) -> list[Trial]:
    """Each of ``names`` (from :data:`TRIES`) tried on ``step(*args)`` and measured."""
    found = []
    with torch_threads(threads):  # compiling and building included, as the step runs
        for name in names:
            if name == "compile":
                found.append(try_compile(step, args, threads, budget_s))
            elif name == "bf16":
                found.append(try_bf16(step, args, threads, budget_s))
            elif name == "batch":
                found.append(try_batch(step, args, threads, budget_s, factory))
            elif name == "channels_last":
                found.append(try_channels_last(step, args, threads, budget_s))
            elif name == "dropout":
                found.append(try_dropout(step, args, threads, budget_s))
    return found
