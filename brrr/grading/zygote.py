"""The grader zygote: one process per gradebook run that imports what graders import, then forks one
per submission.

    python -I -B -c GRADER_BOOTSTRAP --zygote --socket PATH

The gradebook starts it as it starts a grader process (:mod:`brrr.grading.bootstrap`: ``brrr`` from
the snapshot in memory, ``-I -B``, a private folder and environment, its own session), before any
student code exists. It imports torch, the check library and every lab's grader side
(:func:`preload`), and never runs a tensor operation, so it stays one thread: torch's thread pools
start in each grader, not here. Then it listens on ``PATH`` (a Unix socket, 0600, in the gradebook's
private folder, out of every sandbox's sight) and serves one request per connection
(:mod:`brrr.grading.forked` is the gradebook's side):

- the request, one datagram: the lab, the grader's socket, private folder and environment, with
three file
  descriptors (SCM_RIGHTS) that become the grader's standard input, output and error;
- the zygote forks (only while it is single-threaded: it checks); the child becomes exactly the
grader
  process of :mod:`brrr.grading.server` (:func:`become_grader`): its own session, folder,
  environment, standard streams, random state, ``lab.prepare()``, its record in its own memory. The
  signing key reaches it on its standard input, from the gradebook, never through the zygote;
- the reply: the child's pid and a pidfd for it (race-free signals), then, when the child ends, its
exit
  status (``-N``: signal N ended it), which only the zygote, its parent, can read.

It ends when its standard input closes, killing any grader still running.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import select
import signal
import socket
import sys
import threading
import traceback

from brrr.checks import processes

REQUEST_BYTES = 1 << 20  # one request's datagram: the environment is its bulk (a few KiB)
STREAMS = 3  # standard input, output and error of the grader


def preload() -> None:
    """Import what every lab's grader imports (its checks, and what its ``prepare`` imports),
    running nothing.

    On a GPU machine ``brrr.device`` asks torch whether CUDA is there: the zygote's environment asks
    NVML (``PYTORCH_NVML_BASED_CUDA_CHECK``), so the CUDA driver is first loaded in each grader,
    after the fork."""
    import torch  # noqa: F401
    import torch.nn.attention  # noqa: F401
    import torch.profiler  # noqa: F401
    from torch.utils import _python_dispatch, _pytree  # noqa: F401

    from brrr import ceilings, labs, timing, traces, traffic  # noqa: F401
    from brrr.checks import kernels, timed  # noqa: F401
    from brrr.grading import server  # noqa: F401

    for name in labs.LABS:
        labs.lab(name)
    try:
        import triton.language  # noqa: F401
    except ImportError:
        pass


def fork_problem() -> str | None:
    """Why forking now would be unsafe (a second thread, the CUDA driver loaded), or None."""
    if threading.active_count() != 1:
        return f"{threading.active_count()} Python threads"
    tasks = os.listdir("/proc/self/task")
    if len(tasks) != 1:
        return f"{len(tasks)} threads"
    with open("/proc/self/maps") as maps:
        if "libcuda.so" in maps.read():
            return "the CUDA driver is loaded"
    return None


def become_grader(
    request: dict, streams: list[int], inherited: list[int], imported: dict[str, str]
) -> None:
    """In the forked child: become the grader process of ``request`` and never return.

    Everything a fresh grader process would start with is set before anything reads it: the session,
    the standard streams, the working folder, the environment (its private caches, and ``imported``:
    what the zygote's imports set in theirs, as they would have in a fresh grader's:
    ``TRITON_INTERPRET`` on a CPU), the random state."""
    code = 1
    try:
        os.setsid()
        for fd in inherited:
            os.close(fd)
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["private"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.update(imported)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(
            1, "w", buffering=1, encoding="utf-8", closefd=False
        )  # PYTHONUNBUFFERED's lines
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)
        sys.argv = ["brrr.grading.server"]
        name_itself(
            [
                sys.executable,
                "-I",
                "-B",
                "-c",
                "(the grader's bootstrap)",
                "--lab",
                request["lab"],
                "--socket",
                request["socket"],
            ]
        )
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        from brrr.grading import server

        server.REQUEST_TIMEOUT_S = float(os.environ.get("BRRR_GRADER_REQUEST_TIMEOUT_S", 900))
        code = server.main(["--lab", request["lab"], "--socket", request["socket"]])
    except SystemExit as leaving:  # as Python would end: None is 0, a message is said and is 1
        code = 0 if leaving.code is None else leaving.code if isinstance(leaving.code, int) else 1
        if not isinstance(leaving.code, (int, type(None))):
            print(leaving.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - said on its standard error, as a grader process would
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def name_itself(argv: list[str]) -> None:
    """Show ``argv`` as this process's command line (``/proc/self/cmdline``, ``ps``), written over
    the zygote's own, whose bootstrap source leaves room: a forked grader reads as one started on
    its own, its lab and socket named. Cut short where it does not fit; left as it was where the
    area cannot be found."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        start, end = (
            int(fields[45]),
            int(fields[46]),
        )  # arg_start and arg_end, fields 48 and 49 of stat(5)
    except (OSError, IndexError, ValueError):
        return
    if end <= start:
        return
    text = b"\0".join(arg.encode(errors="replace") for arg in argv)[: end - start - 1]
    ctypes.memmove(start, text.ljust(end - start, b"\0"), end - start)


