"""Lab 2, "fuse it": the unfused chain students fuse, and the checks that grade their kernel.

The task: ``chain(x, y)`` below runs five pointwise ops, five kernels in eager
PyTorch, each reading its inputs from and writing its output to global memory.
Students write one Triton kernel that computes the same thing in one pass, and a
wrapper ``fused_chain(x, y, out)`` that launches it and writes into ``out``.

Traffic (float32, n elements)::

    eager                                    reads   writes
    s = sigmoid(x)                           x       s
    h = x * s                                x, s    h
    h = h * y                                h, y    h
    h = h * 0.5                              h       h
    out = h.clamp(-4, 4)                     h       out
                                             7n      5n     -> 12n elements = 48 B per element
    fused                                    x, y    out    ->  3n elements = 12 B per element

Grading happens in the grader process (:mod:`brrr.grading.server`), thresholds
from :mod:`brrr.checks.thresholds`. The student's wrapper is only asked which
kernels it launches; the grader checks their source (Triton only), compiles them
itself and runs them on its own tensors (:mod:`brrr.checks.kernels`):

- ``correct`` (any device): fresh inputs at odd sizes, NaN-filled output, at
  least one Triton kernel, every load and store in bounds (in the interpreter:
  on a CPU at every run, on a GPU in an extra interpreted run at small sizes).
- ``traffic`` (CPU): counted in the interpreter, exactly 4n bytes loaded from each
  of x and y, 4n bytes stored to out, nothing else (atomics included).
- ``bandwidth`` and ``speedup`` (GPU): at least 80% of the copy bandwidth and at
  least 2x the eager chain, timed by the grader on rotated inputs in the same
  run; every timed output is checked afterwards, and a time below what the bytes
  need at the measured copy bandwidth is flagged as impossible.
"""

from __future__ import annotations

import torch

from brrr.device import DEVICE, ON_GPU, far_above_cache, memory_bounded, per_device
from brrr.checks import core

LAB = "02-fuse-it"
CHECKS = {"cpu": ("correct", "traffic"), "gpu": ("correct", "bandwidth", "speedup")}
ALL_CHECKS = ("correct", "traffic", "bandwidth", "speedup")
HIDDEN_MODULES: tuple[str, ...] = ()  # the reference is given: the grader runs only the student's kernels
WIRE_TYPES: dict[str, type] = {}


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """SiLU(x) gated by y, halved and clamped: five pointwise ops, five kernels in eager mode."""
    s = torch.sigmoid(x)  # read x, write s
    h = x * s  # read x and s, write h   (this and the line above are SiLU)
    h = h * y  # read h and y, write h   (the gate)
    h = h * 0.5  # read h, write h
    return h.clamp(-4.0, 4.0)  # read h, write out


EAGER_KERNELS = 5
EAGER_ELEMENTS_MOVED = 12  # per output element, see the module docstring
FUSED_ELEMENTS_MOVED = 3  # read x and y, write out

# Values where careless formulas break: sigmoid via exp(x) / (1 + exp(x)) is inf/inf = NaN above 88.7.
EDGE_VALUES = (100.0, -100.0, 88.8, -88.8, 30.0, -30.0, 0.0, -0.0)


