"""What runs for a submission: the instructor's lab with the student's answer cells, and fresh
copies of brrr.

:class:`Snapshot` reads the ``brrr`` package and the lab notebooks into memory
once, when the gradebook starts. For every submission it then writes:

- the **grader's** ``brrr``, handed to the grader process as those bytes
  (:meth:`Snapshot.grader_payload`) and imported from memory by
  :data:`GRADER_BOOTSTRAP` (:mod:`brrr.grading.bootstrap`). No copy of the
  grader exists on disk, so a submission that edits files (the checkout, or
  any copy) cannot change the grader that grades it, or the submissions after
  it;
- a **student copy** of ``brrr`` for the notebook's kernel, without the lab's
  ``HIDDEN_MODULES``, and the kernel's import path (:func:`kernel_path`), on
  which that copy is the only ``brrr``;
- the **notebook** that runs (:func:`splice`): every cell comes from the lab as
  generated from ``solutions/``, except the answer cells (those that hold a
  ``### BEGIN SOLUTION`` block in the solution), which come from the submission.

The solutions ship in the package as ``brrr/labs/solutions/`` (in a checkout, a
link to ``solutions/``), so a pip-installed brrr grades as a checkout does.
"""

from __future__ import annotations

import ast
import base64
import copy
import fnmatch
import importlib.util
import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from brrr.labs import generate

PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent  # the folder holding brrr/
# The instructor's checkout; None where brrr is installed from a wheel (PACKAGE_ROOT is
# site-packages then).
CHECKOUT = PACKAGE_ROOT if generate.SOLUTIONS.is_dir() else None
SOLUTIONS = Path(
    "brrr", "labs", "solutions"
)  # under PACKAGE_ROOT: the labs' solutions, as the package ships them
# Files of brrr that are the grader's side of a lab (how it is graded, and the answers it grades
# against): the student's copy never holds them, whatever the lab's HIDDEN_MODULES (the student's
# process imports only a lab's package and its given.py; only the grader process imports checks.py).
GRADER_SIDE = ("brrr/labs/*/checks.py",)
# Entries of a folder on sys.path that lead to the instructor's brrr: the package and its metadata,
# an editable install's hooks, and .pth files (a kernel started with -S runs none; they name folders
# and hooks).
TO_THE_INSTRUCTORS_BRRR = ("brrr", "brrr.py", "brrr-*", "__editable__*", "*.pth", "*.egg-link")


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
            if (
                path.is_file()
                and "__pycache__" not in path.parts
                and path.suffix in (".py", ".json", ".txt")
            ):
                self.files[str(path.relative_to(root))] = path.read_bytes()
        self.labs: dict[str, nbformat.NotebookNode] = {}
        self.answers: dict[str, list[str]] = {}
        self.solutions: dict[
            str, bytes
        ] = {}  # the labs' solutions as read, by path relative to root
        for path in sorted((root / SOLUTIONS).glob("*.ipynb")):
            self.solutions[str(path.relative_to(root))] = path.read_bytes()
            solution = generate.read(path)
            self.labs[path.stem] = generate.lab_notebook(solution, name=path.name)
            self.answers[path.stem] = [
                cell.get("id")
                for cell in solution.cells
                if cell.get("cell_type") == "code" and generate.BEGIN in cell.source
            ]

    def graded_files(self) -> dict[str, bytes]:
        """Every file this snapshot grades with: ``brrr``'s and the labs' solutions (for
        :mod:`brrr.grading.course`)."""
        return {**self.files, **self.solutions}

    def write_package(self, target: Path, *, hidden: tuple[str, ...] = ()) -> Path:
        """Write ``brrr`` under ``target`` (without ``brrr/<hidden>.py`` and the labs'
        :data:`GRADER_SIDE`), read-only; return ``target``."""
        skip = {os.path.join("brrr", f"{name}.py") for name in hidden}
        for relative, data in self.files.items():
            grader_side = any(
                fnmatch.fnmatchcase(relative.replace(os.sep, "/"), p) for p in GRADER_SIDE
            )
            if relative in skip or grader_side:
                continue
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        for path in sorted(target.rglob("*"), reverse=True):
            mode = path.stat().st_mode
            path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        return target

    def grader_payload(self) -> bytes:
        """One line for :data:`GRADER_BOOTSTRAP`'s standard input: every ``brrr`` file, base64 in
        JSON."""
        files = {
            relative.replace(os.sep, "/"): base64.b64encode(data).decode()
            for relative, data in self.files.items()
            if relative.endswith(".py")
        }
        return json.dumps(files).encode() + b"\n"


