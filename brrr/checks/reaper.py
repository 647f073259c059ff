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

It imports nothing from brrr, so files on disk cannot change what it does once
it runs.
"""

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36
ROUNDS = 20  # of killing what is left: a process may fork while it is being killed


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
    code = subprocess.call(command)
    killed = kill_left_behind()
    print(f"brrr-reaper: killed {killed} process(es) left behind", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
