"""Run the step: warm it up, time it, count its FLOPs and bytes, and profile it.

Four passes over the same ``step(*args)``, in this order:

warm-up
    ``warmup`` calls, untimed: allocation, page faults and any compilation
    (``torch.compile``) happen here, so none of it is in the numbers.
timing
    :func:`brrr.timing.bench`: the median seconds per step over many calls,
    with the profiler off (it adds host time to every op).
counting
    one call under :func:`brrr.opclasses.count_flops` (FLOPs per aten op) and
    :class:`TrafficLog` (bytes per aten op: the sizes of the tensors each op
    reads and writes, a lower bound on its memory traffic when nothing is cached).
    A compiled step runs eagerly here (``torch.compiler.set_stance("force_eager")``):
    under a dispatch mode dynamo would compile it again, or give up on it and leave
    it eager for good. Its FLOPs are the same; its bytes are those of the unfused ops.
profiling
    ``steps`` calls under ``torch.profiler`` (:func:`brrr.traces.profile_steps`):
    each op's self time (device time on a GPU) and the Chrome trace with one
    ``step`` annotation per call, from which the time split is read. On a GPU
    the device is synchronized inside each annotation, so a step's kernels fall
    in its own span.

Any exception the step raises becomes a :class:`DiagnoseError` naming it.
"""

from __future__ import annotations

import math
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from brrr import opclasses, targets, traces
from brrr.device import ON_GPU
from brrr.diagnose.errors import DiagnoseError, no_device_work, no_torch_op, step_failed, too_short
from brrr.timing import Timing, bench, torch_threads

STEP_LABEL = "step"


# Lookups into a table (the weight, their first argument) by indices (their second): they read the
# rows the indices touch, not the table. Charged the whole table, a recommender's embedding read
# 2613% of the copy bandwidth.
LOOKUPS = frozenset({"embedding", "_embedding_bag", "_embedding_bag_forward_only"})
# Losses that pick one entry of their input (the first argument) per target (the second), and their
# backward, which reads its input (the second argument) for its shape only and writes a gradient
# that is zero but at the picked entries. Charged the whole input, a GPT-2's nll_loss_forward read
# 3382% of the copy bandwidth (a 50,257-token vocabulary: 51 MB of logits, 256 of them read).
PICKS = frozenset({"nll_loss_forward", "nll_loss2d_forward"})
SHAPE_ONLY = frozenset({"nll_loss_backward", "nll_loss2d_backward"})


def _shape(value):
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _channels_last(tensor: torch.Tensor) -> bool:
    return tensor.is_contiguous(memory_format=torch.channels_last) and not tensor.is_contiguous()


def _charged(name: str, args: tuple, tensors: list) -> tuple[list, int]:
    """``(tensors read or written whole, bytes read of the rest)`` for op ``name``: a lookup
    (:data:`LOOKUPS`) reads the table rows its indices touch, a loss (:data:`PICKS`) the input
    entries its targets pick, and a loss's backward (:data:`SHAPE_ONLY`) none of its input."""
    if len(args) < 2 or not isinstance(args[0], torch.Tensor):
        return tensors, 0
    first, second = args[0], args[1]
    if name in LOOKUPS:
        row_bytes = math.prod(first.shape[1:]) * first.element_size()
        return [t for t in tensors if t is not first], second.numel() * row_bytes
    if name in PICKS:
        return [t for t in tensors if t is not first], second.numel() * first.element_size()
    if name in SHAPE_ONLY:
        return [t for t in tensors if t is not second], 0
    return tensors, 0


