"""The gradebook grades a folder of notebooks across a process boundary, carries on past broken, hanging,
crashing and hostile ones, leaves no process behind, and reports what the grader process recorded."""

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from brrr.grading import gradebook

from lab_fixtures import ROOT, expected_reason, submission_notebook, write_submission

LAB = "02-fuse-it"
ROOFLINE = "01-roofline"


def processes_inside(folder: Path) -> list[int]:
    """Processes whose working directory is under ``folder`` (a leftover kernel would be one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")).is_relative_to(folder):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def read_rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "grades.csv").open() as handle:
        return {row["submission"]: row for row in csv.DictReader(handle)}


def test_a_folder_of_good_wrong_hanging_crashing_and_broken_submissions(tmp_path):
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    for name in ("correct", "unfused", "hanging", "crashing", "decoy_eager"):
        write_submission(submissions, LAB, name)
    (submissions / "broken.ipynb").write_text("{ this is not a notebook")
    out = tmp_path / "out"

    start = time.monotonic()
    gradebook.grade(submissions, out, cell_timeout_s=8, notebook_timeout_s=180, jobs=2, lab=LAB)
    assert time.monotonic() - start < 150

    rows = read_rows(out)
    assert list(rows) == ["broken", "correct", "crashing", "decoy_eager", "hanging", "unfused"]
    header = list(rows["correct"])
    assert header[:3] == ["submission", "lab", "status"] and header[-2:] == ["total", "max"]
    checks = header[3:-2]
    assert checks == (["correct", "traffic"] if gradebook.device_class() != "gpu"
                      else ["correct", "bandwidth", "speedup"])

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
    assert all(row["lab"] == LAB for row in rows.values())

    feedback = {path.stem: path.read_text() for path in (out / "feedback").glob("*.md")}
    assert set(feedback) == set(rows)
    if checks == ["correct", "traffic"]:
        assert "## traffic: failed" in feedback["unfused"] and "launched 5 kernels" in feedback["unfused"]
        assert "**2 of 2**" in feedback["correct"]
    assert expected_reason(LAB, "decoy_eager") in feedback["decoy_eager"]
    assert "8 s allowed per cell" in feedback["hanging"] and "not run, scored 0" in feedback["hanging"]
    assert "kernel died" in feedback["crashing"]
    assert "not a readable notebook" in feedback["broken"]
    assert processes_inside(out) == []


HOSTILE = ["rebinds_the_grader", "patches_the_clock", "calls_ceilings", "forges_the_record", "rebinds_grade",
           "exits_under_the_grader"]


HOSTILE_CELL_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def hostile_graded(tmp_path_factory):
    """Lab 1: the solution and six hostile submissions, graded once for the tests below: (out, graded)."""
    tmp = tmp_path_factory.mktemp("hostile")
    submissions = tmp / "submissions"
    submissions.mkdir()
    (submissions / "solution.ipynb").write_bytes((ROOT / "solutions" / f"{ROOFLINE}.ipynb").read_bytes())
    for name in HOSTILE:
        write_submission(submissions, ROOFLINE, name)
    made_up = submission_notebook(ROOFLINE, "rebinds_the_grader")  # claims a lab of its own, with 3 checks
    made_up.metadata["brrr"] = {"lab": "99-three-easy-checks"}
    nbformat.write(made_up, str(submissions / "made_up_lab.ipynb"))
    out = tmp / "out"
    graded = gradebook.grade(submissions, out, cell_timeout_s=HOSTILE_CELL_TIMEOUT_S, notebook_timeout_s=600,
                             jobs=2)
    time.sleep(5)  # longer than the daemon of forges_the_record waits, once its notebook is gone, to strike
    return out, {submission.name: submission for submission in graded}


@pytest.fixture(scope="module")
def hostile_roofline(hostile_graded):
    return hostile_graded[0]


def test_the_roofline_solution_passes_beside_hostile_submissions(hostile_roofline):
    row = read_rows(hostile_roofline)["solution"]
    assert (row["status"], row["total"], row["max"]) == ("ok", "5", "5"), row


@pytest.mark.parametrize("name", HOSTILE)
def test_each_hostile_submission_is_rejected_for_the_right_reason(hostile_roofline, name):
    rows = read_rows(hostile_roofline)
    feedback = (hostile_roofline / "feedback" / f"{name}.md").read_text()
    assert rows[name]["lab"] == ROOFLINE and rows[name]["max"] == "5"
    assert int(rows[name]["total"]) <= 4, rows[name]
    assert expected_reason(ROOFLINE, name) in feedback, feedback


def test_checks_that_never_reached_the_grader_score_zero(hostile_roofline):
    rows = read_rows(hostile_roofline)
    for name in ("rebinds_grade", "exits_under_the_grader"):
        assert rows[name]["total"] == "0", rows[name]


def test_a_made_up_lab_name_gets_no_columns_of_its_own(hostile_roofline):
    rows = read_rows(hostile_roofline)
    assert rows["made_up_lab"]["lab"] == ROOFLINE  # its cells say which lab it is
    assert rows["made_up_lab"]["max"] == "5" and rows["made_up_lab"]["copy_bandwidth"] == "0"
    assert not any("99-three" in column for column in rows["solution"])


def test_a_forged_record_and_a_daemon_change_nothing(hostile_roofline):
    rows = read_rows(hostile_roofline)
    assert rows["forges_the_record"]["ridge_point"] == "0"  # printed PASS, recorded as failed
    assert "left 1 process(es) running" in (hostile_roofline / "feedback" / "forges_the_record.md").read_text()
    assert "left" not in (hostile_roofline / "feedback" / "solution.md").read_text()
    assert not (hostile_roofline / "daemon-was-here").exists()  # killed with its notebook
    assert processes_inside(hostile_roofline) == []
    assert rows["solution"]["total"] == "5"


def test_a_kernel_that_exits_is_noticed_in_seconds_not_at_the_cell_timeout(hostile_graded):
    """exits_under_the_grader ends its kernel with os._exit(0) in an answer cell. nbval alone would wait for
    that cell's timeout; the gradebook watches the kernel and stops the notebook a few seconds after it died."""
    out, graded = hostile_graded
    exited = graded["exits_under_the_grader"]
    assert exited.status == "crashed", (exited.status, exited.note)
    assert "kernel died" in exited.note
    # The whole notebook, kernel start and the cells before included (about 30 s on a loaded 2-core
    # machine), against one cell's allowance: unnoticed, the death would cost at least that allowance.
    assert exited.seconds < HOSTILE_CELL_TIMEOUT_S / 3, exited.seconds
    assert "kernel died" in (out / "feedback" / "exits_under_the_grader.md").read_text()


