"""Write what was graded: grades.csv, one feedback file per submission, and the journal of the rows.

The gradebook's last step, taken for each submission as soon as it is graded
(:class:`Ledger`), so that a run that stops (Ctrl-C, a crash, a killed job)
loses only the notebooks it was running. The journal (:data:`JOURNAL`: one JSON
line per graded row, the manifest's rows of :func:`brrr.grading.shards.row`)
is what a later run into the same folder resumes from: it grades only the
submissions the journal lacks (or whose file changed, or whose row said
``not graded`` or ``grader-error``), and refuses a folder graded with other
code or options, rather than mix them.

The files the ledger rewrites while notebooks run are made before the
integrity watch starts and rewritten in place, so the watch, which leaves them
out, sees no folder change (:func:`brrr.grading.integrity.watched_roots`).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Callable

from brrr import labs
from brrr.device import device_class
from brrr.grading import shards
from brrr.grading.submissions import Submission, from_row

JOURNAL = "graded.jsonl"
FORMAT = 1
REGRADED = ("not graded", "grader-error")  # rows a later run grades again


def lab_checks(lab: str) -> list[str]:
    """The checks ``lab`` grades on this machine's device class: its columns, and its maximum."""
    if lab not in labs.LABS:
        return []
    return list(labs.checks(lab, device_class()))


def columns(
    submissions: list[Submission], checks_of: Callable[[str], list[str]] = lab_checks
) -> list[tuple[str, str]]:
    """(lab, check) pairs in column order, from each lab's own check list (``checks_of``: this
    machine's)."""
    return [
        (lab, check)
        for lab in sorted({s.lab for s in submissions if s.lab in labs.LABS})
        for check in checks_of(lab)
    ]


def score(submission: Submission, lab: str, check: str) -> str:
    if submission.lab != lab:
        return ""
    record = submission.results.get(check)
    return "1" if record is not None and record.get("passed") is True else "0"


def write_csv(
    submissions: list[Submission],
    path: Path | io.StringIO,
    checks_of: Callable[[str], list[str]] = lab_checks,
) -> None:
    """grades.csv. ``checks_of``: each lab's checks, this machine's unless given (a merge of shards
    graded elsewhere gives theirs). ``seconds``, last: the submission's run, its grader's start to
    its end."""
    cols = columns(submissions, checks_of)
    single_lab = len({lab for lab, _ in cols}) <= 1
    header = ["submission", "lab", "status"] + [
        c if single_lab else f"{lab}:{c}" for lab, c in cols
    ]
    header += ["total", "max", "sandbox", "seconds"]
    with contextlib.ExitStack() as stack:
        handle = (
            path
            if isinstance(path, io.StringIO)
            else stack.enter_context(path.open("w", newline=""))
        )
        writer = csv.writer(handle)
        writer.writerow(header)
        for s in submissions:
            scores = [score(s, lab, check) for lab, check in cols]
            total = sum(v == "1" for v in scores)
            most = len(checks_of(s.lab) if s.lab in labs.LABS else [])
            sandboxed = "bwrap" if s.sandboxed else "none"
            writer.writerow(
                [s.name, s.lab, s.status] + scores + [total, most, sandboxed, f"{s.seconds:.1f}"]
            )


UNSANDBOXED = (
    "**Graded without a sandbox** (`--no-sandbox`): this notebook ran as the instructor's user, "
    "beside the grader, with the network and the instructor's files in reach."
)


