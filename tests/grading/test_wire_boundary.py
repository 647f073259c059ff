"""Whatever the student's process sends back is checked where it arrives (brrr.grading.wire, and the
launch record by brrr.checks.kernels.recipe_problem): a value the grader cannot use is the student's
failure, with what was wrong, never a grader error. Each reply below used to reach a check as a
value the check did not expect (10**400 overflowed float(), invalid base64 raised binascii.Error,
deep nesting RecursionError, a tensor of shape [0, 2**70] a TypeError, a launch record of the wrong
type AttributeError): the row read ``grader-error``, "not your fault ... grade this submission
again".

The replies travel as the notebook's would: raw JSON lines on a real socket, read by the grader's
:class:`brrr.grading.server.Student`, and each check runs as the grader process runs it
(``_run_check``)."""

import socket
import threading

import pytest

import brrr.device  # noqa: F401  (before triton: the interpreter on a CPU)
from brrr import labs
from brrr.grading import server, wire


def graded(lab: str, check: str, reply: str) -> tuple[bool, str, bool]:
    """``check`` of ``lab`` run by the grader against a notebook that answers every request with
    ``reply`` (one raw JSON line): (passed, message, grader_fault)."""
    grader_end, notebook_end = socket.socketpair()
    channel = wire.Channel(grader_end)

    def answer() -> None:
        reader = notebook_end.makefile("rb")
        try:
            while reader.readline():
                notebook_end.sendall(reply.encode() + b"\n")
        except OSError:
            pass

    threading.Thread(target=answer, daemon=True).start()
    try:
        return server._run_check(labs.lab(lab), check, server.Student(channel, "fn"))
    finally:
        channel.close()
        notebook_end.close()


def result(value: str) -> str:
    return '{"op": "result", "value": ' + value + "}"


# What a function returning a number (Lab 1's ridge_point) might send, and what it is told.
NUMBERS = {
    "10**400": (str(10**400), "whole number of 401 digits"),
    "4,400 digits": ("1" * 4400, "not JSON"),
    "1e400": ("1e400", "finite"),
    "NaN": ('{"$float": "nan"}', "finite"),
    "inf": ('{"$float": "inf"}', "finite"),
    "negative": ("-5", "positive"),
    "empty": ('""', "not a number"),
    "a list": ("[]", "not a number"),
    "a record": ('{"$dataclass": "Op", "fields": {}}', "unexpected dataclass"),
    "a forged float": ('{"$float": {"x": 1}}', "not a float"),
    "a forged dtype": ('{"$dtype": ["float32"]}', "unknown dtype"),
    "invalid base64": (
        '{"$tensor": {"dtype": "float32", "shape": [1], "data": "!!!!"}}',
        "not valid base64",
    ),
    "a tensor of shape [0, 2**70]": (
        '{"$tensor": {"dtype": "float32", "shape": [0, ' + str(2**70) + '], "data": ""}}',
        "each size must be",
    ),
    "deep nesting": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "nesting under the parser's limit": ("[" * 200 + "]" * 200, "nested more than"),
}


@pytest.mark.parametrize("value, said", NUMBERS.values(), ids=NUMBERS.keys())
def test_a_value_the_grader_cannot_use_is_the_students_failure_said_so(value, said):
    passed, message, grader_fault = graded("01-roofline", "ridge_point", result(value))
    assert not passed and not grader_fault, message
    assert said in message and server.GRADER_ERROR not in message, message
    assert message.startswith("fn"), message  # names the student's function


# What a wrapper's launch record (Lab 2's correct) might be, and what it is told.
RECORDS = {
    "a string": ('"launches"', "not a dict"),
    "launches of the wrong type": ('{"launches": "x"}', "launches are not a list"),
    "a launch of the wrong type": ('{"launches": ["k"]}', "without a kernel's name"),
    "a grid of floats": (
        '{"launches": [{"kernel": "k", "grid": [1.5, 1, 1], "args": {}}]}',
        "grid that is not three counts",
    ),
    "arguments of the wrong type": (
        '{"launches": [{"kernel": "k", "grid": [1, 1, 1], "args": []}]}',
        "no arguments or options",
    ),
    "a tensor with no shape": (
        '{"launches": [{"kernel": "k", "grid": [1, 1, 1], "args": {"x": {"tensor": "x"}}}]}',
        "no tensor view",
    ),
    "sources of the wrong type": ('{"launches": [], "sources": ["def k(): pass"]}', "sources"),
    "constants of the wrong type": ('{"launches": [], "constants": {"B": "64"}}', "constexpr"),
    "a scratch buffer of the wrong type": ('{"launches": [], "scratch": [7]}', "scratch"),
    "a kernel source with a null byte": (
        '{"launches": [{"kernel": "k", "grid": [1, 1, 1], "args": {}}], '
        '"sources": {"k": "def k():\\u0000 pass"}}',
        "does not parse",
    ),
}


@pytest.mark.parametrize("value, said", RECORDS.values(), ids=RECORDS.keys())
def test_a_launch_record_the_grader_cannot_read_is_the_students_failure_said_so(value, said):
    passed, message, grader_fault = graded("02-fuse-it", "correct", result(value))
    assert not passed and not grader_fault, message
    assert said in message and server.GRADER_ERROR not in message, message


def test_a_student_function_that_returns_a_huge_number_is_told_on_its_own_side():
    """The notebook's own encoder refuses it first: the message names what the function returned."""
    from brrr.grading.client import answer

    reply = answer({"op": "call", "args": [], "forked": False}, lambda: 10**400)
    assert reply["op"] == "error" and "returned a whole number of 401 digits" in reply["message"]


def test_a_plain_answer_still_passes():
    """The limits refuse nothing an honest function sends: Lab 1's ridge point, computed right."""
    from brrr.grading.client import local_student

    assert labs.lab("01-roofline").grade("ridge_point", local_student(lambda p, b: p / b))
