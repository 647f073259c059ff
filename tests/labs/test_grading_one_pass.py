"""Lab 3, one pass: correct submissions pass, wrong ones fail with the right reason, on this device.

The checks run here as they run in the grader process, against the student's
side served in this process (:class:`brrr.grading.client.LocalStudent`). The
GPU-only timing checks run here too, on small sizes, where the interpreted
kernel must fail them with a message that says what was measured.
"""

import re

import pytest
import torch

import brrr.device  # noqa: F401  (before triton: the interpreter on a CPU)
from brrr import ceilings
from brrr.checks import core, thresholds
from brrr.device import ON_GPU
from brrr.grading.client import LocalStudent
from brrr.labs import one_pass
from brrr.labs.one_pass import checks as one_pass_checks

from lab_fixtures import expected_reason, load_module, patch_lab, submission_notebook

LAB = "03-one-pass"
cpu_only = pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")


def student(name, function=None, forked=False):
    module = load_module(LAB, name)
    function = function or ("layer_norm" if hasattr(module, "layer_norm") else "softmax")
    return LocalStudent(getattr(module, function), forked=forked)


def traffic_of(kind: str, submission, case=None) -> dict:
    """CPU: the kernels' traffic at ``case`` (by default the first drawn case), counted in the
    interpreter whatever values they compute (for ``traffic_failure``)."""
    case = case or one_pass_checks.traffic_cases(core.size_drawer()[0])[0]
    return core.count_traffic(submission, one_pass_checks.SPECS[kind], case)


# ---------------------------------------------------------------- correct submissions


@pytest.mark.parametrize("kind", one_pass.KINDS)
def test_a_correct_submission_passes_correctness_and_traffic(kind):
    name = f"correct_{kind}"
    assert "match" in one_pass_checks.grade(f"{kind}_correct", student(name))
    if not ON_GPU:
        summary = one_pass_checks.grade(f"{kind}_traffic", student(name))
        assert "loaded x once and stored out once" in summary, summary
        if kind == "layer_norm":  # four rows per program: weight and bias once per program
            assert "(weight and bias" in summary and "1 launch" in summary, summary
        assert "cases drawn for this submission" in summary and summary.count(" programs") == 2, (
            summary
        )


@cpu_only
def test_a_grid_larger_than_the_rows_need_earns_no_allowance():
    """Four rows per program over one program per row: weight and bias loaded once per row passed
    "at most once per program" when every launched program counted. Now a program that stores
    nothing is refused, and only programs that did work count towards the allowance."""
    traffic = traffic_of("layer_norm", student("idle_programs_layer_norm"), one_pass.TRAFFIC_ROWS)
    before = {
        key: value for key, value in traffic.items() if key != "storing"
    }  # every program counted
    assert one_pass_checks.traffic_failure("layer_norm", "layer_norm", before) is None
    assert "rows' worth over 16 programs" in one_pass_checks.traffic_failure(
        "layer_norm", "layer_norm", traffic
    )
    with pytest.raises(AssertionError) as failure:
        one_pass_checks.grade("layer_norm_traffic", student("idle_programs_layer_norm"))
    assert expected_reason(LAB, "idle_programs_layer_norm") in str(failure.value), str(
        failure.value
    )


def test_the_prediction_of_the_solution_passes_and_a_wrong_one_fails_with_the_count():
    right = LocalStudent(lambda: {"softmax": 32.0, "layer_norm": 48}, forked=False)
    assert "32 B per element" in one_pass_checks.grade("prediction", right)
    with pytest.raises(AssertionError) as failure:
        one_pass_checks.grade(
            "prediction", student("wrong_prediction", "predicted_eager_bytes_per_element")
        )
    message = str(failure.value)
    assert expected_reason(LAB, "wrong_prediction") in message
    assert "amax: reads 1, writes 0" in message and "The rules:" in message, message


@pytest.mark.parametrize(
    "answer, reason",
    [
        ({"softmax": 32}, "must return a dict"),
        ({"softmax": 32, "layer_norm": "48"}, "must be a number"),
        ({"softmax": 32, "layer_norm": float("nan")}, "must be a number"),
        ({"softmax": 32.5, "layer_norm": 48}, "softmax: you predicted 32.5"),
    ],
)
def test_a_malformed_or_inexact_prediction_fails(answer, reason):
    with pytest.raises(AssertionError, match=reason):
        one_pass_checks.grade("prediction", LocalStudent(lambda: answer, forked=False))


