"""Each wrong or hostile Lab 2 submission is rejected, with the right reason; a correct one passes.

The checks run here as they run in the grader process, against the student's
side served in this process (:class:`brrr.grading.client.LocalStudent`): the
same requests, the same plain data across. The gradebook tests run the same
kind of submissions across a real process boundary.
"""

import pytest

import brrr.device  # noqa: F401  (before triton: the interpreter on a CPU)
from brrr.device import ON_GPU
from brrr.grading.client import LocalStudent
from brrr.labs.fuse_it import checks as fuse_it

from lab_fixtures import expected_reason, load_module

LAB = "02-fuse-it"
WRONG = [
    "wrong_math",
    "nan_overflow",
    "unwritten_tail",
    "unmasked_load",
    "calls_reference",
    "cached_result",
    "decoy_eager",
    "torch_in_kernel",
    "reads_grader_frames",
    "dunder_escape",
]


def student(name, forked=True):
    return LocalStudent(load_module(LAB, name).fused_chain, forked=forked)


def traffic_of(name: str, n: int) -> dict:
    """CPU: submission ``name``'s traffic at ``n``, counted in the interpreter whatever values its
    kernels compute (for ``traffic_failure``)."""
    from brrr.checks import core

    return core.count_traffic(student(name), fuse_it.SPEC, n)


def test_a_correct_submission_passes_correctness_and_traffic():
    assert "match chain()" in fuse_it.grade("correct", student("correct"))
    if not ON_GPU:
        summary = fuse_it.grade("traffic", student("correct"))
        assert "12 B per element" in summary and "1 launch" in summary


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
def test_traffic_is_counted_at_sizes_drawn_per_submission_not_at_the_published_one():
    """A wrapper that launches the fused kernel at TRAFFIC_N, where the check used to count, and two
    kernels everywhere else passed. The sizes are now drawn in the grader, two odd and one a
    multiple of 1,024."""
    from brrr.checks import core
    from brrr.labs.fuse_it import TRAFFIC_N

    name = "fused_at_the_published_size"
    assert fuse_it.traffic_failure("fused_chain", traffic_of(name, TRAFFIC_N)) is None
    fuse_it.grade("correct", student(name))  # right values at every size
    with pytest.raises(AssertionError) as failure:
        fuse_it.grade("traffic", student(name))
    assert expected_reason(LAB, name) in str(failure.value), str(failure.value)
    first, second = (fuse_it.traffic_sizes(core.size_drawer()[0]) for _ in range(2))
    assert first != second and first[0] % 2 and first[1] % 2 and first[2] % 1024 == 0
    assert TRAFFIC_N not in first + fuse_it.drawn_correctness_sizes(core.size_drawer(7)[0])


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
def test_traffic_is_counted_only_on_launches_whose_output_was_checked():
    """A wrapper that counts its calls (the fused kernel first, a cheap kernel storing zeros after):
    each traffic count comes from the replay whose output is checked, so the cheap launches fail on
    their values before their bytes (4 per element, less than one pass) can count."""
    with pytest.raises(AssertionError, match="wrote a wrong `out`"):
        fuse_it.grade("traffic", student("right_on_the_first_call_only", forked=False))


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
def test_a_grid_larger_than_the_problem_fails_traffic():
    """Programs past the end of out, masked off, store nothing: the exact bytes alone passed
    them."""
    name = "idle_programs"
    traffic = traffic_of(name, 10_001)
    assert fuse_it.traffic_failure("fused_chain", traffic) is None and traffic["storing"] == [3]
    assert traffic["programs"] == [12]
    with pytest.raises(AssertionError) as failure:
        fuse_it.grade("traffic", student(name))
    assert expected_reason(LAB, name) in str(failure.value), str(failure.value)


def test_a_wrapper_wrong_above_65536_elements_fails_at_the_large_drawn_size():
    """Right up to 65,536 elements and a grid capped at 16 programs of 4,096 above: the drawn sizes
    stopped at 70,001, so it passed most of the time. A large size is now drawn per submission, far
    above."""
    from brrr.checks import core

    name = "wrong_above_65536"
    core.check_kernels(student(name), fuse_it.SPEC, (1, 17, 65_536, 40_001, 1_023, 8_191))
    with pytest.raises(AssertionError) as failure:
        fuse_it.grade("correct", student(name))
    assert expected_reason(LAB, name) in str(failure.value), str(failure.value)
    large = [fuse_it.drawn_large_size(student(name), core.size_drawer(s)[0]) for s in range(8)]
    assert all(fuse_it.LARGE_LOW <= n <= fuse_it.LARGE_HIGH and n % 2 for n in large), large
    assert max(large) > 1_000_000, large  # its 16 programs are cheap to replay: nothing is cut


def test_the_large_size_is_cut_to_what_the_interpreter_runs_quickly_never_to_65536():
    from brrr.checks import core

    if ON_GPU:
        pytest.skip("compiled kernels run the large size whole")
    large = [fuse_it.drawn_large_size(student("correct"), core.size_drawer(s)[0]) for s in range(8)]
    most = max(fuse_it.LARGE_LOW, 4_096 * fuse_it.LARGE_PROGRAMS)  # its blocks hold 4,096 elements
    assert all(fuse_it.LARGE_LOW <= n <= most for n in large), large


