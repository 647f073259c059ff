"""Lab 6, FlashAttention forward: a correct kernel passes, wrong ones fail with the right reason, on
this device.

The checks run here as they run in the grader process, against the student's
side served in this process (:class:`brrr.grading.client.LocalStudent`). The
GPU-only timing checks run here too, on a small float32 shape, where the
interpreted kernel must fail them with a message that says what was measured.
"""

import math
import random
import re

import pytest
import torch

import brrr.device  # noqa: F401  (before triton: the interpreter on a CPU)
from brrr import ceilings
from brrr.checks import core, thresholds
from brrr.device import ON_GPU
from brrr.grading.client import LocalStudent
from brrr.labs import flash_attention as fa
from brrr.labs.flash_attention import checks as fa_checks

from lab_fixtures import (
    expected_reason,
    load_module,
    patch_lab,
    solution_on_gpu,
    submission_notebook,
)

LAB = "06-flash-attention"
cpu_only = pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")


def student(name, function="attention", forked=False):
    return LocalStudent(getattr(load_module(LAB, name), function), forked=forked)


# ---------------------------------------------------------------- a correct submission


def test_a_correct_submission_passes_every_cpu_check():
    assert "matches scaled_dot_product_attention's attention" in fa_checks.grade(
        "correct", student("correct")
    )
    assert "causal attention (is_causal=True)" in fa_checks.grade(
        "causal", student("correct", "causal_attention")
    )
    if not ON_GPU:
        summary = fa_checks.grade("traffic", student("correct"))
        assert (
            "moved exactly what FlashAttention moves" in summary
            and "stored nothing but out" in summary
        )
        # at three N drawn for this submission, each odd: BLOCK_M = 64 weighed at N = 512, where it
        # moves half
        assert summary.count("BLOCK_M = 64: ") == 3 and "drawn for this submission" in summary, (
            summary
        )
        assert "at most 0.6× at N = 512" in summary, summary
        sizes = [int(n) for n in re.findall(r"\(\d+, \d+, (\d+), \d+\) float\d+, BLOCK_M", summary)]
        assert all(n % 2 for n in sizes) and sizes == sorted(sizes), summary


@cpu_only
def test_small_blocks_off_the_published_sizes_fail_at_the_drawn_ones():
    """BLOCK_M = 64 at N = 512, the largest published size, where the ceiling used to be weighed,
    and 16 everywhere else: passed. Now every launched BLOCK_M is weighed, at N drawn per
    submission."""
    name = "small_blocks_off_the_published_size"
    recipe = core.record_cases(
        student(name), fa_checks.SPEC, [fa_checks.CEILING_SHAPE], core.fresh_generator(0)[0]
    )
    blocks = fa_checks.launch_blocks("attention", recipe[0].recipe, fa_checks.CEILING_SHAPE)
    assert (
        fa_checks.ceiling_failure("attention", fa_checks.CEILING_SHAPE, blocks) is None
    )  # what the old check saw
    with pytest.raises(AssertionError) as failure:
        fa_checks.grade("traffic", student(name))
    assert expected_reason(LAB, name) in str(failure.value), str(failure.value)


@cpu_only
def test_small_blocks_off_the_published_shape_fail_at_the_drawn_shapes(monkeypatch):
    """64 × 64 blocks at (1, 2, N, 64) float32, where the traffic check counted whatever N it drew,
    and 16 × 16 at every other shape: passed. Now batch, heads, d and dtype are drawn too, each
    taking two values or more across the three shapes, so one of them is off the published shape,
    whatever is drawn."""
    name = "small_blocks_off_the_published_shape"
    with monkeypatch.context() as published:  # what the check used to count at
        published.setattr(
            fa_checks,
            "traffic_shapes",
            lambda rng: [fa.traffic_shape(n) for n in fa_checks.traffic_sizes(rng)],
        )
        fa_checks.grade("traffic", student(name))
    with pytest.raises(AssertionError) as failure:
        fa_checks.grade("traffic", student(name))
    assert expected_reason(LAB, name) in str(failure.value), str(failure.value)


