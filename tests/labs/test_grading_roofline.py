"""Lab 1's checks reject wrong answers with the right reason (the solution passing is shown by
solutions/).

The checks run as in the grader process, against the student's side served in
this process (:class:`brrr.grading.client.LocalStudent`).
"""

import itertools
import re
import statistics
import time

import pytest
import torch

import brrr.device  # noqa: F401
from brrr.checks import thresholds
from brrr.device import DEVICE, ON_GPU, synchronize
from brrr.grading.client import LocalStudent
from brrr.labs import roofline as lab_roofline
from brrr.labs.roofline import checks as roofline_checks
from brrr.timing import torch_threads

from lab_fixtures import never_starved, patch_lab  # noqa: F401 (a fixture)


# What the checks say of a wrong number, not the grader's refusal to time when starved; the student
# runs in this process, so there are no student processes to judge.
pytestmark = pytest.mark.usefixtures("never_starved")


@pytest.fixture
def small_copy(monkeypatch):
    """A smaller copy than the lab's (still above the cache), to keep the test quick; the student
    and brrr.ceilings both use it."""
    patch_lab(monkeypatch, lab_roofline, "COPY_N", 2**24)  # 64 MiB: DRAM, where copy_ is steady
    monkeypatch.setattr(thresholds, "ATTEMPTS", {"cpu": 2, "gpu": 2})


@pytest.fixture
def copy_long_enough_to_time(monkeypatch):
    """For the checks that a call took as long as its work: the small copy on a CPU; on a GPU the
    lab's own (a gibibyte and more), since 64 MiB copies there in 50 µs, less than one call to the
    student's process takes, and a number typed in could not be told from one measured."""
    if not ON_GPU:
        patch_lab(monkeypatch, lab_roofline, "COPY_N", 2**24)
    monkeypatch.setattr(thresholds, "ATTEMPTS", {"cpu": 2, "gpu": 2})


def outside_the_band() -> str:
    """The start of the message for a rate outside this device's tolerance (±35% on a CPU, ±15% on a
    GPU)."""
    return re.escape(
        f"is not {thresholds.threshold(lab_roofline.LAB, 'copy_bandwidth').describe()}"
    )


def timed_copies(n, bytes_per_element):
    src = torch.randn(n, device=DEVICE)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(20):
        synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        synchronize()
        times.append(time.perf_counter() - start)
    return bytes_per_element * n / statistics.median(times)


def test_counting_only_the_reads_is_outside_the_tolerance(small_copy):
    """A 2x error against a ±35% tolerance. The tolerance is generous to honest students on a noisy
    machine (any attempt may pass), so one grading in three may let a 2x error through when load
    happens to catch the reference readings and not the calls between them; two of three must not.
    (A band reaching down to the lower reading let it through 3 of 3 times beside a book build; one
    call between two readings, 2 of 3 in CI: the pairs of _grade_ceiling are the answer to that.)"""

    def copy_bandwidth(n):
        with torch_threads(
            1
        ):  # the reference is single-threaded; two threads copy nearly 2x faster
            return timed_copies(n, 4)  # forgets the 4n bytes written

    messages, gradings = [], 0
    while (
        gradings < 3 and len(messages) < 2
    ):  # a third grading only where one of the first two passed it
        gradings += 1
        try:
            roofline_checks.grade_copy_bandwidth(LocalStudent(copy_bandwidth))
        except AssertionError as failure:
            messages.append(str(failure))
    assert len(messages) >= 2, f"a 2x error passed {gradings - len(messages)} of 3 gradings"
    message = messages[0]
    assert "is not within ±" in message and "attempt 2:" in message and "brrr.ceilings" in message


