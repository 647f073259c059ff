"""Rematerialization: train a pointwise-heavy MLP with saved activations, then with recomputation.

The model is a stack of residual MLP blocks whose hidden layer runs a chain of
cheap pointwise ops between its two matmuls (:class:`PointwiseHeavyBlock`). Eager
autograd saves the input of nearly every op for the backward pass, so each
block keeps several hidden-sized tensors alive until the backward reaches it.

Four ways to train it, compared by :func:`compare`:

``eager``
    Saves what autograd saves. Most memory; the pointwise chain is unfused.
``eager + checkpointing``
    ``torch.utils.checkpoint`` keeps only each block's input and reruns the
    block's forward, matmuls included, during the backward. Least memory, and
    slower: the recomputed matmuls cost real FLOPs.
``torch.compile, everything saved`` (the control)
    The same Inductor code generation and fusion, but AOTAutograd's
    ``default_partition`` splits the joint graph: the forward saves every
    intermediate the backward reads, as eager autograd does. What separates it
    from eager is fusion and code generation; rematerialization plays no part.
``torch.compile``
    AOTAutograd's min-cut partitioner (Inductor's default) decides what the
    backward needs. Cheap pointwise ops are recomputed inside the fused backward
    kernels instead of being saved, because rereading a saved tensor costs more
    bandwidth than recomputing it from one that must be read anyway. Against the
    control, the memory and time it saves are rematerialization's alone.

How the control is built (:func:`save_everything_backend`): Inductor's
``compile_fx`` calls the module-level name ``min_cut_rematerialization_partition``
from its ``partition_fn``. The control swaps that name for a call to
``default_partition`` while it compiles, so Inductor's decompositions, joint-graph
passes and code generation stay exactly as in the default. The AOTAutograd
cache is off meanwhile: its key does not see the swap and would hand back the
min-cut graphs. Checked on torch 2.13; torch 2.11 has the same structure. A
torch without that name raises :class:`PartitionerUnavailable`, saying so.
"""

from __future__ import annotations

import inspect
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator
from unittest import mock

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from brrr import units
from brrr.benchmarks.compiling import compile_for_timing
from brrr.device import DEVICE, per_device
from brrr.memory import peak_memory, settle_page_faults
from brrr.timing import Timing, bench, torch_threads

# (batch, width, blocks): on a CPU a step takes about 250 ms on one thread, and what
# eager saves (about 140 MiB) is still far above any cache.
SIZES = per_device(cpu=(4096, 128, 4), gpu=(131072, 256, 4))
EXPANSION = 4


class PointwiseHeavyBlock(nn.Module):
    """``x + down(chain(up(x)))`` where ``chain`` is five cheap pointwise ops on the wide hidden
    layer."""

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
                x = checkpoint(
                    block, x, use_reentrant=False
                )  # keep x only; rerun block in backward
            else:
                x = block(x)
        return x


