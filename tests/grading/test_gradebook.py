"""The gradebook grades a folder of notebooks across a process boundary, carries on past broken,
hanging, crashing and hostile ones, leaves no process behind, and reports what the grader process
recorded."""

import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from brrr.grading import course, gradebook, merge, shards
from gradebook_helpers import LAB, processes_inside, read_rows, the_grading_environment
from lab_fixtures import expected_reason, write_submission

pytestmark = pytest.mark.usefixtures("grades_in_the_environment")

CELL_TIMEOUT_S = 20


# One per shard of three, by name (brrr.grading.shards.shard_of): unreadable (free), good, and one
# that crashes.
SHARDED = ("broken", "correct", "crashing")
# A cell timeout the lab's first cell (torch, Triton, matplotlib) keeps under on a loaded 2-core
# machine: it took 3-13 s there, two notebooks at once, in the sandbox (the 8 s this test had failed
# 3 runs of 3 at load averages 4-10), and 4-6 s in one run without it.
FOLDER_OPTIONS = dict(cell_timeout_s=CELL_TIMEOUT_S, notebook_timeout_s=180, lab=LAB)


@pytest.fixture(scope="module")
def folder_graded(tmp_path_factory):
    """Good, wrong, hanging, crashing, hostile and broken submissions, graded once: (submissions,
    out, seconds)."""
    tmp = tmp_path_factory.mktemp("folder")
    submissions = tmp / "submissions"
    submissions.mkdir()
    for name in ("correct", "unfused", "hanging", "crashing", "decoy_eager", "passes_then_dies"):
        write_submission(submissions, LAB, name)
    (submissions / "broken.ipynb").write_text("{ this is not a notebook")
    out = tmp / "out"
    with the_grading_environment(tmp_path_factory):
        start = time.monotonic()
        gradebook.grade(submissions, out, jobs=2, **FOLDER_OPTIONS)
        return submissions, out, time.monotonic() - start


@pytest.mark.e2e
def test_a_folder_of_good_wrong_hanging_crashing_and_broken_submissions(folder_graded):
    _, out, seconds = folder_graded
    assert seconds < 150
    rows = read_rows(out)
    assert list(rows) == [
        "broken",
        "correct",
        "crashing",
        "decoy_eager",
        "hanging",
        "passes_then_dies",
        "unfused",
    ]
    header = list(rows["correct"])
    assert header[:3] == ["submission", "lab", "status"] and header[-4:] == [
        "total",
        "max",
        "sandbox",
        "seconds",
    ]
    checks = header[3:-4]
    assert checks == (
        ["correct", "traffic"]
        if gradebook.device_class() != "gpu"
        else ["correct", "bandwidth", "speedup"]
    )

    def summary(name):
        row = rows[name]
        return row["status"], [row[c] for c in checks], row["total"], row["max"]

    full, zeros = str(len(checks)), ["0"] * len(checks)
    if checks == ["correct", "traffic"]:
        assert summary("correct") == ("ok", ["1", "1"], "2", "2")
        assert summary("unfused") == ("failed", ["1", "0"], "1", "2")
    assert summary("decoy_eager") == ("failed", zeros, "0", full)
    assert summary("hanging") == ("failed", zeros, "0", full)  # not run counts as failed
    assert summary("crashing") == ("crashed", zeros, "0", full)
    assert summary("broken") == ("unreadable", zeros, "0", full)
    # Partly graded: "correct" passed, then the kernel died; the rest is not run, and the maximum
    # stays N.
    assert summary("passes_then_dies") == ("crashed", ["1"] + zeros[1:], "1", full)
    assert all(row["lab"] == LAB for row in rows.values())
    assert float(rows["broken"]["seconds"]) == 0 and 0 < float(rows["correct"]["seconds"]) < seconds

    feedback = {path.stem: path.read_text() for path in (out / "feedback").glob("*.md")}
    assert set(feedback) == set(rows)
    if checks == ["correct", "traffic"]:
        assert (
            "## traffic: failed" in feedback["unfused"]
            and "launched 5 kernels" in feedback["unfused"]
        )
        assert "**2 of 2**" in feedback["correct"]
    assert expected_reason(LAB, "decoy_eager") in feedback["decoy_eager"]
    assert (
        f"{CELL_TIMEOUT_S} s allowed per cell" in feedback["hanging"]
        and "not run, scored 0" in feedback["hanging"]
    )
    assert "kernel died" in feedback["crashing"]
    assert "not a readable notebook" in feedback["broken"]
    partial = feedback["passes_then_dies"]
    assert (
        f"**1 of {full}**" in partial
        and "| correct | passed |" in partial
        and "kernel died" in partial
    )
    for check in checks[1:]:
        assert (
            f"| {check} | **not run** (0) |" in partial
            and f"## {check}: not run, scored 0" in partial
        ), partial
    assert processes_inside(out) == []


