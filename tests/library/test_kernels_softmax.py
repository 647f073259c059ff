"""The fused row-softmax Triton kernel against torch: odd widths, large logits, strided rows."""

import pytest
import torch

from brrr.device import DEVICE
from brrr.kernels import softmax

import triton
import triton.language as tl

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(1, 1), (1, 2), (5, 1000), (33, 4099), (3, 16385)]


def fresh(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape) * scale).to(device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_matches_torch(shape, dtype):
    x = fresh(*shape, dtype=dtype, scale=5.0)
    out = torch.full_like(x, float("nan"))
    got = softmax.softmax(x, out=out)
    torch.testing.assert_close(got, softmax.softmax_reference(x))


def test_rows_sum_to_one_even_for_huge_logits():
    # exp(1000) overflows fp32; only the max subtraction keeps this finite.
    x = fresh(9, 777, scale=1.0) + 1000.0
    got = softmax.softmax(x)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.sum(dim=-1), torch.ones(9, device=DEVICE))


def test_strided_rows_are_read_in_place():
    base = fresh(7, 2048)
    view = base[:, 100:1100]  # rows of 1000 inside a 2048-wide buffer: row stride 2048
    assert view.stride() == (2048, 1)
    torch.testing.assert_close(softmax.softmax(view), softmax.softmax_reference(view))


def test_changes_with_its_input():
    x = fresh(4, 300)
    first = softmax.softmax(x).clone()
    x[:, 0] += 3.0
    assert not torch.allclose(first, softmax.softmax(x))


def test_unfused_version_is_the_same_function():
    x = fresh(6, 513, scale=4.0)
    torch.testing.assert_close(softmax.softmax_unfused(x), softmax.softmax_reference(x))


@pytest.mark.parametrize(
    "block, warps", [(1, 4), (1024, 4), (2048, 8), (4096, 8), (8192, 16), (32768, 16)]
)
def test_wider_rows_get_more_warps(block, warps):
    assert softmax.num_warps_for(block) == warps


def test_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match="2-D"):
        softmax.softmax(fresh(10))
    with pytest.raises(ValueError, match="contiguous rows"):
        softmax.softmax(fresh(10, 10).t())
    with pytest.raises(ValueError, match="MAX_COLS"):
        softmax.softmax(torch.empty(1, softmax.MAX_COLS + 1, device=DEVICE))
    assert softmax.softmax(torch.empty(0, 5, device=DEVICE)).shape == (0, 5)


@triton.jit
def _row_start_probe(out_ptr, row_stride):
    # Row 2 + program_id, as softmax_kernel computes where a row begins.
    row = tl.program_id(axis=0) + 2
    tl.store(out_ptr + tl.program_id(axis=0), softmax.row_start(row, row_stride))


def test_row_offsets_are_64_bit_past_2_31_elements():
    # Rows 2 and 3 of a 2**30-wide tensor start at 2**31 and 3 * 2**30: both
    # past what a 32-bit product holds (it would wrap to a negative offset).
    out = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    _row_start_probe[(2,)](out, 2**30)
    assert out.tolist() == [2**31, 3 * 2**30]
