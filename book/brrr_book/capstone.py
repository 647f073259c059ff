"""The capstone: diagnose a small GPT, apply the fix the diagnosis points to, diagnose again.

A :class:`Setup` says how the GPT's serving step runs (batch, dtype, compiled or
not, attention kind); :func:`build_step` turns it into ``(step, args)`` for
:func:`brrr.diagnose.diagnose`. Each :class:`Fix` changes the setup and names the
regime it addresses. :func:`next_fix` picks, among the fixes not applied yet, the
one that addresses the regime of the tool's top-ranked advice, so the page applies
fixes in the order the tool suggests, not in an order fixed in advance.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Callable

import torch

from brrr import column, targets, units
from brrr.device import DEVICE, ON_GPU, bf16_note, half_precision_dtype, per_device
from brrr.models import gpt
from brrr.roofline import Regime

# torch threads on a CPU: one, as every timed page of the book (two threads on a shared two-core
# machine stall at random); on a GPU, torch's default.
THREADS: int | None = per_device(cpu=1, gpu=None)

# CPU: small enough that batch 1 is overhead-bound on one thread and the page stays quick; GPU: a
# GPT-2-small-like width, where batch 1 leaves the device idle between kernels.
CONFIG = per_device(
    cpu=gpt.GPTConfig(vocab=512, seq_len=32, layers=2, heads=2, width=64),
    gpu=gpt.GPTConfig(vocab=8192, seq_len=256, layers=6, heads=12, width=768),
)
BATCH_GROWTH = per_device(cpu=32, gpu=64)


@dataclass(frozen=True)
class Setup:
    config: gpt.GPTConfig = CONFIG
    batch: int = 1
    dtype: torch.dtype = torch.float32
    compile_mode: str | None = None  # None: eager; "default" or "reduce-overhead" (CUDA graphs)

    @property
    def tokens(self) -> int:
        return self.batch * self.config.seq_len


@dataclass(frozen=True)
class Fix:
    name: str
    regime: str  # the regime it addresses
    apply: Callable[[Setup], Setup]
    why_not_here: Callable[[], str | None] = lambda: (
        None
    )  # why it does not apply on this device; None if it does
    # False where the advice's bound does not cover what the fix changes: a bigger batch changes the
    # work of a step, and SDPA fuses attention's matmuls with the softmax between them, which the
    # fusion bound keeps as separate library calls.
    bounded_by_advice: bool = True


# The 16-bit dtype of the "bf16" fix: bf16 where the hardware has it; on a GPU before Ampere
# (Colab's T4, sm_75) fp16, which its tensor cores run. The step is inference, so fp16 needs no loss
# scaling.
HALF = half_precision_dtype()
HALF_NAME = "bf16" if HALF == torch.bfloat16 else "fp16"


def half_precision_note() -> str:
    """A sentence where the 16-bit fix runs in fp16 instead of bf16, else ""."""
    return bf16_note() if ON_GPU else ""


def _half_not_here() -> str | None:
    """The 16-bit fix applies where its measured matmul peak beats fp32's: on a GPU with tensor
    cores, and on a CPU with bf16 matrix instructions (AMX, AVX512-BF16). Elsewhere it would slow
    the matmuls down."""
    from brrr import ceilings

    peaks = ceilings.measure(threads=THREADS).matmul_peak
    half, fp32 = peaks.get(str(HALF).removeprefix("torch."), 0.0), peaks["float32"]
    if half > fp32:
        return None
    return (
        f"This {'GPU' if ON_GPU else 'CPU'}'s measured {HALF_NAME} matmul peak is "
        f"{units.flops(half)} against {units.flops(fp32)} for float32 (brrr.ceilings): {HALF_NAME} "
        "would slow its matmuls down"
    )


def _cuda_graphs_not_here() -> str | None:
    if ON_GPU:
        return None
    return (
        "A CUDA graph replays recorded kernel launches; a CPU launches none: every op runs on the "
        "calling thread, and torch.compile already removed what a graph would"
    )


FIXES = (
    Fix(
        "bigger batch",
        Regime.OVERHEAD.value,
        lambda s: replace(s, batch=s.batch * BATCH_GROWTH),
        bounded_by_advice=False,
    ),
    Fix(
        "torch.compile",
        Regime.OVERHEAD.value,
        lambda s: replace(s, compile_mode=s.compile_mode or "default"),
    ),
    Fix(
        "SDPA attention",
        Regime.MEMORY.value,
        lambda s: replace(s, config=s.config.with_(sdpa=True)),
        bounded_by_advice=False,
    ),
    Fix(
        f"{HALF_NAME} weights and activations",
        Regime.COMPUTE.value,
        lambda s: replace(s, dtype=HALF),
        why_not_here=_half_not_here,
    ),
    Fix(
        "CUDA graphs (torch.compile mode='reduce-overhead')",
        Regime.OVERHEAD.value,
        lambda s: replace(s, compile_mode="reduce-overhead"),
        why_not_here=_cuda_graphs_not_here,
    ),
)


def applicable(fixes=FIXES) -> tuple[list[Fix], list[tuple[Fix, str]]]:
    """(the fixes that apply on this device, (fix, why not) for those that do not)."""
    reasons = {fix.name: fix.why_not_here() for fix in fixes}
    return (
        [fix for fix in fixes if reasons[fix.name] is None],
        [(fix, reasons[fix.name]) for fix in fixes if reasons[fix.name] is not None],
    )


@dataclass(frozen=True)
class Choice:
    """The fix to apply next, why, and the gain in time per step at most that the advice which chose
    it predicted (None where no advice chose it, or where that bound does not cover the fix: see
    :attr:`Fix.bounded_by_advice`)."""

    fix: Fix
    why: str
    bound: float | None


def next_fix(diagnosis, remaining: list[Fix]) -> Choice:
    """The first remaining fix for the regime of the tool's top-ranked advice (the largest predicted
    gain); if none addresses it, the first remaining fix."""
    for advice in diagnosis.advice[:1]:
        for fix in remaining:
            if fix.regime == advice.regime:
                if fix.bounded_by_advice:
                    return Choice(
                        fix,
                        f"the top advice ({advice.regime}, at most {advice.predicted_gain:.2f}x "
                        f"per step) points to {fix.name}",
                        advice.predicted_gain,
                    )
                return Choice(
                    fix,
                    f"the top advice is {advice.regime}, which points to {fix.name}; its bound "
                    f"(at most {advice.predicted_gain:.2f}x per step) does not cover this fix",
                    None,
                )
    return Choice(
        remaining[0], "no remaining fix addresses the top advice; the next one in the list", None
    )


def pin_threads() -> None:
    """Run this process's torch ops on :data:`THREADS` threads (CPU only), as the diagnoses do."""
    if THREADS is not None:
        torch.set_num_threads(THREADS)


