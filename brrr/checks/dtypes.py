"""The dtypes a check's tensors may have, by name: what a recorded launch and a message between the
student's process and the grader name (``"float32"``, ``"bfloat16"``, ...), and nothing else."""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
