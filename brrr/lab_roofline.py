"""Lab 1, "your machine's roofline": the ops students analyse, and the checks that grade their work.

Students write their own timing code for two ceilings (copy bandwidth and matmul
peak), compute the ridge point, count FLOPs and bytes for a list of ops, and
classify each op as memory- or compute-bound on their machine.

Grading (thresholds from :mod:`brrr.thresholds`):

- ``copy_bandwidth`` and ``matmul_peak``: the student's function is called by
  the grader, single-threaded, between two measurements by :mod:`brrr.ceilings`
  taken in the same run (not the cached ones). It must land within the stated
  tolerance of them, in one of up to three attempts. It must also have taken at
  least as long as the work it claims to have timed (a hard-coded number fails),
  and must not call ``brrr.ceilings`` or ``brrr.timing``.
- ``ridge_point``: peak / bandwidth, on the student's numbers and on random ones.
- ``intensities``: FLOPs and bytes of every op in :data:`OPS` by the rules in
  the lab (those of :mod:`brrr.counting`), within 2%.
- ``classes``: each op's regime by the ridge point measured in this run.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import torch

from brrr import ceilings, counting, grading, thresholds, timing, units
from brrr.counting import OpCount
from brrr.device import ON_GPU, far_above_cache, per_device
from brrr.roofline import Regime
from brrr.timing import torch_threads

LAB = "01-roofline"

# The dtype of the matmul peak and of the ops: tensor-core bf16 on a GPU, fp32 on a CPU.
DTYPE = per_device(cpu=torch.float32, gpu=torch.bfloat16)
COPY_N = far_above_cache(4)  # float32 elements copied by copy_bandwidth(n)
MATMUL_N = per_device(cpu=1024, gpu=8192)  # square matmul size for matmul_peak(n, dtype)


@dataclass(frozen=True)
class Op:
    """An op to analyse. ``shape`` is (n,) for pointwise, (rows, cols) for reduction and
    layer norm, and (m, n, k) for a matmul of an m×k by a k×n matrix."""

    name: str
    kind: str  # "pointwise", "reduction", "matmul" or "layer_norm"
    shape: tuple[int, ...]
    dtype: torch.dtype = DTYPE

    @property
    def element_size(self) -> int:
        return counting.element_size(self.dtype)


OPS: tuple[Op, ...] = (
    Op("cos of 16M elements", "pointwise", (2**24,)),
    Op("row sums of 4096x4096", "reduction", (4096, 4096)),
    Op("layer norm of 8192x1024", "layer_norm", (8192, 1024)),
    Op("small matmul 64x64x64", "matmul", (64, 64, 64)),
    Op("linear layer, batch 16, 4096->4096", "matmul", (16, 4096, 4096)),
    Op("large matmul 8192x8192x8192", "matmul", (8192, 8192, 8192)),
)


def reference_count(op: Op) -> OpCount:
    """FLOPs and bytes of ``op`` by the lab's rules, which are those of :mod:`brrr.counting`."""
    if op.kind == "pointwise":
        return counting.pointwise(op.shape[0], op.dtype, name=op.name)
    if op.kind == "reduction":
        return counting.reduction(*op.shape, op.dtype, name=op.name)
    if op.kind == "matmul":
        m, n, k = op.shape
        return counting.matmul(m, n, k, op.dtype, name=op.name)
    if op.kind == "layer_norm":
        return counting.layer_norm(*op.shape, op.dtype)
    raise ValueError(f"unknown op kind {op.kind!r}")


def regime_of(op_intensity: float, ridge: float) -> str:
    """The lab's rule: at or above the ridge point, compute-bound; below it, memory-bound."""
    return str(Regime.COMPUTE if op_intensity >= ridge else Regime.MEMORY)


# The grader's own measurements in this run, kept for the ridge point of the classes check.
_measured: dict[str, float] = {}


