"""Committed notebooks carry no outputs: Colab and nbval run them as they are (docs/DESIGN.md, "The
book build")."""

import json

import pytest

from conftest import ROOT

NOTEBOOKS = sorted(
    p for folder in ("notebooks", "labs", "solutions") for p in (ROOT / folder).glob("*.ipynb")
)


def test_there_are_notebooks_to_check():
    assert NOTEBOOKS, "no notebooks found: the glob is wrong"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_has_no_outputs(path):
    notebook = json.loads(path.read_text())
    dirty = [
        i
        for i, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} carry outputs; strip them (e.g. `jupyter nbconvert "
        "--clear-output`)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cell_has_a_unique_id(path):
    """nbformat 4.5 cells carry ids (newer nbformat refuses cells without); the gradebook tells a
    lab by its cell ids."""
    ids = [cell.get("id") for cell in json.loads(path.read_text())["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), (
        f"{path.name}: cells without an id or with a repeated one"
    )
