"""The GPU-only checks of Lab 2, run on a CPU with small sizes so that their code is exercised here.

On a CPU the interpreted kernel is far slower than eager PyTorch, so the timing
checks must fail, with messages that say what was measured and what was needed.
On a GPU these tests are skipped: the real checks run in the solutions and fixtures.
"""

import re
import time

import pytest

import brrr.device  # noqa: F401
from brrr import ceilings
from brrr.checks import thresholds
from brrr.device import ON_GPU
from brrr.grading.client import LocalStudent
from brrr.labs import fuse_it as lab_fuse_it
from brrr.labs.fuse_it import checks as fuse_it_checks

from lab_fixtures import expected_reason, load_module, patch_lab

pytestmark = pytest.mark.skipif(ON_GPU, reason="on a GPU the real timing checks run instead")

SMALL = 20_011


@pytest.fixture
def small_gpu_sizes(monkeypatch):
    patch_lab(monkeypatch, lab_fuse_it, "far_above_cache", lambda element_size=4: SMALL)
    monkeypatch.setattr(thresholds, "ATTEMPTS", {"cpu": 1, "gpu": 1})
    monkeypatch.setattr(thresholds, "device_class", lambda: "gpu")


def test_the_speedup_check_measures_both_and_fails_an_interpreted_kernel(small_gpu_sizes):
    fused_chain = load_module("02-fuse-it", "correct").fused_chain
    with pytest.raises(AssertionError) as failure:
        fuse_it_checks.grade_speedup(LocalStudent(fused_chain))
    message = str(failure.value)
    n = int(re.search(r"n = ([\d,]+) float32", message).group(1).replace(",", ""))
    assert 0.75 * SMALL <= n <= SMALL and n % 32 == 16, (
        message
    )  # drawn per submission under the published size
    assert "2 input sets rotated" in message and "the L2 flushed by reading" in message, (
        message
    )  # the plan
    assert "eager chain" in message and "Needed at least 2x the speed of the eager chain" in message


def test_the_bandwidth_check_compares_with_the_copy_bandwidth_measured_now(
    small_gpu_sizes, monkeypatch
):
    monkeypatch.setattr(ceilings, "measure_copy_bandwidth", lambda *a, **k: 10e9)
    fused_chain = load_module("02-fuse-it", "correct").fused_chain
    with pytest.raises(AssertionError) as failure:
        fuse_it_checks.grade_bandwidth(LocalStudent(fused_chain))
    assert "copy bandwidth measured now" in str(failure.value) and "Needed at least 80%" in str(
        failure.value
    )


def test_a_time_faster_than_the_bytes_allow_is_flagged_as_impossible(small_gpu_sizes, monkeypatch):
    """A kernel timed faster than its bytes can move at the copy bandwidth measured now did not do
    the work."""
    monkeypatch.setattr(
        ceilings, "measure_copy_bandwidth", lambda *a, **k: 1e3
    )  # 1 kB/s: every time is too fast
    with pytest.raises(AssertionError, match="impossible for a kernel that does the work"):
        fuse_it_checks.grade_speedup(LocalStudent(load_module("02-fuse-it", "correct").fused_chain))


def test_a_wrapper_right_on_its_first_call_only_fails_the_timed_check(small_gpu_sizes, monkeypatch):
    """The timed kernels are the launches recorded for the two input sets whose every timed output
    is checked: a wrapper that counts its calls, the fused kernel first and zeros after, fails on
    set 2. Planted: time_rounds with its per-call check removed, this reaches the speed verdict
    instead."""
    monkeypatch.setattr(ceilings, "measure_copy_bandwidth", lambda *a, **k: 10e9)
    name = "right_on_the_first_call_only"
    with pytest.raises(AssertionError) as failure:
        fuse_it_checks.grade_speedup(
            LocalStudent(load_module("02-fuse-it", name).fused_chain, forked=False)
        )
    message = str(failure.value)
    assert expected_reason("02-fuse-it", name) in message and "input set 2" in message, message


def test_the_drawn_timed_size_stays_far_above_the_l2_on_a_t4_and_an_h100(monkeypatch):
    """The band's low end, 3/4 of the published size, is still over 80 times the L2 on a 15 GB T4 (4
    MiB of L2) and 15 times it on an H100 (50 MiB): bandwidth-bound."""
    from brrr.checks import timed

    patch_lab(monkeypatch, lab_fuse_it, "far_above_cache", lambda element_size=4: 2**28)
    for total_bytes, l2, times in (
        (15_828_320_256, 4 * 2**20, 80),
        (85_017_362_432, 50 * 2**20, 15),
    ):
        assert timed.LOW * lab_fuse_it.timed_n(total_bytes=total_bytes) * 4 > times * l2


