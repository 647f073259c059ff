"""The grader processes of a run: one per submission, forked by the run's zygote or started on its
own.

A grader runs from the snapshot of ``brrr`` in memory (no grader file on disk:
:data:`brrr.grading.assemble.GRADER_BOOTSTRAP`) and reaches the gradebook only
through its pipes: its code and key on standard input, ``ready`` and at the end
its signed record on standard output (:mod:`brrr.grading.server`).
:data:`IN_FLIGHT` holds every process the gradebook started and still needs, so
that a reap of orphans (the gradebook is a child subreaper) never kills one."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from brrr.checks import processes
from brrr.grading import assemble, forked, server
from brrr.grading.collect import read_tail
from brrr.grading.environment import grader_environment

GRADER_START_TIMEOUT_S = 180
GRADER_FINISH_TIMEOUT_S = 60


class InFlight:
    """Processes the gradebook itself started and still needs; anything else it adopts is killed.

    Starting a process and recording it happen under one lock, and so does
    reaping, so a reap in one thread never kills a process another thread has
    just started (with ``--jobs`` above 1).
    """

    def __init__(self):
        self.pids: set[int] = set()
        self.lock = threading.RLock()

    def popen(self, *args, **kwargs) -> subprocess.Popen:
        with self.lock:
            process = subprocess.Popen(*args, **kwargs)
            self.pids.add(process.pid)
        return process

    def remove(self, pid: int) -> None:
        with self.lock:
            self.pids.discard(pid)

    def reap(self) -> list[int]:
        with self.lock:
            return processes.kill_orphans(set(self.pids))


IN_FLIGHT = InFlight()


class Grader:
    """The grader process of one submission, run from the snapshot in memory (no grader file on
    disk): forked by ``zygote`` (:mod:`brrr.grading.forked`) where there is one that still forks,
    else started anew."""

    def __init__(self, snapshot: assemble.Snapshot, lab: str, zygote: forked.Zygote | None = None):
        self.key = secrets.token_hex(32)
        self.private = Path(tempfile.mkdtemp(prefix="brrr-grader-"))
        self.socket = self.private / "grader.sock"
        self.log = self.private / "stderr.txt"
        with self.log.open("wb") as log:
            self.process = self._forked(zygote, lab, log.fileno()) or bootstrap(
                ["--lab", lab, "--socket", str(self.socket)],
                self.private,
                grader_environment(self.private),
                log,
            )
        code = (
            "" if self.forked else snapshot.grader_payload().decode()
        )  # a forked grader has its code
        try:
            self.process.stdin.write(code + self.key + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # it died before reading its key: not ready, and its log says why
            pass
        self.ready = read_line(self.process.stdout, GRADER_START_TIMEOUT_S) == "ready"

    @property
    def forked(self) -> bool:
        """Forked by the run's zygote, so it holds the grader's code already (no payload on its
        input)."""
        return isinstance(self.process, forked.ForkedGrader)

    def _forked(
        self, zygote: forked.Zygote | None, lab: str, log: int
    ) -> forked.ForkedGrader | None:
        if zygote is None or zygote.gone:
            return None
        request = {"lab": lab, "socket": str(self.socket), "private": str(self.private)}
        request["env"] = grader_environment(self.private)
        # not under IN_FLIGHT's lock: the other submissions' processes go on meanwhile
        zygote.wait_started()
        try:
            with (
                IN_FLIGHT.lock
            ):  # recorded as the gradebook's: adopted if the zygote dies, it is not reaped
                process = zygote.fork(request, log)
                IN_FLIGHT.pids.add(process.pid)
        except forked.ZygoteGone:  # said once, by the zygote's side
            return None
        return process

    def killed(self) -> bool:
        """A signal ended it before it was told to finish: only the submission's processes (or the
        system, out of memory) send one. A grader that exits by itself, through a bug, is a grader
        error."""
        return self.process.poll() is not None and self.process.returncode < 0

    def finish(self) -> dict[str, dict] | None:
        """Close its input, read back its signed results, and stop it. None if they cannot be
        trusted."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        line = read_line(self.process.stdout, GRADER_FINISH_TIMEOUT_S)
        self.stop()
        try:
            return server.verify(line or "", self.key.encode())["results"]
        except (ValueError, KeyError, TypeError):
            return None

    def error_text(self) -> str:
        self.stop()
        return read_tail(self.log, 2000)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        IN_FLIGHT.remove(self.process.pid)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.private, ignore_errors=True)


def read_line(stream, timeout_s: float) -> str | None:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return box[0].strip() if box else None


def start_zygote(snapshot: assemble.Snapshot) -> forked.Zygote:
    """The grader zygote of this run (:mod:`brrr.grading.zygote`), started as a grader is. It is not
    waited for here: its imports run while the first submission is prepared, and the first fork
    waits until it is ready (:class:`brrr.grading.forked.Zygote`); where it does not start, a note
    says so, and each grader starts on its own."""
    private = Path(tempfile.mkdtemp(prefix="brrr-zygote-"))
    log = private / "stderr.txt"
    with log.open("wb") as sink:
        environment = {**grader_environment(private), **forked.ZYGOTE_ENVIRONMENT}
        process = bootstrap(["--zygote", "--socket", "zygote.sock"], private, environment, sink)
    try:
        process.stdin.write(snapshot.grader_payload().decode())
        process.stdin.flush()
    except BrokenPipeError:  # it died first: its log says why, at the first fork
        pass
    return forked.Zygote(process, private / "zygote.sock", private, log, GRADER_START_TIMEOUT_S)


def bootstrap(arguments: list[str], private: Path, environment: dict, stderr) -> subprocess.Popen:
    """A process running :data:`brrr.grading.assemble.GRADER_BOOTSTRAP` with ``arguments`` (a
    grader's or the zygote's), in ``private`` with ``environment``, in a session of its own, its
    standard input and output piped (its code arrives on the input), recorded in :data:`IN_FLIGHT`.
    """
    return IN_FLIGHT.popen(
        [sys.executable, "-I", "-B", "-c", assemble.GRADER_BOOTSTRAP, *arguments],
        cwd=private,
        env=environment,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )
