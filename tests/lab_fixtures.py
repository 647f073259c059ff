"""Build submitted notebooks from the solutions and the fixture sources in
tests/fixtures/submissions/.

A fixture is a Python file holding what a student put in one of a lab's answer
cells. Its notebook is the solution with that cell's source replaced, so
fixtures never drift from the lab. The docstring's ``expect: <text>`` is a
phrase the grader's message must contain when it rejects the fixture; a
``cell: <id>`` line names the answer cell it replaces (default: the lab's
:data:`EXERCISE_CELL`); a ``then: <fixture>`` line appends that fixture's source
(an attack followed by a correct answer, say).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "submissions"
SOLUTIONS = ROOT / "solutions"

# The id of the cell in each lab that a submission's fixture replaces.
EXERCISE_CELL = {
    "02-fuse-it": "fused-chain",
    "01-roofline": "copy-bandwidth",
    "03-one-pass": "softmax",
    "04-make-it-fast": "fast-train",
    "05-tile-it": "matmul",
    "06-flash-attention": "attention",
}


def fixture_path(lab: str, name: str) -> Path:
    return FIXTURES / lab / f"{name}.py"


def _docstring_field(lab: str, name: str, field: str) -> str | None:
    docstring = ast.get_docstring(ast.parse(fixture_path(lab, name).read_text())) or ""
    match = re.search(rf"{field}:\s*(.+)", docstring)
    return match.group(1).strip() if match else None


def expected_reason(lab: str, name: str) -> str:
    reason = _docstring_field(lab, name, "expect")
    if reason is None:
        raise ValueError(f"{fixture_path(lab, name)} has no 'expect:' line in its docstring")
    return reason


def load_module(lab: str, name: str):
    """Import a fixture as a module (Triton needs a real source file to read the kernels from)."""
    path = fixture_path(lab, name)
    spec = importlib.util.spec_from_file_location(f"fixture_{lab.replace('-', '_')}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def submission_notebook(lab: str, name: str):
    """The solution notebook of ``lab`` with its exercise cell replaced by the fixture's source."""
    notebook = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
    cell_id = _docstring_field(lab, name, "cell") or EXERCISE_CELL[lab]
    cells = [cell for cell in notebook.cells if cell.get("id") == cell_id]
    assert len(cells) == 1, f"{lab}: no single cell with id {cell_id!r}"
    cells[0].source = fixture_path(lab, name).read_text()
    then = _docstring_field(lab, name, "then")
    if then:
        cells[0].source += "\n\n" + fixture_path(lab, then).read_text()
    return notebook


def write_submission(folder: Path, lab: str, name: str, as_name: str | None = None) -> Path:
    path = folder / f"{as_name or name}.ipynb"
    nbformat.write(submission_notebook(lab, name), str(path))
    return path


def patch_lab(monkeypatch, lab, name: str, value) -> None:
    """Set ``name`` to ``value`` wherever the code of ``lab`` (its package, ``brrr.labs.fuse_it``
    say) reads it: the package, its given material and its checks each hold their own binding of a
    name they share (``checks`` imports ``COPY_N`` from ``given``, both import ``ON_GPU`` from
    ``brrr.device``)."""
    import importlib

    modules = [lab] + [
        importlib.import_module(f"{lab.__name__}.{part}") for part in ("given", "checks")
    ]
    holding = [module for module in modules if hasattr(module, name)]
    assert holding, f"no module of {lab.__name__} has {name}"
    for module in holding:
        monkeypatch.setattr(module, name, value)


def solution_on_gpu(folder, lab: str, cell_id: str, kernel: str):
    """The cell ``cell_id`` of ``lab``'s solution notebook as a module, answers included, on its GPU
    branch (``ON_GPU`` true), with ``kernel`` replaced by one that records its launches
    (``module.launches``: grid and keyword arguments), so that nothing runs and the device is asked
    only what a test fakes. Triton reads a kernel's source from a file: the cell is written to one
    in ``folder``."""
    cells = json.loads((SOLUTIONS / f"{lab}.ipynb").read_text())["cells"]
    (source,) = ["".join(cell["source"]) for cell in cells if cell.get("id") == cell_id]
    source = source.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", "")
    path = folder / f"solution_{cell_id}.py"
    path.write_text(
        "import torch\nimport triton\nimport triton.language as tl\nON_GPU = True\n" + source
    )
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.launches = []

    class Recorded:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: module.launches.append((grid, kwargs))

    setattr(module, kernel, Recorded())
    return module


@pytest.fixture
def never_starved(monkeypatch):
    """For tests about what a timed check says of a student's number, not about the grader's guard
    against a starved timing (tests/checks/test_fairness.py tests that): beside the neighbour load
    the guard voided every attempt and refused to grade (issue 51), so here it cannot refuse. The
    student's processes are still judged (``Watch.judge``)."""
    from brrr.checks import fairness

    monkeypatch.setattr(fairness.Watch, "void", lambda self: False)
