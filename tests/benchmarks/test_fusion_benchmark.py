"""The fusion benchmark: its target table, its byte counts, its plumbing, and one ratio's direction.

No test here asserts a time. The timed test runs the script's own targets:
ratios of times measured back to back in one run.
"""

import pytest
import torch

from brrr.device import ON_GPU

from brrr.benchmarks import fusion
from brrr_book.pages import triton_kernels


def test_targets_hold_the_issues_numbers():
    gpu = {t.check: t for t in fusion.TARGETS["gpu"]}
    cpu = {t.check: t for t in fusion.TARGETS["cpu"]}
    assert (
        gpu["pointwise_bandwidth"].minimum == 0.85
        and gpu["pointwise_bandwidth"].kind == fusion.FRACTION_OF_COPY
    )
    assert (
        gpu["softmax_bandwidth"].minimum == 0.75
        and gpu["softmax_bandwidth"].kind == fusion.FRACTION_OF_COPY
    )
    for check in (
        "cos_cos_compiled_speedup",
        "cos_cos_triton_speedup",
    ):  # of the roofline's speedup
        assert (
            gpu[check].minimum == fusion.COS_MODEL_FRACTION
            and gpu[check].kind == fusion.OF_ROOFLINE_SPEEDUP
        )
    assert (
        cpu["cos_cos_compiled_speedup"].minimum == 1.12
        and cpu["cos_cos_compiled_speedup"].kind == fusion.SPEEDUP
    )
    assert cpu["triton_kernels_correct"].kind == fusion.CORRECT
    assert (
        cpu["chain_fusion_speedup"].minimum == 1.5
        and cpu["chain_fusion_speedup"].kind == fusion.SPEEDUP
    )


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
    assert fusion.predicted_cos_seconds(n, 2, 2, bandwidth, rate) == pytest.approx(
        2.0
    )  # eager: 2 passes
    assert fusion.predicted_cos_seconds(n, 2, 1, bandwidth, rate) == pytest.approx(
        2.0
    )  # fused, compute-bound
    assert fusion.predicted_cos_seconds(n, 2, 1, bandwidth, 4 * rate) == pytest.approx(
        1.0
    )  # fused, memory-bound


def test_kernels_pass_the_benchmarks_correctness_check():
    cases = fusion.check_kernels()
    assert {case.kernel for case in cases} == {"cos_cos", "bias_gelu_scale", "softmax"}
    failed = [case for case in cases if not case.passed]
    assert not failed, failed


def test_correctness_check_catches_a_wrong_kernel(monkeypatch):
    monkeypatch.setattr(
        fusion.pointwise, "cos_cos", lambda x, out: out.copy_(x.cos())
    )  # forgot one cos
    cases = fusion.check_kernels()
    assert not any(case.passed for case in cases if case.kernel == "cos_cos")
    assert all(case.passed for case in cases if case.kernel != "cos_cos")


@pytest.mark.skipif(
    not ON_GPU,
    reason="on a CPU, notebook 10 enforces these speed targets in the book build (`make test-e2e`; "
    "fusion.require; tests/book/test_book_build.py), and "
    "test_kernels_pass_the_benchmarks_correctness_check the correctness one: timing them twice "
    "cost the suite half a minute",
)
def test_this_devices_fusion_targets_are_met():
    """The benchmark script's own targets, enforced (`make gpu-check` runs this on a GPU,
    with the GPU's targets). Three attempts against a stall on a shared machine; each
    attempt is in the message."""
    copy, results = fusion.run(attempts=3)
    missed = [r.row() for r in results if not r.passed]
    assert not missed, "missed: " + "; ".join(missed)
    assert {r.check for r in results} == {t.check for t in fusion.TARGETS[fusion.device_class()]}


