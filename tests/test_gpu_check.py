"""`make gpu-check` on a machine without what it needs stops at once with a clear message.

The GPU stages themselves run only on a GPU node (they need CUDA); here the
script is run from a copy of the checkout's .ci/ folder with the interpreter
it would use, and must stop before creating anything.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def _run(
    tmp_path: Path, *, wheelhouse: bool, python: str | None = None, args=()
) -> subprocess.CompletedProcess:
    (tmp_path / ".ci").mkdir(exist_ok=True)
    shutil.copy(ROOT / ".ci" / "gpu-check", tmp_path / ".ci" / "gpu-check")
    if wheelhouse:
        (tmp_path / "wheelhouse").mkdir(exist_ok=True)
        (tmp_path / "wheelhouse" / "requirements-node.txt").write_text("nbval\n")
    env = dict(os.environ)
    if python:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        wrapper = (
            bin_dir / "python3"
        )  # a script, not a link: a venv's python finds its venv by its path
        wrapper.write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
        wrapper.chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even on a GPU machine
    env.pop("PART", None)
    return subprocess.run(
        ["bash", str(tmp_path / ".ci" / "gpu-check"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_without_a_wheelhouse_it_says_how_to_make_one(tmp_path):
    result = _run(tmp_path, wheelhouse=False)
    assert result.returncode == 2
    assert "no wheelhouse/ here" in result.stdout and "make wheelhouse" in result.stdout
    assert not (tmp_path / ".venv-gpu").exists()


def test_a_part_it_does_not_have_is_refused_with_the_parts_it_has(tmp_path):
    result = _run(
        tmp_path, wheelhouse=True, python=sys.executable, args=("--part", "4", "--out", "x")
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no part '4'" in result.stdout and "1 2 3" in result.stdout
    assert not (tmp_path / ".venv-gpu").exists()
    known = _run(
        tmp_path,
        wheelhouse=True,
        python=sys.executable,
        args=("--part", "3", "--out", str(tmp_path / "o")),
    )
    assert "torch sees no CUDA device" in known.stdout  # accepted: it went on to the next check
    assert not (tmp_path / ".venv-gpu").exists() and not (tmp_path / "o").exists()


def test_without_a_cuda_device_it_stops_before_installing_anything(tmp_path):
    result = _run(
        tmp_path, wheelhouse=True, python=sys.executable
    )  # this venv: torch and triton, no CUDA
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


def test_the_clock_prints_each_files_time_as_soon_as_the_file_is_done(tmp_path):
    """A stage stopped at its limit never reaches --durations: each file's time must already be out."""
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
