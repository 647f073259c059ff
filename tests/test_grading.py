"""The pieces of brrr.grading: readable diffs, tolerances, call watching, repeats, the results log."""

import json

import pytest
import torch

import brrr.device  # noqa: F401
from brrr import grading, thresholds


def test_tolerances_fit_the_dtype():
    assert grading.tolerance(torch.float32) == (1e-5, 1e-5)
    assert grading.tolerance(torch.bfloat16)[0] > grading.tolerance(torch.float16)[0] > grading.tolerance(torch.float32)[0]
    assert grading.tolerance(torch.int32) == (0.0, 0.0)


def test_a_matching_output_has_no_report():
    expected = torch.randn(1000)
    assert grading.diff_report("out", expected + 1e-7, expected, rtol=1e-5, atol=1e-5) is None


def test_a_report_says_where_by_how_much_and_shows_the_first_bad_indices():
    expected = torch.zeros(1000)
    got = expected.clone()
    got[[3, 500, 999]] = torch.tensor([0.5, -2.0, 1.0])
    report = grading.diff_report("out", got, expected, rtol=1e-5, atol=1e-5, inputs={"x": torch.arange(1000.0)})
    assert "differs from the reference at 3 of 1,000 elements (0.3%)" in report
    assert "largest difference is 2.000000, at index 500" in report
    rows = [line.split() for line in report.splitlines() if line.strip() and line.strip()[0].isdigit()]
    assert [row[0] for row in rows] == ["3", "500", "999"]
    assert rows[1][-1] == "500.000000"  # the input x at that index is shown


def test_unwritten_elements_at_the_end_are_called_a_tail():
    expected = torch.ones(100)
    got = expected.clone()
    got[90:] = float("nan")
    unwritten = torch.zeros(100, dtype=torch.bool)
    unwritten[90:] = True
    report = grading.diff_report("out", got, expected, rtol=1e-5, atol=1e-5, unwritten=unwritten)
    assert "10 of 100 elements unwritten" in report and "the last 10 elements, indices 90 to 99" in report
    assert "triton.cdiv" in report


def test_an_output_never_written_says_to_write_into_out():
    unwritten = torch.ones(10, dtype=torch.bool)
    report = grading.diff_report("out", torch.full((10,), float("nan")), torch.ones(10), rtol=0, atol=0,
                                 unwritten=unwritten)
    assert "Nothing was written" in report


def test_computed_nan_is_told_apart_from_wrong_values():
    expected = torch.ones(10)
    got = expected.clone()
    got[4] = float("nan")
    got[7] = 3.0
    report = grading.diff_report("out", got, expected, rtol=1e-5, atol=1e-5)
    assert "NaN or inf at 1 of 10 elements" in report and "differs from the reference at 1 of 10" in report


def test_a_shape_mismatch_is_reported():
    report = grading.diff_report("out", torch.ones(3, 4), torch.ones(4, 3), rtol=0, atol=0)
    assert "shape (3, 4)" in report and "(4, 3)" in report


def test_two_dimensional_indices_are_shown_as_coordinates():
    expected = torch.zeros(4, 5)
    got = expected.clone()
    got[2, 3] = 1.0
    assert "index (2, 3)" in grading.diff_report("out", got, expected, rtol=0, atol=1e-6)


def reference(x):
    return x * 2


def test_watch_calls_sees_a_function_under_any_name():
    alias = reference
    with grading.watch_calls([reference]) as watch:
        alias(torch.ones(1))
    assert watch.seen == ["test_grading.reference"]
    with grading.watch_calls([reference]) as watch:
        torch.ones(1) * 2
    assert watch.seen == []


def test_watch_calls_sees_any_function_of_a_module():
    from brrr import units

    with grading.watch_calls([units]) as watch:
        units.bandwidth(1e9)
    assert "brrr.units.bandwidth" in watch.seen


def test_repeat_until_pass_stops_at_the_first_pass_and_reports_the_best_failure():
    values = iter([0.5, 0.9, 0.7])

    def measure():
        value = next(values)
        return grading.Attempt(value, value > 0.8, f"{value}")

    best, history = grading.repeat_until_pass(measure, attempts=3)
    assert best.value == 0.9 and best.passed and len(history) == 2
    best, history = grading.repeat_until_pass(lambda: grading.Attempt(0.1, False, ""), attempts=3)
    assert not best.passed and len(history) == 3


def test_rotation_cycles_through_input_sets():
    rotation = grading.Rotation([("a",), ("b",), ("c",)])
    assert [rotation.next()[0] for _ in range(5)] == ["a", "b", "c", "a", "b"]


def test_a_graded_check_logs_passes_and_failures(tmp_path, monkeypatch, capsys):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(grading.LOG_ENV, str(log))

    @grading.graded("99-test", "works")
    def passing():
        return "measured 1 thing"

    @grading.graded("99-test", "breaks")
    def failing():
        raise grading.fail("measured 1, needed 2")

    assert passing() == "measured 1 thing"
    assert "PASS 99-test / works: measured 1 thing" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="measured 1, needed 2"):
        failing()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["check"], r["passed"]) for r in records] == [("works", True), ("breaks", False)]
    assert "needed 2" in records[1]["message"] and "[on " in records[1]["message"]
    assert records[0]["device_class"] == thresholds.device_class()


def test_a_grader_bug_is_logged_as_not_the_students_fault(tmp_path, monkeypatch):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(grading.LOG_ENV, str(log))

    @grading.graded("99-test", "buggy")
    def buggy():
        raise KeyError("oops")

    with pytest.raises(KeyError):
        buggy()
    assert "not your fault" in json.loads(log.read_text())["message"]


def test_student_exceptions_become_failed_checks():
    def unwritten():
        raise NotImplementedError("Exercise: write the body of unwritten()")

    with pytest.raises(AssertionError, match="not written yet"):
        grading.student_call("unwritten", unwritten)
    with pytest.raises(AssertionError, match="raised ZeroDivisionError"):
        grading.student_call("divide", lambda: 1 / 0)


def test_every_graded_check_has_a_threshold_on_its_device():
    for lab, by_device in thresholds.GRADED.items():
        for device, checks in by_device.items():
            for check in checks:
                assert thresholds.threshold(lab, check, device).why


def test_a_modified_input_is_caught():
    def vandal(x, out):
        out.copy_(x * 2)
        x.zero_()

    spec = grading.Spec("double", lambda x: x * 2, lambda n, g: (torch.randn(n, generator=g),), ("x",))
    with pytest.raises(AssertionError, match="modified its input `x`"):
        grading.check_correct(vandal, spec, [100])
