"""The grader process: it holds the checks, draws the inputs, compares, times and keeps the record.

    python -m brrr.grading.server --lab 02-fuse-it --socket /path/to/grader.sock

A notebook's grader cells (:mod:`brrr.grading.client`) connect to this process
and hand it the student's functions by name; everything else happens here:

- the check functions of the lab (its checks module, a :class:`brrr.labs.Lab`),
  their thresholds and tolerances, are those this process imported at start-up,
  before any student code ran;
- the student's process is only asked to *do* things: call a function on
  arguments sent from here, or record the kernel launches its wrapper makes.
  What comes back is decoded into plain data (:mod:`brrr.grading.wire`);
- reference values, fresh inputs, timings (by this process's clock) and the
  comparison are all computed here;
- the student's processes are the sandbox the gradebook started for them: it
  names the sandbox's first process on this process's standard input
  (:func:`tell_student`), and the timed checks watch it and every process
  below it (:mod:`brrr.checks.fairness`), whichever of them connected here;
- the results stay in this process's memory. When its standard input closes
  (the gradebook closes it after the student's processes are gone), it prints
  them once, signed with an HMAC whose key is the first line it read from
  standard input, and exits. Nothing the student's process writes is read as a
  result.

On Linux the process marks itself non-dumpable, so that a process of the same
user that is not root cannot attach a debugger to it or read its memory or file
descriptors through ``/proc``.

Each check runs at most once per grader process: asking again returns the first
verdict, so a lucky retry cannot replace a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from brrr.checks import core, fairness, processes
from brrr.grading.wire import Channel, WireError, decode, encode

if TYPE_CHECKING:
    from brrr.labs import Lab

REQUEST_TIMEOUT_S = float(os.environ.get("BRRR_GRADER_REQUEST_TIMEOUT_S", 900))


class StudentError(AssertionError):
    """The student's side could not do what was asked: it raised, hung, crashed or answered
    nonsense.

    It is a failed check (an AssertionError) whose message says so, for the student.
    """

    def __init__(self, kind: str, message: str, function: str = "your function"):
        self.kind = (
            kind  # "not-written", "raised", "crashed", "timeout", "disconnected", "bad-reply"
        )
        super().__init__(str(_failure(kind, message, function)))


def _failure(kind: str, message: str, function: str) -> AssertionError:
    if kind == "not-written":
        return core.fail(
            f"{function} is not written yet: it raised NotImplementedError ({message})"
        )
    if kind == "disconnected":
        return core.fail(
            f"{function}: the notebook stopped answering the grader ({message}). It was "
            "interrupted, or its kernel died or exited, while this check ran."
        )
    return core.fail(message if message.startswith(function) else f"{function}: {message}")


class Student:
    """The student's function, as the grader reaches it: requests over the connection, plain data
    back."""

    def __init__(
        self, channel: Channel, function: str, root: Callable[[], int | None] | None = None
    ):
        self.channel = channel
        self.name = function
        # the student's first process, where a gradebook names it (StudentRoot.wait)
        self.root = root

    def _request(self, message: dict, timeout_s: float | None) -> Any:
        try:
            self.channel.send(message)
            reply = self.channel.receive(timeout_s or REQUEST_TIMEOUT_S)
        except (TimeoutError, socket.timeout):
            raise StudentError(
                "timeout", f"no answer within {timeout_s or REQUEST_TIMEOUT_S:.0f} s", self.name
            ) from None
        except (ConnectionError, OSError) as error:
            raise StudentError(
                "disconnected", str(error) or type(error).__name__, self.name
            ) from None
        except (WireError, ValueError) as error:
            raise StudentError(
                "bad-reply",
                f"the notebook sent a message the grader cannot read ({error})",
                self.name,
            ) from None
        return reply_value(reply, self.name)

    def call(
        self, *args, threads: int | None = None, timeout_s: float | None = None, forked: bool = True
    ) -> Any:
        """``function(*args)`` in the student's process; its return value as plain data.

        ``forked=False`` asks for the call in the notebook's own process, not a
        forked child: for timed calls, whose duration the grader measures.
        """
        return self._request(
            {
                "op": "call",
                "args": encode(list(args)),
                "threads": threads,
                "timeout_s": timeout_s,
                "forked": forked,
            },
            (timeout_s or REQUEST_TIMEOUT_S) + 30,
        )

    def record(
        self,
        tensors: dict[str, tuple[list[int], str]],
        *,
        inputs: tuple[str, ...] = (),
        timeout_s: float | None = None,
    ) -> dict:
        """The kernel launches the wrapper makes when called on tensors of these shapes and dtypes.

        ``tensors`` maps the wrapper's arguments, in order, to (shape, dtype name).
        Tensors named in ``inputs`` hold random values, the others are empty.
        """
        value = self._request(
            {"op": "record", "tensors": tensors, "inputs": list(inputs), "timeout_s": timeout_s},
            (timeout_s or REQUEST_TIMEOUT_S) + 30,
        )
        if not isinstance(value, dict):
            raise StudentError("bad-reply", "the launch record is not a dict")
        return value

    def read_file(self, path: str, *, limit: int, timeout_s: float = 60) -> bytes:
        """The bytes of a file the student's process wrote (``path`` as it sees it: a sandbox's
        /tmp is its own), read there in chunks; a StudentError if unreadable or over ``limit``."""
        import torch

        data = bytearray()
        while True:
            chunk = self._request(
                {"op": "read", "path": path, "offset": len(data), "length": limit + 1 - len(data)},
                timeout_s,
            )
            if not (isinstance(chunk, torch.Tensor) and chunk.dtype == torch.uint8):
                raise StudentError("bad-reply", "a part of a file that is not bytes", self.name)
            data += chunk.numpy().tobytes()
            if len(data) > limit:
                raise StudentError("raised", f"the file {path!r} holds over {limit:,} B", self.name)
            if not chunk.numel():
                return bytes(data)


def reply_value(reply: dict, function: str) -> Any:
    """The plain value in a reply from the student's side, or the StudentError it reports."""
    if reply.get("op") == "result":
        try:
            return decode(reply.get("value"))
        except WireError as error:
            raise StudentError(
                "bad-reply", f"returned something the grader cannot read ({error})", function
            ) from None
    if reply.get("op") == "error":
        kind = str(reply.get("kind", "raised"))
        kind = kind if kind in ("not-written", "raised", "crashed", "timeout") else "raised"
        raise StudentError(kind, str(reply.get("message", "failed"))[:4000], function)
    raise StudentError(
        "bad-reply", f"unexpected reply {str(reply.get('op'))[:40]!r} to a request", function
    )


