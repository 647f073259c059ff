"""Submissions that write where they must not: the grader on disk, other students' files, the
environment. Each is charged to its culprit; later grades do not change.

These run with --no-sandbox: in the sandbox (tests/grading/test_gradebook_sandbox.py) none of these
files is in reach. The integrity watch is the second line, and must hold where no sandbox can be
made."""

import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from brrr.grading import course, gradebook

from gradebook_helpers import LAB, processes_inside, read_rows
from lab_fixtures import ROOT, expected_reason, submission_notebook, write_submission

pytestmark = [
    # the gradebook's tamper detection: the GPU check leaves it to CI
    pytest.mark.device_independent,
    # whole gradebook runs, one as a subprocess of a copied checkout: `make test-e2e`
    pytest.mark.e2e,
]


VANDAL = """
import os
from pathlib import Path

# Find the instructor's checkout through the processes above this one, and rewrite its grader.
pid, targets = os.getppid(), []
while pid > 1:
    try:
        targets.append(Path(os.readlink(f"/proc/{pid}/cwd")))
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        break
for folder in targets:
    lab = folder / "brrr" / "labs" / "fuse_it" / "checks.py"
    # the test's copy, never the real one
    if lab.exists() and (folder / "THROWAWAY_CHECKOUT").exists():
        os.chmod(lab, 0o644)
        vandal = "\\n\\ndef grade(check, student):\\n    return 'PASS: vandalised'\\n"
        lab.write_text(lab.read_text() + vandal)
        (folder / "VANDALISED").write_text(str(lab))
"""


def test_a_submission_that_rewrites_the_grader_on_disk_changes_no_later_grade(
    tmp_path, grades_in_the_environment
):
    """The grader is read into memory when grading starts: editing files on disk afterwards changes
    nothing."""
    checkout = tmp_path / "instructor"
    shutil.copytree(ROOT / "brrr", checkout / "brrr", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "solutions", checkout / "solutions")
    (checkout / "THROWAWAY_CHECKOUT").write_text(
        "a submission in this test may vandalise this copy"
    )
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    vandal = submission_notebook(LAB, "correct")
    vandal.cells[[c.get("id") for c in vandal.cells].index("fused-chain")].source += VANDAL
    nbformat.write(vandal, str(submissions / "a_vandal.ipynb"))
    (submissions / "b_unsolved.ipynb").write_bytes((ROOT / "labs" / f"{LAB}.ipynb").read_bytes())
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "brrr.grading",
            str(submissions),
            "--out",
            "out",
            "--lab",
            LAB,
            "--no-sandbox",
        ],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 5, (
        done.stdout + done.stderr
    )  # a submission tampered: the exit status says so
    assert "TAMPERED: a_vandal" in done.stderr and "git status" in done.stderr, done.stderr
    assert (checkout / "VANDALISED").exists()  # the attack did reach the instructor's disk...
    rows = read_rows(checkout / "out")
    assert rows["a_vandal"]["status"] == "tampered" and rows["a_vandal"]["total"] == "0", (
        rows
    )  # ...was seen...
    assert "fuse_it/checks.py" in (checkout / "out" / "feedback" / "a_vandal.md").read_text()
    assert rows["b_unsolved"]["total"] == "0", (
        rows
    )  # ...and the next submission was graded as before
    assert json.dumps(rows).count("vandalised") == 0
    # The edit outlives the run: the next run into the folder refuses to grade with the changed
    # checks.
    again = subprocess.run(
        done.args, cwd=checkout, env=env, capture_output=True, text=True, timeout=400
    )
    assert again.returncode == 4, again.stdout + again.stderr
    assert "fuse_it/checks.py" in again.stderr and course.FLAG in again.stderr, again.stderr
    assert read_rows(checkout / "out") == rows  # nothing graded again


def test_files_changed_outside_a_work_folder_are_charged_to_their_submission(
    tmp_path, changes_the_grading_environment
):
    """Integrity (brrr.grading.integrity): one at a time, so each change has one culprit.

    a: overwrites the other notebooks and plants a link where grades.csv goes;
    b: kills its grader process (graded as written, though a overwrote its file
    on disk: it would be "unreadable" otherwise); d: touches a module of the
    Python environment, which stops grading; e: correct, but never graded once
    the environment is in doubt.
    """
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    for name, fixture in (
        ("a_sabotage", "sabotages_others"),
        ("b_kill", "kills_the_grader"),
        ("d_environment", "tampers_with_the_environment"),
        ("e_correct", "correct"),
    ):
        write_submission(submissions, LAB, fixture, as_name=name)
    out = tmp_path / "out"

    code = gradebook.main(
        [str(submissions), "--out", str(out), "--lab", LAB, "--cell-timeout", "120", "--no-sandbox"]
    )

    rows = read_rows(out)
    status = {name: (row["status"], row["total"]) for name, row in rows.items()}
    assert status == {
        "a_sabotage": ("tampered", "0"),
        "b_kill": ("grader-killed", "0"),
        "d_environment": ("tampered", "0"),
        "e_correct": ("not graded", "0"),
    }, status
    assert code == 3  # grading did not finish: the instructor must restore the environment
    feedback = {path.stem: path.read_text() for path in (out / "feedback").glob("*.md")}
    assert expected_reason(LAB, "sabotages_others") in feedback["a_sabotage"]
    assert str(submissions / "b_kill.ipynb") in feedback["a_sabotage"]
    assert expected_reason(LAB, "kills_the_grader") in feedback["b_kill"]
    assert "nbformat" in feedback["d_environment"]
    assert "grading stopped" in feedback["e_correct"] and "d_environment" in feedback["e_correct"]
    assert not (out / "grades.csv").is_symlink()  # the planted link was not followed...
    assert (
        out / "planted.txt"
    ).read_text() == "a file of the instructor's"  # ...and its target is intact
    assert processes_inside(out) == []