@dataclass(frozen=True)
class Stage:
    """One row of the capstone's table: the setup after ``fix`` (None: the starting point), why the
    fix was chosen, the gain the tool predicted for it at most, and the diagnosis of the step it
    gave."""

    setup: Setup
    fix: Fix | None
    why: str
    predicted_gain: float | None
    diagnosis: object  # brrr.diagnose.Diagnosis

    @property
    def name(self) -> str:
        return "start (batch 1, eager fp32)" if self.fix is None else f"+ {self.fix.name}"

    @property
    def tokens_per_s(self) -> float:
        return self.setup.tokens / self.diagnosis.step_s


def diagnose_setup(setup: Setup):
    """The diagnosis of the serving step under ``setup``, on :data:`THREADS` threads."""
    from brrr.diagnose import diagnose

    step, args = build_step(setup)
    return diagnose(step, *args, threads=THREADS)


def stage_table(stages: list[Stage]) -> str:
    """Step time, tokens/s, MFU and regime after each fix, with the tool's bound beside what it
    gave."""
    return table(stage_rows(stages))


STAGE_WIDTH = 28  # a longer stage name gets a line of its own, whole, above its numbers


def table(rows: list[dict]) -> str:
    """:func:`stage_table` from the JSON rows of :func:`stage_rows` (this run's, or a reference
    GPU's), in lines of at most :data:`brrr.column.WIDTH` characters."""
    header = (
        f"{'stage':<{STAGE_WIDTH}} {'step':>8} {'tokens/s':>10} {'vs start':>8} {'bound':>6} "
        f"{'gave':>6} {'MFU':>5}  regime (share)"
    )
    lines = [header, "-" * (len(header) + 6)]
    previous = None
    for row in rows:
        bound = f"{row['predicted_gain']:.2f}x" if row["predicted_gain"] else "-"
        gave = f"{row['tokens_per_s'] / previous['tokens_per_s']:.2f}x" if previous else "-"
        stage = row["stage"]
        if len(stage) > STAGE_WIDTH:
            lines.append(stage)
            stage = ""
        step = units.seconds(row["step_s"])
        lines.append(
            f"{stage:<{STAGE_WIDTH}} {step:>8} {row['tokens_per_s']:>10,.0f} "
            f"{row['tokens_per_s'] / rows[0]['tokens_per_s']:>7.2f}x {bound:>6} {gave:>6} "
            f"{units.percent(row['mfu']):>5}  {row['regime']} "
            f"({units.percent(row['shares'][row['regime']])})"
        )
        previous = row
    return "\n".join(lines)