# ---------------------------------------------------------------- the record


class Record:
    """Every check's verdict, kept in this process; printed once, signed, at the end."""

    def __init__(self, lab: str):
        self.lab = lab
        self.results: dict[str, dict] = {}
        self.lock = threading.Lock()

    def signed(self, key: bytes) -> str:
        with self.lock:
            body = json.dumps({"lab": self.lab, "results": self.results}, sort_keys=True)
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        return json.dumps({"body": body, "mac": mac})


def verify(line: str, key: bytes) -> dict:
    """The results in a line printed by a grader process, if its signature is right; raises
    ValueError if not."""
    data = json.loads(line)
    body, mac = data["body"], data["mac"]
    expected = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, mac):
        raise ValueError("the grader's results carry a wrong signature")
    return json.loads(body)


# ---------------------------------------------------------------- the student's processes

STUDENT_LINE = "student"  # names the student's first process on the grader's input


def tell_student(stream, pid: int) -> None:
    """The gradebook's side: name ``pid`` (the sandbox's first process, or under ``--no-sandbox``
    the reaper) to the grader whose standard input is ``stream``. A grader that died meanwhile is
    not told."""
    try:
        stream.write(f"{STUDENT_LINE} {pid}\n")
        stream.flush()
    except (OSError, ValueError):  # its end is closed: its death is read when it finishes
        pass


class StudentRoot:
    """The student's first process, as the gradebook names it on this process's standard input: the
    first :func:`tell_student` line counts. A grader started by a gradebook (``expected``: it was
    given a signing key) waits for it; a practice grader is told nothing, and takes its socket's
    peer."""

    def __init__(self, expected: bool):
        self.expected, self.pid = expected, None
        self.told = threading.Event()

    def read(self, line: bytes) -> None:
        word, _, number = line.decode(errors="replace").strip().partition(" ")
        if word == STUDENT_LINE and number.isdigit() and not self.told.is_set():
            self.pid = int(number)
            self.told.set()

    def wait(self) -> int | None:
        """The pid the gradebook named (None for a practice grader); a :class:`fairness.GraderFault`
        if a gradebook's grader was not told within :data:`fairness.TOLD_TIMEOUT_S`."""
        if not self.expected:
            return None
        if not self.told.wait(fairness.TOLD_TIMEOUT_S):
            raise fairness.GraderFault(
                "the gradebook did not name your notebook's processes to the grader, so it "
                "cannot watch them while it times its own side"
            )
        return self.pid


# ---------------------------------------------------------------- serving one connection


# how a check's message starts when the grader, not the student, failed
GRADER_ERROR = "grader error (not your fault)"


