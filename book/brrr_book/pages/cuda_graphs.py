"""Notebook 33 (CUDA graphs): its verdict, this device's target, its record and its sentence."""

from __future__ import annotations

from dataclasses import dataclass

from brrr import reference, targets, units
from brrr.benchmarks import overhead
from brrr.benchmarks.graph_sweep import NO_RECORD, SECTION, GraphSweep
from brrr.beside import recorded
from brrr_book.claims import glue_text, judge_compile_overhead, publish
from brrr.column import fit
from brrr.device import ON_GPU


@dataclass
class Page:
    """What notebook 33 measured."""

    stamp: str  # overhead.measured_stamp()
    batches: list[int]  # the sweep's batch sizes
    graph_runs: list[overhead.Comparison]  # eager against replay per batch (GPU; empty on a CPU)
    sweep: (
        GraphSweep | None
    )  # this GPU's sweep, or the recorded GPU's on a CPU (None: none recorded)
    reduce_overhead: overhead.Comparison | None  # mode="reduce-overhead" at batch 1 (GPU)
    tiny: overhead.Comparison  # fifty tiny ops, compiled against eager


def finish(page: Page) -> None:
    """Publish the compile-overhead claim, enforce this device's target (``overhead.TARGETS``: a
    miss is measured again, and three fail the build), record the GPU's figures, glue the sweep's
    sentence.

    On a GPU the target model is narrower than the sweep's: its weights and gradients fit in half
    the L2 (``overhead.graph_target_shape``), so the step is host overhead, not the SGD update
    streaming from memory."""
    tiny = page.tiny
    publish(judge_compile_overhead(tiny.speedup), page.stamp)
    glue_text("graph-sweep", page.sweep.sentence() if page.sweep else NO_RECORD)
    if not ON_GPU:
        with targets.said_only_if_missed():
            overhead.require(tiny)
        return
    target_shape = overhead.graph_target_shape()
    print(
        fit(
            f"target model: {target_shape.depth} layers of width {target_shape.width}, chosen from "
            "this GPU's L2 cache"
        )
    )
    with targets.said_only_if_missed():
        at_target = overhead.require(overhead.measure_target("cuda"))
    print(fit(at_target))
    reduce_overhead = page.reduce_overhead
    if reduce_overhead is not None:
        print(
            fit(
                f'torch.compile(mode="reduce-overhead") at batch 1: {reduce_overhead.speedup:.1f}x '
                "over eager"
            )
        )
    reference.record(
        "overhead/cuda-graphs",
        {
            "batches": page.batches,
            "eager_seconds": [r.baseline.median_s for r in page.graph_runs],
            "replay_seconds": [r.faster.median_s for r in page.graph_runs],
            "reduce_overhead_batch1_seconds": reduce_overhead.faster.median_s,
            "tiny_ops_eager_seconds": tiny.baseline.median_s,
            "tiny_ops_compiled_seconds": tiny.faster.median_s,
        },
    )


def recorded_reduce_overhead(folder=None) -> str | None:
    """``torch.compile(mode="reduce-overhead")`` at batch 1 against eager, as the first recorded GPU
    measured it."""
    for gpu in recorded(SECTION, folder):
        eager, graphs = gpu.values["eager_seconds"][0], gpu.values["reduce_overhead_batch1_seconds"]
        return (
            f"{eager / graphs:.2f}x over eager ({units.seconds(graphs)} against "
            f"{units.seconds(eager)} per step; the optimizer step stays eager)\n  {gpu.stamp}"
        )
    return None