def test_errors_other_than_failed_checks_reach_the_feedback(hostile_graded):
    """calls_ceilings imports a module the student's kernel does not have: a ModuleNotFoundError in its
    answer cell, reported under "Other errors", apart from the checks that then failed."""
    out, graded = hostile_graded
    errors = graded["calls_ceilings"].cell_errors
    assert any("ModuleNotFoundError: No module named 'brrr.ceilings'" in error for error in errors), errors
    feedback = (out / "feedback" / "calls_ceilings.md").read_text()
    others = feedback[feedback.index("## Other errors in your notebook"):]
    assert "ModuleNotFoundError: No module named 'brrr.ceilings'" in others, feedback
    assert "## Other errors" not in (out / "feedback" / "solution.md").read_text()


def test_feedback_lists_other_errors_but_not_failed_checks():
    submission = gradebook.Submission("alice", Path("alice.ipynb"), lab=LAB, status="failed",
                                      results={"correct": {"passed": False, "message": "wrong at index 3"}},
                                      cell_errors=["Cell 4: NameError: name 'h' is not defined",
                                                   "Cell 9: AssertionError: wrong at index 3"])
    text = gradebook.feedback(submission, ["correct", "traffic"])
    others = text[text.index("## Other errors in your notebook"):]
    assert "- Cell 4: NameError: name 'h' is not defined" in others and "AssertionError" not in others
    assert "## correct: failed" in text and "wrong at index 3" in text
    assert "## traffic: not run, scored 0" in text


def test_the_command_line_passes_its_timeouts_and_jobs_to_grade(tmp_path, monkeypatch):
    calls = []

    def fake_grade(folder, out, **options):
        calls.append((folder, out, options))
        return []

    monkeypatch.setattr(gradebook, "grade", fake_grade)
    monkeypatch.setattr(gradebook, "grader_setup_problem", lambda: None)
    assert gradebook.main([str(tmp_path), "--out", str(tmp_path / "out"), "--cell-timeout", "12.5",
                           "--notebook-timeout", "99", "--jobs", "3", "--lab", LAB]) == 0
    assert gradebook.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    (folder, out, given), (_, _, defaults) = calls
    assert (folder, out) == (tmp_path, tmp_path / "out")
    assert given == {"cell_timeout_s": 12.5, "notebook_timeout_s": 99.0, "lab": LAB, "jobs": 3}
    assert defaults == {"cell_timeout_s": gradebook.DEFAULT_CELL_TIMEOUT_S,
                        "notebook_timeout_s": gradebook.DEFAULT_NOTEBOOK_TIMEOUT_S, "lab": None, "jobs": 1}


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


