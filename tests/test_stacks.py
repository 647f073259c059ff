"""The stacks brrr supports (.ci/stacks.toml) are the ones it is tested on, and the only ones it
accepts: the pinned stack is requirements.txt's, CI runs `make test-stacks` on the others
(tests/test_stages.py), and pyproject.toml's lower bounds (which the Colab cell's refusal reads) are
the oldest stack's."""

import re
import tomllib

import pytest
from conftest import ROOT

from brrr_book import colab

pytestmark = pytest.mark.device_independent

CONFIG = tomllib.loads((ROOT / ".ci" / "stacks.toml").read_text())
STACKS = CONFIG["stacks"]
PACKAGES = ("torch", "triton")


def minor(version: str) -> tuple[int, int]:
    major, minor_, *_ = (int(part) for part in re.findall(r"\d+", version))
    return major, minor_


def test_the_pinned_stack_is_requirements_txt():
    pins = dict(
        re.findall(r"^(torch|triton)==(\S+)", (ROOT / "requirements.txt").read_text(), re.MULTILINE)
    )
    assert {name: STACKS["pinned"][name] for name in PACKAGES} == pins


def test_the_lower_bounds_and_the_colab_cell_are_the_oldest_stack_tested(monkeypatch):
    monkeypatch.setattr(
        colab, "book_repository", lambda root: "https://github.com/a-course/brrr"
    )  # a fork's
    oldest = {name: min(minor(stack[name]) for stack in STACKS.values()) for name in PACKAGES}
    assert colab.least_versions() == oldest, (
        "pyproject.toml's lower bounds are not the oldest stack CI tests"
    )
    minima = colab._literal(oldest)
    assert minima in colab.cell_source(), (
        "the Colab cell refuses other versions than pyproject.toml's bounds"
    )


def test_every_stack_names_its_versions_and_the_files_it_runs_are_there():
    assert len(STACKS) >= 3 and all(
        {"torch", "triton", "what"} <= set(stack) for stack in STACKS.values()
    )
    missing = [
        name
        for name in CONFIG["run"]["tests"] + CONFIG["run"]["notebooks"]
        if not (ROOT / name).exists()
    ]
    assert not missing, f".ci/stacks.toml names files that are not there: {missing}"
