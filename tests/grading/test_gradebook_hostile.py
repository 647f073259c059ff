"""Hostile submissions graded in one gradebook run beside Lab 1's solution: each is rejected for its
own reason, the solution passes, and a kernel that ends itself is noticed at once. (A file of its
own, so that pytest-xdist can run it beside the other gradebook tests.)

The attacks on Lab 1's timing checks are Lab 1 submissions; those that work on any lab (rebinding
the grader cells, exiting under the grader, forging the record) are Lab 2's, the quicker lab to
grade, in the same folder: the gradebook grades each notebook as the lab its cells say it is.

A Lab 2 notebook in the same run tries every way out of its bubblewrap sandbox
(brrr.grading.sandbox), beside another submission's grader (``--jobs 2``), and records what it
reached: nothing.

The run grades in a fresh, empty home folder, and the instructor's first IPython session starts
there while it runs, as a book build's first kernel did on a fresh machine (issue 24): that writes
``~/.ipython``, which no grading process reads, so it is reported and charged to no submission.
"""

import contextlib
import io
import os
import subprocess
import sys
import threading
import time

import nbformat
import pytest

from brrr.checks import reaper
from brrr.grading import gradebook, merge, shards

from brrr import labs
from gradebook_helpers import (
    ESCAPES,
    LAB,
    ROOFLINE,
    escape_attempt,
    processes_inside,
    read_rows,
    shard_outputs,
    the_grading_environment,
)
from lab_fixtures import ROOT, expected_reason, submission_notebook, write_submission

pytestmark = (
    pytest.mark.device_independent
)  # hostile submissions against the grader's isolation: the GPU check leaves it to CI


HOSTILE = {
    "rebinds_the_grader": ROOFLINE,
    "patches_the_clock": ROOFLINE,
    "calls_ceilings": ROOFLINE,
    "forges_the_record": LAB,
    "rebinds_grade": LAB,
    "exits_under_the_grader": LAB,
}
# A lab's maximum is its number of checks on this device class (Lab 2 has a timed check on a GPU).
MAX = {lab: str(len(gradebook.lab_checks(lab))) for lab in (ROOFLINE, LAB)}


HOSTILE_CELL_TIMEOUT_S = 300
# This one's notebook also names a lab that does not exist in its metadata (a Lab 1 run fewer).
MADE_UP_LAB = "rebinds_the_grader"


@pytest.fixture(scope="module")
def hostile_graded(tmp_path_factory):
    """Lab 1's solution and six hostile submissions (one claiming a made-up lab), and a Lab 2
    notebook that tries every way out of its sandbox before answering correctly, graded once for the
    tests below: (out, graded, what the escape attempt reached)."""
    tmp = tmp_path_factory.mktemp("hostile")
    submissions = tmp / "submissions"
    submissions.mkdir()
    (submissions / "solution.ipynb").write_bytes(
        (ROOT / "solutions" / f"{ROOFLINE}.ipynb").read_bytes()
    )
    for name, lab in HOSTILE.items():
        if name != MADE_UP_LAB:
            write_submission(submissions, lab, name)
    made_up = submission_notebook(
        ROOFLINE, MADE_UP_LAB
    )  # also claims a lab of its own, with 3 checks
    made_up.metadata["brrr"] = {"lab": "99-three-easy-checks"}
    nbformat.write(made_up, str(submissions / f"{MADE_UP_LAB}.ipynb"))
    out, home = tmp / "out", tmp / "home"
    home.mkdir()
    first_session = threading.Thread(target=start_ipython_once_grading_runs, args=(out, home))
    with (
        the_grading_environment(tmp_path_factory),
        pytest.MonkeyPatch.context() as patch,
        contextlib.redirect_stderr(io.StringIO()) as stderr,
        escape_attempt(submissions, out) as escape,
    ):
        patch.setenv("HOME", str(home))
        first_session.start()
        graded = gradebook.grade(
            submissions, out, cell_timeout_s=HOSTILE_CELL_TIMEOUT_S, notebook_timeout_s=600, jobs=2
        )
        first_session.join()
    sys.stderr.write(stderr.getvalue())
    (out / "stderr.txt").write_text(stderr.getvalue())
    time.sleep(
        5
    )  # longer than the daemon of forges_the_record waits, once its notebook is gone, to strike
    return out, {submission.name: submission for submission in graded}, escape


def start_ipython_once_grading_runs(out, home):
    """The instructor's first IPython session, in ``home``, once the first submission is being
    graded."""
    deadline = time.monotonic() + 300
    while not list((out / "work").glob("*/submission.ipynb")) and time.monotonic() < deadline:
        time.sleep(0.2)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("IPYTHON", "JUPYTER"))
    }
    subprocess.run(
        [sys.executable, "-m", "IPython", "-c", "pass"],
        env=dict(env, HOME=str(home)),
        capture_output=True,
        timeout=120,
        check=True,
    )


