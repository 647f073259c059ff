"""Lab 5 (``05-tile-it``), "tile it": a Triton matmul, ``out = a @ b``, in output tiles with a loop
over K.

A matmul does ``2·M·N·K`` FLOPs on ``M·K + K·N + M·N`` elements: enough arithmetic
per byte to be compute-bound, *if* every element crossed the memory bus once. A
kernel that computes one ``BLOCK_M × BLOCK_N`` tile of the output per program
loads, for that tile, a ``BLOCK_M``-row strip of ``a`` and a ``BLOCK_N``-column
strip of ``b`` (``BLOCK_K`` columns of the strip at a time, accumulated in
float32 with ``tl.dot``). Every program in the same row of tiles reads the same
strip of ``a`` again, so over the grid:

- ``a`` is read ⌈N / BLOCK_N⌉ times, ``b`` ⌈M / BLOCK_M⌉ times, ``out`` written once
  (the lab's traffic rule, :data:`PREDICTION_RULES`: the grader keeps it,
  :func:`brrr.labs.tile_it.checks.tiled_bytes`, and the notebook plots it at one
  shape from a table, :data:`SWEEP_RULE_BYTES`);
- the arithmetic intensity is ``2·M·N·K`` over those bytes, and for large shapes
  it tends to ``2 / (element size · (1/BLOCK_M + 1/BLOCK_N))`` FLOP/B whatever the
  shape: the tile size, not the matrix, sets it (:func:`asymptotic_intensity`).

Students write ``matmul_kernel`` and ``matmul(a, b, out, tile=None)`` (``tile``
defaults to the notebook's ``tile_for(a.dtype)``). The tile
sizes are constexpr arguments named ``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K`` and
``GROUP_M`` (:data:`TILE_ARGS`), the grid is one program per output tile, and
programs are taken in grouped ("swizzled") order: ``GROUP_M`` rows of tiles at a
time, column by column, so that programs running together share strips of
``a`` and ``b`` in the L2 cache. ``GROUP_M = 1`` is plain row-major order.

This package is what the lab's notebook imports: ``LAB``, the lab's name,
``HIDDEN_MODULES`` (``brrr`` modules absent from the student's process under
the gradebook) and the given material (:mod:`brrr.labs.tile_it.given`). How the
lab is graded is :mod:`brrr.labs.tile_it.checks`, which the grader process
imports and this package does not.
"""

from brrr.labs.tile_it.given import (
    GPU_SIZES,
    PREDICTION_SHAPE,
    PREDICTION_TILINGS,
    SWEEP_RULE_BYTES,
    SWEEP_TILES,
    Shape,
    TIMED_DTYPE,
    TRAFFIC_SHAPE,
    WIRE_TYPES,
    asymptotic_intensity,
    compare_tilings,
    inputs_for_demo,
    intensity,
    make_inputs,
    matmul_reference,
    minimum_bytes,
    plot_tilings,
)

LAB = "05-tile-it"
# brrr.counting holds the tiling's traffic rule (tiled_matmul_bytes), which the prediction asks for.
HIDDEN_MODULES: tuple[str, ...] = ("counting",)

__all__ = [
    "LAB",
    "HIDDEN_MODULES",
    "GPU_SIZES",
    "PREDICTION_SHAPE",
    "PREDICTION_TILINGS",
    "SWEEP_RULE_BYTES",
    "SWEEP_TILES",
    "Shape",
    "TIMED_DTYPE",
    "TRAFFIC_SHAPE",
    "WIRE_TYPES",
    "asymptotic_intensity",
    "compare_tilings",
    "inputs_for_demo",
    "intensity",
    "make_inputs",
    "matmul_reference",
    "minimum_bytes",
    "plot_tilings",
]