@pytest.mark.e2e
def test_three_shards_grade_what_one_run_grades(folder_graded, tmp_path, monkeypatch):
    """Three of the folder's submissions, one per shard, graded by ``--shard K/3`` from the command
    line and merged: the unsharded run's rows and feedback, but for the seconds and the random seeds
    the checks draw."""
    submissions, reference, _ = folder_graded
    subset = tmp_path / "submissions"
    subset.mkdir()
    for name in SHARDED:
        shutil.copy(submissions / f"{name}.ipynb", subset)  # the very files graded unsharded
    assert sorted(shards.shard_of(name, 3) for name in SHARDED) == [1, 2, 3]
    monkeypatch.setattr(
        gradebook, "grader_setup_problem", lambda: None
    )  # tests/grading/test_gradebook_setup.py
    options = ["--lab", LAB, "--cell-timeout", f"{FOLDER_OPTIONS['cell_timeout_s']:g}"]
    options += ["--notebook-timeout", f"{FOLDER_OPTIONS['notebook_timeout_s']:g}"]
    outs = [tmp_path / f"shard-{index}" for index in (1, 2, 3)]
    for index, out in enumerate(outs, start=1):
        assert (
            gradebook.main([str(subset), "--out", str(out), "--shard", f"{index}/3", *options]) == 0
        )
        assert len(read_rows(out)) == 1  # its share, and no other
    assert merge.main([*map(str, outs), "--out", str(tmp_path / "final")]) == 0

    def without_seconds(rows):
        return {
            name: {k: v for k, v in row.items() if k != "seconds"} for name, row in rows.items()
        }

    merged, unsharded = (
        without_seconds(read_rows(tmp_path / "final")),
        without_seconds(read_rows(reference)),
    )
    assert merged == {name: unsharded[name] for name in SHARDED}

    def feedback(folder, name):
        return re.sub(r"seed \d+", "seed N", (folder / "feedback" / f"{name}.md").read_text())

    for name in SHARDED:
        assert feedback(tmp_path / "final", name) == feedback(reference, name), name


def test_a_crash_names_the_cell_by_its_first_line_not_by_nbvals_count(tmp_path):
    """nbval names a failing cell by its count of code cells ('Cell 1'), which no student sees; the
    feedback names it by its first line of code in the notebook that ran."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    ran = tmp_path / "ran.ipynb"
    cells = [
        new_markdown_cell("# Lab"),
        new_code_cell("# setup\nimport torch"),
        new_code_cell("\nh = x * s\nh"),
    ]
    nbformat.write(new_notebook(cells=cells), ran)
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuite><testcase name="Cell 1">'
        '<error message="Cell 1: Cell execution caused an exception">'
        "Traceback\nNameError: name 'x' is not defined</error></testcase></testsuite>"
    )
    named = ["The cell that starts `h = x * s`: NameError: name 'x' is not defined"]
    assert gradebook.read_junit(junit, ran) == named
    assert gradebook.read_junit(junit) == [
        "Cell 1: NameError: name 'x' is not defined"
    ]  # no notebook: nbval's


def test_feedback_lists_other_errors_but_not_failed_checks():
    submission = gradebook.Submission(
        "alice",
        Path("alice.ipynb"),
        lab=LAB,
        status="failed",
        results={"correct": {"passed": False, "message": "wrong at index 3"}},
        cell_errors=[
            "Cell 4: NameError: name 'h' is not defined",
            "Cell 9: AssertionError: wrong at index 3",
        ],
    )
    text = gradebook.feedback(submission, ["correct", "traffic"])
    others = text[text.index("## Other errors in your notebook") :]
    assert (
        "- Cell 4: NameError: name 'h' is not defined" in others and "AssertionError" not in others
    )
    assert "## correct: failed" in text and "wrong at index 3" in text
    assert "## traffic: not run, scored 0" in text


def test_a_check_the_grader_could_not_grade_fairly_is_a_grader_error_not_a_failure_nor_a_pass(
    tmp_path,
):
    """A check the grader recorded as its own fault (brrr.checks.fairness.GraderFault: it could not
    get the CPU) scores 0, makes the row grader-error (graded again, as a grader that did not
    start), and tells the student it is not their fault. A grader killed while a sandboxed notebook
    ran is a grader error too: the notebook could not signal it; without a sandbox the row stays the
    notebook's (grader-killed)."""
    prepared = gradebook.Prepared(tmp_path, LAB, tmp_path / "submission.ipynb", tmp_path, [])
    prepared.output.write_text("")
    fault = {
        "passed": False,
        "grader_fault": True,
        "message": "grader error (not your fault): the grader could not",
    }
    checks = gradebook.lab_checks(LAB)
    submission = gradebook.Submission("bob", Path("bob.ipynb"), lab=LAB)
    ran = gradebook.Ran(0, False, False, {checks[0]: {"passed": True}, checks[1]: fault})
    gradebook.classify(submission, prepared, ran, 60, 600)
    assert submission.status == "grader-error" and "not your fault" in submission.note, (
        submission.note
    )
    text = gradebook.feedback(submission, checks)
    assert f"| {checks[1]} | **grader error** (0, not your fault) |" in text, text
    assert f"## {checks[1]}: grader error, not your fault" in text and "**failed**" not in text
    gradebook.write_csv([submission], tmp_path / "grades.csv")
    row = read_rows(tmp_path)["bob"]
    assert (row["status"], row[checks[0]], row[checks[1]]) == ("grader-error", "1", "0"), row
    for sandboxed, status, said in (
        (True, "grader-error", "not your fault"),
        (False, "grader-killed", "Only the"),
    ):
        killed = gradebook.Submission("carol", Path("carol.ipynb"), lab=LAB, sandboxed=sandboxed)
        gradebook.classify(killed, prepared, gradebook.Ran(0, False, True, None), 60, 600)
        assert killed.status == status and said in killed.note, (
            sandboxed,
            killed.status,
            killed.note,
        )


