"""The mutation harness's list, checked against this tree without running a mutant (``make mutants``
runs them): every entry well formed, every search text found exactly once where it is planted, the
planted Python still parses (a mutant is a bug, not a syntax error), and every test it names
exists."""

import ast
import importlib.util
import re
import sys

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("mutants_run", ROOT / "tests" / "mutants" / "run.py")
run = sys.modules.setdefault("mutants_run", importlib.util.module_from_spec(spec))
spec.loader.exec_module(run)

MUTANTS = run.load()


def test_the_list_is_read_and_covers_every_class_of_the_issue():
    assert len(MUTANTS) >= 20
    kinds = {mutant.kind for mutant in MUTANTS}
    assert {
        "promised number",
        "library kernel",
        "ledger verdict",
        "partly graded",
        "capstone",
    } <= kinds
    assert "target with margin" in kinds
    # issue 51: each kind of gap planted bugs got through, planted again (tests/mutants/README.md)
    assert {
        "unreached branch",
        "non-finite",
        "boundary",
        "factor slip",
        "cache key",
        "wiring",
        "dropped flag",
    } <= kinds


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda mutant: mutant.name)
def test_each_mutant_applies_cleanly_and_names_tests_that_exist(mutant):
    path = ROOT / mutant.file
    planted = mutant.planted(path.read_text())  # ValueError unless found exactly once
    if path.suffix == ".py":
        ast.parse(planted)
    for test in mutant.tests:
        file, _, name = test.partition("::")
        assert (ROOT / file).is_file() and file.startswith("tests/"), test
        if name:
            assert re.search(
                rf"^def {re.escape(name)}\(", (ROOT / file).read_text(), re.MULTILINE
            ), test


def test_a_malformed_entry_is_refused(tmp_path):
    listed = tmp_path / "mutants.toml"
    entry = (
        '[[mutant]]\nname = "x"\nkind = "k"\nfile = "f"\nsearch = "a"\nreplace = "{}"\n'
        'tests = ["t"]\n'
    )
    listed.write_text(entry.format("a"))
    with pytest.raises(ValueError, match="no change"):
        run.load(listed)
    listed.write_text('[[mutant]]\nname = "x"\nfile = "f"\n')
    with pytest.raises(ValueError, match="fields"):
        run.load(listed)
    listed.write_text(entry.format("b") * 2)
    with pytest.raises(ValueError, match="a name used twice"):
        run.load(listed)


def test_a_search_text_found_twice_or_not_at_all_is_refused():
    mutant = run.Mutant("m", "k", "f.py", "x = 1", "x = 2", ("tests/t.py",))
    assert mutant.planted("y = 0\nx = 1\n") == "y = 0\nx = 2\n"
    for source in ("x = 1\nx = 1\n", "y = 0\n"):
        with pytest.raises(ValueError, match="not once"):
            mutant.planted(source)


def test_make_mutants_runs_the_harness_outside_make_test():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^mutants: .*\n\t\$\(PY\) tests/mutants/run\.py", makefile, re.MULTILINE)
    assert "mutants" not in re.search(
        r"^test: \$\(INSTALLED\)\n\t(.*)$", makefile, re.MULTILINE
    ).group(1)