class Zygote:
    """The zygote's loop: requests on ``listener``, children's ends on their pidfds, its end on
    stdin."""

    def __init__(self, listener: socket.socket, imported: dict[str, str]):
        self.listener, self.imported = listener, imported
        self.children: dict[
            int, tuple[int, socket.socket]
        ] = {}  # pidfd -> (pid, the requester's connection)

    def serve(self) -> None:
        while True:
            ready, _, _ = select.select([0, self.listener.fileno(), *self.children], [], [])
            for fd in ready:
                if fd == 0 and not os.read(0, 4096):
                    self.end()
                    return
                if fd == self.listener.fileno():
                    self.accept()
                elif fd in self.children:
                    self.reap(fd)

    def accept(self) -> None:
        connection, _ = self.listener.accept()
        connection.settimeout(10)
        streams: list[int] = []
        try:
            data, streams, _, _ = socket.recv_fds(connection, REQUEST_BYTES, STREAMS)
            request = json.loads(data)
            if len(streams) != STREAMS:
                raise ValueError(f"{len(streams)} file descriptors, not {STREAMS}")
            if (problem := fork_problem()) is not None:
                raise RuntimeError(f"cannot fork safely: {problem}")
            inherited = [0, self.listener.fileno(), connection.fileno()]
            inherited += [
                fd for pidfd, (_, other) in self.children.items() for fd in (pidfd, other.fileno())
            ]
            pid = os.fork()
            if pid == 0:
                become_grader(request, streams, inherited, self.imported)
            pidfd = os.pidfd_open(pid)
            socket.send_fds(connection, [json.dumps({"pid": pid}).encode()], [pidfd])
            self.children[pidfd] = (pid, connection)
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as error:
            try:
                connection.send(json.dumps({"error": f"{type(error).__name__}: {error}"}).encode())
            except OSError:
                pass
            connection.close()
        finally:
            for fd in streams:
                os.close(fd)

    def reap(self, pidfd: int) -> None:
        pid, connection = self.children.pop(pidfd)
        _, status = os.waitpid(pid, 0)
        os.close(pidfd)
        try:
            connection.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:
            pass
        connection.close()

    def end(self) -> None:
        for pidfd, (pid, _) in list(self.children.items()):
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.reap(pidfd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="brrr.grading.zygote", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--socket", required=True, help="path of the Unix socket to serve requests on"
    )
    args = parser.parse_args(argv)
    processes.set_dumpable(False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # it ends when its standard input closes
    before = dict(os.environ)
    preload()
    imported = {name: value for name, value in os.environ.items() if before.get(name) != value}
    if (problem := fork_problem()) is not None:
        print(
            f"the zygote cannot fork safely after its imports: {problem}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(args.socket)
    os.chmod(args.socket, 0o600)
    listener.listen(8)
    print("ready", flush=True)
    Zygote(listener, imported).serve()
    sys.stderr.flush()
    os._exit(0)  # nothing to clean up: skip tearing down torch (a second of CPU)
