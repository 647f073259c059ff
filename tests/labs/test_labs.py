"""Labs come from one source: brrr.labs writes labs/ from solutions/, and an unsolved lab fails its
grader."""

import csv
import json
import runpy
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

from brrr.grading import gradebook
from brrr.labs import generate as labs

pytestmark = (
    pytest.mark.device_independent
)  # lab generation, and unsolved labs failing as 'not written yet': the GPU check leaves it to CI


def test_a_solution_block_becomes_a_stub_at_its_indentation():
    source = "\n".join(
        [
            "def ridge_point(peak, bandwidth):",
            '    """The ridge point."""',
            "    ### BEGIN SOLUTION",
            "    return peak / bandwidth",
            "    ### END SOLUTION",
            "",
            "print('given')",
        ]
    )
    assert labs.strip_solutions(source).split("\n") == [
        "def ridge_point(peak, bandwidth):",
        '    """The ridge point."""',
        '    raise NotImplementedError("Exercise: write the body of ridge_point()")',
        "",
        "print('given')",
    ]


def test_a_stub_too_wide_for_a_code_cell_breaks_after_the_parenthesis():
    name = "a_kernel_whose_name_is_long"
    source = f"def {name}():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION"
    stub = labs.strip_solutions(source).split("\n")[1:]
    assert stub == [
        "    raise NotImplementedError(",
        f'        "Exercise: write the body of {name}()")',
    ]
    assert all(len(line) <= labs.WIDTH for line in stub)


def test_a_block_names_its_innermost_function():
    source = (
        "def outer():\n    def inner():\n        ### BEGIN SOLUTION\n        pass\n        ### END "
        "SOLUTION\n    return inner\n"
    )
    assert "write the body of inner()" in labs.strip_solutions(source)


def test_a_block_outside_a_function_gets_a_generic_stub():
    assert labs.strip_solutions("### BEGIN SOLUTION\nx = 1\n### END SOLUTION") == (
        'raise NotImplementedError("Exercise: write this part")'
    )


@pytest.mark.parametrize(
    "source, problem",
    [
        ("### BEGIN SOLUTION\nx = 1\n", "never closed"),
        ("x = 1\n### END SOLUTION\n", "never opened"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside another"),
    ],
)
def test_malformed_markers_are_refused(source, problem):
    with pytest.raises(labs.LabError, match=problem):
        labs.strip_solutions(source, where="test cell")


def test_solution_only_cells_and_outputs_are_left_out():
    solution = nbformat.v4.new_notebook()
    note = nbformat.v4.new_markdown_cell("the worked solution")
    note.metadata["tags"] = ["solution-only"]
    code = nbformat.v4.new_code_cell(
        "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"
    )
    code.outputs = [nbformat.v4.new_output("stream", text="1")]
    code.execution_count = 3
    solution.cells = [note, code]
    lab = labs.lab_notebook(solution)
    assert len(lab.cells) == 1
    assert lab.cells[0].outputs == [] and lab.cells[0].execution_count is None
    assert "NotImplementedError" in lab.cells[0].source and "return 1" not in lab.cells[0].source


def test_writing_is_idempotent(tmp_path):
    out = tmp_path / "labs"
    first = labs.write(labs.SOLUTIONS, out)
    assert sorted(p.name for p in first) == sorted(p.name for p in labs.SOLUTIONS.glob("*.ipynb"))
    contents = {p.name: p.read_bytes() for p in out.iterdir()}
    assert labs.write(labs.SOLUTIONS, out) == []
    assert {p.name: p.read_bytes() for p in out.iterdir()} == contents
    assert labs.stale(labs.SOLUTIONS, out) == []


def test_the_committed_labs_are_what_the_generator_writes():
    assert labs.stale() == [], "labs/ is out of date: run `make labs` and commit labs/"
    assert labs.main(["--check"]) == 0


def test_the_package_ships_the_solutions_through_a_link_to_solutions():
    """solutions/ is the one source: brrr/labs/solutions, which the wheel ships and the gradebook
    reads, is a link to it, never a copy that could drift (tests/grading/test_package.py compares
    the wheel's)."""
    from brrr.grading import assemble

    shipped = labs.ROOT / assemble.SOLUTIONS
    assert shipped.is_symlink() and shipped.resolve() == labs.SOLUTIONS.resolve()
    assert shipped.readlink() == Path("..", "..", "solutions")  # relative: it holds in any clone


def _labs_command(tmp_path, monkeypatch, capsys, *flags) -> tuple[int, str]:
    """``python -m brrr.labs`` on the copies under ``tmp_path`` (run as __main__ here: its exit
    status and output, without a second interpreter importing nbformat for seconds)."""
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "python -m brrr.labs",
            *flags,
            "--solutions",
            str(tmp_path / "solutions"),
            "--labs",
            str(tmp_path / "labs"),
        ],
    )
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("brrr.labs", run_name="__main__", alter_sys=True)
    return exit_.value.code, capsys.readouterr().out


