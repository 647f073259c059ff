"""Peak FLOP/s that GPU vendors print on their datasheets, for the GPUs we know.

A datasheet peak is a promise made under ideal conditions, not a measurement:
the book draws it as a line beside the peak that :mod:`brrr.ceilings` measured,
so the reader sees how close a real matmul gets. Only GPUs listed here have
one; for any other device :func:`lookup` returns ``None`` and nothing
is drawn. We never guess a figure.

Figures are dense (no 2:4 structured sparsity). NVIDIA's H100 and H200
datasheets print the tensor-core figures *with* sparsity and say in a footnote
that dense figures are half of those; we store the halves. Keys follow
:mod:`brrr.ceilings`: ``float32`` is the non-tensor-core FP32 rate, ``tf32``,
``bfloat16`` and ``float16`` are tensor-core matmul rates. ``bandwidth`` is the memory bandwidth the
datasheet prints (the A100's differs between its variants, so it has none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from brrr import essay


@dataclass(frozen=True)
class Datasheet:
    product: str
    peaks: dict[str, float]  # dtype name -> FLOP/s, dense
    source: str
    bandwidth: float | None = None  # B/s of memory (HBM); None where the variants differ


A100 = Datasheet(
    "NVIDIA A100 (SXM4 and PCIe)",
    {
        "float32": essay.A100["fp32_peak"],
        "tf32": 156e12,
        "bfloat16": essay.A100["matmul_peak_bf16"],
        "float16": 312e12,
    },
    "NVIDIA A100 Tensor Core GPU datasheet, as quoted in " + essay.SOURCE,
)

H100_SXM = Datasheet(
    "NVIDIA H100 SXM",
    {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12},
    "NVIDIA H100 Tensor Core GPU datasheet (tensor-core figures printed with sparsity, halved "
    "here)",
    bandwidth=3.35e12,
)

H100_PCIE = Datasheet(
    "NVIDIA H100 PCIe",
    {"float32": 51e12, "tf32": 378e12, "bfloat16": 756.5e12, "float16": 756.5e12},
    "NVIDIA H100 Tensor Core GPU datasheet (tensor-core figures printed with sparsity, halved "
    "here)",
    bandwidth=2.0e12,
)

H200_SXM = Datasheet(
    "NVIDIA H200 SXM",
    {"float32": 67e12, "tf32": 494.5e12, "bfloat16": 989.5e12, "float16": 989.5e12},
    "NVIDIA H200 Tensor Core GPU datasheet (tensor-core figures printed with sparsity, halved "
    "here)",
    bandwidth=4.8e12,
)

# (pattern on torch.cuda.get_device_name(), datasheet). First match wins, so the
# more specific names come first. "H100 80GB HBM3" is how torch names the SXM part.
_KNOWN = [
    (r"\bA100\b", A100),
    (r"\bH100\b.*\bPCIe\b", H100_PCIE),
    (r"\bH100\b.*(\bSXM|HBM3\b)", H100_SXM),
    (r"\bH200\b(?!.*\bNVL\b)", H200_SXM),
]


def lookup(device: str) -> Datasheet | None:
    """The datasheet for a device name as torch reports it, or ``None`` if we do not know it."""
    for pattern, sheet in _KNOWN:
        if re.search(pattern, device, flags=re.IGNORECASE):
            return sheet
    return None