def test_a_reference_reading_taken_under_load_does_not_widen_the_band(small_copy, monkeypatch):
    """One depressed reading (6 GB/s among readings of 12) lowers the two pairs beside it, not the
    median of the attempt: half the machine's rate still fails. Deterministic: the readings are
    fixed."""
    from brrr import ceilings

    readings = itertools.cycle([12e9, 12e9, 6e9, 12e9, 12e9, 12e9])
    monkeypatch.setattr(
        ceilings, "measure_copy_bandwidth", lambda n, threads=None, budget_s=None: next(readings)
    )

    def copy_bandwidth(n):
        time.sleep(0.05)  # longer than the copy takes at 12 GB/s: the call is not instant
        return 6.5e9

    with pytest.raises(AssertionError, match=outside_the_band()):
        roofline_checks.grade_copy_bandwidth(LocalStudent(copy_bandwidth))


def test_an_honest_call_between_a_slow_and_a_fast_reading_passes(small_copy, monkeypatch):
    """The regression of issue 24: under bursty load every other reading was slow (4.5 and 12 GB/s),
    and an honest rate (the mean of them) was judged against the higher one, 0.61x, and failed.
    Against the mean of the readings beside it, it sits at 1.0x."""
    from brrr import ceilings

    readings = itertools.cycle([4.5e9, 12e9])
    monkeypatch.setattr(
        ceilings, "measure_copy_bandwidth", lambda n, threads=None, budget_s=None: next(readings)
    )

    def copy_bandwidth(n):
        time.sleep(0.05)
        return (4.5e9 * 12e9) ** 0.5

    assert "1.00x" in roofline_checks.grade_copy_bandwidth(LocalStudent(copy_bandwidth))


def test_a_typed_in_number_is_rejected(copy_long_enough_to_time):
    with pytest.raises(AssertionError, match="cannot have timed it"):
        roofline_checks.grade_copy_bandwidth(LocalStudent(lambda n: 12e9))


def test_a_number_timed_once_and_then_repeated_is_rejected(copy_long_enough_to_time):
    """One slow call proves nothing (noise can make an instant return look slow: a descheduled
    process, a collection): the first call here really measures, later ones return that number at
    once."""
    remembered = []

    def copy_bandwidth(n):
        if not remembered:
            with torch_threads(1):
                remembered.append(timed_copies(n, 8))
        return remembered[0]

    with pytest.raises(AssertionError, match="cannot have timed it"):
        roofline_checks.grade_copy_bandwidth(LocalStudent(copy_bandwidth))


def test_a_rate_that_is_not_a_positive_number_is_rejected(small_copy):
    with pytest.raises(AssertionError, match="a rate must be a positive, finite number"):
        roofline_checks.grade_copy_bandwidth(LocalStudent(lambda n: float("nan")))


def test_a_miss_beyond_doubt_ends_at_the_first_attempt_and_a_near_miss_gets_every_attempt(
    small_copy, monkeypatch
):
    """A rate 12x low (a patched clock, a wrong unit) is not measured again; one 0.54x low, the size
    of a wrong byte count, is measured again as often as a near miss. Deterministic: the readings
    are fixed."""
    from brrr import ceilings

    monkeypatch.setattr(
        ceilings, "measure_copy_bandwidth", lambda n, threads=None, budget_s=None: 12e9
    )
    calls = []

    def copy_bandwidth_returning(rate):
        def copy_bandwidth(n):
            calls.append(rate)
            time.sleep(0.02)  # longer than the copy takes at 12 GB/s: the call is not instant
            return rate

        return copy_bandwidth

    for rate, attempts in ((1e9, 1), (6.5e9, 2)):  # small_copy allows two attempts
        calls.clear()
        with pytest.raises(AssertionError, match=outside_the_band()) as failure:
            roofline_checks.grade_copy_bandwidth(LocalStudent(copy_bandwidth_returning(rate)))
        assert len(calls) == attempts * roofline_checks.PAIRS, (rate, len(calls))
        message = str(failure.value)
        assert f"attempt {attempts}:" in message and f"attempt {attempts + 1}:" not in message, (
            message
        )
        assert ("not measured again" in message) == (attempts == 1), message