def feedback(submission: Submission, checks: list[str]) -> str:
    """The student's feedback file: score, status, notes, a table of the checks, then each check
    that did not pass with its message, and the other errors in their notebook."""
    passed = sum(1 for c in checks if submission.results.get(c, {}).get("passed"))
    device = next((r.get("device") for r in submission.results.values() if r.get("device")), None)
    lines = [
        f"# Feedback: {submission.name}",
        "",
        f"Lab `{submission.lab}`. Score: **{passed} of {len(checks)}** checks passed. "
        f"Status: `{submission.status}`." + (f" Graded on {device}." if device else ""),
        "",
    ]
    if not submission.sandboxed:
        lines += [UNSANDBOXED, ""]
    if submission.note:
        lines += [submission.note, ""]
    if checks:
        lines += ["| check | result |", "|---|---|"]
        lines += [f"| {check} | {_result(submission, check)} |" for check in checks]
        lines.append("")
    for check in checks:
        lines += _section(submission, check)
    others = [e for e in submission.cell_errors if "AssertionError" not in e]
    if others:
        lines += ["## Other errors in your notebook", ""]
        lines += [f"- {error}" for error in others]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


NOT_RUN = (
    "The grader never received this check: its grader cell did not run, or the notebook stopped "
    "(an error that left a name undefined, a timeout, a crash, an exit) before it. Run the "
    "notebook from the top in a fresh kernel to see why."
)
TIMED_OUT = (
    "Its grader cell ran longer than the time allowed per cell and was interrupted: the code it "
    "calls did not finish (an endless loop, or work far too slow). Grading stopped there."
)


def _result(submission: Submission, check: str) -> str:
    record = submission.results.get(check)
    if check in submission.timed_out:
        return "**timed out** (0)"
    if record is None:
        return "**not run** (0)"
    if record.get("grader_fault"):
        return "**grader error** (0, not your fault)"
    return "passed" if record.get("passed") else "**failed**"


def _section(submission: Submission, check: str) -> list[str]:
    record = submission.results.get(check)
    said = [] if record is None else ["```text", record.get("message", "").rstrip(), "```", ""]
    if check in submission.timed_out:
        return [f"## {check}: timed out, scored 0", "", TIMED_OUT, ""] + said
    if record is None:
        return [f"## {check}: not run, scored 0", "", NOT_RUN, ""]
    if record.get("passed"):
        return []
    title = "grader error, not your fault" if record.get("grader_fault") else "failed"
    return [f"## {check}: {title}", "", "```text", record.get("message", "").rstrip(), "```", ""]


def fresh_file(path: Path) -> Path:
    """``path``, with whatever stood there removed: a link planted there must not redirect the
    write."""
    if path.is_symlink() or path.exists():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return path


def fresh_folder(path: Path) -> Path:
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    path.mkdir(exist_ok=True)
    return path


