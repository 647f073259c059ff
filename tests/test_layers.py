"""The package's layers import downwards only (docs/DESIGN.md, "Layers"): every module of brrr has
its layer (:data:`LAYERS`) and imports only from its own or lower ones, and no modules import each
other round in a cycle. Every import counts, at module level and inside functions alike.

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

# docs/DESIGN.md's layers, from the bottom: each of brrr's modules and packages, by its layer.
LAYERS = {
    **dict.fromkeys(
        ("device", "interpreter", "units", "column", "stamp", "cache", "allocator", "timing"), 1
    ),
    **dict.fromkeys(
        ("ceilings", "roofline", "counting", "traffic", "opclasses", "datasheets", "essay"), 2
    ),
    **dict.fromkeys(("reference", "targets", "traces", "memory"), 2),
    **dict.fromkeys(("kernels", "benchmarks", "plots", "beside"), 3),
    **dict.fromkeys(("diagnose", "models"), 4),
    "checks": 5,
    "labs": 6,
    "grading": 7,
}


def module_name(path: Path) -> str:
    parts = path.with_suffix("").parts
    parts = parts[len(parts) - 1 - parts[::-1].index("brrr") :]  # from the package's folder down
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, module_level_only: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import in ``path``: ``import a.b`` gives ``a.b``, ``from a import
    b`` gives ``a`` and ``a.b`` (b may be a module), a relative import is resolved against the
    file's package."""
    tree = ast.parse(path.read_text(), str(path))
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    )
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


def room(name: str) -> str | None:
    """The module or package of brrr that ``name`` is in (``brrr.checks.core`` -> ``checks``), or
    None."""
    parts = name.split(".")
    return parts[1] if parts[0] == "brrr" and len(parts) > 1 and parts[1] != "__init__" else None


def upward_imports(package: Path = PACKAGE, layers: dict[str, int] = LAYERS) -> list[str]:
    wrong = []
    for path in sorted(package.rglob("*.py")):
        here = room(module_name(path))
        for line, name in imports(path) if here else ():
            there = room(name)
            if there in layers and layers[there] > layers.get(here, 0):
                wrong.append(
                    f"{path.relative_to(package.parent)}:{line} ({here}) imports {name} ({there})"
                )
    return wrong


def cycles(package: Path = PACKAGE) -> list[list[str]]:
    """The groups of brrr's modules that import each other round in a circle (Tarjan's algorithm). A
    module's import of its own package (``from brrr.diagnose import advice`` in brrr.diagnose.core)
    is how Python reaches a sibling, not a use of the package's ``__init__``, and is left out."""
    paths = {module_name(path): path for path in package.rglob("*.py")}
    graph = {
        name: {
            m for _, m in imports(path) if m in paths and m != name and not name.startswith(m + ".")
        }
        for name, path in paths.items()
    }
    order, low, stack, found = {}, {}, [], []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for after in graph[node]:
            if after not in order:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in stack:
                low[node] = min(low[node], order[after])
        if low[node] == order[node]:
            group = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            found.extend([sorted(group)] if len(group) > 1 else [])

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return found


def test_the_imports_are_read_from_every_module():
    """The control: the reader finds imports at module level and inside functions, relative ones
    too."""
    server = imports(PACKAGE / "grading" / "server.py")
    assert any(name == "brrr.labs" for _, name in server)  # inside main()
    assert any(name == "brrr.checks.core" for _, name in server)  # at module level
    assert (
        len(list((PACKAGE / "checks").glob("*.py"))) >= 8
        and len(list((PACKAGE / "labs").rglob("*.py"))) >= 20
    )


def test_every_module_has_its_layer():
    rooms = {room(module_name(path)) for path in PACKAGE.rglob("*.py")} - {None}
    assert rooms == set(LAYERS), (
        f"place these in docs/DESIGN.md's layers and LAYERS: {rooms ^ set(LAYERS)}"
    )


def test_no_import_runs_back_up():
    wrong = upward_imports()
    assert not wrong, 'an import runs up the layers (docs/DESIGN.md, "Layers"):\n' + "\n".join(
        wrong
    )