def test_a_matmul_peak_in_the_wrong_unit_is_rejected(monkeypatch):
    """A student who times the matmul honestly but returns GFLOP/s: a billion times off, outside any
    noise."""
    patch_lab(
        monkeypatch, lab_roofline, "MATMUL_N", 256
    )  # a smaller matmul, for the student and brrr.ceilings
    monkeypatch.setattr(thresholds, "ATTEMPTS", {"cpu": 1, "gpu": 1})

    def matmul_peak(n, dtype):
        a, b = (
            torch.randn(n, n, device=DEVICE, dtype=dtype),
            torch.randn(n, n, device=DEVICE, dtype=dtype),
        )
        torch.mm(a, b)
        times = []
        for _ in range(20):
            synchronize()
            start = time.perf_counter()
            torch.mm(a, b)
            synchronize()
            times.append(time.perf_counter() - start)
        return 2 * n**3 / statistics.median(times) / 1e9  # GFLOP/s, not FLOP/s

    with pytest.raises(AssertionError) as failure:
        roofline_checks.grade_matmul_peak(LocalStudent(matmul_peak))
    message = str(failure.value)
    assert "matmul_peak(256, " in message and "is not within ±" in message, message
    assert "a 256x256" in message and "brrr.ceilings" in message and "attempt 1:" in message, (
        message
    )


def test_the_ridge_point_is_peak_over_bandwidth():
    roofline_checks.grade_ridge_point(LocalStudent(lambda peak, bandwidth: peak / bandwidth))
    with pytest.raises(AssertionError, match="the ridge point is peak / bandwidth"):
        roofline_checks.grade_ridge_point(LocalStudent(lambda peak, bandwidth: bandwidth / peak))


def correct_count(op):
    return roofline_checks.reference_count(op).flops, roofline_checks.reference_count(op).bytes


def test_a_wrong_count_names_the_op_and_the_numbers():
    roofline_checks.grade_intensities(LocalStudent(correct_count, lab_roofline.WIRE_TYPES))

    def five_flop_layer_norm(op):
        flops, moved = correct_count(op)
        return (flops * 5 / 7, moved) if op.kind == "layer_norm" else (flops, moved)

    with pytest.raises(AssertionError) as failure:
        roofline_checks.grade_intensities(
            LocalStudent(five_flop_layer_norm, lab_roofline.WIRE_TYPES)
        )
    message = str(failure.value)
    assert (
        "1 of 6 ops are counted wrong" in message and "layer norm" in message and "FLOPs" in message
    )


def test_a_count_that_is_not_a_pair_is_rejected():
    with pytest.raises(AssertionError, match=r"must return \(flops, bytes\)"):
        roofline_checks.grade_intensities(LocalStudent(lambda op: 1.0, lab_roofline.WIRE_TYPES))


def test_classes_follow_the_measured_ridge(monkeypatch):
    patch_lab(
        monkeypatch, lab_roofline, "_measured", {"copy_bandwidth": 10e9, "matmul_peak": 100e9}
    )  # ridge 10
    roofline_checks.grade_classes(
        LocalStudent(
            lambda intensity, ridge: "compute-bound" if intensity >= ridge else "memory-bound"
        )
    )
    with pytest.raises(AssertionError, match="classified wrong"):
        roofline_checks.grade_classes(LocalStudent(lambda intensity, ridge: "memory-bound"))
    with pytest.raises(AssertionError, match="not written yet"):
        roofline_checks.grade_classes(
            LocalStudent(lambda i, r: (_ for _ in ()).throw(NotImplementedError("stub")))
        )


def test_the_solution_passes_the_correctness_checks_20_times_in_20(monkeypatch):
    patch_lab(
        monkeypatch, lab_roofline, "_measured", {"copy_bandwidth": 10e9, "matmul_peak": 100e9}
    )
    for _ in range(20):
        roofline_checks.grade_ridge_point(
            LocalStudent(lambda peak, bandwidth: peak / bandwidth, forked=False)
        )
        roofline_checks.grade_intensities(
            LocalStudent(correct_count, lab_roofline.WIRE_TYPES, forked=False)
        )
        roofline_checks.grade_classes(
            LocalStudent(lambda i, r: "compute-bound" if i >= r else "memory-bound", forked=False)
        )
