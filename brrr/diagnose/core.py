"""``diagnose(step, *args)``: which regime a PyTorch step is in, where its time goes, and what to
do.

The step is measured (:mod:`brrr.diagnose.profile`), its wall time split
(:mod:`brrr.diagnose.split`), each op placed against this machine's measured
roofs (:mod:`brrr.diagnose.ops`), and fixes proposed with their bounds
(:mod:`brrr.diagnose.advice`).

The whole step's regime is the one that holds the largest share of its time:
compute-bound ops, memory-bound ops, or overhead, which is the time between ops
(a CPU) or the device idle waiting on the host (a GPU), plus the time of ops too
small to leave the dispatch floor. The shares are in :attr:`Diagnosis.shares`,
and :attr:`Diagnosis.margin` says how far the winner is ahead of the next.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Callable

import torch

from brrr import ceilings as ceilings_module
from brrr import targets
from brrr.ceilings import Ceilings, dtype_name
from brrr.device import DEVICE, ON_GPU
from brrr.diagnose import advice as advice_module
from brrr.diagnose import ops, report, split
from brrr.diagnose import trials as trials_module
from brrr.diagnose import trust as trust_module
from brrr.diagnose.advice import Advice
from brrr.diagnose.errors import DiagnoseError, step_failed
from brrr.diagnose.profile import (
    STEP_LABEL,
    Measurement,
    compiled_call_seconds,
    measure,
    profiled_over_timed,
)
from brrr.opclasses import DEPTHWISE, OpClass, classify, op_name
from brrr.roofline import Regime
from brrr.stamp import environment
from brrr.timing import torch_threads

TOP_OPS = 8


@dataclass
class Diagnosis:
    """What :func:`diagnose` found. Times are per step; rates are fractions of the measured
    roofs."""

    regime: str  # the whole step's label
    shares: dict[str, float]  # regime -> share of the step's time (sums to 1)
    step_s: float  # median seconds per step, profiler off
    split: split.Split  # where the wall time goes (named fractions summing to 1)
    rows: list[ops.OpRow]  # per op class
    top_ops: list[ops.OpRow]  # the slowest ops
    mfu: float  # model FLOP/s / measured matmul peak of the step's dtype
    matmul_dtype: str  # the dtype whose matmul peak MFU and contractions are measured against
    flops_per_step: float
    launches_per_step: float  # kernels (GPU) or aten ops dispatched (CPU)
    advice: list[Advice]
    ceilings: Ceilings
    threads: int | None
    compile_report: dict | None = None
    env: dict = field(default_factory=dict)
    op_rows: list[ops.OpRow] = field(default_factory=list)  # every op, slowest first
    trials: list[trials_module.Trial] = field(
        default_factory=list
    )  # fixes tried on the step (--try)
    profiler_floor_s: float = (
        0.0  # what the profiler adds to each profiled step by itself, taken off the idle time
    )
    trust: trust_module.Trust | None = None  # whether the readings agree (brrr.diagnose.trust)
    convolution_peak: float | None = None  # the fp32 convolution roof, where the step convolves
    matmul_peak: float | None = (
        None  # the matmul peak alone, where the convolution roof is above it
    )
    no_formula: dict[str, int] = field(default_factory=dict)  # ops whose FLOPs nothing counts
    counted_as_torch: dict[str, bool] = field(default_factory=dict)  # op -> FlopCounterMode's count

    @property
    def margin(self) -> float:
        """The winning regime's share over the next one's (inf when it holds all the time)."""
        first, second = sorted(self.shares.values(), reverse=True)[:2]
        return first / second if second > 0 else float("inf")

    def report(self) -> str:
        return report.text(self)

    def to_json(self) -> dict:
        return report.to_json(self)

    def plot(self, ax=None):
        return report.plot(self, ax=ax)


def _op_rows(
    seconds: dict[str, float], measured: Measurement, ceilings: Ceilings, dtype: str
) -> list:
    """Each dispatched op's row against ``ceilings`` (:func:`brrr.diagnose.ops.op_rows`), compiled
    kernels merged."""
    rows = ops.op_rows(
        seconds,
        measured.traffic.flops_by_row(measured.flops.flops),
        dict(measured.traffic.bytes),
        dict(measured.traffic.calls),
        ceilings,
        dtype,
    )
    return ops.merge_compiled(rows, ceilings, dtype)


# How many more readings the matmul peak gets while an op still reads above it, after every roof was
# read again. On our 2-core CPU one thread's float32 peak read 80.0, 61.1, 66.0 and 61.8 GFLOP/s a
# few seconds apart on an idle machine, and a fresh clone's run saw a ViT's matmul at 71.7 beside
# two readings of 67.3 and 67.8: each reading of 1.5-2 s is another chance at the machine's own
# speed.
MATMUL_READINGS_UNDER_AN_OP_ABOVE = 3


def _roofs_read_again_under_ops_above(
    ceilings: Ceilings, op_rows: list, dtype: str, rows_against: Callable[[Ceilings], list]
) -> tuple[Ceilings, list]:
    """``(ceilings, op_rows)`` once no op reads above its roof, or after every reading allowed.

    A roof is the best this machine does: an op above one means the roof was read in a slow moment
    (or brrr counted the op's work wrong). Every roof is measured again (they only rise); then,
    while a contraction is still above, the matmul peak of ``dtype`` (the contractions' roof) is
    read up to :data:`MATMUL_READINGS_UNDER_AN_OP_ABOVE` more times, the better reading kept, before
    the report calls it a counting error. ``rows_against(ceilings)`` gives the op rows against other
    ceilings."""

    def above(rows):
        return [row for row in rows if row.flops_fraction > 1]

    if not above(op_rows):
        return ceilings, op_rows
    ceilings = ceilings_module.measured_again(ceilings)
    op_rows = rows_against(ceilings)
    for _ in range(MATMUL_READINGS_UNDER_AN_OP_ABOVE):
        if not [row for row in above(op_rows) if row.op_class == OpClass.CONTRACTION.value]:
            break
        ceilings = ceilings_module.matmul_measured_again(ceilings, dtype)
        op_rows = rows_against(ceilings)
    return ceilings, op_rows


def convolves(calls) -> bool:
    """Whether the step runs dense convolutions (depthwise ones run far below any compute roof)."""
    return any(
        calls[name] and "conv" in name and not name.endswith(DEPTHWISE)
        for name in calls
        if classify("aten::" + name) is OpClass.CONTRACTION
    )


def with_convolution_roof(ceilings: Ceilings, dtype: str, peak: float | None) -> Ceilings:
    """``ceilings`` whose ``dtype`` contraction roof is the better of its matmul peak and the
    convolution ``peak`` (None: unchanged): the roof of a step's contractions is the best library
    path it uses. For dividing only: the cache keeps each roof apart."""
    if peak is None or peak <= ceilings.matmul(dtype):
        return ceilings
    return dataclasses.replace(ceilings, matmul_peak={**ceilings.matmul_peak, dtype: peak})


def op_seconds(measured: Measurement) -> dict[str, float]:
    """Each op's self seconds per profiled step. Annotations (the step's own, record_function
    ranges, torch.compile's wrappers) are no op: their self time is time between ops, which the
    split counts."""
    annotations = (
        {event.name for event in measured.trace.annotations} | {STEP_LABEL} | PROFILER_EVENTS
    )
    return {
        name: total / measured.steps
        for name, total in measured.self_times.seconds.items()
        if name not in annotations
    }


def readings_compared(measured: Measurement) -> tuple[float, float]:
    """``(ops over timed, profiled over timed)``: the time inside ops of a profiled step, and the
    whole profiled step (:func:`brrr.diagnose.profile.profiled_over_timed`), over the timed
    median."""
    inside = sum(op_seconds(measured).values())
    return inside / measured.timing.median_s, profiled_over_timed(measured)


def _measured_until_consistent(step, args, threads, warmup, steps) -> tuple[Measurement, int]:
    """``(measurement, how many were taken)``: the step measured again while its profiled steps and
    its timed median disagree (:func:`brrr.diagnose.trust.agrees`), up to
    :data:`brrr.diagnose.trust.MEASUREMENTS` times (:func:`brrr.targets.measurements`); the
    measurement whose two agree best."""

    def again() -> Measurement:
        return measure(step, args, threads=threads, warmup=warmup, steps=steps)

    def distance(measured: Measurement) -> float:
        return trust_module.distance(*readings_compared(measured))

    def agrees(measured: Measurement) -> bool:
        return trust_module.agrees(*readings_compared(measured))

    taken = targets.measurements(again(), again, agrees, attempts=trust_module.MEASUREMENTS)
    return min(taken, key=distance), len(taken)


def _rows_against_roofs(measured: Measurement, ceilings: Ceilings, dtype: str, threads):
    """``(ceilings, op_rows, convolution peak)``: each op against the roofs, its contractions
    against the better of the matmul and (where the step convolves) the convolution roof, every roof
    read again while an op reads above it (:func:`_roofs_read_again_under_ops_above`, and the
    convolution roof too). The ceilings returned keep the matmul peak apart, as the cache does."""
    conv_peak = None
    if dtype == "float32" and convolves(measured.traffic.calls):
        conv_peak = ceilings_module.convolution_peak(threads=threads)
    seconds = op_seconds(measured)

    def rows(found: Ceilings) -> list:
        return _op_rows(seconds, measured, with_convolution_roof(found, dtype, conv_peak), dtype)

    ceilings, op_rows = _roofs_read_again_under_ops_above(ceilings, rows(ceilings), dtype, rows)
    if conv_peak is not None and any(
        row.flops_fraction > 1 and "conv" in row.name for row in op_rows
    ):  # a convolution above every roof: the convolution roof read again too (it only rises)
        conv_peak = ceilings_module.convolution_peak(threads=threads, refresh=True)
        op_rows = rows(ceilings)
    return ceilings, op_rows, conv_peak


def _matmul_dtype(measured: Measurement, ceilings: Ceilings) -> str:
    """The dtype most contractions ran in, as the ceilings name it (``tf32`` where fp32 may use
    it)."""
    counts = measured.traffic.contraction_dtypes
    dtype = dtype_name(counts.most_common(1)[0][0]) if counts else "float32"
    tf32_allowed = ON_GPU and torch.backends.cuda.matmul.allow_tf32
    if dtype == "float32" and tf32_allowed and "tf32" in ceilings.matmul_peak:
        dtype = "tf32"
    return dtype if dtype in ceilings.matmul_peak else "float32"


def regime_shares(rows: list[ops.OpRow], overhead_idle_s: float) -> dict[str, float]:
    """Share of the step in each regime: ops by their own regime, plus ``overhead_idle_s`` as
    overhead."""
    seconds = ops.seconds_by_regime(rows)
    seconds[Regime.OVERHEAD.value] += overhead_idle_s
    total = sum(seconds.values())
    if total <= 0:
        raise DiagnoseError(
            "The profiler measured no time in the step: it runs no torch op to diagnose."
        )
    return {name: value / total for name, value in seconds.items()}


COMPILED_MARKERS = ("Torch-Compiled Region", "TorchDynamo Cache Lookup")


def is_compiled(profiled_names) -> bool:
    """True when the profile shows ``torch.compile``'s own events: the step runs compiled code."""
    return any(name.startswith(COMPILED_MARKERS) for name in profiled_names)


def _overhead_advice(
    shares,
    op_rows,
    idle: float,
    launches: float,
    step_s: float,
    idle_s: float,
    threads: int | None,
    ceilings: Ceilings,
    already_compiled: bool,
) -> Advice:
    """The overhead advice with its bound: removing the host wait (GPU), or the compiled-step floor
    (CPU)."""
    share = shares[Regime.OVERHEAD.value]
    if ON_GPU:
        return advice_module.overhead_advice(
            share, idle, launches, step_s, already_compiled=already_compiled
        )
    profiled = sum(row.seconds for row in op_rows) + idle_s
    contractions = [row for row in op_rows if row.op_class == OpClass.CONTRACTION.value]
    compiled = {
        "kept_share": sum(row.seconds for row in contractions) / profiled,
        "floor_s": compiled_call_seconds(threads),
        "library_calls": sum(row.calls for row in contractions),
        "dispatch_s": ceilings.dispatch_overhead,
    }
    return advice_module.overhead_advice(
        share, idle, launches, step_s, compiled=compiled, already_compiled=already_compiled
    )


REPEATS_FOR_RECOMPILES = 2


def explain_compile(step: Callable, args: tuple) -> dict:
    """Graph breaks of ``torch.compile`` on the step (``torch._dynamo.explain``), and recompiles:
    frames compiled again when the step, compiled with the cheap ``eager`` backend, is called
    :data:`REPEATS_FOR_RECOMPILES` more times with the same inputs (a guard on a Python value that
    changes every step, say). Recompiles caused by new input shapes are not seen: the inputs are
    fixed."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    try:
        found = torch._dynamo.explain(step)(*args)
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(step, backend="eager")
        compiled(*args)
        first = counters["frames"]["total"]
        for _ in range(REPEATS_FOR_RECOMPILES):
            compiled(*args)
        recompiles = counters["frames"]["total"] - first
    except Exception as error:
        raise step_failed(error, phase="torch._dynamo.explain") from error
    finally:
        torch._dynamo.reset()
    return {
        "graphs": found.graph_count,
        "graph_breaks": found.graph_break_count,
        "break_reasons": [str(getattr(reason, "reason", reason)) for reason in found.break_reasons],
        "ops": found.op_count,
        "recompiles": recompiles,
    }


# The profiler's own bookkeeping, which its tables list beside the ops: on an H100 CUPTI's "Activity
# Buffer Request" took 25% of a one-matmul step's rows, labelled memory-bound. It is no work of the
# step's. "ProfilerStep*" is the schedule's annotation of each profiled step (the first one is left
# out of the profile).
PROFILER_EVENTS = frozenset({"Activity Buffer Request", "ProfilerStep*"})


def diagnose(
    step: Callable,
    *args,
    threads: int | None = None,
    warmup: int = 2,
    steps: int = 3,
    explain: bool = False,
    tries=None,
    factory: Callable | None = None,
    try_budget_s: float = trials_module.BUDGET_S,
) -> Diagnosis:
    """Measure ``step(*args)`` (one training or inference step) and say which regime it is in.

    ``threads`` pins torch's CPU threads for the step and picks the ceilings measured with as many
    (None: the current setting). ``warmup`` calls run first, untimed; ``steps`` calls are profiled.
    ``explain=True`` adds ``torch._dynamo.explain``'s graph breaks. ``tries`` (``"all"`` or names
    from :data:`brrr.diagnose.trials.TRIES`) tries those fixes on the step and measures them
    (``try_budget_s`` of timing each); ``factory``, the function that built ``(step, args)``, lets
    the batch be tried (its ``batch`` parameter). Raises :class:`DiagnoseError` with a readable
    message for bad input. Where the profiled steps and the timed median disagree the step is
    measured again (up to :data:`brrr.diagnose.trust.MEASUREMENTS` times), and the roofs are checked
    against short readings now (:func:`brrr.ceilings.checked_against_probes`); what still disagrees
    is in :attr:`Diagnosis.trust` and said in the report.

    Long: input checks, the timed run, the profiled run and the verdict, each a few lines, in the
    order they happen; the pieces they call live in their own modules.
    """
    if not callable(step):
        raise DiagnoseError(
            f"diagnose needs a callable step, got {type(step).__name__}: pass the function "
            "that runs one step, and its arguments after it: diagnose(step, x, y)"
        )
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise DiagnoseError(
            "threads must be a whole number of at least 1 (or None for torch's default), got "
            f"{threads!r}"
        )
    asked = trials_module.parse(tries)
    measured, measurements = _measured_until_consistent(step, args, threads, warmup, steps)
    ceilings = ceilings_module.measure(threads=threads)
    read_before = ceilings
    ceilings, probes = ceilings_module.checked_against_probes(ceilings)
    dtype = _matmul_dtype(measured, ceilings)
    ceilings, op_rows, conv_peak = _rows_against_roofs(measured, ceilings, dtype, threads)
    matmul_alone, roofs_rose = ceilings.matmul(dtype), ceilings != read_before
    ceilings = with_convolution_roof(ceilings, dtype, conv_peak)
    time_split = split.time_split(measured.trace, STEP_LABEL)
    launches = split.launches_per_step(measured.trace, STEP_LABEL)
    idle_name = split.HOST_WAIT if time_split.clock == "GPU" else split.BETWEEN_OPS
    # the profiler's own cost per step reads as idle time (between ops, or the device waiting on the
    # host)
    overhead_idle_s = max(
        time_split[idle_name] * time_split.step_us / 1e6 - measured.profiler_floor_s, 0.0
    )
    shares = regime_shares(op_rows, overhead_idle_s)
    regime = max(shares, key=shares.get)
    flops = float(measured.flops.total)
    tensor_cores = ON_GPU and torch.cuda.get_device_capability(DEVICE)[0] >= 7
    overhead = None
    if shares[Regime.OVERHEAD.value] >= advice_module.WORTH_FIXING:
        overhead = _overhead_advice(
            shares,
            op_rows,
            time_split[idle_name],
            launches,
            measured.timing.median_s,
            overhead_idle_s,
            threads,
            ceilings,
            is_compiled(measured.self_times.seconds),
        )
    layouts = measured.traffic.convolution_layouts
    found = advice_module.advise(
        shares,
        op_rows,
        dtype,
        ceilings,
        overhead=overhead,
        on_gpu=ON_GPU,
        tensor_cores=tensor_cores,
        channels_last=layouts["channels_last"] > layouts["other"],
    )
    tried = trials_module.run(
        step, args, asked, threads=threads, factory=factory, budget_s=try_budget_s
    )
    found = advice_module.with_trials(found, tried, regime)
    return Diagnosis(
        regime=regime,
        shares=shares,
        step_s=measured.timing.median_s,
        split=time_split,
        rows=ops.class_rows(op_rows, ceilings, dtype),
        top_ops=op_rows[:TOP_OPS],
        op_rows=op_rows,
        trials=tried,
        mfu=flops / measured.timing.median_s / ceilings.matmul(dtype),
        matmul_dtype=dtype,
        flops_per_step=flops,
        launches_per_step=launches,
        advice=found,
        ceilings=ceilings,
        threads=threads,
        compile_report=explain_compile(step, args) if explain else None,
        env=_environment(threads),
        profiler_floor_s=measured.profiler_floor_s,
        trust=trust_module.Trust(
            *readings_compared(measured),
            measurements,
            probes,
            measured.cpu_share,
            _load(),
            roofs_rose=roofs_rose,
        ),
        convolution_peak=conv_peak,
        matmul_peak=matmul_alone if ceilings.matmul(dtype) != matmul_alone else None,
        no_formula=measured.flops.no_formula,
        counted_as_torch={
            row.name: measured.flops.agrees_with_torch(op_name("aten::" + row.name))
            for row in op_rows
            if row.flops_fraction > 1
        },
    )


def _load() -> tuple[float, int] | None:
    """The 1-minute load average and the cores, where the system says (not on Windows)."""
    try:
        return os.getloadavg()[0], os.cpu_count() or 1
    except (AttributeError, OSError):
        return None


def _environment(threads: int | None) -> dict:
    """The stamp's facts for this run, with the thread count the step ran on."""
    with torch_threads(threads):
        return environment()
