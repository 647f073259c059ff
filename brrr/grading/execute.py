"""Run one submission: its grader first, then its notebook under pytest and nbval, sandboxed, beside
it.

The step between :mod:`brrr.grading.prepare` and :mod:`brrr.grading.collect`.
The notebook runs in its own Jupyter kernel, exactly as ``pytest --nbval-lax``
would, with a timeout per cell and one per notebook, under the reaper
(:mod:`brrr.checks.reaper`) and, where ``within`` is given, in a bubblewrap
sandbox (:mod:`brrr.grading.sandbox`) that shows it its work folder and its
grader's socket. When it ends, by itself, by a timeout, by a crash or because
grading was interrupted (:mod:`brrr.grading.interrupt`), every process it
started is killed, and the grader's signed record is read back."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

from brrr.checks import processes
from brrr.grading import assemble, forked, sandbox, server
from brrr.grading.collect import Prepared, Ran
from brrr.grading.environment import KERNEL_NAME, student_environment
from brrr.grading.graders import IN_FLIGHT, Grader
from brrr.grading.interrupt import Stop
from brrr.grading.submissions import Submission


def notebook_command(
    prepared: Prepared, cell_timeout_s: float, socket: Path, within: sandbox.Layout | None
) -> list[str]:
    """pytest and nbval on the prepared notebook, under the reaper, in a sandbox where ``within`` is
    given that shows its work folder, writable, and ``socket``."""
    folder = prepared.folder
    pytest_nbval = ["-m", "pytest", "-c", str(folder / "pytest.ini"), "--rootdir", str(folder)]
    pytest_nbval += ["-p", "nbval", "-p", "no:cacheprovider", "-q", "--nbval-lax"]
    pytest_nbval += [
        f"--nbval-kernel-name={KERNEL_NAME}",
        f"--nbval-cell-timeout={cell_timeout_s:g}",
    ]
    pytest_nbval += [f"--junitxml={prepared.junit}", str(prepared.notebook)]
    command = [sys.executable, "-c", processes.REAPER, sys.executable, *pytest_nbval]
    if within is None:
        return command
    return sandbox.command(command, writable=folder, sockets=(socket,), within=within)


def execute(
    submission: Submission,
    prepared: Prepared,
    snapshot: assemble.Snapshot,
    *,
    cell_timeout_s: float,
    notebook_timeout_s: float,
    within: sandbox.Layout | None,
    zygote: forked.Zygote | None = None,
    stop: Stop | None = None,
) -> Ran | None:
    """Start the grader, run the notebook beside it, kill whatever the notebook left, and read the
    grader's signed results back. None, with the row filled in, if the grader did not start."""
    start = time.monotonic()
    grader = Grader(snapshot, prepared.lab, zygote)
    try:
        if not grader.ready:
            submission.status = "grader-error"
            submission.note = (
                "The grader process did not start, so nothing was graded (not your fault). "
                f"Its error: {grader.error_text()}"
            )
            return None
        command = notebook_command(prepared, cell_timeout_s, grader.socket, within)
        env = student_environment(
            grader.socket, prepared.folder, prepared.jupyter_path, within is not None
        )
        with prepared.output.open("w") as sink:
            process = IN_FLIGHT.popen(
                command,
                cwd=prepared.folder,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            server.tell_student(grader.process.stdin, process.pid)  # its processes: all below
            with stop.running(process) if stop is not None else contextlib.nullcontext():
                returncode, kernel_died = processes._wait(process, notebook_timeout_s)
            interrupted = stop is not None and stop.requested
            processes._kill_tree(process)  # whatever the notebook started dies with it
            IN_FLIGHT.remove(process.pid)
            IN_FLIGHT.reap()  # and whatever escaped even the reaper
        killed = grader.killed()
        results = None if killed else grader.finish()
    finally:
        grader.remove()
    submission.seconds = time.monotonic() - start
    return Ran(returncode, kernel_died, killed, results, interrupted)
