"""Write the student labs from the solutions: ``labs/NN-name.ipynb`` from
``solutions/NN-name.ipynb``.

One source for each lab (docs/DESIGN.md, "Labs come from one source"). In a
solution notebook, the answer code sits between nbgrader's markers::

    def ridge_point(peak_flops, bandwidth):
        ### BEGIN SOLUTION
        return peak_flops / bandwidth
        ### END SOLUTION

and the lab gets, at the same indentation, a stub that fails loudly::

    def ridge_point(peak_flops, bandwidth):
        raise NotImplementedError("Exercise: write the body of ridge_point()")

Put solution blocks inside function bodies: then an unsolved lab still runs from
top to bottom, and each grader cell fails with "not written yet" instead of the
notebook stopping at the first exercise. Cells tagged ``solution-only`` (e.g. a
note that the reader is looking at the worked solution) are left out of the lab;
everything else, outputs excepted, is copied as it is.

    python -m brrr.labs            # (re)write labs/ from solutions/
    python -m brrr.labs --check    # exit 1 if labs/ is not what this would write

It works on a checkout of the repository (solutions/ beside brrr/). Run from a
pip-installed brrr it says so and stops, rather than write into site-packages.

Writing is idempotent: the same solutions give byte-identical labs.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent.parent
SOLUTIONS = ROOT / "solutions"
LABS = ROOT / "labs"

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
SOLUTION_ONLY_TAG = "solution-only"
WIDTH = 80  # the longest line a code cell may hold (tests/book/test_code_width.py)

_DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)\s*\(")


class LabError(ValueError):
    """A solution notebook whose markers are malformed."""


def _enclosing_function(lines: list[str], index: int, indent: int) -> str | None:
    """The name of the innermost ``def`` above line ``index`` that is less indented than
    ``indent``."""
    for line in reversed(lines[:index]):
        match = _DEF.match(line)
        if match and len(match.group(1)) < indent:
            return match.group(2)
    return None


def stub_line(indent: str, function: str | None) -> str:
    """The stub's ``raise``: one line, or two where one would pass :data:`WIDTH` characters."""
    where = f"write the body of {function}()" if function else "write this part"
    line = f'{indent}raise NotImplementedError("Exercise: {where}")'
    if len(line) <= WIDTH:
        return line
    return f'{indent}raise NotImplementedError(\n{indent}    "Exercise: {where}")'


def strip_solutions(source: str, *, where: str = "a cell") -> str:
    """``source`` with each BEGIN/END SOLUTION block replaced by a NotImplementedError stub."""
    lines = source.split("\n")
    out: list[str] = []
    inside_since: int | None = None
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside_since is not None:
                raise LabError(
                    f"{where}: line {number + 1} opens a solution block inside another "
                    f"(opened on line {inside_since + 1})"
                )
            inside_since = number
            indent = line[: len(line) - len(line.lstrip())]
            out.append(stub_line(indent, _enclosing_function(lines, number, len(indent))))
        elif stripped.startswith(END):
            if inside_since is None:
                raise LabError(
                    f"{where}: line {number + 1} closes a solution block that was never opened"
                )
            inside_since = None
        elif inside_since is None:
            out.append(line)
    if inside_since is not None:
        raise LabError(
            f"{where}: the solution block opened on line {inside_since + 1} is never closed"
        )
    return "\n".join(out)


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def lab_notebook(solution, *, name: str = "notebook"):
    """The lab version of a solution notebook (an nbformat node): stubs in, solution-only cells and
    outputs out."""
    lab = copy.deepcopy(solution)
    cells = []
    for number, cell in enumerate(lab.get("cells", [])):
        if SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.get("cell_type") == "code":
            cell["source"] = strip_solutions(_source(cell), where=f"{name}, cell {number}")
            cell["outputs"] = []
            cell["execution_count"] = None
        elif BEGIN in _source(cell):
            raise LabError(f"{name}, cell {number}: solution markers belong in code cells")
        cells.append(cell)
    lab["cells"] = cells
    return lab


def read(path: Path):
    return nbformat.read(str(path), as_version=4)


def dumps(notebook) -> str:
    """Notebook text exactly as Jupyter writes it (nbformat v4), so that the output is stable."""
    text = nbformat.writes(notebook, version=4)
    return text if text.endswith("\n") else text + "\n"


def render_all(solutions: Path = SOLUTIONS) -> dict[str, str]:
    """Lab file name -> lab notebook text, for every solution notebook."""
    rendered = {}
    for path in sorted(solutions.glob("*.ipynb")):
        solution = read(path)
        rendered[path.name] = dumps(
            lab_notebook(solution, name=str(path.relative_to(solutions.parent)))
        )
    return rendered


def stale(solutions: Path = SOLUTIONS, labs: Path = LABS) -> list[str]:
    """Lab files that differ from what :func:`write` would write, or that have no solution."""
    rendered = render_all(solutions)
    problems = [
        name
        for name, text in rendered.items()
        if not (labs / name).exists() or (labs / name).read_text(encoding="utf-8") != text
    ]
    problems += [
        path.name + " (no solution)"
        for path in sorted(labs.glob("*.ipynb"))
        if path.name not in rendered
    ]
    return problems


def write(solutions: Path = SOLUTIONS, labs: Path = LABS) -> list[Path]:
    """(Re)write every lab; return the files whose content changed."""
    labs.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in render_all(solutions).items():
        target = labs / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            changed.append(target)
    return changed


def needs_a_checkout(solutions: Path) -> str | None:
    """Why this command cannot run here, or None when ``solutions`` is a folder of solutions."""
    if solutions.is_dir():
        return None
    return (
        f"python -m brrr.labs writes labs/ from solutions/ in a checkout of the brrr "
        f"repository, and there is no {solutions} here (this brrr is installed at "
        f"{ROOT / 'brrr'}). Run it in a clone: `make labs`, or pass --solutions and --labs."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m brrr.labs", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if labs/ differs from what would be written"
    )
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS)
    parser.add_argument("--labs", type=Path, default=LABS)
    args = parser.parse_args(argv)
    problem = needs_a_checkout(args.solutions)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if args.check:
        problems = stale(args.solutions, args.labs)
        for problem in problems:
            print(f"out of date: {args.labs / problem}")
        if problems:
            print("run `make labs` (python -m brrr.labs) and commit labs/")
        return 1 if problems else 0
    changed = write(args.solutions, args.labs)
    for path in changed:
        print(f"wrote {path}")
    print(f"{len(changed)} lab(s) changed in {args.labs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
