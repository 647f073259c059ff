"""The grader cells' side: hand the student's function to the grader process and show its verdict.

In a lab notebook::

    from brrr.grading.client import Grader
    grade = Grader("02-fuse-it")
    ...
    grade("correct", fused_chain)

``grade(check, function)`` connects to the grader process, names the check and
then only *answers*: it calls ``function`` on the arguments the grader sends, or
records the kernel launches it makes (:mod:`brrr.checks.kernels`), and sends
back plain data. The grader decides; this side prints ``PASS`` with the
grader's summary, or raises ``AssertionError`` with its message.

Which grader? Under the gradebook, the one the gradebook started for this
submission (its socket is in ``$BRRR_GRADER``). Anywhere else (Jupyter, Colab,
``pytest --nbval-lax``) a *practice* grader is started for this notebook, the
same program with the same checks; its verdicts are for the student's eyes
only, and nothing is recorded.

Student code runs under :func:`brrr.checks.isolation.run`: on a CPU in a forked
child, so a crash or a hang of the student's function is an answer ("it
crashed"), not a dead notebook.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from brrr.checks import isolation
from brrr.grading.wire import Channel, WireError, decode, encode

GRADER_ENV = "BRRR_GRADER"


class Printed(str):
    """Text already printed; Jupyter does not show it a second time as the cell's value."""

    def _ipython_display_(self) -> None:
        pass


class Passed(Printed):
    """A passed check's summary."""


# ---------------------------------------------------------------- answering one request


def _error_reply(
    error_type: str, message: str, *, crashed: bool = False, timed_out: bool = False
) -> dict:
    if timed_out:
        kind = "timeout"
    elif crashed:
        kind = "crashed"
    elif error_type == "NotImplementedError" or "NotImplementedError" in message:
        kind = "not-written"
    else:
        kind = "raised"
    return {"op": "error", "kind": kind, "message": message}


def _call(fn: Callable[..., Any], args: list, threads: int | None) -> Any:
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return encode(fn(*args))
    finally:
        torch.set_num_threads(before)


def _record(fn: Callable[..., Any], tensors: Mapping[str, Any], inputs: list[str]) -> dict:
    import torch

    from brrr.device import DEVICE
    from brrr.checks import kernels
    from brrr.checks.dtypes import DTYPES

    made = []
    for name, (shape, dtype) in tensors.items():
        dtype = DTYPES[dtype]
        if name in inputs and dtype.is_floating_point:
            made.append(torch.randn(shape, dtype=dtype, device=DEVICE))
        else:
            made.append(torch.empty(shape, dtype=dtype, device=DEVICE))
    return encode(kernels.record_launches(fn, made, list(tensors)))


# A chunk of a file, base64 in one message: well under wire.MAX_MESSAGE_BYTES.
READ_CHUNK_BYTES = 16 << 20


def _read(path: Any, offset: Any, length: Any) -> Any:
    """Bytes ``offset`` to ``offset + length`` of the file at ``path`` in this process's view of
    the files (a sandbox's private ``/tmp`` included), as a ``uint8`` tensor: what the grader asks
    for when a function answers with the path of a file it wrote, which the grader cannot open."""
    import torch

    if not isinstance(path, str) or not path:
        raise ValueError(f"the grader asked for a file without a path ({str(path)[:40]!r})")
    if not (isinstance(offset, int) and isinstance(length, int) and offset >= 0):
        raise ValueError("the grader asked for a part of a file it cannot name")
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read(max(0, min(length, READ_CHUNK_BYTES)))
    if not data:
        return encode(torch.empty(0, dtype=torch.uint8))
    return encode(torch.frombuffer(bytearray(data), dtype=torch.uint8))


def _here(fn, *args, timeout_s=None):
    return isolation.run_here(fn, *args)


def answer(
    request: Mapping[str, Any], fn: Callable[..., Any], wire_types: Mapping[str, type] | None = None
) -> dict:
    """The reply to one request of the grader: run the student's function as asked, isolated."""
    op = request.get("op")
    timeout_s = request.get("timeout_s") or isolation.DEFAULT_TIMEOUT_S
    try:
        if op == "call":
            args = decode(request.get("args", []), dataclasses_by_name=wire_types)
            if request.get("forked", True):
                outcome = isolation.run(
                    _call, fn, args, request.get("threads"), timeout_s=timeout_s
                )
            else:  # a timed call: in this process, so the grader's clock sees only the call
                outcome = isolation.run_here(_call, fn, args, request.get("threads"))
        elif op == "record":
            run = isolation.run if request.get("forked", True) else _here
            outcome = run(
                _record,
                fn,
                request.get("tensors", {}),
                list(request.get("inputs", [])),
                timeout_s=timeout_s,
            )
        elif op == "read":
            outcome = isolation.run_here(
                _read, request.get("path"), request.get("offset", 0), request.get("length", 0)
            )
            if not outcome.ok:
                return _error_reply(
                    outcome.error_type,
                    f"the file {str(request.get('path'))[:200]!r} cannot be read: {outcome.error}",
                )
        else:
            return {"op": "error", "kind": "raised", "message": f"unknown request {op!r}"}
    except WireError as error:
        return {
            "op": "error",
            "kind": "raised",
            "message": f"could not read the grader's request: {error}",
        }
    if outcome.ok:
        return {"op": "result", "value": outcome.value}
    name = getattr(fn, "__name__", "your function")
    if outcome.error_type == "timeout":
        return _error_reply("timeout", f"{name} {outcome.error}", timed_out=True)
    if outcome.crashed:
        return _error_reply(
            "crash", f"{name} crashed: {outcome.error}{crash_site(outcome)}", crashed=True
        )
    if outcome.error_type in ("WireError",):
        return _error_reply(
            outcome.error_type, f"{name} returned {outcome.error.removeprefix('WireError: ')}"
        )
    return _error_reply(outcome.error_type, f"{name} raised {outcome.error}")


