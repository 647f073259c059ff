"""A fused row-wise softmax: one program per row, one read and one write per element.

``softmax(x)[i, j] = exp(x[i, j] - max_j x[i]) / sum_j exp(x[i, j] - max_j x[i])``.
Subtracting the row maximum keeps ``exp`` from overflowing and does not change the
result.

Eager PyTorch computed as separate ops (max, subtract, exp, sum, divide) reads and
writes the ``rows × cols`` tensor several times. Here a whole row is loaded into
registers, every step runs there, and the row is written once.

Traffic (``s`` = bytes per element): read ``rows·cols·s``, write ``rows·cols·s``.
That is what :func:`brrr.counting.softmax` counts, so the bandwidth of this kernel
is ``2·rows·cols·s / seconds``.

A row must fit in one block (``BLOCK ≥ cols``, a power of two), so this kernel is
for rows up to :data:`MAX_COLS` wide; longer rows need a loop over chunks (the
online-softmax trick FlashAttention uses).
"""

from __future__ import annotations

import torch

import brrr.device  # noqa: F401  (before triton: turns the interpreter on without a GPU)

import triton
import triton.language as tl

MAX_COLS = 2**15


@triton.jit
def row_start(row, row_stride):
    # Where a row begins, in elements, as a 64-bit integer. program_id and the
    # stride are 32-bit, so ``row * row_stride`` would wrap past 2**31 elements
    # (4 GiB of fp16) and read someone else's memory.
    return row.to(tl.int64) * row_stride


@triton.jit
def softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)  # one program per row
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols  # BLOCK is a power of two ≥ n_cols
    x_row = x_ptr + row_start(row, x_row_stride)
    x = tl.load(x_row + cols, mask=mask, other=-float("inf"))  # read the row once
    x = x.to(tl.float32)
    x = x - tl.max(x, axis=0)  # padding stays -inf, so it never wins the max
    numerator = tl.exp(x)  # exp(-inf) = 0: padding adds nothing to the sum
    y = numerator / tl.sum(numerator, axis=0)
    out_row = out_ptr + row_start(row, out_row_stride)
    tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)  # write it once


def num_warps_for(block: int) -> int:
    """Warps per program: more threads for wider rows, so each thread holds few elements.

    (The interpreter ignores it; on a GPU it sets how many threads share a row.)
    """
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return 4


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor whose rows are contiguous.

    One launch, one program per row: each row is read once and written once, ``rows·cols·s`` bytes
    each way (:func:`brrr.counting.softmax`), whatever the stride between rows.
    """
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"x must be 2-D with contiguous rows, got shape {tuple(x.shape)} "
                         f"strides {x.stride()}")
    rows, cols = x.shape
    if cols > MAX_COLS:
        raise ValueError(f"rows of {cols} elements exceed MAX_COLS={MAX_COLS}: this kernel "
                         "holds a whole row in one block")
    out = torch.empty_like(x) if out is None else out
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device or out.stride(1) != 1:
        raise ValueError("out must match x's shape, dtype and device, with contiguous rows")
    if rows == 0 or cols == 0:
        return out
    block = triton.next_power_of_2(cols)
    softmax_kernel[(rows,)](x, out, x.stride(0), out.stride(0), cols, BLOCK=block,
                            num_warps=num_warps_for(block))
    return out


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    """The spec: torch's own softmax, in fp32."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def softmax_unfused(x: torch.Tensor) -> torch.Tensor:
    """Softmax written out op by op, as eager PyTorch runs it without a fused kernel.

    Five kernels; ``x - max``, ``exp`` and the division each read and write the
    whole tensor, and the two reductions read it: about 8 full passes instead of 2.
    """
    shifted = x - x.amax(dim=-1, keepdim=True)
    numerator = shifted.exp()
    return numerator / numerator.sum(dim=-1, keepdim=True)