def make_step(
    model: nn.Module, forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> Callable[[], torch.Tensor]:
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
        text = (
            f"{self.name:<24} step {units.seconds(self.timing.median_s):>9}   peak memory "
            f"{units.binary_bytes(self.peak_bytes):>10}   saved for backward "
            f"{units.binary_bytes(self.saved_bytes):>10}"
        )
        if baseline is not None and baseline is not self:
            text += (
                f"   ({baseline.timing.median_s / self.timing.median_s:.2f}x the speed, "
                f"{self.peak_bytes / baseline.peak_bytes:.2f}x the peak memory of {baseline.name})"
            )
        return text


SAVE_EVERYTHING = "torch.compile, everything saved"
RECOMPUTE = "torch.compile"
VARIANTS = ("eager", "eager + checkpointing", SAVE_EVERYTHING, RECOMPUTE)
COMPILED = (SAVE_EVERYTHING, RECOMPUTE)


class PartitionerUnavailable(RuntimeError):
    """This torch's Inductor does not expose the partitioner the control swaps."""


@contextmanager
def default_partitioner() -> Iterator[None]:
    """Inside the block, Inductor partitions joint graphs with ``default_partition``.

    ``default_partition`` saves what the original forward computed and the
    backward reads: no recomputation. The AOTAutograd cache is switched off so a
    cached min-cut result cannot stand in for this one.
    """
    import torch._functorch.config as functorch_config
    import torch._inductor.compile_fx as inductor_compile
    from torch._functorch.partitioners import default_partition

    name = "min_cut_rematerialization_partition"
    if not hasattr(inductor_compile, name):
        raise PartitionerUnavailable(
            f"torch {torch.__version__}: torch._inductor.compile_fx has no {name} to swap for "
            "default_partition, so the 'everything saved' control cannot be built (checked on "
            "torch 2.11 and 2.13). Compare only eager, checkpointing and torch.compile here."
        )
    accepted = set(inspect.signature(default_partition).parameters)

    def save_everything(joint, joint_inputs, compiler: str = "inductor", **kwargs):
        return default_partition(
            joint, joint_inputs, **{k: v for k, v in kwargs.items() if k in accepted}
        )

    with (
        mock.patch.object(inductor_compile, name, save_everything),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        yield


def save_everything_backend(graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A ``torch.compile`` backend: Inductor, with the joint graph split by ``default_partition``.

    AOTAutograd partitions when the backend is called, before the first forward
    runs, so the swap needs to last only for this call.
    """
    from torch._inductor.compile_fx import compile_fx

    with default_partitioner():
        return compile_fx(graph, example_inputs)


def build(batch: int, width: int, blocks: int, *, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    model = PointwiseHeavyMLP(width, blocks).to(DEVICE)
    x = torch.randn(batch, width, device=DEVICE)
    return model, x


def measure_variant(
    name: str,
    model: PointwiseHeavyMLP,
    x: torch.Tensor,
    *,
    threads: int | None = None,
    budget_s: float | None = None,
) -> VariantResult:
    """Step time, peak memory and saved bytes of one way of training ``model`` on ``x``."""
    if name not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, not {name!r}")
    model.checkpointed = name == "eager + checkpointing"
    compile_s = 0.0
    with torch_threads(threads):
        forward: Callable[[torch.Tensor], torch.Tensor] = model
        if name in COMPILED:
            backend = save_everything_backend if name == SAVE_EVERYTHING else "inductor"
            # traces forward and backward, partitions them, compiles the forward
            compiled = compile_for_timing(model, x, threads=threads, backend=backend)
            forward, compile_s = compiled, compiled.compile_s
        step = make_step(model, forward, x)
        start = time.perf_counter()
        step()  # warm-up; for torch.compile this also compiles the backward
        if name in COMPILED:
            compile_s += time.perf_counter() - start
        peak = peak_memory(step)
        saved = saved_activation_bytes(step)
        settle_page_faults(step)
    timing = bench(
        step,
        threads=threads,
        warmup=1,
        min_runs=3,
        budget_s=budget_s or per_device(cpu=0.5, gpu=0.3),
    )
    model.checkpointed = False
    return VariantResult(name, timing, peak, saved, compile_s)


def hidden_tensors_kept(
    saved_bytes: float, batch: int, width: int, blocks: int, expansion: int = EXPANSION
) -> float:
    """Hidden-sized fp32 tensors per block in ``saved_bytes``, besides each block's input.

    A reading of the measured bytes through the model of the notebook: every block keeps
    its input and some hidden-sized tensors. The parameters and the loss's input, also
    saved, add a few hundredths.
    """
    input_bytes, hidden_bytes = 4 * batch * width, 4 * batch * expansion * width
    return (saved_bytes - blocks * input_bytes) / (blocks * hidden_bytes)


def compare(
    batch: int,
    width: int,
    blocks: int,
    *,
    threads: int | None = None,
    variants: tuple[str, ...] = VARIANTS,
) -> list[VariantResult]:
    """Measure each variant on the same model and input, in order."""
    model, x = build(batch, width, blocks)
    return [measure_variant(name, model, x, threads=threads) for name in variants]


@dataclass(frozen=True)
class Split:
    """What compiling gained over eager, split into fusion (control) and rematerialization.

    ``eager`` to ``saved`` (compiled, everything saved) is code generation and
    fusion; ``saved`` to ``recomputed`` (compiled, min-cut) is rematerialization.
    Each factor is a ratio of the earlier to the later: above 1 means it helped.
    """

    eager: VariantResult
    saved: VariantResult
    recomputed: VariantResult

    @staticmethod
    def of(results: list[VariantResult]) -> "Split":
        by_name = {result.name: result for result in results}
        return Split(by_name["eager"], by_name[SAVE_EVERYTHING], by_name[RECOMPUTE])

    @property
    def fusion_speedup(self) -> float:
        return self.eager.timing.median_s / self.saved.timing.median_s

    @property
    def fusion_memory(self) -> float:
        return self.eager.peak_bytes / self.saved.peak_bytes

    @property
    def remat_speedup(self) -> float:
        return self.saved.timing.median_s / self.recomputed.timing.median_s

    @property
    def remat_noise(self) -> float:
        """How far ``remat_speedup`` may sit from 1 by noise alone: the two timings' spreads,
        added."""
        return self.saved.timing.spread + self.recomputed.timing.spread

    @property
    def remat_memory(self) -> float:
        return self.saved.peak_bytes / self.recomputed.peak_bytes

    @property
    def remat_saved_bytes(self) -> float:
        return self.saved.saved_bytes / self.recomputed.saved_bytes

    def summary(self) -> str:
        return (
            f"fusion and code generation (eager -> compiled, everything saved): "
            f"{self.fusion_speedup:.2f}x the speed, {1 / self.fusion_memory:.2f}x the peak memory\n"
            f"rematerialization (everything saved -> compiled, recomputing):   "
            f"{self.remat_speedup:.2f}x the speed, {1 / self.remat_memory:.2f}x the peak memory, "
            f"{1 / self.remat_saved_bytes:.2f}x the bytes saved for the backward"
        )
