"""The Gradescope autograder bundle: what the zip holds, and its run_autograder grading a submission
end to end.

Gradescope unpacks the zip into /autograder/source, runs setup.sh once, then run_autograder for each
submission with the student's files in /autograder/submission. Here the root is a folder of the
test's (``BRRR_AUTOGRADER_ROOT``) and this environment's Python stands in for the one setup.sh
installs (``BRRR_AUTOGRADER_PYTHON``); setup.sh itself, which installs from the network, is only
checked for syntax."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from brrr.grading import assemble, gradebook, gradescope, shards
from gradebook_helpers import LAB
from lab_fixtures import write_submission

pytestmark = pytest.mark.usefixtures("grades_in_the_environment")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    assert gradescope.main(["--lab", LAB, "--out", str(path), "--", "--cell-timeout", "300"]) == 0
    return path


def unpacked(bundle, root):
    """``root`` as Gradescope lays it out: the zip in source/, run_autograder beside it."""
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(root / "source")
    (root / "run_autograder").write_bytes((root / "source" / "run_autograder").read_bytes())
    (root / "submission").mkdir()
    return root


def test_the_bundle_holds_what_gradescope_runs(bundle):
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        requirements = archive.read("requirements.txt").decode()
        setup = archive.read("setup.sh").decode()
        run = archive.read("run_autograder").decode()
    assert {"setup.sh", "run_autograder", "requirements.txt"} <= names
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert f"{gradescope.SOURCE}/brrr/labs/solutions/{LAB}.ipynb" in names  # the solutions as files
    assert f"{gradescope.SOURCE}/pyproject.toml" in names and not any(
        "__pycache__" in n for n in names
    )
    assert (
        "torch==2.13.0" in setup
        and gradescope.TORCH_INDEX in setup
        and "\ntorch==" not in requirements
    )
    assert "nbval==" in requirements and "jupyter-book" not in requirements
    assert f"--lab {LAB} -- --cell-timeout 300" in run
    for script in (setup, run):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_the_bundle_builds_from_an_installed_brrr_and_pip_installs_it(tmp_path):
    """From ``pip install brrr`` the package sits in site-packages without the checkout's
    requirements.txt, pyproject.toml or README.md (the build read requirements.txt, and crashed):
    the bundle pins what this environment has, and writes a pyproject.toml that installs every file.
    """
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "brrr").symlink_to(assemble.PACKAGE_ROOT / "brrr")  # the package, alone
    path = tmp_path / "autograder.zip"
    names = gradescope.build(LAB, path, [], root=site)
    assert f"{gradescope.SOURCE}/brrr/labs/solutions/{LAB}.ipynb" in names
    with zipfile.ZipFile(path) as archive:
        requirements = archive.read("requirements.txt").decode()
        archive.extractall(tmp_path / "unpacked")
    pins = dict(line.split("==") for line in requirements.splitlines() if "==" in line)
    assert {"nbval", "pytest", "ipykernel", "nbformat", "numpy"} <= set(pins), requirements
    assert "torch" not in pins and "jupyter-book" not in pins, requirements
    target = tmp_path / "installed"
    source = tmp_path / "unpacked" / gradescope.SOURCE
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    pip += ["--no-build-isolation", "--target", str(target), str(source)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (target / "brrr" / "labs" / "solutions" / f"{LAB}.ipynb").is_file()
    shipped = {p.relative_to(site / "brrr") for p in (site / "brrr").rglob("*.json") if p.is_file()}
    installed = {p.relative_to(target / "brrr") for p in (target / "brrr").rglob("*.json")}
    assert shipped <= installed  # the record's data too


@pytest.mark.e2e
def test_run_autograder_grades_a_submission_into_results_json(bundle, tmp_path):
    root = unpacked(bundle, tmp_path / "autograder")
    write_submission(root / "submission", LAB, "unfused", as_name="my work")
    env = dict(os.environ, BRRR_AUTOGRADER_ROOT=str(root), BRRR_AUTOGRADER_PYTHON=sys.executable)
    ran = subprocess.run(
        ["bash", str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=900
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text())
    tests = {test["name"]: test for test in results["tests"]}
    checks = gradebook.lab_checks(LAB)
    assert list(tests) == checks and all(test["max_score"] == 1.0 for test in tests.values())
    assert results["score"] == sum(test["score"] for test in tests.values())
    if checks == ["correct", "traffic"]:
        assert (tests["correct"]["score"], tests["correct"]["status"]) == (1.0, "passed")
        assert (tests["traffic"]["score"], tests["traffic"]["status"]) == (0.0, "failed")
        assert "launched 5 kernels" in tests["traffic"]["output"]
        assert "**1 of 2**" in results["output"] and results["score"] == 1.0
    assert results["output"].startswith(f"# Feedback: {LAB}") and results["output_format"] == "md"
    assert (
        results["extra_data"]["isolation"] in ran.stdout
    )  # the instructor is told what isolates it


def test_no_notebook_or_too_many_are_told_what_to_submit(tmp_path):
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    assert gradescope.run(root, LAB, []) == 0
    assert "No notebook" in json.loads((root / "results" / "results.json").read_text())["output"]
    for name in ("a.ipynb", "b.ipynb"):
        (root / "submission" / name).write_text("{}")
    assert gradescope.run(root, LAB, []) == 0
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0 and f"submit one, named {LAB}.ipynb" in results["output"]


def test_a_grader_that_cannot_grade_writes_no_results(tmp_path, monkeypatch):
    """A grader fault must not reach the student as a 0: Gradescope shows a failed run, to grade
    again."""
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "submission" / f"{LAB}.ipynb").write_text("{}")
    outcome = {"returncode": 4, "status": None}

    def gradebook_run(
        command, **kwargs
    ):  # the gradebook, as it ends: a manifest with its row, an exit status
        out = Path(command[command.index("--out") + 1])
        if outcome["status"]:
            out.mkdir(parents=True)
            row = {
                "name": LAB,
                "slug": LAB,
                "lab": LAB,
                "status": outcome["status"],
                "seconds": 1.0,
                "results": {},
            }
            shards.write_manifest(out, {"format": shards.FORMAT, "shard": [1, 1], "rows": [row]})
        return subprocess.CompletedProcess(command, outcome["returncode"])

    monkeypatch.setattr(
        gradescope, "sandbox_flags", lambda options: ([], "sandboxed")
    )  # no bwrap probe
    monkeypatch.setattr(gradescope.subprocess, "run", gradebook_run)
    for returncode, status in ((4, None), (0, "grader-error"), (3, "not graded")):
        outcome.update(returncode=returncode, status=status)
        assert gradescope.run(root, LAB, []) == 1, (returncode, status)
        assert not (root / "results" / "results.json").exists()


def test_results_json_has_a_test_per_check_and_the_feedback():
    row = {
        "lab": LAB,
        "status": "failed",
        "seconds": 12.6,
        "results": {
            "correct": {"passed": True, "message": "fine"},
            "traffic": {"passed": False, "message": "twice"},
        },
    }
    results = gradescope.results(
        row, ["correct", "traffic", "speedup"], "# Feedback", {"brrr": "0.1.0"}
    )
    assert [(t["name"], t["score"], t["max_score"], t["output"]) for t in results["tests"]][:2] == [
        ("correct", 1.0, 1.0, "fine"),
        ("traffic", 0.0, 1.0, "twice"),
    ]
    assert results["tests"][2]["score"] == 0.0 and "Not run" in results["tests"][2]["output"]
    assert (results["score"], results["output"], results["execution_time"]) == (
        1.0,
        "# Feedback",
        13,
    )
    assert results["extra_data"] == {"status": "failed", "lab": LAB, "brrr": "0.1.0"}


def test_a_check_that_timed_out_says_so_on_gradescope():
    row = {
        "lab": LAB,
        "status": "failed",
        "seconds": 60.0,
        "results": {"correct": {"passed": False, "message": "stopped answering"}},
        "timed_out": ["correct"],
    }
    first, second = gradescope.test_results(row, ["correct", "traffic"])
    assert first["score"] == 0.0 and first["output"].startswith("Timed out"), first
    assert "stopped answering" in first["output"] and second["output"].startswith("Not run")
