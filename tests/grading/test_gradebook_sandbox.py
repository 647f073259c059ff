"""Each submission runs in a bubblewrap sandbox (brrr.grading.sandbox): from inside a graded notebook, the
grader, the instructor's processes, another grader's socket, the instructor's files and the network are out
of reach, and the correct answer after the attacks still earns full marks. Without bwrap the gradebook
refuses to grade unless told --no-sandbox, and then says so in grades.csv and every feedback file."""

import json
import os
import socket
import subprocess
import sys
import threading

import nbformat
import pytest

from brrr import labs
from brrr.grading import assemble, gradebook, sandbox

from gradebook_helpers import LAB, read_rows, the_grading_environment
from lab_fixtures import ROOT, submission_notebook

pytestmark = pytest.mark.device_independent  # the sandbox around the student's process: the GPU check leaves it

ATTACKS = "escapes_the_sandbox"


@pytest.fixture(scope="module")
def escaped(tmp_path_factory):
    """The attacks' notebook graded once, in a sandbox, with targets of the instructor's to reach for:
    (out, its submission, what it reached, the victim's pid, connections the targets accepted). (The gradebook,
    a child subreaper, kills the victim when it reaps: it is a child of this process that it did not start.)"""
    tmp = tmp_path_factory.mktemp("sandbox")
    other = tmp_path_factory.mktemp("brrr-grader-other")  # another submission's grader, as far as it knows
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(other / "grader.sock"))
    listener.listen(1)
    network = socket.create_server(("127.0.0.1", 0))
    accepted = []
    for server in (listener, network):
        threading.Thread(target=_accept, args=(server, accepted), daemon=True).start()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    submissions = tmp / "submissions"
    submissions.mkdir()
    notebook = submission_notebook(LAB, ATTACKS)
    cell = next(c for c in notebook.cells if c.get("id") == "fused-chain")
    targets = {
        "victim": victim.pid,
        "port": network.getsockname()[1],
        "socket": str(other / "grader.sock"),
        "files": [
            str(ROOT / "brrr" / "labs" / "fuse_it" / "checks.py"),  # the instructor's checkout
            str(submissions / f"{ATTACKS}.ipynb"),  # the submissions folder
            str(tmp / "out" / "grading-code.json"),  # the gradebook's output folder
        ],
        "labs": {lab: labs.module(lab).__name__ for lab in labs.LABS},
    }
    cell.source = f"TARGETS = {targets!r}\n" + cell.source
    nbformat.write(notebook, str(submissions / f"{ATTACKS}.ipynb"))
    out = tmp / "out"
    try:
        with the_grading_environment(tmp_path_factory):
            (graded,) = gradebook.grade(submissions, out, cell_timeout_s=300, notebook_timeout_s=600, lab=LAB)
    finally:
        victim.kill()
        victim.wait()
        listener.close()
        network.close()
    reached = json.loads((out / "work" / ATTACKS / "attacks.json").read_text())
    return out, graded, reached, victim.pid, accepted


def _accept(server: socket.socket, accepted: list) -> None:
    try:
        accepted.append(server.accept())
    except OSError:  # closed when grading ended
        pass


def test_the_correct_answer_after_the_attacks_earns_full_marks_in_the_sandbox(escaped):
    out, graded, _, _, _ = escaped
    row = read_rows(out)[ATTACKS]
    assert (row["status"], row["total"], row["sandbox"]) == ("ok", row["max"], "bwrap"), (row, graded.note)
    assert "without a sandbox" not in (out / "feedback" / f"{ATTACKS}.md").read_text()


def test_from_inside_the_sandbox_nothing_of_the_instructors_is_in_reach(escaped):
    out, _, reached, victim, accepted = escaped
    failed = {name: reached.get(name + ":error") for name in reached if not name.endswith(":error")}
    for attack in ("signal the grader", "signal the victim", "another grader's socket", "the instructor's loopback"):
        assert reached[attack] is None, (attack, reached)
    assert failed["signal the grader"] == "ProcessLookupError"  # its connection names no pid it can see
    assert failed["signal the victim"] == "ProcessLookupError"  # not in its PID namespace
    assert accepted == []  # nothing got through to the other socket or the loopback
    reads = [name for name in reached if name.startswith("read ") and not name.endswith(":error")]
    assert len(reads) == 3 and all(reached[name] is None for name in reads), reached
    assert all(failed[name] == "FileNotFoundError" for name in reads), failed
    # a write above its work folder lands in the sandbox's private /tmp or fails, never on this machine's disk
    assert not (out / "work" / "planted").exists() and not (out.parent / "planted").exists()
    assert reached["network interfaces"] == ["lo"], reached
    assert len(reached["grader sockets"]) == 1, reached  # its own
    commands = reached["processes"].values()
    assert str(victim) not in reached["processes"] and len(commands) < 12, reached["processes"]
    assert not any("--socket" in command or "brrr.grading" in command for command in commands), commands
    assert reached["stopped"] == []


