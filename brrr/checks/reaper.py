"""Run a command as a child subreaper, and kill whatever of its tree is left when it ends.

    python -c "$(source of this file)" COMMAND [ARGS...]

The gradebook runs each submission's pytest under this program
(:data:`brrr.checks.processes.REAPER`, this file's source read when the
gradebook starts, run with ``-c``). It makes itself a Linux child subreaper, so
that every orphan of the command's tree (a daemon that double-forked and called
``setsid``) is re-parented to it instead of to init; when the command ends, it
kills each process it adopted, with its process group, and reaps it. Its last
line on standard error says how many processes it killed
(``brrr-reaper: killed N process(es) left behind``); it exits with the
command's status.

Before it starts the command it sets the submission's resource limits
(:func:`limit`), which every process of the submission inherits; the threat
model (``docs/THREATS.md``) gives each value's reason.

It imports nothing from brrr, so files on disk cannot change what it does once
it runs.
"""

import ctypes
import os
import resource
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36
ROUNDS = 20  # of killing what is left: a process may fork while it is being killed

# The submission's limits. A file may grow to 512 MiB (RLIMIT_FSIZE: eight times the largest file
# the grader reads from a notebook, a Lab 4 trace of at most 64 MiB; the caches torch and Triton
# write hold files of a few MiB); beyond, a write fails (Python ignores SIGXFSZ). No core dumps
# (RLIMIT_CORE 0: a crash of a kernel of 10 GiB would write 10 GiB). The OOM killer's first choice
# (oom_score_adj 1000): when memory runs out, the submission's processes die before the grader, the
# gradebook or anything else. Tasks, threads included: 4096, or 32 per CPU where that is more
# (RLIMIT_NPROC: a fork bomb stops there; torch's thread pools hold one thread per core), set only
# in a user namespace of the sandbox's own, where Linux counts that namespace's tasks alone
# (elsewhere it counts every process of the user, and exempts root).
FILE_SIZE_MAX = 512 << 20
CORE_SIZE_MAX = 0
OOM_SCORE_ADJ = 1000
TASKS_MAX = max(4096, 32 * (os.cpu_count() or 1))
INITIAL_USER_NAMESPACE = "0 0 4294967295"  # /proc/self/uid_map outside any user namespace


def lower(kind: int, value: int) -> None:
    """Set the limit ``kind`` to ``value`` (soft and hard: no process of the submission can raise it
    again), or leave a lower hard limit as it is."""
    _, hard = resource.getrlimit(kind)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def limit() -> None:
    """Set the submission's limits on this process, for it and every process it starts (see
    above)."""
    lower(resource.RLIMIT_FSIZE, FILE_SIZE_MAX)
    lower(resource.RLIMIT_CORE, CORE_SIZE_MAX)
    try:
        with open("/proc/self/oom_score_adj", "w") as adjust:
            adjust.write(str(OOM_SCORE_ADJ))
    except OSError as error:
        print(f"brrr-reaper: could not set oom_score_adj ({error})", file=sys.stderr)
    try:
        with open("/proc/self/uid_map") as mapping:
            own_namespace = " ".join(mapping.read().split()) != INITIAL_USER_NAMESPACE
    except OSError:
        own_namespace = False
    if own_namespace:
        lower(resource.RLIMIT_NPROC, TASKS_MAX)


def parents() -> dict[int, int]:
    """Every process's parent, from /proc."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    found[int(name)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    return found


def kill_left_behind() -> int:
    """Kill and reap every child of this process (the orphans it adopted); how many were alive."""
    killed = 0
    for _ in range(ROUNDS):
        left = [pid for pid, parent in parents().items() if parent == os.getpid()]
        if not left:
            break
        for pid in left:
            try:
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else None
            except OSError:
                pass
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    alive = stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
                os.kill(pid, signal.SIGKILL)
                killed += alive
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
    return killed


def main(command: list[str]) -> int:
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    limit()
    code = subprocess.call(command)
    killed = kill_left_behind()
    print(f"brrr-reaper: killed {killed} process(es) left behind", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
