"""The program a submission runs under (brrr/checks/reaper.py, run as ``python -c REAPER``): it
passes the command's exit status through and kills what the command left behind, an orphan that
escaped its process group included."""

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brrr.checks import processes, reaper

pytestmark = [
    pytest.mark.device_independent,
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="a child subreaper is Linux only"
    ),
]


_alive = processes.alive  # running, not a zombie: the gradebook's own test


def _reap(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", processes.REAPER, *command],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_reaper_is_the_module_and_imports_nothing_from_brrr():
    assert processes.REAPER == Path(reaper.__file__).read_text()
    imported = {
        alias.name
        for node in ast.walk(ast.parse(processes.REAPER))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module
        for node in ast.walk(ast.parse(processes.REAPER))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported and not any(name == "brrr" or name.startswith("brrr.") for name in imported), (
        imported
    )


def test_the_reaper_passes_the_exit_status_through_and_kills_nothing_when_nothing_is_left():
    done = _reap(sys.executable, "-c", "import sys; sys.exit(3)")
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1] == "brrr-reaper: killed 0 process(es) left behind"


def test_the_command_runs_under_the_submissions_limits():
    """A file of at most FILE_SIZE_MAX, no core dump, and the OOM killer's first choice, for every
    process the command starts. (The task cap applies only in a user namespace of the sandbox's own;
    outside one Linux counts the user's every process: left as it was.)"""
    show = (
        "import resource\n"
        "print(*resource.getrlimit(resource.RLIMIT_FSIZE), "
        "*resource.getrlimit(resource.RLIMIT_CORE), "
        "open('/proc/self/oom_score_adj').read().strip(), "
        "resource.getrlimit(resource.RLIMIT_NPROC)[0])"
    )
    done = _reap(sys.executable, "-c", show)
    fsize, fsize_hard, core, core_hard, adjust, tasks = done.stdout.split()
    assert (int(fsize), int(fsize_hard)) == (reaper.FILE_SIZE_MAX,) * 2, done.stdout
    assert (int(core), int(core_hard), int(adjust)) == (0, 0, reaper.OOM_SCORE_ADJ), done.stdout
    own_namespace = (
        " ".join(Path("/proc/self/uid_map").read_text().split()) != reaper.INITIAL_USER_NAMESPACE
    )
    if not own_namespace:
        import resource

        assert int(tasks) == resource.getrlimit(resource.RLIMIT_NPROC)[0]


def test_the_reaper_kills_an_orphaned_grandchild_that_left_the_process_group(tmp_path):
    """A daemon: the command forks a child that calls setsid and forks again, the child exits (its
    child is an orphan, re-parented to the reaper, not to init), and the command ends while the
    orphan sleeps."""
    pid_file = tmp_path / "orphan.pid"
    escape = f"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        # so that a reaper that leaves it alive is not waited on through its pipes
        for stream in (0, 1, 2):
            os.dup2(null, stream)
        with open({str(pid_file)!r} + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename({str(pid_file)!r} + ".tmp", {str(pid_file)!r})
        time.sleep(600)
    os._exit(0)
os.wait()
deadline = time.monotonic() + 30
while not os.path.exists({str(pid_file)!r}) and time.monotonic() < deadline:
    time.sleep(0.01)
"""
    started = time.monotonic()
    done = _reap(sys.executable, "-c", escape)
    orphan = int(pid_file.read_text())
    try:
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[-1] == "brrr-reaper: killed 1 process(es) left behind"
        assert not _alive(orphan)
        assert time.monotonic() - started < 60, (
            "the reaper waited for the orphan instead of killing it"
        )
    finally:
        if _alive(orphan):
            os.kill(orphan, 9)