def test_a_partly_graded_row_scores_what_passed_out_of_every_check(tmp_path):
    """The row and feedback of a notebook that died after its first check, without running one: 1 of
    N, the maximum every check the lab grades here, each check never received scored 0 and said "not
    run"."""
    checks = gradebook.lab_checks(LAB)
    partial = gradebook.Submission(
        "partial",
        Path("partial.ipynb"),
        lab=LAB,
        status="crashed",
        results={checks[0]: {"passed": True}},
    )
    gradebook.write_csv([partial], tmp_path / "grades.csv")
    row = read_rows(tmp_path)["partial"]
    assert [row[check] for check in checks] == ["1"] + ["0"] * (len(checks) - 1)
    assert (row["total"], row["max"]) == ("1", str(len(checks)))
    text = gradebook.feedback(partial, checks)
    assert f"**1 of {len(checks)}**" in text
    for check in checks[1:]:
        assert f"| {check} | **not run** (0) |" in text and f"## {check}: not run, scored 0" in text


def test_the_command_line_passes_its_timeouts_and_jobs_to_grade(tmp_path, monkeypatch):
    calls = []

    def fake_grade(folder, out, **options):
        calls.append((folder, out, options))
        return []

    monkeypatch.setattr(gradebook, "grade", fake_grade)
    monkeypatch.setattr(gradebook, "grader_setup_problem", lambda: None)
    # a folder with a notebook in it: an empty one is refused
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    (submissions / "alice.ipynb").write_text("{}")
    assert (
        gradebook.main(
            [
                str(submissions),
                "--out",
                str(tmp_path / "out"),
                "--cell-timeout",
                "12.5",
                "--notebook-timeout",
                "99",
                "--jobs",
                "3",
                "--lab",
                LAB,
            ]
        )
        == 0
    )
    assert gradebook.main([str(submissions), "--out", str(tmp_path / "out")]) == 0
    (folder, out, given), (_, _, defaults) = calls
    assert (folder, out) == (submissions, tmp_path / "out")
    sandboxed = {"sandboxed": True, "accept_grading_code": False, "only": None}
    assert given == {
        "cell_timeout_s": 12.5,
        "notebook_timeout_s": 99.0,
        "lab": LAB,
        "jobs": 3,
        **sandboxed,
    }
    assert defaults == {
        "cell_timeout_s": gradebook.DEFAULT_CELL_TIMEOUT_S,
        "notebook_timeout_s": gradebook.DEFAULT_NOTEBOOK_TIMEOUT_S,
        "lab": None,
        "jobs": 1,
        **sandboxed,
    }
    gradebook.main([str(submissions), "--out", str(tmp_path / "out"), "--no-sandbox", course.FLAG])
    assert calls[-1][2]["sandboxed"] is False and calls[-1][2]["accept_grading_code"] is True


@pytest.mark.e2e
def test_a_notebook_past_its_time_limit_is_killed_kernel_and_all(tmp_path):
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    write_submission(submissions, LAB, "hanging")
    out = tmp_path / "out"

    start = time.monotonic()
    (graded,) = gradebook.grade(submissions, out, cell_timeout_s=600, notebook_timeout_s=10)
    assert time.monotonic() - start < 60
    assert graded.status == "timeout"
    assert read_rows(out)["hanging"]["status"] == "timeout"
    assert "did not finish within 10 s" in (out / "feedback" / "hanging.md").read_text()
    assert processes_inside(out) == []


def test_the_command_line_grades_a_folder_with_relative_paths(tmp_path, capsys, monkeypatch):
    submissions = tmp_path / "submissions"
    (submissions / "carol").mkdir(parents=True)
    (submissions / "carol" / "02-fuse-it.ipynb").write_text("not a notebook")
    monkeypatch.chdir(tmp_path)
    assert gradebook.main(["submissions", "--out", "out", "--lab", LAB]) == 0
    row = read_rows(tmp_path / "out")["carol/02-fuse-it"]
    assert row["status"] == "unreadable" and row["lab"] == LAB and row["total"] == "0"
    assert (tmp_path / "out" / "feedback" / "carol__02-fuse-it.md").exists()
    assert "graded 1 submission(s)" in capsys.readouterr().out


def test_an_unknown_lab_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gradebook.main([str(tmp_path), "--out", str(tmp_path / "out"), "--lab", "99-made-up"])
    assert "unknown lab" in capsys.readouterr().err