def test_a_missed_target_makes_the_script_exit_1(monkeypatch, capsys):
    """``python -m brrr.benchmarks.fusion`` exits 1 when any target misses (a fake run)."""

    def fake_run(met):
        def run(n=None):
            return 1e10, [
                fusion._result(t.check, t.minimum * (1.2 if met else 0.7), "fake")
                for t in fusion.TARGETS[fusion.device_class()]
            ]

        return run

    monkeypatch.setattr(fusion.reference, "record", lambda *args, **kwargs: None)
    monkeypatch.setattr(fusion, "run", fake_run(met=True))
    assert fusion.main([]) == 0
    monkeypatch.setattr(fusion, "run", fake_run(met=False))
    assert fusion.main([]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_every_attempt_is_reported(monkeypatch):
    """A target that needs a retry shows both attempts; the best one counts. The script measures
    each target through ``measure_target`` alone (the other targets here meet theirs at once)."""
    speedup = fusion.target("cos_cos_compiled_speedup").minimum
    values = iter([speedup * 0.8, speedup * 1.1])

    def measure_target(check, n, copy, *, threads):
        if check != "cos_cos_compiled_speedup":
            return fusion._result(check, fusion.target(check).minimum, "met")
        return fusion._result(check, next(values), "timed")

    monkeypatch.setattr(fusion, "measure_target", measure_target)
    monkeypatch.setattr(fusion, "copy_bandwidth", lambda n, threads: 1.0)
    _, results = fusion.run(n=10, threads=None, attempts=3)
    (result,) = [r for r in results if r.check == "cos_cos_compiled_speedup"]
    assert result.passed and result.measured == pytest.approx(speedup * 1.1)
    # shown as this device's target kind shows it: "0.68x" on a CPU, "68% of the roofline's speedup"
    # on a GPU
    shown = [
        fusion._value("cos_cos_compiled_speedup", value) for value in (speedup * 0.8, speedup * 1.1)
    ]
    assert f"attempts: {shown[0]}, {shown[1]}" in result.detail


def test_a_failing_row_never_shows_its_minimum():
    """The table of `python -m brrr.benchmarks.fusion` (the GPU check's targets stage): a figure
    just under its minimum printed as the minimum ("85%  >= 85%  FAIL", "1.50x  >= 1.50x  FAIL")
    before."""
    cases = [
        (fusion.SPEEDUP, 1.5, 1.497, "1.50x"),
        (fusion.FRACTION_OF_COPY, 0.85, 0.8496, "85%"),
        (fusion.OF_ROOFLINE_SPEEDUP, 0.85, 0.8496, "85%"),
    ]
    for kind, minimum, measured, rounded in cases:
        row = fusion.Result("check", "", measured, minimum, kind, False, "").row()
        shown = row.split()[1]
        assert shown != rounded and "FAIL" in row, (kind, row)


def test_report_names_every_target(capsys):
    copy = 1e10
    results = [
        fusion._result(t.check, t.minimum * (1.1 if i % 2 else 0.5), "detail")
        for i, t in enumerate(fusion.TARGETS[fusion.device_class()])
    ]
    text = fusion.report(
        copy, results, {"device": "d", "mode": "m", "torch": "t", "triton": "tr", "date": "today"}
    )
    for result in results:
        assert result.check in text
    assert ("FAIL" in text) and ("pass" in text)
    assert "[measured on d (m)" in text


def test_the_roofline_speedup_of_fusing_cos_cos():
    n, bandwidth = 10**6, 8e9  # one pass over 8 MB: 1 ms
    # cosines far faster than memory: two passes become one, 2x
    assert fusion.predicted_cos_cos_speedup(n, bandwidth, 1e15) == pytest.approx(2.0)
    # one cosine per element per 0.75 ms: eager 2 x max(1, 0.75) = 2 ms, fused max(1, 1.5) = 1.5 ms
    assert fusion.predicted_cos_cos_speedup(n, bandwidth, n / 0.75e-3) == pytest.approx(4 / 3)
    # the cosines set both times: fusion saves nothing
    assert fusion.predicted_cos_cos_speedup(n, bandwidth, n / 5e-3) == pytest.approx(1.0)


@pytest.fixture
def gpu_cos_target(monkeypatch):
    """The GPU x.cos().cos() target, timed with fake measurements: eager 2 ms, the copy 1 ms per
    pass."""
    from brrr.timing import Timing

    monkeypatch.setattr(fusion, "device_class", lambda: "gpu")
    monkeypatch.setattr(fusion, "compile_for_timing", lambda fn, *args, **kwargs: fn)

    def fake(fused_s, rate):
        def measure(label, fn, bytes_moved, **kwargs):
            seconds = 2e-3 if label.startswith("eager") else fused_s
            return fusion.Measurement(
                label, Timing(seconds, seconds, seconds, 1, "fake"), bytes_moved
            )

        monkeypatch.setattr(fusion, "measure", measure)
        monkeypatch.setattr(
            fusion, "measure_together", lambda specs, **kwargs: [measure(*spec) for spec in specs]
        )
        monkeypatch.setattr(fusion, "cos_rate", lambda **kwargs: rate)
        return fusion.measure_target("cos_cos_triton_speedup", 10**6, 8e9, threads=None)

    return fake


def test_gpu_cos_target_is_a_fraction_of_the_roofline_speedup(gpu_cos_target):
    # Memory-bound (cosines far faster than memory): the model predicts 2x, so 1.5 ms (1.33x) is
    # 67%: a miss.
    slow = gpu_cos_target(1.5e-3, 1e15)
    assert not slow.passed and slow.measured == pytest.approx(2 / 1.5 / 2.0)
    assert "the roofline predicts 2.00x" in slow.detail
    # The fused kernel compute-bound (an H200): the model predicts 1.33x; 1.6 ms (1.25x) is 94% of
    # it and passes, where a fixed 1.8x would have asked for more than the hardware can give.
    compute_bound = gpu_cos_target(1.6e-3, 10**6 / 0.75e-3)
    assert compute_bound.passed and compute_bound.measured == pytest.approx(1.25 / (4 / 3))
    assert "the roofline predicts 1.33x" in compute_bound.detail
    # Fused but no faster than eager: a miss whatever the model.
    assert not gpu_cos_target(2e-3, 10**6 / 0.75e-3).passed


def test_target_value_follows_the_kind(monkeypatch):
    monkeypatch.setattr(fusion, "device_class", lambda: "gpu")
    assert fusion.target_value("cos_cos_triton_speedup", 1.5, 2.0) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="predicted_speedup"):
        fusion.target_value("cos_cos_triton_speedup", 1.5)
    monkeypatch.setattr(fusion, "device_class", lambda: "cpu")
    assert (
        fusion.target_value("cos_cos_compiled_speedup", 1.5, 2.0) == 1.5
    )  # the CPU target stays a speedup


