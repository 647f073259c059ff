"""Notebook 10 (``cos`` against ``cos().cos()``): its verdicts, targets, record and sentences."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from brrr import reference, targets, units
from brrr.benchmarks import activations, fusion
from brrr.beside import recorded
from brrr_book.claims import (
    Verdict,
    glue_text,
    judge_cos_cos,
    judge_fused_chain,
    judge_fusion_cuts_bytes,
    publish,
)
from brrr.device import ON_GPU
from brrr.kernels import pointwise

Measurement = fusion.Measurement


@dataclass
class Page:
    """What notebook 10 measured, and the calls that measure it again."""

    x: torch.Tensor
    copy: float  # the copy roof the page divides by, bytes/s
    eager_cos: Measurement
    eager_cos_cos: Measurement
    fused_cos: Measurement
    fused_cos_cos: Measurement
    triton_cos_cos: Measurement | None  # timed on a GPU only
    compiled_cos: Callable
    compiled_cos_cos: Callable
    triton_out: torch.Tensor | None  # the Triton kernel's output buffer (GPU)
    cos_factors: fusion.Factors  # eager, compiled twice, fused x.cos().cos()
    cheap: fusion.Factors  # the same three for (x*1.5+0.5).abs()
    rates: dict[int, float]  # cosines/s of compiled chains, in cache
    eager_rate: float  # cosines/s of eager x.cos(), in cache
    activations: activations.ActivationCosts
    fusion_verdict: Verdict | None = None  # the essay's example judged here, once finish has run

    @property
    def n(self) -> int:
        return self.x.numel()

    def variants(self) -> list[tuple[Measurement, int, int, bool]]:
        """(result, cosines per element, passes over memory, eager or not), as the page's model."""
        rows = [
            (self.eager_cos, 1, 1, True),
            (self.eager_cos_cos, 2, 2, True),
            (self.fused_cos, 1, 1, False),
            (self.fused_cos_cos, 2, 1, False),
        ]
        if self.triton_cos_cos:
            rows.append((self.triton_cos_cos, 2, 1, False))
        return rows

    def calls(self) -> dict[str, Callable[[], object]]:
        """Each timed variant's call, by its label."""
        x = self.x
        calls = {
            self.eager_cos.label: lambda: fusion.cos_eager(x),
            self.eager_cos_cos.label: lambda: fusion.cos_cos_eager(x),
            self.fused_cos.label: lambda: self.compiled_cos(x),
            self.fused_cos_cos.label: lambda: self.compiled_cos_cos(x),
        }
        if self.triton_cos_cos:
            calls[self.triton_cos_cos.label] = lambda: pointwise.cos_cos(x, out=self.triton_out)
        return calls


def finish(page: Page) -> None:
    """Publish the page's three claims, enforce its speed targets and its model, record, glue."""
    _chain_claims(page)
    _speedup_targets(page)
    _model_bounds(page)
    _one_graph_each(page)
    reference.record(
        "cos-cos",
        {
            "n": page.n,
            "copy_bandwidth": page.copy,
            **{
                result.label: {"seconds": result.seconds, "bandwidth": result.bandwidth}
                for result, *_ in page.variants()
            },
        },
    )
    activations.record(page.activations)  # for the GPU record (make gpu-check)
    _glue(page)


def _chain_claims(page: Page) -> None:
    """Fusion of the cheap chain: bytes cut, and a fused chain costing about one op. A miss is
    measured again by the chain target's own timing (``fusion.time_chain``,
    ``fusion.measure_target``)."""
    n = page.n

    def chain_over_one_op_again():
        separate, fused = fusion.time_chain(n)
        return fused.seconds / (separate.seconds / 3)

    publish(
        judge_fused_chain(
            page.cheap.fused.seconds, page.cheap.separate.seconds / 3, chain_over_one_op_again
        )
    )
    if fusion.has_target("chain_fusion_speedup"):  # fusion's own CPU target
        with targets.said_only_if_missed():
            fusion.require(
                "chain_fusion_speedup",
                page.cheap.fusion,
                lambda: fusion.measure_target("chain_fusion_speedup", n, page.copy).measured,
            )


def _speedup_targets(page: Page) -> None:
    """This device's fusion targets (``fusion.TARGETS``). The compiled one's first reading is the
    control's, where eager and fused were timed in turns; a miss is measured again by
    ``fusion.measure_target``. On a GPU a speedup counts as a fraction of the one the roofline
    predicts from this machine's cosine rate and copy bandwidth."""
    first = {"cos_cos_compiled_speedup": page.cos_factors.total}
    predicted = None
    if ON_GPU:
        first["cos_cos_triton_speedup"] = fusion.speedup(page.eager_cos_cos, page.triton_cos_cos)
        predicted = fusion.predicted_cos_cos_speedup(page.n, page.copy, fusion.cos_rate())
        print(f"the roofline predicts {predicted:.2f}x for fusing x.cos().cos() here")
    with targets.said_only_if_missed():
        for check, speedup in first.items():
            fusion.require(
                check,
                fusion.target_value(check, speedup, predicted),
                lambda check=check: fusion.measure_target(check, page.n, page.copy).measured,
            )


