"""One formatter and one width (docs/STYLE.md): ruff formats and lints brrr/, tests/ and .ci/ at 120
characters (pyproject.toml [tool.ruff]), and the kernels the book shows at 100 (brrr/kernels/ruff.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.device_independent  # source layout: the same on every device

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ["brrr", "tests", ".ci"]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    binary = Path(sys.executable).parent / "ruff"
    command = [str(binary)] if binary.exists() else [shutil.which("ruff") or "ruff"]
    try:
        return subprocess.run(command + list(args), cwd=cwd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        pytest.fail("ruff is not installed: `make test` installs it from requirements.txt")


def test_the_package_and_tests_pass_ruff_check():
    done = ruff("check", *CHECKED)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_package_and_tests_are_formatted():
    done = ruff("format", "--check", *CHECKED)
    assert done.returncode == 0, "run `ruff format brrr tests .ci`:\n" + done.stdout + done.stderr


def test_the_checks_catch_a_long_line_and_an_unformatted_file(tmp_path):
    """The control: the same settings refuse a line of 121 characters, and one of 101 in the shown kernels."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    kernels = tmp_path / "brrr" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "ruff.toml").write_text((ROOT / "brrr" / "kernels" / "ruff.toml").read_text())
    (tmp_path / "wide.py").write_text(f'TEXT = "{"x" * 112}"\n')
    (kernels / "shown.py").write_text(f'TEXT = "{"x" * 92}"\n')
    (tmp_path / "ugly.py").write_text("x = {  'a':1 }\n")
    check = ruff("check", "wide.py", "brrr", cwd=tmp_path)
    assert check.returncode == 1 and "wide.py" in check.stdout and "shown.py" in check.stdout, check.stdout
    assert ruff("format", "--check", "ugly.py", cwd=tmp_path).returncode == 1
