"""Assemble one submission's run: its work folder, the lab with its answer cells, its brrr and its
kernel.

The step before the run (:mod:`brrr.grading.execute`): the submission's fresh
folder ``work/<folder name>/`` (:func:`brrr.grading.submissions.folder_names`,
never the output folder or another's), the notebook that runs
(:func:`brrr.grading.assemble.splice`), the student's copy of ``brrr`` without
the lab's hidden modules, and the Jupyter kernel that finds only that copy.
Where nothing can run (no lab, not a notebook, grading stopped) the row is
filled in here."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

from brrr import labs
from brrr.grading import assemble
from brrr.grading.collect import Prepared
from brrr.grading.environment import kernelspec
from brrr.grading.submissions import Submission, choose_lab, read_notebook

# Loaded by the submission's pytest from its folder: a cell that runs out of time stops the
# notebook, so a hung function costs one cell timeout, not one per grader cell that calls it again
# (nbval itself runs on after a timeout, each later cell expected to fail).
STOP_AFTER_A_TIMEOUT = '''"""The gradebook's: grading stops at the first cell out of time."""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" and report.failed and "Timeout of" in str(report.longrepr):
        item.session.shouldfail = "a cell ran out of time: grading stopped there"
'''


def prepare(
    submission: Submission,
    work: Path,
    snapshot: assemble.Snapshot,
    default_lab: str | None,
    stopped: str = "",
) -> Prepared | None:
    """The submission's fresh folder with its notebook spliced into the lab, the student package and
    the kernel; None, with the row filled in, where nothing can run (no lab, not a notebook,
    ``stopped``: why grading stopped before it)."""
    folder = work / submission.slug
    if folder.parent != work:  # folder_names makes none other; a row made by hand could
        raise ValueError(f"{submission.slug!r} is not a folder name of its own")
    assemble.make_writable(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if submission.data is not None:
        (folder / "original.ipynb").write_bytes(submission.data)
    submitted = read_notebook(submission.data)
    lab = choose_lab(submission, submitted, default_lab, snapshot)
    if lab is None:
        submission.lab, submission.status = "unknown", "refused"
        return None
    submission.lab = lab
    if submitted is None:
        submission.status = "unreadable"
        submission.note = (
            "The file is not a readable notebook (invalid JSON). Nothing could be run."
        )
        return None
    if stopped:
        submission.status = "not graded"
        submission.note = f"Not graded: grading stopped before this submission. {stopped}"
        return None
    spliced = assemble.splice(snapshot.labs[lab], snapshot.answers[lab], submitted)
    notebook = folder / "submission.ipynb"
    nbformat.write(spliced.notebook, str(notebook))
    notes = []
    if spliced.answers_missing:
        notes.append(
            f"Your notebook has no answer cell for {', '.join(spliced.answers_missing)}: the lab's "
            "stub ran there."
        )
    if spliced.ignored_edits:
        notes.append(
            f"{spliced.ignored_edits} cell(s) you changed or added outside the answer cells were "
            "not run: only the answer cells come from your notebook. Keep all your code in them."
        )
    hidden = tuple(getattr(labs.module(lab), "HIDDEN_MODULES", ()))
    student_path = snapshot.write_package(folder / "student", hidden=hidden)
    (folder / "pytest.ini").write_text("[pytest]\n")  # keep the repository's pytest settings out
    (folder / "conftest.py").write_text(STOP_AFTER_A_TIMEOUT)
    return Prepared(folder, lab, notebook, kernelspec(folder, student_path), notes)
