"""`make gpu-check` on a machine without what it needs stops at once with a clear message, and every
part, stopped or not, hands back its one archive.

The GPU stages themselves run only on a GPU node (they need CUDA); here the script is run from a
copy of the checkout's .ci/ folder with the interpreter it would use, or with a fake node, and must
stop before installing anything it should not.
"""

import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from conftest import ROOT


def _run(
    tmp_path: Path,
    *,
    wheelhouse: bool,
    python: str | None = None,
    args=("--part", "1"),
    extra_env=None,
) -> subprocess.CompletedProcess:
    (tmp_path / ".ci").mkdir(exist_ok=True)
    shutil.copy(ROOT / ".ci" / "gpu-check", tmp_path / ".ci" / "gpu-check")
    if wheelhouse and not (tmp_path / "wheelhouse").exists():
        (tmp_path / "wheelhouse").mkdir()
        (tmp_path / "wheelhouse" / "requirements-node.txt").write_text("nbval\n")
    env = dict(os.environ)
    if python:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        wrapper = (
            bin_dir / "python3"
        )  # a script, not a link: a venv's python finds its venv by its path
        if not wrapper.exists():
            wrapper.write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
            wrapper.chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even on a GPU machine
    env.pop("PART", None)
    env.update(extra_env or {})
    return subprocess.run(
        ["bash", str(tmp_path / ".ci" / "gpu-check"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )


def archived(archive: Path) -> dict[str, str]:
    """The text files of a part's archive, by their path inside it."""
    with tarfile.open(archive) as tar:
        return {
            member.name: tar.extractfile(member).read().decode()
            for member in tar.getmembers()
            if member.isfile()
        }


def test_without_a_wheelhouse_it_says_how_to_make_one_and_still_hands_back_its_archive(tmp_path):
    result = _run(tmp_path, wheelhouse=False, args=("--part", "1", "--archive", "back/p1.tgz"))
    assert result.returncode == 2
    assert "no wheelhouse/ here" in result.stdout and "make wheelhouse" in result.stdout
    assert not (tmp_path / ".venv-gpu").exists()
    files = archived(tmp_path / "back" / "p1.tgz")
    assert "no wheelhouse/ here" in files["part-1/console.log"]
    assert "part-1/node-packages.txt" in files  # what the node has, for the list's refresh


def test_the_part_folder_is_never_the_environments_out(tmp_path):
    """A runner that sets OUT to the folder it hands back (8 files at most) would get the part's
    every file there instead of its one archive: only --out names the part's folder."""
    returned = tmp_path / "returned"
    returned.mkdir()
    result = _run(
        tmp_path, wheelhouse=False, args=("--part", "2"), extra_env={"OUT": str(returned)}
    )
    assert result.returncode == 2 and not any(returned.iterdir())
    assert (tmp_path / "gpu-check-out" / "part-2.tgz").is_file()


def test_a_part_it_does_not_have_is_refused_with_the_parts_it_has(tmp_path):
    result = _run(
        tmp_path, wheelhouse=True, python=sys.executable, args=("--part", "3", "--out", "x")
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no part '3'" in result.stdout and "1 2" in result.stdout
    assert not (tmp_path / ".venv-gpu").exists() and not (tmp_path / "x").exists()
    known = _run(
        tmp_path,
        wheelhouse=True,
        python=sys.executable,
        args=("--part", "2", "--out", str(tmp_path / "o")),
    )
    assert "torch sees no CUDA device" in known.stdout  # accepted: it went on to the next check
    assert not (tmp_path / ".venv-gpu").exists() and (tmp_path / "o.tgz").is_file()


def test_without_a_cuda_device_it_stops_before_installing_anything(tmp_path):
    result = _run(tmp_path, wheelhouse=True, python=sys.executable)  # torch and triton, no CUDA
    assert result.returncode == 2, result.stdout + result.stderr
    assert "torch sees no CUDA device" in result.stdout
    assert not (tmp_path / ".venv-gpu").exists()


def test_without_torch_it_says_the_node_needs_its_own(tmp_path):
    bare = shutil.which("python3", path="/usr/bin:/bin")
    probe = subprocess.run([bare, "-c", "import torch"], capture_output=True) if bare else None
    if probe is None or probe.returncode == 0:
        import pytest

        pytest.skip("no system python3 without torch here to stand in for a bare node")
    result = _run(tmp_path, wheelhouse=True, python=bare)
    assert result.returncode == 2 and "lacks torch or triton" in result.stdout


FAKE_NODE = """#!/bin/sh
# python3 of a fake GPU node: torch, triton and CUDA are there; `-m venv DIR` makes a fake venv.
case "$1 $2" in
    "-m venv") for arg; do dir=$arg; done; mkdir -p "$dir/bin"
               cp "{venv_python}" "$dir/bin/python"; exit 0 ;;
    "-m pip") echo "torch==2.11.0"; exit 0 ;;
esac
exit 0
"""
FAKE_VENV = """#!/bin/sh
# the fake venv's python: the wheels query is the real one; pip logs; a part runs past every limit.
case "$1 $2 $3" in
    "-m brrr_book.gpucheck wheels") exec "{python}" "$@" ;;
    "-m brrr_book.gpucheck run") echo "the part began"; exec sleep 60 ;;
esac
[ "$1 $2" = "-m pip" ] && echo "pip $*" >> "{log}"
exit 0
"""


def test_a_part_past_its_hard_limit_is_stopped_and_still_hands_back_its_archive(tmp_path):
    """The lease kills a command at its own limit and nothing comes back: the part stops itself
    first. Here its run never ends; the hard limit (part limit + margin) stops it, and the archive
    holds the console, the set-up (only the wheel the node lacks was installed) and the stop."""
    pip_log = tmp_path / "pip.log"
    venv_python = tmp_path / "fake-venv-python"
    venv_python.write_text(FAKE_VENV.format(python=sys.executable, log=pip_log))
    venv_python.chmod(0o755)
    (tmp_path / "bin").mkdir()
    node = tmp_path / "bin" / "python3"
    node.write_text(FAKE_NODE.format(venv_python=venv_python))
    node.chmod(0o755)
    (tmp_path / "wheelhouse").mkdir()
    (tmp_path / "wheelhouse" / "requirements-node.txt").write_text(
        "not-on-any-node==1.0\nnbval==0.11.0\n"  # the second is installed here: the node has it
    )
    began = time.monotonic()
    result = _run(
        tmp_path,
        wheelhouse=True,
        python=str(node),
        args=("--part", "2", "--archive", "back/p2.tgz"),
        extra_env={"GPU_CHECK_PART_LIMIT_S": "8", "GPU_CHECK_HARD_MARGIN_S": "2"},
    )
    assert result.returncode == 124, result.stdout + result.stderr
    assert time.monotonic() - began < 60
    console = archived(tmp_path / "back" / "p2.tgz")["part-2/console.log"]
    assert "installing what the node lacks: not-on-any-node==1.0" in console
    assert "the part began" in console and "STOPPED at the hard limit, 10 s" in console
    installed = pip_log.read_text()
    assert "not-on-any-node==1.0" in installed and "nbval" not in installed


def test_the_clock_prints_each_files_time_as_soon_as_the_file_is_done(tmp_path):
    """A stage stopped at its limit never reaches --durations: each file's time must already be
    out."""
    (tmp_path / "test_first.py").write_text(
        "import time\n\ndef test_a():\n    time.sleep(0.3)\n\ndef test_b():\n    pass\n"
    )
    (tmp_path / "test_second.py").write_text("def test_c():\n    print('second ran')\n")
    # the suite's own PYTEST_ADDOPTS (a --basetemp, say) would apply to the inner run too: left out
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = f"{ROOT / '.ci'}:{os.environ.get('PYTHONPATH', '')}"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "notebook_clock",
            "-p",
            "no:cacheprovider",
            "-s",
            "-o",
            "addopts=",
            "test_first.py",
            "test_second.py",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    first = result.stdout.index("clock: test_first.py took")
    assert first < result.stdout.index("second ran"), (
        "the first file's time came after the next file ran"
    )
    seconds = float(result.stdout[first:].split("took ", 1)[1].split(" s", 1)[0])
    assert 0.3 <= seconds < 5
    assert "clock: test_second.py took" in result.stdout
