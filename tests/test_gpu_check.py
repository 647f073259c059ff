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


def _run(tmp_path: Path, *, wheelhouse: bool, python: str | None = None) -> subprocess.CompletedProcess:
    (tmp_path / ".ci").mkdir(exist_ok=True)
    shutil.copy(ROOT / ".ci" / "gpu-check", tmp_path / ".ci" / "gpu-check")
    if wheelhouse:
        (tmp_path / "wheelhouse").mkdir(exist_ok=True)
        (tmp_path / "wheelhouse" / "requirements-node.txt").write_text("nbval\n")
    env = dict(os.environ)
    if python:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        wrapper = bin_dir / "python3"  # a script, not a link: a venv's python finds its venv by its path
        wrapper.write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
        wrapper.chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even on a GPU machine
    return subprocess.run(["bash", str(tmp_path / ".ci" / "gpu-check")], capture_output=True, text=True,
                          env=env, timeout=120)


def test_without_a_wheelhouse_it_says_how_to_make_one(tmp_path):
    result = _run(tmp_path, wheelhouse=False)
    assert result.returncode == 2
    assert "no wheelhouse/ here" in result.stdout and "make wheelhouse" in result.stdout
    assert not (tmp_path / ".venv-gpu").exists()


def test_without_a_cuda_device_it_stops_before_installing_anything(tmp_path):
    result = _run(tmp_path, wheelhouse=True, python=sys.executable)  # this venv: torch and triton, no CUDA
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
