"""The set-up cell (brrr_book.colab): in every notebook and lab, the same, a no-op outside Colab."""

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import nbformat
import pytest

from brrr_book import colab
from brrr.labs.generate import LABS, ROOT, SOLUTIONS, read

EVERY_NOTEBOOK = colab.notebook_paths(colab.NOTEBOOKS, SOLUTIONS, LABS)


def test_every_notebook_solution_and_lab_opens_with_the_current_cell():
    assert len(EVERY_NOTEBOOK) >= 14, EVERY_NOTEBOOK
    problems = {
        path.relative_to(ROOT).as_posix(): colab.problem(read(path)) for path in EVERY_NOTEBOOK
    }
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


def test_outside_colab_the_cell_does_nothing(monkeypatch, capsys, tmp_path):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: calls.append(args))
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    for root in (ROOT, _book(tmp_path, FORK)):
        namespace: dict = {}
        exec(colab.cell_source(root), namespace)
        assert calls == [] and capsys.readouterr().out == ""
        assert {name for name in namespace if not name.startswith("__")} == {"_os", "_sys"}


# ---------------------------------------------------------------- on Colab, in a process of its own
# The cell runs as Colab runs it, in a fresh Python with COLAB_RELEASE_TAG set, where
# `python -m pip` is a fake that records what it was asked and the constraints file it was given,
# and torch and triton are whatever versions the fake runtime's metadata says.

FORK = "https://github.com/someone/brrr"
FAKE_PIP = """\
import json, os, sys
args = sys.argv[1:]
pins = open(args[args.index("--constraint") + 1]).read() if "--constraint" in args else None
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(json.dumps({"args": args, "pins": pins}) + "\\n")
sys.exit(int(os.environ["FAKE_PIP_STATUS"]))
"""


def _book(tmp_path: Path, repository: str) -> Path:
    """A book root: this checkout's pyproject.toml, and its _config.yml with ``repository.url``
    set."""
    root = tmp_path / "book"
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    config = re.sub(
        r"(^repository:\s*\n(?:\s+.*\n)*?\s+url:\s*)\S+",
        rf"\g<1>{repository}",
        (ROOT / "_config.yml").read_text(),
        flags=re.MULTILINE,
    )
    (root / "_config.yml").write_text(config)
    assert colab.book_repository(root) == repository
    return root


