"""FLOP and byte counts of common ops, written out so the traffic model sits next to the code.

Bytes are the minimum main-memory traffic: each input read once, each output
written once, as an ideally fused kernel would do. Unfused chains move more; count
them as the sum of their ops. Each function returns an :class:`OpCount`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class OpCount:
    name: str
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def __add__(self, other: "OpCount") -> "OpCount":
        return OpCount(f"{self.name} + {other.name}", self.flops + other.flops, self.bytes + other.bytes)


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def pointwise(n: int, dtype: torch.dtype = torch.float32, *, inputs: int = 1, outputs: int = 1,
              flops_per_element: int = 1, name: str = "pointwise") -> OpCount:
    """n elements: read ``inputs`` tensors, write ``outputs``. A unary fp32 op moves 8 bytes/element."""
    return OpCount(name, flops_per_element * n, (inputs + outputs) * n * element_size(dtype))


def reduction(rows: int, cols: int, dtype: torch.dtype = torch.float32, *, name: str = "row reduction") -> OpCount:
    """Sum each row: read rows·cols elements, write rows; cols - 1 adds per row (counted as cols)."""
    size = element_size(dtype)
    return OpCount(name, rows * cols, (rows * cols + rows) * size)


def matmul(m: int, n: int, k: int, dtype: torch.dtype = torch.float32, *, name: str | None = None) -> OpCount:
    """(m×k) @ (k×n): 2·m·n·k FLOPs; read m·k + k·n, write m·n elements."""
    size = element_size(dtype)
    return OpCount(name or f"matmul {m}x{k} @ {k}x{n}", 2 * m * n * k, (m * k + k * n + m * n) * size)


def softmax(rows: int, cols: int, dtype: torch.dtype = torch.float32) -> OpCount:
    """Row softmax, fused: read and write rows·cols elements; max, subtract, exp, sum, divide ≈ 5 FLOPs each."""
    size = element_size(dtype)
    return OpCount("softmax", 5 * rows * cols, 2 * rows * cols * size)


def layer_norm(rows: int, cols: int, dtype: torch.dtype = torch.float32, *, affine: bool = True) -> OpCount:
    """Layer norm over the last dim, fused: read x (and weight, bias), write y.

    FLOPs per element: mean (1), subtract (1), square and sum for variance (2),
    multiply by 1/std (1), and with ``affine`` scale and shift (2).
    """
    size = element_size(dtype)
    flops = (7 if affine else 5) * rows * cols
    params = 2 * cols if affine else 0
    return OpCount("layer norm", flops, (2 * rows * cols + params) * size)
