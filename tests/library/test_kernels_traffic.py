"""The library's own kernels move exactly the bytes their docstrings and ``brrr.counting`` say, in
one launch.

Counted in Triton's interpreter (:mod:`brrr.traffic`), at shapes that are multiples of no block
size, so every mask is exercised and a masked-off lane that was loaded anyway would show. Each test
names every tensor the wrapper is given and asserts the whole table, per tensor, loaded and stored:
a kernel split in two through a scratch buffer shows a second launch and bytes under the buffer's
argument name, and a kernel that reads its input twice shows twice the bytes under that input.
"""

import inspect

import pytest
import torch

import brrr.device  # noqa: F401  (before triton: the interpreter on a CPU)
from brrr import counting, traffic
from brrr.device import TRITON_INTERPRETED
from brrr.kernels import matmul, pointwise, softmax

import triton
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

pytestmark = pytest.mark.skipif(
    not TRITON_INTERPRETED, reason="traffic is counted in Triton's interpreter"
)

DTYPES = [torch.float32, torch.float16]
JIT_TYPES = (JITFunction, InterpretedFunction)


def one_launch(seen: traffic.Traffic, kernel: str, grid: tuple[int, ...]) -> None:
    """Exactly one launch, of ``kernel``, over ``grid``, and no access out of bounds."""
    assert seen.kernels == [kernel], seen.summary()
    assert seen.launches[0].grid == tuple(grid) + (1,) * (3 - len(grid)), seen.summary()
    assert not seen.violations, seen.violations


# ---------------------------------------------------------------- pointwise: cos_cos


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [17, 3 * pointwise.BLOCK + 5])
def test_cos_cos_reads_x_once_and_writes_out_once_in_one_launch(n, dtype):
    """``2·n·s``: x read once, out written once (:func:`brrr.counting.pointwise`, one input, one
    output)."""
    x = torch.randn(n).to(dtype)
    out = torch.empty_like(x)
    s = x.element_size()
    with traffic.count({"x": x, "out": out}) as seen:
        pointwise.cos_cos(x, out)
    one_launch(seen, "cos_cos_kernel", (triton.cdiv(n, pointwise.BLOCK),))
    assert seen.loaded == {"x": n * s, "out": 0}, seen.summary()
    assert seen.stored == {"x": 0, "out": n * s}, seen.summary()
    assert seen.loaded_bytes + seen.stored_bytes == counting.pointwise(n, dtype).bytes


# ---------------------------------------------------------------- pointwise: bias_gelu_scale


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "rows, cols",
    [
        (3, 1000),  # one tile holds every row: the bias is read once
        (37, 4099),  # several rows of tiles, each reading the whole bias
        (2, pointwise.TILE_COLS + 3),  # rows wider than a tile: two columns of tiles too
    ],
)
def test_bias_gelu_scale_reads_x_once_and_the_bias_once_per_row_of_tiles(rows, cols, dtype):
    """x read once and out written once (``rows·cols·s`` each); each program loads the ``BLOCK_N``
    bias values of its columns, so the bias is read once per row of tiles: ``⌈rows /
    BLOCK_M⌉·cols·s``."""
    x, bias = torch.randn(rows, cols).to(dtype), torch.randn(cols).to(dtype)
    out = torch.empty_like(x)
    s = x.element_size()
    block_m, block_n = pointwise.tile_for(cols)
    row_tiles = triton.cdiv(rows, block_m)
    with traffic.count({"x": x, "bias": bias, "out": out}) as seen:
        pointwise.bias_gelu_scale(x, bias, 0.5, out)
    one_launch(seen, "bias_gelu_scale_kernel", (row_tiles, triton.cdiv(cols, block_n)))
    assert seen.loaded == {"x": rows * cols * s, "bias": row_tiles * cols * s, "out": 0}, (
        seen.summary()
    )
    assert seen.stored == {"x": 0, "bias": 0, "out": rows * cols * s}, seen.summary()
    # The docstring's minimum, 2·rows·cols·s + cols·s, is what one row of tiles moves.
    assert (seen.loaded_bytes + seen.stored_bytes == 2 * rows * cols * s + cols * s) == (
        row_tiles == 1
    )


