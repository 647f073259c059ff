"""Lab 5's given material: the reference matmul, the tiling's traffic rule, inputs, and the sweep to
plot.

The student's process imports this module (through :mod:`brrr.labs.tile_it`). The checks
(:mod:`brrr.labs.tile_it.checks`) import from it, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from brrr import reference
from brrr.checks import core
from brrr.device import DEVICE, ON_GPU, half_precision_dtype

WIRE_TYPES: dict[str, type] = {}


# ---------------------------------------------------------------- shapes and the traffic rule


@dataclass(frozen=True)
class Shape:
    """One matmul: ``a`` is ``m × k``, ``b`` is ``k × n``, ``out`` is ``m × n``, all of ``dtype``.

    ``values``: ``"normal"`` draws N(0, 1) scaled by K^-1/4, so that every output
    is about N(0, 1) whatever K (float32 rounding, which grows with K, then stays
    well inside the tolerance even where an output is near 0); ``"unit"`` draws
    from [0, 1), so that the sums of a long K grow without cancelling (a float16
    accumulator then loses the low bits of every addition).
    """

    m: int
    n: int
    k: int
    dtype: str = "float32"
    values: str = "normal"

    def __str__(self) -> str:
        text = f"{self.m:,}×{self.k:,} @ {self.k:,}×{self.n:,} {self.dtype}"
        return text + (", values in [0, 1)" if self.values == "unit" else "")

    @property
    def element_size(self) -> int:
        return self.torch_dtype.itemsize

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


def minimum_bytes(shape: Shape) -> int:
    """``a`` and ``b`` read once, ``out`` written once: the traffic of one tile as large as the
    output."""
    return (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * shape.element_size


def intensity(shape: Shape, nbytes: float) -> float:
    """Arithmetic intensity, FLOP/B: ``2·M·N·K`` over ``nbytes``."""
    return shape.flops / nbytes


def asymptotic_intensity(block_m: int, block_n: int, element_size: int) -> float:
    """FLOP/B a ``block_m × block_n`` tiling tends to for large shapes: ``2 / (element size ·
    (1/block_m + 1/block_n))``, whatever the shape
    (:func:`brrr.counting.tiled_matmul_intensity_limit`)."""
    return 2 / (element_size * (1 / block_m + 1 / block_n))


PREDICTION_SHAPE = Shape(3000, 2048, 1024, "float16")
PREDICTION_TILINGS = ((32, 32), (128, 64))


# ---------------------------------------------------------------- the reference and the inputs


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` computed in float32 (no TF32) and returned in ``a``'s dtype: what the grader
    compares with."""
    from brrr.ceilings import tf32

    with tf32(False):
        return (a.float() @ b.float()).to(a.dtype)