def _model_bounds(page: Page) -> None:
    """Each variant's time at least its roofline time (less the noise of the timing and the roof)
    and at most twice it; a miss is timed again, in turns with a copy and the cosine roof's kernels.
    Then the cos().cos() claim, judged against the same roofs."""
    n, copy = page.n, page.copy
    rate = max(page.rates.values())
    calls = page.calls()
    with targets.said_only_if_missed():
        for result, cosines, passes, eager in page.variants():

            def ratio_again(result=result, cosines=cosines, passes=passes, eager=eager):
                return fusion.model_ratio_in_turns(
                    calls[result.label], n, cosines, passes, eager=eager
                )

            targets.require_between(
                f"{result.label}: measured over the roofline's time",
                fusion.MODEL_FLOOR,
                fusion.MODEL_CEILING,
                fusion.model_ratio(
                    result, n, cosines, passes, copy, page.eager_rate if eager else rate
                ),
                ratio_again,
            )
    memory_s = fusion.cos_cos_bytes(n, fused=True) / copy
    two_cos_over_memory = 2 * n / rate / memory_s
    page.fusion_verdict = publish(
        judge_fusion_cuts_bytes(page.cos_factors.fusion, page.cheap.fusion, two_cos_over_memory)
    )
    publish(judge_cos_cos(page.fused_cos_cos.seconds, page.fused_cos.seconds, two_cos_over_memory))


def _one_graph_each(page: Page) -> None:
    """The fused x.cos().cos() and the fused cheap chain each compile to one graph: a count, which a
    graph break misses whole where the speed targets above miss it by a few percent. Last: counting
    resets dynamo (:func:`brrr.benchmarks.compiling.graphs`), and a target missed above times its
    compiled calls again."""
    small = page.x[:1024]  # traced only: the size does not matter
    with targets.said_only_if_missed():
        fusion.require_one_graph("compiled x.cos().cos()", fusion.cos_cos_eager, small)
        fusion.require_one_graph("compiled (x*1.5+0.5).abs()", fusion.cheap_chain_eager, small)


def recorded_sentence(folder=None) -> str:
    """The essay's example as each recorded GPU measured it, in one plain sentence each (the
    record's ``cos-cos`` figures: nothing typed), or that none has."""
    found = recorded("cos-cos", folder)
    if not found:
        return (
            "No GPU has recorded x.cos().cos() yet: `make gpu-check` on a GPU node records it "
            "(brrr/data/reference/)."
        )
    return " ".join(_on_the_gpu(gpu.device, gpu.values, gpu.env.get("date", "?")) for gpu in found)


def _on_the_gpu(device: str, values: dict, date: str) -> str:
    eager, fused, one = (
        values[label]["seconds"]
        for label in ("eager x.cos().cos()", "compiled x.cos().cos()", "compiled x.cos()")
    )
    return (
        f"On the recorded {device} ({date}), eager x.cos().cos() took {units.seconds(eager)} and "
        f"the fused one {units.seconds(fused)}: {eager / fused:.2f}x faster, and "
        f"{fused / one:.2f}x the time of one compiled x.cos()."
    )


def here_sentence(page: Page) -> str:
    """This machine's result in one plain sentence: eager, fused, and what fusion alone bought."""
    factors = page.cos_factors
    return (
        f"Here eager x.cos().cos() took {units.seconds(factors.eager.seconds)} and the fused one "
        f"{units.seconds(factors.fused.seconds)}, {factors.total:.2f}x eager's speed; the same "
        f"compiled cosine in two kernels took {units.seconds(factors.separate.seconds)}, so one "
        f"kernel instead of two ran {factors.fusion:.2f}x as fast."
    )


def _glue(page: Page) -> None:
    """The sentences of the page's opening and its "What it means", from this run's numbers."""
    factors, cheap = page.cos_factors, page.cheap
    glue_text("cos-cos-here", here_sentence(page))
    verdict = page.fusion_verdict
    glue_text(
        "cos-cos-why",
        "As on the GPU, the time fell with the bytes."
        if verdict is None or verdict.held
        else f"Why it differs: {verdict.why}.",
    )
    glue_text(
        "cos-factors",
        (
            f"Here eager to fused x.cos().cos() was {factors.total:.2f}x: code generation "
            f"{factors.codegen:.2f}x times fusion {factors.fusion:.2f}x. The cheap chain's fusion "
            f"was {cheap.fusion:.2f}x, its code generation {cheap.codegen:.2f}x."
        ),
    )
    glue_text(
        "cos-rates",
        (
            "Here the chains of "
            + ", ".join(str(k) for k in page.rates)
            + " cosines ran at "
            + ", ".join(units.si(r, "cos/s") for r in page.rates.values())
            + "."
        ),
    )
    glue_text("activations", page.activations.sentence())
