"""Lab 3 (``03-one-pass``), "one pass": row-wise softmax and layer norm, each one read of x and one
write of out.

A softmax or a layer norm over the last dim of a ``rows × cols`` tensor is a
*reduction* followed by pointwise work that needs the reduction's result: the row
maximum and sum, or the row mean and variance. Written as separate eager ops
(:func:`softmax_unfused`, :func:`layer_norm_unfused`) every step is a kernel that
reads its inputs from and writes its output to global memory. Students write two
Triton kernels that load a row once into registers, reduce it there, and store
the result once:

- ``softmax(x, out)``: numerically stable (subtract the row max), any row length;
- ``layer_norm(x, weight, bias, out)``: mean and biased variance in registers
  (two passes over the registers, or Welford), eps = :data:`EPS`, weight and bias.

This package is what the lab's notebook imports: ``LAB``, the lab's name,
``HIDDEN_MODULES`` (``brrr`` modules absent from the student's process under
the gradebook) and the given material (:mod:`brrr.labs.one_pass.given`). How the
lab is graded is :mod:`brrr.labs.one_pass.checks`, which the grader process
imports and this package does not.
"""

from brrr.labs.one_pass.given import (
    DEMO_EAGER_BYTES_PER_ELEMENT,
    EPS,
    FUSED_TORCH,
    INPUT_NAMES,
    KINDS,
    MAKE_INPUTS,
    Rows,
    TIMED_BYTES_PER_ELEMENT,
    TIMED_COLS,
    TRAFFIC_ROWS,
    UNFUSED,
    WIRE_TYPES,
    compare_with_eager,
    inputs_for_demo,
    layer_norm_reference,
    layer_norm_unfused,
    make_layer_norm_inputs,
    make_softmax_inputs,
    plot_comparison,
    softmax_reference,
    softmax_unfused,
    timed_rows,
)

LAB = "03-one-pass"
HIDDEN_MODULES: tuple[
    str, ...
] = ()  # the references are given: the grader runs only the student's kernels

__all__ = [
    "LAB",
    "HIDDEN_MODULES",
    "DEMO_EAGER_BYTES_PER_ELEMENT",
    "EPS",
    "FUSED_TORCH",
    "INPUT_NAMES",
    "KINDS",
    "MAKE_INPUTS",
    "Rows",
    "TIMED_BYTES_PER_ELEMENT",
    "TIMED_COLS",
    "TRAFFIC_ROWS",
    "UNFUSED",
    "WIRE_TYPES",
    "compare_with_eager",
    "inputs_for_demo",
    "layer_norm_reference",
    "layer_norm_unfused",
    "make_layer_norm_inputs",
    "make_softmax_inputs",
    "plot_comparison",
    "softmax_reference",
    "softmax_unfused",
    "timed_rows",
]