class TrafficLog(TorchDispatchMode):
    """Bytes each aten op reads and writes (its tensor arguments and outputs), its calls, and matmul
    dtypes.

    Views and allocations (:data:`brrr.opclasses.LAYOUT`) move nothing and count
    0 bytes. An in-place op counts its tensor twice: read, then written. A lookup or a loss counts
    the part of its input it reads (:func:`_charged`). A depthwise convolution
    (:func:`brrr.opclasses.is_depthwise`) is logged under its own name, ``convolution (depthwise)``,
    with its FLOPs in :attr:`depthwise_flops`, so that it gets a row of its own.
    """

    def __init__(self):
        super().__init__()
        self.bytes: dict[str, int] = defaultdict(int)
        self.calls: Counter[str] = Counter()
        self.contraction_dtypes: Counter[torch.dtype] = Counter()
        self.depthwise_flops: dict[str, int] = defaultdict(int)  # "name (depthwise)" -> FLOPs
        self.convolution_layouts: Counter[str] = Counter()  # "channels_last" or "other" -> calls

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = opclasses.op_name(func)
        shapes = [_shape(arg) for arg in args]
        if "conv" in name and opclasses.classify("aten::" + name) is opclasses.OpClass.CONTRACTION:
            images = [arg for arg in args[:2] if isinstance(arg, torch.Tensor) and arg.dim() == 4]
            last = bool(images) and _channels_last(images[-1])
            self.convolution_layouts["channels_last" if last else "other"] += 1
        if opclasses.is_depthwise(name, shapes):
            backward = "backward" in name
            transposed = bool(args[7] if backward else args[6]) if len(args) > 7 else False
            mask = args[10] if backward and len(args) > 10 else None
            flops = opclasses.depthwise_flops(name, shapes, _shape(out), transposed, mask)
            name += opclasses.DEPTHWISE
            self.depthwise_flops[name] += flops
        self.calls[name] += 1
        if name not in opclasses.LAYOUT:
            leaves = tree_leaves((args, kwargs or {}, out))
            tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
            tensors, partly = _charged(name, args, tensors)
            self.bytes[name] += partly + sum(t.numel() * t.element_size() for t in tensors)
            if opclasses.classify("aten::" + name) is opclasses.OpClass.CONTRACTION and tensors:
                self.contraction_dtypes[tensors[0].dtype] += 1
        return out

    def flops_by_row(self, flops: dict[str, int]) -> dict[str, int]:
        """``flops`` (per op name, :func:`brrr.opclasses.count_flops`) with the depthwise calls'
        FLOPs moved to their own names."""
        moved = dict(flops)
        for name, count in self.depthwise_flops.items():
            base = name.removesuffix(opclasses.DEPTHWISE)
            moved[base] = max(moved.get(base, 0) - count, 0)
            moved[name] = count
        return moved


def dispatch_owner(dispatched) -> Callable[[object], str]:
    """``owner(event)``: the profiler name of the op whose work a profiled event's self time belongs
    to.

    FLOPs and bytes are counted on the ops the dispatch-level count saw (``dispatched``, bare
    names), while the profiler also records the ops those call inside: ``aten::convolution`` calls
    ``aten::_convolution``, which calls the backend's ``aten::mkldnn_convolution`` (a CPU) or
    ``aten::cudnn_convolution`` (a GPU), where the time lands; ``aten::native_dropout`` calls
    ``aten::bernoulli_``. Joined by name, the work sat on one row and the time on another ("0 FLOP",
    overhead-bound, beside a contraction row above its roof). So an event's time goes to its
    outermost ancestor (or itself) among the dispatched ops: the call the count saw, which did the
    work. Events under no dispatched op (wrappers such as ``aten::conv2d``, autograd nodes,
    annotations) keep their name. ``dispatched`` counts calls by name; names of the same work
    (:data:`brrr.opclasses.SAME_WORK`) go to the one of them the count saw most."""
    aliases = {}
    for family in opclasses.SAME_WORK:
        seen = [name for name in family if dispatched.get(name)]
        if seen:
            target = max(seen, key=lambda name: dispatched[name])
            aliases |= {name: target for name in family if name not in seen}
    seen = [name for name, calls in dispatched.items() if calls]
    depthwise = any(name.endswith(opclasses.DEPTHWISE) for name in seen)
    names = frozenset(name.removesuffix(opclasses.DEPTHWISE) for name in seen) | frozenset(aliases)

    def owner(event) -> str:
        found, current, owning = event.name, event, None
        while current is not None:
            name = current.name
            if name.startswith("aten::") and opclasses.op_name(name) in names:
                found = "aten::" + aliases.get(opclasses.op_name(name), opclasses.op_name(name))
                owning = current
            current = current.cpu_parent
        shapes = getattr(owning, "input_shapes", None) or []
        if depthwise and opclasses.is_depthwise(opclasses.op_name(found), shapes):
            found += opclasses.DEPTHWISE
        return found

    return owner