def test_the_predicted_count_follows_the_unfused_code(monkeypatch):
    """The reference answer is counted from the ops the unfused function runs, not typed in."""
    assert one_pass_checks.eager_bytes_per_element("softmax") == 32
    assert one_pass_checks.eager_bytes_per_element("layer_norm") == 48

    def softmax_with_a_copy(x):
        return one_pass.softmax_unfused(x.clone())  # one more op: reads x, writes the copy

    monkeypatch.setitem(one_pass.UNFUSED, "softmax", softmax_with_a_copy)
    assert one_pass_checks.eager_bytes_per_element("softmax") == 40
    # views move nothing; every tensor, not only x's size, is counted when asked
    assert one_pass_checks.count_eager(lambda x: x.view(-1), torch.randn(3, 5)) == []
    assert one_pass_checks.eager_bytes_per_element("layer_norm", rule=False) > 48


def test_the_notebooks_table_of_eager_bytes_is_the_graders_count():
    """The notebook's comparison reads the unfused and torch bytes from a table; the counter that
    made it stays with the grader (no count_eager or eager_traffic in the lab's package)."""
    case = one_pass.TRAFFIC_ROWS
    for kind in one_pass.KINDS:
        inputs = one_pass_checks._counting_inputs(kind, case.rows, case.cols)
        ops = one_pass_checks.count_eager(one_pass.FUSED_TORCH[kind], *inputs)
        torch_bytes = (
            sum(nbytes for op in ops for _, nbytes in op["reads"] + op["writes"]) / case.numel
        )
        unfused = one_pass_checks.eager_traffic(kind, case.rows, case.cols)
        assert one_pass.DEMO_EAGER_BYTES_PER_ELEMENT[kind] == {
            "unfused": unfused,
            "torch": torch_bytes,
        }, kind
    assert not hasattr(one_pass, "count_eager") and not hasattr(one_pass, "eager_traffic")


# ---------------------------------------------------------------- wrong submissions

