"""The set-up cell (brrr.colab): in every notebook and lab, the same, a no-op outside Colab."""

import shutil
import subprocess

import nbformat
import pytest

from brrr import colab
from brrr.labs.generate import LABS, ROOT, SOLUTIONS, read

EVERY_NOTEBOOK = colab.notebook_paths(colab.NOTEBOOKS, SOLUTIONS, LABS)


def test_every_notebook_solution_and_lab_opens_with_the_current_cell():
    assert len(EVERY_NOTEBOOK) >= 14, EVERY_NOTEBOOK
    problems = {path.relative_to(ROOT).as_posix(): colab.problem(read(path)) for path in EVERY_NOTEBOOK}
    assert not any(problems.values()), {path: why for path, why in problems.items() if why}
    assert colab.main(["--check"]) == 0


def test_the_check_catches_a_missing_an_edited_and_a_doubled_cell():
    notebook = read(EVERY_NOTEBOOK[0])
    without = nbformat.from_dict(notebook)
    without.cells = [c for c in without.cells if c.get("id") != colab.CELL_ID]
    assert "not the current set-up cell" in colab.problem(without)
    edited = colab.with_setup_cell(nbformat.from_dict(without))
    edited.cells[[c.get("id") for c in edited.cells].index(colab.CELL_ID)].source += "\nprint('hi')"
    assert "not the current set-up cell" in colab.problem(edited)
    doubled = colab.with_setup_cell(nbformat.from_dict(without))
    doubled.cells.append(nbformat.v4.new_code_cell(colab.cell_source()))
    assert "appears 2 times" in colab.problem(doubled)
    assert colab.problem(colab.with_setup_cell(without)) is None


def _run_cell(monkeypatch, *, on_colab: bool, gpu: bool):
    """Execute the cell with pip and nvidia-smi replaced: (pip commands, printed text)."""
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi" if gpu else None)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delitem(__import__("sys").modules, "google.colab", raising=False)
    if on_colab:
        monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-test")
    return commands


def test_outside_colab_the_cell_does_nothing(monkeypatch, capsys):
    commands = _run_cell(monkeypatch, on_colab=False, gpu=True)
    namespace: dict = {}
    exec(colab.cell_source(), namespace)
    assert commands == [] and capsys.readouterr().out == ""
    assert {name for name in namespace if not name.startswith("__")} == {"_os", "_sys"}


@pytest.mark.parametrize("gpu", [False, True])
def test_on_colab_it_installs_the_books_version_and_names_the_runtime(monkeypatch, capsys, gpu):
    commands = _run_cell(monkeypatch, on_colab=True, gpu=gpu)
    exec(colab.cell_source(), {})
    version = colab.book_version()
    assert len(commands) == 1 and commands[0][1:4] == ["-m", "pip", "install"]
    assert commands[0][-1] == f"brrr[grade] @ git+{colab.book_repository()}@v{version}"
    printed = capsys.readouterr().out
    assert f"brrr {version} installed" in printed
    if gpu:
        assert "GPU runtime is attached" in printed
    else:
        assert "No GPU attached" in printed and "Change runtime type" in printed


def test_the_version_and_repository_come_from_the_checkout():
    import tomllib

    import yaml

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert colab.book_version() == project["version"]
    assert colab.book_repository() == config["repository"]["url"].rstrip("/")
