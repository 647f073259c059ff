"""The grader zygote (brrr/grading/zygote.py, brrr/grading/forked.py): graders forked from one
process that imported torch and the labs once are still one fresh grader per submission, and the
gradebook still tells a grader a signal ended from one that exited by itself. Where the zygote falls
over, graders start anew."""

import io
import os
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from brrr.grading import assemble, forked, gradebook
from brrr.grading import graders as grader_processes
from brrr.grading.wire import Channel


@pytest.fixture(scope="module")
def snapshot():
    return assemble.Snapshot()


@pytest.fixture(scope="module")
def zygote(snapshot):
    started = gradebook.start_zygote(snapshot)
    yield started
    started.close()
    gradebook.IN_FLIGHT.remove(started.process.pid)


def _forked(snapshot, lab: str, zygote) -> gradebook.Grader:
    grader = gradebook.Grader(snapshot, lab, zygote)
    assert grader.forked, "the grader was not forked by the zygote"
    return grader


def _fail_a_check(grader: gradebook.Grader, check: str) -> None:
    """Ask ``grader`` for ``check`` as a notebook would, answering every call with 'not written
    yet'."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(str(grader.socket))
    channel = Channel(connection)
    channel.send({"op": "check", "check": check, "function": "count_op"})
    while (message := channel.receive(60))["op"] != "verdict":
        channel.send({"op": "error", "kind": "not-written", "message": "NotImplementedError"})
    channel.close()
    assert message["applies"] and not message["passed"], message


def test_graders_forked_for_two_labs_share_no_state(snapshot, zygote, monkeypatch):
    """Each has its own process, key, socket and record: a verdict recorded in one is absent in the
    other."""
    monkeypatch.setattr(
        grader_processes, "GRADER_START_TIMEOUT_S", 30
    )  # a grader that never says ready fails soon
    first = _forked(snapshot, "01-roofline", zygote)
    second = _forked(snapshot, "01-roofline", zygote)
    other = _forked(snapshot, "02-fuse-it", zygote)
    graders = (first, second, other)
    try:
        assert all(grader.ready for grader in graders), [grader.error_text() for grader in graders]
        assert len({grader.process.pid for grader in graders} | {zygote.process.pid}) == 4
        assert (
            len({grader.key for grader in graders})
            == len({grader.socket for grader in graders})
            == 3
        )
        assert all(grader.socket.exists() for grader in graders)
        for (
            grader
        ) in graders:  # its command line names its socket, as a grader started on its own does
            assert (
                str(grader.socket).encode()
                in Path(f"/proc/{grader.process.pid}/cmdline").read_bytes()
            )
        _fail_a_check(first, "intensities")
        results = [grader.finish() for grader in graders]
    finally:
        for grader in graders:
            grader.remove()
    assert list(results[0]) == ["intensities"] and not results[0]["intensities"]["passed"]
    assert results[1] == {} and results[2] == {}


def test_a_forked_grader_a_signal_ends_is_killed_and_one_that_exits_is_not(snapshot, zygote):
    killed = _forked(snapshot, "01-roofline", zygote)
    exits = _forked(
        snapshot, "no-such-lab", zygote
    )  # the server refuses the lab and exits by itself
    try:
        assert killed.ready and not killed.killed()
        os.kill(killed.process.pid, signal.SIGKILL)
        assert killed.process.wait(timeout=30) == -signal.SIGKILL
        assert killed.killed()
        assert not exits.ready
        assert exits.process.wait(timeout=30) > 0
        assert not exits.killed()
        assert "unknown lab 'no-such-lab'" in exits.error_text()
    finally:
        killed.remove()
        exits.remove()


class _Ready:
    """A grader process, as far as the gradebook's start of one looks: it reads its input and says
    ready."""

    def __init__(self):
        self.stdin, self.stdout = io.StringIO(), io.StringIO("ready\n")


def test_a_zygote_that_dies_leaves_its_graders_grading_and_the_next_starts_anew(
    snapshot, capsys, monkeypatch
):
    zygote = gradebook.start_zygote(snapshot)
    running = _forked(snapshot, "01-roofline", zygote)
    try:
        assert running.ready
        os.kill(zygote.process.pid, signal.SIGKILL)
        zygote.process.wait()
        _fail_a_check(running, "intensities")
        assert running.process.poll() is None and not running.killed()
        assert list(running.finish()) == ["intensities"]  # its record still comes back, signed
        # a grader started on its own, as before the zygote (stubbed: 4 CPU-seconds saved)
        started = []
        monkeypatch.setattr(
            grader_processes,
            "bootstrap",
            lambda arguments, *_: (
                started.append(arguments[arguments.index("--lab") + 1]) or _Ready()
            ),
        )
        for _ in range(2):
            fallback = gradebook.Grader(snapshot, "01-roofline", zygote)
            shutil.rmtree(
                fallback.private
            )  # a stub has no process to stop: its folder alone is left
            assert not fallback.forked and fallback.ready
        assert started == ["01-roofline", "01-roofline"]
    finally:
        running.remove()
        zygote.close()
        gradebook.IN_FLIGHT.remove(zygote.process.pid)
    noted = capsys.readouterr().err
    assert noted.count("note: the grader zygote stopped forking graders") == 1, noted
    assert noted.count("each grader starts on its own") == 1, noted


def test_a_zygote_that_does_not_start_is_said_in_one_line(snapshot, monkeypatch, capsys):
    monkeypatch.setattr(assemble, "GRADER_BOOTSTRAP", "import sys; sys.exit('no zygote here')")
    zygote = gradebook.start_zygote(snapshot)
    try:
        for _ in range(2):
            with pytest.raises(forked.ZygoteGone, match="no zygote here"):
                zygote.fork({}, 2)
    finally:
        zygote.close()
        gradebook.IN_FLIGHT.remove(zygote.process.pid)
    noted = capsys.readouterr().err
    assert noted.strip().splitlines() == [
        "note: the grader zygote did not start (no zygote here); each grader starts on its own"
    ]


def test_the_zygote_refuses_to_fork_beside_a_second_thread():
    from brrr.grading import zygote

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert "threads" in zygote.fork_problem()
    finally:
        stop.set()
        thread.join()


def test_a_forked_grader_is_killed_through_its_pidfd_once_and_then_left_alone():
    reading, writing = socket.socketpair()
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    grader = forked.ForkedGrader(child, os.pidfd_open(child), reading, None, None)
    grader.kill()
    os.waitpid(child, 0)  # the zygote's part: it reaps the child and says how it ended
    writing.send(b'{"exit": -9}')
    assert grader.wait(timeout=10) == -9 and grader.poll() == -9
    grader.kill()  # nothing left to signal: no error, and never a process that reused the pid
    writing.close()
