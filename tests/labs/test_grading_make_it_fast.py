"""Lab 4 ("make this step fast"): the checks pass the reference solution and reject wrong work for
the right reason.

The checks run here as they run in the grader process, against the student's
side served in this process (:func:`brrr.grading.client.local_student`): the
same requests, the same plain data across. The unsolved lab runs under the
gradebook in tests/labs/test_labs.py.
"""

import os
import statistics
import subprocess
import sys
import threading
import time

import pytest
import torch

from brrr.grading import make_it_fast as benchmark
from brrr.checks import thresholds
from brrr.grading import gradebook
from brrr.grading.client import local_student
from brrr.labs import make_it_fast as lab
from brrr.labs.make_it_fast import checks as lab_checks

from lab_fixtures import expected_reason, load_module, never_starved, patch_lab  # noqa: F401

LAB = lab.LAB
# What the speed check says of a student's step; the refusal to time when starved is
# tests/checks/test_fairness.py's.
pytestmark = pytest.mark.usefixtures("never_starved")


def student(name, function="fast_train", forked=True):
    return local_student(getattr(load_module(LAB, name), function), lab.WIRE_TYPES, forked=forked)


def test_the_lab_is_registered_and_the_gradebook_knows_its_checks():
    assert gradebook.lab_checks(LAB) == ["same_result", "speedup", "diagnosis"]
    for check in lab_checks.ALL_CHECKS:
        thresholds.threshold(LAB, check, "cpu")
        thresholds.threshold(LAB, check, "gpu")


def test_the_given_step_and_the_batched_step_agree_and_a_seed_fixes_the_problem():
    problem = lab.new_problem(lab.SHAPES[1], seed=3)
    losses, params = lab.given_train(problem)
    again = lab.given_train(problem)
    assert losses == again[0] and all(torch.equal(a, b) for a, b in zip(params, again[1]))
    reply = local_student(
        load_module(LAB, "correct").fast_train, lab.WIRE_TYPES, forked=False
    ).call(problem)
    assert lab_checks.result_failure("fast_train", reply, (losses, params), problem) is None
    as_scalars = [
        [torch.tensor(v) for v in reply[0].tolist()],
        reply[1],
    ]  # losses as one-element tensors
    assert lab_checks.result_failure("fast_train", as_scalars, (losses, params), problem) is None
    other = lab.given_train(lab.new_problem(lab.SHAPES[1], seed=4))
    assert "loss at step 1" in lab_checks.result_failure("fast_train", reply, other, problem)


def test_a_problem_with_a_relu_input_at_zero_is_never_drawn():
    """A correct batched solution once failed a fresh problem: a ReLU input 6e-8 from zero switched
    its unit in one summation order and not the other, and a row of W1 differed by 1e-4. Such
    problems are turned away when drawn; one with a seed given is kept as it is."""
    close = lab.new_problem(lab.SHAPES[0], seed=1492458921844353942)
    assert lab.relu_margin(close) < lab.KINK_MARGIN
    reply = local_student(benchmark.reference_solution(), lab.WIRE_TYPES, forked=False).call(close)
    failure = lab_checks.result_failure("fast_train", reply, lab_checks._expected(close), close)
    # Why the margin exists: summed in AVX2's order, the reference solution fails this problem in
    # W1. A CPU that sums in another order (ATEN_CPU_CAPABILITY=default, scalar) may not; where it
    # fails, it is in W1.
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert failure is not None and "W1" in failure
    assert failure is None or "W1" in failure
    drawn = [lab.new_problem(shape) for shape in lab.SHAPES for _ in range(20)]
    assert all(lab.relu_margin(problem) >= lab.KINK_MARGIN for problem in drawn)
    assert len({problem.seed for problem in drawn}) == len(drawn)


def test_the_reference_solution_passes_same_result():
    fast_train = benchmark.reference_solution()
    assert "gives the given step's losses" in lab_checks.grade(
        "same_result", local_student(fast_train, lab.WIRE_TYPES)
    )


def test_the_benchmark_script_grades_the_reference_solutions_speedup(capsys):
    """The speed check once, as the suite's share of `python -m brrr.grading.make_it_fast` (20
    runs)."""
    assert benchmark.main(["--runs", "1"]) == 0
    assert "1 of 1 passed" in capsys.readouterr().out
    assert lab_checks.last_speedup["best"] >= thresholds.threshold(LAB, "speedup").value


@pytest.mark.parametrize("name", ["skips_work", "skips_weight_decay", "changes_the_model"])
def test_a_step_with_another_result_fails_same_result(name):
    with pytest.raises(AssertionError) as failure:
        lab_checks.grade("same_result", student(name))
    assert expected_reason(LAB, name) in str(failure.value), str(failure.value)


