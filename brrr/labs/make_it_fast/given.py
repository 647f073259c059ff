"""Lab 4's given material: the given step, its problems and model, and the comparison to plot.

The student's process imports this module (through :mod:`brrr.labs.make_it_fast`). The checks
(:mod:`brrr.labs.make_it_fast.checks`) import from it, never the other way round.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from brrr.device import DEVICE, synchronize

LEARNING_RATE = 0.05
WEIGHT_DECAY = 0.01  # large enough that skipping it moves the parameters far past the tolerance


@dataclass(frozen=True)
class Shape:
    """An MLP of ``depth`` square ``width``-wide layers, trained ``steps`` SGD steps on batches of
    ``batch``."""

    batch: int
    width: int
    depth: int
    steps: int


@dataclass(frozen=True)
class Problem:
    """One training run: the model, the batches and their values all follow from ``seed`` and
    ``shape``."""

    seed: int
    shape: Shape


WIRE_TYPES = {"Problem": Problem, "Shape": Shape}

# The shapes the grader trains at (it picks a fresh seed for every call). Tens of ms for the given
# step.
SHAPES: tuple[Shape, ...] = (
    Shape(batch=16, width=64, depth=3, steps=6),
    Shape(batch=12, width=96, depth=2, steps=6),
    Shape(batch=20, width=48, depth=4, steps=4),
)

# The diagnosis profiles the given step on two problems: a narrow model, all overhead, and a wide
# one whose per-sample ops take long enough that the gaps between them are a small share of the
# time.
NARROW = Shape(batch=8, width=64, depth=3, steps=2)


# The closest a ReLU's input may come to zero in a drawn problem. Batching the per-sample loop sums
# in another order and moves a pre-activation by about 1e-7; one that close to zero can then switch
# its unit on in one run and off in the other, and a whole row of W1 differs by 1e-4 (seed
# 1492458921844353942 at the first shape: an input 6e-8 from zero failed the reference solution). In
# 900 fresh problems 1 failed, at 1.2e-7; 1e-5 keeps a hundredfold margin and turns away 8-14% of
# problems (2.5-3 ms of CPU each, before any timing starts).
KINK_MARGIN = 1e-5
MAX_DRAWS = 200


def new_problem(shape: Shape = SHAPES[0], seed: int | None = None) -> Problem:
    """A problem at ``shape``, with a fresh random seed unless one is given.

    A drawn seed is kept only if every ReLU input of the training run stays at least
    :data:`KINK_MARGIN` from zero (:func:`relu_margin`): there, a correct solution that sums in
    another order gives the given step's result within the tolerance, always.
    """
    if seed is not None:
        return Problem(seed, shape)
    for _ in range(MAX_DRAWS):
        problem = Problem(secrets.randbits(62), shape)
        if relu_margin(problem) >= KINK_MARGIN:
            return problem
    raise RuntimeError(
        f"no problem at {shape} kept its ReLU inputs {KINK_MARGIN:g} from zero in {MAX_DRAWS} draws"
    )


def relu_margin(problem: Problem) -> float:
    """The smallest ``|input|`` of any ReLU over the problem's training run, replayed batched.

    The replay sums the gradients in the batched order, so its inputs differ from the given step's
    by about 1e-7: far less than :data:`KINK_MARGIN`. A hidden layer's ReLU input is :func:`forward`
    of the layers up to it (the last layer of a forward has no ReLU); the update is
    :func:`given_train`'s."""
    params, batches = make_problem(problem)
    closest = math.inf
    for x, y in batches:
        params = [p.detach().requires_grad_(True) for p in params]
        with torch.no_grad():
            relu_inputs = [forward(params[:end], x) for end in range(2, len(params), 2)]
        closest = min([closest] + [float(h.abs().min()) for h in relu_inputs])
        grads = torch.autograd.grad(F.mse_loss(forward(params, x), y), params)
        with torch.no_grad():
            params = [p - LEARNING_RATE * (g + WEIGHT_DECAY * p) for p, g in zip(params, grads)]
    return closest


