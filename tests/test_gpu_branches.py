"""No branch only a GPU executes goes unread: every notebook (its code cells one namespace, in
order) and brrr/ are read, never run, both arms of each `if ON_GPU:` alike, for undefined names
(ruff F821-F823; on brrr/ tests/test_style.py runs them) and for imports not found: a module not
installed, a name brrr lacks."""

import ast
import functools
import importlib.util
import json
import re
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from test_style import ruff

pytestmark = pytest.mark.device_independent  # source read, never run: the same on every device

NOTEBOOKS = sorted(
    path
    for folder in ("notebooks", "solutions", "labs")
    for path in (ROOT / folder).glob("*.ipynb")
)
# Where each of our packages' sources lie: the toolkit, and the book's machinery beside it.
SOURCES = {"brrr": ROOT, "brrr_book": ROOT / "book"}
# Names IPython puts in a notebook's namespace, which no cell defines.
IPYTHON = {"display", "get_ipython"}
# Ruff reads a lambda's body at the end of the module, after the cell's `del layer, x`; the lambda
# runs before.
LAMBDA_THEN_DEL = {("21-flops-vs-runtime.ipynb", "cell-03", name) for name in ("layer", "x")}


def notebook_source(path: Path) -> tuple[str, list[str]]:
    """A notebook's code cells as one module, each magic line made a `pass`, and the cell id of each
    line."""
    lines, cells = [], []
    for cell in json.loads(path.read_text())[
        "cells"
    ]:  # as stored: nbformat's validation is not the point here
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or source.lstrip().startswith("%%"):
            continue  # a cell magic's body is not Python
        for line in source.splitlines():
            code = line.lstrip()
            lines.append(
                line[: len(line) - len(code)] + "pass" if code.startswith(("%", "!")) else line
            )
            cells.append(cell.get("id", "?"))
    return "\n".join(lines) + "\n", cells


@functools.cache
def names_of(module: str) -> set[str] | None:
    """The names a module of brrr or brrr_book defines at its top level, and its submodules; None if
    there is no such file."""
    path = SOURCES[module.partition(".")[0]].joinpath(*module.split("."))
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not file.exists():
        return None
    names, todo = {p.stem for p in path.glob("*")}, list(ast.parse(file.read_text()).body)
    while todo:  # into if/try/with blocks, not into functions or classes
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return names | {"*"} if "__getattr__" in names else names


def missing_imports(source: str) -> list[tuple[int, str]]:
    """(line, what) for each import, in any branch, of a module that is not found or a name it
    lacks."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
            for alias in node.names:
                module, name = (
                    (node.module, alias.name)
                    if isinstance(node, ast.ImportFrom)
                    else (alias.name, None)
                )
                top = module.partition(".")[0]
                if top not in SOURCES:
                    found += (
                        [(node.lineno, f"no module {top}")]
                        if importlib.util.find_spec(top) is None
                        else []
                    )
                elif (names := names_of(module)) is None:
                    found.append((node.lineno, f"no module {module}"))
                elif name and not {name, "*"} & names:
                    found.append((node.lineno, f"{module} has no {name}"))
    return found


def notebook_findings(notebooks: list[Path], scratch: Path) -> list[str]:
    """'notebook, cell id: problem' for every undefined name and unfound import in the notebooks."""
    sources, found = {}, []
    for index, notebook in enumerate(notebooks):
        (source, cells), file = notebook_source(notebook), scratch / f"notebook_{index}.py"
        file.write_text(source)
        sources[file.name] = notebook, cells
        found += [
            f"{notebook.name}, cell {cells[line - 1]}: {what}"
            for line, what in missing_imports(source)
        ]
    done = ruff(
        "check",
        "--isolated",
        "--select",
        "F821,F822,F823",
        "--output-format",
        "json",
        ".",
        cwd=scratch,
    )
    assert done.returncode in (0, 1), done.stderr
    for problem in json.loads(done.stdout or "[]"):
        notebook, cells = sources[Path(problem["filename"]).name]
        cell, name = (
            cells[problem["location"]["row"] - 1],
            re.search(r"`(.+?)`", problem["message"]),
        )
        if not (name and (name[1] in IPYTHON or (notebook.name, cell, name[1]) in LAMBDA_THEN_DEL)):
            found.append(f"{notebook.name}, cell {cell}: {problem['message']}")
    return found


def test_every_notebook_reads_clean_on_both_branches(tmp_path):
    assert notebook_findings(NOTEBOOKS, tmp_path) == []


def test_every_import_of_the_package_is_found():
    found = []
    for path in sorted(
        path for folder in SOURCES.values() for path in folder.glob("brrr*/**/*.py")
    ):
        found += [
            f"{path.relative_to(ROOT)}:{line}: {what}"
            for line, what in missing_imports(path.read_text())
        ]
    assert found == []


def test_the_check_reads_a_branch_only_a_gpu_executes(tmp_path):
    """The control: a GPU-only branch with an undefined name and two imports that fail is reported,
    by cell."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "%matplotlib inline\nfrom brrr.device import ON_GPU\nsizes = [1]", id="set-up"
        ),
        nbformat.v4.new_code_cell(
            "if ON_GPU:\n    import no_such_module\n    from brrr.device import no_such_name\n"
            "    print(undefined_name, max(sizes))\nelse:\n    display(sizes)",
            id="gpu-only",
        ),
    ]
    nbformat.write(notebook, tmp_path / "synthetic.ipynb")
    (scratch := tmp_path / "scratch").mkdir()
    assert sorted(notebook_findings([tmp_path / "synthetic.ipynb"], scratch)) == [
        "synthetic.ipynb, cell gpu-only: Undefined name `undefined_name`",
        "synthetic.ipynb, cell gpu-only: brrr.device has no no_such_name",
        "synthetic.ipynb, cell gpu-only: no module no_such_module",
    ]