def test_no_modules_import_each_other_round_in_a_cycle():
    assert cycles() == []


def test_the_toolkit_never_imports_the_books_machinery():
    """brrr_book (book/) imports brrr, never the other way: brrr's wheel does not ship it
    (tests/test_wheel.py)."""
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, name in imports(path)
        if within(name, "brrr_book")
    ]
    assert found == []


def test_a_planted_back_import_and_cycle_are_found(tmp_path):
    """The control: a check that imports the gradebook inside a function, and two modules importing
    each other, in a made-up brrr."""
    (tmp_path / "brrr" / "checks").mkdir(parents=True)
    (tmp_path / "brrr" / "grading").mkdir()
    (tmp_path / "brrr" / "checks" / "core.py").write_text(
        "def f():\n    from brrr.grading import gradebook\n"
    )
    (tmp_path / "brrr" / "grading" / "gradebook.py").write_text("from brrr.grading import shards\n")
    (tmp_path / "brrr" / "grading" / "shards.py").write_text(
        "from brrr.grading.gradebook import x\n"
    )
    assert upward_imports(tmp_path / "brrr") == [
        "brrr/checks/core.py:2 (checks) imports brrr.grading (grading)",
        "brrr/checks/core.py:2 (checks) imports brrr.grading.gradebook (grading)",
    ]
    assert cycles(tmp_path / "brrr") == [["brrr.grading.gradebook", "brrr.grading.shards"]]


def refused_modules(lab: str) -> list[str]:
    package = labs.module(lab)
    return [f"{package.__name__}.checks"] + [f"brrr.{name}" for name in package.HIDDEN_MODULES]


def grader_references(lab: str) -> tuple[str, ...]:
    """The names of what a lab's checks compare a student's answer with (its
    ``GRADER_REFERENCES``)."""
    return tuple(getattr(labs.lab(lab), "GRADER_REFERENCES", ()))


# One process imports torch, as a lab notebook's first cell does, on the path the gradebook gives
# the student's process (brrr.grading.assemble.kernel_path: no site hooks, no way to the
# instructor's brrr), then forks a child per lab. The child puts the lab's student copy first on its
# path (or, for the control, the checkout), imports the lab, names the refused modules that import
# loaded, then tries to import each refused module itself and looks for each grader reference in the
# lab's package and given module.
PROBE = """
import importlib, json, os, sys
sys.path[:0] = json.loads(sys.argv[2])
import torch
found = {}
for lab, (path, package, refused, references) in json.loads(sys.argv[1]).items():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        if path:
            sys.path.insert(0, path)
        module = importlib.import_module(package)
        loaded = [m for m in refused if m in sys.modules]
        importable = []
        for name in refused:
            try:
                importlib.import_module(name)
                importable.append(name)
            except ImportError:
                pass
        given = sys.modules.get(package + ".given")
        reachable = [n for n in references if hasattr(module, n) or hasattr(given, n)]
        where = os.path.dirname(module.__file__)
        report = {"loaded": loaded, "importable": importable, "reachable": reachable, "from": where}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    imported = os.waitstatus_to_exitcode(status) == 0
    found[lab] = json.loads(text) if imported else f"import failed ({status})"
print(json.dumps(found))
"""


# The control, probed in the same run from the checkout: fuse_it's given.py imports
# brrr.checks.core, so it must be found loaded, and there its checks can be imported and a name of
# its given module found.
CONTROL = (
    str(ROOT),
    "brrr.labs.fuse_it",
    ["brrr.checks.core", "brrr.labs.fuse_it.checks"],
    ["chain"],
)


