"""The fused pointwise Triton kernels against plain torch: fresh inputs, odd sizes, poisoned
outputs.

On a CPU these run in Triton's interpreter; on a GPU, compiled. Same assertions.
"""

import pytest
import torch

from brrr.device import DEVICE
from brrr.kernels import pointwise

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# None of these is a multiple of a block, except where noted, so the masks are exercised.
SIZES = [
    1,
    17,
    1000,
    pointwise.BLOCK - 1,
    pointwise.BLOCK,
    pointwise.BLOCK + 1,
    3 * pointwise.BLOCK + 5,
]
SHAPES_2D = [(1, 1), (3, 1000), (1000, 3), (37, 4099), (2, pointwise.TILE_COLS + 3)]


def fresh(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape) * scale).to(device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", SIZES)
def test_cos_cos_matches_torch(size, dtype):
    x = fresh(size, dtype=dtype, scale=3.0)
    out = torch.full_like(x, float("nan"))  # an element the kernel does not write stays NaN
    got = pointwise.cos_cos(x, out=out)
    assert got.data_ptr() == out.data_ptr()
    torch.testing.assert_close(got, pointwise.cos_cos_reference(x))


def test_cos_cos_writes_nothing_past_the_end():
    n = pointwise.BLOCK + 7
    buffer = torch.full((n + 4096,), float("nan"), device=DEVICE)
    x = fresh(n)
    pointwise.cos_cos(x, out=buffer[:n])
    assert not buffer[:n].isnan().any()
    assert buffer[n:].isnan().all(), (
        "the kernel stored past the end of its output: a mask is missing"
    )


def test_cos_cos_follows_its_input():
    x = fresh(1000)
    first = pointwise.cos_cos(x).clone()
    second = pointwise.cos_cos(x + 1.0)
    assert not torch.equal(first, second)
    torch.testing.assert_close(second, pointwise.cos_cos_reference(x + 1.0))


def test_cos_cos_empty_and_invalid_inputs():
    assert pointwise.cos_cos(torch.empty(0, device=DEVICE)).numel() == 0
    with pytest.raises(ValueError, match="contiguous"):
        pointwise.cos_cos(fresh(10, 10).t())
    with pytest.raises(ValueError, match="out must"):
        pointwise.cos_cos(fresh(10), out=torch.empty(11, device=DEVICE))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES_2D)
def test_bias_gelu_scale_matches_torch(shape, dtype):
    x = fresh(*shape, dtype=dtype, scale=2.0)
    bias = fresh(shape[1], dtype=dtype)
    scale = float(torch.rand(()) + 0.5)
    out = torch.full_like(x, float("nan"))
    got = pointwise.bias_gelu_scale(x, bias, scale, out=out)
    torch.testing.assert_close(got, pointwise.bias_gelu_scale_reference(x, bias, scale))


def test_bias_is_broadcast_per_column():
    # Zero input and a bias that differs per column: every row must equal gelu(bias) * scale.
    rows, cols = 5, 1003
    bias = fresh(cols)
    got = pointwise.bias_gelu_scale(torch.zeros(rows, cols, device=DEVICE), bias, 2.0)
    expected = (torch.nn.functional.gelu(bias) * 2.0).expand(rows, cols)
    torch.testing.assert_close(got, expected)


def test_eager_version_is_the_same_function():
    x, bias = fresh(7, 300), fresh(300)
    torch.testing.assert_close(
        pointwise.bias_gelu_scale_eager(x, bias, 0.5),
        pointwise.bias_gelu_scale_reference(x, bias, 0.5),
    )


@pytest.mark.parametrize(
    "cols", [1, 3, 1000, 4096, pointwise.TILE_COLS, pointwise.TILE_COLS * 4 + 1]
)
def test_tile_covers_rows_within_the_block(cols):
    block_m, block_n = pointwise.tile_for(cols)
    for side in (block_m, block_n):
        assert side >= 1 and side & (side - 1) == 0, "Triton block shapes are powers of two"
    assert block_m * block_n <= pointwise.TILE
    assert block_n >= min(cols, pointwise.TILE_COLS)


def test_bias_gelu_scale_rejects_bad_shapes():
    with pytest.raises(ValueError, match="2-D"):
        pointwise.bias_gelu_scale(fresh(10), fresh(10), 1.0)
    with pytest.raises(ValueError, match="bias"):
        pointwise.bias_gelu_scale(fresh(4, 10), fresh(11), 1.0)


def test_gpu_block_sizes_are_correct_too(monkeypatch):
    """The GPU's small blocks and 4 x 1024 tiles, run here through whichever backend this machine
    has."""
    monkeypatch.setattr(pointwise, "BLOCK", 1024)
    monkeypatch.setattr(pointwise, "TILE", 4096)
    monkeypatch.setattr(pointwise, "TILE_COLS", 1024)
    x = fresh(3 * 1024 + 7)
    torch.testing.assert_close(
        pointwise.cos_cos(x, out=torch.full_like(x, float("nan"))), pointwise.cos_cos_reference(x)
    )
    for shape in [(9, 4096), (5, 3001), (2, 1)]:
        x, bias = fresh(*shape), fresh(shape[1])
        got = pointwise.bias_gelu_scale(x, bias, 0.5, out=torch.full_like(x, float("nan")))
        torch.testing.assert_close(got, pointwise.bias_gelu_scale_reference(x, bias, 0.5))
