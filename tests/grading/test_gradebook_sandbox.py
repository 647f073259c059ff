"""Each submission runs in a bubblewrap sandbox (brrr.grading.sandbox). What it shows and hides, and, without
bwrap, a gradebook that refuses to grade unless told --no-sandbox, and then says so in grades.csv and every
feedback file. (What a notebook reaches from inside the sandbox is tested in the hostile run,
tests/grading/test_gradebook_hostile.py, which grades the notebook that tries.)"""

import os

import pytest

from brrr import labs
from brrr.grading import assemble, gradebook, sandbox

from gradebook_helpers import LAB, read_rows

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
    """Where brrr is installed in site-packages (a wheel) or the checkout sits inside a folder the sandbox
    shows, an empty folder stands in their place."""
    site = tmp_path / "env" / "site-packages"
    (site / "brrr" / "labs").mkdir(parents=True)
    (site / "torch").mkdir()
    checkout = tmp_path / "env" / "course"
    (checkout / "tests").mkdir(parents=True)
    layout = sandbox.layout(
        checkout, [str(site), str(checkout), str(checkout / "tests"), str(tmp_path / "env")]
    )
    assert tmp_path / "env" in layout.readable and checkout / "tests" not in layout.readable
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
    # the folder it writes is bound after the folders it reads and the ones masked, so no mask covers it
    assert text.index(f"--bind {tmp_path / 'work'}") > text.index(f"--tmpfs {checkout}")


def test_the_probe_finds_a_sandbox_here_where_bwrap_runs():
    if sandbox.executable() is None:
        pytest.skip("no bwrap on this machine: the refusal test covers it")
    assert sandbox.problem() is None
    assert os.environ.get(sandbox.BWRAP_VARIABLE) is None


def test_what_other_users_cannot_read_is_masked_for_a_gradebook_run_as_root(tmp_path):
    """A gradebook run as root (a Gradescope autograder, a Slurm node) leaves its sandbox root's uid, which
    owns what root owns: on this machine it read /etc/munge/munge.key (a Slurm cluster's shared key) from a
    notebook, and a message can carry it into the student's feedback. Every file and folder under the
    scanned folders that others cannot read is masked; what others can read stays."""
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
    """A tmpfs is memory charged to no process: a notebook that filled /tmp would make the out-of-memory
    killer take the largest processes (a grader among them). Where bwrap has --size, /tmp holds at most
    sandbox.TMP_BYTES (8 MiB here, for the test's speed): a larger write fails, a smaller one works."""
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