def make_inputs(shape: Shape, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh ``a`` and ``b`` for ``shape`` on the device, contiguous (values: see
    :class:`Shape`)."""
    on_device = core.device_generator(generator)
    if shape.values == "unit":
        a = torch.rand(shape.m, shape.k, generator=on_device, device=DEVICE)
        b = torch.rand(shape.k, shape.n, generator=on_device, device=DEVICE)
    else:
        scale = shape.k**-0.25  # outputs about N(0, 1)
        a = torch.randn(shape.m, shape.k, generator=on_device, device=DEVICE) * scale
        b = torch.randn(shape.k, shape.n, generator=on_device, device=DEVICE) * scale
    return a.to(shape.torch_dtype), b.to(shape.torch_dtype)


# bfloat16 where the GPU has it; Colab's T4 (sm_75) has float16 tensor cores only, and tl.dot
# refuses bf16 there
TIMED_DTYPE = str(half_precision_dtype()).removeprefix("torch.")
TRAFFIC_SHAPE = Shape(256, 256, 256)


def inputs_for_demo(m: int, n: int, k: int, dtype: str = "float32", seed: int = 0):
    """``a`` and ``b`` for trying things out in the notebook (the grader draws its own)."""
    generator, _ = core.fresh_generator(seed)
    return make_inputs(Shape(m, n, k, dtype), generator)


# ---------------------------------------------------------------- what tiling bought (for the
# notebook)

SWEEP_TILES = (
    32,
    64,
    128,
)  # square tiles counted in the notebook (16 takes seconds in the interpreter)
# The lab's traffic rule at TRAFFIC_SHAPE (256³ float32) for square tiles, by tile size: the
# notebook's line to compare the counts with. A table, not the rule itself: the rule is what the
# prediction asks for, and the grader keeps it (brrr.labs.tile_it.checks.tiled_bytes;
# tests/labs/test_grading_tile_it.py checks the table).
SWEEP_RULE_BYTES = {
    8: 17_039_360,
    16: 8_650_752,
    32: 4_456_448,
    64: 2_359_296,
    128: 1_310_720,
    256: 786_432,
}
GPU_SIZES = (1024, 2048, 4096, 8192)


def compare_tilings(matmul_fn, tile_for) -> dict:
    """Not graded. ``matmul_fn(a, b, out, tile)`` is the student's wrapper, ``tile_for(dtype)`` its
    tiling.

    CPU: the bytes ``matmul_fn`` moves at :data:`TRAFFIC_SHAPE`, counted in the
    interpreter for square tiles of :data:`SWEEP_TILES` (``tile_for(float32)`` with
    ``BLOCK_M`` and ``BLOCK_N`` replaced), beside the rule. GPU: TFLOP/s of
    ``matmul_fn`` and ``torch.mm`` in bfloat16 at :data:`GPU_SIZES`, with the
    matmul peak measured in this run.
    """
    from brrr import traffic

    if ON_GPU:
        from brrr import ceilings
        from brrr.timing import bench

        result = {
            "device": "gpu",
            "sizes": list(GPU_SIZES),
            "yours": [],
            "torch": [],
            "dtype": TIMED_DTYPE,
        }
        for n in GPU_SIZES:
            a, b = inputs_for_demo(n, n, n, TIMED_DTYPE)
            out = torch.empty(n, n, dtype=a.dtype, device=a.device)
            tile = tile_for(a.dtype)
            result["yours"].append(
                bench(lambda: matmul_fn(a, b, out, tile), budget_s=0.3).rate(2 * n**3)
            )
            result["torch"].append(
                bench(lambda: torch.mm(a, b, out=out), budget_s=0.3).rate(2 * n**3)
            )
        result["peak"] = ceilings.measure_matmul_peak(TIMED_DTYPE, GPU_SIZES[-1])
        reference.record("lab-05-tile-it", result)  # under make gpu-check only
        return result
    shape = TRAFFIC_SHAPE
    a, b = inputs_for_demo(shape.m, shape.n, shape.k)
    result = {
        "device": "cpu",
        "shape": shape,
        "tiles": [],
        "counted": [],
        "rule": [],
        "minimum": minimum_bytes(shape),
    }
    for size in SWEEP_TILES:
        out = torch.empty(shape.m, shape.n)
        with traffic.count({"a": a, "b": b, "out": out}) as seen:
            matmul_fn(a, b, out, tile_for(a.dtype) | {"BLOCK_M": size, "BLOCK_N": size})
        result["tiles"].append(size)
        result["counted"].append(seen.loaded_bytes + seen.stored_bytes)
        result["rule"].append(SWEEP_RULE_BYTES[size])
    return result


def plot_tilings(result: dict, *, stamp: str = ""):
    """CPU: arithmetic intensity against the tile size, by the rule and counted. GPU: TFLOP/s
    against n.

    Long: two figures (CPU and GPU), each drawn mark by mark.
    """
    import matplotlib.pyplot as plt

    from brrr.plots import add_stamp

    _, ax = plt.subplots(figsize=(6.5, 3.5))
    if result["device"] == "gpu":
        sizes = result["sizes"]
        ax.plot(sizes, [r / 1e12 for r in result["torch"]], "o-", color="#ff7f0e", label="torch.mm")
        ax.plot(
            sizes, [r / 1e12 for r in result["yours"]], "o-", color="#1f77b4", label="your kernel"
        )
        ax.axhline(
            result["peak"] / 1e12,
            color="#2ca02c",
            linestyle="dashed",
            linewidth=1,
            label="matmul peak measured now",
        )
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.set_xlabel(f"n (n × n @ n × n, {result['dtype']})")
        ax.set_ylabel("TFLOP/s")
        ax.set_title("Your tiled matmul against torch.mm (measured)")
    else:
        shape = result["shape"]
        sizes = sorted(SWEEP_RULE_BYTES)
        ax.plot(
            sizes,
            [intensity(shape, SWEEP_RULE_BYTES[s]) for s in sizes],
            "-",
            color="#999999",
            label=f"the rule, at {shape.m}³",
        )
        ax.plot(
            sizes,
            [asymptotic_intensity(s, s, shape.element_size) for s in sizes],
            ":",
            color="#999999",
            label="the rule, large shapes",
        )
        ax.plot(
            result["tiles"],
            [intensity(shape, c) for c in result["counted"]],
            "o",
            color="#1f77b4",
            label="your kernel, counted",
        )
        ax.axhline(
            intensity(shape, result["minimum"]),
            color="#2ca02c",
            linestyle="dashed",
            linewidth=1,
            label="minimum traffic (a, b read once)",
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [str(s) for s in sizes])
        from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

        ax.yaxis.set_major_locator(LogLocator(base=2))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("square tile, BLOCK_M = BLOCK_N")
        ax.set_ylabel("FLOP per byte moved")
        ax.set_title(f"Arithmetic intensity of a tiled matmul, {shape}")
    ax.legend(fontsize=7)
    add_stamp(ax, stamp, bottom=0.2)
    return ax
