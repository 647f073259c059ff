"""The benchmark scripts' exit codes: 1 on a missed target, 0 when every target is met.

The scripts are what `make gpu-check` runs after the tests to enforce the GPU
targets, so their exit code is the enforcement. Each is run here on fake
measurements (no timing), one that meets its targets and one that misses.
The fusion script's own test is in test_fusion_benchmark.py.
"""

import pytest

from brrr.benchmarks import compute, overhead
from brrr.timing import Timing


@pytest.fixture(autouse=True)
def no_recording(monkeypatch):
    monkeypatch.delenv("BRRR_RECORD_REFERENCE", raising=False)


@pytest.mark.parametrize("met", [True, False])
def test_the_compute_script_exits_1_on_a_missed_check(monkeypatch, capsys, met):
    checks = [compute.Check("fake table check", True, "fine"),
              compute.Check("fake matmul check", met, "fake")]
    monkeypatch.setattr(compute, "measured_ceilings", lambda: None)
    monkeypatch.setattr(compute, "run", lambda ceilings: ([], _FakeTable(), checks))
    assert compute.main([]) == (0 if met else 1)
    assert ("[FAIL] fake matmul check" in capsys.readouterr().out) is not met


class _FakeTable:
    def format(self) -> str:
        return "(fake table)"


@pytest.mark.parametrize("speedup", [3.5, 1.3])
def test_the_overhead_script_exits_1_on_a_missed_target(monkeypatch, capsys, speedup):
    target = overhead.TARGETS[overhead.DEVICE.type]
    slow, fast = Timing(speedup, speedup, speedup, 5, "fake"), Timing(1.0, 1.0, 1.0, 5, "fake")
    comparison = overhead.Comparison("fake step", "eager", slow, "faster", fast)
    calls = []

    def measure():
        calls.append(1)
        return comparison

    monkeypatch.setitem(overhead.TARGETS, overhead.DEVICE.type,
                        overhead.Target(target.what, target.required_speedup, measure))
    code = overhead.main([])
    printed = capsys.readouterr().out
    assert code == (0 if speedup >= target.required_speedup else 1), printed
    # a miss is measured again before it is reported; a pass is not
    assert len(calls) == (1 if code == 0 else 2)
    assert ("FAIL" in printed) == (code == 1)
