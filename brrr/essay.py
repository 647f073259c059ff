"""Figures quoted from Horace He, "Making Deep Learning Go Brrrr From First Principles" (2022).

https://horace.io/brrr_intro.html. These are the essay's numbers for an NVIDIA
A100, reproduced as the essay gives them. They were not measured by this project:
the book prints them *beside* the reader's own measurement, never in place of it.
"""

from __future__ import annotations

SOURCE = (
    'Horace He, "Making Deep Learning Go Brrrr From First Principles", 2022, '
    "https://horace.io/brrr_intro.html"
)
DEVICE = "NVIDIA A100"

A100 = {
    "matmul_peak_bf16": 312e12,  # FLOP/s, tensor cores
    "fp32_peak": 19.5e12,  # FLOP/s, non-matmul, counting an FMA as 2 FLOPs
    "fp32_peak_without_fma": 9.75e12,  # FLOP/s, "fully general purpose computation"
    "bandwidth": 1.5e12,  # B/s global memory
}

OVERHEAD = {
    "python_adds_per_s": 32e6,
    "pytorch_ops_per_s": 280e3,
}

# The essay's sweep of ``x * 2`` repeated on an A100 (fp32): "the runtime doesn't increase
# noticeably at all until we're performing 64 multiplications", and memory-bandwidth-bound for
# repeat < 32.
REPEAT_SWEEP = {"flat_until": 64, "memory_bound_below": 32}

# Share of FLOPs and of runtime per operator class in BERT, percent: the essay's table, which it
# takes from Ivanov et al., "Data Movement Is All You Need" (MLSys 2021). The essay names no GPU for
# it: label it as the essay's BERT table, never with quoted(), which stamps the A100.
BERT_TABLE = {
    "tensor contraction": {"flops": 99.80, "runtime": 61.0},
    "statistical normalization": {"flops": 0.17, "runtime": 25.5},
    "element-wise": {"flops": 0.03, "runtime": 13.5},
}


def quoted(text: str) -> str:
    """``text`` labelled as a quoted figure."""
    return f"{text}  [quoted from the essay, {DEVICE}]"
