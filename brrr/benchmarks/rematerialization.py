"""Rematerialization: train a pointwise-heavy MLP with saved activations, then with recomputation.

The model is a stack of residual MLP blocks whose hidden layer runs a chain of
cheap pointwise ops between its two matmuls (:class:`PointwiseHeavyBlock`). Eager
autograd saves the input of nearly every op for the backward pass, so each
block keeps several hidden-sized tensors alive until the backward reaches it.

Three ways to train it, compared by :func:`compare`:

``eager``
    Saves what autograd saves. Most memory; the pointwise chain is unfused.
``eager + checkpointing``
    ``torch.utils.checkpoint`` keeps only each block's input and reruns the
    block's forward, matmuls included, during the backward. Least memory, and
    slower: the recomputed matmuls cost real FLOPs.
``torch.compile``
    AOTAutograd's min-cut partitioner decides what the backward needs. Cheap
    pointwise ops are recomputed inside the fused backward kernels instead of
    being saved, because rereading a saved tensor costs more bandwidth than
    recomputing it from one that must be read anyway. Less memory *and* less time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from brrr import units
from brrr.benchmarks.compiling import compile_for_timing
from brrr.device import DEVICE, per_device
from brrr.memory import peak_memory, settle_page_faults
from brrr.timing import Timing, bench, torch_threads

# (batch, width, blocks): CPU sizes keep a step near a few hundred ms on one thread.
SIZES = per_device(cpu=(8192, 128, 4), gpu=(131072, 256, 4))
EXPANSION = 4


class PointwiseHeavyBlock(nn.Module):
    """``x + down(chain(up(x)))`` where ``chain`` is five cheap pointwise ops on the wide hidden layer."""

    def __init__(self, width: int, expansion: int = EXPANSION):
        super().__init__()
        hidden = expansion * width
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)
        self.scale = nn.Parameter(torch.ones(hidden))
        self.shift = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        h = F.relu(h)  # saves its output
        h = h * h  # squared ReLU: saves h
        h = h * self.scale + self.shift  # saves h (for scale's gradient)
        h = h.clamp(max=6.0)  # saves a mask of where it clipped
        h = h * 0.5
        return x + self.down(h)  # down saves its input


class PointwiseHeavyMLP(nn.Module):
    def __init__(self, width: int, blocks: int, *, checkpointed: bool = False):
        super().__init__()
        self.blocks = nn.ModuleList(PointwiseHeavyBlock(width) for _ in range(blocks))
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            if self.checkpointed:
                x = checkpoint(block, x, use_reentrant=False)  # keep x only; rerun block in backward
            else:
                x = block(x)
        return x


def make_step(model: nn.Module, forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """One training step: forward, loss, backward, SGD update."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = forward(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def saved_activation_bytes(step: Callable[[], object]) -> int:
    """Bytes of distinct storages autograd saves for the backward during ``step()``.

    Counted with ``saved_tensors_hooks``: each tensor saved by the forward passes
    through the hook once. Parameters are counted too, as autograd saves them.
    """
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return sum(storages.values())


@dataclass(frozen=True)
class VariantResult:
    name: str
    timing: Timing
    peak_bytes: int
    saved_bytes: int
    compile_s: float = 0.0

    def summary(self, baseline: "VariantResult | None" = None) -> str:
        text = (f"{self.name:<24} step {units.seconds(self.timing.median_s):>9}   peak memory "
                f"{units.binary_bytes(self.peak_bytes):>10}   saved for backward {units.binary_bytes(self.saved_bytes):>10}")
        if baseline is not None and baseline is not self:
            text += (f"   ({baseline.timing.median_s / self.timing.median_s:.2f}x the speed, "
                     f"{self.peak_bytes / baseline.peak_bytes:.2f}x the peak memory of {baseline.name})")
        return text


VARIANTS = ("eager", "eager + checkpointing", "torch.compile")


def build(batch: int, width: int, blocks: int, *, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    model = PointwiseHeavyMLP(width, blocks).to(DEVICE)
    x = torch.randn(batch, width, device=DEVICE)
    return model, x


def measure_variant(name: str, model: PointwiseHeavyMLP, x: torch.Tensor, *, threads: int | None = None,
                    budget_s: float | None = None) -> VariantResult:
    """Step time, peak memory and saved bytes of one way of training ``model`` on ``x``."""
    if name not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, not {name!r}")
    model.checkpointed = name == "eager + checkpointing"
    compile_s = 0.0
    with torch_threads(threads):
        forward: Callable[[torch.Tensor], torch.Tensor] = model
        if name == "torch.compile":
            compiled = compile_for_timing(model, x, threads=threads)  # traces forward and backward, compiles forward
            forward, compile_s = compiled, compiled.compile_s
        step = make_step(model, forward, x)
        start = time.perf_counter()
        step()  # warm-up; for torch.compile this also compiles the backward
        if name == "torch.compile":
            compile_s += time.perf_counter() - start
        peak = peak_memory(step)
        saved = saved_activation_bytes(step)
        settle_page_faults(step)
    timing = bench(step, threads=threads, warmup=1, min_runs=3, budget_s=budget_s or per_device(cpu=0.5, gpu=0.3))
    model.checkpointed = False
    return VariantResult(name, timing, peak, saved, compile_s)


def compare(batch: int, width: int, blocks: int, *, threads: int | None = None,
            variants: tuple[str, ...] = VARIANTS) -> list[VariantResult]:
    """Measure each variant on the same model and input, in order."""
    model, x = build(batch, width, blocks)
    return [measure_variant(name, model, x, threads=threads) for name in variants]
