"""brrr.targets' one switch: a miss fails what make runs, the test suite and every book build; in a
reader's own Jupyter or Colab session it is printed with how to measure again, never a traceback.

The targets' attempts and figures are tested in tests/benchmarks/test_benchmark_scripts.py (strict,
as this suite is)."""

import inspect
import os
import re
import subprocess
import types

import pytest

import conftest
from brrr import counting, roofline, targets
from brrr_book import book_pages
from conftest import ROOT

MISSES = {
    "require": lambda: targets.require("fake speedup", 1.5, 1.1, iter([1.2, 1.3]).__next__),
    "require_at_most": lambda: targets.require_at_most("flat", 1.5, 1.8, iter([1.7, 1.6]).__next__),
    "require_between": lambda: targets.require_between(
        "model", 0.9, 2.0, 0.7, iter([0.71, 0.69]).__next__
    ),
    "check": lambda: targets.check(False, "the small batch idles less than the large one"),
    "require_memory_bound": lambda: roofline.require_memory_bound(
        {"softmax": counting.softmax(1024, 1024)}, roofline.Roof(1e9, 1e12, label="fp32 non-matmul")
    ),
}


@pytest.mark.parametrize("miss", MISSES, ids=str)
def test_strict_a_miss_raises(monkeypatch, miss):
    monkeypatch.setenv(targets.STRICT, "1")
    with pytest.raises(targets.TargetMissed):
        MISSES[miss]()


@pytest.mark.parametrize("miss", MISSES, ids=str)
@pytest.mark.parametrize("setting", [None, "0", ""])
def test_in_a_readers_session_a_miss_is_printed_and_the_notebook_goes_on(
    monkeypatch, capsys, miss, setting
):
    if setting is None:
        monkeypatch.delenv(targets.STRICT, raising=False)
    else:
        monkeypatch.setenv(targets.STRICT, setting)
    returned = MISSES[miss]()
    printed = capsys.readouterr().out
    assert "Missed here: " in printed and "Traceback" not in printed
    for says in (
        "other work busy",
        "battery",
        "first run",
        "re-run this cell",
        "python -m brrr.ceilings --refresh",
    ):
        assert says in printed, says
    if miss == "require":
        assert returned == 1.3  # the best attempt, as when the target is met
    if miss in ("check", "require_memory_bound"):
        assert returned is False  # so a notebook prints its claim only where it held


def test_a_met_target_prints_no_block(monkeypatch, capsys):
    monkeypatch.delenv(targets.STRICT, raising=False)
    assert targets.require("fake speedup", 1.5, 1.6) == 1.6
    assert targets.check(True, "never shown") is True
    assert (
        roofline.require_memory_bound(
            {"softmax": counting.softmax(1024, 1024)}, roofline.Roof(1e12, 1e9)
        )
        is True
    )
    assert "Missed" not in capsys.readouterr().out


# ---------------------------------------------------------------- where the switch is on


def test_this_suite_and_the_book_build_it_runs_are_strict(monkeypatch, tmp_path):
    assert targets.strict() and os.environ[targets.STRICT] == "1"  # set by conftest, for every test
    seen = {}

    def fake_run(command, **kwargs):
        seen.update(
            kwargs.get("env") or os.environ
        )  # no env passed: the build inherits this process's
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(conftest.subprocess, "run", fake_run)
    conftest.build_book(ROOT, ROOT / "_config.yml", tmp_path)
    assert seen.get(targets.STRICT) == "1"


def test_every_book_build_is_strict_however_it_was_started(monkeypatch):
    monkeypatch.delenv(targets.STRICT, raising=False)
    app = types.SimpleNamespace(
        connect=lambda *args, **kwargs: None,
        add_css_file=lambda *args: None,
        add_transform=lambda *args: None,
    )
    book_pages.setup(app)
    assert os.environ.get(targets.STRICT) == "1"  # the kernels it starts inherit it


def test_every_make_target_is_strict(tmp_path):
    """What a recipe of the Makefile sees, asked through a second makefile added beside it."""
    probe = tmp_path / "probe.mk"
    probe.write_text('brrr-probe-strict:\n\t@echo "strict=$$BRRR_STRICT"\n')
    env = {name: value for name, value in os.environ.items() if name != targets.STRICT}
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-s",
            "-f",
            "Makefile",
            "-f",
            str(probe),
            "brrr-probe-strict",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "strict=1"


def test_gpu_check_is_strict_before_its_first_stage():
    script = (ROOT / ".ci" / "gpu-check").read_text()
    export = re.search(r"^export BRRR_STRICT=1\b", script, re.MULTILINE)
    first_stage = re.search(
        r"^\s*\"\$PY\" -m brrr_book\.gpucheck run ", script, re.MULTILINE
    )  # the first part run
    assert export and first_stage and export.start() < first_stage.start()


def test_grading_never_reads_the_switch():
    """A lab's verdict comes from its grader process, whose checks raise on their own: grading takes
    nothing from brrr.targets but its retry loop (``measurements``), which reads no switch, so a
    student's kernel setting the variable changes nothing graded."""
    sources = [
        *(ROOT / "brrr" / "grading").glob("*.py"),
        *(ROOT / "brrr" / "checks").glob("*.py"),
        *(ROOT / "brrr" / "labs").rglob("*.py"),
    ]
    assert len(sources) > 10
    for path in sources:
        text = path.read_text()
        assert not re.search(
            r"from brrr\.targets import|import brrr\.targets|from brrr import [^\n]*\btargets as"
            r"|require_memory_bound|BRRR_STRICT",
            text,
        ), path
        assert set(re.findall(r"\btargets\.(\w+)", text)) <= {"measurements"}, path
    retry = inspect.getsource(targets.measurements)
    assert not re.search(r"strict|missed|STRICT|environ|require|check\(", retry), retry


def test_met_targets_keep_quiet_and_a_miss_shows_every_attempt(monkeypatch, capsys):
    """brrr_book.pages holds a page's target lines back while they are met; a miss prints them all,
    in a reader's session (printed) and in the build (raised)."""
    monkeypatch.setenv(targets.STRICT, "0")
    with targets.said_only_if_missed():
        targets.require("held", 1.0, 2.0)
    assert capsys.readouterr().out == ""
    with targets.said_only_if_missed():
        targets.require("missed", 3.0, 2.0, lambda: 2.5, attempts=2)
    out = capsys.readouterr().out
    assert "missed" in out and "NOT met" in out and "2.00x, 2.50x" in out
    with targets.said_only_if_missed():
        targets.check(False, "a claim that failed")
    assert "a claim that failed" in capsys.readouterr().out
    monkeypatch.setenv(targets.STRICT, "1")
    with pytest.raises(targets.TargetMissed), targets.said_only_if_missed():
        targets.require("missed", 3.0, 2.0, attempts=1)
    assert "NOT met" in capsys.readouterr().out
