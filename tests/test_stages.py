"""The suite's two stages: `make test` within its ten minutes, and the end-to-end stage `make
test-e2e` (the book's clean build, its pages in Chromium, whole gradebook runs), both run by CI
(MAINTAINING.md, "The test suite")."""

import re
import types
from pathlib import Path

import pytest

import conftest
from conftest import ROOT


def recipe(target: str) -> str:
    """The command lines of a Makefile target."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.MULTILINE)
    assert match, f"no recipe for {target} in the Makefile"
    return match.group(1)


def test_make_test_leaves_the_end_to_end_stage_to_its_own_command_and_ci_runs_both_then_stacks():
    assert '-m "not e2e"' in recipe("test")
    assert re.search(r"-m e2e\b", recipe("test-e2e"))
    steps = [
        line.strip().removeprefix("step ")
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
    ]
    steps = [step for step in steps if step.startswith("make ")]
    assert steps == ["make test", "make test-e2e", "make test-stacks"], steps


class _Item:
    def __init__(self, path: str, fixturenames: tuple[str, ...]):
        self.path = Path(path)
        self.fixturenames = fixturenames
        self.markers: list[str] = []

    def add_marker(self, marker):
        self.markers.append(marker.name)


@pytest.mark.parametrize("fixture", conftest.E2E_FIXTURES)
def test_every_test_that_reads_the_built_book_is_in_the_end_to_end_stage(fixture):
    reads = _Item("tests/library/test_new.py", ("tmp_path", fixture))
    builds_its_own = _Item("tests/book/test_book_build.py", ("tmp_path",))
    config = types.SimpleNamespace(getoption=lambda name: "not e2e")
    conftest.pytest_collection_modifyitems(config, [reads, builds_its_own])
    assert reads.markers == ["e2e"] and builds_its_own.markers == []


def test_without_the_book_the_files_that_compile_its_graphs_go_early_and_with_it_last():
    """They run from the book's Inductor cache where the run builds the book; `make test` builds
    none."""
    files = [
        "tests/library/test_opclasses.py",
        "tests/diagnose/test_diagnose.py",
        "tests/grading/test_gradebook_hostile.py",
    ]

    def ordered(markexpr):
        items = [_Item(path, ()) for path in files]
        conftest.pytest_collection_modifyitems(
            types.SimpleNamespace(getoption=lambda name: markexpr), items
        )
        return [item.path.name for item in items]

    assert ordered("not e2e") == [
        "test_gradebook_hostile.py",
        "test_diagnose.py",
        "test_opclasses.py",
    ]
    assert ordered(None) == ["test_gradebook_hostile.py", "test_opclasses.py", "test_diagnose.py"]


def test_under_xdist_some_files_run_on_the_worker_of_another_right_after_it(monkeypatch):
    """pytest-xdist's scheduling by file, less two files: the browser's is in the book's unit of
    work (it reads the build), and the unsolved labs' in the hostile run's (two gradebook runs of
    two notebooks at a time side by side starved a grader)."""
    scheduler = object.__new__(conftest.FilesTogether)
    assert scheduler._split_scope(f"{conftest.BOOK_FILE}::test_book_builds") == conftest.BOOK_FILE
    assert (
        scheduler._split_scope("tests/book/test_book_in_a_browser.py::test_a") == conftest.BOOK_FILE
    )
    assert scheduler._split_scope("tests/labs/test_labs.py::test_c") == conftest.HOSTILE_FILE
    assert (
        scheduler._split_scope("tests/book/test_claims.py::test_b") == "tests/book/test_claims.py"
    )
    monkeypatch.setattr(
        conftest, "FilesTogether", lambda config, log: ("files together", config.dist)
    )
    for dist, scheduler in (("loadfile", ("files together", "loadfile")), ("load", None)):
        config = types.SimpleNamespace(dist=dist, getoption=lambda name, dist=dist: dist)
        assert conftest.pytest_xdist_make_scheduler(config, None) == scheduler