# ---------------------------------------------------------------- softmax


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "rows, cols, row_stride",
    [
        (37, 1000, 1000),
        (5, 4099, 4099),
        (37, 1000, 1003),  # rows of a wider tensor: the 3 columns between them are never touched
    ],
)
def test_softmax_reads_each_row_once_and_writes_it_once_in_one_launch(
    rows, cols, row_stride, dtype
):
    """``rows·cols·s`` read and as many written (:func:`brrr.counting.softmax`); one program per
    row."""
    x = torch.randn(rows, row_stride).to(dtype)[:, :cols]
    out = torch.empty(rows, cols, dtype=dtype)
    s = x.element_size()
    with traffic.count({"x": x, "out": out}) as seen:
        softmax.softmax(x, out)
    one_launch(seen, "softmax_kernel", (rows,))
    assert seen.loaded == {"x": rows * cols * s, "out": 0}, seen.summary()
    assert seen.stored == {"x": 0, "out": rows * cols * s}, seen.summary()
    assert seen.loaded_bytes + seen.stored_bytes == counting.softmax(rows, cols, dtype).bytes


# ---------------------------------------------------------------- tiled matmul


@pytest.mark.parametrize(
    "dtype, block", [(torch.float32, None), (torch.float32, 16), (torch.float16, 32)]
)
@pytest.mark.parametrize("m, k, n", [(100, 45, 70), (37, 129, 29)])
def test_tiled_matmul_traffic_follows_its_tiling(m, k, n, dtype, block):
    """One program per ``BLOCK_M × BLOCK_N`` output tile, each walking all of K under its masks:

    * ``a``: each of the ⌈N / BLOCK_N⌉ tiles in a row of tiles reads that row's ``rows × K`` strip:
      ``M·K·s·⌈N / BLOCK_N⌉``;
    * ``b``: each of the ⌈M / BLOCK_M⌉ tiles in a column of tiles reads its ``K × cols`` strip:
      ``K·N·s·⌈M / BLOCK_M⌉``;
    * ``out``: written once, ``M·N·s``.

    BLOCK_K sets only how many steps the walk takes, not the bytes: the lanes its masks turn off
    past K (and past M or N at the edges) load nothing.
    """
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    out = torch.empty(m, n, dtype=dtype)
    s = a.element_size()
    tile = matmul.tile_for(dtype, block)
    bm, bn = tile["BLOCK_M"], tile["BLOCK_N"]
    with traffic.count({"a": a, "b": b, "out": out}) as seen:
        matmul.tiled_matmul(a, b, out, tile)
    one_launch(seen, "tiled_matmul_kernel", (triton.cdiv(m, bm), triton.cdiv(n, bn)))
    a_bytes, b_bytes = m * k * s * triton.cdiv(n, bn), k * n * s * triton.cdiv(m, bm)
    assert seen.loaded == {"a": a_bytes, "b": b_bytes, "out": 0}, seen.summary()
    assert seen.stored == {"a": 0, "b": 0, "out": m * n * s}, seen.summary()
    assert counting.tiled_matmul_bytes(m, n, k, bm, bn, s) == {
        "a": a_bytes,
        "b": b_bytes,
        "out": m * n * s,
    }


def test_every_public_kernel_wrapper_is_counted_here():
    """A new wrapper in brrr/kernels/ needs a traffic test above: the public functions of each
    module whose source launches one of its ``@triton.jit`` kernels (``name[grid](...)``)."""
    counted = {
        pointwise: {"cos_cos", "bias_gelu_scale"},
        softmax: {"softmax"},
        matmul: {"tiled_matmul"},
    }
    for module, tested in counted.items():
        kernels = [name for name, value in vars(module).items() if isinstance(value, JIT_TYPES)]
        launching = {
            name
            for name, value in vars(module).items()
            if inspect.isfunction(value)
            and value.__module__ == module.__name__
            and not name.startswith("_")
            and any(f"{kernel}[" in inspect.getsource(value) for kernel in kernels)
        }
        assert launching == tested, (module.__name__, launching)
