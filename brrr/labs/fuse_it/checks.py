"""Lab 2, "fuse it": how it is graded (the task is in :mod:`brrr.labs.fuse_it`).

Grading happens in the grader process (:mod:`brrr.grading.server`), thresholds
from :mod:`brrr.checks.thresholds`. The student's wrapper is only asked which
kernels it launches; the grader checks their source (Triton only), compiles them
itself and runs them on its own tensors (:mod:`brrr.checks.kernels`):

- ``correct`` (any device): fresh inputs at odd sizes, three of them drawn per
  submission (:func:`drawn_correctness_sizes`) and a large one, up to a few million
  elements (:func:`drawn_large_size`), NaN-filled output, at
  least one Triton kernel, every load and store in bounds (in the interpreter:
  on a CPU at every run, on a GPU in an extra interpreted run at small sizes).
- ``traffic`` (CPU): counted in the interpreter at three sizes drawn per submission
  in the grader process (:func:`traffic_sizes`; two odd, one a multiple of 1,024),
  never a published one: at each, exactly 4n bytes loaded from each of x and y, 4n
  bytes stored to out, nothing else (atomics included), and no program of the grid
  that stores nothing (:func:`brrr.checks.core.idle_failure`).
- ``bandwidth`` and ``speedup`` (GPU): at least 80% of the copy bandwidth and at
  least 2x the eager chain, timed by the grader on rotated inputs in the same
  run; every timed output is checked afterwards, and a time below what the bytes
  need at the measured copy bandwidth is flagged as impossible.
"""

from __future__ import annotations

from brrr.checks import core
from brrr.device import per_device
from brrr.labs.fuse_it import LAB
from brrr.labs.fuse_it.given import (
    EAGER_ELEMENTS_MOVED,
    FUSED_ELEMENTS_MOVED,
    chain,
    make_inputs,
    timed_n,
)

CHECKS = {"cpu": ("correct", "traffic"), "gpu": ("correct", "bandwidth", "speedup")}
ALL_CHECKS = ("correct", "traffic", "bandwidth", "speedup")


EAGER_KERNELS = 5


SPEC = core.Spec(
    name="chain", reference=chain, make_inputs=make_inputs, input_names=("x", "y"), out_name="out"
)

# Sizes that are a multiple of no power-of-two block, plus one that is; three more are drawn per
# submission.
CORRECTNESS_SIZES = per_device(
    cpu=(1, 17, 65_536), gpu=(1000, 1, 17, 4097, 65_536, 1_000_003, 2**24 + 5)
)
BOUNDS_SIZES = (
    1000,
    4097,
)  # GPU: also run the kernel in the interpreter at these sizes to check bounds


def drawn_correctness_sizes(rng) -> tuple[int, ...]:
    """Three odd sizes drawn per submission (``rng`` from :func:`brrr.checks.core.size_drawer`)."""
    return (
        core.unaligned(rng, 18, 1_023),
        core.unaligned(rng, 1_025, 8_191),
        core.unaligned(rng, 40_001, 70_001),
    )


# The large case of the correctness check: drawn log-uniformly in [LARGE_LOW, LARGE_HIGH], far above
# the 65,536 of the published sizes, where a wrapper that branches on n (a torch path, a capped
# grid) was never called. In the interpreter every program runs in Python (10-25 ms a program of
# 4,096 elements on a loaded 2-core machine), so there the size replayed is cut until its launches
# hold at most LARGE_PROGRAMS programs, never below LARGE_LOW. With 32, five gradings of a correct
# fixture (blocks of 4,096) took 7.0 s against 5.1 s without the large case, in turns, on a loaded
# 2-core machine; with 128 the 20 gradings of its test took 94 s, not 16. The wrapper is still
# called at the size drawn, so one that hangs or crashes up there fails.
LARGE_LOW, LARGE_HIGH = 131_073, 4_194_303
LARGE_PROGRAMS = 32


