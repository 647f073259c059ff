"""The gradebook checks its own set-up before it grades: a grader fault charges no student.

It runs ``python -m brrr.grading`` in a fresh process on a folder with one
submission, with grader dependencies made unimportable (as in a pip install
without the ``[grade]`` extras). It must stop with a message naming what to
install, exit non-zero, and write no grades.
"""

import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = (
    pytest.mark.device_independent
)  # the gradebook's dependency check: the GPU check leaves it to CI

LAB = "02-fuse-it"
RUN_WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # import {name} now raises ImportError
from brrr.grading.gradebook import main
sys.exit(main(sys.argv[2:]))
"""


def grade_without(modules: str, tmp_path) -> subprocess.CompletedProcess:
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    (submissions / "student.ipynb").write_bytes((ROOT / "labs" / f"{LAB}.ipynb").read_bytes())
    return subprocess.run(
        [
            sys.executable,
            "-c",
            RUN_WITHOUT,
            modules,
            str(submissions),
            "--out",
            str(tmp_path / "out"),
            "--lab",
            LAB,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def test_missing_grader_dependencies_stop_the_run_and_charge_no_student(tmp_path):
    missing = ["pytest", "nbval", "ipykernel"]  # what a pip install without [grade] lacks
    result = grade_without(",".join(missing), tmp_path)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "pip install 'brrr[grade]'" in result.stderr
    for name in missing:
        assert name in result.stderr, f"the message does not name {name}: {result.stderr}"
    assert not (tmp_path / "out" / "grades.csv").exists(), "a student was graded without a grader"
    assert "student" not in result.stdout


def test_the_check_passes_where_the_grader_has_what_it_needs():
    from brrr.grading.gradebook import grader_setup_problem

    assert grader_setup_problem() is None


def test_the_instructors_pytest_settings_stay_out_of_the_graded_run(tmp_path, monkeypatch):
    """A ``--basetemp`` in the instructor's PYTEST_ADDOPTS stopped the pytest that runs every graded
    notebook (nbval's), and every student was given "not run": no PYTEST_ variable of the
    instructor's reaches a grading process, and no plugin loads there but nbval."""
    from brrr.grading import gradebook

    monkeypatch.setenv("PYTEST_ADDOPTS", "--basetemp=.")
    monkeypatch.setenv("PYTEST_PLUGINS", "no_such_plugin")
    env = gradebook.private_environment(tmp_path)
    assert {name: env[name] for name in env if name.startswith("PYTEST_")} == {
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"
    }
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # the rest of the environment is still made
