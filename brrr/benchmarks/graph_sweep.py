"""CUDA-graph replay against eager over batch sizes: measured on a GPU, or as a recorded GPU
measured it.

Notebook 33 sweeps a small training step over batch sizes, eager against a CUDA-graph replay. A CPU
has no CUDA graphs, so there the page shows the sweep that ``make gpu-check`` recorded on a real GPU
(``overhead/cuda-graphs`` in ``brrr/data/reference/``), labelled recorded, with that GPU's stamp:
the lesson (replay removes a fixed host cost per step, so it gains most at batch 1 and fades as the
kernels grow) is a GPU's, and a reader without one should still see it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from brrr import units
from brrr.beside import recorded

SECTION = "overhead/cuda-graphs"


@dataclass(frozen=True)
class GraphSweep:
    batches: list[int]
    eager_s: list[float]  # seconds per eager training step
    replay_s: list[float]  # seconds per graph replay of the same step
    where: str  # "measured here" or "recorded on <GPU>"
    stamp: str

    @classmethod
    def of_runs(cls, batches: Sequence[int], runs, stamp: str) -> GraphSweep:
        """From ``overhead.graph_vs_eager`` comparisons, one per batch size."""
        return cls(
            list(batches),
            [r.baseline.median_s for r in runs],
            [r.faster.median_s for r in runs],
            "measured here",
            stamp,
        )

    @classmethod
    def recorded(cls, folder=None) -> GraphSweep | None:
        """The first recorded GPU's sweep, or None where no record holds one."""
        for gpu in recorded(SECTION, folder):
            values = gpu.values
            return cls(
                list(values["batches"]),
                list(values["eager_seconds"]),
                list(values["replay_seconds"]),
                f"recorded on {gpu.device}",
                gpu.stamp,
            )
        return None

    @property
    def speedups(self) -> list[float]:
        return [eager / replay for eager, replay in zip(self.eager_s, self.replay_s)]

    def table(self) -> str:
        lines = [f"{'batch':>6} {'eager':>10} {'replay':>10} {'speedup':>8}   ({self.where})"]
        for size, eager, replay, speedup in zip(
            self.batches, self.eager_s, self.replay_s, self.speedups
        ):
            lines.append(
                f"{size:>6} {units.seconds(eager):>10} {units.seconds(replay):>10} {speedup:>7.2f}x"
            )
        return "\n".join(lines + [f"  {self.stamp}"])

    def sentence(self) -> str:
        """The result in one sentence: the gain at the smallest batch and at the largest."""
        first, last = self.speedups[0], self.speedups[-1]
        fades = "fading to" if last < first else "rising to"
        return (
            f"{self.where[:1].upper()}{self.where[1:]}: graph replay ran a training step "
            f"{first:.1f}x faster than "
            "eager at "
            f"batch {self.batches[0]}, {fades} {last:.2f}x at batch {self.batches[-1]}, where the "
            f"replayed step took {units.seconds(self.replay_s[-1])} against eager's "
            f"{units.seconds(self.eager_s[-1])}."
        )

    def plot(self):
        from brrr.plots import loglog_sweep

        return loglog_sweep(
            self.batches,
            {"eager step": self.eager_s, "CUDA-graph replay": self.replay_s},
            xlabel="batch size",
            ylabel="seconds per training step",
            title=f"Graph replay removes the overhead floor ({self.where})",
            stamp=self.stamp,
        )


NO_RECORD = (
    "No GPU here, and no recorded GPU holds this sweep: `make gpu-check` on a GPU node records it "
    f"({SECTION} in brrr/data/reference/)."
)
