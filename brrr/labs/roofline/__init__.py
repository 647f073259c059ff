"""Lab 1 (``01-roofline``), "your machine's roofline": measure two ceilings, then place six ops
under them.

Students write their own timing code for two ceilings (copy bandwidth and matmul
peak), compute the ridge point, count FLOPs and bytes for a list of ops, and
classify each op as memory- or compute-bound on their machine.

This package is what the lab's notebook imports: ``LAB``, the lab's name,
``HIDDEN_MODULES`` (``brrr`` modules absent from the student's process under
the gradebook) and the given material (:mod:`brrr.labs.roofline.given`). How the
lab is graded is :mod:`brrr.labs.roofline.checks`, which the grader process
imports and this package does not.
"""

from brrr.labs.roofline.given import COPY_N, DTYPE, MATMUL_N, OPS, Op, WIRE_TYPES

LAB = "01-roofline"
HIDDEN_MODULES = ("ceilings", "timing")

__all__ = ["LAB", "HIDDEN_MODULES", "COPY_N", "DTYPE", "MATMUL_N", "OPS", "Op", "WIRE_TYPES"]
