"""The grader's number-judging checks on the inputs examples leave out: NaN, inf, negative, zero,
empty, a value exactly on each threshold and one ulp (``math.nextafter``) either side, and attempts
that differ, so that "the best" and "the first" are different answers. Fixed inputs and fakes only:
nothing is timed.

Each case names the planted bug it catches; the bugs are in tests/mutants/mutants.toml."""

import math

import pytest

import brrr.device  # noqa: F401  (before triton: the interpreter on a CPU)
from brrr.checks import core, fairness, thresholds
from brrr.device import ON_GPU
from brrr.grading.client import LocalStudent
from brrr.labs.flash_attention import checks as flash_attention_checks
from brrr.labs.make_it_fast import checks as make_it_fast_checks
from brrr.labs.make_it_fast.given import Problem, Shape
from brrr.labs.one_pass import checks as one_pass_checks
from brrr.labs.roofline import checks as roofline_checks
from brrr.labs.tile_it import checks as tile_it_checks
from brrr.labs.tile_it.given import Shape as MatmulShape, minimum_bytes

pytestmark = pytest.mark.device_independent

NON_FINITE = [float("nan"), float("inf"), float("-inf")]


def up(x: float) -> float:
    return math.nextafter(x, math.inf)


def down(x: float) -> float:
    return math.nextafter(x, -math.inf)


# ---------------------------------------------------------------- the best of several attempts


def attempts_of(values, passes=lambda value: False):
    """A measure function whose attempts read ``values`` in turn; none passes unless ``passes``
    says."""
    given = iter(values)

    def measure(*_):
        value = next(given)
        return core.Attempt(value, passes(value), f"read {value}")

    return measure


@pytest.mark.parametrize("values", [(0.3, 0.7, 0.5), (0.7, 0.3, 0.5), (0.3, 0.5, 0.7)])
def test_when_every_attempt_misses_the_best_one_is_reported_not_the_first_or_the_last(values):
    """Planted: ``repeat_until_pass`` returning the first attempt (or the last) where none
    passed."""
    best, history = core.repeat_until_pass(attempts_of(values), attempts=3)
    assert [a.value for a in history] == list(values)
    assert best.value == 0.7 and best.detail == "read 0.7"


def test_a_negative_attempt_is_still_ranked_by_its_value():
    """A check that reads a distance as a negative value (Lab 1: -|log ratio|): the nearest miss
    wins."""
    best, _ = core.repeat_until_pass(attempts_of([-2.0, -0.1, -5.0]), attempts=3)
    assert best.value == -0.1


def test_the_timed_verdict_keeps_the_best_value_and_every_attempt():
    best, history = core.repeat_until_pass(attempts_of([0.3, 0.7, 0.5]), attempts=3)
    core.taken_figures()
    threshold = thresholds.Threshold(1.0, "at_least", "a test's")
    with pytest.raises(AssertionError, match="attempt 1: read 0.3; attempt 2: read 0.7"):
        core.timed_verdict(best, history, "speed", "at least 1x", threshold)
    (figures,) = core.taken_figures()
    assert figures["value"] == 0.7 and figures["attempts"] == [0.3, 0.7, 0.5]


class QuietWatch:
    """A fairness watch that finds nothing: no attempt voided, no student failure."""

    def __init__(self, pid, what):
        pass

    def judge(self, name):
        pass

    def void(self):
        return False


def test_a_fairly_watched_check_also_reports_the_best_of_attempts_that_differ():
    """Planted: ``repeat_fairly`` returning the first attempt where none passed."""
    best, history = fairness.repeat_fairly(
        attempts_of([0.3, 0.7, 0.5]), 1, "f", "the step", attempts=3, watch=QuietWatch
    )
    assert len(history) == 3 and best.value == 0.7


# ---------------------------------------------------------------- Lab 1: rates and the ridge point


