"""Under the GPU check a grader cell's verdict goes on the record, a failed one before it raises."""

import json

import pytest

from brrr import reference
from brrr.grading import client


class Verdicts:
    """A grader that answers every check request at once with the next verdict."""

    def __init__(self, *verdicts):
        self.verdicts = list(verdicts)

    def send(self, message):
        pass

    def receive(self, timeout):
        return {"op": "verdict", **self.verdicts.pop(0)}

    def close(self):
        pass


def test_a_grader_verdict_is_recorded_passed_failed_or_not_applying(tmp_path, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path))
    grade = client.Grader("05-tile-it")
    grade._channel = Verdicts(
        {"applies": True, "passed": True, "message": "96% of cuBLAS at 4096³"},
        {
            "applies": True,
            "passed": False,
            "message": "attempt 1: 83% of cuBLAS. Needed 90%",
            "measured": [
                {
                    "what": "peak",
                    "value": 0.85,
                    "attempts": [0.83, 0.85],
                    "bound": 0.9,
                    "rule": "at_least",
                }
            ],
        },
        {"applies": False, "passed": False, "message": "timed on a GPU only"},
    )
    grade("peak_4096", lambda: None)
    with pytest.raises(AssertionError, match="83% of cuBLAS"):
        grade("peak_8192", lambda: None)
    grade("grouped_order", lambda: None)
    checks = json.loads(reference.reference_path(tmp_path).read_text())["checks"]
    assert {key: check["verdict"] for key, check in checks.items()} == {
        "grader: 05-tile-it/peak_4096": "passed",
        "grader: 05-tile-it/peak_8192": "failed",
        "grader: 05-tile-it/grouped_order": "does not apply",
    }
    failed = checks["grader: 05-tile-it/peak_8192"]
    assert failed["detail"].startswith("attempt 1: 83%")
    assert (failed["value"], failed["bound"], failed["attempts"]) == (
        0.85,
        {"at_least": 0.9},
        [0.83, 0.85],
    )


def test_a_timed_check_keeps_its_figures_for_the_verdict_when_it_fails_too():
    from brrr.checks import core, thresholds

    threshold = thresholds.Threshold(0.9, "at_least", "a reason")
    core.taken_figures()
    history = [core.Attempt(0.83, False, "83%"), core.Attempt(0.85, False, "85%")]
    with pytest.raises(AssertionError, match="attempt 2: 85%"):
        core.timed_verdict(history[1], history, "peak", "90%", threshold)
    assert core.taken_figures() == [
        {"what": "peak", "value": 0.85, "attempts": [0.83, 0.85], "bound": 0.9, "rule": "at_least"}
    ]
    assert core.taken_figures() == []
