"""Stop grading cleanly: Ctrl-C (SIGINT) or SIGTERM keeps every row graded so far.

The gradebook writes each row as soon as it is graded
(:mod:`brrr.grading.report`). On the first signal, :class:`Stop` kills the
notebooks still running (their rows are left out: they were not graded), no
further submission starts, and the run ends as it ends otherwise, with
grades.csv holding the rows graded; the same command grades the rest. A second
signal ends the gradebook at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from typing import Callable

from brrr.checks import processes

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop:
    """Why grading stops before its end ('' while it goes on), and the notebooks to stop with it."""

    def __init__(self):
        self.reason = ""
        self.lock = threading.Lock()
        self.notebooks: dict[int, subprocess.Popen] = {}

    @property
    def requested(self) -> bool:
        return bool(self.reason)

    def request(self, reason: str) -> None:
        """Stop: no submission starts after this, and the notebooks running now are killed."""
        with self.lock:
            self.reason = self.reason or reason
            running = list(self.notebooks.values())
        for process in running:
            processes._kill_tree(process)

    @contextlib.contextmanager
    def running(self, process: subprocess.Popen):
        """While in the block, ``process`` (a notebook's run) is killed if a stop is requested."""
        with self.lock:
            self.notebooks[process.pid] = process
            requested = self.requested
        if requested:  # the signal came while it started
            processes._kill_tree(process)
        try:
            yield process
        finally:
            with self.lock:
                self.notebooks.pop(process.pid, None)

    @contextlib.contextmanager
    def on_signals(self, at_once: Callable[[], None] | None = None):
        """While in the block, SIGINT and SIGTERM request a stop; a second one calls ``at_once`` (it
        kills what still runs) and ends this process, status 130. Outside the main thread, where no
        handler can be set, it changes nothing."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        before = {number: signal.getsignal(number) for number in SIGNALS}

        def handle(number, frame):
            if self.requested:
                self.request("stopped at once")
                if at_once is not None:
                    at_once()
                print("stopped at once", file=sys.stderr, flush=True)
                os._exit(130)
            name = signal.Signals(number).name
            print(
                f"\n{name}: stopping; the rows graded so far are kept. Once it has stopped, the "
                "same command grades the rest (again: stop at once).",
                file=sys.stderr,
                flush=True,
            )
            self.request(f"grading was interrupted ({name})")

        for number in SIGNALS:
            signal.signal(number, handle)
        try:
            yield self
        finally:
            for number, handler in before.items():
                signal.signal(number, handler)
