"""Each wrong submission is rejected, with the right reason; a correct one passes."""

import pytest

import brrr.device  # noqa: F401  (before triton: the interpreter on a CPU)
from brrr import grading, lab_fuse_it
from brrr.device import ON_GPU

from lab_fixtures import expected_reason, load_module

LAB = "02-fuse-it"
WRONG = ["wrong_math", "nan_overflow", "unwritten_tail", "unmasked_load", "calls_reference", "cached_result"]


def test_a_correct_submission_passes_correctness_and_traffic():
    fused_chain = load_module(LAB, "correct").fused_chain
    assert "matches chain()" in lab_fuse_it.grade_correct(fused_chain)
    if not ON_GPU:
        summary = lab_fuse_it.grade_traffic(fused_chain)
        assert "12 B per element" in summary and "1 launch" in summary


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_submission_fails_correctness_for_the_right_reason(name):
    fused_chain = load_module(LAB, name).fused_chain
    with pytest.raises(AssertionError) as failure:
        lab_fuse_it.grade_correct(fused_chain)
    message = str(failure.value)
    assert expected_reason(LAB, name) in message, message
    assert "[on " in message  # says which device it was measured on


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
def test_an_unfused_submission_is_correct_but_fails_traffic():
    fused_chain = load_module(LAB, "unfused").fused_chain
    lab_fuse_it.grade_correct(fused_chain)  # right values...
    with pytest.raises(AssertionError) as failure:
        lab_fuse_it.grade_traffic(fused_chain)  # ...from five round trips through memory
    message = str(failure.value)
    assert expected_reason(LAB, "unfused") in message, message
    assert "2.00 per element" in message  # x is read twice: by sigmoid_kernel and by mul_kernel
    assert "other" in message  # the intermediates


@pytest.mark.skipif(ON_GPU, reason="the unfused fixture is correct, so on a GPU only timing rejects it")
def test_every_wrong_submission_also_fails_the_traffic_check():
    for name in WRONG + ["unfused"]:
        fused_chain = load_module(LAB, name).fused_chain
        with pytest.raises(AssertionError):
            lab_fuse_it.grade_traffic(fused_chain)


@pytest.mark.skipif(not ON_GPU, reason="timing checks run on a GPU")
def test_gpu_timing_rejects_the_unfused_submission():
    with pytest.raises(AssertionError):
        lab_fuse_it.grade_speedup(load_module(LAB, "unfused").fused_chain)


@pytest.fixture
def compiled_kernels(monkeypatch):
    """Load fixtures as a GPU would: @triton.jit makes JITFunctions (compiled), not interpreted ones."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    return lambda name: load_module(LAB, name)


def test_the_gpu_bounds_pass_catches_an_unmasked_load_in_compiled_kernels(compiled_kernels):
    from triton.runtime.jit import JITFunction

    module = compiled_kernels("unmasked_load")
    assert isinstance(module.chain_kernel, JITFunction)
    failure, _ = grading.bounds_in_interpreter(module.fused_chain, lab_fuse_it.SPEC, lab_fuse_it.BOUNDS_SIZES)
    assert failure and expected_reason(LAB, "unmasked_load") in failure and "index 1,000 of x_ptr" in failure
    assert isinstance(module.chain_kernel, JITFunction)  # put back afterwards


def test_the_gpu_bounds_pass_lets_a_correct_kernel_through(compiled_kernels):
    module = compiled_kernels("correct")
    failure, note = grading.bounds_in_interpreter(module.fused_chain, lab_fuse_it.SPEC, lab_fuse_it.BOUNDS_SIZES)
    assert failure is None and note.startswith("bounds checked in the interpreter")


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
def test_an_unsupported_triton_is_a_grader_error_not_a_failed_submission(monkeypatch, tmp_path):
    from brrr import traffic

    monkeypatch.setattr(traffic, "triton_version", lambda: (9, 9))
    monkeypatch.setenv(grading.LOG_ENV, str(tmp_path / "log.jsonl"))
    with pytest.raises(traffic.TrafficCounterUnavailable):
        lab_fuse_it.grade_traffic(load_module(LAB, "correct").fused_chain)
    assert "not your fault" in (tmp_path / "log.jsonl").read_text()
    lab_fuse_it.grade_correct(load_module(LAB, "correct").fused_chain)  # correctness still grades, unchecked bounds
