"""Nothing graded is lost, and nothing is graded that would be: the gradebook writes each row as it
is graded, stops cleanly on Ctrl-C, resumes (or refuses) a used output folder, names work folders
safely, and refuses a bad path before any notebook runs.

Most runs here grade notebooks that are not notebooks ("unreadable": no kernel starts), so they cost
the gradebook's start and nothing more; the interrupted run and the hung check start real kernels.
"""

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import nbformat
import pytest

from brrr.grading import gradebook, report
from brrr.grading.submissions import folder_names
from gradebook_helpers import LAB, processes_inside, read_rows
from lab_fixtures import submission_notebook, write_submission

pytestmark = pytest.mark.usefixtures("grades_in_the_environment")

UNREADABLE = "{ not a notebook"


def unreadable(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(UNREADABLE)
    return folder


def test_folder_names_are_safe_and_unique_and_plain_where_they_can_be():
    names = [
        "alice",
        "carol/02-fuse-it",
        "..",
        ".",
        ".hidden",
        "a b",
        "a__b",
        "Bob",
        "bob",
        "x" * 300,
    ]
    chosen = folder_names(names)
    assert chosen["alice"] == "alice" and chosen["carol/02-fuse-it"] == "carol__02-fuse-it"
    assert len(set(chosen.values())) == len(names)  # no two share a folder
    assert len({value.lower() for value in chosen.values()}) == len(
        names
    )  # not on a case-blind disk
    for name, value in chosen.items():
        assert value.strip(".") and not value.startswith(".") and "/" not in value, (name, value)
        assert len(value) < 100, name
    assert folder_names(["..", "alice"]) == {
        "..": chosen[".."],
        "alice": "alice",
    }  # the same anywhere


def test_a_submission_named_dots_grades_beside_its_neighbour_without_deleting_the_output(tmp_path):
    """``...ipynb`` is the submission ``..``: its work folder was the output folder, which the
    gradebook deleted before running it (under --jobs 2 its neighbour's files went with it)."""
    submissions = unreadable(tmp_path / "submissions", "...ipynb", "alice.ipynb")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("the instructor's")
    graded = gradebook.grade(submissions, out, lab=LAB, jobs=2, sandboxed=False)
    assert [(s.name, s.status) for s in graded] == [("..", "unreadable"), ("alice", "unreadable")]
    rows = read_rows(out)
    assert set(rows) == {"..", "alice"} and rows["alice"]["status"] == "unreadable"
    assert (out / "notes.txt").read_text() == "the instructor's"
    dots = next(s for s in graded if s.name == "..").slug
    assert (out / "work" / dots / "original.ipynb").read_text() == UNREADABLE
    assert (out / "work" / "alice" / "original.ipynb").read_text() == UNREADABLE
    assert {p.name for p in (out / "feedback").iterdir()} == {f"{dots}.md", "alice.md"}


def test_a_rerun_into_a_used_out_grades_only_what_it_lacks(tmp_path):
    submissions = unreadable(tmp_path / "submissions", "alice.ipynb")
    out = tmp_path / "out"
    gradebook.grade(submissions, out, lab=LAB, sandboxed=False)
    kept = (out / "work" / "alice" / "original.ipynb").stat()
    unreadable(submissions, "bob.ipynb")
    graded = gradebook.grade(submissions, out, lab=LAB, sandboxed=False)
    assert [s.name for s in graded] == ["alice", "bob"]
    assert set(read_rows(out)) == {"alice", "bob"}
    again = (out / "work" / "alice" / "original.ipynb").stat()
    assert (again.st_ino, again.st_mtime_ns) == (kept.st_ino, kept.st_mtime_ns)  # not graded again
    assert (out / "work" / "bob" / "original.ipynb").exists()
    (submissions / "alice.ipynb").write_text(UNREADABLE + " again")  # resubmitted: graded again
    gradebook.grade(submissions, out, lab=LAB, sandboxed=False)
    assert (out / "work" / "alice" / "original.ipynb").read_text() == UNREADABLE + " again"


def test_a_used_out_graded_with_other_options_is_refused_and_left_whole(tmp_path):
    submissions = unreadable(tmp_path / "submissions", "alice.ipynb")
    out = tmp_path / "out"
    gradebook.grade(submissions, out, lab=LAB, sandboxed=False, cell_timeout_s=60)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(gradebook.preflight.Refused, match="fresh --out"):
        gradebook.grade(submissions, out, lab=LAB, sandboxed=False, cell_timeout_s=99)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    (out / report.JOURNAL).unlink()  # grades with no journal (an older gradebook's, or by hand)
    with pytest.raises(gradebook.preflight.Refused, match="no journal"):
        gradebook.grade(submissions, out, lab=LAB, sandboxed=False, cell_timeout_s=60)
    assert read_rows(out)["alice"]["status"] == "unreadable"


def test_bad_paths_are_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(gradebook, "grader_setup_problem", lambda: started.append(1))
    empty = tmp_path / "empty"
    empty.mkdir()
    submissions = unreadable(tmp_path / "submissions", "alice.ipynb")
    (tmp_path / "a-file").write_text("")
    cases = [
        ([str(empty), "--out", str(tmp_path / "out")], "holds no notebook"),
        ([str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")], "is not a folder"),
        ([str(submissions), "--out", str(submissions / "out")], "inside the submissions folder"),
        ([str(submissions), "--out", str(tmp_path / "a-file")], "cannot be written"),
        ([str(submissions), "--out", str(tmp_path / "out"), "--jobs", "0"], "--jobs 0"),
    ]
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "locked").mkdir(mode=0o500)
        cases.append(([str(submissions), "--out", str(tmp_path / "locked")], "cannot be written"))
    for argv, said in cases:
        with pytest.raises(SystemExit) as stopped:
            gradebook.main(argv)
        assert stopped.value.code == 2 and said in capsys.readouterr().err, argv
    assert started == []  # refused before the grader's set-up was even checked
    assert not (submissions / "out").exists() and not (tmp_path / "out" / "work").exists()


SIGNALLED = """
import sys
from brrr.grading.gradebook import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.e2e
def test_sigint_mid_run_stops_cleanly_and_keeps_the_rows_graded(tmp_path):
    """Ctrl-C while a notebook runs: the rows graded before it stay in grades.csv, the running
    notebook is stopped (no row: it was not graded), and nothing is left running."""
    submissions = unreadable(tmp_path / "submissions", "a_broken.ipynb")
    write_submission(submissions, LAB, "hanging", as_name="b_hanging")
    out = tmp_path / "out"
    argv = [str(submissions), "--out", str(out), "--lab", LAB, "--cell-timeout", "600"]
    process = subprocess.Popen(
        [sys.executable, "-c", SIGNALLED, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    running = out / "work" / "b_hanging" / "output.txt"  # its notebook's run has started
    deadline = time.monotonic() + 600
    while not running.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert process.poll() is None, process.communicate()
        assert set(read_rows(out)) == {"a_broken"}  # written as soon as it was graded
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:  # a second one stops it at once, whatever it is doing
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=60)
    assert process.returncode == 130, stdout + stderr
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr
    rows = read_rows(out)
    assert set(rows) == {"a_broken"} and rows["a_broken"]["status"] == "unreadable"
    assert (out / "feedback" / "a_broken.md").exists()
    assert not (out / "feedback" / "b_hanging.md").exists()
    journal = [json.loads(line) for line in (out / report.JOURNAL).read_text().splitlines()]
    assert [row.get("name") for row in journal[1:]] == ["a_broken"]
    assert processes_inside(out) == []


def hangs_when_the_grader_calls(folder: Path) -> None:
    """The correct answer, whose function never returns once the grader calls it (its first call, in
    the notebook's own "try" cell, returns)."""
    notebook = submission_notebook(LAB, "correct")
    cell = next(c for c in notebook.cells if c.get("id") == "fused-chain")
    cell.source += (
        "\n\n_fused_chain, _calls = fused_chain, []\n\n\n"
        "def fused_chain(x, y, out):\n"
        "    _calls.append(1)\n"
        "    while len(_calls) > 1:  # the grader's calls never end\n"
        "        time.sleep(0.1)\n"
        "    return _fused_chain(x, y, out)\n"
    )
    nbformat.write(notebook, str(folder / "hangs.ipynb"))


@pytest.mark.e2e
def test_a_hung_check_costs_one_cell_timeout_and_says_it_timed_out(tmp_path):
    """nbval runs on after a cell times out, so each later grader cell calling the hung function
    timed out too (one cell timeout per check), and the feedback said those checks "did not run"."""
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    hangs_when_the_grader_calls(submissions)
    out = tmp_path / "out"
    (graded,) = gradebook.grade(
        submissions, out, lab=LAB, cell_timeout_s=40, notebook_timeout_s=900
    )
    cases = list(ElementTree.parse(out / "work" / "hangs" / "junit.xml").iter("testcase"))
    timed_out = [case for case in cases if "Timeout of 40" in ElementTree.tostring(case, "unicode")]
    assert timed_out == cases[-1:], [case.get("name") for case in cases]  # nothing ran after it
    text = (out / "feedback" / "hangs.md").read_text()
    checks = gradebook.lab_checks(LAB)
    first = checks[0]
    assert graded.timed_out == [first], (graded.timed_out, graded.results)
    assert "40 s allowed per cell" in text and "grading stopped there" in text, text
    assert f"| {first} | **timed out** (0) |" in text and f"## {first}: timed out" in text, text
    for check in checks[1:]:
        assert f"| {check} | **not run** (0) |" in text, text


def test_the_student_kernel_starts_without_the_tcp_warning(tmp_path):
    """ipykernel warned, at every kernel's start, that its sockets were TCP without encryption: a
    line in every run's output and the gradebook's own (its kernel check) no one could act on."""
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    from brrr.grading import assemble, environment

    student = assemble.Snapshot().write_package(tmp_path / "student")
    kernels = environment.kernelspec(tmp_path, student) / "kernels"
    manager = KernelManager(
        kernel_name=environment.KERNEL_NAME,
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]),
        connection_file=str(tmp_path / "connection.json"),
    )
    with (tmp_path / "stderr.txt").open("w") as sink:
        manager.start_kernel(env=environment.private_environment(tmp_path / "private"), stderr=sink)
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=120)
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    said = (tmp_path / "stderr.txt").read_text()
    assert "without encryption" not in said, said
    assemble.make_writable(tmp_path)


