"""Lab 1's given material: the ops to analyse, their dtype, and the sizes of the two ceilings.

The student's process imports this module (through :mod:`brrr.labs.roofline`), so it imports
neither ``brrr.ceilings`` nor ``brrr.timing`` (the lab's ``HIDDEN_MODULES``) at module level. The
checks (:mod:`brrr.labs.roofline.checks`) import from it, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from brrr import counting
from brrr.device import ON_GPU, far_above_cache, half_precision_dtype, per_device

# The dtype of the matmul peak and of the ops: the tensor cores' 16-bit dtype on a GPU (bf16, or
# fp16 on a GPU before Ampere such as Colab's T4), fp32 on a CPU.
DTYPE = torch.float32 if not ON_GPU else half_precision_dtype()
COPY_N = far_above_cache(4)  # float32 elements copied by copy_bandwidth(n)
MATMUL_N = per_device(cpu=1024, gpu=8192)  # square matmul size for matmul_peak(n, dtype)


@dataclass(frozen=True)
class Op:
    """An op to analyse. ``shape`` is (n,) for pointwise, (rows, cols) for reduction and
    layer norm, and (m, n, k) for a matmul of an m×k by a k×n matrix."""

    name: str
    kind: str  # "pointwise", "reduction", "matmul" or "layer_norm"
    shape: tuple[int, ...]
    dtype: torch.dtype = DTYPE

    @property
    def element_size(self) -> int:
        return counting.element_size(self.dtype)


WIRE_TYPES = {"Op": Op}


OPS: tuple[Op, ...] = (
    Op("x * 2 on 16M elements", "pointwise", (2**24,)),
    Op("row sums of 4096x4096", "reduction", (4096, 4096)),
    Op("layer norm of 8192x1024", "layer_norm", (8192, 1024)),
    Op("small matmul 64x64x64", "matmul", (64, 64, 64)),
    Op("linear layer, batch 16, 4096->4096", "matmul", (16, 4096, 4096)),
    Op("large matmul 8192x8192x8192", "matmul", (8192, 8192, 8192)),
)