def test_fast_cosine_refuses_on_the_interpreter(monkeypatch):
    from brrr.kernels import pointwise

    monkeypatch.setattr(pointwise, "ON_GPU", False)
    with pytest.raises(ValueError, match="fast_cosf"):
        pointwise.cos_cos(torch.zeros(8), fast=True)


def test_the_small_size_verdict_follows_the_measured_shares():
    """The sentence under notebook 12's sweep: held back at the smallest size only where the run
    says so."""
    from brrr.timing import Timing

    def run(*fractions):  # bandwidth = bytes / 1 s: the fraction of a copy bandwidth of 1 B/s
        return [fusion.Measurement("p", Timing(1.0, 1.0, 1.0, 3, "cpu"), f) for f in fractions]

    gpu_like = triton_kernels.small_sizes({"eager": run(0.2, 0.3), "fused": run(0.07, 0.96)}, 1.0)
    assert "every provider ran further below the copy line" in gpu_like[-1]
    cpu_like = triton_kernels.small_sizes({"eager": run(0.28, 0.25)}, 1.0)
    assert "about as close to the copy line as at the largest, or closer" in cpu_like[-1]
    assert (
        cpu_like[0].startswith("eager: 28% of copy at the smallest size")
        and "(1.12x of it)" in cpu_like[0]
    )
    mixed = triton_kernels.small_sizes(
        {"eager": run(0.28, 0.25), "compiled": run(0.2099, 0.28)}, 1.0
    )
    assert mixed[-1] == (
        "At the smallest size, held back by a fixed cost per call rather than bandwidth: "
        "compiled; about as close to the copy line as at the largest, or closer: eager."
    )
    assert "(0.7496x of it)" in mixed[1]  # never printed as 0.75 beside a verdict drawn at 0.75