def _on_colab(
    tmp_path: Path,
    source: str,
    *,
    pip_status: int = 0,
    gpu: bool = False,
    versions=(("torch", "2.13.0+cu126"), ("triton", "3.9.0")),
):
    """Run ``source`` as Colab would: (the finished process, the pip calls it made)."""
    runtime = tmp_path / "runtime"
    (runtime / "pip").mkdir(parents=True)
    (runtime / "pip" / "__init__.py").write_text("")
    (runtime / "pip" / "__main__.py").write_text(FAKE_PIP)
    for name, version in versions:
        info = runtime / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    if gpu:
        (tools / "nvidia-smi").write_text("#!/bin/sh\n")
        (tools / "nvidia-smi").chmod(0o755)
    log = tmp_path / "pip-calls.jsonl"
    env = {
        **os.environ,
        "COLAB_RELEASE_TAG": "release-colab-test",
        "PYTHONPATH": str(runtime),
        "PATH": str(tools),
        "TMPDIR": str(tmp_path),
        "FAKE_PIP_LOG": str(log),
        "FAKE_PIP_STATUS": str(pip_status),
    }
    done = subprocess.run(
        [sys.executable, "-c", source],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, calls


def _clean(done: subprocess.CompletedProcess) -> str:
    """The cell's printed text, after checking that it ended without an exception."""
    assert done.returncode == 0 and "Traceback" not in done.stderr + done.stdout, (
        done.stdout,
        done.stderr,
    )
    return done.stdout


def test_with_the_placeholder_repository_it_says_so_and_installs_nothing(tmp_path):
    done, calls = _on_colab(tmp_path, colab.cell_source(_book(tmp_path, colab.PLACEHOLDER)))
    printed = _clean(done)
    assert "This copy of the course has no repository set" in printed
    assert "ask the person who built it" in printed
    assert calls == []


@pytest.mark.parametrize("gpu", [False, True])
def test_it_installs_the_books_version_with_colabs_torch_and_triton_pinned(tmp_path, gpu):
    done, calls = _on_colab(tmp_path, colab.cell_source(_book(tmp_path, FORK)), gpu=gpu)
    printed = _clean(done)
    version = colab.book_version()
    assert len(calls) == 1, calls
    args = calls[0]["args"]
    assert "--constraint" in args and calls[0]["pins"].split() == [
        "torch==2.13.0+cu126",
        "triton==3.9.0",
    ]
    assert args[0] == "install" and args[-2:] == [
        f"brrr @ git+{FORK}@v{version}",
        # the pages' hidden cells import brrr_book
        f"brrr-book @ git+{FORK}@v{version}#subdirectory=book",
    ]
    assert f"brrr {version} installed" in printed
    if gpu:
        assert "GPU runtime is attached" in printed
    else:
        assert "No GPU attached" in printed and "Change runtime type" in printed


def test_a_failed_install_says_how_to_try_again_without_a_traceback(tmp_path):
    done, calls = _on_colab(tmp_path, colab.cell_source(_book(tmp_path, FORK)), pip_status=1)
    printed = _clean(done)
    version = colab.book_version()
    assert len(calls) == 1
    assert f"brrr {version} was not installed" in printed and f"lack the tag v{version}" in printed
    retry = printed.split("run this cell again, or:\n", 1)[1].strip()
    assert retry.startswith("!pip install ") and "--constraint" in retry
    assert shlex.split(retry[1:])[1:] == calls[0]["args"]
    assert "installed;" not in printed and "installed." not in printed


def test_a_runtime_with_an_older_torch_than_brrr_needs_is_told_so_and_left_alone(tmp_path):
    done, calls = _on_colab(
        tmp_path,
        colab.cell_source(_book(tmp_path, FORK)),
        versions=(("torch", "2.9.0+cu126"), ("triton", "3.5.0")),
    )
    printed = _clean(done)
    least = colab.least_versions()["torch"]
    assert "This runtime has torch 2.9.0+cu126" in printed
    assert f"needs torch {least[0]}.{least[1]} or later" in printed
    assert calls == []


def test_the_cells_torch_and_triton_floors_are_the_packages():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {
        name: tuple(int(part) for part in bound.split(">=")[1].split(".")[:2])
        for bound in dependencies
        for name in colab.PINNED
        if bound.startswith(f"{name}>=")
    }
    assert colab.least_versions() == floors and set(floors) == {"torch", "triton"}


# ---------------------------------------------------------------- what the build says


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def test_the_build_names_the_placeholder_and_a_missing_tag(tmp_path):
    assert "placeholder" in colab.release_problem(_book(tmp_path, colab.PLACEHOLDER))
    fork = _book(tmp_path, FORK)
    assert "cannot tell whether the tag" in colab.release_problem(fork)  # not a git checkout
    _git(fork, "init", "-q")
    _git(fork, "add", ".")
    _git(fork, "commit", "-q", "-m", "book")
    tag = f"v{colab.book_version()}"
    assert f"this checkout has no tag {tag}" in colab.release_problem(fork)
    _git(fork, "tag", tag)
    assert colab.release_problem(fork) is None


def test_the_book_build_prints_the_problem_as_a_notice_not_a_warning(monkeypatch, tmp_path):
    from brrr_book import book_pages

    said = []

    class Logger:  # no warning(): a Sphinx warning would fail the -W builds
        def info(self, message, **kwargs):
            said.append(message)

    monkeypatch.setattr(book_pages, "logger", Logger())
    app = types.SimpleNamespace(srcdir=str(_book(tmp_path, colab.PLACEHOLDER)))
    book_pages._colab_notice(app, None)
    assert len(said) == 1 and "placeholder" in said[0] and "Colab" in said[0]
    book_pages._colab_notice(
        app, RuntimeError("the build failed")
    )  # then the build's error is the news
    assert len(said) == 1


def test_the_version_and_repository_come_from_the_checkout():
    import yaml

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert colab.book_version() == project["version"]
    assert colab.book_repository() == config["repository"]["url"].rstrip("/")


def test_with_the_placeholder_repository_the_book_shows_no_launch_button():
    """The Colab buttons opened github.com/your-org/brrr, a repository that does not exist: while
    repository.url is the placeholder the theme gets no launch buttons; a fork keeps them."""
    from brrr_book import book_pages

    buttons = {"colab_url": "https://colab.research.google.com"}
    placeholder = {"repository_url": colab.PLACEHOLDER + "/", "launch_buttons": dict(buttons)}
    assert book_pages.drop_placeholder_launch_buttons(placeholder)
    assert "launch_buttons" not in placeholder
    fork = {"repository_url": FORK, "launch_buttons": dict(buttons)}
    assert not book_pages.drop_placeholder_launch_buttons(fork)
    assert fork["launch_buttons"] == buttons
