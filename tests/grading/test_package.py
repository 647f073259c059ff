"""brrr as a reader or an instructor gets it from pip: the built wheel, in a fresh virtual
environment that holds only what the install brought.

The wheel is built from a copy of the package (plus one made-up reference file, to prove that
reference data ships) and installed non-editable into a new environment, as the README says: this
environment's torch first, then the wheel with its ``[grade]`` extras, at the versions
``requirements.txt`` pins (CI's, so that a release elsewhere changes nothing here). pip finds the
torch wheel as ``make install`` does; uv installs it and the rest with no cache, as ``make install``
does. The fixture took 18-30 s on the 2-core machine with other work running, where ``pip install
torch`` alone took 30-75 s, most of it compiling bytecode. None is compiled here: the gradebook
writes it for what it imports before grading, and compiling everything cost 45 s of CPU, more than
it saved.

Nothing is written into the checkout, caches included: while this runs, a gradebook test on the
other worker watches the checkout, and a cache there (uv's, with the new environment's files
hard-linked to it) changed under that watch and charged its submissions with tampering.

From there the gradebook grades a folder holding Lab 2's solution and a wrong answer, each with its
own score, each in a Jupyter kernel of that environment (the unsolved labs are graded in
tests/labs/test_labs.py; here one cost 10 s and checked nothing of the wheel's) (a reader's notebook
runs the same way: a separate run of notebook 32 there cost the suite 16 s and checked nothing
more); and ``python -m brrr.labs`` says it needs a checkout.
"""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from brrr.grading import gradebook
from conftest import ROOT
from gradebook_helpers import LAB, read_rows
from lab_fixtures import write_submission
from test_wheel import build_wheel

# It installs from the package index, which a GPU node has no access to: the GPU check leaves it to
# CI.
pytestmark = [
    pytest.mark.device_independent,
    pytest.mark.e2e,
]  # a wheel installed and graded from: `make test-e2e`

MADE_UP_GPU = "made-up-gpu"


def run(command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, (
        f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


def build_wheel_with_made_up_gpu(work: Path) -> Path:
    """The wheel of the checkout's layout (:func:`test_wheel.build_wheel`), with one made-up
    reference file."""
    return build_wheel(work, extra={f"brrr/data/reference/{MADE_UP_GPU}.json": '{"ceilings": {}}'})


def clean_environment(work: Path) -> dict[str, str]:
    """This process's variables less those that would reach into this checkout or its
    environment."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(
            ("MALLOC_", "PYTHON", "JUPYTER", "BRRR_", "TORCHINDUCTOR_", "VIRTUAL_ENV")
        )
    }
    env.update(MPLBACKEND="Agg", BRRR_CACHE_DIR=str(work / "cache"))
    return env


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """(python of the new environment, a working folder outside the checkout, its environment
    variables)."""
    work = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel_with_made_up_gpu(work)
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    version = importlib.metadata.version("torch")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--dest",
            str(work / "wheels"),
            f"torch=={version}",
        ]
    )
    (torch_wheel,) = (work / "wheels").glob(f"torch-{version}-*.whl")
    run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "--quiet",
            "--no-cache",
            "--python",
            str(python),
            "--constraint",
            str(ROOT / "requirements.txt"),
            str(torch_wheel),
            f"{wheel}[grade]",
        ]
    )
    return python, work, clean_environment(work)


def test_the_environment_holds_brrr_from_the_wheel_with_its_data_and_dependencies(wheel_env):
    python, work, env = wheel_env
    check = f"""
import importlib.metadata, pathlib, sys
from packaging.requirements import Requirement
import brrr
from brrr import reference
assert brrr.__file__.startswith(sys.prefix), brrr.__file__
site_paths = [p for p in sys.path if "site-packages" in p]
assert site_paths == [p for p in site_paths if p.startswith(sys.prefix)], sys.path
assert "{MADE_UP_GPU}" in reference.load_all(), "reference data did not ship in the wheel"
from brrr import traces
shipped = traces.reference_trace()
assert shipped is not None and shipped.trace.has_device, (
    "the reference GPU trace did not ship in the wheel")
for line in importlib.metadata.requires("brrr"):
    need = Requirement(line)
    if need.marker is None or need.marker.evaluate({{"extra": "grade"}}):
        have = importlib.metadata.version(need.name)
        allowed = need.specifier.contains(have, prereleases=True)
        assert allowed, f"{{need}} but {{have}} is installed"
solutions = pathlib.Path(brrr.__file__).parent / "labs" / "solutions"
print(json.dumps({{p.name: p.read_text() for p in sorted(solutions.glob("*.ipynb"))}}))
"""
    shipped = json.loads(run([str(python), "-c", "import json" + check], cwd=work, env=env).stdout)
    in_the_checkout = {p.name: p.read_text() for p in sorted((ROOT / "solutions").glob("*.ipynb"))}
    assert shipped == in_the_checkout, "the wheel's lab solutions differ from solutions/"


def test_the_gradebook_grades_a_solution_and_a_wrong_answer_from_the_wheel(wheel_env):
    """The README's promise for ``brrr[grade]``. Before issue 24 this stopped with status 4 (the
    student kernel's path dropped site-packages, which holds the installed brrr), then failed on
    ``KeyError: '02-fuse-it'`` (the lab's solution did not ship)."""
    python, work, env = wheel_env
    submissions = work / "submissions"
    submissions.mkdir()
    shutil.copy(ROOT / "solutions" / f"{LAB}.ipynb", submissions / "solution.ipynb")
    write_submission(submissions, LAB, "unfused", as_name="wrong")
    result = subprocess.run(
        [
            str(python),
            "-m",
            "brrr.grading",
            str(submissions),
            "--out",
            str(work / "grades"),
            "--lab",
            LAB,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_rows(work / "grades")
    status = {name: (row["status"], row["total"], row["max"]) for name, row in rows.items()}
    checks = gradebook.lab_checks(LAB)
    full = str(len(checks))
    assert status["solution"] == ("ok", full, full), status
    if checks == ["correct", "traffic"]:  # on a CPU: right, but one kernel per op
        assert status["wrong"] == ("failed", "1", full) and rows["wrong"]["traffic"] == "0", status
    else:
        assert status["wrong"][0] == "failed" and int(status["wrong"][1]) < len(checks), status
    # The students' copy of brrr holds no solution, though the installed package does.
    student = work / "grades" / "work" / "wrong" / "student"
    assert (student / "brrr" / "labs").is_dir() and not list(student.rglob("*.ipynb")), student


def test_the_labs_command_says_it_needs_a_checkout(wheel_env):
    python, work, env = wheel_env
    result = subprocess.run(
        [str(python), "-m", "brrr.labs"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "checkout" in result.stderr and "make labs" in result.stderr
    installed = Path(
        run(
            [str(python), "-c", "import brrr; print(brrr.__file__)"], cwd=work, env=env
        ).stdout.strip()
    ).parent
    assert not (installed.parent / "labs").exists(), "it wrote labs/ into site-packages"