def _measured(label: str, seconds: float):
    from brrr.timing import Timing

    return fusion.Measurement(label, Timing(seconds, seconds, seconds, 5, "fake"), 8.0 * 1000)


def test_the_model_ratio_is_the_measured_time_over_the_rooflines():
    n, bandwidth, rate = 1000, 8000.0, 500.0  # one pass: 1 s of memory; one cos per element: 2 s
    assert fusion.model_ratio(_measured("x", 1.4), n, 1, 1, bandwidth, rate) == pytest.approx(0.7)
    # a roof measured 2x low: the time sits at half the roofline's, under either device's floor
    assert (
        fusion.model_ratio(_measured("x", 2.0), n, 1, 1, bandwidth, rate / 2) < fusion.MODEL_FLOOR
    )


def test_the_cos_summary_follows_the_run():
    n, bandwidth = 1000, 8000.0  # one pass: 1 s of memory
    hidden = fusion.cos_model_summary(n, bandwidth, 4000.0, 1.0, 1.1, 2.0)
    assert hidden.startswith("Two cosines per element fit inside")
    two = fusion.cos_model_summary(n, bandwidth, 1500.0, 1.0, 1.4, 2.0)
    assert (
        two.startswith("Two cosines per element take 1.33x")
        and "still beat eager's two passes, 1.43x" in two
    )
    one = fusion.cos_model_summary(n, bandwidth, 800.0, 1.25, 3.0, 2.6)
    assert one.startswith("Even one cosine per element takes 1.25x") and "it took 2.40x" in one
    assert "did not beat eager's two passes" in fusion.cos_model_summary(
        n, bandwidth, 800.0, 1.25, 3.0, 2.9
    )
    # x.cos() slowed (2 s against its 1.25 s): the ratio falls under the model's 2x, and the line
    # says why
    slowed = fusion.cos_model_summary(n, bandwidth, 800.0, 2.0, 2.6, 5.0)
    assert (
        "should take at least 2.00x its time; it took only 1.30x" in slowed
        and "ran at 1.60x" in slowed
    )


def test_the_cosine_roof_is_the_best_chain(monkeypatch):
    monkeypatch.setattr(fusion, "cos_rates", lambda **kwargs: {1: 1.3e9, 2: 1.05e9, 4: 0.8e9})
    assert fusion.cos_rate() == 1.3e9


def _compiled_cos_workloads():
    """(x far above the cache, {label: (compiled call, cosines per element)}) for the roof tests."""
    from brrr.benchmarks.compiling import compile_for_timing
    from brrr.device import DEVICE, far_above_cache

    x = torch.randn(far_above_cache(4), device=DEVICE)
    workloads = {
        label: (compile_for_timing(fn, x, threads=fusion.THREADS), cosines)
        for label, fn, cosines in (
            ("compiled x.cos()", fusion.cos_eager, 1),
            ("compiled x.cos().cos()", fusion.cos_cos_eager, 2),
        )
    }
    return x, workloads


def _over_the_roof(x, workloads) -> dict[str, float]:
    """Each workload's cosines/s over the cosine roof timed in the same rounds (memory left out)."""
    return {
        label: 1
        / fusion.model_ratio_in_turns(
            lambda fn=fn: fn(x), x.numel(), cosines, 1, eager=False, memory=False
        )
        for label, (fn, cosines) in workloads.items()
    }