def drawn_large_size(student, rng) -> int:
    """The large size of the correctness check for this submission: drawn, then (interpreted) cut to
    :data:`LARGE_PROGRAMS` programs, as the wrapper's launches at the drawn size say."""
    import math

    from brrr.checks import kernels
    from brrr.device import TRITON_INTERPRETED

    high = round(math.exp(rng.uniform(math.log(LARGE_LOW), math.log(LARGE_HIGH))))
    n = core.unaligned(rng, LARGE_LOW, high)
    if not TRITON_INTERPRETED:
        return n
    tensors = {name: ([n], "float32") for name in SPEC.names}
    recipe = student.record(tensors, inputs=SPEC.input_names)
    problem = kernels.recipe_problem(recipe)
    if problem:
        raise core.fail(f"{student.name}'s record of its kernel launches cannot be read: {problem}")
    programs = sum(math.prod(launch["grid"]) for launch in recipe["launches"])
    if programs <= LARGE_PROGRAMS:
        return n
    return max(LARGE_LOW, (n * LARGE_PROGRAMS // programs) | 1)


def traffic_sizes(rng) -> tuple[int, ...]:
    """The sizes the traffic check counts at, drawn per submission (``rng`` from
    :func:`brrr.checks.core.size_drawer`, seeded in the grader process): two odd ones, whose last
    block is partial, and a multiple of 1,024, which a block of up to 1,024 divides."""
    return (
        core.unaligned(rng, 1_025, 9_999),
        core.unaligned(rng, 10_001, 49_999),
        1_024 * rng.randint(49, 98),
    )


def prepare() -> None:
    """Import what the checks use now, in the grader process, before any student code runs."""
    import triton.language  # noqa: F401

    from brrr import ceilings, timing, traffic  # noqa: F401
    from brrr.checks import kernels, timed  # noqa: F401


def not_applicable(check: str, device_class: str) -> str:
    if check == "traffic":
        return (
            "GPU: traffic is counted only in the Triton interpreter (on a CPU). Here the kernel is "
            "compiled, so fusion is graded by time instead: see the bandwidth and speedup checks."
        )
    return (
        f"CPU: the {check} check runs on a GPU only. Here Triton runs in its interpreter, one "
        "program "
        "at a time in Python, so its time says nothing about the kernel; the traffic check grades "
        "what fusion changes instead."
    )


# ---------------------------------------------------------------- correct


def grade_correct(student) -> str:
    """``fused_chain(x, y, out)``: its kernels, run by the grader, match :func:`chain` on fresh
    inputs."""
    rng, _ = core.size_drawer()
    every = tuple(CORRECTNESS_SIZES) + drawn_correctness_sizes(rng)
    every += (drawn_large_size(student, rng),)
    result = core.check_kernels(student, SPEC, every, bounds_sizes=BOUNDS_SIZES)
    sizes = ", ".join(f"{n:,}" for n in every)
    return (
        f"{student.name}'s kernels, run by the grader, match chain() at n = {sizes} (float32, rtol "
        f"{result['rtol']:g}, atol {result['atol']:g}) with NaN-filled outputs; "
        f"{result['bounds']}; seed {result['seed']}"
    )


# ---------------------------------------------------------------- traffic (CPU)


def traffic_failure(name: str, traffic: dict) -> str | None:
    """Why ``traffic`` (a :func:`brrr.checks.core.count_traffic` count) is not one fused pass, or
    None.

    This is the traffic rule alone: :func:`grade_traffic` applies it only to
    kernels whose values are right.
    """
    n, size = traffic["n"], traffic["element_size"]
    need = n * size
    loaded, stored = traffic["loaded"], traffic["stored"]
    kernels = traffic["kernels"]
    ok = (
        loaded.get("x", 0) == need
        and loaded.get("y", 0) == need
        and stored.get("out", 0) == need
        and sum(loaded.values()) == 2 * need
        and sum(stored.values()) == need
    )
    if ok:
        return None
    table = core.text_table(_traffic_rows(loaded, stored, need))
    hints = _traffic_hints(name, loaded, stored, need, kernels)
    return (
        f"{name} moved the wrong number of bytes for n = {n:,} float32 elements, counted in the "
        f"Triton interpreter. A fused kernel loads x and y once each ({need:,} B each, 1.00 per "
        f"element) and stores out once ({need:,} B), and moves nothing else.\n{table}\n"
        + "\n".join(hints)
    ).rstrip()


def _traffic_rows(loaded: dict, stored: dict, need: int) -> list[tuple]:
    """The table of :func:`traffic_failure`: bytes per tensor, and per element of the output."""
    rows = [("tensor", "loaded", "stored")]
    for tensor in dict.fromkeys(["x", "y", "out", *loaded, *stored]):
        if tensor not in ("x", "y", "out") and not (loaded.get(tensor) or stored.get(tensor)):
            continue
        rows.append(
            (
                tensor,
                f"{loaded.get(tensor, 0):,} B = {loaded.get(tensor, 0) / need:.2f} per element",
                f"{stored.get(tensor, 0):,} B = {stored.get(tensor, 0) / need:.2f} per element",
            )
        )
    return rows


def _traffic_hints(name: str, loaded: dict, stored: dict, need: int, kernels: list) -> list[str]:
    """What to change, one sentence for each way the traffic is not one fused pass."""
    hints = []
    if stored.get("out", 0) == 0:
        hints.append(
            f"No kernel of {name} stored anything into out: the result must be computed and stored "
            "by your own @triton.jit kernel."
        )
    elif stored.get("out", 0) < need:
        hints.append(
            f"Your kernels stored {stored['out'] / need:.2f} of out per element: part of it is "
            "never written. Launch enough programs to cover all n elements (triton.cdiv(n, BLOCK))."
        )
    unread = [tensor for tensor in ("x", "y") if not loaded.get(tensor)]
    if unread:
        hints.append(
            f"No kernel of {name} loaded {' or '.join(unread)}: the result must be computed from x "
            "and y inside your kernel, not copied from a buffer filled outside it."
        )
    if len(kernels) > 1:
        hints.append(
            f"{name} launched {len(kernels)} kernels ({', '.join(kernels)}): every intermediate "
            "result makes a round trip through global memory (the extra rows). Do the whole chain "
            "in one kernel and keep intermediates in registers."
        )
    for tensor in ("x", "y"):
        times = loaded.get(tensor, 0) / need
        if len(kernels) == 1 and times > 1:
            hints.append(
                f"Your kernel loads {tensor} {times:.2f} times per element: load it once and reuse "
                "the value."
            )
    if loaded.get("out", 0):
        hints.append(
            "Your kernel reads out (an atomic counts as a read and a write); it only needs to "
            "write it."
        )
    return hints


def grade_traffic(student) -> str:
    """CPU: the kernels' values must be right, and their global-memory traffic, counted in the
    interpreter, exactly one pass (:func:`traffic_failure`)."""
    from brrr import traffic as traffic_counter

    traffic_counter.check_supported()  # if not, a grader error: not the student's fault
    sizes = traffic_sizes(core.size_drawer()[0])
    result = core.check_kernels(student, SPEC, sizes, count_traffic_at=sizes)
    for traffic in result["traffics"]:
        failure = traffic_failure(student.name, traffic)
        if failure:
            raise core.fail(failure)
    size = result["traffics"][0]["element_size"]
    counted = "; ".join(
        f"n = {t['n']:,}: {t['loaded']['x'] + t['loaded']['y']:,} B loaded, {t['stored']['out']:,} "
        f"B stored, {sum(t['programs'])} programs"
        for t in result["traffics"]
    )
    return (
        f"{student.name}'s kernel moved {FUSED_ELEMENTS_MOVED * size} B per element at sizes drawn "
        f"for this submission ({counted}), against {EAGER_ELEMENTS_MOVED * size} B for the eager "
        f"chain ({EAGER_KERNELS} kernels); {len(result['traffics'][0]['kernels'])} launch; seed "
        f"{result['seed']}"
    )


# ---------------------------------------------------------------- bandwidth and speedup (GPU)


def _timed_check(student, check: str) -> str:
    from brrr.checks import timed

    n = timed.timed_size(timed_n())  # drawn per submission under the published size
    case = timed.TimedCase(
        n,
        f"n = {n:,} float32 elements",
        moved=FUSED_ELEMENTS_MOVED * n * 4,
        copy_n=n,
        baseline=chain,
        baseline_name="the eager chain",
    )
    return timed.check(student, LAB, check, SPEC, case, bandwidth=check == "bandwidth")


def grade_bandwidth(student) -> str:
    """GPU: the fused kernel must reach at least 80% of the copy bandwidth measured in the same
    run."""
    return _timed_check(student, "bandwidth")


def grade_speedup(student) -> str:
    """GPU: the fused kernel must be at least 2x faster than the eager chain, measured in the same
    run."""
    return _timed_check(student, "speedup")


GRADERS = core.Graders(
    LAB,
    {
        "correct": grade_correct,
        "traffic": grade_traffic,
        "bandwidth": grade_bandwidth,
        "speedup": grade_speedup,
    },
)
grade = GRADERS.grade  # the one way every lab's check is run (brrr.checks.core.Graders)