VANDAL = '''
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
    lab = folder / "brrr" / "labs" / "fuse_it.py"
    if lab.exists() and (folder / "THROWAWAY_CHECKOUT").exists():  # the test's copy, never the real one
        os.chmod(lab, 0o644)
        lab.write_text(lab.read_text() + "\\n\\ndef grade(check, student):\\n    return 'PASS: vandalised'\\n")
        (folder / "VANDALISED").write_text(str(lab))
'''


def test_a_submission_that_rewrites_the_grader_on_disk_changes_no_later_grade(tmp_path):
    """The grader is read into memory when grading starts: editing files on disk afterwards changes nothing."""
    checkout = tmp_path / "instructor"
    shutil.copytree(ROOT / "brrr", checkout / "brrr", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "solutions", checkout / "solutions")
    (checkout / "THROWAWAY_CHECKOUT").write_text("a submission in this test may vandalise this copy")
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    vandal = submission_notebook(LAB, "correct")
    vandal.cells[[c.get("id") for c in vandal.cells].index("fused-chain")].source += VANDAL
    nbformat.write(vandal, str(submissions / "a_vandal.ipynb"))
    (submissions / "b_unsolved.ipynb").write_bytes((ROOT / "labs" / f"{LAB}.ipynb").read_bytes())
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run([sys.executable, "-m", "brrr.grading", str(submissions), "--out", "out", "--lab", LAB],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (checkout / "VANDALISED").exists()  # the attack did reach the instructor's disk...
    rows = read_rows(checkout / "out")
    assert rows["a_vandal"]["status"] == "tampered" and rows["a_vandal"]["total"] == "0", rows  # ...was seen...
    assert "fuse_it.py" in (checkout / "out" / "feedback" / "a_vandal.md").read_text()
    assert rows["b_unsolved"]["total"] == "0", rows  # ...and the next submission was graded as before
    assert json.dumps(rows).count("vandalised") == 0


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


def test_files_changed_outside_a_work_folder_are_charged_to_their_submission(tmp_path):
    """Integrity (brrr.grading.integrity): one at a time, so each change has one culprit.

    a: overwrites the other notebooks and plants a link where grades.csv goes;
    b: kills its grader process (graded as written, though a overwrote its file
    on disk: it would be "unreadable" otherwise); d: touches a module of the
    Python environment, which stops grading; e: correct, but never graded once
    the environment is in doubt.
    """
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    for name, fixture in (("a_sabotage", "sabotages_others"), ("b_kill", "kills_the_grader"),
                          ("d_environment", "tampers_with_the_environment"), ("e_correct", "correct")):
        write_submission(submissions, LAB, fixture, as_name=name)
    out = tmp_path / "out"

    code = gradebook.main([str(submissions), "--out", str(out), "--lab", LAB, "--cell-timeout", "120"])

    rows = read_rows(out)
    status = {name: (row["status"], row["total"]) for name, row in rows.items()}
    assert status == {"a_sabotage": ("tampered", "0"), "b_kill": ("grader-killed", "0"),
                      "d_environment": ("tampered", "0"), "e_correct": ("not graded", "0")}, status
    assert code == 3  # grading did not finish: the instructor must restore the environment
    feedback = {path.stem: path.read_text() for path in (out / "feedback").glob("*.md")}
    assert expected_reason(LAB, "sabotages_others") in feedback["a_sabotage"]
    assert str(submissions / "b_kill.ipynb") in feedback["a_sabotage"]
    assert expected_reason(LAB, "kills_the_grader") in feedback["b_kill"]
    assert "nbformat" in feedback["d_environment"]
    assert "grading stopped" in feedback["e_correct"] and "d_environment" in feedback["e_correct"]
    assert not (out / "grades.csv").is_symlink()  # the planted link was not followed...
    assert (out / "planted.txt").read_text() == "a file of the instructor's"  # ...and its target is intact
    assert processes_inside(out) == []