def test_every_dimension_of_the_traffic_shapes_is_drawn_and_takes_two_values_or_more():
    drawn = [fa_checks.traffic_shapes(random.Random(seed)) for seed in range(40)]
    for shapes in drawn:
        for field in ("batch", "heads", "d", "dtype"):
            assert len({getattr(shape, field) for shape in shapes}) >= 2, shapes
        assert [shape.n for shape in shapes] == sorted(shape.n for shape in shapes)
    seen = {
        field: {getattr(s, field) for shapes in drawn for s in shapes}
        for field in ("batch", "heads", "d", "dtype")
    }
    assert seen == {
        "batch": set(fa_checks.BATCHES),
        "heads": set(fa_checks.HEADS),
        "d": set(fa_checks.HEAD_DIMS),
        "dtype": set(fa_checks.DTYPES),
    }
    cases = fa_checks.drawn_correctness_cases(random.Random(1))
    assert all(len({getattr(c, f) for c in cases}) == 2 for f in ("batch", "heads", "d", "dtype"))


# ---------------------------------------------------------------- the rules


def test_the_traffic_rules_by_hand():
    shape = fa.Shape(1, 2, 100, 64)  # 100 queries in blocks of 64: two blocks, the second partial
    once = 2 * 100 * 64 * 4
    assert fa_checks.flash_bytes(shape, 64) == {
        "q": once,
        "k": 2 * once,
        "v": 2 * once,
        "out": once,
    }
    assert fa_checks.naive_bytes(shape) == {
        "q, k, v, out": 4 * once,
        "scores and probabilities": 2 * 4 * 100 * 100 * 4,
    }
    assert fa_checks.score_matrix_bytes(shape) == 2 * 100 * 100 * 4
    assert fa_checks.reference_prediction() == {
        "flash": 64 * 1000 * 64 * 2 * (2 + 2 * 8),
        "naive": 64 * (4 * 1000 * 64 + 4 * 1000 * 1000) * 2,
    }


def test_the_traffic_ceiling_allows_block_m_64_and_refuses_32():
    shape = fa.traffic_shape(fa.TRAFFIC_SIZES[-1])

    def refused(block_m):
        return (
            fa_checks.ceiling_failure("attention", shape, {"BLOCK_M": block_m, "programs": 1})
            is not None
        )

    assert not refused(64) and not refused(128) and not refused(512)
    assert refused(32) and refused(16)


def _recipe(grid, **args):
    return {
        "launches": [
            {"kernel": "k", "grid": grid, "args": {k: {"value": v} for k, v in args.items()}}
        ]
    }


@pytest.mark.parametrize(
    "recipe, reason",
    [
        (_recipe([2, 2, 1], BLOCK_M=64, BLOCK_N=64), None),
        (_recipe([2, 2, 1], BLOCK_M=64), "has no constexpr argument BLOCK_N"),
        (_recipe([2, 1, 1], BLOCK_M=64, BLOCK_N=64), "launched 2 programs"),
        ({"launches": []}, "launched 0 kernels"),
    ],
)
def test_the_blocks_are_read_from_the_launch(recipe, reason):
    shape = fa.Shape(1, 2, 100, 64)
    if reason is None:
        assert fa_checks.launch_blocks("attention", recipe, shape)["programs"] == 4
        return
    with pytest.raises(AssertionError, match=reason):
        fa_checks.launch_blocks("attention", recipe, shape)


# ---------------------------------------------------------------- the inputs do what the lab says


def test_large_logits_overflow_exp_and_rising_logits_raise_the_max_of_nearly_every_row():
    generator, _ = core.fresh_generator(0)
    for shape in fa_checks._CASES:
        q, k, v = fa.make_inputs(shape, generator)
        scores = (q.double() @ k.double().transpose(-2, -1)) * shape.d**-0.5
        if shape.logits == "large":
            assert int((scores > fa_checks.OVERFLOW).sum()) >= 10, (
                shape
            )  # a plain exp() is inf there
        if shape.logits == "rising":
            for block_n in (32, 64, 128):
                running = scores[..., :block_n].amax(-1)
                for start in range(block_n, shape.n, block_n):
                    raised = scores[..., start : start + block_n].amax(-1) > running
                    assert raised.float().mean() > 0.8, (shape, block_n, start)
                    running = torch.maximum(running, scores[..., start : start + block_n].amax(-1))


def test_the_simulated_mistakes_differ_from_the_reference_and_a_right_output_gets_no_hint():
    generator, _ = core.fresh_generator(1)
    inputs = fa.make_inputs(fa.Shape(1, 2, 200, 64, "float32", "rising"), generator)
    right = fa.attention_reference(*inputs)
    assert torch.allclose(
        fa_checks.simulate(*inputs, block_n=64).float(), right, atol=1e-5
    )  # the control
    assert torch.allclose(fa_checks.simulate(*inputs).float(), right, atol=1e-5)
    assert not torch.allclose(
        fa_checks.simulate(*inputs, block_n=64, rescale_acc=False).float(), right, atol=1e-2
    )
    assert (
        fa_checks.diagnose(inputs, right) is None and fa_checks.diagnose(inputs, right + 1) is None
    )
    assert "is not rescaled" in fa_checks.diagnose(
        inputs, fa_checks.simulate(*inputs, block_n=64, rescale_acc=False).float()
    )
    assert "without the causal mask" in fa_checks.diagnose(inputs, right, causal=True)


