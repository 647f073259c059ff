"""A grader clock that cannot be stretched or starved: the grader's own timed windows, watched.

Two checks compare a time the grader measures itself with the student's:
Lab 4's speedup (the grader's copy of the given step, interleaved with the
student's step) and Lab 1's ceilings (``brrr.ceilings`` read between the
student's calls). Whatever slows the grader's own side inflates the student's
figure. Each of the grader's timed windows runs inside :meth:`Watch.window`,
which reads two things around it:

- **the student's processes** (:func:`student_processes`): the first process of the submission's
  sandbox (under ``--no-sandbox``, of its process tree), as the gradebook that started it names it
  to the grader (:func:`brrr.grading.server.tell_student`), and every process below it, found
  through the parents ``/proc`` shows any user: a background thread, a process the notebook started,
  a double-forked orphan (adopted inside the sandbox) and a process in a PID namespace of its own
  all count, whichever of them connected to the grader, and however they set their own permissions.
  Their CPU time over the grader's windows, per second, must stay under :data:`STUDENT_CPU_PER_S`,
  far above what a notebook waiting for the grader uses and far below one busy thread: above it, the
  student fails (:meth:`Watch.judge`). A grader no gradebook started (a practice grader, which the
  notebook starts, :mod:`brrr.grading.client`) takes the process that connected to it and the
  processes under it, less the grader's side (below): it and the processes below it are the
  grader's, never the student's (the branch this process is on). A student served in the grader's
  own process (a test's :func:`brrr.grading.client.local_student`) is this process. Where the
  student's first process cannot be found (the process that connected has ended), the check fails:
  the student's, never a reading of zero.
- **the grader's side**: the CPU time of the grader's thread and of the autograd
  engine's device threads (:func:`grader_cpu`) against the wall time of the
  window. On a CPU the grader's windows compute on its one thread. On a GPU the
  backward passes of Lab 4's given step run on autograd's thread for the device
  (``pt_autograd_0``) while the grader's thread waits for them: by the code, the
  0.40 CPU-s/s a practice grader charged to Lab 4's reference solution on an
  H200 (2026-11-28; not yet measured thread by thread). The grader's thread
  spins in CUDA's ``synchronize`` while the GPU works (CUDA's default; not yet
  measured on a GPU either), so the two agree unless something else took the CPU (another
  submission under ``--jobs 2``, another user, a busy laptop) or the grader was
  stopped. An attempt in which half of the windows or more had a share of
  :data:`GRADER_SHARE_MIN` or less is void and measured again
  (:func:`repeat_fairly`); when :data:`VOIDED_MAX` attempts were void, the
  check ends in a :class:`GraderFault`: not the student's failure, not a pass.

The student's processes are judged first: a student who starves the grader
fails for it, and cannot turn it into a grader fault.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from brrr import targets, units
from brrr.checks import core, processes

# CPU-seconds per second the student's processes may use, all together, while the grader times its
# own side. Measured in the hostile gradebook run (tests/grading/test_gradebook_hostile.py, a real
# sandbox, --jobs 2, on the 2-core machine): Lab 1's solution waiting for the grader's next request,
# its Jupyter kernel, nbval, pytest, the reaper and the sandbox's first process together,
# 0.0003-0.0007 CPU-s/s over 7 attempts. One thread that keeps computing reads 0.3-1.0 (a core
# shared with the grader, or one of its own). 0.05 is seventy times the idle reading, and a
# twentieth of the least a busy thread reads.
STUDENT_CPU_PER_S = 0.05
# A window in which the grader's side (grader_cpu) was on the CPU for at most this share of the wall
# time is starved, and an attempt whose median window is starved is void. Measured on the 2-core
# machine (where the side is the grader's one thread), per window of the given step (49 ms) and of
# the ceilings' readings (0.3 s): 0.96 or more in nine windows of ten with one other test run beside
# (the lowest 0.80); in the hostile run, graded with --jobs 2 beside a Lab 2 notebook, the median
# window of each attempt 0.70-1.00 (single windows down to 0.57); beside a thread spinning and
# another session's test run, 0.27-0.41. Moderate load slows both sides of the comparison alike, and
# the interleaving cancels it; a grader that gets half a core or less in most of its windows is
# measured mostly in other programs' time slices.
GRADER_SHARE_MIN = 0.5
GRADER_SHARE_WHY = (
    "the grader's timed windows compute on one thread at a time, on the CPU for 0.96 or more of a "
    "window on a quiet machine and for 0.70 or more in most windows beside another grading run; at "
    "half or less, its side is measured mostly in other programs' time"
)
# Windows shorter than this are not judged for the grader's share (one time slice of another program
# is a large part of them); the student's CPU gets an absolute allowance beside its rate: the CPU
# time of a child that ended in a window is read in clock ticks (10 ms).
JUDGED_WINDOW_S = 0.005
STUDENT_CPU_SLACK_S = 0.01
VOIDED_MAX = 3  # attempts voided for a starved grader before the check ends in a grader fault


class GraderFault(Exception):
    """The grader could not measure fairly (its own thread did not get the CPU): not the student's
    failure.

    The grader process records the check as a grader fault (:func:`brrr.grading.server._run_check`):
    not passed, scored 0, and the gradebook marks the submission ``grader-error`` to grade again."""


# ---------------------------------------------------------------- the student's processes


def student_processes(pid: int) -> list[int]:
    """The processes of the student whose first process is ``pid``: it and every process below it,
    less the branch this process is on (a practice grader,
    :class:`brrr.grading.client._PracticeGrader`, is started by the notebook, so it runs below the
    student's process: it and every process below it are the grader's).

    For a sandbox, ``pid`` is the first process the gradebook started for it (``bwrap``): every
    process of the sandbox descends from it, since an orphan is adopted inside (by the reaper, a
    subreaper, or the PID namespace's first process), and a nested namespace's processes descend
    from the process that made it. The parents come from ``/proc/<pid>/stat``, which any user may
    read, so a process cannot hide by making itself non-dumpable."""
    return [pid, *processes.descendants_of([pid], but_mine=True)]


# Seconds a grader that a gradebook started waits to be told the student's first process
# (brrr.grading.server.StudentRoot); the gradebook tells it as soon as the notebook's sandbox has
# started.
TOLD_TIMEOUT_S = 60


def student_pid(student) -> int:
    """The pid of the student's first process, as this process sees it: the one the gradebook named
    (``student.root()``, :class:`brrr.grading.server.StudentRoot`), else the peer of the student's
    Unix socket (``SO_PEERCRED``: a practice grader), or this process for a student served
    in-process (:func:`brrr.grading.client.local_student`).

    A process that connected and ended (a child that connects and exits: a zombie, or gone) cannot
    be watched: its clock reads nothing, whatever its siblings do. That is the student's failure."""
    channel = getattr(student, "channel", None)
    if channel is None:
        return os.getpid()
    told = getattr(student, "root", None)
    pid = told() if told is not None else None
    named = "the first process of your notebook's sandbox"
    if pid is None:
        creds = channel.sock.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
        )
        pid, named = struct.unpack("3i", creds)[0], "the process that connected to the grader"
    if pid <= 0 or not processes.alive(pid):
        raise core.fail(
            f"{named} (pid {pid}) has ended, so the grader cannot read the CPU your processes "
            "use while it times its own side. Call the grader from the notebook's own process, "
            "and keep it running."
        )
    return pid