@pytest.fixture(scope="module")
def loaded_by_importing_each_lab(tmp_path_factory) -> dict[str, dict]:
    from brrr.grading import assemble

    snapshot = assemble.Snapshot()
    path = assemble.kernel_path(Path("student-copy"), tmp_path_factory.mktemp("path-links"))[1:]
    cases, copies = {"control": CONTROL}, []
    for lab in labs.LABS:
        package = labs.module(lab)
        copies.append(
            snapshot.write_package(
                tmp_path_factory.mktemp(lab), hidden=tuple(package.HIDDEN_MODULES)
            )
        )
        cases[lab] = (
            str(copies[-1]),
            package.__name__,
            refused_modules(lab),
            list(grader_references(lab)),
        )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROBE, json.dumps(cases), json.dumps(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path_factory.getbasetemp(),
    )
    for copy in copies:
        assemble.make_writable(copy)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_import_probe_sees_a_module_the_lab_imports(loaded_by_importing_each_lab):
    control = loaded_by_importing_each_lab["control"]
    assert control["loaded"] == ["brrr.checks.core"], control
    assert control["importable"] == CONTROL[2] and control["reachable"] == ["chain"], control


@pytest.mark.parametrize("lab", sorted(labs.LABS))
def test_what_the_student_imports_leaves_the_checks_and_the_hidden_modules_out(
    lab, loaded_by_importing_each_lab
):
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
    # and so it is at run time: importing the lab as the notebook does, from the student's copy,
    # imports none
    probed = loaded_by_importing_each_lab[lab]
    assert isinstance(probed, dict), f"importing {package.__name__} from a student's copy: {probed}"
    assert not probed["from"].startswith(str(ROOT)), probed  # the copy, not the checkout
    assert probed["loaded"] == [], f"importing {package.__name__} imported {probed['loaded']}"


@pytest.mark.parametrize("lab", sorted(labs.LABS))
def test_the_student_process_cannot_import_what_the_grader_compares_with(
    lab, loaded_by_importing_each_lab
):
    """Issue 29: the lab's checks, its hidden modules and every reference its checks compare an
    answer with (reference predictions, counts, the traffic rules) are out of reach of the student's
    process."""
    probed = loaded_by_importing_each_lab[lab]
    assert isinstance(probed, dict), f"importing {lab} from a student's copy: {probed}"
    assert probed["importable"] == [], f"the student's process can import {probed['importable']}"
    assert probed["reachable"] == [], (
        f"the student's process finds {probed['reachable']} in {lab}'s given material"
    )
    checks = labs.lab(lab)
    for name in grader_references(
        lab
    ):  # each reference exists on the grader's side, so the probe looked for it
        assert callable(getattr(checks, name)), name


@pytest.mark.parametrize("lab", sorted(labs.LABS))
def test_every_lab_runs_its_checks_the_one_way(lab):
    checks = labs.lab(lab)
    assert checks.__name__ == f"{labs.LABS[lab]}.checks" and checks.LAB == lab
    assert set(checks.GRADERS) == set(checks.ALL_CHECKS) == set().union(*checks.CHECKS.values())
    assert checks.grade == checks.GRADERS.grade
    with pytest.raises(KeyError, match=f"{lab} has no check 'nonsense'"):
        checks.grade("nonsense", student=None)


# Modules that measure: they return numbers (and notes for a page), and only their command-line
# main() prints (docs/DESIGN.md, "Layers"; issue 28).
MEASURING = ["ceilings.py", "timing.py", "counting.py", "traffic.py", "benchmarks"]


def prints_outside_main(path: Path, root: Path = ROOT) -> list[str]:
    """'path:line function' for every print() call in ``path`` that is not inside a function named
    main (or a command's run loop, ``run``, which main calls and which reports progress)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, inside: str | None):
        for child in ast.iter_child_nodes(node):
            name = (
                child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else inside
            )
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
    assert len(paths) > 8 and not found, "return the sentence to the page instead:\n" + "\n".join(
        found
    )


def test_the_print_finder_sees_a_print_in_a_measuring_function(tmp_path):
    """The control: a print in a measuring function is found; one in main, or in a function inside
    it, is not."""
    source = tmp_path / "m.py"
    source.write_text(
        "def measure():\n    print('x')\n\ndef main():\n    def show():\n        print('y')\n    "
        "print('z')\n"
    )
    assert prints_outside_main(source, root=tmp_path) == ["m.py:2 measure"]