def test_what_a_run_left_is_read_with_a_cap(tmp_path):
    """A notebook that prints (or raises with) 200 MiB: the gradebook read it all into memory."""
    from brrr.grading import collect

    output = tmp_path / "output.txt"
    with output.open("wb") as handle:
        handle.write(b"first line\n" + b"x" * (8 * collect.READ_CAP) + b"\nbrrr-reaper: killed 0")
    text = collect.read_capped(output)
    assert len(text) < 3 * collect.READ_CAP and text.startswith("first line")
    assert text.endswith("brrr-reaper: killed 0") and "left out by the gradebook" in text
    junit = tmp_path / "junit.xml"
    with junit.open("wb") as handle:
        handle.write(b'<testsuite><testcase name="Cell 1"><error message="')
        handle.write(b"y" * (collect.JUNIT_CAP + 1) + b'"/></testcase></testsuite>')
    assert collect.read_junit(junit) == ["report: nbval's report (16 MiB) was too large to read"]


def test_accepted_new_grading_code_grades_a_used_out_again_whole(tmp_path):
    header = {"format": report.FORMAT, "code": "old", "options": {"lab": LAB}}
    row = {"name": "alice", "status": "ok"}
    (tmp_path / report.JOURNAL).write_text(json.dumps(header) + "\n" + json.dumps(row) + "\n")
    now = dict(header, code="new")
    with pytest.raises(ValueError, match="other code"):
        report.read_journal(tmp_path, now)
    assert report.read_journal(tmp_path, now, new_code=True) == {}  # every row graded again
    assert report.read_journal(tmp_path, header) == {"alice": row}
    with pytest.raises(ValueError, match="other code, options"):
        report.read_journal(tmp_path, dict(now, options={"lab": "01-roofline"}), new_code=True)