@pytest.mark.parametrize("lab", sorted(labs.LABS))
def test_no_labs_grader_side_is_importable_in_the_students_process(escaped, lab):
    """Each lab's checks.py (how it is graded, the answers it grades against) is the grader's: absent from the
    student's copy of brrr, though the lab's package (its given material) imports."""
    reached = escaped[2]
    package = labs.module(lab).__name__
    assert reached[f"import {package}.checks"] is None, reached
    assert reached[f"import {package}.checks:error"] == "ModuleNotFoundError"
    assert "/student/brrr/" in reached[f"import {package}"], reached  # the student's copy, not the checkout


def test_the_students_copy_of_brrr_holds_no_labs_checks(tmp_path):
    copy = assemble.Snapshot().write_package(tmp_path / "student")
    assert sorted(p.parent.name for p in copy.glob("brrr/labs/*/given.py")) == sorted(
        labs.module(lab).__name__.rsplit(".", 1)[1] for lab in labs.LABS
    )
    assert list(copy.glob("brrr/labs/*/checks.py")) == []
    assemble.make_writable(tmp_path)


def test_without_bwrap_the_gradebook_refuses_and_names_the_package(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(sandbox.BWRAP_VARIABLE, str(tmp_path / "no-bwrap-here"))
    (tmp_path / "submissions").mkdir()
    (tmp_path / "submissions" / "broken.ipynb").write_text("{ not a notebook")
    assert sandbox.problem() is not None
    assert gradebook.main([str(tmp_path / "submissions"), "--out", str(tmp_path / "out"), "--lab", LAB]) == 4
    said = capsys.readouterr().err
    assert "bubblewrap" in said and "--no-sandbox" in said and "No submission was graded" in said, said
    assert not (tmp_path / "out" / "grades.csv").exists()
    with pytest.raises(sandbox.Unavailable, match="bubblewrap"):
        gradebook.grade(tmp_path / "submissions", tmp_path / "out", lab=LAB)


def test_with_no_sandbox_every_feedback_file_and_grades_csv_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox.BWRAP_VARIABLE, str(tmp_path / "no-bwrap-here"))
    (tmp_path / "submissions").mkdir()
    (tmp_path / "submissions" / "broken.ipynb").write_text("{ not a notebook")
    gradebook.grade(tmp_path / "submissions", tmp_path / "out", lab=LAB, sandboxed=False)
    assert read_rows(tmp_path / "out")["broken"]["sandbox"] == "none"
    assert "Graded without a sandbox" in (tmp_path / "out" / "feedback" / "broken.md").read_text()


def test_the_sandbox_shows_the_environment_but_not_the_checkout_or_an_installed_brrr(tmp_path):
    """Where brrr is installed in site-packages (a wheel) or the checkout sits inside a folder the sandbox
    shows, an empty folder stands in their place."""
    site = tmp_path / "env" / "site-packages"
    (site / "brrr" / "labs").mkdir(parents=True)
    (site / "torch").mkdir()
    checkout = tmp_path / "env" / "course"
    (checkout / "tests").mkdir(parents=True)
    layout = sandbox.layout(checkout, [str(site), str(checkout), str(checkout / "tests"), str(tmp_path / "env")])
    assert tmp_path / "env" in layout.readable and checkout / "tests" not in layout.readable
    assert set(layout.hidden) == {site / "brrr", checkout}
    argv = sandbox.command(["true"], writable=tmp_path / "work", within=layout, bwrap="bwrap")
    text = " ".join(argv)
    for namespace in ("--unshare-pid", "--unshare-ipc", "--unshare-net", "--cap-drop ALL", "--die-with-parent"):
        assert namespace in text
    assert f"--tmpfs {site / 'brrr'} --remount-ro {site / 'brrr'}" in text
    if os.path.exists("/etc/shadow"):  # root's uid in the sandbox (a gradebook run as root) still owns it
        assert "--ro-bind /dev/null /etc/shadow" in text
    # the folder it writes is bound after the folders it reads and the ones masked, so no mask covers it
    assert text.index(f"--bind {tmp_path / 'work'}") > text.index(f"--tmpfs {checkout}")


def test_the_probe_finds_a_sandbox_here_where_bwrap_runs():
    if sandbox.executable() is None:
        pytest.skip("no bwrap on this machine: the refusal test covers it")
    assert sandbox.problem() is None
    assert os.environ.get(sandbox.BWRAP_VARIABLE) is None