@dataclass
class Measurement:
    """Everything measured about one step, before any interpretation."""

    timing: Timing  # seconds per step, profiler off
    returned: object  # what the last warm-up call returned
    flops: opclasses.FlopCount  # one step
    traffic: TrafficLog  # one step
    self_times: opclasses.OpTimes  # per op, over ``steps`` profiled steps
    trace: traces.Trace  # the profiled steps, one ``step`` annotation each
    steps: int
    profiler_floor_s: float = 0.0  # what the profiler adds to each profiled step by itself
    cpu_share: float = 1.0  # the CPU time its threads got over the wall time they could have had


def checked(step: Callable, args: tuple, phase: str) -> Callable[[], object]:
    """``step(*args)`` as a no-argument function that turns the step's own exceptions into
    DiagnoseError."""

    def run():
        try:
            return step(*args)
        except DiagnoseError:
            raise
        except Exception as error:  # the step's own failure, reported with its type and origin
            raise step_failed(error, phase=phase) from error

    return run


def require_device_work(returned: object, trace: traces.Trace, *, on_gpu: bool) -> None:
    """On a GPU, refuse a step in which the profiler saw no kernel; explain why returning nothing
    matters."""
    if not on_gpu or trace.has_device:
        return
    if returned is None:
        raise no_device_work()
    raise DiagnoseError(
        "The profiler saw no GPU kernel in the step, so there is nothing to diagnose on this GPU: "
        "the model and inputs are probably still on the CPU. Move them with .to('cuda'), or set "
        "BRRR_DEVICE=cpu to diagnose the CPU."
    )


def measure(
    step: Callable, args: tuple, *, threads: int | None, warmup: int, steps: int
) -> Measurement:
    """Warm up, time, count and profile ``step(*args)`` with ``threads`` torch threads (None: as
    set).

    Refuses a step that runs no torch op, and one shorter than the profiler's own cost per step
    (:func:`profiler_floor_s`): the profile of either would describe the profiler, not the step."""
    if warmup < 1 or steps < 1:
        raise DiagnoseError(
            f"warmup and steps must be at least 1, got warmup={warmup} and steps={steps}"
        )
    with torch_threads(threads):
        returned = None
        warm = checked(step, args, "warm-up")
        for _ in range(warmup):
            returned = warm()
        clocks = _clocks()
        timing = bench(checked(step, args, "timing"), warmup=0, threads=threads)
        timed_share = cpu_share(clocks, torch.get_num_threads())
        traffic = TrafficLog()
        with torch.compiler.set_stance("force_eager"), traffic, warnings.catch_warnings():
            # FlopCounterMode tracks modules with global hooks, about which a compiled module warns
            # when called: the hooks are ours, for this count only, and the user has nothing to act
            # on.
            warnings.filterwarnings(
                "ignore", message=r"Using `torch.compile\(module\)` when there are global hooks"
            )
            flops = opclasses.count_flops(checked(step, args, "FLOP counting"))
        if not any(traffic.calls.values()):
            raise no_torch_op(timing.median_s)
        # Load only adds to the profiler's own cost: a step shorter than one reading of it is read
        # against another (a burst once read 1.40 ms, against 19-33 us quiet, and refused a 195 us
        # step), and the least reading is the floor.
        floor_s = min(
            targets.measurements(
                profiler_floor_s(steps),
                lambda: profiler_floor_s(steps),
                lambda floor: timing.median_s >= floor,
                attempts=FLOOR_READINGS,
            )
        )
        if timing.median_s < floor_s:
            raise too_short(timing.median_s, floor_s)
        # shapes only where they split a row: recording them costs every op some profiler time
        shapes = any(name.endswith(opclasses.DEPTHWISE) for name in traffic.calls)
        clocks = _clocks()
        trace, profiler = _profiled(checked(step, args, "profiling"), steps, record_shapes=shapes)
        share = min(timed_share, cpu_share(clocks, torch.get_num_threads()))
        require_device_work(returned, trace, on_gpu=ON_GPU)
        self_times = opclasses.aggregate_self_times(
            profiler.events(), steps=steps, device_clock=ON_GPU, key=dispatch_owner(traffic.calls)
        )
    return Measurement(timing, returned, flops, traffic, self_times, trace, steps, floor_s, share)


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def cpu_share(start: tuple[float, float], threads: int) -> float:
    """The process's CPU time since ``start`` (:func:`_clocks`) over the wall time since: near 1 on
    a quiet machine for a one-thread CPU step, whose one thread runs every op, and less where other
    processes had the core (the scheduler ran them instead). With more threads an op too small for
    torch's pool leaves the others idle, and on a GPU the host waits on the device: neither is a
    measure of load, and 1 is returned."""
    if ON_GPU or threads != 1:
        return 1.0
    wall = time.perf_counter() - start[0]
    return min((time.process_time() - start[1]) / max(wall, 1e-9), 1.0)


