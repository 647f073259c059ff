"""What runs for a submission: the instructor's lab with the student's answer cells, and fresh copies of brrr.

:class:`Snapshot` reads the ``brrr`` package and the lab notebooks into memory
once, when the gradebook starts. For every submission it then writes:

- a **grader copy** of ``brrr``, from those bytes, made read-only, that the
  grader process imports before any student code runs. A submission that edits
  files on disk (the checkout, or an earlier copy) cannot change the grader that
  grades the submissions after it;
- a **student copy** of ``brrr`` for the notebook's kernel, without the lab's
  ``HIDDEN_MODULES``;
- the **notebook** that runs (:func:`splice`): every cell comes from the lab as
  generated from ``solutions/``, except the answer cells (those that hold a
  ``### BEGIN SOLUTION`` block in the solution), which come from the submission.
"""

from __future__ import annotations

import ast
import copy
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from brrr.labs import generate

PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass
class Splice:
    notebook: nbformat.NotebookNode
    answers_found: list[str] = field(default_factory=list)
    answers_missing: list[str] = field(default_factory=list)
    ignored_edits: int = 0  # changed or added cells outside the answer cells


class Snapshot:
    """The grader's files and the labs, as they were when grading started."""

    def __init__(self, root: Path = PACKAGE_ROOT):
        self.files: dict[str, bytes] = {}
        package = root / "brrr"
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".json", ".txt"):
                self.files[str(path.relative_to(root))] = path.read_bytes()
        self.labs: dict[str, nbformat.NotebookNode] = {}
        self.answers: dict[str, list[str]] = {}
        for path in sorted((root / "solutions").glob("*.ipynb")):
            solution = generate.read(path)
            self.labs[path.stem] = generate.lab_notebook(solution, name=path.name)
            self.answers[path.stem] = [cell.get("id") for cell in solution.cells
                                       if cell.get("cell_type") == "code" and generate.BEGIN in cell.source]

    def write_package(self, target: Path, *, hidden: tuple[str, ...] = ()) -> Path:
        """Write ``brrr`` under ``target`` (without ``brrr/<hidden>.py``), read-only; return ``target``."""
        skip = {os.path.join("brrr", f"{name}.py") for name in hidden}
        for relative, data in self.files.items():
            if relative in skip:
                continue
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        for path in sorted(target.rglob("*"), reverse=True):
            mode = path.stat().st_mode
            path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        return target


def make_writable(target: Path) -> None:
    """Undo :meth:`Snapshot.write_package`'s read-only bits, so the folder can be removed."""
    if not target.exists():
        return
    for path in [target, *target.rglob("*")]:
        try:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        except OSError:
            pass


def _defined_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def splice(lab: nbformat.NotebookNode, answer_ids: list[str], submission: nbformat.NotebookNode) -> Splice:
    """The lab notebook with its answer cells taken from ``submission``.

    An answer cell is matched by its cell id, or failing that by the functions it
    defines (the last cell of the submission that defines all of them). An
    answer cell with no match keeps the lab's stub. Everything else the student
    changed or added is left out, and counted in ``ignored_edits``.
    """
    notebook = copy.deepcopy(lab)
    submitted = [cell for cell in submission.get("cells", []) if cell.get("cell_type") == "code"]
    by_id = {cell.get("id"): cell for cell in submitted if cell.get("id")}
    result = Splice(notebook)
    used = set()
    for cell in notebook.cells:
        if cell.get("id") not in answer_ids:
            continue
        match = by_id.get(cell.get("id"))
        if match is None:
            wanted = _defined_names(cell.source)
            candidates = [c for c in submitted if wanted and wanted <= _defined_names(_text(c))]
            match = candidates[-1] if candidates else None
        if match is None:
            result.answers_missing.append(cell.get("id"))
            continue
        cell.source = _text(match)
        used.add(id(match))
        result.answers_found.append(cell.get("id"))
    given = {c.get("id"): c.source for c in notebook.cells if c.get("cell_type") == "code"}
    result.ignored_edits = sum(1 for c in submitted if id(c) not in used
                               and given.get(c.get("id")) != _text(c))
    notebook.metadata.setdefault("brrr", {})
    return result


def _text(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)