def _number(name: str, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise grading.fail(f"{name} returned {value!r}, not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise grading.fail(f"{name} returned {number!r}; a rate must be a positive, finite number")
    return number


def _no_reference_calls(name: str, fn, *args) -> None:
    """Call ``fn`` once on a small problem, watching for calls into brrr.ceilings and brrr.timing."""
    with grading.watch_calls([ceilings, timing]) as watch:
        grading.student_call(name, fn, *args)
    if watch.seen:
        raise grading.fail(f"{name} called {', '.join(watch.seen)}: this lab asks for your own timing code "
                           "(warm-up, synchronize where there is a GPU, median), not brrr's.")


def _grade_ceiling(check: str, fn, args: tuple, small_args: tuple, reference, work: float, unit: str,
                   what: str) -> str:
    """Shared by the two ceilings: compare ``fn(*args)`` with ``reference()`` measured before and after."""
    name = getattr(fn, "__name__", check)
    threshold = thresholds.threshold(LAB, check)
    _no_reference_calls(name, fn, *small_args)

    def attempt() -> grading.Attempt:
        with torch_threads(1):
            before = reference()
            start = time.perf_counter()
            value = _number(name, grading.student_call(name, fn, *args))
            elapsed = time.perf_counter() - start
            after = reference()
        low, high = min(before, after), max(before, after)
        fastest_one = work / (high * (1 + threshold.value))
        if elapsed < fastest_one:
            raise grading.fail(
                f"{name} returned after {units.seconds(elapsed)}, but {what} takes at least "
                f"{units.seconds(fastest_one)} at the rate brrr.ceilings measured just now "
                f"({units.si(high, unit)}): it cannot have timed it. Measure, don't type in a number.")
        band = (low * (1 - threshold.value), high * (1 + threshold.value))
        passed = band[0] <= value <= band[1]
        distance = 0.0 if passed else min(abs(math.log(value / band[0])), abs(math.log(value / band[1])))
        _measured[check] = (low + high) / 2
        detail = (f"yours {units.si(value, unit)}, brrr.ceilings {units.si(low, unit)} to {units.si(high, unit)} "
                  f"before and after, so {units.si(band[0], unit)} to {units.si(band[1], unit)} passes")
        return grading.Attempt(-distance, passed, detail)

    best, history = grading.repeat_until_pass(attempt)
    threads = "single-threaded" if not ON_GPU else "on the GPU"
    if not best.passed:
        tried = "\n".join(f"  attempt {i + 1}: {a.detail}" for i, a in enumerate(history))
        call = f"{name}({', '.join(ceilings.dtype_name(a) if isinstance(a, torch.dtype) else repr(a) for a in args)})"
        raise grading.fail(
            f"{call} is not {threshold.describe()} of {what} as brrr.ceilings measures it in the "
            f"same run ({threads}):\n{tried}\n({threshold.why}.) Check your byte or FLOP count, the warm-up, "
            "the synchronize before reading the clock on a GPU, and that you take the median.")
    return f"{best.detail} ({threshold.describe()}, {threads}, attempt {len(history)})"


# ---------------------------------------------------------------- the checks


@grading.graded(LAB, "copy_bandwidth")
def grade_copy_bandwidth(copy_bandwidth) -> str:
    """``copy_bandwidth(n)``: B/s copying n float32 elements (4n read + 4n written), against brrr.ceilings."""
    n = COPY_N
    return _grade_ceiling(
        "copy_bandwidth", copy_bandwidth, (n,), (2**20,),
        lambda: ceilings.measure_copy_bandwidth(n, threads=1), work=2 * n * 4, unit="B/s",
        what=f"a copy of {n:,} float32 elements ({units.binary_bytes(4 * n)})")


@grading.graded(LAB, "matmul_peak")
def grade_matmul_peak(matmul_peak) -> str:
    """``matmul_peak(n, dtype)``: FLOP/s of an n×n by n×n matmul (2n³ FLOPs), against brrr.ceilings."""
    n = MATMUL_N
    dtype_name = ceilings.dtype_name(DTYPE)
    return _grade_ceiling(
        "matmul_peak", matmul_peak, (n, DTYPE), (128, DTYPE),
        lambda: ceilings.measure_matmul_peak(dtype_name, n, threads=1), work=2 * n**3, unit="FLOP/s",
        what=f"a {n}x{n} {dtype_name} matmul ({2 * n**3:.3g} FLOPs)")


@grading.graded(LAB, "ridge_point")
def grade_ridge_point(ridge_point) -> str:
    """``ridge_point(peak_flops, bandwidth)``: FLOPs per byte where compute time equals memory time."""
    name = getattr(ridge_point, "__name__", "ridge_point")
    tolerance = thresholds.threshold(LAB, "ridge_point").value
    rng = random.Random()
    cases = [(rng.uniform(1e10, 1e15), rng.uniform(1e9, 1e13)) for _ in range(4)]
    for peak, bandwidth in cases:
        got = _number(name, grading.student_call(name, ridge_point, peak, bandwidth))
        want = peak / bandwidth
        if abs(got - want) > tolerance * want:
            raise grading.fail(f"{name}({peak:.4g}, {bandwidth:.4g}) returned {got:.6g}; the ridge point is "
                               f"peak / bandwidth = {want:.6g} FLOPs per byte.")
    return f"{name} gives peak / bandwidth on {len(cases)} random machines"


@grading.graded(LAB, "intensities")
def grade_intensities(count) -> str:
    """``count(op) -> (flops, bytes)`` for every op in OPS, by the lab's counting rules, within 2%."""
    name = getattr(count, "__name__", "count")
    tolerance = thresholds.threshold(LAB, "intensities").value
    wrong = []
    for op in OPS:
        reply = grading.student_call(name, count, op)
        try:
            flops, moved = (float(v) for v in reply)
        except (TypeError, ValueError):
            raise grading.fail(f"{name}({op.name!r}) returned {reply!r}; it must return (flops, bytes)") from None
        want = reference_count(op)
        bad = [f"{label} {got:,.0f} (needed {need:,.0f})" for label, got, need in
               (("FLOPs", flops, want.flops), ("bytes", moved, want.bytes)) if abs(got - need) > tolerance * need]
        if bad:
            wrong.append(f"  {op.name} [{op.kind} {op.shape}, {ceilings.dtype_name(op.dtype)}]: " + ", ".join(bad))
    if wrong:
        raise grading.fail(f"{len(wrong)} of {len(OPS)} ops are counted wrong (within "
                           f"{tolerance:.0%} passes):\n" + "\n".join(wrong) +
                           "\nFollow the counting rules in the lab: each input read once, each output written "
                           "once, and the FLOPs per element stated there.")
    return f"FLOPs and bytes of all {len(OPS)} ops within {tolerance:.0%}"


def measured_ridge() -> float:
    """The ridge point from the grader's measurements in this run (measured now if none were taken yet)."""
    if "copy_bandwidth" not in _measured:
        _measured["copy_bandwidth"] = ceilings.measure_copy_bandwidth(COPY_N, threads=1)
    if "matmul_peak" not in _measured:
        _measured["matmul_peak"] = ceilings.measure_matmul_peak(ceilings.dtype_name(DTYPE), MATMUL_N, threads=1)
    return _measured["matmul_peak"] / _measured["copy_bandwidth"]


@grading.graded(LAB, "classes")
def grade_classes(classify) -> str:
    """``classify(intensity, ridge) -> 'memory-bound' | 'compute-bound'`` for each op on this machine."""
    name = getattr(classify, "__name__", "classify")
    grading.student_call(name, classify, 1.0, 2.0)  # fail fast if it is not written, before measuring
    ridge = measured_ridge()
    cases = [(op.name, reference_count(op).intensity) for op in OPS]
    cases += [("an op at 4x the ridge", 4 * ridge), ("an op at 1/4 of the ridge", ridge / 4)]
    wrong = []
    for label, op_intensity in cases:
        got = str(grading.student_call(name, classify, op_intensity, ridge)).strip().lower()
        want = regime_of(op_intensity, ridge)
        if not got.startswith(want.split("-")[0]):
            wrong.append(f"  {label}: intensity {op_intensity:.3g} FLOPs/byte, ridge {ridge:.3g}: "
                         f"you said {got!r}, it is {want!r}")
    if wrong:
        raise grading.fail(f"{len(wrong)} of {len(cases)} ops are classified wrong:\n" + "\n".join(wrong))
    memory = sum(regime_of(i, ridge) == str(Regime.MEMORY) for _, i in cases[: len(OPS)])
    return (f"all {len(OPS)} ops classified right at a measured ridge point of {ridge:.3g} FLOPs/byte "
            f"({memory} memory-bound, {len(OPS) - memory} compute-bound)")
