"""Fused pointwise kernels: ``cos(cos(x))`` and ``gelu(x + bias) * scale``.

A pointwise kernel reads each input element once and writes each output element
once, whatever it computes in between, because the intermediate values stay in
registers. That is vertical fusion: the unfused eager chain writes every
intermediate to memory and reads it back.

Traffic (minimum main-memory bytes, ``s`` = bytes per element):

* ``cos_cos``: read x, write out: ``2·n·s``. Eager ``x.cos().cos()`` moves twice
  that: ``4·n·s`` (it writes ``x.cos()`` and reads it back).
* ``bias_gelu_scale`` on a ``rows × cols`` input: read x, write out, read the
  bias once: ``2·rows·cols·s + cols·s``. Eager ``gelu(x + bias) * scale`` moves
  ``6·rows·cols·s``: three kernels, each reading and writing a full tensor. The
  kernel here reads the bias once per row of tiles, ``⌈rows / BLOCK_M⌉·cols·s``:
  the minimum when one tile holds every row.
"""

from __future__ import annotations

import torch

from brrr.device import ON_GPU, per_device  # before triton: turns the interpreter on without a GPU

import triton
import triton.language as tl
from triton.language.extra import libdevice

# Elements per program. In the interpreter each program costs ~0.6 ms of Python
# overhead, so a CPU run uses few, large programs; a GPU wants many small ones.
BLOCK = per_device(cpu=2**16, gpu=1024)
NUM_WARPS = 4
# bias_gelu_scale's 2-D tiles: at most TILE elements, at most TILE_COLS wide. On a GPU
# a 4 x 1024 tile reuses each bias value for four rows, with 16 elements per thread.
TILE = per_device(cpu=2**16, gpu=4096)
TILE_COLS = per_device(cpu=2**16, gpu=1024)
TILE_WARPS = 8


@triton.jit
def cos_cos_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr,
                   FAST: tl.constexpr = False):
    # Each program handles one block of BLOCK consecutive elements.
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements  # the last block may run past the end
    x = tl.load(x_ptr + offsets, mask=mask)  # read n elements
    x = x.to(tl.float32)  # compute in fp32 whatever the storage dtype
    if FAST:  # decided at compile time: the other branch is not compiled
        y = libdevice.fast_cosf(libdevice.fast_cosf(x))  # hardware approximation
    else:
        y = tl.cos(tl.cos(x))  # the intermediate cos(x) never leaves registers
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)  # write n elements


def cos_cos(x: torch.Tensor, out: torch.Tensor | None = None, *,
            fast: bool = False) -> torch.Tensor:
    """``x.cos().cos()`` in one kernel: one read and one write per element. ``fast=True``: the
    GPU's approximate cosine instead of the accurate one (:func:`_check_fast`)."""
    _check_fast(fast)
    out = _output(x, out)
    n = x.numel()
    if n > 0:
        grid = (triton.cdiv(n, BLOCK),)
        cos_cos_kernel[grid](x, out, n, BLOCK=BLOCK, FAST=fast, num_warps=NUM_WARPS)
    return out


def _check_fast(fast: bool) -> None:
    """``fast=True`` calls ``libdevice.fast_cosf``, the special-function unit's approximation (a
    few instructions, absolute error around 1e-6 near zero and growing with ``|x|``), instead of the
    accurate libdevice cosine that ``tl.cos`` becomes (a range reduction and a polynomial: about 25
    instructions). The interpreter cannot call libdevice, so on a CPU it refuses."""
    if fast and not ON_GPU:
        raise ValueError("cos_cos(fast=True) calls libdevice.fast_cosf, which only a GPU runs: "
                         "Triton's interpreter has no extern calls")


def cos_cos_reference(x: torch.Tensor) -> torch.Tensor:
    """The spec ``cos_cos`` is checked against, computed in fp32."""
    return x.float().cos().cos().to(x.dtype)


@triton.jit
def bias_gelu_scale_kernel(x_ptr, bias_ptr, out_ptr, n_rows, n_cols, scale,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Each program handles a BLOCK_M × BLOCK_N tile of the row-major (rows, cols) input.
    rows = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows[:, None] < n_rows) & col_mask[None, :]
    offsets = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)  # read each element of x once
    # BLOCK_N values, reused for every row
    bias = tl.load(bias_ptr + cols, mask=col_mask).to(tl.float32)
    h = x + bias[None, :]  # broadcast the bias down the rows, in registers
    gelu = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))  # exact GELU, as torch's default
    y = gelu * scale
    # write each element once
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def tile_for(cols: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N): as wide as the rows (up to ``TILE_COLS``), then as many rows as fit in
    ``TILE``."""
    block_n = min(triton.next_power_of_2(max(cols, 1)), TILE_COLS)
    return max(1, TILE // block_n), block_n


def bias_gelu_scale(x: torch.Tensor, bias: torch.Tensor, scale: float,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """``gelu(x + bias) * scale`` for a row-major ``(rows, cols)`` x and a ``(cols,)`` bias, in one
    kernel.

    One launch over ``BLOCK_M × BLOCK_N`` tiles (:func:`tile_for`). It reads x once and writes out
    once (``rows·cols·s`` each); each program loads the bias values of its own columns, so the bias
    is read once per row of tiles: ``⌈rows / BLOCK_M⌉·cols·s``.
    """
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError(f"x must be a contiguous 2-D tensor, got shape {tuple(x.shape)}")
    if bias.shape != (x.shape[1],) or not bias.is_contiguous():
        raise ValueError(f"bias must be contiguous with shape ({x.shape[1]},), "
                         f"got {tuple(bias.shape)}")
    out = _output(x, out)
    rows, cols = x.shape
    if rows == 0 or cols == 0:
        return out
    block_m, block_n = tile_for(cols)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(cols, block_n))
    bias_gelu_scale_kernel[grid](x, bias, out, rows, cols, float(scale),
                                 BLOCK_M=block_m, BLOCK_N=block_n, num_warps=TILE_WARPS)
    return out


def bias_gelu_scale_reference(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """The spec, in fp32: three eager ops, each a full read and write of the tensor."""
    h = x.float() + bias.float()
    return (torch.nn.functional.gelu(h) * scale).to(x.dtype)


def bias_gelu_scale_eager(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """What a user writes in PyTorch: three kernels (add, gelu, multiply), two intermediates."""
    return torch.nn.functional.gelu(x + bias) * scale


def _output(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """The buffer a kernel writes: ``out`` (checked against a contiguous ``x``) or a new one."""
    if not x.is_contiguous():
        raise ValueError("these kernels need a contiguous tensor: call .contiguous() first")
    out = torch.empty_like(x) if out is None else out
    _check_out(out, x)
    _check_size(x)
    return out


def _check_size(x: torch.Tensor) -> None:
    # Offsets are 32-bit integers inside the kernels.
    if x.numel() >= 2**31:
        raise ValueError(
            f"{x.numel()} elements: these kernels index with 32-bit offsets, so stay below 2**31"
        )


def _check_out(out: torch.Tensor, x: torch.Tensor) -> None:
    same = out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    if not same or not out.is_contiguous():
        raise ValueError("out must be a contiguous tensor with x's shape, dtype and device")