# ---------------------------------------------------------------- prediction


def test_a_wrong_prediction_names_the_mistake_and_the_rule_but_not_the_answer():
    with pytest.raises(AssertionError) as failure:
        fa_checks.grade("prediction", student("wrong_prediction", "predicted_traffic"))
    message = str(failure.value)
    assert expected_reason(LAB, "wrong_prediction") in message and "The rule:" in message, message
    assert "FlashAttention: your bytes" not in message  # that one is right
    for right in fa_checks.reference_prediction().values():
        assert f"{right:,}" not in message and f"{right}" not in message


@pytest.mark.parametrize(
    "answer, reason",
    [
        ({"flash": 1}, "must return a dict with the keys 'flash' and 'naive'"),
        ({"flash": "1", "naive": 1}, "must be a positive number"),
        ({"flash": 147_456_000, "naive": float("nan")}, "must be a positive number"),
        ({"flash": 147_456_000 * 2, "naive": 544_768_000}, "4 bytes per element"),
        (
            {"flash": 64 * 1000 * 64 * 2 * 4, "naive": 544_768_000},
            "K and V read once: that is the minimum",
        ),
        ({"flash": 147_456_000, "naive": 544_768_000 // 64}, "one head"),
    ],
)
def test_a_malformed_or_inexact_prediction_fails(answer, reason):
    with pytest.raises(AssertionError, match=reason):
        fa_checks.grade("prediction", LocalStudent(lambda: answer, forked=False))


def test_the_reference_prediction_passes():
    answer = fa_checks.reference_prediction()
    assert "predicted the traffic" in fa_checks.grade(
        "prediction", LocalStudent(lambda: answer, forked=False)
    )


# ---------------------------------------------------------------- wrong kernels

WRONG = (
    ("no_rescale", "correct", "attention"),
    ("no_seq_mask", "correct", "attention"),
    ("no_causal_mask", "causal", "causal_attention"),
    ("torch_in_wrapper", "correct", "attention"),
)


@pytest.mark.parametrize("name, check, function", WRONG)
def test_a_wrong_kernel_fails_for_the_right_reason(name, check, function):
    with pytest.raises(AssertionError) as failure:
        fa_checks.grade(check, student(name, function))  # the student side only records launches
    message = str(failure.value)
    assert expected_reason(LAB, name) in message, message
    assert "[on " in message


# ---------------------------------------------------------------- traffic (CPU)


@cpu_only
@pytest.mark.parametrize("name", ("writes_scores", "three_kernels", "small_blocks"))
def test_a_kernel_that_moves_too_much_fails_traffic_for_the_right_reason(name):
    with pytest.raises(AssertionError) as failure:
        fa_checks.grade("traffic", student(name))
    message = str(failure.value)
    assert expected_reason(LAB, name) in message, message
    if name in ("writes_scores", "three_kernels"):  # at the first N drawn, odd, below 192
        found = re.search(r"for \((\d+), (\d+), (\d+), (\d+)\) (float\d+)", message)
        batch, heads, n, d = (int(v) for v in found.groups()[:4])
        shape = fa.Shape(batch, heads, n, d, found.group(5))
        scores = batch * heads * n * n * 4  # these fixtures keep their N × N matrices in float32
        ratio = f"{scores / fa_checks.score_matrix_bytes(shape):.2f}"  # 2.00 for float16 inputs
        assert n % 2 and 65 <= n <= 191, message
    if (
        name == "writes_scores"
    ):  # one N × N matrix per head, labelled by the kernel argument it went through
        assert f"s_ptr   {scores:,} B" in message and ratio in message, message
    if name == "three_kernels":  # the scores and the probabilities, each written and read once
        assert f"{2 * scores:,} B stored outside out" in message and "p_ptr" in message, message
    if name == "small_blocks":
        assert "Nothing was run" in message and "1.83× the 9,437,184 B" in message, message


# ---------------------------------------------------------------- the GPU checks, exercised on a
# CPU


@pytest.fixture
def small_gpu_shape(monkeypatch):
    patch_lab(
        monkeypatch, fa, "TIMED_SHAPE", fa.Shape(1, 1, 64, 32)
    )  # float32: one interpreted program
    monkeypatch.setattr(thresholds, "ATTEMPTS", {"cpu": 1, "gpu": 1})
    monkeypatch.setattr(thresholds, "device_class", lambda: "gpu")
    monkeypatch.setattr(ceilings, "measure_matmul_peak", lambda *a, **k: 1e15)
    monkeypatch.setattr(ceilings, "measure_copy_bandwidth", lambda *a, **k: 10e9)


@cpu_only
@pytest.mark.parametrize(
    "check, baseline",
    [
        ("speed_vs_naive", "naive eager attention"),
        ("speed_vs_sdpa", "scaled_dot_product_attention"),
    ],
)
def test_the_speed_checks_time_the_kernel_against_the_baseline_in_the_same_run(
    small_gpu_shape, check, baseline
):
    with pytest.raises(
        AssertionError
    ) as failure:  # interpreted, the kernel is far slower than torch
        fa_checks.grade(check, student("correct"))
    message = str(failure.value)
    assert "yours " in message and baseline in message and "x its speed" in message, message
    assert f"Needed at least {thresholds.threshold(LAB, check, 'gpu').value:g}x" in message, message
    assert "BLOCK_M = 64, BLOCK_N = 64" in message, message


@cpu_only
def test_a_time_faster_than_the_matmul_peak_allows_is_flagged_as_impossible(
    small_gpu_shape, monkeypatch
):
    monkeypatch.setattr(ceilings, "measure_matmul_peak", lambda *a, **k: 1.0)
    with pytest.raises(AssertionError, match="impossible for a kernel that does the work"):
        fa_checks.grade("speed_vs_naive", student("correct"))


@cpu_only
def test_a_time_faster_than_the_bandwidth_allows_is_flagged_as_impossible(
    small_gpu_shape, monkeypatch
):
    """1 ns a call, read off a stand-in for the rounds: faster than Q, K, V and out at the 10 GB/s
    copy bandwidth the fixture measures (and under the 1e15 FLOP/s peak, so the bytes refuse it)."""
    from brrr import timing
    from brrr.checks import rounds

    def time_rounds(timed, plan, **kwargs):
        return {name: timing.Timing(1e-9, 1e-9, 1e-9, 1, "fake") for name in timed}

    monkeypatch.setattr(rounds, "time_rounds", time_rounds)
    with pytest.raises(
        AssertionError, match="copy bandwidth measured now .* impossible for a kernel"
    ):
        fa_checks.grade("speed_vs_sdpa", student("correct"))


def test_the_timed_n_is_drawn_per_submission_odd_and_compute_bound():
    """N drawn in [3/4, 1] of the published 4096, odd (partial last blocks): attention still does at
    least N / 2 = 1,536 FLOP per byte it must move, five times an H100's ridge (about 300
    FLOP/B)."""
    shapes = [fa_checks.drawn_shape(random.Random(seed)) for seed in range(50)]
    assert len({shape.n for shape in shapes}) > 40
    assert len({shape.batch for shape in shapes}) > 1  # the batch × heads split is drawn too
    assert all(shape.heads_total == fa_checks.TIMED_SHAPE.heads_total for shape in shapes)
    for shape in shapes:
        assert (
            3072 <= shape.n <= 4096 and shape.n % 2 and shape.d == 64 and shape.dtype == "float16"
        )
        assert shape.flops / fa_checks.minimum_bytes(shape) >= 1536


def test_the_notebook_comparisons_run(monkeypatch):
    """The traffic figure's data, counted (CPU) or by the rule (GPU path), and the GPU timing sweep,
    timed with a stand-in clock: each version under its own name."""
    from brrr import timing

    correct = load_module(LAB, "correct").attention
    if not ON_GPU:
        counted = fa.compare_traffic(correct)
        assert counted["counted"] == counted["rule"] and counted["block_m"] == [64, 64, 64]
        assert counted["naive"] == [
            sum(fa_checks.naive_bytes(fa.traffic_shape(n)).values()) for n in fa.TRAFFIC_SIZES
        ]
        assert counted["naive_scores"] == [
            fa_checks.naive_bytes(fa.traffic_shape(n))["scores and probabilities"]
            for n in fa.TRAFFIC_SIZES
        ]
        assert len(fa.plot_traffic(counted).lines) == 3
    patch_lab(monkeypatch, fa, "ON_GPU", True)
    by_rule = fa.compare_traffic(correct)
    assert by_rule["how"] == "rule" and by_rule["counted"] == [None] * 3
    assert by_rule["rule"] == [
        sum(fa_checks.flash_bytes(fa.traffic_shape(n), 64).values()) for n in fa.TRAFFIC_SIZES
    ]
    for (
        block_m,
        table,
    ) in fa.DEMO_FLASH_BYTES.items():  # the notebook's tables are the grader's rule
        assert list(table) == [
            sum(fa_checks.flash_bytes(fa.traffic_shape(n), block_m).values())
            for n in fa.TRAFFIC_SIZES
        ]
    assert (
        not hasattr(fa, "flash_bytes")
        and not hasattr(fa, "naive_bytes")
        and "counting" in fa.HIDDEN_MODULES
    )
    assert len(fa.plot_traffic(by_rule).lines) == 2
    patch_lab(monkeypatch, fa, "GPU_SIZES", (64,))
    seconds = {"yours": 3e-3, "naive": 2e-3, "sdpa": 1e-3}

    def fake_bench_together(fns, **kwargs):
        return {
            name: timing.Timing(seconds[name], seconds[name], seconds[name], 1, "fake")
            for name in fns
        }

    monkeypatch.setattr(timing, "bench_together", fake_bench_together)
    times = fa.compare_times(correct)
    assert times["yours"] == [3e-3] and times["naive"] == [2e-3] and times["sdpa"] == [1e-3]
    assert len(fa.plot_times(times).lines) == 3


def test_the_checks_and_thresholds_agree():
    assert set(fa_checks.CHECKS["cpu"]) | set(fa_checks.CHECKS["gpu"]) == set(fa_checks.ALL_CHECKS)
    for check in fa_checks.ALL_CHECKS:
        device = "cpu" if check in fa_checks.CHECKS["cpu"] else "gpu"
        assert thresholds.threshold(LAB, check, device).why
        other = "gpu" if device == "cpu" else "cpu"
        if check not in fa_checks.CHECKS[other]:
            assert fa_checks.not_applicable(check, other)
    shape = (
        fa_checks.TIMED_SHAPE
    )  # the timed shape's N × N matrices, three of them alive in eager, fit a 15 GB T4
    assert 3 * fa_checks.score_matrix_bytes(shape) < 4e9 and shape.n == 4096 and shape.d == 64
    assert math.ceil(fa.TRAFFIC_SIZES[-1] / 64) == 8


# ---------------------------------------------------------------- the gradebook finds Lab 6


def test_the_gradebook_matches_a_lab_6_submission_and_splices_its_answers(tmp_path):
    from brrr.grading import assemble, gradebook

    snapshot = assemble.Snapshot()
    notebook = submission_notebook(LAB, "no_rescale")
    submission = gradebook.Submission("alice", tmp_path / "alice.ipynb")
    assert gradebook.choose_lab(submission, notebook, None, snapshot) == LAB
    assert gradebook.lab_checks(LAB) == list(fa_checks.CHECKS["gpu" if ON_GPU else "cpu"])
    spliced = assemble.splice(snapshot.labs[LAB], snapshot.answers[LAB], notebook)
    assert sorted(spliced.answers_found) == ["attention", "prediction"]
    assert "acc = acc + tl.dot(" in next(
        c.source for c in spliced.notebook.cells if c.get("id") == "attention"
    )


# ---------------------------------------------------------------- the solution's wrapper, on its
# GPU branch


def test_the_solution_chooses_its_blocks_once_per_dtype_and_head_dim_not_on_every_call(
    tmp_path, monkeypatch
):
    """Lab 5's wrapper, choosing its tiling on every call, lost about 1.1 ms of host time a call to
    it on an H200 (tests/labs/test_grading_tile_it.py). The attention wrapper's blocks_for asks the
    device's compute capability for 16-bit inputs: on its GPU branch, with the device faked and
    counted, it asks once per (dtype, d) over ten calls, not on every one."""
    asked = []
    monkeypatch.setattr(
        torch.cuda, "get_device_capability", lambda *args: asked.append("capability") or (9, 0)
    )
    solution = solution_on_gpu(tmp_path, LAB, "attention", "attention_kernel")
    for d in (64, 128):
        q = torch.ones(1, 2, 48, d, dtype=torch.float16)
        for _ in range(5):
            solution.attention(q, q, q, torch.empty_like(q))
    assert asked == ["capability", "capability"], asked
    options = [kwargs for _, kwargs in solution.launches]
    assert (
        len(options) == 10 and options[:5] == [options[0]] * 5 and options[5:] == [options[5]] * 5
    )
    assert (options[0]["num_stages"], options[5]["BLOCK_N"]) == (
        4,
        128,
    )  # sm_90's blocks: the GPU branch ran
