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

Grading, thresholds from :mod:`brrr.thresholds`:

- ``correct`` (any device): fresh inputs at odd sizes, NaN-filled output, in-place
  input changes, no calls to :func:`chain`, at least one Triton kernel launched,
  every load and store in bounds (in the interpreter: on a CPU at every call, on
  a GPU in an extra interpreted run at small sizes).
- ``traffic`` (CPU): counted in the interpreter, exactly 4n bytes loaded from each
  of x and y, 4n bytes stored to out, nothing else.
- ``bandwidth`` and ``speedup`` (GPU): at least 80% of the copy bandwidth and at
  least 2x the eager chain, measured in the same run on rotated inputs.
"""

from __future__ import annotations

import torch

from brrr import ceilings, grading, isolation, thresholds, units
from brrr.device import DEVICE, ON_GPU, far_above_cache, per_device
from brrr.timing import bench

LAB = "02-fuse-it"


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


SPEC = grading.Spec(name="chain", reference=chain, make_inputs=make_inputs, input_names=("x", "y"),
                    out_name="out", forbidden=(chain,))

# Sizes that are a multiple of no power-of-two block, plus one that is.
CORRECTNESS_SIZES = per_device(cpu=(1000, 1, 17, 4097, 65_536, 100_003),
                               gpu=(1000, 1, 17, 4097, 65_536, 1_000_003, 2**24 + 5))
TRAFFIC_N = 100_003
BOUNDS_SIZES = (1000, 4097)  # GPU: also run the kernel in the interpreter at these sizes to check bounds


def inputs_for_demo(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs for trying things out in the notebook (the grader draws its own)."""
    generator, _ = grading.fresh_generator(seed)
    return make_inputs(n, generator, edges=False)


# ---------------------------------------------------------------- correct


@grading.graded(LAB, "correct")
def _grade_correct(fused_chain) -> str:
    result = grading.check_correct(fused_chain, SPEC, CORRECTNESS_SIZES)
    name = getattr(fused_chain, "__name__", "your function")
    if not result["launches"]:
        raise grading.fail(f"{name} computed the right values but launched no Triton kernel: this lab asks "
                           "for one @triton.jit kernel that does the whole chain.")
    bounds = "bounds checked in the interpreter on every call"
    if ON_GPU:  # compiled kernels read past a tensor's end unnoticed; the interpreter does notice
        failure, bounds = grading.bounds_in_interpreter(fused_chain, SPEC, BOUNDS_SIZES)
        if failure:
            raise grading.fail(failure)
    sizes = ", ".join(f"{n:,}" for n in CORRECTNESS_SIZES)
    return (f"{name} matches chain() at n = {sizes} (float32, rtol {result['rtol']:g}, atol {result['atol']:g}), "
            f"with NaN-filled outputs and inputs changed in place; {bounds}; seed {result['seed']}")


def grade_correct(fused_chain) -> str:
    """Check ``fused_chain(x, y, out)`` against :func:`chain` on fresh inputs (any device)."""
    return _grade_correct(fused_chain)


# ---------------------------------------------------------------- traffic (CPU)