def test_a_step_that_caches_the_loss_passes_one_call_but_fails_while_timed():
    lab_checks.grade("same_result", student("caches_the_loss"))  # each call is fresh: right
    with pytest.raises(AssertionError) as failure:
        lab_checks.grade(
            "speedup", student("caches_the_loss", forked=False)
        )  # the cache persists: wrong
    assert expected_reason(LAB, "caches_the_loss") in str(failure.value), str(failure.value)


def _burn(seconds):
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


def test_the_cpu_clock_counts_threads_that_ended_and_processes_under_the_student():
    """Sequential CPU use, so that it holds on a machine with no free core: what the grader adds
    up."""
    pid = os.getpid()
    before = lab_checks.cpu_seconds([pid])
    helper = threading.Thread(target=_burn, args=(0.15,))
    helper.start()
    helper.join()  # the thread has ended: its CPU time still counts
    assert lab_checks.cpu_used(before, lab_checks.cpu_seconds([pid])) >= 0.14

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.15: "
            "pass\ntime.sleep(30)",
        ]
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            tree = lab_checks.process_tree(pid)
            if (
                child.pid in tree
                and lab_checks.cpu_used({}, lab_checks.cpu_seconds(tree))
                - lab_checks.cpu_used({}, lab_checks.cpu_seconds([pid]))
                >= 0.14
            ):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the child's CPU time was never counted in the student's process tree")
    finally:
        child.kill()
        child.wait()

    before, start = lab_checks.cpu_seconds([pid]), time.perf_counter()
    time.sleep(0.2)
    assert lab_checks.cpu_used(before, lab_checks.cpu_seconds([pid])) < 0.1 * (
        time.perf_counter() - start
    )


def test_a_step_that_uses_two_cores_fails_speedup(monkeypatch):
    """The rule, with a CPU clock that runs at twice the wall clock, as two busy cores would: fails
    for it. (Not twice the real CPU clock: beside other work a one-thread step gets half a core, and
    twice that is one core: within the rule. The CI machine showed it.)"""
    patch_lab(monkeypatch, lab, "_process_cpu_clock", lambda pid: 2 * time.perf_counter())
    with pytest.raises(AssertionError) as failure:
        lab_checks.grade("speedup", student("correct", forked=False))
    assert "CPU-seconds per second" in str(failure.value), str(failure.value)


def test_a_step_that_leaves_work_running_while_the_grader_times_the_given_step_fails_speedup():
    """The correct step, with a thread that computes only between its calls: it slows the grader's
    copy of the given step, timed between the student's calls, and so inflates the speedup, while
    the CPU rule of the student's own calls sees nothing. The grader counts the CPU of every process
    of the student's while it times its side (here its own process, less the grader's thread; under
    the gradebook every process of the sandbox's PID namespace: brrr/checks/fairness.py) and fails
    the step for it."""
    correct = load_module(LAB, "correct").fast_train
    between_calls, stop, started = threading.Event(), threading.Event(), []

    def keep_busy():
        x = torch.randn(128, 128)
        while not stop.is_set():
            between_calls.wait()
            x = torch.tanh(x @ x)

    def fast_train(problem):
        between_calls.clear()
        if not started:
            started.append(threading.Thread(target=keep_busy, daemon=True))
            started[0].start()
        try:
            return correct(problem)
        finally:
            between_calls.set()

    try:
        with pytest.raises(AssertionError) as failure:
            lab_checks.grade("speedup", local_student(fast_train, lab.WIRE_TYPES, forked=False))
    finally:
        stop.set()
        between_calls.set()
        if started:
            started[0].join()
    message = str(failure.value)
    assert (
        "your notebook's processes used" in message
        and "while the grader timed the given step" in message
    ), message


def test_a_graded_notebook_compiles_in_its_own_process_not_in_a_pool_left_starting(
    tmp_path, monkeypatch
):
    """torch.compile in a student's step: Inductor compiles in-process while its pool of compile
    workers is still starting, and the pool goes on starting (a torch import in each worker) after
    the call returns, while the grader times the given step: charged to the student. The graded
    notebook's environment asks for no pool, whatever the instructor's has (the planted regression:
    the variable left unset)."""
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "16")
    socket = tmp_path / "grader.sock"
    env = gradebook.student_environment(socket, tmp_path, tmp_path / "jupyter", sandboxed=False)
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"