def _fastest_chain(n: int, calls: int = 20) -> float:
    """Fastest of ``calls`` perf_counter timings of the eager chain on n elements: a second
    opinion."""
    x, y = lab_fuse_it.inputs_for_demo(n)
    lab_fuse_it.chain(x, y)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        lab_fuse_it.chain(x, y)
        times.append(time.perf_counter() - start)
    return min(times)


def test_the_gpu_comparison_for_the_notebook_runs(small_gpu_sizes, monkeypatch):
    patch_lab(monkeypatch, lab_fuse_it, "ON_GPU", True)
    monkeypatch.setattr(ceilings, "measure_copy_bandwidth", lambda *a, **k: 10e9)
    before = _fastest_chain(
        SMALL
    )  # the hand timing brackets the comparison: load only slows a call
    result = lab_fuse_it.compare_with_eager(load_module("02-fuse-it", "correct").fused_chain)
    assert result["device"] == "gpu" and result["n"] == SMALL
    # the derived figures follow from the times and the traffic model (12 and 48 B per element)
    assert result["roofline_s"] == pytest.approx(12 * SMALL / 10e9)
    assert result["fused_bandwidth"] == pytest.approx(12 * SMALL / result["fused_s"])
    assert result["eager_bandwidth"] == pytest.approx(48 * SMALL / result["eager_s"])
    # the times are of the work they name, as ratios in this run: the interpreted kernel runs one
    # program at a time in Python, far slower than five eager ops; and the eager time agrees with a
    # hand timing
    assert result["fused_s"] > 2 * result["eager_s"], result
    hand = min(before, _fastest_chain(SMALL))
    assert 0.7 * hand < result["eager_s"] < 4 * hand, (result["eager_s"], hand)
    ax = lab_fuse_it.plot_comparison(result)
    heights = [bar.get_height() for bar in ax.patches]
    assert heights == pytest.approx(
        [1e3 * result[key] for key in ("eager_s", "fused_s", "roofline_s")]
    )


@pytest.fixture
def build_order(builds_as_on_a_gpu, monkeypatch):
    """Pretend kernels compile (as on a GPU); record each build, and build them interpreted so they
    run here."""
    patch_lab(monkeypatch, lab_fuse_it, "CORRECTNESS_SIZES", (1000, 17))
    patch_lab(
        monkeypatch, lab_fuse_it, "drawn_correctness_sizes", lambda rng: ()
    )  # interpreted here: kept small
    return builds_as_on_a_gpu


def test_an_unmasked_kernel_is_rejected_before_anything_compiled_runs(build_order):
    # On a GPU an out-of-bounds load in a compiled kernel can be an illegal
    # address that leaves the CUDA context unusable for every later check;
    # the interpreted bounds check must reject it first.
    unmasked = load_module("02-fuse-it", "unmasked_load").fused_chain
    with pytest.raises(AssertionError, match=expected_reason("02-fuse-it", "unmasked_load")):
        fuse_it_checks.grade_correct(LocalStudent(unmasked))
    assert build_order == ["interpreted"]


def test_a_masked_kernel_is_bounds_checked_then_compiled(build_order):
    message = fuse_it_checks.grade_correct(
        LocalStudent(load_module("02-fuse-it", "correct").fused_chain)
    )
    assert build_order == ["interpreted", "compiled"]
    assert "bounds checked in the interpreter at n = 1,000, 4,097" in message


def test_the_timed_checks_fit_a_t4(monkeypatch):
    # Two rotated input sets, the copy and the eager chain's intermediates: 16 GiB at the 2**28
    # elements an H100 times, more than a T4's 15 GB. The timed n is bounded by the GPU's memory.
    patch_lab(
        monkeypatch, lab_fuse_it, "far_above_cache", lambda element_size=4: 2**28
    )  # a GPU's 1 GiB
    t4 = 15_828_320_256  # total_memory of a T4, as torch reports it
    n = lab_fuse_it.timed_n(total_bytes=t4)
    assert n * lab_fuse_it.TIMED_BYTES_PER_ELEMENT <= t4 / 2
    assert n * 4 >= 100 * 4 * 2**20  # still a hundred times a T4's 4 MiB L2
    assert lab_fuse_it.timed_n(total_bytes=85_017_362_432) == 2**28  # an H100 times what it did
