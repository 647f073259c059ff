"""The pieces of the grader's core: readable diffs, tolerances, repeats, the wire and the signed
record."""

import json

import pytest
import torch

import brrr.device  # noqa: F401
from brrr.checks import core as grading
from brrr.grading import server, wire


def test_tolerances_fit_the_dtype():
    assert grading.tolerance(torch.float32) == (1e-5, 1e-5)
    assert (
        grading.tolerance(torch.bfloat16)[0]
        > grading.tolerance(torch.float16)[0]
        > grading.tolerance(torch.float32)[0]
    )
    assert grading.tolerance(torch.int32) == (0.0, 0.0)


def test_a_matching_output_has_no_report():
    expected = torch.randn(1000)
    assert grading.diff_report("out", expected + 1e-7, expected, rtol=1e-5, atol=1e-5) is None


def test_a_report_says_where_by_how_much_and_shows_the_first_bad_indices():
    expected = torch.zeros(1000)
    got = expected.clone()
    got[[3, 500, 999]] = torch.tensor([0.5, -2.0, 1.0])
    report = grading.diff_report(
        "out", got, expected, rtol=1e-5, atol=1e-5, inputs={"x": torch.arange(1000.0)}
    )
    assert "differs from the reference at 3 of 1,000 elements (0.3%)" in report
    assert "largest difference is 2.000000, at index 500" in report
    rows = [
        line.split() for line in report.splitlines() if line.strip() and line.strip()[0].isdigit()
    ]
    assert [row[0] for row in rows] == ["3", "500", "999"]
    assert rows[1][-1] == "500.000000"  # the input x at that index is shown


def test_unwritten_elements_at_the_end_are_called_a_tail():
    expected = torch.ones(100)
    got = expected.clone()
    got[90:] = float("nan")
    unwritten = torch.zeros(100, dtype=torch.bool)
    unwritten[90:] = True
    report = grading.diff_report("out", got, expected, rtol=1e-5, atol=1e-5, unwritten=unwritten)
    assert (
        "10 of 100 elements unwritten" in report
        and "the last 10 elements, indices 90 to 99" in report
    )
    assert "triton.cdiv" in report


def test_an_output_never_written_says_to_write_into_out():
    unwritten = torch.ones(10, dtype=torch.bool)
    report = grading.diff_report(
        "out", torch.full((10,), float("nan")), torch.ones(10), rtol=0, atol=0, unwritten=unwritten
    )
    assert "Nothing was written" in report and "That is every element." in report
    assert "the last" not in report and "triton.cdiv" not in report


def test_computed_nan_is_told_apart_from_wrong_values():
    expected = torch.ones(10)
    got = expected.clone()
    got[4] = float("nan")
    got[7] = 3.0
    report = grading.diff_report("out", got, expected, rtol=1e-5, atol=1e-5)
    assert (
        "NaN or inf at 1 of 10 elements" in report
        and "differs from the reference at 1 of 10" in report
    )


def test_a_shape_mismatch_is_reported():
    report = grading.diff_report("out", torch.ones(3, 4), torch.ones(4, 3), rtol=0, atol=0)
    assert "shape (3, 4)" in report and "(4, 3)" in report


def test_two_dimensional_indices_are_shown_as_coordinates():
    expected = torch.zeros(4, 5)
    got = expected.clone()
    got[2, 3] = 1.0
    assert "index (2, 3)" in grading.diff_report("out", got, expected, rtol=0, atol=1e-6)


def test_repeat_until_pass_stops_at_the_first_pass_and_reports_the_best_failure():
    values = iter([0.5, 0.9, 0.7])

    def measure():
        value = next(values)
        return grading.Attempt(value, value > 0.8, f"{value}")

    best, history = grading.repeat_until_pass(measure, attempts=3)
    assert best.value == 0.9 and best.passed and len(history) == 2
    best, history = grading.repeat_until_pass(lambda: grading.Attempt(0.1, False, ""), attempts=3)
    assert not best.passed and len(history) == 3


def test_the_wire_carries_plain_data_and_tensors_only():
    value = {
        "a": [1, 2.5, "x", None, True],
        "t": torch.arange(6.0).reshape(2, 3),
        "d": torch.float16,
        "nan": float("nan"),
    }
    back = wire.decode(json.loads(json.dumps(wire.encode(value))))
    assert back["a"] == [1, 2.5, "x", None, True] and back["d"] is torch.float16
    assert torch.equal(back["t"], value["t"]) and back["nan"] != back["nan"]
    assert torch.equal(
        wire.decode(wire.encode(torch.ones(3, dtype=torch.bfloat16))),
        torch.ones(3, dtype=torch.bfloat16),
    )


class Sly(float):
    """A number that claims to equal anything: it must not survive the trip to the grader."""

    def __eq__(self, other):
        return True


@pytest.mark.parametrize(
    "bad",
    [
        {"$dataclass": "Op", "fields": {}},  # no dataclass is rebuilt on the grader's side
        {"$dtype": "object"},
        {"$float": "__import__('os')"},
        {"$tensor": {"dtype": "float32", "shape": [4], "data": "AAAA"}},  # 3 bytes for 16
    ],
)
def test_the_grader_refuses_anything_but_plain_data(bad):
    with pytest.raises(wire.WireError):
        wire.decode(bad)


def test_a_student_object_arrives_as_a_plain_value():
    back = wire.decode(json.loads(json.dumps(wire.encode(Sly(2.0)))))
    assert type(back) is float and back != 3.0
    with pytest.raises(wire.WireError, match="cannot send a object"):
        wire.encode(object())


def test_the_record_is_signed_and_a_forged_one_is_refused():
    record = server.Record("02-fuse-it")
    record.results["correct"] = {"passed": False, "message": "wrong"}
    line = record.signed(b"key")
    assert server.verify(line, b"key")["results"]["correct"]["passed"] is False
    forged = json.loads(line)
    forged["body"] = forged["body"].replace("false", "true")
    with pytest.raises(ValueError, match="signature"):
        server.verify(json.dumps(forged), b"key")
    with pytest.raises(ValueError, match="signature"):
        server.verify(line, b"another key")
