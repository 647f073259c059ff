"""Lab 2 (``02-fuse-it``), "fuse it": five pointwise ops in one Triton kernel instead of five.

The task: ``chain(x, y)`` below runs five pointwise ops, five kernels in eager
PyTorch, each reading its inputs from and writing its output to global memory.
Students write one Triton kernel that computes the same thing in one pass, and a
wrapper ``fused_chain(x, y, out)`` that launches it and writes into ``out``.

Traffic (float32, n elements)::

    eager                                    reads   writes
    s = sigmoid(x)                           x       s
    h = x * s                                x, s    h
    h = h * y                                h, y    h
    h = h * 0.5                              h       h
    out = h.clamp(-4, 4)                     h       out
                                             7n      5n     -> 12n elements = 48 B per element
    fused                                    x, y    out    ->  3n elements = 12 B per element

This package is what the lab's notebook imports: ``LAB``, the lab's name,
``HIDDEN_MODULES`` (``brrr`` modules absent from the student's process under
the gradebook) and the given material (:mod:`brrr.labs.fuse_it.given`). How the
lab is graded is :mod:`brrr.labs.fuse_it.checks`, which the grader process
imports and this package does not.
"""

from brrr.labs.fuse_it.given import (
    EAGER_ELEMENTS_MOVED,
    EDGE_VALUES,
    FUSED_ELEMENTS_MOVED,
    TIMED_BYTES_PER_ELEMENT,
    TRAFFIC_N,
    WIRE_TYPES,
    chain,
    compare_with_eager,
    inputs_for_demo,
    make_inputs,
    plot_comparison,
    timed_n,
)

LAB = "02-fuse-it"
HIDDEN_MODULES: tuple[
    str, ...
] = ()  # the reference is given: the grader runs only the student's kernels

__all__ = [
    "LAB",
    "HIDDEN_MODULES",
    "EAGER_ELEMENTS_MOVED",
    "EDGE_VALUES",
    "FUSED_ELEMENTS_MOVED",
    "TIMED_BYTES_PER_ELEMENT",
    "TRAFFIC_N",
    "WIRE_TYPES",
    "chain",
    "compare_with_eager",
    "inputs_for_demo",
    "make_inputs",
    "plot_comparison",
    "timed_n",
]
