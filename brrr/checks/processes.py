"""Processes of a submission: wait for them, watch the kernel, and leave none behind.

The gradebook runs each submission as a process tree: pytest, the Jupyter kernel
nbval starts, and whatever the student's code starts. A hostile or broken
submission may leave processes behind on purpose (a daemon that double-forks
and calls ``setsid`` to escape its process group, to edit other students'
files later). On Linux the gradebook makes itself a *child subreaper*
(:func:`become_subreaper`): every orphan below it is re-parented to it instead
of to init, so it stays findable, and :func:`kill_orphans` kills it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import signal
import subprocess
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4

# The program the gradebook runs each submission under (``python -c REAPER COMMAND...``): the source
# of brrr.checks.reaper, read when this module is imported (by the gradebook, before any submission
# runs). It runs the command as a child subreaper and kills whatever of its tree is left when it
# ends; it imports nothing from brrr, so files on disk cannot change what it does. Its last line on
# stderr says how many processes it killed.
REAPER = importlib.util.find_spec("brrr.checks.reaper").loader.get_source("brrr.checks.reaper")


def set_dumpable(dumpable: bool) -> bool:
    """Linux: whether other non-root processes of this user may ptrace this one or read its memory
    and file descriptors through ``/proc`` (``PR_SET_DUMPABLE``); True if it worked.

    The gradebook and the grader process turn it off while student code runs:
    the signing key and the pipe that carries the record live in them.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def is_dumpable() -> bool | None:
    try:
        return bool(ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
    except (OSError, AttributeError):
        return None


def become_subreaper() -> bool:
    """Make this process adopt every orphaned descendant (Linux); True if it worked."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def children(pid: int) -> list[int]:
    return [child for child, parent in _parents().items() if parent == pid]


def kill_orphans(keep: set[int]) -> list[int]:
    """Kill every child of this process that is not in ``keep``, with everything below it; return
    them.

    As a subreaper, this process's only children are the ones it started (kept)
    and orphans adopted from the trees below it, which nothing legitimate leaves.
    """
    killed = []
    for child in children(os.getpid()):
        if child in keep:
            continue
        tree = [child] + descendants(child)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)  # an adopted orphan is ours to reap
        killed += tree
    return killed


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc), children first found first."""
    return descendants_of([pid])


def descendants_of(pids: list[int], *, but_mine: bool = False) -> list[int]:
    """Every process below any of ``pids`` and not one of them, from one scan of /proc; with
    ``but_mine``, none on the branch this process is on (it and its ancestors) and none below
    those."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    mine: set[int] = set()
    here = os.getpid() if but_mine else None
    while here in parents and here not in mine:
        mine.add(here)
        here = parents[here]
    found, queue, seen = [], list(pids), set(pids)
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in seen and child not in mine:
                seen.add(child)
                found.append(child)
                queue.append(child)
    return found


def _kill_tree(process: subprocess.Popen) -> None:
    """Kill pytest, its process group, and everything it started (Jupyter kernels run in their own
    session)."""
    victims = descendants(process.pid)
    for sig_target in [process.pid] + victims:
        try:
            os.kill(sig_target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    # A killed process takes a moment to release its memory; wait until each is gone (or a zombie).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(pid) for pid in victims):
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is not a zombie (ended, not yet waited for)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _kernel_pid(root_pid: int) -> int | None:
    """The Jupyter kernel nbval started: the first process below ``root_pid`` running ipykernel."""
    for pid in descendants(root_pid):
        try:
            if b"ipykernel" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


KERNEL_DEATH_GRACE_S = 5.0


def _wait(process: subprocess.Popen, timeout_s: float) -> tuple[int | None, bool]:
    """Wait for pytest; return (exit code or None on timeout, whether the kernel died under it).

    nbval notices a dead kernel only when the running cell times out, which can
    take the whole cell timeout. So the kernel is watched: once it has vanished
    while pytest goes on, pytest gets a few seconds to finish by itself (a normal
    end stops the kernel first), and is then stopped.
    """
    deadline = time.monotonic() + timeout_s
    kernel, gone_since = None, None
    while True:
        try:
            return process.wait(timeout=0.5), False
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now >= deadline:
            _kill_tree(process)
            return None, False
        if kernel is None:
            kernel = _kernel_pid(process.pid)
        elif gone_since is None and not Path(f"/proc/{kernel}").exists():
            gone_since = now
        elif gone_since is None:
            try:
                state = Path(f"/proc/{kernel}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "X"
            if state in ("Z", "X"):
                gone_since = now
        if gone_since is not None and now - gone_since > KERNEL_DEATH_GRACE_S:
            _kill_tree(process)
            return None, True
