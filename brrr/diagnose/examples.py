"""Three steps, one per regime, for trying the tool and for its tests.

Each function builds a step and returns ``(step, args)``, the shape that
``python -m brrr.diagnose module:callable`` expects::

    python -m brrr.diagnose brrr.diagnose.examples:tiny_mlp

big_matmul
    one square fp32 matmul, ``2·n³`` FLOPs on ``3·n²·4`` bytes: ``n/6`` FLOPs per
    byte, far above any machine's ridge point: compute-bound.
pointwise_chain
    a chain of cheap element-wise ops (multiply, add, abs) on a tensor far above
    the last-level cache (:func:`brrr.device.far_above_cache`); each op reads and
    writes the whole tensor for one FLOP per element: memory-bound.
tiny_mlp
    a small MLP at batch 1, in inference: each op's work takes less time than
    dispatching it: overhead-bound.
"""

from __future__ import annotations

import torch

from brrr.device import DEVICE, ON_GPU, far_above_cache

BIG_MATMUL_N = 4096 if ON_GPU else 1024
CHAIN_OPS = 6
TINY_MLP_WIDTH = 32
TINY_MLP_LAYERS = 8


def big_matmul(n: int = BIG_MATMUL_N):
    """``a @ b`` for two n×n fp32 matrices."""
    a = torch.randn(n, n, device=DEVICE)
    b = torch.randn(n, n, device=DEVICE)

    def step(a, b):
        return a @ b

    return step, (a, b)


def pointwise_chain(elements: int | None = None, ops: int = CHAIN_OPS):
    """``ops`` element-wise ops in a row (multiply, add, abs, ...) on a tensor far above cache."""
    x = torch.randn(elements or far_above_cache(4), device=DEVICE)

    chain = [lambda y: y * 1.5, lambda y: y + 0.5, torch.abs]

    def step(x):
        y = x
        for index in range(ops):
            y = chain[index % len(chain)](y)
        return y

    return step, (x,)


class TinyMLP(torch.nn.Module):
    """Linear, LayerNorm, GELU and a residual add per layer, as people write a small MLP block."""

    def __init__(self, width: int = TINY_MLP_WIDTH, layers: int = TINY_MLP_LAYERS):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()
            )
            for _ in range(layers)
        )
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def tiny_mlp(width: int = TINY_MLP_WIDTH, layers: int = TINY_MLP_LAYERS):
    """Inference of :class:`TinyMLP` on one example (batch 1)."""
    torch.manual_seed(0)
    model = TinyMLP(width, layers).to(DEVICE).eval()
    x = torch.randn(1, width, device=DEVICE)

    def step(model, x):
        with torch.no_grad():
            return model(x)

    return step, (model, x)
