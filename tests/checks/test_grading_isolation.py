"""brrr.checks.isolation turns crashes, hangs and exceptions of student code into outcomes, never a
dead run."""

import ctypes
import os
import time

import pytest
import torch

import brrr.device  # noqa: F401
from brrr.checks import isolation
from brrr.device import TRITON_INTERPRETED

import triton
import triton.language as tl

# The tests marked with this exercise the forked child. On a GPU, run() never forks (see
# brrr.isolation): there a segfault or os._exit would end this pytest process itself.
forked = pytest.mark.skipif(
    not isolation.can_fork()[0], reason=f"this process does not fork: {isolation.can_fork()[1]}"
)


def segfault():
    ctypes.string_at(0)


@forked
def test_a_segfault_becomes_a_crash_outcome_with_the_reason():
    outcome = isolation.run(segfault)
    assert not outcome.ok and outcome.crashed and outcome.isolated
    assert "SIGSEGV" in outcome.error and "unmasked tl.load" in outcome.error


@triton.jit
def far_out_of_bounds(x_ptr, out_ptr, BLOCK: tl.constexpr):
    far = x_ptr + (1 << 40)  # four terabytes past x: unmapped memory
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.load(far + tl.arange(0, BLOCK)))


@pytest.mark.skipif(not TRITON_INTERPRETED, reason="the raw interpreter crash happens on a CPU")
def test_an_unchecked_out_of_bounds_load_in_the_interpreter_crashes_only_the_child():
    x, out = torch.randn(16), torch.empty(16)
    outcome = isolation.run(lambda: far_out_of_bounds[(1,)](x, out, BLOCK=16))
    assert outcome.crashed, outcome
    assert "SIGSEGV" in outcome.error


def test_an_exception_is_returned_with_its_type_message_and_traceback():
    def broken():
        raise NotImplementedError("Exercise: write the body of f()")

    outcome = isolation.run(broken)
    assert not outcome.ok and outcome.error_type == "NotImplementedError"
    assert "write the body of f()" in outcome.error and "broken" in outcome.traceback


@forked
def test_a_value_and_the_printed_output_come_back(capsys):
    def chatty(n):
        print("working on", n)
        return torch.arange(n).sum().item()

    outcome = isolation.run(chatty, 10)
    assert outcome.ok and outcome.value == 45 and "working on 10" in outcome.output
    assert "working on 10" in capsys.readouterr().out  # shown to the caller too


@forked
def test_a_hang_is_stopped_at_the_timeout():
    start = time.monotonic()
    outcome = isolation.run(time.sleep, 60, timeout_s=1.0)
    assert outcome.error_type == "timeout" and "within 1 s" in outcome.error
    assert time.monotonic() - start < 10


@forked
def test_os_exit_in_student_code_does_not_end_the_caller():
    outcome = isolation.run(os._exit, 3)
    assert not outcome.ok and "exited with status 3" in outcome.error


@forked
def test_an_unpicklable_result_is_reported():
    outcome = isolation.run(lambda: lambda: None)
    assert not outcome.ok and "could not be sent back" in outcome.error


def test_without_fork_a_cuda_fault_poisons_every_later_run(monkeypatch):
    """The GPU path (CUDA initialised, so no fork), simulated: a fault fails this run and every
    later one."""
    monkeypatch.setattr(isolation, "can_fork", lambda: (False, "CUDA is initialised"))
    monkeypatch.setattr(isolation, "_cuda_broken", None)

    def faulting_kernel():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    assert isolation.run(lambda: 1 + 1).value == 2
    first = isolation.run(faulting_kernel)
    assert first.crashed and "illegal memory access" in first.error and "unusable" in first.error
    later = isolation.run(lambda: 1 + 1)
    assert not later.ok and "earlier check broke the CUDA context" in later.error


def test_without_fork_an_ordinary_exception_does_not_poison(monkeypatch):
    monkeypatch.setattr(isolation, "can_fork", lambda: (False, "CUDA is initialised"))
    monkeypatch.setattr(isolation, "_cuda_broken", None)
    outcome = isolation.run(lambda: 1 / 0)
    assert outcome.error_type == "ZeroDivisionError" and not outcome.crashed
    assert isolation.run(lambda: 3).value == 3


@forked
def test_a_crash_brings_back_where_it_happened():
    outcome = isolation.run(segfault)
    assert "segfault" in outcome.traceback  # faulthandler's stack, with this file's function in it


def segfault_under(depth):
    return segfault() if depth == 0 else segfault_under(depth - 1)


@forked
def test_a_deep_crash_keeps_the_innermost_frames():
    """faulthandler lists the most recent call first; a stack longer than is kept (a test runner's,
    a kernel's) is cut at its outer end, not at the student's frame."""
    outcome = isolation.run(segfault_under, 90)
    assert len(outcome.traceback) <= isolation.CRASH_TRACE_CHARS + 80
    assert "in segfault\n" in outcome.traceback and "outer lines left out" in outcome.traceback