def test_a_correct_step_under_the_threshold_fails_speedup(monkeypatch):
    """Correct but slow: the samples two at a time, 1-2x the given step (0.95x once beside the book
    build). It fails the 3x the check asks: the speed check is graded against a number, not against
    whatever the solution reaches. (A step on more cores than one is refused by the CPU-time rule:
    test_a_step_that_uses_two_cores_fails_speedup, on a clock that runs at twice the wall clock, and
    the CPU counted from real threads and processes above. A test of a real helper thread could only
    skip on a machine with no second core free, which under make test is most of the time.)"""
    monkeypatch.setitem(
        thresholds.ATTEMPTS, "cpu", 1
    )  # a miss is judged in every attempt: one will do
    lab_checks.grade("same_result", student("two_at_a_time"))  # right...
    with pytest.raises(AssertionError) as failure:
        lab_checks.grade("speedup", student("two_at_a_time", forked=False))  # ...and slow
    assert expected_reason(LAB, "two_at_a_time") in str(failure.value), str(failure.value)
    # Measured 1.55-1.81x under load beside other sessions, and 0.95x beside the book build in a
    # fresh-clone run: only its side of the threshold is asserted (the threshold itself is pinned in
    # test_thresholds.py).
    assert lab_checks.last_speedup["best"] < thresholds.threshold(LAB, "speedup").value, (
        lab_checks.last_speedup
    )


def test_the_speed_check_compares_with_its_threshold_not_with_one(monkeypatch):
    """A step measured at about 2x the given step fails the 3x the check asks, whatever the load:
    here the student's step is the given step itself and the grader's copy runs twice per timed call
    (the same work twice, on the grader's thread), so the ratio is 2 by construction, not by a
    fixture's speed on the day (two_at_a_time above read 0.95-1.81x, so a check compared with 1x
    could pass or fail it)."""
    monkeypatch.setitem(thresholds.ATTEMPTS, "cpu", 1)
    given = lab_checks.given_train

    def given_twice(problem):
        given(problem)
        return given(problem)

    monkeypatch.setattr(lab_checks, "given_train", given_twice)
    with pytest.raises(AssertionError) as failure:
        lab_checks.grade("speedup", local_student(lab.given_train, lab.WIRE_TYPES, forked=False))
    assert "is not at least 3x faster than the given step" in str(failure.value), str(failure.value)
    # The ratio the mutant "compared with 1x" would pass: 1.82-2.00 on a quiet machine, 1.25 beside
    # the book build in a fresh-clone run (the wire's round trip counts against the student's side);
    # above 1 is what makes the planted bug visible, under 3 what makes the check fail it.
    assert 1.0 < lab_checks.last_speedup["best"] < 3.0, lab_checks.last_speedup


def test_a_correct_diagnosis_passes():
    summary = lab_checks.grade("diagnosis", student("correct_diagnosis", "diagnose"))
    assert "narrow" in summary and "wide" in summary


def test_the_trace_is_read_where_the_notebook_wrote_it_not_where_the_grader_runs(tmp_path):
    """Under the gradebook the notebook's /tmp is its sandbox's own: the grader opened the returned
    path on its side, found nothing, and failed every honest diagnosis. Here the notebook's files
    lie where the grader does not look (``private``, seen by the notebook as
    ``/tmp/in-the-sandbox``): the grader must ask the notebook's side for the bytes."""
    import shutil
    from pathlib import Path

    private, seen = tmp_path / "sandbox-tmp", "/tmp/in-the-sandbox"
    private.mkdir()
    diagnose = load_module(LAB, "correct_diagnosis").diagnose

    def in_the_sandbox(problem):
        fraction, path = diagnose(problem)
        shutil.move(path, private / Path(path).name)
        return fraction, f"{seen}/{Path(path).name}"

    graded = local_student(in_the_sandbox, lab.WIRE_TYPES)
    answered_here = graded._request

    def through_the_sandbox(message, timeout_s):  # the notebook's view of the files
        if message.get("op") == "read":
            message = {**message, "path": message["path"].replace(seen, str(private))}
        return answered_here(message, timeout_s)

    graded._request = through_the_sandbox
    summary = lab_checks.grade("diagnosis", graded)
    assert "narrow" in summary and "wide" in summary
    with pytest.raises(
        AssertionError, match="cannot be read"
    ):  # a path the notebook cannot read either
        nowhere = local_student(lambda problem: (0.5, f"{seen}/none.json"), lab.WIRE_TYPES)
        lab_checks.grade("diagnosis", nowhere)


@pytest.mark.parametrize("name", ["typed_in_fraction", "busy_fraction", "profiles_another_step"])
def test_a_wrong_diagnosis_fails_for_the_right_reason(name):
    with pytest.raises(AssertionError) as failure:
        lab_checks.grade("diagnosis", student(name, "diagnose"))
    assert expected_reason(LAB, name) in str(failure.value), str(failure.value)


def test_the_narrow_and_wide_problems_lie_apart_so_the_number_right_for_one_fails_the_other(
    tmp_path,
):
    narrow = statistics.median(
        lab_checks.profile_given(lab.new_problem(lab.NARROW), tmp_path / "n.json")[0]
        for _ in range(3)
    )
    wide = statistics.median(
        lab_checks.profile_given(lab.new_problem(lab_checks.WIDE), tmp_path / "w.json")[0]
        for _ in range(3)
    )
    assert narrow - wide > thresholds.threshold(LAB, "diagnosis").value, (narrow, wide)
