"""``relu`` against ``gelu``, each compiled to one pass over memory: are activation functions all
one cost?

The essay: "activation functions are nearly all the same cost, despite ``gelu`` obviously consisting
of many more operations than ``relu``", because on a GPU both hide their arithmetic under the time
it takes to stream the tensor in and out. Notebook 10 times the two here, in turns, on a tensor far
above the cache (each reads ``4n`` bytes and writes ``4n``), and sets the ratio beside every
recorded GPU's and the essay's words. On a CPU ``gelu``'s ``erf`` is a long polynomial on a few
lanes, and it need not hide."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from brrr import reference
from brrr.beside import Beside, recorded, three_machines
from brrr.benchmarks.compiling import compile_for_timing

SECTION = "activations"
# gelu within this factor of relu's time is "about the same cost": the bar the fused-chain claim
# sets for a chain of cheap ops against one of them (brrr_book.claims, fused-chain-one-op).
SAME_COST = 1.3
ESSAY = (
    "'activation functions are nearly all the same cost, despite gelu obviously consisting of many "
    "more operations than relu' (A100, argued)"
)


def relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


def gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


@dataclass(frozen=True)
class ActivationCosts:
    relu_s: float  # seconds per call, compiled, one pass
    gelu_s: float

    @property
    def ratio(self) -> float:
        return self.gelu_s / self.relu_s

    @property
    def same_cost(self) -> bool:
        return self.ratio <= SAME_COST

    def result(self) -> str:
        return f"compiled gelu {self.ratio:.2f}x the time of compiled relu"

    def sentence(self) -> str:
        if self.same_cost:
            return (
                f"Here {self.result()}: about the same cost, as the essay says, because gelu's "
                "extra "
                "arithmetic hid under the memory time of the pass."
            )
        return (
            f"Here {self.result()}: not the same cost. gelu's erf is a long polynomial, and on "
            "this "
            "machine its arithmetic takes longer than streaming the tensor, so it does not hide."
        )


def measure(x: torch.Tensor, *, threads: int | None) -> ActivationCosts:
    """Both activations compiled for ``x`` (one fused pass each) and timed in turns."""
    from brrr.benchmarks.fusion import (
        measure_together,
    )  # fusion's timing rules: one thread, in turns

    compiled = {
        name: compile_for_timing(fn, x, threads=threads)
        for name, fn in (("relu", relu), ("gelu", gelu))
    }
    one_pass = 8 * x.numel()
    relu_run, gelu_run = measure_together(
        [(name, lambda fn=fn: fn(x), one_pass) for name, fn in compiled.items()], threads=threads
    )
    return ActivationCosts(relu_run.seconds, gelu_run.seconds)


def record(costs: ActivationCosts) -> None:
    reference.record(
        SECTION, {"relu_s": costs.relu_s, "gelu_s": costs.gelu_s, "ratio": costs.ratio}
    )


def beside(costs: ActivationCosts, stamp: str, folder=None) -> Beside:
    """This machine's ratio beside every recorded GPU's and the essay's words."""
    gpus = [
        (gpu, ActivationCosts(gpu.values["relu_s"], gpu.values["gelu_s"]).result())
        for gpu in recorded(SECTION, folder)
    ]
    return three_machines(
        "Activation functions: gelu against relu, each one fused pass",
        costs.result(),
        stamp,
        gpus,
        ESSAY,
    )
