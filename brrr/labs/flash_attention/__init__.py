"""Lab 6 (``06-flash-attention``), "FlashAttention forward": attention in one Triton kernel.

Attention for one head of ``N`` queries and keys of dimension ``d`` is
``O = softmax(Q Kᵀ / √d) V``. Run as three kernels (``S = Q Kᵀ``, a softmax,
``P V``) it writes the ``N × N`` scores, reads them, writes the probabilities and
reads them again: ``4·N²`` elements per head beside the ``4·N·d`` of Q, K, V and
O (:func:`brrr.counting.attention` with ``fused=False``). The students write the
forward pass of FlashAttention instead (see the fusion chapter's FlashAttention
section): one program per (batch·head, block of ``BLOCK_M`` queries), looping
over blocks of ``BLOCK_N`` keys and values with a running max ``m``, a running
sum ``ℓ`` and an unnormalised output accumulated in float32. The scores never
leave the chip, so over the grid:

- Q is read once and O written once; K and V are read once per query block,
  ⌈N / BLOCK_M⌉ times (the lab's traffic rule, :data:`PREDICTION_RULES`: the
  grader keeps it, :func:`brrr.labs.flash_attention.checks.flash_bytes`, and the
  notebook plots it from tables, :data:`DEMO_FLASH_BYTES`). The traffic grows as ``N²·d / BLOCK_M``,
  against ``4·N²`` for the three kernels: for large N the ratio tends to ``d / (2·BLOCK_M)``.

Students write ``attention_kernel`` and ``attention(q, k, v, out, causal=False)``:
``q``, ``k``, ``v`` and ``out`` are contiguous ``(batch, heads, N, d)`` tensors of one
dtype (float32 or float16), ``d`` is 32 or 64, and the scale is ``1/√d``. The
kernel takes its block sizes as constexpr arguments named ``BLOCK_M`` and
``BLOCK_N`` (:data:`BLOCK_ARGS`); the grid is one program per query block of each
head. The notebook gives ``causal_attention(q, k, v, out)``, the wrapper with
``causal=True``: query ``i`` sees keys ``0..i`` only.

This package is what the lab's notebook imports: ``LAB``, the lab's name,
``HIDDEN_MODULES`` (``brrr`` modules absent from the student's process under
the gradebook) and the given material (:mod:`brrr.labs.flash_attention.given`). How the
lab is graded is :mod:`brrr.labs.flash_attention.checks`, which the grader process
imports and this package does not.
"""

from brrr.labs.flash_attention.given import (
    DEMO_FLASH_BYTES,
    DEMO_NAIVE_BYTES,
    GPU_SIZES,
    LARGE_LOGIT_STD,
    PREDICTION_BLOCK_M,
    PREDICTION_SHAPE,
    RISE,
    Shape,
    TRAFFIC_D,
    TRAFFIC_SIZES,
    WIRE_TYPES,
    attention_reference,
    compare_times,
    compare_traffic,
    inputs_for_demo,
    make_inputs,
    naive_attention,
    plot_times,
    plot_traffic,
    sdpa_function,
    traffic_shape,
)

LAB = "06-flash-attention"
# brrr.counting holds the three kernels' traffic (attention), which the prediction asks for.
HIDDEN_MODULES: tuple[str, ...] = ("counting",)

__all__ = [
    "LAB",
    "HIDDEN_MODULES",
    "DEMO_FLASH_BYTES",
    "DEMO_NAIVE_BYTES",
    "GPU_SIZES",
    "LARGE_LOGIT_STD",
    "PREDICTION_BLOCK_M",
    "PREDICTION_SHAPE",
    "RISE",
    "Shape",
    "TRAFFIC_D",
    "TRAFFIC_SIZES",
    "WIRE_TYPES",
    "attention_reference",
    "compare_times",
    "compare_traffic",
    "inputs_for_demo",
    "make_inputs",
    "naive_attention",
    "plot_times",
    "plot_traffic",
    "sdpa_function",
    "traffic_shape",
]