def process_cpu_clock(pid: int) -> float:
    """Seconds of CPU the process ``pid`` has used, all its threads (ended ones too), to the
    nanosecond: the kernel's per-process CPU clock (``clock_getcpuclockid``: ``~pid << 3 |
    CPUCLOCK_SCHED``)."""
    return time.clock_gettime((~pid << 3) | 2)


def reaped_children_cpu(pid: int) -> float:
    """CPU seconds of ``pid``'s children that ended and were waited for (``cutime + cstime``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def cpu_total(pids: list[int]) -> float:
    """CPU seconds used so far by ``pids`` and by their children that ended and were reaped.

    Two readings subtract exactly even when processes end between them: one that ends and is reaped
    by another of them moves its CPU time into its parent's reaped-children figure (a sandbox's
    orphans are reaped inside it), and one born in between counts from zero.
    """
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):  # ended meanwhile
            total += process_cpu_clock(pid) + reaped_children_cpu(pid)
    return total


# Autograd's engine runs the backward pass of a GPU tensor on a thread of its own per device, which
# it names "pt_autograd_<device>" (torch/csrc/autograd/engine.cpp); the thread that called backward
# waits meanwhile.
AUTOGRAD_THREAD_PREFIX = "pt_autograd_"


def autograd_threads() -> list[int]:
    """The thread ids of this process's autograd device threads (none before a GPU tensor's first
    backward, and none on a CPU, where the calling thread runs the backward pass)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # no /proc here: none found
        return []
    found = []
    for task in tasks:
        with contextlib.suppress(OSError):
            if Path(f"/proc/self/task/{task}/comm").read_text().startswith(AUTOGRAD_THREAD_PREFIX):
                found.append(int(task))
    return found


def thread_cpu_clock(tid: int) -> float:
    """Seconds of CPU the thread ``tid`` of this process has used (the kernel's per-thread CPU
    clock: ``~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED``), 0 for one that ended."""
    try:
        return time.clock_gettime((~tid << 3) | 6)
    except OSError:
        return 0.0


def grader_cpu() -> float:
    """CPU seconds of the grader's side so far: the calling thread's and the autograd device
    threads' (see the module docstring). The calling thread is read last: listing the others at a
    window's start is not in it."""
    others = sum(
        thread_cpu_clock(tid) for tid in autograd_threads() if tid != threading.get_native_id()
    )
    return others + time.thread_time()


# ---------------------------------------------------------------- one attempt's windows


@dataclass(frozen=True)
class Window:
    """One of the grader's timed windows: its wall time, the CPU time of the grader's side in it
    (:func:`grader_cpu`), and the CPU time of the student's processes over it (``student_span``: the
    wall time that reading covers)."""

    wall: float
    grader_cpu: float
    student_cpu: float
    student_span: float

    @property
    def grader_share(self) -> float:
        return self.grader_cpu / self.wall if self.wall > 0 else 1.0