# The grader process's program, run as ``python -I -B -c GRADER_BOOTSTRAP --lab LAB --socket PATH``:
# the source of brrr.grading.bootstrap, read when this module is imported (by the gradebook, before
# any submission runs). It reads :meth:`Snapshot.grader_payload` from standard input, imports
# ``brrr`` from those bytes only, and runs :func:`brrr.grading.server.main`.
GRADER_BOOTSTRAP = importlib.util.find_spec("brrr.grading.bootstrap").loader.get_source(
    "brrr.grading.bootstrap"
)


def kernel_path(student_copy: Path, links: Path) -> list[str]:
    """The student kernel's import path: ``student_copy`` first, then this process's path without
    any other brrr.

    The checkout and the working folder are left out. A folder that holds
    brrr or an editable install's hooks (site-packages, whether brrr was
    installed from a wheel or as editable) is replaced by a new folder under
    ``links`` holding a link to each of its other entries: the kernel imports
    torch and ipykernel through those, and no import, however it searches the
    path, finds the instructor's brrr and the hidden modules in it. Only a path
    typed in or read off a link leads there, as to the checkout: no better
    than pasting the module's source.
    """
    path = [str(student_copy)]
    leave_out = {Path.cwd().resolve()} | ({CHECKOUT} if CHECKOUT else set())
    for number, entry in enumerate(sys.path):
        folder = Path(entry).resolve() if entry else None
        if folder is None or folder in leave_out:
            continue
        names = sorted(os.listdir(folder)) if folder.is_dir() else []
        if not any(
            fnmatch.fnmatchcase(name, pattern)
            for name in names
            for pattern in TO_THE_INSTRUCTORS_BRRR
        ):
            path.append(entry)
            continue
        linked = links / str(number)
        linked.mkdir(parents=True)
        for name in names:
            if not any(fnmatch.fnmatchcase(name, pattern) for pattern in TO_THE_INSTRUCTORS_BRRR):
                (linked / name).symlink_to(folder / name)
        path.append(str(linked))
    return path


def make_writable(target: Path) -> None:
    """Undo :meth:`Snapshot.write_package`'s read-only bits, so the folder can be removed. Links are
    left alone: a chmod would follow them (into site-packages, from :func:`kernel_path`'s
    folders)."""
    if not target.exists():
        return
    for path in [target, *target.rglob("*")]:
        if path.is_symlink():
            continue
        try:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        except OSError:
            pass


def _defined_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def splice(
    lab: nbformat.NotebookNode, answer_ids: list[str], submission: nbformat.NotebookNode
) -> Splice:
    """The lab notebook with its answer cells taken from ``submission``.

    An answer cell is matched by its cell id, or failing that by the functions it
    defines (the last cell of the submission that defines all of them). An
    answer cell with no match keeps the lab's stub. Everything else the student
    changed or added is left out, and counted in ``ignored_edits`` (but for cells tagged
    ``solution-only``: an instructor grading a solution is not told that its own cells were left
    out)."""
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
    result.ignored_edits = sum(
        1
        for c in submitted
        if id(c) not in used
        and given.get(c.get("id")) != _text(c)
        and generate.SOLUTION_ONLY_TAG
        not in c.get("metadata", {}).get("tags", [])  # a solution's own cells
    )
    notebook.metadata.setdefault("brrr", {})
    return result


def _text(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)
