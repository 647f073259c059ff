"""Each submission runs in a bubblewrap sandbox (brrr.grading.sandbox). What it shows and hides,
and, without bwrap, a gradebook that refuses to grade unless told --no-sandbox, and then says so in
grades.csv and every feedback file. (What a notebook reaches from inside the sandbox is tested in
the hostile run, tests/grading/test_gradebook_hostile.py, which grades the notebook that tries.)"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from brrr import labs
from brrr.checks import processes
from brrr.grading import assemble, gradebook, sandbox

from gradebook_helpers import LAB, ROOFLINE, read_rows, the_grading_environment

pytestmark = (
    pytest.mark.device_independent
)  # the sandbox around the student's process: the GPU check leaves it


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
    assert (
        gradebook.main(
            [str(tmp_path / "submissions"), "--out", str(tmp_path / "out"), "--lab", LAB]
        )
        == 4
    )
    said = capsys.readouterr().err
    assert "bubblewrap" in said and "--no-sandbox" in said and "No submission was graded" in said, (
        said
    )
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
    """Where brrr is installed in site-packages (a wheel) or the checkout sits inside a folder the
    sandbox shows, an empty folder stands in their place."""
    site = tmp_path / "env" / "site-packages"
    (site / "brrr" / "labs").mkdir(parents=True)
    (site / "torch").mkdir()
    checkout = tmp_path / "env" / "course"
    (checkout / "tests").mkdir(parents=True)
    layout = sandbox.layout(checkout, [site, tmp_path / "env"])
    assert layout.readable == (tmp_path / "env",)
    assert set(layout.hidden) == {site / "brrr", checkout}
    argv = sandbox.command(["true"], writable=tmp_path / "work", within=layout, bwrap="bwrap")
    text = " ".join(argv)
    for namespace in (
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
        "--cap-drop ALL",
        "--die-with-parent",
    ):
        assert namespace in text
    assert f"--tmpfs {site / 'brrr'} --remount-ro {site / 'brrr'}" in text
    if os.path.exists(
        "/etc/shadow"
    ):  # root's uid in the sandbox (a gradebook run as root) still owns it
        assert "--ro-bind /dev/null /etc/shadow" in text
    # the folder it writes is bound after the folders it reads and the ones masked, so no mask
    # covers it
    assert text.index(f"--bind {tmp_path / 'work'}") > text.index(f"--tmpfs {checkout}")


def test_the_probe_finds_a_sandbox_here_where_bwrap_runs():
    if sandbox.executable() is None:
        pytest.skip("no bwrap on this machine: the refusal test covers it")
    assert sandbox.problem() is None
    assert os.environ.get(sandbox.BWRAP_VARIABLE) is None


def test_what_other_users_cannot_read_is_masked_for_a_gradebook_run_as_root(tmp_path):
    """A gradebook run as root (a Gradescope autograder, a Slurm node) leaves its sandbox root's
    uid, which owns what root owns: on this machine it read /etc/munge/munge.key (a Slurm cluster's
    shared key) from a notebook, and a message can carry it into the student's feedback. Every file
    and folder under the scanned folders that others cannot read is masked; what others can read
    stays."""
    import subprocess
    import sys

    etc = tmp_path / "etc"
    (etc / "munge").mkdir(parents=True)
    (etc / "munge" / "munge.key").write_text("cluster key")
    (etc / "munge").chmod(0o700)
    (etc / "db.conf").write_text("password")
    (etc / "db.conf").chmod(0o600)
    (etc / "hosts").write_text("127.0.0.1 localhost")
    (etc / "hosts").chmod(0o644)
    (etc / "link").symlink_to(etc / "db.conf")
    assert sandbox.unreadable_to_others([str(etc)]) == [etc / "db.conf", etc / "munge"]

    if sandbox.executable() is None:
        pytest.skip("no bwrap on this machine: the refusal test covers it")
    within = sandbox.layout(None)
    unreadable = sandbox.unreadable_to_others([str(etc)]) if os.geteuid() == 0 else []
    within = sandbox.Layout(
        (*within.readable, etc), within.hidden, (*within.unreadable, *unreadable)
    )
    (tmp_path / "work").mkdir()
    reads = (
        "import os\n"
        "def read(path):\n"
        "    try:\n"
        "        return open(path).read()\n"
        "    except OSError as error:\n"
        "        return type(error).__name__\n"
        f"print([read({str(etc / 'munge' / 'munge.key')!r}), read({str(etc / 'db.conf')!r}), "
        f"read({str(etc / 'hosts')!r})])"
    )
    argv = sandbox.command(
        [sys.executable, "-S", "-c", reads], writable=tmp_path / "work", within=within
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    munge, db, hosts = eval(done.stdout)  # noqa: S307 - our own script's printed list
    assert munge in ("FileNotFoundError", "PermissionError") and db in ("", "PermissionError"), (
        done.stdout
    )
    assert hosts == "127.0.0.1 localhost"


def test_the_private_tmp_is_capped_where_bwrap_can(tmp_path, monkeypatch):
    """A tmpfs is memory charged to no process: a notebook that filled /tmp would make the
    out-of-memory killer take the largest processes (a grader among them). Where bwrap has --size,
    /tmp holds at most sandbox.TMP_BYTES (8 MiB here, for the test's speed): a larger write fails, a
    smaller one works."""
    import subprocess
    import sys

    if sandbox.executable() is None:
        pytest.skip("no bwrap on this machine: the refusal test covers it")
    assert sandbox.TMP_BYTES == 1 << 30
    said = subprocess.run(
        [sandbox.executable(), "--version"], capture_output=True, text=True
    ).stdout.split()
    version = tuple(int(part) for part in said[-1].split(".")[:2]) if said else (0, 0)
    assert sandbox.sizes_tmpfs(sandbox.executable()) == (version >= (0, 8)), (
        said
    )  # --size came in 0.8
    if not sandbox.sizes_tmpfs(sandbox.executable()):
        assert "--size" not in sandbox.command(
            ["true"], writable=tmp_path, within=sandbox.layout(None)
        )
        pytest.skip(
            "this bwrap has no --size (before 0.8): /tmp is uncapped, as the grading page says"
        )
    monkeypatch.setattr(sandbox, "TMP_BYTES", 8 << 20)
    script = (
        "import errno\n"
        "open('/tmp/small', 'wb').write(bytes(4 << 20))\n"
        "try:\n"
        "    open('/tmp/large', 'wb').write(bytes(8 << 20))\n"
        "    print('written')\n"
        "except OSError as error:\n"
        "    print(errno.errorcode[error.errno])\n"
    )
    argv = sandbox.command(
        [sys.executable, "-S", "-c", script], writable=tmp_path, within=sandbox.layout(None)
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "ENOSPC"), done.stdout + done.stderr


# ---------------------------------------------------------------- the course, the instructor's env


def test_the_sandbox_shows_what_runs_python_never_the_folders_on_sys_path(tmp_path, monkeypatch):
    """``python -m brrr.grading`` puts its working folder first on ``sys.path``: run from a course
    folder, the sandbox showed the course (every submission, every earlier output). What it shows is
    an allow-list, the interpreter's folders, wherever the gradebook starts and whatever its path
    holds."""
    course = tmp_path / "course"
    (course / "submissions").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(course))
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere-on-the-path"))
    (tmp_path / "elsewhere-on-the-path").mkdir()
    monkeypatch.chdir(course)
    layout = sandbox.layout(assemble.CHECKOUT)
    shown = set(layout.readable)
    assert not any(folder == course or course in folder.parents for folder in shown), shown
    assert tmp_path / "elsewhere-on-the-path" not in shown
    assert set(sandbox.interpreter_folders()) >= shown  # less the folders inside others
    assert {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()} & shown


def test_the_students_environment_holds_no_variable_of_the_instructors(tmp_path, monkeypatch):
    """The gradebook copied its whole environment (tokens included) into the sandbox, and a cell's
    error carried it into the feedback. What the sandbox gets is an allow-list: every setting the
    gradebook makes for a grading process, and none of the instructor's."""
    monkeypatch.setenv("BRRR_TEST_SECRET", "the instructor's token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the instructor's key")
    made = gradebook.private_environment(tmp_path / "private", base={})  # what grading sets
    made.update(BRRR_GRADER="/tmp/grader.sock", HOME=str(tmp_path))
    kept = sandbox.environment({**os.environ, **made})
    assert "BRRR_TEST_SECRET" not in kept and "AWS_SECRET_ACCESS_KEY" not in kept, kept
    assert {name: kept.get(name) for name in made} == made
    assert kept["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)


def _course(root: Path) -> dict[str, Path]:
    """A course folder as an instructor keeps one: a classmate's notebook, an earlier run's
    grades.csv, feedback and the student copy of brrr it wrote (which holds a module Lab 1 hides),
    readable by every user, so that only the sandbox stands between a notebook and them."""
    files = {
        "a classmate's notebook": root / "submissions-01" / "alice.ipynb",
        "grades.csv": root / "grades" / "grades.csv",
        "feedback": root / "grades" / "feedback" / "alice.md",
        "a hidden module": root / "grades" / "work" / "alice" / "student" / "brrr" / "ceilings.py",
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("alice's work")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return files


READS = """
import json, os, sys
def read(path):
    try:
        return len(open(path, "rb").read())
    except OSError as error:
        return type(error).__name__
secret = os.environ.get("BRRR_TEST_SECRET")
print(json.dumps({"files": [read(p) for p in sys.argv[1:]], "secret": secret}))
"""


def _as(user: str) -> list[str]:
    """The command prefix that runs as ``user`` (a gradebook run as root dropping to ``nobody``)."""
    if user == "this user":
        return []
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("not root, or no setpriv: no other user to run as")
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@pytest.mark.parametrize("user", ["this user", "nobody"])
def test_the_course_folder_is_out_of_the_sandboxs_sight(user, monkeypatch):
    """A process in the sandbox, started from the course folder with the course first on the path,
    reads none of it, though its user can read every file outside; nor does the instructor's
    variable reach it. As the gradebook's user and, where this test runs as root, as ``nobody``."""
    if sandbox.executable() is None:
        pytest.skip("no bwrap on this machine: the refusal test covers it")
    prefix = _as(user)
    root = Path(tempfile.mkdtemp(prefix="brrr-course-"))  # not pytest's: that is root's alone
    try:
        root.chmod(0o755)
        files = [str(path) for path in _course(root / "course").values()]
        work = root / "course" / "new-grades" / "work" / "snoop"
        work.mkdir(parents=True)
        python, folders = sys.executable, None
        if prefix:
            shutil.chown(work, "nobody", "nogroup")
            probe = sandbox.command(
                [python, "-S", "-c", "pass"], writable=work, within=sandbox.layout(None)
            )
            if subprocess.run([*prefix, *probe], capture_output=True).returncode != 0:
                python, folders = "/usr/bin/python3", []  # this environment is root's: the system's
        env = {**os.environ, "BRRR_TEST_SECRET": "the instructor's token"}
        outside = subprocess.run(
            [*prefix, python, "-S", "-c", READS, *files], capture_output=True, text=True, env=env
        )
        assert json.loads(outside.stdout)["files"] == [len("alice's work")] * len(files)
        monkeypatch.syspath_prepend(str(root / "course"))  # as ``python -m`` run from there
        within = sandbox.layout(assemble.CHECKOUT, folders)
        argv = sandbox.command([python, "-S", "-c", READS, *files], writable=work, within=within)
        done = subprocess.run(
            [*prefix, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env=sandbox.environment(env),
            cwd=root / "course",
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {
            "files": ["FileNotFoundError"] * len(files),
            "secret": None,
        }
    finally:
        shutil.rmtree(root)


def test_a_notebook_graded_from_the_course_folder_reads_nothing_of_it(tmp_path_factory):
    """The instructor's way: ``python -m brrr.grading submissions --out new-grades`` run from the
    course folder, which holds a classmate's notebook and an earlier run's output, with a secret in
    the environment. The notebook (reads_the_course) looks for them and then fails with the
    environment it was given in its error, which the feedback quotes: none of it is there."""
    from lab_fixtures import submission_notebook

    course = tmp_path_factory.mktemp("course")
    files = _course(course)
    (course / "submissions").mkdir()
    notebook = submission_notebook(LAB, "reads_the_course")
    cell = next(c for c in notebook.cells if c.get("id") == "fused-chain")
    targets = {"files": [str(path) for path in files.values()], "variable": "BRRR_TEST_SECRET"}
    cell.source = f"TARGETS = {targets!r}\n" + cell.source
    nbformat.write(notebook, str(course / "submissions" / "snoop.ipynb"))
    secret = "the instructor's token 4f1c"
    with the_grading_environment(tmp_path_factory):
        done = subprocess.run(
            [sys.executable, "-m", "brrr.grading", "submissions", "--out", "new-grades"],
            cwd=course,
            env={**os.environ, "BRRR_TEST_SECRET": secret},
            capture_output=True,
            text=True,
            timeout=600,
        )
    out = course / "new-grades"
    assert (out / "grades.csv").exists(), done.stdout + done.stderr
    assert read_rows(out)["snoop"]["sandbox"] == "bwrap"  # its status: failed, in a quiet checkout
    reached = json.loads((out / "work" / "snoop" / "reached.json").read_text())
    assert reached["variable"] is None, reached
    assert {reached[str(path)] for path in files.values()} == {"FileNotFoundError"}, reached
    feedback = (out / "feedback" / "snoop.md").read_text()
    assert "the environment I was given" in feedback, feedback  # its error did reach the feedback
    for written in (feedback, (out / "grades.csv").read_text(), done.stdout + done.stderr):
        assert secret not in written


def test_a_grader_the_gradebook_started_watches_the_process_it_names_not_its_peer(tmp_path):
    """The gradebook names the sandbox's first process on the grader's input (server.tell_student);
    a timed check watches that, not whoever connected. Here the connection is this test's, alive,
    and the named process has ended (a zombie): Lab 1's copy_bandwidth check says so before timing
    anything. A grader that went by its peer would time this test's process instead."""
    from brrr.grading import server
    from brrr.grading.wire import Channel

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    while processes.alive(ended.pid):  # a zombie until waited for
        time.sleep(0.05)
    grader = gradebook.Grader(assemble.Snapshot(), ROOFLINE)
    try:
        assert grader.ready, grader.error_text()
        server.tell_student(grader.process.stdin, ended.pid)
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(str(grader.socket))
        channel = Channel(connection)
        channel.send({"op": "check", "check": "copy_bandwidth", "function": "copy_bandwidth"})
        while (message := channel.receive(120))["op"] != "verdict":
            channel.send({"op": "error", "kind": "not-written", "message": "NotImplementedError"})
        channel.close()
    finally:
        grader.remove()
        ended.wait()
    assert not message["passed"], message
    assert f"your notebook's sandbox (pid {ended.pid}) has ended" in message["message"], message