def _traffic_failure(name: str, traffic: dict) -> str | None:
    n, size = traffic["n"], traffic["element_size"]
    need = n * size
    loaded, stored = traffic["loaded"], traffic["stored"]
    kernels = traffic["kernels"]
    ok = (loaded.get("x", 0) == need and loaded.get("y", 0) == need and stored.get("out", 0) == need
          and sum(loaded.values()) == 2 * need and sum(stored.values()) == need)
    if ok:
        return None
    rows = [("tensor", "loaded", "stored")]
    for tensor in ("x", "y", "out", "other"):
        if tensor == "other" and not (loaded.get("other") or stored.get("other")):
            continue
        rows.append((tensor, f"{loaded.get(tensor, 0):,} B = {loaded.get(tensor, 0) / need:.2f} per element",
                     f"{stored.get(tensor, 0):,} B = {stored.get(tensor, 0) / need:.2f} per element"))
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    table = "\n".join("    " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows)
    hints = []
    if stored.get("out", 0) == 0:
        hints.append(f"No Triton kernel stored anything into out: {name} must compute the result in its own "
                     "@triton.jit kernel (torch operations are not counted, and do not fuse).")
    if len(kernels) > 1:
        hints.append(f"{name} launched {len(kernels)} kernels ({', '.join(kernels)}): every intermediate "
                     "result makes a round trip through global memory (the 'other' row). Do the whole chain in "
                     "one kernel and keep intermediates in registers.")
    for tensor in ("x", "y"):
        times = loaded.get(tensor, 0) / need
        if len(kernels) == 1 and times > 1:
            hints.append(f"Your kernel loads {tensor} {times:.2f} times per element: load it once and reuse "
                         "the value.")
    if loaded.get("out", 0):
        hints.append("Your kernel reads out; it only needs to write it.")
    return (f"{name} moved the wrong number of bytes for n = {n:,} float32 elements, counted in the Triton "
            f"interpreter. A fused kernel loads x and y once each ({need:,} B each, 1.00 per element) and stores "
            f"out once ({need:,} B), and moves nothing else.\n{table}\n" + "\n".join(hints)).rstrip()


@grading.graded(LAB, "traffic")
def _grade_traffic(fused_chain) -> str:
    from brrr import traffic as traffic_counter

    traffic_counter.check_supported()  # if not, a grader error: not the student's fault
    name = getattr(fused_chain, "__name__", "your function")
    result = grading.check_correct(fused_chain, SPEC, (TRAFFIC_N,), count_traffic_at=TRAFFIC_N)
    traffic = result["traffic"]
    if traffic is None:
        raise grading.fail(f"no traffic was counted for {name}: did it launch a Triton kernel?")
    failure = _traffic_failure(name, traffic)
    if failure:
        raise grading.fail(failure)
    n, size = traffic["n"], traffic["element_size"]
    return (f"{name} loaded {traffic['loaded']['x'] + traffic['loaded']['y']:,} B and stored "
            f"{traffic['stored']['out']:,} B for n = {n:,}: {FUSED_ELEMENTS_MOVED * size} B per element, "
            f"against {EAGER_ELEMENTS_MOVED * size} B for the eager chain ({EAGER_KERNELS} kernels); "
            f"{len(traffic['kernels'])} launch, {sum(traffic['programs'])} programs")


def grade_traffic(fused_chain) -> str:
    """CPU: count the kernel's global-memory traffic in the interpreter; it must be exactly one pass."""
    if ON_GPU:
        message = ("GPU: traffic is counted only in the Triton interpreter (on a CPU). Here the kernel is "
                   "compiled, so fusion is graded by time instead: see the bandwidth and speedup checks.")
        print(message)
        return grading.Printed(message)
    return _grade_traffic(fused_chain)


# ---------------------------------------------------------------- bandwidth and speedup (GPU)


