"""The fusion benchmark: its target table, its byte counts, its plumbing, and one ratio's direction.

No test here asserts a time. The timed test runs the script's own targets:
ratios of times measured back to back in one run.
"""

import pytest
import torch

from brrr.benchmarks import fusion


def test_targets_hold_the_issues_numbers():
    gpu = {t.check: t for t in fusion.TARGETS["gpu"]}
    cpu = {t.check: t for t in fusion.TARGETS["cpu"]}
    assert gpu["pointwise_bandwidth"].minimum == 0.85 and gpu["pointwise_bandwidth"].kind == fusion.FRACTION_OF_COPY
    assert gpu["softmax_bandwidth"].minimum == 0.75 and gpu["softmax_bandwidth"].kind == fusion.FRACTION_OF_COPY
    assert gpu["cos_cos_compiled_speedup"].minimum == 1.8 and gpu["cos_cos_triton_speedup"].minimum == 1.8
    assert cpu["cos_cos_compiled_speedup"].minimum == 1.5 and cpu["cos_cos_compiled_speedup"].kind == fusion.SPEEDUP
    assert cpu["triton_kernels_correct"].kind == fusion.CORRECT
    assert cpu["chain_fusion_speedup"].minimum == 1.5 and cpu["chain_fusion_speedup"].kind == fusion.SPEEDUP


def test_target_lookup():
    for wanted in fusion.TARGETS[fusion.device_class()]:
        assert fusion.target(wanted.check) is wanted
    with pytest.raises(KeyError, match="no target"):
        fusion.target("not_a_check")


def test_byte_counts_follow_the_traffic_model():
    n = 1000
    assert fusion.cos_cos_bytes(n, fused=True) == 8 * n  # read x, write the result
    assert fusion.cos_cos_bytes(n, fused=False) == 16 * n  # and write + read the intermediate
    assert fusion.cos_cos_bytes(n, torch.bfloat16, fused=True) == 4 * n
    assert fusion.bias_gelu_scale_bytes(3, 100, fused=True) == 4 * (2 * 300 + 100)
    assert fusion.bias_gelu_scale_bytes(3, 100, fused=False) == 4 * (6 * 300 + 100)


def test_roofline_prediction_for_cos_passes():
    n, bandwidth, rate = 1000, 8000.0, 1000.0  # one pass: 8000 B -> 1 s of memory; 1000 cos -> 1 s
    assert fusion.predicted_cos_seconds(n, 1, 1, bandwidth, rate) == pytest.approx(1.0)
    assert fusion.predicted_cos_seconds(n, 2, 2, bandwidth, rate) == pytest.approx(2.0)  # eager: 2 passes
    assert fusion.predicted_cos_seconds(n, 2, 1, bandwidth, rate) == pytest.approx(2.0)  # fused, compute-bound
    assert fusion.predicted_cos_seconds(n, 2, 1, bandwidth, 4 * rate) == pytest.approx(1.0)  # fused, memory-bound


def test_kernels_pass_the_benchmarks_correctness_check():
    cases = fusion.check_kernels()
    assert {case.kernel for case in cases} == {"cos_cos", "bias_gelu_scale", "softmax"}
    failed = [case for case in cases if not case.passed]
    assert not failed, failed


def test_correctness_check_catches_a_wrong_kernel(monkeypatch):
    monkeypatch.setattr(fusion.pointwise, "cos_cos", lambda x, out: out.copy_(x.cos()))  # forgot one cos
    cases = fusion.check_kernels()
    assert not any(case.passed for case in cases if case.kernel == "cos_cos")
    assert all(case.passed for case in cases if case.kernel != "cos_cos")


def test_this_devices_fusion_targets_are_met():
    """The benchmark script's own targets, enforced: on a CPU, compiled x.cos().cos()
    at least 1.5x eager and the interpreted kernels correct (`make gpu-check` runs
    this on a GPU, with the GPU's targets). Three attempts against a stall on a
    shared machine; each attempt is in the message."""
    copy, results = fusion.run(attempts=3)
    missed = [r.row() for r in results if not r.passed]
    assert not missed, "missed: " + "; ".join(missed)
    assert {r.check for r in results} == {t.check for t in fusion.TARGETS[fusion.device_class()]}


def test_a_missed_target_makes_the_script_exit_1(monkeypatch, capsys):
    """``python -m brrr.benchmarks.fusion`` exits 1 when any target misses (a fake run)."""
    def fake_run(met):
        def run(n=None):
            return 1e10, [fusion._result(t.check, t.minimum * (1.2 if met else 0.7), "fake")
                          for t in fusion.TARGETS[fusion.device_class()]]
        return run

    monkeypatch.setattr(fusion.reference, "record", lambda *args, **kwargs: None)
    monkeypatch.setattr(fusion, "run", fake_run(met=True))
    assert fusion.main([]) == 0
    monkeypatch.setattr(fusion, "run", fake_run(met=False))
    assert fusion.main([]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_every_attempt_is_reported(monkeypatch):
    """A target that needs a retry shows both attempts; the best one counts."""
    speedup = fusion.target("cos_cos_compiled_speedup").minimum
    values = iter([speedup * 0.8, speedup * 1.1])
    monkeypatch.setattr(fusion, "_timed_target",
                        lambda check, n, copy, threads: fusion._result(check, next(values), "timed"))
    result = fusion._measure_target("cos_cos_compiled_speedup", 10, 1.0, None, attempts=3)
    assert result.passed and result.measured == pytest.approx(speedup * 1.1)
    assert f"attempts: {speedup * 0.8:.2f}x, {speedup * 1.1:.2f}x" in result.detail


def test_report_names_every_target(capsys):
    copy = 1e10
    results = [fusion._result(t.check, t.minimum * (1.1 if i % 2 else 0.5), "detail")
               for i, t in enumerate(fusion.TARGETS[fusion.device_class()])]
    text = fusion.report(copy, results, {"device": "d", "mode": "m", "torch": "t", "triton": "tr", "date": "today"})
    for result in results:
        assert result.check in text
    assert ("FAIL" in text) and ("pass" in text)
    assert "[measured on d (m)" in text