def test_the_solution_passes_correctness_20_times_in_20():
    for _ in range(20):
        fuse_it.grade("correct", student("correct", forked=False))


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_submission_fails_correctness_for_the_right_reason(name):
    with pytest.raises(AssertionError) as failure:
        fuse_it.grade("correct", student(name))
    message = str(failure.value)
    assert expected_reason(LAB, name) in message, message
    assert "[on " in message  # says which device it was measured on


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
def test_an_unfused_submission_is_correct_but_fails_traffic():
    fuse_it.grade("correct", student("unfused"))  # right values...
    with pytest.raises(AssertionError) as failure:
        fuse_it.grade("traffic", student("unfused"))  # ...from five round trips through memory
    message = str(failure.value)
    assert expected_reason(LAB, "unfused") in message, message
    assert "2.00 per element" in message  # x is read twice: by sigmoid_kernel and by mul_kernel
    assert (
        "out_ptr" in message
    )  # the intermediates, labelled by the kernel argument they were passed as


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
def test_atomics_count_as_traffic_so_a_round_trip_hidden_in_them_fails():
    fuse_it.grade("correct", student("atomic_round_trip"))  # the values are right...
    with pytest.raises(AssertionError) as failure:
        fuse_it.grade("traffic", student("atomic_round_trip"))
    message = str(failure.value)
    assert expected_reason(LAB, "atomic_round_trip") in message and "tmp_ptr" in message, message


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
def test_a_correct_kernel_that_loads_an_input_twice_fails_traffic():
    fuse_it.grade("correct", student("loads_twice"))  # one kernel, right values...
    with pytest.raises(AssertionError) as failure:
        fuse_it.grade("traffic", student("loads_twice"))  # ...but x comes from memory twice
    message = str(failure.value)
    assert expected_reason(LAB, "loads_twice") in message and "1 launch" not in message, message


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
@pytest.mark.parametrize("name", WRONG)
def test_the_traffic_grade_checks_the_values_first(name):
    """grade('traffic') rejects a wrong submission for its wrong values, before its bytes are
    weighed."""
    with pytest.raises(AssertionError) as failure:
        fuse_it.grade("traffic", student(name))
    assert expected_reason(LAB, name) in str(failure.value), str(failure.value)


# What the traffic rule alone says of each submission whose kernels move the wrong bytes: counted by
# the grader whatever values they compute, since grade('traffic') checks the values first and would
# never show the rule rejecting them.
TRAFFIC_REASONS = {
    "unfused": "launched 5 kernels",
    "atomic_round_trip": "launched 2 kernels",
    "loads_twice": "loads x 2.00 times per element",
    "decoy_eager": "stored anything into out",
    "cached_result": "loaded x or y",
    "calls_reference": "loaded x or y",
    "reads_grader_frames": "loaded x or y",
    "unwritten_tail": "stored 0.99 of out per element",
}


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
@pytest.mark.parametrize("name", sorted(TRAFFIC_REASONS))
def test_the_traffic_rule_alone_rejects_each_submission_that_moves_the_wrong_bytes(name):
    failure = fuse_it.traffic_failure("fused_chain", traffic_of(name, 100_003))
    assert failure is not None and "moved the wrong number of bytes" in failure
    assert TRAFFIC_REASONS[name] in failure, failure


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
@pytest.mark.parametrize("name", ["correct", "wrong_math", "nan_overflow"])
def test_the_traffic_rule_passes_one_pass_whatever_its_values(name):
    """Why the values come first: wrong math in one pass moves exactly the bytes a right answer
    does."""
    assert fuse_it.traffic_failure("fused_chain", traffic_of(name, 100_003)) is None


@pytest.mark.skipif(not ON_GPU, reason="timing checks run on a GPU")
def test_gpu_timing_rejects_the_unfused_submission():
    with pytest.raises(AssertionError, match="Needed at least 2x the speed of the eager chain"):
        fuse_it.grade("speedup", student("unfused"))


@pytest.mark.skipif(not ON_GPU, reason="timing checks run on a GPU")
def test_gpu_timing_rejects_a_wrapper_right_on_its_first_call_only():
    """On a CPU, tests/grading/test_grading_gpu_paths.py runs the same check at a small size."""
    name = "right_on_the_first_call_only"
    with pytest.raises(AssertionError, match=expected_reason(LAB, name)):
        fuse_it.grade(
            "speedup", student(name, forked=False)
        )  # in this process: its call count holds


@pytest.mark.skipif(ON_GPU, reason="traffic is counted in the interpreter, on a CPU")
def test_an_unsupported_triton_is_a_grader_error_not_a_failed_submission(monkeypatch):
    from brrr import traffic
    from brrr.grading import server

    monkeypatch.setattr(traffic, "triton_version", lambda: (9, 9))
    passed, message, grader_fault = server._run_check(fuse_it, "traffic", student("correct"))
    assert not passed and grader_fault and "not your fault" in message
