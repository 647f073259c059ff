"""The GPU performance checks of the kernel labs: the student's kernels timed as the grader launches
them.

Runs in the grader process. The timed size is drawn per submission within a band
under the lab's published size (:func:`timed_size`). The student's wrapper is
asked which kernels it launches for two input sets of that size; the grader
builds those kernels itself and times them on the two sets in rotation, in the
same rounds as the baseline (:mod:`brrr.checks.rounds`: the whole device
synchronized, the L2 flushed by reading, every call's output poisoned before and
checked after), with the copy bandwidth measured in the same run. A time below
what the bytes need at the measured copy bandwidth is refused as impossible.
Thresholds come from :mod:`brrr.checks.thresholds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from brrr import units
from brrr.checks import core, isolation, rounds, thresholds
from brrr.device import TRITON_INTERPRETED

# A kernel faster than its bytes at this multiple of the measured copy bandwidth is impossible.
OVER_ROOF = 1.25
SETS = 2  # input sets rotated; each call is also preceded by an L2 flush (brrr.checks.rounds.plan)
# The timed size is drawn per submission in [LOW x the published size, the published size]: the
# published size is at least 8x the L2 and 1 GiB per tensor (brrr.device.far_above_cache), or half
# the GPU's memory (a 15 GB T4: 0.5 GiB, over a hundred times its 4 MiB L2), so 3/4 of it stays far
# above the L2 and the kernels stay bandwidth-bound (tests/grading/test_grading_gpu_paths.py checks
# the band on an H100 and a T4).
LOW = 0.75
# ... and a multiple of ALIGN elements, not of 2 x ALIGN: Triton specializes an integer argument
# divisible by 16, so a kernel's loads stay vectorized as at the published size (an odd n makes the
# mask, and so every load, one element wide: slower for a reason the lab is not about), while no
# block of 32 or more divides it, so the last block is partial and the mask is exercised.
ALIGN = 16


@dataclass(frozen=True)
class TimedCase:
    """What one timed check times: the case handed to ``spec.make_inputs``, and how it is measured.

    ``label`` names the case in messages ("n = 268,435,456 float32 elements"),
    ``moved`` is the bytes one call of a one-pass kernel moves, ``copy_n`` the
    float32 elements of the copy it is compared with, and ``baseline`` (with its
    ``baseline_name``) what the speedup check compares with, called on the inputs.
    """

    case: Any
    label: str
    moved: int
    copy_n: int
    baseline: Callable[..., Any]
    baseline_name: str


def timed_size(published: int) -> int:
    """A size in ``[LOW x published, published]``, :data:`ALIGN` modulo twice it, drawn from the
    OS's randomness in the grader."""
    rng, _ = core.size_drawer()
    return rounds.drawn(rng, published, low=LOW, align=ALIGN)


def check(
    student, lab: str, check_name: str, spec: core.Spec, timed: TimedCase, *, bandwidth: bool
) -> str:
    """Run :func:`measure` in a forked child where it can, so that a fault in a kernel fails only
    this check."""
    outcome = isolation.run(measure, student, lab, check_name, spec, timed, bandwidth=bandwidth)
    if not outcome.ok:
        if outcome.error_type == "AssertionError":
            raise AssertionError(outcome.error.removeprefix("AssertionError: "))
        raise core.fail(f"{student.name} could not be timed: {outcome.error}")
    return outcome.value


def measure(
    student, lab: str, check_name: str, spec: core.Spec, timed: TimedCase, *, bandwidth: bool
) -> str:
    """The fraction of the copy bandwidth (``bandwidth``) or the speedup over the baseline, by the
    threshold.

    The kernels timed are the ones recorded for the input sets whose every timed output is checked
    (:func:`brrr.checks.rounds.time_checked`): a wrapper that launches one kernel on its first call
    and another afterwards is timed, and checked, on both.

    Long: the inputs, the timed entries, the attempt and the verdict share the recorded launches;
    split, they would pass them from function to function."""
    from brrr import ceilings
    from brrr.checks import kernels

    name = student.name
    threshold = thresholds.threshold(lab, check_name)
    generator, seed = core.fresh_generator()
    cases = core.record_cases(student, spec, (timed.case,) * SETS, generator)
    built = core.build_kernels(
        name, cases, interpreted=TRITON_INTERPRETED
    )  # interpreted: tests on a CPU
    outs, calls, scratch = [], [], []
    for recorded in cases:
        out = torch.full_like(recorded.expected, float("nan"))
        storages = dict(zip(spec.input_names, recorded.inputs)) | {spec.out_name: out}
        scratch.append(kernels.scratch_tensors(recorded.recipe, out.device))
        storages |= scratch[-1]
        outs.append(out)
        calls.append(
            lambda recipe=recorded.recipe, storages=storages: kernels.replay(
                recipe, built, storages
            )
        )
    entries = {
        "yours": rounds.Timed(
            calls,
            outs,
            [recorded.expected for recorded in cases],
            scratch=[list(buffers.values()) for buffers in scratch],
            inputs=[dict(zip(spec.input_names, recorded.inputs)) for recorded in cases],
        )
    }
    if not bandwidth:
        entries["baseline"] = rounds.Timed(
            [lambda inputs=c.inputs: timed.baseline(*inputs) for c in cases]
        )
    plan = rounds.plan(sum(t.nbytes for t in cases[0].inputs) + outs[0].nbytes, sets=SETS)

    def attempt() -> core.Attempt:
        copy = ceilings.measure_copy_bandwidth(timed.copy_n)
        times = rounds.time_checked(
            name, entries, plan, budget_s=0.3, out_name=spec.out_name, seed=seed
        )
        fused = times["yours"]
        impossible = rounds.below_roof(
            f"{name}'s kernels on {timed.label}",
            fused.median_s,
            moved=timed.moved,
            bandwidth=copy,
            over=OVER_ROOF,
        )
        if impossible:
            raise core.fail(impossible)
        if bandwidth:
            achieved = fused.rate(timed.moved)
            fraction = achieved / copy
            return core.Attempt(
                fraction,
                fraction >= threshold.value,
                units.fraction_of(
                    achieved,
                    copy,
                    "B/s",
                    "copy bandwidth measured now",
                    thresholds=(threshold.value,),
                ),
            )
        baseline = times["baseline"]
        speedup = baseline.median_s / fused.median_s
        return core.Attempt(
            speedup,
            speedup >= threshold.value,
            f"{units.ratio(speedup, (threshold.value,))}: yours {units.seconds(fused.median_s)}, "
            f"{timed.baseline_name} {units.seconds(baseline.median_s)} (timed in the same rounds)",
        )

    best, history = core.repeat_until_pass(attempt)
    needed = (
        f"at least {threshold.value:.0%} of the copy bandwidth"
        if bandwidth
        else f"at least {threshold.value:g}x the speed of {timed.baseline_name}"
    )
    moved = (
        f"{name} on {timed.label} ({timed.moved / 1e9:.2f} GB moved per call; {plan.describe()})"
    )
    return core.timed_verdict(
        best,
        history,
        f"{name} on {timed.label}, drawn for this submission ({plan.describe()})",
        needed,
        threshold,
        failed=moved,
    )