@pytest.fixture(scope="module")
def hostile_roofline(hostile_graded):
    return hostile_graded[0]


def test_the_roofline_solution_passes_beside_hostile_submissions(hostile_roofline):
    row = read_rows(hostile_roofline)["solution"]
    assert (row["lab"], row["status"], row["total"], row["max"]) == (
        ROOFLINE,
        "ok",
        MAX[ROOFLINE],
        MAX[ROOFLINE],
    ), row


@pytest.mark.parametrize("name", HOSTILE)
def test_each_hostile_submission_is_rejected_for_the_right_reason(hostile_roofline, name):
    rows = read_rows(hostile_roofline)
    lab = HOSTILE[name]
    feedback = (hostile_roofline / "feedback" / f"{name}.md").read_text()
    assert rows[name]["lab"] == lab and rows[name]["max"] == MAX[lab]
    assert int(rows[name]["total"]) < int(MAX[lab]), rows[name]
    assert expected_reason(lab, name) in feedback, feedback


def test_checks_that_never_reached_the_grader_score_zero(hostile_roofline):
    rows = read_rows(hostile_roofline)
    for name in ("rebinds_grade", "exits_under_the_grader"):
        assert rows[name]["total"] == "0", rows[name]


def test_a_made_up_lab_name_gets_no_columns_of_its_own(hostile_roofline):
    rows = read_rows(hostile_roofline)
    assert rows[MADE_UP_LAB]["lab"] == ROOFLINE  # its cells say which lab it is
    assert (
        rows[MADE_UP_LAB]["max"] == MAX[ROOFLINE]
        and rows[MADE_UP_LAB][f"{ROOFLINE}:copy_bandwidth"] == "0"
    )
    assert not any("99-three" in column for column in rows["solution"])


def test_a_forged_record_and_a_daemon_change_nothing(hostile_roofline):
    rows = read_rows(hostile_roofline)
    # printed PASS for every check, recorded as what the unfused answer earned: not full marks
    assert int(rows["forges_the_record"]["total"]) < int(MAX[LAB]), rows["forges_the_record"]
    if gradebook.device_class() != "gpu":
        assert rows["forges_the_record"][f"{LAB}:traffic"] == "0"
    assert (
        "left 1 process(es) running"
        in (hostile_roofline / "feedback" / "forges_the_record.md").read_text()
    )
    assert "left" not in (hostile_roofline / "feedback" / "solution.md").read_text()
    assert not (hostile_roofline / "daemon-was-here").exists()  # killed with its notebook
    assert processes_inside(hostile_roofline) == []
    assert rows["solution"]["total"] == MAX[ROOFLINE]


def test_a_kernel_that_exits_is_noticed_in_seconds_not_at_the_cell_timeout(hostile_graded):
    """exits_under_the_grader ends its kernel with os._exit(0) in an answer cell. nbval alone would
    wait for that cell's timeout; the gradebook watches the kernel and stops the notebook a few
    seconds after it died."""
    out, graded, _ = hostile_graded
    exited = graded["exits_under_the_grader"]
    assert exited.status == "crashed", (exited.status, exited.note)
    assert "kernel died" in exited.note
    # The whole notebook, kernel start and the cells before included (about 30 s on a loaded 2-core
    # machine), against one cell's allowance: unnoticed, the death would cost at least that
    # allowance.
    assert exited.seconds < HOSTILE_CELL_TIMEOUT_S / 3, exited.seconds
    assert "kernel died" in (out / "feedback" / "exits_under_the_grader.md").read_text()


def test_errors_other_than_failed_checks_reach_the_feedback(hostile_graded):
    """calls_ceilings imports a module the student's kernel does not have: a ModuleNotFoundError in
    its answer cell, reported under "Other errors", apart from the checks that then failed."""
    out, graded, _ = hostile_graded
    errors = graded["calls_ceilings"].cell_errors
    assert any(
        "ModuleNotFoundError: No module named 'brrr.ceilings'" in error for error in errors
    ), errors
    assert all(error.startswith("The cell that starts `") for error in errors), (
        errors
    )  # not nbval's "Cell 7"
    feedback = (out / "feedback" / "calls_ceilings.md").read_text()
    others = feedback[feedback.index("## Other errors in your notebook") :]
    assert "ModuleNotFoundError: No module named 'brrr.ceilings'" in others, feedback
    assert "## Other errors" not in (out / "feedback" / "solution.md").read_text()


def test_a_first_ipython_session_beside_grading_is_reported_and_charged_to_no_one(hostile_graded):
    out, graded, _ = hostile_graded
    home = out.parent / "home"
    readme = home / ".ipython" / "profile_default" / "startup" / "README"
    assert readme.exists()  # the session did write its start-up folder while grading ran...
    assert not [s.name for s in graded.values() if s.status in ("tampered", "not graded")], {
        s.name: s.status for s in graded.values()
    }  # ...and no submission was charged, none left ungraded
    report = (out / "stderr.txt").read_text()
    assert "read by no grading process" in report and str(readme) in report, report
    # Grading itself wrote nothing to the home folder: every process it started had private folders.
    assert [
        path for path in home.rglob("*") if ".ipython" not in path.relative_to(home).parts
    ] == []