def test_the_drift_check_exits_1_on_a_stale_lab_and_on_a_lab_without_a_solution(
    tmp_path, monkeypatch, capsys
):
    shutil.copytree(labs.SOLUTIONS, tmp_path / "solutions")
    assert (
        _labs_command(tmp_path, monkeypatch, capsys)[0] == 0
    )  # writes labs/ from the copied solutions
    assert _labs_command(tmp_path, monkeypatch, capsys, "--check") == (
        0,
        "",
    )  # the control: up to date

    solution = tmp_path / "solutions" / "01-roofline.ipynb"
    original = solution.read_bytes()
    notebook = nbformat.read(str(solution), as_version=4)
    notebook.cells[0].source += "\n\nA sentence added after the lab was generated."
    nbformat.write(notebook, str(solution))
    code, out = _labs_command(tmp_path, monkeypatch, capsys, "--check")
    assert code == 1, out
    assert f"out of date: {tmp_path / 'labs' / '01-roofline.ipynb'}" in out
    assert "02-fuse-it" not in out and "run `make labs`" in out

    solution.write_bytes(original)
    shutil.copy(tmp_path / "labs" / "02-fuse-it.ipynb", tmp_path / "labs" / "03-orphan.ipynb")
    code, out = _labs_command(tmp_path, monkeypatch, capsys, "--check")
    assert code == 1, out
    assert f"out of date: {tmp_path / 'labs' / '03-orphan.ipynb'} (no solution)" in out
    assert "01-roofline" not in out


def test_every_lab_has_stubs_and_no_answers():
    for path in sorted(labs.LABS.glob("*.ipynb")):
        text = path.read_text()
        assert "NotImplementedError" in text
        assert labs.BEGIN not in text and labs.END not in text and "solution-only" not in text
        notebook = json.loads(text)
        assert all(
            not cell.get("outputs") for cell in notebook["cells"] if cell["cell_type"] == "code"
        )


def test_every_solution_and_lab_names_its_own_lab():
    """The gradebook falls back on metadata.brrr.lab when a submission's cells no longer match a lab
    (Lab 3's once said 02-fuse-it)."""
    from brrr import labs as registry

    paths = sorted(labs.SOLUTIONS.glob("*.ipynb")) + sorted(labs.LABS.glob("*.ipynb"))
    assert {path.stem for path in paths} == set(registry.LABS)
    for path in paths:
        assert json.loads(path.read_text())["metadata"]["brrr"]["lab"] == path.stem, path


def test_solutions_and_labs_are_stored_without_outputs():
    for folder in (labs.SOLUTIONS, labs.LABS):
        for path in folder.glob("*.ipynb"):
            for cell in json.loads(path.read_text())["cells"]:
                if cell["cell_type"] == "code":
                    assert cell["outputs"] == [] and cell["execution_count"] is None, path


def test_each_unsolved_lab_is_rejected_by_its_grader(tmp_path, grades_in_the_environment):
    """Run the generated labs as submissions: every check must run and fail as 'not written yet'."""
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    for path in labs.LABS.glob("*.ipynb"):
        (submissions / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "out"
    graded = gradebook.grade(submissions, out, cell_timeout_s=300, notebook_timeout_s=600, jobs=2)
    assert {s.lab for s in graded} == {p.stem for p in labs.LABS.glob("*.ipynb")}
    for submission in graded:
        expected = gradebook.lab_checks(submission.lab)
        assert submission.status == "failed"
        assert sorted(submission.results) == sorted(expected), submission.name
        for check, record in submission.results.items():
            assert not record["passed"], (submission.name, check)
            assert "not written yet" in record["message"], (
                submission.name,
                check,
                record["message"],
            )
    with (out / "grades.csv").open() as handle:
        assert all(row["total"] == "0" for row in csv.DictReader(handle))


def test_a_solution_graded_as_a_submission_is_told_of_no_edits():
    """An instructor grading a solution was told '1 cell(s) you changed or added outside the answer
    cells were not run': its solution-only cell (the GPU record). Spliced into its lab, each
    solution fills every answer cell and counts no edit; a cell added beside them still counts."""
    from brrr.grading import assemble

    snapshot = assemble.Snapshot()
    solutions = {Path(path).stem: data for path, data in snapshot.solutions.items()}
    for lab in snapshot.labs:
        solution = nbformat.reads(solutions[lab].decode(), as_version=4)
        spliced = assemble.splice(snapshot.labs[lab], snapshot.answers[lab], solution)
        assert (spliced.ignored_edits, spliced.answers_missing) == (0, []), lab
        solution.cells.append(nbformat.v4.new_code_cell("print('mine')"))
        assert (
            assemble.splice(snapshot.labs[lab], snapshot.answers[lab], solution).ignored_edits == 1
        ), lab