def test_the_cosine_roof_is_a_roof():
    """Measured in one run: no compiled workload evaluates cosines faster than the roof, beyond the
    noise that the model's floor allows (1 / MODEL_FLOOR).

    The roof had been a 2-cosine chain on a small tensor; on a CPU the compiled x.cos() far above
    the cache then ran at 142% of it. The roof's kernels are timed in the same rounds as the
    workloads, so a burst of load that evicts the roof's data from the cache slows the workload
    beside it too."""
    x, workloads = _compiled_cos_workloads()
    attempts = []
    for _ in range(3):  # a stall on a shared machine gets two more chances
        over = _over_the_roof(x, workloads)
        attempts.append(over)
        if max(over.values()) <= 1 / fusion.MODEL_FLOOR:
            return
    pytest.fail(f"cosines/s over the cosine roof, above 1 beyond the noise: {attempts}")


def test_a_cosine_roof_measured_2x_low_fails_the_model(monkeypatch):
    """The planted regression of the model's floor (notebook 10's check): roof kernels that run
    twice for each call counted read the cosine rate 2x low, and a compiled x.cos() then beats the
    roof by more than the floor allows, in every attempt.

    The workload is the compiled x.cos() on data in cache, as the roof's are: compute-bound whatever
    else runs. Far above the cache, beside a book build and .ci/neighbour_load.py, the same kernel
    waited on memory (at half the roof's rate, in the same rounds), and a compute roof's error
    cannot show where memory sets the time.
    """
    from brrr.benchmarks.compiling import Compiled, compile_for_timing
    from brrr.device import DEVICE

    x = torch.randn(fusion.COS_RATE_N, device=DEVICE)
    compiled_cos = compile_for_timing(fusion.cos_eager, x, threads=fusion.THREADS)
    honest = fusion.compile_for_timing

    def twice_per_call(fn, *example, threads=None, **options):
        once = honest(fn, *example, threads=threads, **options)
        return Compiled(lambda *args: (once(*args), once(*args))[1], once.compile_s, fn, threads)

    def over_the_roof() -> float:
        return 1 / fusion.model_ratio_in_turns(
            lambda: compiled_cos(x), x.numel(), 1, 1, eager=False, memory=False
        )

    unplanted = over_the_roof()
    monkeypatch.setattr(fusion, "compile_for_timing", twice_per_call)
    for _ in range(2):
        over = over_the_roof()
        # The planted 2x shows as about 2x on any CPU: 1.98-2.02x here, 1.66-1.98x with
        # ATEN_CPU_CAPABILITY=default.
        assert over > 1.5 * unplanted, (over, unplanted)
        # It fails the floor where x.cos() runs near the roof (0.99-1.02 of it here); with no vector
        # units it runs at 0.8, and 2x that sits at the floor's edge (1.33-1.58 against 1.43).
        if unplanted >= 0.9:
            assert over > 1 / fusion.MODEL_FLOOR, over


def test_the_fused_chains_compile_to_one_graph_and_a_graph_break_misses_by_a_count(monkeypatch):
    """Notebook 10's count (fusion.require_one_graph): x.cos().cos() and (x*1.5+0.5).abs() each
    trace to one graph; the same with a graph break between two ops traces to two, and misses whole,
    where its speed target missed it by a few percent (1.44-1.499x against 1.5x)."""
    from brrr import targets

    monkeypatch.setenv(targets.STRICT, "1")
    x = torch.randn(1024)
    assert fusion.require_one_graph("x.cos().cos()", fusion.cos_cos_eager, x)
    assert fusion.require_one_graph("(x*1.5+0.5).abs()", fusion.cheap_chain_eager, x)

    def broken(x):
        y = x.cos()
        torch._dynamo.graph_break()
        return y.cos()

    with pytest.raises(
        targets.TargetMissed, match=r"2 graph\(s\) with 1 graph break\(s\) \(Call to `torch._dynamo"
    ):
        fusion.require_one_graph("x.cos().cos()", broken, x)