def crash_site(outcome: isolation.Outcome) -> str:
    """The student's frames from a crash's stack, as a readable tail for a message ('' if none)."""
    if not outcome.crashed or not outcome.traceback:
        return ""
    library = (
        os.sep + "site-packages" + os.sep,
        os.sep + "brrr" + os.sep,
        os.sep + "lib" + os.sep + "python",
    )
    frames = [
        line.strip()
        for line in outcome.traceback.splitlines()
        if line.strip().startswith("File ") and not any(part in line for part in library)
    ]
    return (
        ("\nWhere it crashed (most recent call first):\n" + "\n".join(f"  {f}" for f in frames[:6]))
        if frames
        else ""
    )


def local_student(
    fn: Callable[..., Any], wire_types: Mapping[str, type] | None = None, *, forked: bool = True
):
    """The student's side served in this process, for tests of the checks: the same requests, the
    same plain data.

    It is a :class:`brrr.grading.server.Student` whose requests are answered here
    by :func:`answer`, through a JSON round trip, instead of across a socket.
    ``forked=False`` answers every request in this process (quicker, for code
    known not to crash).
    """
    import json

    from brrr.grading.server import Student, reply_value

    class LocalStudent(Student):
        def __init__(self):
            super().__init__(None, getattr(fn, "__name__", "your function"))

        def _request(self, message: dict, timeout_s: float | None) -> Any:
            if not forked:
                message = {**message, "forked": False}
            reply = json.loads(json.dumps(answer(json.loads(json.dumps(message)), fn, wire_types)))
            return reply_value(reply, self.name)

    return LocalStudent()


LocalStudent = local_student


# ---------------------------------------------------------------- the connection


def record_verdict(lab: str, check: str, verdict: Mapping[str, Any], message: str) -> None:
    """The grader's verdict on the GPU record (:func:`brrr.reference.record_check`), under the GPU
    check only: passed, failed or does not apply, with the grader's message and, for a timed check,
    its value, bound and every attempt (the figures the grader sends with its verdict)."""
    if not os.environ.get("BRRR_RECORD_REFERENCE"):
        return
    from brrr import reference

    word = (
        "does not apply"
        if not verdict.get("applies", True)
        else "passed"
        if verdict.get("passed")
        else "failed"
    )
    figures = verdict.get("measured") or []  # a timed check's: brrr.checks.core.taken_figures
    last = figures[-1] if figures else {}
    bound = {last["rule"]: last["bound"]} if last else None
    attempts = last.get("attempts") if last else None
    reference.record_check(
        "grader",
        f"{lab}/{check}",
        verdict=word,
        value=last.get("value"),
        bound=bound,
        attempts=attempts,
        detail=message,
    )


class _PracticeGrader:
    """A grader process started by this notebook, for feedback outside the gradebook."""

    def __init__(self, lab: str):
        self.folder = tempfile.TemporaryDirectory(prefix="brrr-grader-")
        self.path = str(Path(self.folder.name) / "grader.sock")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "brrr.grading.server", "--lab", lab, "--socket", self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
            start_new_session=True,
        )  # out of the notebook's process group: an interrupt is not for it
        self.process.stdin.write("\n")  # no signing key: a practice grader records nothing
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.process.kill()
            raise RuntimeError(
                f"the practice grader for {lab} did not start (it printed {line!r}); see the error "
                "above"
            )
        atexit.register(self.close)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Grader:
    """``grade = Grader(lab)``; then ``grade(check, function)`` in each grader cell."""

    def __init__(self, lab: str):
        self.lab = lab
        self._channel: Channel | None = None
        self._practice: _PracticeGrader | None = None

    def _connect(self) -> Channel:
        if self._channel is not None:
            return self._channel
        path = os.environ.get(GRADER_ENV)
        if not path:
            if self._practice is None or self._practice.process.poll() is not None:
                self._practice = _PracticeGrader(self.lab)
            path = self._practice.path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        self._channel = Channel(sock)
        return self._channel

    def _drop(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def __call__(self, check: str, function: Callable[..., Any]) -> str:
        from brrr import labs
        from brrr.column import fit as column_fit
        from brrr.stamp import stamp

        wire_types = getattr(labs.module(self.lab), "WIRE_TYPES", {})
        name = getattr(function, "__name__", "your function")
        try:
            channel = self._connect()
            channel.send({"op": "check", "lab": self.lab, "check": check, "function": name})
            while True:
                request = channel.receive(None)
                if request.get("op") == "verdict":
                    break
                channel.send(answer(request, function, wire_types))
        except BaseException:
            # an interrupted exchange leaves the connection out of step: start afresh next time
            self._drop()
            raise
        message = str(request.get("message", ""))
        record_verdict(self.lab, check, request, message)
        if not request.get("applies", True):
            print(column_fit(message))
            return Printed(message)
        if request.get("passed"):
            print(column_fit(f"PASS {self.lab} / {check}: {message}") + f"\n  {stamp()}")
            return Passed(message)
        raise AssertionError(message)
