"""The grader's own timed windows, watched (brrr/checks/fairness.py): a student whose processes work
while the grader times its side fails for it; a grader that does not get the CPU voids the attempt
and, after VOIDED_MAX of them, reports a grader fault, never the student's failure and never a
pass."""

import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from brrr.checks import core, fairness, processes
from brrr.grading import sandbox
from conftest import ROOT

pytestmark = [
    pytest.mark.device_independent,
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="PID namespaces and /proc are Linux only"
    ),
]


class Machine:
    """Fake clocks: each window of grader work advances the wall clock, the grader thread's CPU
    clock and the student's processes' CPU by what the test says."""

    def __init__(self):
        self.now = self.thread = self.student = 0.0

    def work(self, wall: float, grader_share: float = 1.0, student_rate: float = 0.0) -> None:
        self.now += wall
        self.thread += grader_share * wall
        self.student += student_rate * wall

    def watch(self, pid: int, what: str) -> fairness.Watch:
        return fairness.Watch(
            pid,
            what,
            processes=lambda pid: [pid],
            cpu=lambda pids: self.student,
            grader_time=lambda: self.thread,
            clock=lambda: self.now,
        )


def measuring(
    machine: Machine, *, grader_share=lambda attempt, window: 1.0, student_rate=0.0, passes=True
):
    """A measure function of nine grader windows of 62.5 ms each (a binary fraction: the fake clocks
    add up exactly), every attempt counted in ``calls``."""
    calls = []

    def measure(watch: fairness.Watch) -> core.Attempt:
        calls.append(watch)
        for window in range(9):
            with watch.window():
                machine.work(0.0625, grader_share(len(calls), window), student_rate)
            machine.now += 0.0625  # the student's call, between the grader's windows
        return core.Attempt(1.0, passes, f"attempt {len(calls)}")

    return measure, calls


def test_an_attempt_whose_grader_got_half_its_wall_time_is_voided_and_then_a_grader_fault():
    machine = Machine()
    measure, calls = measuring(machine, grader_share=lambda attempt, window: 0.5)
    with pytest.raises(fairness.GraderFault) as fault:
        fairness.repeat_fairly(
            measure, 123, "fast_train", "the given step", attempts=3, watch=machine.watch
        )
    assert (
        len(calls) == fairness.VOIDED_MAX
    )  # each voided, none judged: no pass, no student failure
    message = str(fault.value)
    assert "could not get the CPU" in message and "Regrade on a quieter machine" in message, message
    assert "0.50, 0.50" in message  # the shares it saw, window by window
    assert not isinstance(
        fault.value, AssertionError
    )  # the server tells it from a failed check by its type


def test_a_voided_attempt_is_measured_again_and_not_counted():
    machine = Machine()
    measure, calls = measuring(
        machine, grader_share=lambda attempt, window: 0.5 if attempt == 1 else 1.0
    )
    best, history = fairness.repeat_fairly(
        measure, 123, "fast_train", "the given step", watch=machine.watch
    )
    assert best.detail == "attempt 2" and len(history) == 1 and len(calls) == 2


def test_starved_windows_below_the_median_do_not_void_an_attempt():
    """Four windows of nine with a third of a CPU: the median, which the checks judge, is a fair
    one."""
    machine = Machine()
    measure, calls = measuring(
        machine, grader_share=lambda attempt, window: 0.33 if window < 4 else 0.99
    )
    best, history = fairness.repeat_fairly(
        measure, 123, "fast_train", "the given step", watch=machine.watch
    )
    assert len(calls) == 1 and len(calls[0].starved()) == 4 and not calls[0].void()


def test_a_quiet_student_and_a_grader_with_the_cpu_pass_in_one_attempt():
    machine = Machine()
    measure, calls = measuring(
        machine, grader_share=lambda attempt, window: 0.7, student_rate=0.004
    )
    best, history = fairness.repeat_fairly(
        measure, 123, "fast_train", "the given step", watch=machine.watch
    )
    assert best.passed and len(calls) == 1 and calls[0].starved() == []


def test_a_busy_student_namespace_is_the_students_failure_even_when_it_starved_the_grader():
    machine = Machine()
    measure, calls = measuring(machine, grader_share=lambda attempt, window: 0.5, student_rate=0.5)
    with pytest.raises(AssertionError) as failure:
        fairness.repeat_fairly(measure, 123, "fast_train", "the given step", watch=machine.watch)
    message = str(failure.value)
    assert "your notebook's processes used 0.50 CPU-seconds per second" in message, message
    assert "while the grader timed the given step" in message and len(calls) == 1


