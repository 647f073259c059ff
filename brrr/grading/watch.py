"""The integrity watch of a grading run: who changed what (:mod:`brrr.grading.integrity` does the
looking).

After each submission the watched files are fingerprinted again and compared
with the previous fingerprint. Whatever changed is charged to the submissions
that ran in between (one, with ``--jobs 1``), except a change to files no
grading process reads: that is kept for :meth:`Watch.unread_report`. A change
to the environment stops the run: no later grade could be trusted. Once
:meth:`Watch.finished` has returned for a submission, nothing more is charged
to it, so its row can be written (:func:`charge` first)."""

from __future__ import annotations

import threading
from pathlib import Path

from brrr.grading import integrity
from brrr.grading.graders import IN_FLIGHT
from brrr.grading.submissions import Submission


class Watch:
    """The integrity watch of a grading run (:mod:`brrr.grading.integrity`): who changed what.

    After each submission the watched files are fingerprinted again and compared
    with the previous fingerprint. Whatever changed is charged to the
    submissions that ran in between (one, with ``--jobs 1``), except a change
    to files no grading process reads: that is kept for :meth:`unread_report`.
    A change to the environment stops the run: no later grade could be trusted.
    """

    def __init__(self, roots: list[integrity.Root], excluded: list[Path]):
        self.roots, self.excluded = roots, excluded
        self.lock = threading.Lock()
        self.last = self.fingerprint()
        self.running: set[int] = set()
        self.suspects: dict[int, Submission] = {}
        self.stopped = ""  # why grading stopped, once it has
        self.unread: list[
            tuple[list[str], list[str]]
        ] = []  # (unread paths that changed, who ran meanwhile)

    def fingerprint(self) -> integrity.Fingerprint:
        with IN_FLIGHT.lock:  # no reap in another thread may kill the walk's child process
            return integrity.Fingerprint.take(self.roots, self.excluded)

    def started(self, submission: Submission) -> None:
        with self.lock:
            self.running.add(id(submission))
            self.suspects[id(submission)] = submission

    def finished(self, submission: Submission) -> None:
        with self.lock:
            self.running.discard(id(submission))
            now = self.fingerprint()
            changes = self.last.changes(now)
            suspects = list(self.suspects.values())
            self.last = now
            self.suspects = {key: s for key, s in self.suspects.items() if key in self.running}
            if changes.unread:
                self.unread.append((changes.unread, [s.name for s in suspects]))
            if not changes.charged:
                return
            for suspect in suspects:
                suspect.tampered = changes.charged
            if changes.environment and not self.stopped:
                names = ", ".join(s.name for s in suspects)
                self.stopped = (
                    f"While {names} ran, files of the Python environment that grades changed "
                    f"({integrity.Changes(changes.environment, changes.kinds).describe(5)}). "
                    "Restore the environment (reinstall it), then grade the remaining submissions "
                    "again."
                )

    def unread_report(self, limit: int = 10) -> str:
        """For the instructor: per-user files that changed while grading ran and that no grading
        process reads (a first Jupyter session writes some), with the submissions that ran
        meanwhile. '' if none."""
        parts = []
        for paths, names in self.unread:
            parts.append(f"{integrity.summarize(paths, limit)} (while {', '.join(names)} ran)")
        if not parts:
            return ""
        return (
            f"changed while grading, read by no grading process: {'; '.join(parts)}. No grade "
            "depends on these files and no submission was charged; if you did not make the change, "
            "look at it."
        )


def tampered_note(submission: Submission, alone: bool) -> str:
    who = "Your notebook" if alone else "Your notebook, or one graded at the same time,"
    return (
        f"{who} changed files outside its own work folder while it ran: "
        f"{integrity.summarize(submission.tampered)}. A submission may not write to the course, "
        "the Python environment or other students' files, so every check scores 0."
    )


def charge(submission: Submission, *, alone: bool) -> None:
    """Make a submission the watch caught ``tampered``: every check 0, and the note says what it
    changed."""
    if submission.tampered:
        note = tampered_note(submission, alone=alone)
        submission.note = " ".join(filter(None, [note, submission.note]))
        submission.status, submission.results = "tampered", {}
