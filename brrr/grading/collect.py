"""Collect and score one run: what its notebook and grader left, read into the submission's row.

The step after the run (:mod:`brrr.grading.execute`): the grader's signed
record is the verdict; nbval's JUnit report and the run's output say why cells
failed, timed out or died (:func:`classify`). Everything the notebook wrote is
read with a cap (:data:`READ_CAP`): a submission that prints or raises 200 MiB
costs a note, not the gradebook's memory.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import nbformat

from brrr.grading.submissions import Submission

READ_CAP = 1 << 20  # bytes read from each end of a file a submission's run wrote
JUNIT_CAP = 16 << 20  # nbval's JUnit report, parsed whole: larger ones are not read
KERNEL_DIED = (
    "The notebook's kernel died (a segmentation fault, an abort, or running out of memory)"
)
# A grader cell: grade("check", ...), as the labs write them (brrr.labs.generate).
GRADER_CELL = re.compile(r"""\bgrade\(\s*["'](\w+)["']""")


@dataclass
class Prepared:
    """A submission's folder ready to run: the spliced notebook, its kernel and the notes so far."""

    folder: Path
    lab: str
    notebook: Path
    jupyter_path: Path
    notes: list[str]

    @property
    def junit(self) -> Path:
        return self.folder / "junit.xml"

    @property
    def output(self) -> Path:
        return self.folder / "output.txt"


@dataclass
class Ran:
    """What one run left: pytest's exit code (None: stopped at the notebook's time limit), whether
    the kernel died, whether the grader was killed, the grader's verified results (None:
    unreadable), and whether grading was interrupted while it ran (:mod:`brrr.grading.interrupt`).
    """

    returncode: int | None
    kernel_died: bool
    grader_killed: bool
    results: dict | None
    interrupted: bool = False


def read_tail(path: Path, limit: int) -> str:
    """The last ``limit`` bytes of ``path`` as text ('' if it cannot be read)."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - limit))
            return handle.read(limit).decode(errors="replace")
    except OSError:
        return ""


def read_capped(path: Path, cap: int = READ_CAP) -> str:
    """``path`` as text, or its first and last ``cap`` bytes with a line between saying what was
    left out."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size <= 2 * cap:
                return handle.read().decode(errors="replace")
            head = handle.read(cap)
            handle.seek(size - cap)
            tail = handle.read(cap)
    except OSError:
        return ""
    skipped = f"\n[{size - 2 * cap} bytes left out by the gradebook]\n"
    return head.decode(errors="replace") + skipped + tail.decode(errors="replace")


def grader_killed(submission: Submission) -> None:
    """The row of a submission whose grader a signal ended. Without a sandbox the notebook's
    processes could send it, and the row is theirs (``grader-killed``, 0). In one they can neither
    see nor signal the grader, and the out-of-memory killer takes them first (``oom_score_adj``
    1000, :mod:`brrr.checks.reaper`): the signal came from outside the submission, a grader error.
    """
    if submission.sandboxed:
        submission.status = "grader-error"
        submission.note = (
            "The grader process of this submission was killed while its notebook ran, by something "
            "outside it: a sandboxed notebook can neither see nor signal its grader, and when "
            "memory runs out its own processes are killed first. Nothing was graded (not your "
            "fault). Instructors: grade it again (alone, if memory ran out)."
        )
        return
    submission.status = "grader-killed"
    submission.note = (
        "The grader process of this submission was killed while its notebook ran. Only the "
        "notebook's own processes (or the system running out of memory) could do that, so "
        "every check scores 0. Instructors: if memory ran out, grade it again alone."
    )


def classify(
    submission: Submission,
    prepared: Prepared,
    ran: Ran,
    cell_timeout_s: float,
    notebook_timeout_s: float,
) -> None:
    """The row's status, results, cell errors and notes, from what the run left."""
    if ran.interrupted:
        submission.status = "not graded"
        submission.note = "Not graded: grading was interrupted while this notebook ran."
        return
    if ran.grader_killed:
        grader_killed(submission)
        return
    if ran.results is None:
        submission.status = "grader-error"
        submission.note = (
            "The grader's record could not be read back, so nothing was graded (not your fault)."
        )
        return
    notes = prepared.notes
    submission.results = ran.results
    submission.cell_errors = read_junit(prepared.junit, prepared.notebook)
    text = read_capped(prepared.output)
    if ran.kernel_died:
        submission.status = "crashed"
        notes.append(
            f"{KERNEL_DIED}, and grading stopped there. Checks after that point did not run."
        )
    elif ran.returncode is None:
        submission.status = "timeout"
        notes.append(
            f"The notebook did not finish within {notebook_timeout_s:g} s and was stopped. Checks "
            "after that point did not run."
        )
    elif "Kernel dead" in text or "Kernel died" in text or "kernel died" in text.lower():
        submission.status = "crashed"
        notes.append(f"{KERNEL_DIED}. Checks after that point did not run.")
    elif ran.returncode == 0:
        submission.status = "ok"
    else:
        submission.status = "failed"
    if any("Timeout of" in error for error in submission.cell_errors):
        notes.append(_timed_out(submission, prepared, cell_timeout_s))
    if faults := grader_faults(submission):
        submission.status = "grader-error"
        notes.insert(
            0,
            f"The grader could not grade {', '.join(faults)} fairly, so it scores 0 here (not your "
            "fault: see its message below). Instructors: grade this submission again, on a quieter "
            "machine.",
        )
    escaped = re.findall(r"brrr-reaper: killed (\d+) process", text)
    if escaped and int(escaped[-1]):
        notes.append(
            f"Your notebook left {int(escaped[-1])} process(es) running after it ended, outside "
            "its own process tree; the gradebook killed them."
        )
    submission.note = " ".join(notes)


def _timed_out(submission: Submission, prepared: Prepared, cell_timeout_s: float) -> str:
    """Mark the checks whose grader cell ran out of time (unless they passed); the note saying
    so."""
    timed_out = timed_out_checks(prepared.junit, prepared.notebook)
    passed = {check for check, record in submission.results.items() if record.get("passed")}
    submission.timed_out = [check for check in timed_out if check not in passed]
    return (
        f"A cell ran longer than the {cell_timeout_s:g} s allowed per cell and was interrupted, "
        "and grading stopped there: the checks after that cell did not run."
    )


def grader_faults(submission: Submission) -> list[str]:
    """The checks the grader itself failed (``grader_fault`` in its record: it could not measure
    fairly, or raised): neither passed nor the student's failure."""
    return [check for check, record in submission.results.items() if record.get("grader_fault")]


def read_junit(path: Path, notebook: Path | None = None) -> list[str]:
    """'The cell that starts `h = x * s`: NameError: name 'x' is not defined' for each failing cell
    in nbval's JUnit report, the cell named by its first line in ``notebook`` (the notebook that
    ran), as the student sees it; 'Cell 7' (nbval's count of code cells, which no student sees) only
    where it cannot be.

    Cells that failed a grader check (an AssertionError) are left out: the check's
    own message reports those."""
    names = cell_names(notebook)
    errors = []
    for name, text in failures(path):
        if re.search(r"^AssertionError\b", text, flags=re.M):
            continue
        line = _last_error_line(text)
        line = line.removeprefix(f"{name}: ") if line.startswith(f"{name}: ") else line
        errors.append(f"{names.get(name, name)}: {line}")
    return errors


def failures(path: Path) -> list[tuple[str, str]]:
    """(nbval's cell name, its failure's text) for each failing cell in the JUnit report at
    ``path``; none where there is no report, or one over :data:`JUNIT_CAP` (a cell that raised a
    message that large)."""
    try:
        if path.stat().st_size > JUNIT_CAP:
            return [
                (
                    "report",
                    f"nbval's report ({path.stat().st_size >> 20} MiB) was too large to read",
                )
            ]
        tree = ElementTree.parse(path)
    except (OSError, ElementTree.ParseError):
        return []
    found = []
    for case in tree.iter("testcase"):
        for problem in list(case.findall("failure")) + list(case.findall("error")):
            text = _ANSI.sub("", (problem.get("message") or "") + "\n" + (problem.text or ""))
            found.append((case.get("name", "?"), text))
    return found


def timed_out_checks(path: Path, notebook: Path) -> list[str]:
    """The checks whose grader cell (``grade("check", ...)``) ran out of time, by nbval's report."""
    sources = code_cells(notebook)
    checks = []
    for name, text in failures(path):
        number = name.removeprefix("Cell ")
        if "Timeout of" in text and number.isdigit() and int(number) < len(sources):
            checks += GRADER_CELL.findall(sources[int(number)])
    return checks


def code_cells(notebook: Path | None) -> list[str]:
    """The source of each code cell of ``notebook`` (the notebook that ran), in nbval's order."""
    if notebook is None or not notebook.exists():
        return []
    try:
        cells = nbformat.read(notebook, as_version=4).cells
    except Exception:  # noqa: BLE001 - a notebook that cannot be read leaves nbval's names
        return []
    return [cell.source for cell in cells if cell.cell_type == "code"]


def cell_names(notebook: Path | None) -> dict[str, str]:
    """nbval's name of each code cell ('Cell 7': its count of code cells, from 0) -> 'The cell that
    starts `...`', its first line that is not blank or a comment (the first line, where all are)."""
    names = {}
    for number, source in enumerate(code_cells(notebook)):
        lines = [line.strip() for line in source.splitlines() if line.strip()]
        code = [line for line in lines if not line.startswith("#")] or lines
        first = code[0] if code else ""
        first = first if len(first) <= 80 else first[:77] + "..."
        names[f"Cell {number}"] = (
            f"The cell that starts `{first}`" if first else f"Empty cell {number}"
        )
    return names


# nbval colours its messages; JUnit XML spells the escape character as '#x1B'.
_ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")


def _last_error_line(text: str) -> str:
    """The most telling line of an nbval failure: a timeout, or the exception at the end of the
    traceback."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "Timeout of" in line or "Kernel dead" in line:
            return line[:300]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", line):
            return line[:300]
    return (lines[-1] if lines else "failed")[:300]