# Below this gain a CUDA-graph stage is said to have gained nothing, and the table says why.
GRAPHS_GAINED = 1.05


def graphs_note(before: dict, row: dict) -> str:
    """Why CUDA graphs gave about nothing in a recorded table: the step they were added to was
    already large and compute-bound, where notebook 33's recorded sweep shows replay's gain gone."""
    from brrr.benchmarks.graph_sweep import GraphSweep

    gave = row["tokens_per_s"] / before["tokens_per_s"]
    sweep = GraphSweep.recorded()
    fade = f" Notebook 33's sweep shows the same fade: {sweep.sentence()}" if sweep else ""
    bound = (
        f", against the tool's bound of {row['predicted_gain']:.2f}x"
        if row.get("predicted_gain")
        else ""
    )
    return (
        f"{row['stage'].removeprefix('+ ')} gave {gave:.2f}x{bound}: they remove only the host's "
        f"dispatch of each kernel, and this step, at batch {row['batch']}, was already "
        f"{before['regime']} ({units.percent(before['shares'][before['regime']])} of its time): "
        f"the dispatch a graph removes was not what set its time.{fade}"
    )


def reference_tables() -> list[str]:
    """The capstone's table as ``make gpu-check`` recorded it on each reference GPU, with its
    stamp."""
    from brrr import reference
    from brrr.stamp import format_stamp

    found = []
    for data in reference.load_all().values():
        figure = data.get("figures", {}).get("capstone")
        if figure and figure.get("values", {}).get("rows"):
            rows = figure["values"]["rows"]
            notes = [
                f"{row['stage'].removeprefix('+ ')} gave "
                f"{row['tokens_per_s'] / before['tokens_per_s']:.2f}x, above the tool's bound of "
                f"{row['predicted_gain']:.2f}x: the bound counts only the time of the "
                "regime the fix addresses, and the fix also sped up work the bound left out."
                for before, row in zip(rows, rows[1:])
                if row["predicted_gain"]
                and above_bound(row["tokens_per_s"] / before["tokens_per_s"], row["predicted_gain"])
            ]
            notes += [
                graphs_note(before, row)
                for before, row in zip(rows, rows[1:])
                if "CUDA graphs" in row["stage"]
                and row["tokens_per_s"] / before["tokens_per_s"] < GRAPHS_GAINED
            ]
            found.append(
                column.fit(
                    "\n".join(
                        [
                            table(rows),
                            *notes,
                            in_all(rows[0]["tokens_per_s"], rows[-1]["tokens_per_s"]),
                            format_stamp(figure["env"]),
                        ]
                    )
                )
            )
    return found