def write_in_place(path: Path, text: str) -> None:
    """Replace ``path``'s content, keeping the file (its folder does not change), never writing
    through a link: a link or anything not a plain file standing there is removed first."""
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError:  # a link (ELOOP), a folder, a socket...
        handle = os.open(fresh_file(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
        file.write(text)


def digest(submission: Submission) -> str | None:
    return hashlib.sha256(submission.data).hexdigest() if submission.data is not None else None


class Ledger:
    """grades.csv, feedback/ and the journal of one output folder, written row by row."""

    def __init__(self, out: Path, folder: Path, header: dict, *, alone: bool):
        self.out, self.folder, self.alone = out, folder, alone
        self.header = {"format": FORMAT} | header
        self.rows: dict[str, Submission] = {}
        self.order: dict[str, int] = {}
        self.lock = threading.Lock()

    @property
    def journal(self) -> Path:
        return self.out / JOURNAL

    def paths(self) -> list[Path]:
        """What it rewrites while notebooks run (left out of the integrity watch)."""
        return [self.out / "grades.csv", self.out / "feedback", self.journal]

    def resume(self, submissions: list[Submission], *, new_code: bool = False) -> list[Submission]:
        """The submissions this folder's journal holds graded (their rows taken from it); raises
        :class:`ValueError`, saying why, where the folder holds grades this run must not add to.
        ``new_code``: grading code the instructor accepted (``--accept-grading-code``) grades every
        submission again, rather than being refused."""
        self.order = {s.name: index for index, s in enumerate(submissions)}
        kept = read_journal(self.out, self.header, new_code=new_code)
        done = []
        for submission in submissions:
            row = kept.get(submission.name)
            if row is None or row["status"] in REGRADED or row.get("sha256") != digest(submission):
                continue
            graded = from_row(row)
            graded.path = submission.path
            self.rows[submission.name] = graded
            done.append(graded)
        return done

    def start(self) -> None:
        """Make the folder's files (before the watch starts): the journal holds its header and the
        rows kept, grades.csv those rows."""
        fresh_folder(self.out / "feedback")
        lines = [self.header] + [self._journal_row(s) for s in self._sorted()]
        write_in_place(self.journal, "".join(json.dumps(line) + "\n" for line in lines))
        write_in_place(self.out / "grades.csv", self._csv())

    def add(self, submission: Submission) -> None:
        """Write ``submission``'s feedback, its journal line and grades.csv with its row."""
        with self.lock:
            self.rows[submission.name] = submission
            checks = lab_checks(submission.lab)
            write_in_place(
                self.out / "feedback" / f"{submission.slug}.md", feedback(submission, checks)
            )
            with self.journal.open("a", encoding="utf-8") as journal:
                journal.write(json.dumps(self._journal_row(submission)) + "\n")
                journal.flush()
                os.fsync(journal.fileno())
            write_in_place(self.out / "grades.csv", self._csv())

    def finish(self) -> list[Submission]:
        """Every file written again from the rows in memory (whatever a notebook run without a
        sandbox wrote there meanwhile is gone); the rows, in the folder's order."""
        with self.lock:
            folder = fresh_folder(self.out / "feedback")
            for submission in self._sorted():
                fresh_file(folder / f"{submission.slug}.md").write_text(
                    feedback(submission, lab_checks(submission.lab)), encoding="utf-8"
                )
            self.start()
            return self._sorted()

    def _sorted(self) -> list[Submission]:
        return sorted(self.rows.values(), key=lambda s: self.order.get(s.name, len(self.order)))

    def _csv(self) -> str:
        buffer = io.StringIO()
        write_csv(self._sorted(), buffer)
        return buffer.getvalue()

    def _journal_row(self, submission: Submission) -> dict:
        return shards.row(submission, self.folder) | {"sha256": digest(submission)}


def read_journal(out: Path, header: dict, *, new_code: bool = False) -> dict[str, dict]:
    """The rows of ``out``'s journal by name (the last of each), {} where there is none, or where
    only the code differs and ``new_code`` accepts that; raises :class:`ValueError` where ``out``
    holds grades graded otherwise (``header`` differs) or kept no journal."""
    path = out / JOURNAL
    if not path.is_file() or path.is_symlink():
        if (out / "grades.csv").exists() or os.path.lexists(path):
            raise ValueError(
                f"{out} holds a grades.csv but no journal of its rows ({JOURNAL}) to resume from: "
                "grade into a fresh --out, or move that folder away"
            )
        return {}
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    try:
        records = [json.loads(line) for line in lines if line.strip()]
    except ValueError:
        records = []
    if not records or not isinstance(records[0], dict):
        raise ValueError(f"{path} cannot be read: grade into a fresh --out")
    before = records[0]
    differs = sorted(
        key for key in header.keys() | before.keys() if before.get(key) != header.get(key)
    )
    if differs == ["code"] and new_code:
        return {}
    if differs:
        raise ValueError(
            f"{out} holds rows graded with other {', '.join(differs)} "
            f"({_short(before, differs)}; now {_short(header, differs)}): grade into a fresh "
            "--out, so that no grades.csv mixes the two"
        )
    return {row["name"]: row for row in records[1:] if isinstance(row, dict) and "name" in row}


def _short(record: dict, keys: list[str]) -> str:
    text = ", ".join(f"{key} {record.get(key)}" for key in keys)
    return text if len(text) <= 120 else text[:117] + "..."
