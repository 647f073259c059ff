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
        {"applies": True, "passed": False, "message": "attempt 1: 83% of cuBLAS. Needed 90%"},
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
    assert checks["grader: 05-tile-it/peak_8192"]["detail"].startswith("attempt 1: 83%")