@pytest.mark.parametrize("value", NON_FINITE + [0.0, -0.0, -1.0, -math.inf, True, "12", None, []])
def test_a_rate_that_is_not_a_positive_finite_number_fails(value):
    with pytest.raises(AssertionError):
        roofline_checks._number("copy_bandwidth", value)


@pytest.mark.parametrize("value", [5e-324, 1, 1e300])
def test_any_positive_finite_rate_is_a_number(value):
    assert roofline_checks._number("copy_bandwidth", value) == float(value)


@pytest.mark.parametrize("ridge", [10.0, 0.1, 208.0, 1 / 3])
def test_an_op_exactly_on_the_ridge_is_compute_bound_and_one_ulp_below_is_memory_bound(ridge):
    """Planted: ``>=`` made ``>`` in the lab's rule (the classes check's answer key)."""
    assert roofline_checks.regime_of(ridge, ridge) == "compute-bound"
    assert roofline_checks.regime_of(up(ridge), ridge) == "compute-bound"
    assert roofline_checks.regime_of(down(ridge), ridge) == "memory-bound"


# ---------------------------------------------------------------- the predictions: labs 3, 5 and 6


def prediction_student(softmax, layer_norm):
    def predicted_eager_bytes_per_element():
        return {"softmax": softmax, "layer_norm": layer_norm}

    return LocalStudent(predicted_eager_bytes_per_element, forked=False)


def one_pass_reference():
    return {
        kind: one_pass_checks.eager_bytes_per_element(kind) for kind in ("softmax", "layer_norm")
    }


@pytest.mark.parametrize("bad", NON_FINITE + [0.0, -1.0])
@pytest.mark.parametrize("kind", ["softmax", "layer_norm"])
def test_a_prediction_that_is_not_finite_zero_or_negative_fails(kind, bad):
    """Planted: the finiteness test dropped, so that NaN compares as within the tolerance."""
    right = one_pass_reference()
    assert "predicted" in one_pass_checks.grade_prediction(prediction_student(**right)).lower()
    answer = {**right, kind: bad}
    with pytest.raises(AssertionError):
        one_pass_checks.grade_prediction(prediction_student(**answer))


def answering(value):
    def predicted_traffic():
        return value

    return LocalStudent(predicted_traffic, forked=False)


def lab_5_answers(bad):
    """Lab 5's right prediction, and it with each of its numbers made ``bad`` in turn."""
    right = tile_it_checks.reference_prediction()
    yield right, None
    for key in right:
        for field in ("bytes", "flop_per_byte"):
            yield {**right, key: {**right[key], field: bad}}, f"{key} {field}"


@pytest.mark.parametrize("bad", NON_FINITE + [0, -1.0, True])
def test_a_tiling_prediction_with_a_number_not_finite_and_positive_fails(bad):
    for answer, corrupted in lab_5_answers(bad):
        if corrupted is None:
            assert "32x32" in tile_it_checks.grade_prediction(answering(answer))
            continue
        with pytest.raises(AssertionError, match="must be a positive number"):
            tile_it_checks.grade_prediction(answering(answer))


@pytest.mark.parametrize("bad", NON_FINITE + [0, -1.0, True])
@pytest.mark.parametrize("key", ["flash", "naive"])
def test_an_attention_prediction_not_finite_and_positive_fails(key, bad):
    right = flash_attention_checks.reference_prediction()
    flash_attention_checks.grade_prediction(answering(right))
    with pytest.raises(AssertionError, match="must be a positive number of bytes"):
        flash_attention_checks.grade_prediction(answering({**right, key: bad}))


# ---------------------------------------------------------------- Lab 4: the same losses


def losses_failure(losses, want):
    problem = Problem(seed=0, shape=Shape(batch=1, width=1, depth=1, steps=len(want)))
    return make_it_fast_checks.result_failure("fast_train", [losses, []], (want, []), problem)


