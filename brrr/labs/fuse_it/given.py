"""Lab 2's given material: the chain to fuse, its inputs, and the comparison with eager to plot.

The student's process imports this module (through :mod:`brrr.labs.fuse_it`). The checks
(:mod:`brrr.labs.fuse_it.checks`) import from it, never the other way round.
"""

from __future__ import annotations

import torch

from brrr import reference
from brrr.checks import core
from brrr.device import DEVICE, ON_GPU, far_above_cache, memory_bounded

WIRE_TYPES: dict[str, type] = {}


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """SiLU(x) gated by y, halved and clamped: five pointwise ops, five kernels in eager mode."""
    s = torch.sigmoid(x)  # read x, write s
    h = x * s  # read x and s, write h   (this and the line above are SiLU)
    h = h * y  # read h and y, write h   (the gate)
    h = h * 0.5  # read h, write h
    return h.clamp(-4.0, 4.0)  # read h, write out


EAGER_ELEMENTS_MOVED = 12  # per output element, see the module docstring
FUSED_ELEMENTS_MOVED = 3  # read x and y, write out

# Values where careless formulas break: sigmoid via exp(x) / (1 + exp(x)) is inf/inf = NaN above
# 88.7.
EDGE_VALUES = (100.0, -100.0, 88.8, -88.8, 30.0, -30.0, 0.0, -0.0)


def make_inputs(
    n: int, generator: torch.Generator, *, edges: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """x and y, n float32 elements each, on the device: spread N(0, 3²), with edge values planted in
    x.

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


TRAFFIC_N = 100_003


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


# ---------------------------------------------------------------- what fusion bought (for the
# notebook, not graded)


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
        result = {
            "device": "gpu",
            "n": n,
            "copy_bandwidth": copy,
            "eager_s": eager.median_s,
            "fused_s": fused.median_s,
            "roofline_s": FUSED_ELEMENTS_MOVED * 4 * n / copy,
            "eager_bandwidth": EAGER_ELEMENTS_MOVED * 4 * n / eager.median_s,
            "fused_bandwidth": FUSED_ELEMENTS_MOVED * 4 * n / fused.median_s,
        }
        reference.record("lab-02-fuse-it", result)  # under make gpu-check only
        return result
    n = TRAFFIC_N
    x, y = inputs_for_demo(n)
    out = torch.empty_like(x)
    with traffic.count({"x": x, "y": y, "out": out}) as seen:
        fused_chain(x, y, out)
    return {
        "device": "cpu",
        "n": n,
        "eager_bytes_per_element": EAGER_ELEMENTS_MOVED * 4,
        "fused_bytes_per_element": (seen.loaded_bytes + seen.stored_bytes) / n,
        "minimum_bytes_per_element": FUSED_ELEMENTS_MOVED * 4,
        "launches": len(seen.launches),
    }


def plot_comparison(result: dict, *, stamp: str = ""):
    """Bars for :func:`compare_with_eager`: seconds per call on a GPU, bytes per element on a
    CPU."""
    import matplotlib.pyplot as plt

    from brrr.plots import add_stamp

    _, ax = plt.subplots(figsize=(6, 3.5))
    if result["device"] == "gpu":
        labels = ["eager chain", "your fused kernel", "12 B/element at\ncopy bandwidth"]
        values = [result["eager_s"] * 1e3, result["fused_s"] * 1e3, result["roofline_s"] * 1e3]
        ax.set_ylabel(f"ms per call, n = {result['n']:,}")
        ax.set_title("Time: eager against fused (measured)")
    else:
        labels = [
            "eager chain\n(model: 5 kernels)",
            "your fused kernel\n(counted)",
            "one read of x and y,\none write of out",
        ]
        values = [
            result["eager_bytes_per_element"],
            result["fused_bytes_per_element"],
            result["minimum_bytes_per_element"],
        ]
        ax.set_ylabel("bytes moved per element")
        ax.set_title("Global-memory traffic: eager against fused")
    bars = ax.bar(labels, values, color=["#999999", "#1f77b4", "#2ca02c"])
    ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    add_stamp(ax, stamp, bottom=0.22)
    return ax