def build_step(setup: Setup, *, seed: int = 0):
    """``(step, args)`` for :func:`brrr.diagnose.diagnose`: the GPT's serving step under
    ``setup``."""
    model = gpt.build(setup.config, device=DEVICE, dtype=setup.dtype, seed=seed)
    if setup.compile_mode is not None:
        model = torch.compile(model, mode=setup.compile_mode)
    return gpt.inference_step(model), (
        gpt.synthetic_tokens(setup.config, setup.batch, device=DEVICE),
    )


def conclusions(stages: list[Stage]) -> list[str]:
    """What the table says, one sentence per stage, written from the measurements (so the page's
    words cannot disagree with its numbers)."""
    lines = []
    start = stages[0]
    lines.append(
        f"At batch {start.setup.batch} the step was {start.diagnosis.regime} "
        f"({units.percent(start.diagnosis.shares[start.diagnosis.regime])} of its time), "
        f"at {units.percent(start.diagnosis.mfu)} MFU."
    )
    for before, after in zip(stages, stages[1:]):
        gave = after.tokens_per_s / before.tokens_per_s
        moved = (
            "and the step stayed "
            if after.diagnosis.regime == before.diagnosis.regime
            else "and the step became "
        ) + after.diagnosis.regime
        bound = ""
        if after.predicted_gain is not None:
            bound = f" (within the tool's bound of {after.predicted_gain:.2f}x)"
            if gave > after.predicted_gain:  # over it, if by less than the noise: not "within"
                bound = f" (over the tool's bound of {after.predicted_gain:.2f}x, within the noise)"
            if above_bound(gave, after.predicted_gain):
                bound = (
                    f" (above the tool's bound of {after.predicted_gain:.2f}x, which counts only "
                    f"the {after.fix.regime} time: the fix also sped up work the bound left out)"
                )
        lines.append(
            f"{after.fix.name}: {gave:.2f}x the tokens per second{bound}, {moved} "
            f"({units.percent(after.diagnosis.shares[after.diagnosis.regime])}), "
            f"MFU {units.percent(after.diagnosis.mfu)}."
        )
    lines.append(in_all(start.tokens_per_s, stages[-1].tokens_per_s))
    return lines


# Two diagnoses are two measurements: a gain this much over a bound is noise, not a broken bound.
BOUND_NOISE = 1.05


def above_bound(gave: float, bound: float) -> bool:
    """Whether a fix ``gave`` more than the tool's ``bound`` by more than two measurements'
    noise."""
    return gave > bound * BOUND_NOISE


def in_all(start_tokens_per_s: float, end_tokens_per_s: float) -> str:
    return (
        f"In all: {end_tokens_per_s / start_tokens_per_s:.1f}x the tokens per second of the start."
    )


def stage_rows(stages: list[Stage]) -> list[dict]:
    """The table as JSON, for the reference record of a GPU run."""
    return [
        {
            "stage": stage.name,
            "batch": stage.setup.batch,
            "dtype": str(stage.setup.dtype),
            "compile_mode": stage.setup.compile_mode,
            "sdpa": stage.setup.config.sdpa,
            "step_s": stage.diagnosis.step_s,
            "tokens_per_s": stage.tokens_per_s,
            "mfu": stage.diagnosis.mfu,
            "regime": stage.diagnosis.regime,
            "shares": stage.diagnosis.shares,
            "predicted_gain": stage.predicted_gain,
        }
        for stage in stages
    ]


# ---------------------------------------------------------------- the page's checks

# Pinned in tests/book/test_pinned_targets.py. torch.compile on the overhead-bound start (batch 1,
# eager), timed in turns with eager twice (CompileComparison.measure): its gain with the noise taken
# off, at least this. On the CPU GPT, one thread, a 2-core machine at load 5: gain 1.20-1.49x, noise
# 0-7%, so 1.16-1.48 in 15 readings; a compile that falls back to eager reads 1.0 or less.
COMPILE_BEYOND_NOISE_MIN = 1.05
# The last stage's tokens per second over the start's: the fixes together must gain at least this.
FINAL_OVER_START_MIN = 1.5


