"""The student kernel's import path: the student copy of brrr, site-packages' other packages, and no
import that reaches the instructor's brrr, editable or installed from a wheel, and the hidden
modules in it.

The kernel's Python is run as the gradebook's kernel spec starts it (``-S``, its ``PYTHONPATH``),
with the tricks a student who read this source would try in place of ``ipykernel_launcher``: about a
second, where grading a notebook takes fifteen.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from brrr.grading import assemble, gradebook

pytestmark = pytest.mark.device_independent  # the grader's isolation: the GPU check leaves it to CI

HIDDEN = ("ceilings", "timing")  # Lab 1's

# Each trick prints what it reached; reaching the instructor's brrr.ceilings prints its file.
TRICKS = r"""
import glob, importlib, importlib.machinery, importlib.util, os, sys

import brrr
print("brrr", brrr.__file__)
for name in ("torch", "ipykernel", "nbformat"):
    print("found", name, importlib.util.find_spec(name) is not None)


def reached(how):
    module = sys.modules.get("brrr.ceilings")
    if module is not None:
        print("REACHED", how, module.__file__)
    for name in [name for name in sys.modules if name == "brrr" or name.startswith("brrr.")]:
        del sys.modules[name]


try:  # a plain import
    import brrr.ceilings
except ImportError:
    pass
reached("import")
try:  # an editable install's finder, imported by name and installed by hand
    for path in sys.path:
        for hook in glob.glob(os.path.join(path, "__editable__*finder*.py")):
            finder = importlib.import_module(os.path.basename(hook)[:-3])
            finder.install()
    import brrr.ceilings
except ImportError:
    pass
reached("an editable finder")
for path in sys.path[1:]:  # brrr searched for on every folder of the path but the student copy's
    spec = importlib.machinery.PathFinder.find_spec("brrr", [path])
    if spec is not None and spec.submodule_search_locations:
        locations = list(spec.submodule_search_locations)
        found = importlib.machinery.PathFinder.find_spec("brrr.ceilings", locations)
        if found is not None:
            sys.modules["brrr.ceilings"] = importlib.util.module_from_spec(found)
            reached(f"brrr found on {path}")
print("done")
"""


def kernel_run(folder: Path) -> str:
    """Run TRICKS with the Python, flags and path of the student kernel the gradebook would start
    here."""
    student_copy = assemble.Snapshot().write_package(folder / "student", hidden=HIDDEN)
    spec = json.loads(
        (
            gradebook.kernelspec(folder, student_copy)
            / "kernels"
            / gradebook.KERNEL_NAME
            / "kernel.json"
        ).read_text()
    )
    python, flag = spec["argv"][:2]
    env = dict(os.environ, **spec["env"])
    done = subprocess.run(
        [python, flag, "-c", TRICKS],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_no_import_in_the_student_kernel_reaches_the_instructors_brrr(tmp_path):
    output = kernel_run(tmp_path)
    assert f"brrr {tmp_path / 'student' / 'brrr' / '__init__.py'}" in output, output
    assert "REACHED" not in output, output
    for name in ("torch", "ipykernel", "nbformat"):  # site-packages' other packages are all there
        assert f"found {name} True" in output, output
    assert output.rstrip().endswith("done")
    assemble.make_writable(tmp_path)


def test_a_site_packages_holding_brrr_is_replaced_by_links_to_its_other_entries(
    tmp_path, monkeypatch
):
    """As in a pip install: the folder that holds the installed brrr (its package, metadata and a
    .pth file beside torch's) is on the path only as links to everything else, so ipykernel still
    starts."""
    site_packages = tmp_path / "site-packages"
    (site_packages / "brrr").mkdir(parents=True)
    (site_packages / "brrr" / "ceilings.py").write_text(
        "measure_copy_bandwidth = 'the instructor'\n"
    )
    (site_packages / "brrr-0.1.0.dist-info").mkdir()
    (site_packages / "torchish").mkdir()
    (site_packages / "typing_ish.py").write_text("")
    (site_packages / "hooks.pth").write_text("import os\n")
    monkeypatch.setattr(sys, "path", [str(site_packages)] + sys.path)
    path = assemble.kernel_path(tmp_path / "student", tmp_path / "links")
    assert path[0] == str(tmp_path / "student") and str(site_packages) not in path
    linked = Path(path[1])
    assert sorted(p.name for p in linked.iterdir()) == ["torchish", "typing_ish.py"]
    assert (linked / "torchish").resolve() == site_packages / "torchish"
    for entry in path[1:]:
        assert not (Path(entry) / "brrr").exists(), entry
