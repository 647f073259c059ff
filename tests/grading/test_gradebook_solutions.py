"""Every lab's reference solution, graded as an instructor grades a course: the README's gradebook,
sandboxed, started from a course folder that holds the submissions and earlier grades."""

import pytest

from brrr.grading import gradebook, sandbox
from lab_fixtures import SOLUTIONS

pytestmark = (
    pytest.mark.e2e
)  # six whole gradings, one at a time (timed labs are never graded two at once)


def test_every_reference_solution_gets_full_marks_in_a_sandboxed_run_from_a_course_folder(
    tmp_path, monkeypatch, grades_in_the_environment
):
    """The sandbox shows a submission nothing but itself (docs/THREATS.md); what a reference
    solution needs (its /tmp, its student copy of brrr, the grader's socket) must still be there.
    Lab 4 lost a point this way: its trace was written to the sandbox's /tmp and looked for on the
    host."""
    if sandbox.problem() is not None:
        pytest.skip(f"no bubblewrap sandbox on this machine: {sandbox.problem()}")
    course = tmp_path / "course"
    submissions = course / "submissions"
    submissions.mkdir(parents=True)
    for solution in sorted(SOLUTIONS.glob("*.ipynb")):
        (submissions / solution.name).write_bytes(solution.read_bytes())
    (course / "grades").mkdir()
    (course / "grades" / "grades.csv").write_text("name,total\nsomeone,1\n")  # an earlier course's
    monkeypatch.chdir(course)  # as `python -m brrr.grading` puts it first on sys.path
    graded = gradebook.grade(submissions, course / "out")
    assert len(graded) == 6
    for submission in graded:
        failed = {c: r["message"] for c, r in submission.results.items() if not r["passed"]}
        assert submission.sandboxed, submission.name
        assert submission.status == "ok" and not failed, (
            submission.name,
            submission.status,
            failed,
        )
        assert sorted(submission.results) == sorted(gradebook.lab_checks(submission.lab))