@pytest.mark.parametrize("bad", NON_FINITE)
@pytest.mark.parametrize("step", [0, 2])
def test_a_non_finite_loss_is_a_different_loss(bad, step):
    """Planted: the loss comparison written so that NaN compares as a pass."""
    want = [2.0, 1.5, 1.25]
    losses = list(want)
    losses[step] = bad
    failure = losses_failure(losses, want)
    assert failure and f"loss at step {step + 1}" in failure, failure


def test_a_loss_exactly_on_the_tolerance_passes_and_one_ulp_beyond_fails():
    """Where the wanted loss is 0 the tolerance is exactly its absolute floor, 1e-7: on it, either
    sign, passes; one ulp past it fails."""
    assert make_it_fast_checks.thresholds.threshold("04-make-it-fast", "same_result").value > 0
    for on in (1e-7, -1e-7):
        assert losses_failure([on], [0.0]) is None
    for beyond in (up(1e-7), down(-1e-7)):
        assert "loss at step 1" in losses_failure([beyond], [0.0])


def test_losses_of_the_wrong_count_or_none_at_all_fail():
    assert "returned 0 losses for 2 steps" in losses_failure([], [1.0, 1.0])
    assert "returned 3 losses for 2 steps" in losses_failure([1.0, 1.0, 1.0], [1.0, 1.0])


# ---------------------------------------------------------------- Lab 5: a tiling's traffic


# 240³ in float32 with 40 × 48 tiles: a read 5 times, b 6 times, out once: 12 matrices, exactly 4x
# the 3 of the minimum, the bound. 40 × 40 reads b 6 times: 13 matrices, past it.
ON_THE_BOUND = MatmulShape(240, 240, 240)
cpu_only = pytest.mark.skipif(ON_GPU, reason="the traffic bound is a CPU check")


@cpu_only
def test_a_tiling_exactly_on_the_traffic_bound_passes_and_the_next_one_past_it_fails():
    """Planted: ``<=`` made ``<`` in the traffic bound."""
    bound = thresholds.threshold("05-tile-it", "traffic").value
    on = {"BLOCK_M": 40, "BLOCK_N": 48, "programs": 30}
    past = {"BLOCK_M": 40, "BLOCK_N": 40, "programs": 36}
    total = sum(tile_it_checks.tiled_bytes(ON_THE_BOUND, 40, 48).values())
    assert total == bound * minimum_bytes(ON_THE_BOUND)
    assert tile_it_checks.tiling_failure("matmul", ON_THE_BOUND, on) is None
    assert "moves too much" in tile_it_checks.tiling_failure("matmul", ON_THE_BOUND, past)


def counted_as(shape, tiles, **changes):
    """The traffic a kernel moving exactly what ``tiles`` implies would be counted at, with
    ``changes`` (tensor -> bytes added to its loads, or to its stores for out)."""
    implied = tile_it_checks.tiled_bytes(shape, tiles["BLOCK_M"], tiles["BLOCK_N"])
    loaded = {"a": implied["a"] + changes.get("a", 0), "b": implied["b"] + changes.get("b", 0)}
    return {"n": shape, "loaded": loaded, "stored": {"out": implied["out"] + changes.get("out", 0)}}


@pytest.mark.parametrize("tensor", ["a", "b", "out"])
@pytest.mark.parametrize("difference", [1, -1])
def test_one_byte_counted_more_or_less_than_the_tiling_implies_is_seen(tensor, difference):
    """Planted: the counted bytes taken from the rule (the tiling's) instead of the counter's."""
    shape, tiles = MatmulShape(96, 80, 64), {"BLOCK_M": 32, "BLOCK_N": 32, "programs": 9}
    assert tile_it_checks.traffic_failure("matmul", counted_as(shape, tiles), tiles) is None
    failure = tile_it_checks.traffic_failure(
        "matmul", counted_as(shape, tiles, **{tensor: difference}), tiles
    )
    assert failure and "moved other bytes than its tiling implies" in failure