def make_inputs(n: int, generator: torch.Generator, *, edges: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """x and y, n float32 elements each, on the device: spread N(0, 3²), with edge values planted in x.

    ``generator`` (on the CPU) seeds a generator on the device, so that even a
    GPU-sized input is drawn where it lives, quickly.
    """
    seed = int(torch.randint(2**62, (1,), generator=generator))
    on_device = torch.Generator(device=DEVICE)
    on_device.manual_seed(seed)
    x = torch.randn(n, generator=on_device, device=DEVICE) * 3
    y = torch.randn(n, generator=on_device, device=DEVICE) * 3
    if edges and n >= 4 * len(EDGE_VALUES):
        positions = torch.randint(0, n, (len(EDGE_VALUES),), generator=on_device, device=DEVICE)
        x[positions] = torch.tensor(EDGE_VALUES, device=DEVICE)
    return x, y


SPEC = core.Spec(name="chain", reference=chain, make_inputs=make_inputs, input_names=("x", "y"), out_name="out")

# Sizes that are a multiple of no power-of-two block, plus one that is.
CORRECTNESS_SIZES = per_device(cpu=(1000, 1, 17, 4097, 65_536, 100_003),
                               gpu=(1000, 1, 17, 4097, 65_536, 1_000_003, 2**24 + 5))
TRAFFIC_N = 100_003
BOUNDS_SIZES = (1000, 4097)  # GPU: also run the kernel in the interpreter at these sizes to check bounds


# Bytes per element of the timed checks' working set: two rotated input sets of x, y, the expected
# result and out (8 float32s), the copy measured on the same n (2), and the eager chain's
# intermediates while it runs (up to 3): 13 float32s, rounded up to 64 B.
TIMED_BYTES_PER_ELEMENT = 64


def timed_n(total_bytes: int | None = None) -> int:
    """Elements for the timed GPU checks: far above the L2, within half the GPU's memory.

    An 80 GB H100 times 2**28 elements (1 GiB per tensor); a 15 GB T4 fewer (about
    120 million, 0.5 GiB per tensor, still over a hundred times its 4 MiB L2).
    """
    return memory_bounded(far_above_cache(4), TIMED_BYTES_PER_ELEMENT, total_bytes=total_bytes)


def inputs_for_demo(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs for trying things out in the notebook (the grader draws its own)."""
    generator, _ = core.fresh_generator(seed)
    return make_inputs(n, generator, edges=False)


def prepare() -> None:
    """Import what the checks use now, in the grader process, before any student code runs."""
    import triton.language  # noqa: F401

    from brrr import ceilings, timing, traffic  # noqa: F401
    from brrr.checks import kernels, timed  # noqa: F401


def not_applicable(check: str, device_class: str) -> str:
    if check == "traffic":
        return ("GPU: traffic is counted only in the Triton interpreter (on a CPU). Here the kernel is "
                "compiled, so fusion is graded by time instead: see the bandwidth and speedup checks.")
    return (f"CPU: the {check} check runs on a GPU only. Here Triton runs in its interpreter, one program "
            "at a time in Python, so its time says nothing about the kernel; the traffic check grades "
            "what fusion changes instead.")


# ---------------------------------------------------------------- correct


def grade_correct(student) -> str:
    """``fused_chain(x, y, out)``: its kernels, run by the grader, match :func:`chain` on fresh inputs."""
    result = core.check_kernels(student, SPEC, CORRECTNESS_SIZES, bounds_sizes=BOUNDS_SIZES)
    sizes = ", ".join(f"{n:,}" for n in CORRECTNESS_SIZES)
    return (f"{student.name}'s kernels, run by the grader, match chain() at n = {sizes} (float32, rtol "
            f"{result['rtol']:g}, atol {result['atol']:g}) with NaN-filled outputs; {result['bounds']}; "
            f"seed {result['seed']}")


# ---------------------------------------------------------------- traffic (CPU)


def traffic_failure(name: str, traffic: dict) -> str | None:
    """Why ``traffic`` (a :func:`brrr.checks.core.count_traffic` count) is not one fused pass, or None.

    This is the traffic rule alone: :func:`grade_traffic` applies it only to
    kernels whose values are right.
    """
    n, size = traffic["n"], traffic["element_size"]
    need = n * size
    loaded, stored = traffic["loaded"], traffic["stored"]
    kernels = traffic["kernels"]
    ok = (loaded.get("x", 0) == need and loaded.get("y", 0) == need and stored.get("out", 0) == need
          and sum(loaded.values()) == 2 * need and sum(stored.values()) == need)
    if ok:
        return None
    rows = [("tensor", "loaded", "stored")]
    for tensor in dict.fromkeys(["x", "y", "out", *loaded, *stored]):
        if tensor not in ("x", "y", "out") and not (loaded.get(tensor) or stored.get(tensor)):
            continue
        rows.append((tensor, f"{loaded.get(tensor, 0):,} B = {loaded.get(tensor, 0) / need:.2f} per element",
                     f"{stored.get(tensor, 0):,} B = {stored.get(tensor, 0) / need:.2f} per element"))
    table = core.text_table(rows)
    hints = []
    if stored.get("out", 0) == 0:
        hints.append(f"No kernel of {name} stored anything into out: the result must be computed and stored by "
                     "your own @triton.jit kernel.")
    elif stored.get("out", 0) < need:
        hints.append(f"Your kernels stored {stored['out'] / need:.2f} of out per element: part of it is never "
                     "written. Launch enough programs to cover all n elements (triton.cdiv(n, BLOCK)).")
    unread = [tensor for tensor in ("x", "y") if not loaded.get(tensor)]
    if unread:
        hints.append(f"No kernel of {name} loaded {' or '.join(unread)}: the result must be computed from x and "
                     "y inside your kernel, not copied from a buffer filled outside it.")
    if len(kernels) > 1:
        hints.append(f"{name} launched {len(kernels)} kernels ({', '.join(kernels)}): every intermediate "
                     "result makes a round trip through global memory (the extra rows). Do the whole chain in "
                     "one kernel and keep intermediates in registers.")
    for tensor in ("x", "y"):
        times = loaded.get(tensor, 0) / need
        if len(kernels) == 1 and times > 1:
            hints.append(f"Your kernel loads {tensor} {times:.2f} times per element: load it once and reuse "
                         "the value.")
    if loaded.get("out", 0):
        hints.append("Your kernel reads out (an atomic counts as a read and a write); it only needs to write it.")
    return (f"{name} moved the wrong number of bytes for n = {n:,} float32 elements, counted in the Triton "
            f"interpreter. A fused kernel loads x and y once each ({need:,} B each, 1.00 per element) and stores "
            f"out once ({need:,} B), and moves nothing else.\n{table}\n" + "\n".join(hints)).rstrip()


def measure_traffic(student) -> dict:
    """CPU: the kernels' global-memory traffic at :data:`TRAFFIC_N`, counted in the interpreter, whatever
    values they compute (for :func:`traffic_failure`)."""
    return core.count_traffic(student, SPEC, TRAFFIC_N)


def grade_traffic(student) -> str:
    """CPU: the kernels' values must be right, and their global-memory traffic, counted in the
    interpreter, exactly one pass (:func:`traffic_failure`)."""
    from brrr import traffic as traffic_counter

    traffic_counter.check_supported()  # if not, a grader error: not the student's fault
    result = core.check_kernels(student, SPEC, (TRAFFIC_N,), count_traffic_at=TRAFFIC_N)
    traffic = result["traffic"]
    failure = traffic_failure(student.name, traffic)
    if failure:
        raise core.fail(failure)
    n, size = traffic["n"], traffic["element_size"]
    return (f"{student.name}'s kernel loaded {traffic['loaded']['x'] + traffic['loaded']['y']:,} B and stored "
            f"{traffic['stored']['out']:,} B for n = {n:,}: {FUSED_ELEMENTS_MOVED * size} B per element, "
            f"against {EAGER_ELEMENTS_MOVED * size} B for the eager chain ({EAGER_KERNELS} kernels); "
            f"{len(traffic['kernels'])} launch, {sum(traffic['programs'])} programs")


# ---------------------------------------------------------------- bandwidth and speedup (GPU)


def _timed_check(student, check: str) -> str:
    from brrr.checks import timed

    n = timed_n()
    case = timed.TimedCase(n, f"n = {n:,} float32 elements", moved=FUSED_ELEMENTS_MOVED * n * 4, copy_n=n,
                           baseline=chain, baseline_name="the eager chain")
    return timed.check(student, LAB, check, SPEC, case, bandwidth=check == "bandwidth")


def grade_bandwidth(student) -> str:
    """GPU: the fused kernel must reach at least 80% of the copy bandwidth measured in the same run."""
    return _timed_check(student, "bandwidth")


def grade_speedup(student) -> str:
    """GPU: the fused kernel must be at least 2x faster than the eager chain, measured in the same run."""
    return _timed_check(student, "speedup")


GRADERS = {"correct": grade_correct, "traffic": grade_traffic, "bandwidth": grade_bandwidth,
           "speedup": grade_speedup}


def grade(check: str, student) -> str:
    """Run ``check`` against the student's wrapper; a summary, or AssertionError with the reason."""
    return GRADERS[check](student)


# ---------------------------------------------------------------- what fusion bought (for the notebook, not graded)


def compare_with_eager(fused_chain) -> dict:
    """Bytes per element and, on a GPU, time: the eager chain beside the fused kernel. Not graded.

    GPU: times the eager chain, the fused kernel and a copy on :func:`timed_n`
    elements, in this run, and returns seconds and achieved bandwidths.
    CPU: counts the fused kernel's traffic in the interpreter at :data:`TRAFFIC_N`
    elements and sets it beside the eager chain's from the model in this module's
    docstring (the interpreter cannot be timed, and eager torch ops are not Triton
    kernels that it could count).
    """
    from brrr import traffic

    if ON_GPU:
        from brrr import ceilings
        from brrr.timing import bench

        n = timed_n()
        x, y = inputs_for_demo(n)
        out = torch.full_like(x, float("nan"))
        fused = bench(lambda: fused_chain(x, y, out), budget_s=0.3)
        eager = bench(lambda: chain(x, y), budget_s=0.3)
        copy = ceilings.measure_copy_bandwidth(n)
        return {"device": "gpu", "n": n, "copy_bandwidth": copy,
                "eager_s": eager.median_s, "fused_s": fused.median_s,
                "roofline_s": FUSED_ELEMENTS_MOVED * 4 * n / copy,
                "eager_bandwidth": EAGER_ELEMENTS_MOVED * 4 * n / eager.median_s,
                "fused_bandwidth": FUSED_ELEMENTS_MOVED * 4 * n / fused.median_s}
    n = TRAFFIC_N
    x, y = inputs_for_demo(n)
    out = torch.empty_like(x)
    with traffic.count({"x": x, "y": y, "out": out}) as seen:
        fused_chain(x, y, out)
    return {"device": "cpu", "n": n, "eager_bytes_per_element": EAGER_ELEMENTS_MOVED * 4,
            "fused_bytes_per_element": (seen.loaded_bytes + seen.stored_bytes) / n,
            "minimum_bytes_per_element": FUSED_ELEMENTS_MOVED * 4, "launches": len(seen.launches)}


def plot_comparison(result: dict, *, stamp: str = ""):
    """Bars for :func:`compare_with_eager`: seconds per call on a GPU, bytes per element on a CPU."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=(6, 3.5))
    if result["device"] == "gpu":
        labels = ["eager chain", "your fused kernel", "12 B/element at\ncopy bandwidth"]
        values = [result["eager_s"] * 1e3, result["fused_s"] * 1e3, result["roofline_s"] * 1e3]
        ax.set_ylabel(f"ms per call, n = {result['n']:,}")
        ax.set_title("Time: eager against fused (measured)")
    else:
        labels = ["eager chain\n(model: 5 kernels)", "your fused kernel\n(counted)", "one read of x and y,\none write of out"]
        values = [result["eager_bytes_per_element"], result["fused_bytes_per_element"],
                  result["minimum_bytes_per_element"]]
        ax.set_ylabel("bytes moved per element")
        ax.set_title("Global-memory traffic: eager against fused")
    bars = ax.bar(labels, values, color=["#999999", "#1f77b4", "#2ca02c"])
    ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    if stamp:
        ax.figure.text(0.01, 0.005, stamp, fontsize=6, color="gray", ha="left", va="bottom")
        ax.figure.subplots_adjust(bottom=0.22)
    return ax