def _run_check(lab: Lab, check: str, student: Student) -> tuple[bool, str, bool]:
    """Run one check: (passed, message, whether the grader failed, not the student)."""
    try:
        summary = lab.grade(check, student)
        return True, str(summary), False
    except AssertionError as failure:  # a failed check, StudentError included
        return False, str(failure), False
    except (
        fairness.GraderFault
    ) as fault:  # the grader could not measure fairly: grade again elsewhere
        return False, f"{GRADER_ERROR}: {fault}", True
    except KeyboardInterrupt:
        raise
    except Exception as error:  # noqa: BLE001 - a bug of the grader: say so, never blame the student
        return (
            False,
            f"{GRADER_ERROR}: {type(error).__name__}: {error}\n" + traceback.format_exc(limit=4),
            True,
        )


_one_check_at_a_time = (
    threading.Lock()
)  # connections are served side by side, checks one after another


def serve_connection(
    channel: Channel,
    lab: Lab,
    record: Record,
    device_class: str,
    root: Callable[[], int | None] | None = None,
) -> None:
    """Answer one connection's check requests until it closes, one check at a time, each verdict
    signed into the record; ``root`` names the student's first process (:class:`StudentRoot`).

    Long: the protocol loop: every way a request can be malformed is answered where it is read."""
    from brrr.device import device_name

    checks = tuple(lab.CHECKS[device_class])
    while True:
        try:
            message = channel.receive(None)
        except (ConnectionError, OSError, WireError, ValueError):
            return
        if message.get("op") != "check":
            channel.send(
                {
                    "op": "verdict",
                    "applies": False,
                    "passed": False,
                    "message": "the grader expected a check request",
                }
            )
            continue
        check = str(message.get("check", ""))
        function = str(message.get("function", "your function"))[:80]
        claimed_lab = message.get("lab")
        if claimed_lab is not None and claimed_lab != lab.LAB:
            channel.send(
                {
                    "op": "verdict",
                    "applies": False,
                    "passed": False,
                    "message": f"this grader grades lab {lab.LAB}, not {claimed_lab!r}",
                }
            )
            continue
        if check not in checks:
            note = (
                lab.not_applicable(check, device_class)
                if check in lab.ALL_CHECKS
                else (
                    f"{lab.LAB} has no check {check!r}; its checks are {', '.join(lab.ALL_CHECKS)}"
                )
            )
            channel.send({"op": "verdict", "applies": False, "passed": False, "message": note})
            continue
        with _one_check_at_a_time:
            with record.lock:
                earlier = record.results.get(check)
            if earlier is not None:
                channel.send(
                    {
                        "op": "verdict",
                        "applies": True,
                        "passed": earlier["passed"],
                        "message": "already graded in this run; the first verdict stands:\n"
                        + earlier["message"],
                    }
                )
                continue
            started = time.monotonic()
            core.taken_figures()  # nothing left over from an earlier check
            passed, text, grader_fault = _run_check(lab, check, Student(channel, function, root))
            measured = core.taken_figures()
            result = {
                "passed": passed,
                "message": text,
                "grader_fault": grader_fault,
                "device": device_name(),
                "device_class": device_class,
                "seconds": round(time.monotonic() - started, 2),
            }
            with record.lock:
                record.results.setdefault(check, result)
        try:
            channel.send(
                {
                    "op": "verdict",
                    "applies": True,
                    "passed": passed,
                    "message": text,
                    "measured": measured,
                }
            )
        except OSError:
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m brrr.grading.server", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--lab", required=True)
    parser.add_argument("--socket", required=True, help="path of the Unix socket to listen on")
    args = parser.parse_args(argv)
    processes.set_dumpable(False)
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # it ends when its standard input closes, not on Ctrl-C
    key = sys.stdin.buffer.readline().strip()

    from brrr import labs
    from brrr.device import device_class

    lab = labs.lab(args.lab)  # its checks imported now, before any student code runs
    lab.prepare()
    record = Record(lab.LAB)
    root = StudentRoot(expected=bool(key))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(args.socket)
    os.chmod(args.socket, 0o600)
    listener.listen(4)
    klass = device_class()

    def accept_loop() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(
                target=serve_and_close, args=(Channel(connection),), daemon=True
            ).start()

    def serve_and_close(channel: Channel) -> None:
        try:
            serve_connection(channel, lab, record, klass, root.wait)
        finally:
            channel.close()

    threading.Thread(target=accept_loop, daemon=True).start()
    print("ready", flush=True)
    while line := sys.stdin.buffer.readline():  # until the gradebook (or practice client) closes it
        root.read(line)
    if key:
        sys.stdout.write(record.signed(key) + "\n")
        sys.stdout.flush()
    else:  # a practice grader: its notebook's kernel may be killed before it removes the folder
        with contextlib.suppress(OSError):
            os.unlink(args.socket)
            os.rmdir(os.path.dirname(args.socket))  # only if empty: the socket's own folder
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
