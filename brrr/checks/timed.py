"""The GPU performance checks of the kernel labs: the student's kernels timed as the grader launches them.

Runs in the grader process. The student's wrapper is asked which kernels it
launches for two input sets of the timed size; the grader builds those kernels
itself, times them on the two sets in rotation (so no set stays in the L2 cache
between calls), together with the copy bandwidth and the baseline, all in the
same run, and afterwards checks every output the timed calls wrote. A time
below what the bytes need at the measured copy bandwidth is flagged as
impossible. Thresholds come from :mod:`brrr.checks.thresholds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from brrr import units
from brrr.checks import core, isolation, thresholds
from brrr.device import TRITON_INTERPRETED

# A kernel faster than its bytes at this multiple of the measured copy bandwidth is impossible.
IMPOSSIBLE_OVER_COPY = 1.25


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


def check(student, lab: str, check_name: str, spec: core.Spec, timed: TimedCase, *, bandwidth: bool) -> str:
    """Run :func:`measure` in a forked child where it can, so that a fault in a kernel fails only this check."""
    outcome = isolation.run(measure, student, lab, check_name, spec, timed, bandwidth=bandwidth)
    if not outcome.ok:
        if outcome.error_type == "AssertionError":
            raise AssertionError(outcome.error.removeprefix("AssertionError: "))
        raise core.fail(f"{student.name} could not be timed: {outcome.error}")
    return outcome.value


def measure(student, lab: str, check_name: str, spec: core.Spec, timed: TimedCase, *, bandwidth: bool) -> str:
    """The fraction of the copy bandwidth (``bandwidth``) or the speedup over the baseline, by the threshold."""
    from brrr import ceilings
    from brrr.checks import kernels
    from brrr.timing import bench

    name = student.name
    threshold = thresholds.threshold(lab, check_name)
    generator, seed = core.fresh_generator()
    cases = core.record_cases(student, spec, (timed.case, timed.case), generator)  # two sets, rotated
    built = core.build_kernels(name, cases, interpreted=TRITON_INTERPRETED)  # interpreted: tests on a CPU
    sets = []
    for recorded in cases:
        out = torch.full_like(recorded.expected, float("nan"))
        storages = dict(zip(spec.input_names, recorded.inputs)) | {spec.out_name: out}
        storages |= kernels.scratch_tensors(recorded.recipe, out.device)
        sets.append((recorded, out, storages))
    run_next = core.rotating(sets, lambda entry: kernels.replay(entry[0].recipe, built, entry[2]))
    baseline_next = core.rotating(sets, lambda entry: timed.baseline(*entry[0].inputs))

    def attempt() -> core.Attempt:
        copy = ceilings.measure_copy_bandwidth(timed.copy_n)
        fused = bench(run_next, budget_s=0.3)
        if fused.median_s < timed.moved / (copy * IMPOSSIBLE_OVER_COPY):
            raise core.fail(
                f"{name}'s kernels took {units.seconds(fused.median_s)} for {timed.label}, less than the "
                f"{units.seconds(timed.moved / copy)} that {timed.moved / 1e9:.2f} GB need at the copy "
                f"bandwidth measured now ({units.bandwidth(copy)}): impossible for a kernel that does the work."
            )
        if bandwidth:
            achieved = fused.rate(timed.moved)
            fraction = achieved / copy
            return core.Attempt(
                fraction,
                fraction >= threshold.value,
                units.fraction_of(achieved, copy, "B/s", "copy bandwidth measured now", thresholds=(threshold.value,)),
            )
        baseline = bench(baseline_next, budget_s=0.3)
        speedup = baseline.median_s / fused.median_s
        return core.Attempt(
            speedup,
            speedup >= threshold.value,
            f"{units.ratio(speedup, (threshold.value,))}: yours {units.seconds(fused.median_s)}, "
            f"{timed.baseline_name} "
            f"{units.seconds(baseline.median_s)}",
        )

    best, history = core.repeat_until_pass(attempt)
    core.check_timed_outputs(
        name, spec.out_name, [(out, recorded.expected) for recorded, out, _ in sets], seed, kernels="kernels"
    )
    needed = (
        f"at least {threshold.value:.0%} of the copy bandwidth"
        if bandwidth
        else f"at least {threshold.value:g}x the speed of {timed.baseline_name}"
    )
    moved = f"{name} on {timed.label} ({timed.moved / 1e9:.2f} GB moved per call)"
    return core.timed_verdict(best, history, f"{name} on {timed.label}", needed, threshold, failed=moved)