def fixes_that_changed_nothing(stages: list[Stage]) -> list[str]:
    """The fixes whose stage runs the same setup as the stage before it: a fix that does nothing."""
    return [
        after.fix.name for before, after in zip(stages, stages[1:]) if after.setup == before.setup
    ]


@dataclass(frozen=True)
class CompileGain:
    """Eager over compiled seconds per step, timed in turns with a second eager call: the two eager
    calls' disagreement is the noise of this run's measurement."""

    ratio: float  # the faster eager call over the compiled one, median over rounds
    noise: float  # how far the median over rounds of eager over eager again lies from 1

    @property
    def beyond_noise(self) -> float:
        """The gain left once the noise is taken off: above 1 where compiling won by more than the
        noise."""
        return self.ratio / (1 + self.noise)


class CompileComparison:
    """``setup``'s step eager and compiled (``compile_mode="default"``), built and compiled once;
    :meth:`measure` times them in turns on :data:`THREADS` threads, as often as asked."""

    def __init__(self, setup: Setup = Setup()):
        from brrr.timing import torch_threads

        self.eager, self.args = build_step(replace(setup, compile_mode=None))
        self.compiled, _ = build_step(replace(setup, compile_mode="default"))
        with torch_threads(THREADS):
            self.compiled(*self.args)  # the compile, outside the timing

    def measure(self, budget_s: float = 0.5) -> CompileGain:
        """Eager, compiled and eager again, one call of each per round
        (:func:`brrr.timing.rounds_in_turns`; on a CPU on the calling thread's clock, which stops
        while another process has the core): the medians over rounds of eager over compiled, and of
        eager over eager again: the same ratio taken of two equal calls, whose distance from 1 is
        this measurement's noise."""
        from brrr.timing import rounds_in_turns

        args = self.args
        # Each eager call follows a compiled one, so that neither eager call runs warm from the
        # other.
        runs = rounds_in_turns(
            {
                "eager": lambda: self.eager(*args),
                "compiled": lambda: self.compiled(*args),
                "eager again": lambda: self.eager(*args),
                "compiled again": lambda: self.compiled(*args),
            },
            threads=THREADS,
            on_cpu_clock=THREADS == 1 and not ON_GPU,
            budget_s=budget_s,
        )
        rounds = list(
            zip(runs["eager"], runs["compiled"], runs["eager again"], runs["compiled again"])
        )
        ratio = statistics.median(
            min(e, e_again) / max(c, c_again) for e, c, e_again, c_again in rounds
        )
        control = statistics.median(
            e / e_again for e, _, e_again, _ in rounds
        )  # 1 but for the noise
        return CompileGain(ratio, max(control, 1 / control) - 1)


def check(stages: list[Stage], compile_gain: Callable[[], CompileGain]) -> None:
    """The capstone's claims, enforced (:mod:`brrr.targets`: a miss fails the build, a reader sees
    it): each fix changed the setup; compiling beat eager on the overhead-bound start by more than
    the noise, by :data:`COMPILE_BEYOND_NOISE_MIN` (``compile_gain()``, e.g.
    :meth:`CompileComparison.measure`, asked again on a miss); the end served
    :data:`FINAL_OVER_START_MIN` times the start's tokens per second."""
    unchanged = fixes_that_changed_nothing(stages)
    with targets.said_only_if_missed():  # met, they keep quiet on the page
        targets.check(not unchanged, f"fixes that left the setup as it was: {', '.join(unchanged)}")
        targets.require(
            "torch.compile over eager on the overhead-bound start, beyond two eager timings' "
            "disagreement",
            COMPILE_BEYOND_NOISE_MIN,
            compile_gain().beyond_noise,
            lambda: compile_gain().beyond_noise,
        )
        targets.require(
            "tokens per second, the last stage over the start",
            FINAL_OVER_START_MIN,
            stages[-1].tokens_per_s / stages[0].tokens_per_s,
        )
