"""What `pip install brrr` ships: the toolkit, its labs and grader, and nothing of the book's
machinery.

The wheel is built from a copy of the checkout's layout, book/ included, so that a package list that
took brrr_book in (setuptools' `include = ["brrr*"]` did) would show here. Installing and grading
from the wheel is tests/grading/test_package.py's (the end-to-end stage)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.device_independent

BOOK_ONLY = (
    "brrr_book/",
    "brrr/pages/",
    "brrr/gpucheck/",
    "brrr/warm/",
    "brrr/book_pages.py",
    "brrr/colab.py",
    # The claims ledger, the book's figures and explorers, and notebook 40's capstone.
    *(f"brrr/{name}.py" for name in ("claims", "figures", "flames", "two_gpus", "widgets")),
    *(f"brrr/{name}.py" for name in ("timeline", "source", "capstone")),
)


def build_wheel(work: Path, *, extra: dict[str, str] | None = None) -> Path:
    """The wheel of a copy of the checkout's layout (brrr with its link to solutions/, book/,
    solutions/ and the metadata), with ``extra`` files (path: text) written into the copy first."""
    source = work / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in ("brrr", "book", "solutions"):
        shutil.copytree(ROOT / folder, source / folder, symlinks=True, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name, text in (extra or {}).items():
        (source / name).write_text(text)
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
    ]
    done = subprocess.run(
        [*command, "--wheel-dir", str(work / "dist"), str(source)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (work / "dist").glob("brrr-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    return zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("wheel")))


def test_the_wheel_holds_the_toolkit_labs_and_grader_and_none_of_the_book(wheel):
    names = wheel.namelist()
    assert {"brrr/ceilings.py", "brrr/grading/gradebook.py", "brrr/labs/tile_it/checks.py"} <= set(
        names
    )
    assert any(name.startswith("brrr/labs/solutions/") for name in names), (
        "the lab solutions did not ship"
    )
    assert [name for name in names if name.startswith(BOOK_ONLY)] == []


def test_the_wheel_registers_nothing_of_the_books(wheel):
    (entry_points,) = [
        name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")
    ]
    text = wheel.read(entry_points).decode()
    assert "kernel_provisioners" not in text and "brrr_book" not in text, text