def _profiled(run: Callable[[], object], steps: int, *, record_shapes: bool = False):
    """``(trace, profiler)`` of ``steps`` calls of ``run``, one :data:`STEP_LABEL` annotation each.

    One call first under the profiler, left out of it: the first call it records pays its start-up,
    which read 5.8 ms of "between ops" in a 25 µs empty step on our CPU (1.9 ms a step over three)
    and, on an H100, about a millisecond of "waiting on the host" per step of a 3 ms matmul (CUPTI's
    start-up)."""
    profiler = traces.profile_steps(
        run,
        steps,
        label=STEP_LABEL,
        synchronize_each=True,
        profiler_warmup=1,
        record_shapes=record_shapes,
    )
    with tempfile.TemporaryDirectory() as folder:
        trace = traces.export(profiler, Path(folder) / "step.json")
    return trace, profiler


def profiled_over_timed(measured: Measurement) -> float:
    """The mean profiled step, the profiler's own cost per step (:func:`profiler_floor_s`) taken
    off, over the timed median (profiler off): near 1 where both were read on the same machine, as
    it were; far from it where one of them ran in a busy moment (:mod:`brrr.diagnose.trust`)."""
    spans = measured.trace.annotation_spans(STEP_LABEL)
    profiled_s = sum(end - start for start, end in spans) / max(len(spans), 1) / 1e6
    return max(profiled_s - measured.profiler_floor_s, 1e-12) / measured.timing.median_s


def profiler_floor_s(steps: int = 3) -> float:
    """Seconds the profiler adds to each profiled step by itself: the mean annotated step of an
    empty step, profiled as the step is (:func:`_profiled`). All of it reads as time between ops,
    which :func:`brrr.diagnose.core.diagnose` takes off the step's; a step shorter than it is
    refused. On our 2-core CPU it read 19-33 µs."""
    trace, _ = _profiled(lambda: None, steps)
    spans = trace.annotation_spans(STEP_LABEL)
    return sum(end - start for start, end in spans) / max(len(spans), 1) / 1e6


FLOOR_READINGS = 3


def _one_add(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def compiled_call_seconds(threads: int | None = None, *, refresh: bool = False) -> float:
    """Seconds per call of a ``torch.compile``-d one-op function on a one-element tensor: the floor
    any compiled step pays (guards, the generated wrapper), measured once per machine, torch and
    thread count, and cached beside the ceilings (``refresh=True`` measures again). On our 2-core
    CPU it read 25-80 µs, ten to forty eager dispatches."""
    from brrr import cache
    from brrr.device import DEVICE, device_name

    path = cache.cache_dir() / (
        f"compiled-call-{cache.slug(device_name())}-{DEVICE.type}-"
        f"{cache.slug(torch.__version__)}-{threads or 'default'}-threads.json"
    )
    cached = cache.read_json(path)
    if cached and "seconds" in cached and not refresh:
        return float(cached["seconds"])
    x = torch.ones(1, device=DEVICE)
    compiled = torch.compile(_one_add, dynamic=False)
    with torch_threads(threads):
        compiled(x)  # compile outside the timing
    # a floor is a best case, and load from other work only raises it: the lowest of three medians
    seconds = min(
        bench(lambda: compiled(x), threads=threads, warmup=50, budget_s=0.1).median_s
        for _ in range(FLOOR_READINGS)
    )
    cache.write_json(path, {"seconds": seconds})
    return seconds
