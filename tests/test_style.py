"""One formatter and one width (docs/STYLE.md): ruff formats and lints brrr/, book/, tests/ and .ci/
at 100 characters (pyproject.toml [tool.ruff]), the kernels the book shows included
(brrr/kernels/ruff.toml)."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.device_independent  # source layout: the same on every device

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ["brrr", "book", "tests", ".ci"]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    binary = Path(sys.executable).parent / "ruff"
    command = [str(binary)] if binary.exists() else [shutil.which("ruff") or "ruff"]
    try:
        return subprocess.run(
            command + list(args), cwd=cwd, capture_output=True, text=True, timeout=120
        )
    except FileNotFoundError:
        pytest.fail("ruff is not installed: `make test` installs it from requirements.txt")


def test_the_package_and_tests_pass_ruff_check():
    done = ruff("check", *CHECKED)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_package_and_tests_are_formatted():
    done = ruff("format", "--check", *CHECKED)
    assert done.returncode == 0, (
        "run `ruff format brrr book tests .ci`:\n" + done.stdout + done.stderr
    )


def test_the_checks_catch_a_long_line_and_an_unformatted_file(tmp_path):
    """The control: the same settings refuse a line of 101 characters, in the package and in the
    shown kernels."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    kernels = tmp_path / "brrr" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "ruff.toml").write_text((ROOT / "brrr" / "kernels" / "ruff.toml").read_text())
    (tmp_path / "wide.py").write_text(f'TEXT = "{"x" * 92}"\n')
    (kernels / "shown.py").write_text(f'TEXT = "{"x" * 92}"\n')
    (tmp_path / "ugly.py").write_text("x = {  'a':1 }\n")
    check = ruff("check", "wide.py", "brrr", cwd=tmp_path)
    assert check.returncode == 1 and "wide.py" in check.stdout and "shown.py" in check.stdout, (
        check.stdout
    )
    assert ruff("format", "--check", "ugly.py", cwd=tmp_path).returncode == 1


MOST_LINES = 60  # of a function's code, its docstring left out (docs/STYLE.md)


def long_functions(source: str, path: str = "<source>") -> list[str]:
    """Functions over MOST_LINES lines of code whose docstring gives no reason (a paragraph 'Long:
    ...')."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        docstring = ast.get_docstring(node) or ""
        first = node.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            lines -= first.end_lineno - first.lineno + 1
        if lines > MOST_LINES and "\nLong: " not in "\n" + docstring:
            found.append(f"{path}:{node.lineno} {node.name} has {lines} lines")
    return found


def test_no_function_is_over_60_lines_without_a_reason():
    found = []
    for path in sorted([*(ROOT / "brrr").rglob("*.py"), *(ROOT / "book").rglob("*.py")]):
        found += long_functions(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, (
        "split these into their phases, or say why in a 'Long: ...' paragraph:\n" + "\n".join(found)
    )


def test_the_length_rule_counts_code_not_the_docstring():
    """The control: 61 lines of code fail, 60 pass, a long docstring does not count, a reason lets
    one by."""
    body = lambda n: "".join(f"    x{i} = {i}\n" for i in range(n - 1))  # noqa: E731 (the def line is one)
    assert long_functions(f"def f():\n{body(61)}") and not long_functions(f"def f():\n{body(60)}")
    docstring = '    """' + "\n".join(["word"] * 30) + '"""\n'
    assert not long_functions(f"def f():\n{docstring}{body(60)}")
    assert not long_functions(
        f'def f():\n    """Draws.\n\n    Long: one figure, mark by mark."""\n{body(70)}'
    )
