"""Run a student's code so that a crash becomes a failed check, not a dead grading run.

A Triton kernel that loads or stores out of bounds can kill the process it runs
in: in the interpreter it reads raw process memory (a segmentation fault), and on
a GPU it raises an illegal-address error that leaves the CUDA context unusable.
:func:`run` calls a function so that whatever it does, the caller gets an
:class:`Outcome` back.

CPU (and any process that has not initialised CUDA)
    The function runs in a child made with ``fork()``. A fork shares the
    notebook's state (the student's functions, defined in ``__main__``, need no
    pickling), and a crash, a hang past ``timeout_s`` or an ``os._exit`` in the
    child ends only the child. The result travels back through a pipe,
    pickled; so does the child's printed output. The child runs torch with one
    thread (grading is single-threaded, and it avoids OpenMP pools across fork).

GPU (CUDA already initialised)
    ``fork()`` after CUDA initialisation is not allowed: the child cannot use
    CUDA, and the driver's state is not fork-safe. The function runs in this
    process, followed by a synchronize so that asynchronous errors surface inside
    the check. A CUDA error (illegal address, misaligned address, launch
    failure) poisons the context for the rest of the process, so the check fails
    with that reason and every later :func:`run` in this process fails at once,
    saying why, instead of failing with a confusing error. The gradebook runs
    each submission in its own process, so one faulting kernel costs only the
    checks after it in that notebook. A hang cannot be interrupted from inside:
    the per-cell timeout of nbval (and the gradebook's per-notebook timeout)
    covers it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import pickle
import select
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

DEFAULT_TIMEOUT_S = 300.0
CRASH_TRACE_CHARS = 4000  # of a crash's stack, kept from the most recent call

_SIGNAL_HINTS = {
    signal.SIGSEGV: "segmentation fault: the code read or wrote memory it does not own, "
    "typically an unmasked tl.load or tl.store past the end of a tensor",
    signal.SIGBUS: "bus error: a misaligned or out-of-range memory access",
    signal.SIGABRT: "aborted: a C/C++ assertion or an uncaught C++ exception",
    signal.SIGFPE: "arithmetic fault, such as an integer division by zero",
    signal.SIGKILL: "killed, usually because the machine ran out of memory",
    signal.SIGILL: "illegal instruction",
}


@dataclass(frozen=True)
class Outcome:
    """What happened when a function ran under :func:`run`."""

    ok: bool
    value: Any = None
    error_type: str = ""  # e.g. "AssertionError", "NotImplementedError", "crash", "timeout"
    error: str = ""  # one readable line or paragraph: why it failed
    traceback: str = ""
    output: str = ""  # what the function printed (forked runs)
    isolated: bool = False  # True when it ran in a child process

    @property
    def crashed(self) -> bool:
        return self.error_type in ("crash", "cuda-error")


# ---------------------------------------------------------------- the GPU case

_cuda_broken: str | None = None

_CUDA_FAULTS = (
    "illegal memory access",
    "illegal address",
    "misaligned address",
    "unspecified launch failure",
    "device-side assert",
    "an illegal instruction",
    "CUDA error",
    "cudaError",
    "AcceleratorError",
)


def cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())


def can_fork() -> tuple[bool, str]:
    """Whether :func:`run` will fork, and if not, why not."""
    if not hasattr(os, "fork"):
        return False, "this platform has no fork()"
    if cuda_initialized():
        return (
            False,
            "CUDA is initialised in this process, and fork() after CUDA initialisation is not "
            "allowed",
        )
    from brrr.device import ON_GPU

    if ON_GPU:
        return (
            False,
            "this process grades on the GPU: a forked child could not use CUDA beside its parent",
        )
    return True, ""


def is_cuda_fault(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}"
    return any(marker in text for marker in _CUDA_FAULTS)


def _run_in_process(fn: Callable[..., Any], args, kwargs) -> Outcome:
    global _cuda_broken
    if _cuda_broken:
        return Outcome(
            False,
            error_type="cuda-error",
            error=f"not run: an earlier check broke the CUDA context of this process "
            f"({_cuda_broken}). Fix that kernel, restart the kernel and run again.",
        )
    try:
        value = fn(*args, **kwargs)
        torch = sys.modules.get("torch")
        if torch is not None and cuda_initialized():
            torch.cuda.synchronize()
        return Outcome(True, value)
    except BaseException as error:  # noqa: BLE001 - the student's code may raise anything
        if isinstance(error, KeyboardInterrupt):
            raise
        if is_cuda_fault(error):
            _cuda_broken = (
                f"{type(error).__name__}: "
                f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            )
            return Outcome(
                False,
                error_type="cuda-error",
                traceback=traceback.format_exc(),
                error=f"the GPU reported a fault: {_cuda_broken}. This usually means a kernel "
                "loaded or stored outside its tensors (check the masks). The CUDA context "
                "is now unusable: later checks in this notebook cannot run.",
            )
        return Outcome(
            False,
            error_type=type(error).__name__,
            error=f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc(),
        )


# ---------------------------------------------------------------- the fork case


def _child(fn, args, kwargs, write_fd: int, low_level_fd: int) -> None:
    """Runs in the forked child: call fn, send back (status, ...) pickled, and exit without cleanup.

    Python-level output is captured in a string; what C code and faulthandler write to file
    descriptors 1 and 2 goes to ``low_level_fd``, which the parent reads after a crash.
    """
    captured = io.StringIO()
    try:
        os.dup2(low_level_fd, 1)
        os.dup2(low_level_fd, 2)
        faulthandler.enable(file=2, all_threads=False)  # a crash leaves the student's stack behind
        try:
            import torch

            torch.set_num_threads(1)
        except Exception:  # noqa: BLE001 - torch is optional here
            pass
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            try:
                value = fn(*args, **kwargs)
                payload = ("ok", value)
            except BaseException as error:  # noqa: BLE001
                payload = ("error", type(error).__name__, str(error), traceback.format_exc())
        try:
            data = pickle.dumps(payload + (captured.getvalue(),))
        except Exception as error:  # noqa: BLE001 - an unpicklable return value
            data = pickle.dumps(
                (
                    "error",
                    "PicklingError",
                    f"the result could not be sent back: {error}",
                    "",
                    captured.getvalue(),
                )
            )
        view = memoryview(data)
        while view:
            written = os.write(write_fd, view)
            view = view[written:]
    finally:
        os._exit(0)


def _describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = _SIGNAL_HINTS.get(number, "")
        return f"the process running it was killed by {name}" + (f" ({hint})" if hint else "")
    if os.WIFEXITED(status):
        return (
            f"the process running it exited with status {os.WEXITSTATUS(status)} before "
            "returning a result"
        )
    return f"the process running it ended abnormally (status {status})"


def _stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _crash_trace(low_level) -> str:
    """What the child wrote at the C level from faulthandler's report of a crash on, if any.

    faulthandler lists the most recent call first, so the student's frames are
    at the top: a long stack (a test runner's, a notebook kernel's) is cut at
    its outer end.
    """
    low_level.seek(0)
    text = low_level.read().decode(errors="replace")
    start = text.find("Fatal Python error")
    text = text[start:] if start >= 0 else text
    text = "\n".join(line for line in text.splitlines() if not line.startswith("Extension modules"))
    if len(text) <= CRASH_TRACE_CHARS:
        return text
    kept = text[:CRASH_TRACE_CHARS].rsplit("\n", 1)[0]
    return f"{kept}\n  ... ({text.count(chr(10)) - kept.count(chr(10))} outer lines left out)"


def _run_forked(fn: Callable[..., Any], args, kwargs, timeout_s: float) -> Outcome:
    with tempfile.TemporaryFile() as low_level:
        return _run_forked_into(fn, args, kwargs, timeout_s, low_level)


def _run_forked_into(fn, args, kwargs, timeout_s: float, low_level) -> Outcome:
    """Run ``fn`` in a forked child and read its outcome back through a pipe, within ``timeout_s``.

    Long: fork, the read loop with its deadline, the kill and the decoding of what came back are one
    sequence whose order is the isolation: split, a step could be called out of order."""
    read_fd, write_fd = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        _child(fn, args, kwargs, write_fd, low_level.fileno())
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([read_fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(read_fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    except BaseException:  # KeyboardInterrupt from nbval's cell timeout: stop the child too
        _stop(pid)
        raise
    finally:
        os.close(read_fd)
    if timed_out:
        _stop(pid)
        return Outcome(
            False,
            error_type="timeout",
            isolated=True,
            error=f"did not finish within {timeout_s:.0f} s and was stopped "
            "(an endless loop, or a grid far larger than the input?)",
        )
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if not data:
        return Outcome(
            False,
            error_type="crash",
            isolated=True,
            error=_describe_exit(status),
            traceback=_crash_trace(low_level),
        )
    try:
        payload = pickle.loads(data)
    except Exception as error:  # noqa: BLE001 - a child killed mid-write
        return Outcome(
            False,
            error_type="crash",
            isolated=True,
            error=f"{_describe_exit(status)}; its result was cut short ({error})",
        )
    if payload[0] == "ok":
        return Outcome(True, payload[1], output=payload[2], isolated=True)
    _, error_type, message, trace, output = payload
    return Outcome(
        False,
        error_type=error_type,
        error=f"{error_type}: {message}" if message else error_type,
        traceback=trace,
        output=output,
        isolated=True,
    )


# ---------------------------------------------------------------- entry point


def run_here(fn: Callable[..., Any], *args, **kwargs) -> Outcome:
    """Call ``fn`` in this process, turning an exception into an :class:`Outcome` (no fork, no time
    limit)."""
    return _run_in_process(fn, args, kwargs)


def run(fn: Callable[..., Any], *args, timeout_s: float = DEFAULT_TIMEOUT_S, **kwargs) -> Outcome:
    """Call ``fn(*args, **kwargs)`` so that a crash, an exception or a hang becomes an
    :class:`Outcome`.

    Forks where it can (see the module docstring); otherwise runs in this
    process and treats CUDA faults as fatal for the rest of the process. Never
    raises for anything ``fn`` does, except ``KeyboardInterrupt`` in this
    process (nbval's cell timeout), which stops the child and propagates.
    """
    forkable, _ = can_fork()
    if forkable:
        outcome = _run_forked(fn, args, kwargs, timeout_s)
        if outcome.output:
            print(outcome.output, end="" if outcome.output.endswith("\n") else "\n")
        return outcome
    return _run_in_process(fn, args, kwargs)