@dataclass
class Watch:
    """The grader's timed windows of one attempt, with what the student's processes and the grader's
    side did in them (see the module docstring). ``what`` names the grader's side in messages ("the
    given step")."""

    student_pid: int
    what: str
    windows: list[Window] = field(default_factory=list)
    processes: Callable[[int], list[int]] = student_processes
    cpu: Callable[[list[int]], float] = cpu_total
    grader_time: Callable[[], float] = grader_cpu
    clock: Callable[[], float] = time.perf_counter

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        """Time the block as one of the grader's windows; the caller times it too, as before."""
        members = self.processes(self.student_pid)
        opened, before, grader_before = self.clock(), self.cpu(members), self.grader_time()
        start = self.clock()
        yield
        wall, grader_mid = self.clock() - start, self.grader_time()
        members_after = self.processes(self.student_pid)
        after, grader_after, closed = self.cpu(members_after), self.grader_time(), self.clock()
        used = after - before
        if (
            os.getpid() in members or os.getpid() in members_after
        ):  # served in this process: less our side
            used -= grader_after - grader_before
        self.windows.append(
            Window(wall, grader_mid - grader_before, max(0.0, used), closed - opened)
        )

    def student_rate(self) -> float:
        """CPU-seconds per second the student's processes used over the grader's windows."""
        span = sum(w.student_span for w in self.windows)
        return sum(w.student_cpu for w in self.windows) / span if span > 0 else 0.0

    def starved(self) -> list[Window]:
        """The windows in which the grader's side had the CPU for at most :data:`GRADER_SHARE_MIN`
        of the time."""
        return [
            w
            for w in self.windows
            if w.wall >= JUDGED_WINDOW_S and w.grader_share <= GRADER_SHARE_MIN
        ]

    def void(self) -> bool:
        """Whether the grader was starved in half its windows or more: the median window, which the
        checks' medians rest on, is one of them."""
        return bool(self.windows) and 2 * len(self.starved()) >= len(self.windows)

    def judge(self, name: str) -> None:
        """Fail the student (AssertionError) if their processes worked while the grader timed its
        side."""
        used = sum(w.student_cpu for w in self.windows)
        span = sum(w.student_span for w in self.windows)
        rate = self.student_rate()
        if used > STUDENT_CPU_PER_S * span + STUDENT_CPU_SLACK_S:
            raise core.fail(
                f"{name}: your notebook's processes used {rate:.2f} CPU-seconds per second "
                f"({units.seconds(used)} of CPU in {units.seconds(span)}) while the grader timed "
                f"{self.what}, between your calls; at most {STUDENT_CPU_PER_S:g} is allowed (a "
                "notebook waiting for the grader "
                "uses about 0.001). Work left running after your function returns (a thread, a "
                "process, a pool) slows the grader's side and inflates your figure: finish all "
                "work before returning."
            )

    def summary(self) -> str:
        shares = ", ".join(f"{w.grader_share:.2f}" for w in self.windows)
        return f"the grader's CPU share per window of {self.what}: {shares}"


def repeat_fairly(
    measure: Callable[[Watch], core.Attempt],
    student_pid: int,
    name: str,
    what: str,
    *,
    attempts: int | None = None,
    watch: Callable[[int, str], Watch] = Watch,
) -> tuple[core.Attempt, list[core.Attempt]]:
    """:func:`brrr.checks.core.repeat_until_pass`, each attempt's grader windows watched.

    ``measure(watch)`` times the grader's side inside ``watch.window()``. After each attempt the
    student's processes are judged (a failure ends the check); an attempt in which the grader was
    starved is voided, not counted, and measured again; after :data:`VOIDED_MAX` voided attempts,
    :class:`GraderFault`."""
    voided: list[str] = []

    def watched() -> tuple[core.Attempt, Watch]:
        current = watch(student_pid, what)
        attempt = measure(current)
        current.judge(name)
        return attempt, current

    def counted() -> core.Attempt:
        """One attempt the grader was not starved in: a void one is measured again
        (:func:`brrr.targets.measurements`) while fewer than :data:`VOIDED_MAX` were voided."""
        runs = targets.measurements(
            watched(),
            watched,
            lambda run: not run[1].void(),
            attempts=VOIDED_MAX - len(voided),
        )
        voided.extend(current.summary() for _, current in runs if current.void())
        if runs[-1][1].void():
            tried = "\n".join(f"  voided attempt {i + 1}: {text}" for i, text in enumerate(voided))
            raise GraderFault(
                f"the grader could not get the CPU while it timed {what}: in {len(voided)} "
                f"attempts its thread was on the CPU for {GRADER_SHARE_MIN:g} of the time or "
                f"less in half its windows or more ({GRADER_SHARE_WHY}), and your notebook's "
                f"processes were quiet. Regrade on a quieter machine.\n{tried}"
            )
        return runs[-1][0]

    return core.repeat_until_pass(counted, attempts)