def make_problem(
    problem: Problem,
) -> tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
    """The parameters ``[W1, b1, W2, b2, ...]`` (``W`` is out × in) and the ``steps`` batches ``(x,
    y)``.

    Drawn on the CPU from ``problem.seed`` (the same numbers on every machine),
    then moved to the device.
    """
    shape = problem.shape
    generator = torch.Generator().manual_seed(problem.seed)
    params = []
    for _ in range(shape.depth):
        params.append(
            torch.randn(shape.width, shape.width, generator=generator) / math.sqrt(shape.width)
        )
        params.append(torch.randn(shape.width, generator=generator) * 0.1)
    batches = [
        (
            torch.randn(shape.batch, shape.width, generator=generator),
            torch.randn(shape.batch, shape.width, generator=generator),
        )
        for _ in range(shape.steps)
    ]
    params = [p.to(DEVICE) for p in params]
    batches = [(x.to(DEVICE), y.to(DEVICE)) for x, y in batches]
    return params, batches


def forward(params: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The MLP: ``h = h @ W.T + b`` for each layer, with a ReLU between layers (none after the
    last)."""
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i].T + params[i + 1]
        if i < len(params) - 2:
            h = torch.relu(h)
    return h


def given_train(problem: Problem) -> tuple[list[float], list[torch.Tensor]]:
    """``steps`` SGD steps (MSE loss, weight decay): the losses, and the parameters after the last
    step."""
    params, batches = make_problem(problem)
    for p in params:
        p.requires_grad_(True)
    losses, log = [], []
    for x, y in batches:
        grads = [torch.zeros_like(p) for p in params]  # new tensors every step
        total = torch.zeros((), device=x.device)
        for i in range(x.shape[0]):  # one sample at a time
            out = forward(params, x[i : i + 1])
            loss = F.mse_loss(out, y[i : i + 1])
            for g, d in zip(grads, torch.autograd.grad(loss, params)):
                g += d
            total += loss.detach()
        loss = total / x.shape[0]
        log.append(f"loss {loss.item():.5f}")  # a host sync every step
        losses.append(loss.item())
        with torch.no_grad():
            lr = torch.tensor(LEARNING_RATE, device=x.device)  # another new tensor
            for p, g in zip(params, grads):  # five tiny ops per parameter
                g = g / x.shape[0]
                g = g + WEIGHT_DECAY * p
                p -= lr * g
    return losses, [p.detach() for p in params]


# ---------------------------------------------------------------- for the notebook, not graded


def compare(fast_train, shape: Shape = SHAPES[0], *, budget_s: float = 0.3) -> dict:
    """The given step beside ``fast_train``, one thread, fresh seeds every call; medians. Not
    graded."""
    from brrr.timing import bench

    def rotating(fn):
        def call():
            fn(new_problem(shape))
            synchronize()

        return call

    given = bench(
        rotating(given_train), threads=1, budget_s=budget_s, warmup=1, min_runs=5, flush_l2=False
    )
    fast = bench(
        rotating(fast_train), threads=1, budget_s=budget_s, warmup=2, min_runs=5, flush_l2=False
    )
    return {
        "device": DEVICE.type,
        "shape": shape,
        "given": given,
        "fast": fast,
        "speedup": given.median_s / fast.median_s,
    }


def plot_comparison(result: dict, *, stamp: str = ""):
    """Bars of :func:`compare`: ms per training run, the given step against yours."""
    import matplotlib.pyplot as plt

    from brrr.plots import add_stamp

    _, ax = plt.subplots(figsize=(6, 3.2))
    values = [result["given"].median_s * 1e3, result["fast"].median_s * 1e3]
    bars = ax.bar(["given step", "your step"], values, color=["#999999", "#1f77b4"])
    ax.bar_label(bars, fmt="%.3g ms", fontsize=8)
    ax.set_ylabel(f"ms per {result['shape'].steps}-step run (median)")
    ax.set_title(f"{result['speedup']:.1f}x faster, {result['device']}, one thread")
    add_stamp(ax, stamp, bottom=0.18)
    return ax
