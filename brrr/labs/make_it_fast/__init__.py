"""Lab 4 (``04-make-it-fast``), "make this step fast": a training loop full of overhead, made
faster.

The task: :func:`given_train` runs a few SGD steps of a small MLP the way real
code often is. It carries the overheads of the overhead chapter
(``chapters/overhead.md``, notebooks 30-33):

- a Python loop over the samples of each batch, each with its own forward and
  its own ``autograd.grad``: a few dozen tiny ops per sample instead of per batch;
- a host sync every step (``.item()`` in a logging line);
- tensors created anew every step (the gradient accumulators, the learning rate);
- tiny ops that could be fewer (the update is five elementwise ops per parameter
  where two in-place ones would do);
- on a GPU, all of it is kernel launches that a CUDA graph could replay.

Students write ``fast_train(problem)``, which must return the same losses and
parameters, faster. ``problem`` is a :class:`Problem` (a seed and a
:class:`Shape`); both sides build the model and the batches from it with
:func:`make_problem`. Students also write ``diagnose(problem)``, which profiles
the given step and returns the share of its time spent outside any op (on a
CPU) or with the GPU idle (on a GPU), computed with :mod:`brrr.traces`.

This package is what the lab's notebook imports: ``LAB``, the lab's name,
``HIDDEN_MODULES`` (``brrr`` modules absent from the student's process under
the gradebook) and the given material (:mod:`brrr.labs.make_it_fast.given`). How the
lab is graded is :mod:`brrr.labs.make_it_fast.checks`, which the grader process
imports and this package does not.
"""

from brrr.labs.make_it_fast.given import (
    KINK_MARGIN,
    LEARNING_RATE,
    MAX_DRAWS,
    NARROW,
    Problem,
    SHAPES,
    Shape,
    WEIGHT_DECAY,
    WIRE_TYPES,
    compare,
    forward,
    given_train,
    make_problem,
    new_problem,
    plot_comparison,
    relu_margin,
)

LAB = "04-make-it-fast"
HIDDEN_MODULES: tuple[str, ...] = ()  # the given step is given: the grader runs its own copy

__all__ = [
    "LAB",
    "HIDDEN_MODULES",
    "KINK_MARGIN",
    "LEARNING_RATE",
    "MAX_DRAWS",
    "NARROW",
    "Problem",
    "SHAPES",
    "Shape",
    "WEIGHT_DECAY",
    "WIRE_TYPES",
    "compare",
    "forward",
    "given_train",
    "make_problem",
    "new_problem",
    "plot_comparison",
    "relu_margin",
]