def test_the_grader_own_thread_is_not_counted_as_the_students_when_they_share_a_process():
    """Served in this process (a test's local_student): the process's CPU less the grader
    thread's."""
    watch = fairness.Watch(os.getpid(), "the given step")
    for _ in range(3):
        with watch.window():
            start = time.thread_time()
            while time.thread_time() - start < 0.05:  # the grader's own work, on its own thread
                pass
    assert watch.student_rate() < fairness.STUDENT_CPU_PER_S, watch.windows
    watch.judge("fast_train")


def test_autograd_device_threads_work_for_the_grader_not_the_student():
    """On a GPU the backward passes of the grader's given step run on autograd's thread for the
    device (pt_autograd_0) while the grader's thread waits for them. Here a thread of that name does
    the grader's work while the grader's thread waits: that work is the grader's side, not the
    student's CPU (the planted bug: 0.40 CPU-s/s charged to Lab 4's reference solution on an H200),
    and it counts in the grader's share (not a grader left without the CPU; the share itself depends
    on the machine's load, so its CPU is asserted)."""
    work, done, stop = threading.Event(), threading.Event(), threading.Event()

    def device_thread():
        ctypes.CDLL(None).prctl(15, b"pt_autograd_0", 0, 0, 0)  # PR_SET_NAME, as torch names it
        while work.wait() and not stop.is_set():
            work.clear()
            start = time.thread_time()
            while time.thread_time() - start < 0.05:  # the backward pass
                pass
            done.set()

    thread = threading.Thread(target=device_thread, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not fairness.autograd_threads() and time.monotonic() < deadline:
            time.sleep(0.01)
        watch = fairness.Watch(os.getpid(), "the given step")
        for _ in range(3):
            with watch.window():
                work.set()
                done.wait()  # the grader's thread waits for the backward pass
                done.clear()
    finally:
        stop.set()
        work.set()
        thread.join()
    assert watch.student_rate() < fairness.STUDENT_CPU_PER_S, watch.windows
    assert all(window.grader_cpu >= 0.045 for window in watch.windows), (
        watch.windows
    )  # the backward passes
    watch.judge("fast_train")


PRACTICE_GRADER = """
import json, os, threading, time
from brrr.checks import fairness
# the notebook's process started this grader, as a practice grader is started
student = os.getppid()
go, stop = threading.Event(), threading.Event()

def other_thread():  # another thread of the grader's process: its work is the grader's
    go.wait()
    while not stop.is_set():
        pass

thread = threading.Thread(target=other_thread)
thread.start()
watch = fairness.Watch(student, "the given step")
with watch.window():
    go.set()
    time.sleep(0.3)
    stop.set()
thread.join()
members = fairness.student_processes(student)
print(json.dumps({"grader": os.getpid(), "members": members, "rate": watch.student_rate()}))
"""

NOTEBOOK = """
import subprocess, sys
# the notebook's own
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
grader = subprocess.run([sys.executable, "-c", sys.argv[1]], capture_output=True, text=True)
helper.kill()
print(helper.pid)
print(grader.stdout, grader.stderr[-2000:])
"""


def test_a_practice_grader_below_the_notebook_is_not_counted_as_the_students(tmp_path):
    """A practice grader (brrr.grading.client) is started by the notebook's process, so it is below
    it: its processes are the grader's, and what they do while the grader times its side is not the
    student's. The notebook's own processes still are. (The planted bug: the grader's process
    counted as the student's, less its timing thread; on an H200 the grader's other threads read
    0.40 CPU-s/s and failed Lab 4's solution.)"""
    notebook = subprocess.run(
        [sys.executable, "-c", NOTEBOOK, PRACTICE_GRADER],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    helper, seen = notebook.stdout.split("\n", 1)
    assert seen.strip().startswith("{"), notebook.stdout + notebook.stderr
    seen = json.loads(seen.strip().splitlines()[0])
    assert seen["grader"] not in seen["members"], seen
    assert int(helper) in seen["members"], seen  # what the notebook started itself is the student's
    assert seen["rate"] < fairness.STUDENT_CPU_PER_S, seen


ORPHAN = """
import os, sys, time
# a child that forks the spinner and exits: the spinner is an orphan, adopted by the sandbox's
# first process, outside this process's tree
if os.fork() == 0:
    if os.fork() == 0:
        while True:
            pass
    os._exit(0)
os.wait()
print("ready", flush=True)
time.sleep(60)
"""


def test_a_double_forked_orphan_in_the_sandbox_is_counted(tmp_path):
    """The spinner is below no process the notebook's tree holds, but below the sandbox's first
    process, which the gradebook names to the grader: counted."""
    if sandbox.executable() is None or sandbox.problem() is not None:
        pytest.skip("no sandbox can be made here")
    command = sandbox.command(
        [sys.executable, "-S", "-c", ORPHAN], writable=tmp_path, within=sandbox.layout(None)
    )
    outer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert outer.stdout.readline().strip() == "ready"
        script = min(
            (pid for pid in processes.descendants(outer.pid) if _runs(pid)), key=_inner_pid
        )
        watch = fairness.Watch(outer.pid, "the given step")

        def sandboxed() -> float:
            return fairness.cpu_total([outer.pid, *processes.descendants(outer.pid)])

        before, start = sandboxed(), time.monotonic()
        with watch.window():
            time.sleep(0.2)
        # The spinner's share of a core, read from outside (under load, well under one): the watch
        # counts it at that rate.
        outside = (sandboxed() - before) / (time.monotonic() - start)
        assert outside > 0.05 and watch.student_rate() >= 0.8 * outside, (outside, watch.windows)
        with pytest.raises(AssertionError, match="your notebook's processes used"):
            watch.judge("fast_train")
        tree = fairness.cpu_total([script, *processes.descendants(script)])
        time.sleep(0.1)
        assert (
            fairness.cpu_total([script, *processes.descendants(script)]) - tree < 0.01
        )  # its tree misses it
    finally:
        outer.kill()
        outer.wait()


DEAD_PEER = """
import os, socket, sys, time
connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
if os.fork() == 0:  # a child connects on the shared socket and exits: the grader's peer is gone
    connection.connect(sys.argv[1])
    os._exit(0)
os.wait()
print("ready", flush=True)
start = time.monotonic()
while time.monotonic() - start < 60:  # the notebook keeps working, on the connection's behalf
    pass
"""


def _as_nobody() -> list[str] | None:
    """The command prefix that drops root to ``nobody``, or None where this test cannot."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@pytest.mark.parametrize("user", ["this user", "nobody"])
def test_a_notebook_that_connects_from_a_child_that_exits_is_watched_whole(tmp_path, user):
    """The planted attack: a child connects to the grader and exits at once, and the notebook's
    process works on through the connection. The grader's peer (SO_PEERCRED) is then a dead process,
    whose CPU clock read nothing: 0.00 CPU-s/s, and the "quiet while the grader times" rule was off.
    The grader watches the sandbox's first process, which the gradebook names, and everything below
    it; a grader told nothing (a practice grader) fails the student whose peer has ended, never
    reads zero. As the gradebook's user, and as an unprivileged one (a gradebook run as root drops
    to ``nobody`` here)."""
    from brrr.grading import server
    from brrr.grading.wire import Channel

    if sandbox.executable() is None or sandbox.problem() is not None:
        pytest.skip("no sandbox can be made here")
    prefix, python, within = [], sys.executable, sandbox.layout(None)
    if user == "nobody":
        if (prefix := _as_nobody()) is None:
            pytest.skip("not root, or no setpriv: no other user to run as")
        python, within = "/usr/bin/python3", sandbox.layout(None, [])  # one nobody may run
        if not os.access(python, os.X_OK):
            pytest.skip("no system python for nobody to run")
        tmp_path = Path(tempfile.mkdtemp(prefix="brrr-dead-peer-"))  # pytest's is root's alone
        tmp_path.chmod(0o777)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = tmp_path / "grader.sock"
    listener.bind(str(path))
    path.chmod(0o777)
    listener.listen(1)
    command = sandbox.command(
        [python, "-S", "-c", DEAD_PEER, str(path)],
        writable=tmp_path,
        sockets=(path,),
        within=within,
    )
    outer = subprocess.Popen(prefix + command, stdout=subprocess.PIPE, text=True)
    try:
        assert outer.stdout.readline().strip() == "ready"
        connection, _ = listener.accept()
        told = server.Student(Channel(connection), "fast_train", root=lambda: outer.pid)
        assert fairness.student_pid(told) == outer.pid
        watch = fairness.Watch(fairness.student_pid(told), "the given step")
        with watch.window():
            time.sleep(0.2)
        assert watch.student_rate() > fairness.STUDENT_CPU_PER_S, watch.windows  # not 0: counted
        with pytest.raises(AssertionError, match="your notebook's processes used"):
            watch.judge("fast_train")
        with pytest.raises(AssertionError, match="the process that connected to the grader"):
            fairness.student_pid(server.Student(Channel(connection), "fast_train"))
    finally:
        outer.kill()
        outer.wait()
        listener.close()
        if user == "nobody":
            shutil.rmtree(tmp_path)


def _runs(pid: int) -> bool:
    """``pid`` runs the script above in Python (the script, or a process it forked; not bwrap)."""
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return False
    return argv[0] == sys.executable.encode() and b"time.sleep(60)" in argv[-2]


def _inner_pid(pid: int) -> int:
    """``pid`` as its own PID namespace numbers it (the script is the sandbox's second process, the
    first after bwrap's)."""
    status = open(f"/proc/{pid}/status").read()
    return int(next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[-1])