def _timed_sets(n: int, count: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    generator, _ = grading.fresh_generator()
    sets = []
    for _ in range(count):
        x, y = make_inputs(n, generator)
        sets.append((x, y, torch.full_like(x, float("nan"))))
    return sets


def _still_computes(name: str, fused_chain, sets) -> None:
    """After timing: new values in every input set, NaN in its output, one more call, and a check.

    A kernel that skipped work once it was being timed would leave stale or NaN outputs here.
    """
    rtol, atol = grading.tolerance(torch.float32)
    generator, seed = grading.fresh_generator()
    for number, (x, y, out) in enumerate(sets):
        new_x, new_y = make_inputs(x.numel(), generator)
        x.copy_(new_x)
        y.copy_(new_y)
        out.fill_(float("nan"))
        fused_chain(x, y, out)
        report = grading.diff_report("out", out, chain(x, y), rtol=rtol, atol=atol,
                                     context=f" on input set {number + 1} of {len(sets)} after timing (seed {seed})")
        if report:
            raise grading.fail(f"{name} stopped computing correctly once it had been timed.\n{report}")


def _measure(fused_chain, check: str) -> str:
    name = getattr(fused_chain, "__name__", "your function")
    threshold = thresholds.threshold(LAB, check)
    n = far_above_cache(4)
    sets = _timed_sets(n, count=2)
    moved = FUSED_ELEMENTS_MOVED * n * 4

    def attempt() -> grading.Attempt:
        rotation = grading.Rotation(sets)
        fused = bench(lambda: fused_chain(*rotation.next()), budget_s=0.3)
        if check == "bandwidth":
            copy = ceilings.measure_copy_bandwidth()
            achieved = fused.rate(moved)
            fraction = achieved / copy
            return grading.Attempt(fraction, fraction >= threshold.value,
                                   f"{units.fraction_of(achieved, copy, 'B/s', 'copy bandwidth measured now')}")
        eager_rotation = grading.Rotation(sets)
        eager = bench(lambda: chain(*eager_rotation.next()[:2]), budget_s=0.3)
        speedup = eager.median_s / fused.median_s
        return grading.Attempt(speedup, speedup >= threshold.value,
                               f"{speedup:.2f}x: fused {units.seconds(fused.median_s)}, eager chain "
                               f"{units.seconds(eager.median_s)}")

    best, history = grading.repeat_until_pass(attempt)
    _still_computes(name, fused_chain, sets)
    tried = "; ".join(f"attempt {i + 1}: {a.detail}" for i, a in enumerate(history))
    if not best.passed:
        needed = (f"at least {threshold.value:.0%} of the copy bandwidth" if check == "bandwidth"
                  else f"at least {threshold.value:g}x faster than the eager chain")
        raise grading.fail(f"{name} on n = {n:,} float32 elements ({moved / 1e9:.2f} GB moved per call): "
                           f"{tried}. Needed {needed} ({threshold.why}).")
    return f"{name} on n = {n:,}: {best.detail} (needed {threshold.describe()})"


def _timed_check(fused_chain, check: str) -> str:
    outcome = isolation.run(_measure, fused_chain, check)
    if not outcome.ok:
        raise grading.outcome_failure(getattr(fused_chain, "__name__", "your function"), outcome)
    return outcome.value


@grading.graded(LAB, "bandwidth")
def _grade_bandwidth(fused_chain) -> str:
    return _timed_check(fused_chain, "bandwidth")


@grading.graded(LAB, "speedup")
def _grade_speedup(fused_chain) -> str:
    return _timed_check(fused_chain, "speedup")


def _cpu_timing_note(check: str) -> str:
    message = (f"CPU: the {check} check runs on a GPU only. Here Triton runs in its interpreter, one program "
               "at a time in Python, so its time says nothing about the kernel; the traffic check grades "
               "what fusion changes instead.")
    print(message)
    return grading.Printed(message)


def grade_bandwidth(fused_chain) -> str:
    """GPU: the fused kernel must reach at least 80% of the copy bandwidth measured in the same run."""
    return _grade_bandwidth(fused_chain) if ON_GPU else _cpu_timing_note("bandwidth")


def grade_speedup(fused_chain) -> str:
    """GPU: the fused kernel must be at least 2x faster than the eager chain, measured in the same run."""
    return _grade_speedup(fused_chain) if ON_GPU else _cpu_timing_note("speedup")


# ---------------------------------------------------------------- what fusion bought (for the notebook, not graded)


def compare_with_eager(fused_chain) -> dict:
    """Bytes per element and, on a GPU, time: the eager chain beside the fused kernel. Not graded.

    GPU: times the eager chain, the fused kernel and a copy on ``far_above_cache``
    elements, in this run, and returns seconds and achieved bandwidths.
    CPU: counts the fused kernel's traffic in the interpreter at :data:`TRAFFIC_N`
    elements and sets it beside the eager chain's from the model in this module's
    docstring (the interpreter cannot be timed, and eager torch ops are not Triton
    kernels that it could count).
    """
    from brrr import traffic

    if ON_GPU:
        n = far_above_cache(4)
        (x, y, out), = _timed_sets(n, count=1)
        fused = bench(lambda: fused_chain(x, y, out), budget_s=0.3)
        eager = bench(lambda: chain(x, y), budget_s=0.3)
        copy = ceilings.measure_copy_bandwidth()
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