WRONG = {  # fixture -> the function it defines; each fails correctness
    "no_max_softmax": "softmax",
    "zero_padding_softmax": "softmax",
    "unmasked_softmax": "softmax",
    "store_past_out": "softmax",
    "torch_in_wrapper": "softmax",
    "unbiased_variance": "layer_norm",
    "half_accumulation": "layer_norm",
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_submission_fails_correctness_for_the_right_reason(name):
    kind = WRONG[name]
    with pytest.raises(AssertionError) as failure:
        one_pass_checks.grade(
            f"{kind}_correct", student(name)
        )  # the student side only records launches
    message = str(failure.value)
    assert expected_reason(LAB, name) in message, message
    assert "[on " in message


ONE_PASS_BROKEN = {  # right values, wrong traffic
    "two_pass_softmax": "softmax",
    "weight_per_row": "layer_norm",
    "two_kernels": "layer_norm",
}


@cpu_only
@pytest.mark.parametrize("name", sorted(ONE_PASS_BROKEN))
def test_a_correct_kernel_that_moves_too_much_fails_traffic(name):
    kind = ONE_PASS_BROKEN[name]
    with pytest.raises(
        AssertionError
    ) as failure:  # the traffic check compares the values first: they are right
        one_pass_checks.grade(f"{kind}_traffic", student(name))
    message = str(failure.value)
    assert expected_reason(LAB, name) in message and "moved the wrong number of bytes" in message, (
        message
    )


@cpu_only
def test_the_traffic_rule_alone_rejects_a_wrapper_whose_kernel_never_stores_out():
    failure = one_pass_checks.traffic_failure(
        "softmax",
        "softmax",
        traffic_of("softmax", student("torch_in_wrapper")),
    )
    assert failure is not None and "stored anything into out" in failure and "y_ptr" in failure, (
        failure
    )


@cpu_only
def test_the_traffic_rule_passes_one_pass_whatever_its_values():
    """Why the values come first: no max subtraction in one pass moves exactly the bytes a right
    answer does."""
    traffic = traffic_of("softmax", student("no_max_softmax"))
    assert one_pass_checks.traffic_failure("softmax", "softmax", traffic) is None


def test_the_diagnoses_name_the_mistake_and_nothing_else():
    x, weight, bias = one_pass.inputs_for_demo("layer_norm", 4, 33)
    right = one_pass.layer_norm_reference(x, weight, bias)
    assert one_pass_checks.diagnose_layer_norm((x, weight, bias), right) is None  # the control
    d = x - x.mean(-1, keepdim=True)
    unbiased = d / torch.sqrt(x.var(-1, keepdim=True) + one_pass.EPS) * weight + bias
    assert "unbiased" in one_pass_checks.diagnose_layer_norm((x, weight, bias), unbiased)
    (s,) = one_pass.inputs_for_demo("softmax", 4, 33)
    assert one_pass_checks.diagnose_softmax((s,), one_pass.softmax_reference(s)) is None
    assert (
        one_pass_checks.diagnose_softmax((s,), one_pass.softmax_reference(s) * 1.01) is None
    )  # wrong, but not that
    s[0] += 1000.0  # where a softmax without the max subtraction is told apart
    e = torch.exp(s)
    assert "without subtracting the row maximum" in one_pass_checks.diagnose_softmax(
        (s,), e / e.sum(-1, keepdim=True)
    )


def test_the_hard_rows_break_what_they_are_planted_for():
    """The planted rows overflow a softmax without the max subtraction and a float16 sum."""
    generator, _ = core.fresh_generator(0)
    (x,) = one_pass.make_softmax_inputs(one_pass.Rows(3, 17), generator)
    e = torch.exp(x)
    naive = e / e.sum(-1, keepdim=True)
    assert naive[:2].isnan().all() and one_pass.softmax_reference(x).isfinite().all()
    assert x[2].isinf().sum() == 6 and one_pass.softmax_reference(x)[2, 1::3].eq(0).all()
    x, _, _ = one_pass.make_layer_norm_inputs(one_pass.Rows(3, 4097, "float16"), generator)
    assert x[0].sum(dtype=torch.float16).isinf() and x[0].float().sum().isfinite()


# ---------------------------------------------------------------- the GPU checks, exercised on a
# CPU

SMALL = one_pass.Rows(2, 4096, planted=False)


@pytest.fixture
def small_gpu_sizes(monkeypatch):
    patch_lab(monkeypatch, one_pass, "timed_rows", lambda total_bytes=None: SMALL)
    monkeypatch.setattr(thresholds, "ATTEMPTS", {"cpu": 1, "gpu": 1})
    monkeypatch.setattr(thresholds, "device_class", lambda: "gpu")


@cpu_only
@pytest.mark.parametrize("kind", ["layer_norm"])  # softmax takes the same path
def test_the_speedup_check_times_torch_and_fails_an_interpreted_kernel(small_gpu_sizes, kind):
    with pytest.raises(AssertionError) as failure:
        one_pass_checks.grade(f"{kind}_speedup", student(f"correct_{kind}"))
    torch_name = "torch.softmax" if kind == "softmax" else "F.layer_norm"
    message = str(failure.value)
    assert f"Needed at least 1x the speed of {torch_name}" in message, message
    cols = int(re.search(r"2 rows of ([\d,]+) float32", message).group(1).replace(",", ""))
    assert 3840 <= cols <= 4096 and cols % 32 == 16, (
        message
    )  # drawn per submission: a partial last block


@cpu_only
def test_the_bandwidth_check_compares_with_the_copy_bandwidth_measured_now(
    small_gpu_sizes, monkeypatch
):
    monkeypatch.setattr(ceilings, "measure_copy_bandwidth", lambda *a, **k: 10e9)
    with pytest.raises(AssertionError) as failure:
        one_pass_checks.grade("layer_norm_bandwidth", student("correct_layer_norm"))
    message = str(failure.value)
    assert "copy bandwidth measured now" in message and "Needed at least 75%" in message, message


@cpu_only
def test_a_time_faster_than_the_bytes_allow_is_flagged_as_impossible(small_gpu_sizes, monkeypatch):
    monkeypatch.setattr(ceilings, "measure_copy_bandwidth", lambda *a, **k: 1e3)
    with pytest.raises(AssertionError, match="impossible for a kernel that does the work"):
        one_pass_checks.grade("softmax_speedup", student("correct_softmax"))


@cpu_only
def test_the_gpu_comparison_for_the_notebook_runs(small_gpu_sizes, monkeypatch):
    """Each version is timed, its time lands under its own name, and its bandwidth is computed from
    it. The times are stand-ins, one per version, so that a mix-up shows (real ones on a CPU have no
    reliable order: an interpreted kernel at this size beat torch once in CI)."""
    from brrr import timing

    called: list[str] = []
    stand_in_s = {"unfused": 3e-3, "torch": 1e-3, "yours": 2e-3}

    def tagged(name, fn):
        def run(*args):
            called.append(name)
            return fn(*args)

        return run

    def fake_bench(fn, **kwargs):
        called.clear()
        fn()  # runs the version once, for real
        (name,) = called
        return timing.Timing(stand_in_s[name], stand_in_s[name], stand_in_s[name], 1, "fake")

    for kind in one_pass.KINDS:
        monkeypatch.setitem(one_pass.UNFUSED, kind, tagged("unfused", one_pass.UNFUSED[kind]))
        monkeypatch.setitem(one_pass.FUSED_TORCH, kind, tagged("torch", one_pass.FUSED_TORCH[kind]))
    monkeypatch.setattr(timing, "bench", fake_bench)
    patch_lab(monkeypatch, one_pass, "ON_GPU", True)
    monkeypatch.setattr(ceilings, "measure_copy_bandwidth", lambda *a, **k: 10e9)
    result = one_pass.compare_with_eager(
        tagged("yours", load_module(LAB, "correct_softmax").softmax),
        tagged("yours", load_module(LAB, "correct_layer_norm").layer_norm),
    )
    assert result["device"] == "gpu" and result["rows"] == SMALL.rows
    for kind in one_pass.KINDS:
        row = result["kinds"][kind]
        assert row["roofline_s"] == pytest.approx(8 * SMALL.numel / 10e9)
        assert row["seconds"] == stand_in_s
        assert row["bandwidth"] == {
            name: pytest.approx(8 * SMALL.numel / s) for name, s in stand_in_s.items()
        }
    ax = one_pass.plot_comparison(result)
    assert len(ax.patches) == 3 * len(one_pass.KINDS)


@cpu_only
def test_on_a_gpu_an_unmasked_kernel_is_rejected_before_anything_compiled_runs(
    monkeypatch, builds_as_on_a_gpu
):
    built_as = builds_as_on_a_gpu
    patch_lab(monkeypatch, one_pass, "CORRECTNESS_CASES", (one_pass.Rows(4, 17),))
    with pytest.raises(AssertionError, match="accessed memory outside its tensors"):
        one_pass_checks.grade("softmax_correct", student("unmasked_softmax", forked=True))
    assert built_as == ["interpreted"]
    built_as.clear()
    message = one_pass_checks.grade("softmax_correct", student("correct_softmax"))
    assert built_as == ["interpreted", "compiled"]
    assert (
        "bounds checked in the interpreter at 7 rows of 17 float32; 3 rows of 781 float32"
        in message
    )


def test_the_timed_checks_fit_a_t4(monkeypatch):
    patch_lab(monkeypatch, one_pass, "far_above_cache", lambda element_size=4: 2**28)
    t4 = 15_828_320_256
    case = one_pass.timed_rows(total_bytes=t4)
    assert (
        case.cols == one_pass.TIMED_COLS and case.numel * one_pass.TIMED_BYTES_PER_ELEMENT <= t4 / 2
    )
    assert one_pass.timed_rows(total_bytes=85_017_362_432).numel == 2**28


# ---------------------------------------------------------------- the gradebook finds Lab 3


def test_the_gradebook_matches_a_lab_3_submission_and_splices_its_answers(tmp_path):
    from brrr.grading import assemble, gradebook

    snapshot = assemble.Snapshot()
    notebook = submission_notebook(LAB, "two_kernels")
    submission = gradebook.Submission("alice", tmp_path / "alice.ipynb")
    assert gradebook.choose_lab(submission, notebook, None, snapshot) == LAB
    assert gradebook.lab_checks(LAB) == list(one_pass_checks.CHECKS["gpu" if ON_GPU else "cpu"])
    spliced = assemble.splice(snapshot.labs[LAB], snapshot.answers[LAB], notebook)
    assert sorted(spliced.answers_found) == ["layer-norm", "prediction", "softmax"]
    assert "stats_kernel" in next(
        c.source for c in spliced.notebook.cells if c.get("id") == "layer-norm"
    )
