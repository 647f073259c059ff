"""Graders forked by the grader zygote (:mod:`brrr.grading.zygote`): the gradebook's side.

:class:`Zygote` asks the zygote for a grader: it makes the grader's pipes, sends their far ends and
the grader's log with the request (SCM_RIGHTS), and gets back a :class:`ForkedGrader`, which the
gradebook treats as the :class:`subprocess.Popen` of a grader it started itself: it writes the key
to its ``stdin``, reads the signed record from its ``stdout``, and can ``poll``, ``kill`` (through a
pidfd: never another process that reused the pid) and ``wait`` for it. Its ``returncode`` is the
status the zygote, its parent, reads when it ends (``-N``: signal N ended it). Where the zygote dies
first the grader is waited for on its pidfd, and its status read if the gradebook adopted it (a
subreaper); one that cannot be read is 1, an exit by itself: a grader error, never the student's
fault."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

# Set in the zygote's environment only (each grader gets its own): numpy's OpenBLAS starts no thread
# pool when torch imports it, and torch asks NVML, not the CUDA driver, whether there is a GPU.
# Either would make the fork unsafe.
ZYGOTE_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
REQUEST_TIMEOUT_S = 30
# the status of a grader whose end no one could read: it exited by itself, as far as anyone knows
LOST = 1


class ZygoteGone(OSError):
    """The zygote did not fork a grader (it died, or refused): start one the usual way."""


class ForkedGrader:
    """A grader process forked by the zygote, as the gradebook handles one it started (``Popen``'s
    subset)."""

    def __init__(self, pid: int, pidfd: int, connection: socket.socket, stdin, stdout):
        self.pid, self.pidfd, self.connection = pid, pidfd, connection
        self.stdin, self.stdout = stdin, stdout
        self.returncode: int | None = None
        self.orphaned = False  # the zygote died before telling how the grader ended

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_end(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._read_end(timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"grader {self.pid}", timeout)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _read_end(self, timeout: float | None) -> None:
        """The grader's exit status, if it arrives within ``timeout`` (None: however long it
        takes)."""
        if self.orphaned:
            self._orphan_end(timeout)
            return
        ready, _, _ = select.select([self.connection], [], [], timeout)
        if not ready:
            return
        try:
            data = self.connection.recv(4096)
        except OSError:
            data = b""
        if data:
            self._ended(int(json.loads(data)["exit"]))
            return
        self.orphaned = True
        self._orphan_end(timeout)

    def _orphan_end(self, timeout: float | None) -> None:
        ready, _, _ = select.select([self.pidfd], [], [], timeout)
        if not ready:
            return
        try:
            found = os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            found = None
        if found is None:
            self._ended(LOST)
        elif found.si_code == os.CLD_EXITED:
            self._ended(found.si_status)
        else:
            self._ended(-found.si_status)

    def _ended(self, status: int) -> None:
        self.returncode = status
        self.connection.close()
        os.close(self.pidfd)


class Zygote:
    """The zygote of a gradebook run, started by the gradebook (``process``, its payload written),
    serving on ``path`` once it prints ``ready``: the first :meth:`fork` waits for that, up to
    ``start_timeout_s``, so its imports run while the gradebook prepares the first submission.
    ``log``: its standard error."""

    def __init__(
        self,
        process: subprocess.Popen,
        path: Path,
        private: Path,
        log: Path,
        start_timeout_s: float,
    ):
        self.process, self.path, self.private, self.log = process, path, private, log
        self.start_timeout_s = start_timeout_s
        self.started = False
        self.lock = threading.Lock()  # one request at a time: forking is fast
        self.gone = ""  # why it no longer forks graders, once it does not

    def fork(self, request: dict, stderr: int) -> ForkedGrader:
        """A grader forked for ``request`` (lab, socket, private, env), its standard error
        ``stderr``; :class:`ZygoteGone` if the zygote does not fork one (said once, on standard
        error)."""
        self.wait_started()
        with self.lock:
            if self.gone:
                raise ZygoteGone(self.gone)
            try:
                return self._request(request, stderr)
            except ZygoteGone as gone:
                self._give_up(f"stopped forking graders ({gone})")
                raise

    def wait_started(self) -> None:
        """Wait until it is ready to fork (the first time), or has given up starting."""
        with self.lock:
            if not self.gone and not self.started:
                self._start()

    def _start(self) -> None:
        ready, _, _ = select.select([self.process.stdout], [], [], self.start_timeout_s)
        if ready and self.process.stdout.readline().strip() == "ready":
            self.started = True
            return
        self.process.kill()
        self.process.wait()
        try:
            why = (self.log.read_text(errors="replace").strip().splitlines() or ["no error"])[-1][
                :200
            ]
        except OSError:
            why = "no log"
        self._give_up(f"did not start ({why})")

    def _give_up(self, why: str) -> None:
        self.gone = why
        print(
            f"note: the grader zygote {why}; each grader starts on its own",
            file=sys.stderr,
            flush=True,
        )

    def _request(self, request: dict, stderr: int) -> ForkedGrader:
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            connection.settimeout(REQUEST_TIMEOUT_S)
            connection.connect(str(self.path))
            socket.send_fds(
                connection, [json.dumps(request).encode()], [stdin_read, stdout_write, stderr]
            )
            data, fds, _, _ = socket.recv_fds(connection, 4096, 1)
            reply = json.loads(data) if data else {"error": "it closed the connection"}
            if "error" in reply or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise ZygoteGone(str(reply.get("error", "no pidfd in its reply")))
        except (OSError, ValueError) as error:
            connection.close()
            for fd in (stdin_write, stdout_read):
                os.close(fd)
            raise ZygoteGone(
                str(error) if isinstance(error, ZygoteGone) else f"{type(error).__name__}: {error}"
            )
        finally:
            os.close(stdin_read)
            os.close(stdout_write)
        stdin, stdout = (
            open(stdin_write, "w", encoding="utf-8"),
            open(stdout_read, encoding="utf-8"),
        )
        return ForkedGrader(int(reply["pid"]), fds[0], connection, stdin, stdout)

    def close(self) -> None:
        """End the zygote (it kills any grader it still has) and wait for it."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.private, ignore_errors=True)