# ---------------------------------------------------------------- the sandbox, from inside


def test_the_correct_answer_after_the_escape_attempts_earns_full_marks_in_the_sandbox(
    hostile_graded,
):
    out, graded, _ = hostile_graded
    row = read_rows(out)[ESCAPES]
    assert (row["status"], row["total"], row["sandbox"]) == ("ok", row["max"], "bwrap"), (
        row,
        graded[ESCAPES].note,
    )
    assert "without a sandbox" not in (out / "feedback" / f"{ESCAPES}.md").read_text()


def test_from_inside_the_sandbox_nothing_of_the_instructors_is_in_reach(hostile_graded):
    """The grader (its pid, from its own connection), a process of this machine, another grader's
    socket, this machine's loopback, the checkout, the submissions and the output folder: all out of
    reach."""
    out, _, escape = hostile_graded
    reached = escape["reached"]
    failed = {name: reached.get(name + ":error") for name in reached if not name.endswith(":error")}
    for attack in (
        "signal the grader",
        "signal the victim",
        "another grader's socket",
        "the instructor's loopback",
    ):
        assert reached[attack] is None, (attack, reached)
    assert (
        failed["signal the grader"] == "ProcessLookupError"
    )  # its connection names no pid it can see
    assert failed["signal the victim"] == "ProcessLookupError"  # not in its PID namespace
    assert escape["accepted"] == []  # nothing got through to the other socket or the loopback
    reads = [name for name in reached if name.startswith("read ") and not name.endswith(":error")]
    assert len(reads) == 3 and all(reached[name] is None for name in reads), reached
    assert all(failed[name] == "FileNotFoundError" for name in reads), failed
    # a write above its work folder lands in the sandbox's private /tmp or fails, never on this
    # machine's disk
    assert not (out / "work" / "planted").exists() and not (out.parent / "planted").exists()
    assert reached["network interfaces"] == ["lo"], reached
    assert len(reached["grader sockets"]) == 1, (
        reached
    )  # its own, though another submission's ran beside it
    assert reached["grader's folder"] == ["grader.sock"], (
        reached
    )  # and nothing else the grader keeps there
    commands = reached["processes"].values()
    assert str(escape["victim"]) not in reached["processes"] and len(commands) < 12, reached[
        "processes"
    ]
    assert not any("--socket" in command or "brrr.grading" in command for command in commands), (
        commands
    )
    assert reached["stopped"] == []
    # its resource limits (brrr.checks.reaper): a file of 512 MiB at most, no core dumps, the OOM
    # killer's first
    assert reached["limits"]["RLIMIT_FSIZE"] == [reaper.FILE_SIZE_MAX] * 2, reached["limits"]
    assert reached["limits"]["RLIMIT_CORE"] == [0, 0], reached["limits"]
    assert reached["oom_score_adj"] == reaper.OOM_SCORE_ADJ
    assert reached["write a file past the size limit"] is None, reached
    assert (
        reached["write a file past the size limit:error"] == "OSError"
    )  # EFBIG: Python ignores SIGXFSZ


@pytest.mark.parametrize("lab", sorted(labs.LABS))
def test_no_labs_grader_side_is_importable_in_the_students_process(hostile_graded, lab):
    """Each lab's checks.py (how it is graded, the answers it grades against) is the grader's:
    absent from the student's copy of brrr, though the lab's package (its given material)
    imports."""
    reached = hostile_graded[2]["reached"]
    package = labs.module(lab).__name__
    assert reached[f"import {package}.checks"] is None, reached
    assert reached[f"import {package}.checks:error"] == "ModuleNotFoundError"
    assert "/student/brrr/" in reached[f"import {package}"], (
        reached
    )  # the student's copy, not the checkout


def test_this_run_split_three_ways_and_merged_is_this_run_byte_for_byte(hostile_graded, tmp_path):
    """The run's rows and feedback, split as ``--shard K/3`` splits the folder (each shard's
    manifest and feedback files) and merged: its grades.csv, two labs' columns included, and
    feedback/, byte for byte."""
    out, graded, _ = hostile_graded
    submissions = list(graded.values())
    assert {shards.shard_of(s.name, 3) for s in submissions} == {1, 2, 3}
    folders = shard_outputs(submissions, out.parent / "submissions", out, 3, tmp_path / "shards")
    assert not merge.merge(folders, tmp_path / "final").holes
    assert (tmp_path / "final" / "grades.csv").read_bytes() == (out / "grades.csv").read_bytes()
    expected = {path.name: path.read_bytes() for path in (out / "feedback").iterdir()}
    assert {
        path.name: path.read_bytes() for path in (tmp_path / "final" / "feedback").iterdir()
    } == expected
