"""The package's top layers import downwards only (docs/DESIGN.md, "Layers"): the check library
(brrr/checks/) imports neither the labs nor the gradebook, and the labs (brrr/labs/) do not import the
gradebook (brrr/grading/). Every import counts, at module level and inside functions alike.

Each lab's package and given material are what the student's process imports: they import neither
the lab's checks nor a module the lab hides from the student (its ``HIDDEN_MODULES``)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from brrr import labs

pytestmark = pytest.mark.device_independent

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "brrr"

# A layer and the packages its modules may not import.
FORBIDDEN = {"checks": ("brrr.labs", "brrr.grading"), "labs": ("brrr.grading",)}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, module_level_only: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import in ``path``: ``import a.b`` gives ``a.b``, ``from a import b`` gives
    ``a`` and ``a.b`` (b may be a module), a relative import is resolved against the file's package."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def upward_imports(layer: str) -> list[str]:
    wrong = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for line, name in imports(path):
            if any(within(name, forbidden) for forbidden in FORBIDDEN[layer]):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return wrong


def test_the_imports_are_read_from_every_module():
    """The control: the reader finds imports at module level and inside functions, relative ones too."""
    server = imports(PACKAGE / "grading" / "server.py")
    assert any(name == "brrr.labs" for _, name in server)  # inside main()
    assert any(name == "brrr.checks.core" for _, name in server)  # at module level
    assert len(list((PACKAGE / "checks").glob("*.py"))) >= 8 and len(list((PACKAGE / "labs").rglob("*.py"))) >= 20


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_import_runs_back_up(layer):
    wrong = upward_imports(layer)
    where = '(docs/DESIGN.md, "Layers")'
    assert not wrong, f"brrr/{layer}/ may not import {' or '.join(FORBIDDEN[layer])} {where}:\n" + "\n".join(wrong)


def refused_modules(lab: str) -> list[str]:
    package = labs.module(lab)
    return [f"{package.__name__}.checks"] + [f"brrr.{name}" for name in package.HIDDEN_MODULES]


# One process imports torch, as a lab notebook's first cell does, then forks a child per lab that imports
# the lab and names the refused modules it finds loaded: one torch import for all six, not six.
PROBE = """
import importlib, json, os, sys
import torch
found = {}
for lab, (package, refused) in json.loads(sys.argv[1]).items():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        importlib.import_module(package)
        os.write(write, " ".join(m for m in refused if m in sys.modules).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    found[lab] = text if os.waitstatus_to_exitcode(status) == 0 else f"import failed ({status})"
print(json.dumps(found))
"""


# The control, probed in the same run: fuse_it's given.py imports brrr.checks.core, so it must be found.
CONTROL = ("brrr.labs.fuse_it", ["brrr.checks.core", "brrr.labs.fuse_it.checks"])


@pytest.fixture(scope="module")
def loaded_by_importing_each_lab() -> dict[str, str]:
    cases = {lab: (labs.module(lab).__name__, refused_modules(lab)) for lab in labs.LABS} | {"control": CONTROL}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(cases)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_import_probe_sees_a_module_the_lab_imports(loaded_by_importing_each_lab):
    assert loaded_by_importing_each_lab["control"] == "brrr.checks.core"


@pytest.mark.parametrize("lab", sorted(labs.LABS))
def test_what_the_student_imports_leaves_the_checks_and_the_hidden_modules_out(lab, loaded_by_importing_each_lab):
    package = labs.module(lab)
    folder = Path(package.__file__).parent
    refused = refused_modules(lab)
    for path in (folder / "__init__.py", folder / "given.py"):
        found = [
            f"{path.relative_to(ROOT)}:{line} imports {name}"
            for line, name in imports(path, module_level_only=True)
            if any(within(name, module) for module in refused)
        ]
        assert not found, "\n".join(found)
    # and so it is at run time: importing the lab as the notebook does imports none of them
    loaded = loaded_by_importing_each_lab[lab]
    assert loaded == "", f"importing {package.__name__} imported {loaded}"


@pytest.mark.parametrize("lab", sorted(labs.LABS))
def test_every_lab_runs_its_checks_the_one_way(lab):
    checks = labs.lab(lab)
    assert checks.__name__ == f"{labs.LABS[lab]}.checks" and checks.LAB == lab
    assert set(checks.GRADERS) == set(checks.ALL_CHECKS) == set().union(*checks.CHECKS.values())
    assert checks.grade == checks.GRADERS.grade
    with pytest.raises(KeyError, match=f"{lab} has no check 'nonsense'"):
        checks.grade("nonsense", student=None)


# Modules that measure: they return numbers (and notes for a page), and only their command-line main()
# prints (docs/DESIGN.md, "Layers"; issue 28).
MEASURING = ["ceilings.py", "timing.py", "counting.py", "traffic.py", "benchmarks"]


def prints_outside_main(path: Path, root: Path = ROOT) -> list[str]:
    """'path:line function' for every print() call in ``path`` that is not inside a function named main
    (or a command's run loop, ``run``, which main calls and which reports progress)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, inside: str | None):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else inside
            if isinstance(child, ast.Call) and getattr(child.func, "id", None) == "print":
                if inside not in ("main", "run"):
                    found.append(f"{path.relative_to(root)}:{child.lineno} {inside or '<module>'}")
            visit(child, "main" if inside == "main" else name)

    visit(tree, None)
    return found


def test_a_measuring_module_never_prints():
    paths = []
    for name in MEASURING:
        target = PACKAGE / name
        paths += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    found = [line for path in paths for line in prints_outside_main(path)]
    assert len(paths) > 8 and not found, "return the sentence to the page instead:\n" + "\n".join(found)


def test_the_print_finder_sees_a_print_in_a_measuring_function(tmp_path):
    """The control: a print in a measuring function is found; one in main, or in a function inside it, is not."""
    source = tmp_path / "m.py"
    source.write_text(
        "def measure():\n    print('x')\n\ndef main():\n    def show():\n        print('y')\n    print('z')\n"
    )
    assert prints_outside_main(source, root=tmp_path) == ["m.py:2 measure"]
