"""brrr as a reader gets it from pip: the built wheel, in a fresh virtual environment.

The wheel is built from a copy of the package (plus one made-up reference file,
to prove that reference data ships) and installed into a new environment with
no brrr on its path. To spare downloading torch again, the new environment sees
this test environment's site-packages through a ``.pth`` line, which adds the
folder but runs none of its ``.pth`` hooks, so the checkout's editable brrr is
not importable there: every import of brrr below comes from the wheel.

From there a small notebook runs in a kernel of that environment, the gradebook
grades a folder holding one unreadable notebook, and ``python -m brrr.labs``
says it needs a checkout.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

NOTEBOOK = ROOT / "notebooks" / "32-profiler-traces.ipynb"  # small: needs no measured ceilings
KERNEL = "brrr-wheel"
MADE_UP_GPU = "made-up-gpu"


def run(command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _package_folders() -> list[str]:
    """This environment's site-packages, and any its own .pth files add: on a GPU node the test venv
    reaches the node's torch, attrs and packaging through such a line (.ci/gpu-check), and a folder
    named in a .pth file is added without its own .pth files being run."""
    folders = [sysconfig.get_path("purelib")]
    folders += [entry for entry in sys.path
                if entry.rstrip("/").endswith(("site-packages", "dist-packages")) and entry not in folders]
    return folders


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """(python of the new environment, a working folder outside the checkout, its environment variables)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT / "brrr", source / "brrr", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    (source / "brrr" / "data" / "reference" / f"{MADE_UP_GPU}.json").write_text('{"ceilings": {}}')
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--wheel-dir", str(work / "dist"), str(source)])
    (wheel,) = (work / "dist").glob("brrr-*.whl")

    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    new_site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
                    .stdout.strip())
    (new_site / "_test_environment.pth").write_text("".join(f"{folder}\n" for folder in _package_folders()))
    run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)])

    kernel = venv / "share" / "jupyter" / "kernels" / KERNEL
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "brrr from the wheel", "language": "python"}))
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("MALLOC_", "PYTHON", "JUPYTER", "BRRR_RECORD"))}
    env.update(JUPYTER_PATH=str(venv / "share" / "jupyter"), MPLBACKEND="Agg",
               BRRR_CACHE_DIR=str(work / "cache"))
    return python, work, env


def test_brrr_comes_from_the_wheel_with_its_data_and_dependencies(wheel_env):
    python, work, env = wheel_env
    check = f"""
import importlib.metadata, sys
from packaging.requirements import Requirement
import brrr
from brrr import reference
assert brrr.__file__.startswith(sys.prefix), brrr.__file__
assert "{MADE_UP_GPU}" in reference.load_all(), "reference data did not ship in the wheel"
from brrr import traces
shipped = traces.reference_trace()
assert shipped is not None and shipped.trace.has_device, "the reference GPU trace did not ship in the wheel"
for line in importlib.metadata.requires("brrr"):
    need = Requirement(line)
    if need.marker is None or need.marker.evaluate({{"extra": "grade"}}):
        have = importlib.metadata.version(need.name)
        assert need.specifier.contains(have, prereleases=True), f"{{need}} but {{have}} is installed"
print("ok")
"""
    assert run([str(python), "-c", check], cwd=work, env=env).stdout.strip() == "ok"


def test_a_notebook_runs_from_the_wheel(wheel_env):
    python, work, env = wheel_env
    notebook = work / NOTEBOOK.name
    shutil.copy(NOTEBOOK, notebook)
    execute = f"""
import sys, nbformat
from nbclient import NotebookClient
notebook = nbformat.read({str(notebook)!r}, as_version=4)
notebook.cells.append(nbformat.v4.new_code_cell(
    "import brrr, sys\\nassert brrr.__file__.startswith(sys.prefix), brrr.__file__"))
NotebookClient(notebook, kernel_name={KERNEL!r}, timeout=120).execute()
print("executed", len(notebook.cells), "cells")
"""
    assert "executed" in run([str(python), "-c", execute], cwd=work, env=env).stdout


def test_the_gradebook_runs_from_the_wheel(wheel_env):
    python, work, env = wheel_env
    submissions = work / "submissions"
    submissions.mkdir()
    (submissions / "broken.ipynb").write_text("not a notebook")
    result = run([str(python), "-m", "brrr.grading", str(submissions), "--out", str(work / "grades"),
                  "--lab", "02-fuse-it"], cwd=work, env=env)
    assert "broken: unreadable" in result.stdout
    assert "broken" in (work / "grades" / "grades.csv").read_text()


def test_the_labs_command_says_it_needs_a_checkout(wheel_env):
    python, work, env = wheel_env
    result = subprocess.run([str(python), "-m", "brrr.labs"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "checkout" in result.stderr and "make labs" in result.stderr
    installed = Path(run([str(python), "-c", "import brrr; print(brrr.__file__)"], cwd=work, env=env)
                     .stdout.strip()).parent
    assert not (installed.parent / "labs").exists(), "it wrote labs/ into site-packages"
