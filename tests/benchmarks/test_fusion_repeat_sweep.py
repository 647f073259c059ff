"""The repeat sweep: knee arithmetic on exact synthetic curves, roofline placement, and the essay's
shape."""

import math

import pytest
import torch

from brrr.benchmarks import fusion, repeat_sweep
from brrr.roofline import Roof
from brrr.device import DEVICE, far_above_cache, per_device
from brrr.roofline import Regime
from brrr.timing import bench
from brrr_book.pages import repeat_sweep as repeat_sweep_page


def roofline_times(repeats, floor, per_repeat):
    return [max(floor, r * per_repeat) for r in repeats]


def test_measured_knee_recovers_an_exact_roofline():
    repeats = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    for knee in (3.0, 24.0, 100.0):
        seconds = roofline_times(repeats, 0.040, 0.040 / knee)
        assert repeat_sweep.measured_knee(repeats, seconds) == pytest.approx(knee)


def test_measured_knee_ignores_one_slow_point_in_the_flat_part():
    repeats = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    seconds = roofline_times(repeats, 0.040, 0.040 / 24)
    seconds[3] *= 5  # a stall at 8 repeats
    assert repeat_sweep.measured_knee(repeats, seconds) == pytest.approx(24.0)


def test_measured_knee_refuses_a_flat_sweep():
    with pytest.raises(ValueError, match="memory-bound"):
        repeat_sweep.measured_knee([1, 2, 4, 8], [1.0, 1.0, 1.1, 1.2])


def test_predicted_knee_is_two_s_p_over_b():
    assert repeat_sweep.predicted_knee(10e12, 1e12, element_size=4) == pytest.approx(80.0)
    assert repeat_sweep.predicted_knee(10e12, 1e12, element_size=2) == pytest.approx(40.0)


ROOF = Roof(peak_flops=1e12, bandwidth=1e11, overhead_s=1e-5, label="test roof")  # ridge 10 FLOP/B


def test_placement_finds_all_three_regimes():
    assert repeat_sweep.place(2**10, "float32", 1, ROOF).regime == Regime.OVERHEAD
    assert repeat_sweep.place(2**26, "float32", 1, ROOF).regime == Regime.MEMORY
    assert repeat_sweep.place(2**26, "float32", 1024, ROOF).regime == Regime.COMPUTE


def test_placement_counts():
    point = repeat_sweep.place(1000, "float16", 16, ROOF)
    assert (
        point.flops == 16_000
        and point.bytes_moved == 4000
        and point.intensity == pytest.approx(4.0)
    )
    assert point.predicted_s == pytest.approx(max(1e-5, 16_000 / 1e12, 4000 / 1e11))
    # 1000 elements: the 10 µs overhead dominates, so the model allows 16,000 FLOPs / 10 µs
    assert point.attainable_flops == pytest.approx(16_000 / 1e-5)
    # 2^26 fp32 elements, 1 repeat: memory-bound at intensity x bandwidth = 1/8 FLOP/B x 100 GB/s
    assert repeat_sweep.place(2**26, "float32", 1, ROOF).attainable_flops == pytest.approx(1e11 / 8)
    # 1024 repeats: intensity 256 FLOP/B, past the ridge: the compute roof itself
    assert repeat_sweep.place(2**26, "float32", 1024, ROOF).attainable_flops == pytest.approx(
        ROOF.peak_flops
    )
    assert "memory-bound" in repeat_sweep.place(2**26, "float32", 1, ROOF).describe()
    with pytest.raises(ValueError):
        repeat_sweep.place(1000, "int8", 1, ROOF)


def test_half_the_bytes_halves_the_knee():
    n = 2**26
    fp32_knee = next(
        r
        for r in range(1, 10_000)
        if repeat_sweep.place(n, "float32", r, ROOF).regime == Regime.COMPUTE
    )
    fp16_knee = next(
        r
        for r in range(1, 10_000)
        if repeat_sweep.place(n, "float16", r, ROOF).regime == Regime.COMPUTE
    )
    assert math.isclose(fp32_knee, 2 * fp16_knee, rel_tol=0.05)


def test_the_compiled_chain_is_correct():
    x = torch.rand(1000, device=DEVICE)
    out = torch.empty_like(x)
    compiled = repeat_sweep.compile_chain(5, x, threads=fusion.THREADS)
    compiled(out, x)
    torch.testing.assert_close(out, x * 32)


def test_runtime_is_flat_then_rises():
    """The essay's shape, with wide margins: 4 repeats cost about what 1 does; far past the knee
    costs much more."""
    n = far_above_cache(4)
    x = torch.rand(n, device=DEVICE)
    out = torch.empty_like(x)
    high = per_device(cpu=128, gpu=1024)  # several times the knee on either device
    chains = {
        repeats: repeat_sweep.compile_chain(repeats, x, threads=fusion.THREADS)
        for repeats in (1, 4, high)
    }
    attempts = []
    for _ in range(3):  # a stall on a shared machine gets two more chances
        times = {
            repeats: bench(
                lambda: chain(out, x), threads=fusion.THREADS, warmup=1, min_runs=5, budget_s=0.3
            ).median_s
            for repeats, chain in chains.items()
        }
        attempts.append(times)
        if times[4] < 1.5 * times[1] and times[high] > 2.0 * times[1]:
            return
    pytest.fail(
        f"expected flat-then-rising runtimes (4 repeats < 1.5x 1 repeat, {high} repeats > 2x); got "
        f"{attempts}"
    )


def _point(repeats: int, seconds: float, n: int = 2**20) -> repeat_sweep.SweepPoint:
    from brrr.timing import Timing

    return repeat_sweep.SweepPoint(repeats, n, 4, Timing(seconds, seconds, seconds, 5, "fake"))


def test_the_flops_sentence_follows_the_sweep():
    n, roof = 2**20, 40e9
    rising = [_point(r, max(1e-3, r * n / roof)) for r in (1, 4, 16, 64)]  # flat, then at the roof
    assert repeat_sweep.flops_over_roof(rising, roof) == pytest.approx(1.0)
    assert "stays under the roof" in repeat_sweep_page.describe_flops(rising, roof, {16: roof})
    # the CPU's shape: near the roof at 16 repeats, half of it at 128, in cache as well
    falling = [_point(16, 16 * n / 36e9), _point(64, 64 * n / 22e9), _point(128, 128 * n / 16e9)]
    text = repeat_sweep_page.describe_flops(falling, roof, {16: roof, 64: 22e9})
    assert "peaked at 16 repeats, 90% of the multiply roof; at 128 repeats it was 40%" in text
    assert (
        "at 64 repeats the sweep ran at 55% of the roof and the same chain in cache at 55%" in text
    )
    # a point above the roof shows as more than 1
    assert repeat_sweep.flops_over_roof(falling, 20e9) == pytest.approx(1.8)


def test_the_multiply_roof_is_a_roof():
    """Measured in one run: the sweep's chains far above the cache stay under the multiply roof
    timed in the same rounds, within OVER_ROOF_TOLERANCE.

    The roof had been the 64-repeat chain alone; on a CPU the sweep then reached 150% of it at 16
    and 32 repeats.
    """
    n = far_above_cache(4)
    counts = per_device(cpu=(16, 32), gpu=(128, 256))  # around the knee and past it
    attempts = []
    for _ in range(3):  # a stall on a shared machine gets two more chances
        over = {
            repeats: repeat_sweep.over_roof_in_turns(n, repeats, threads=fusion.THREADS)
            for repeats in counts
        }
        attempts.append(over)
        if max(over.values()) <= repeat_sweep.OVER_ROOF_TOLERANCE:
            return
    pytest.fail(
        f"achieved FLOP/s over the multiply roof, above {repeat_sweep.OVER_ROOF_TOLERANCE}: "
        f"{attempts}"
    )


def test_a_multiply_roof_measured_2x_low_fails_the_roof_check(monkeypatch):
    """The planted regression of notebook 11's roof check: roof chains that do two multiplies for
    each one counted read the roof 2x low, and the sweep's point rises over it beyond the tolerance
    every time.

    The point lies past the knee, where it is compute-bound and a 2x-low roof shows as 2x. At the
    CPU's 16 repeats, at its knee, the point is still partly memory-bound, so the planted roof put
    it at only 1.34-1.64x (a fresh clone's run read 1.246x against the 1.25 tolerance);
    at 32 repeats it read 2.29-2.40x quiet and 2.10-2.20x beside .ci/neighbour_load.py (2026-11-28,
    our 2-core CPU)."""
    honest = repeat_sweep.compile_chain

    def doubled_roof(repeats, example, *, threads=None):
        is_roof = example.numel() == repeat_sweep.MULTIPLY_PEAK_N
        return honest(2 * repeats if is_roof else repeats, example, threads=threads)

    monkeypatch.setattr(repeat_sweep, "compile_chain", doubled_roof)
    monkeypatch.setattr(
        repeat_sweep, "MULTIPLY_PEAK_CHAINS", per_device(cpu=(8, 16), gpu=(256,))
    )  # fewer compiles
    repeats = per_device(
        cpu=32, gpu=256
    )  # past the knee (test_the_multiply_roof_is_a_roof's second count)
    for _ in range(2):
        over = repeat_sweep.over_roof_in_turns(far_above_cache(4), repeats, threads=fusion.THREADS)
        assert over > repeat_sweep.OVER_ROOF_TOLERANCE, over


def test_a_sweep_whose_flat_points_disagree_is_measured_again_and_the_steadiest_kept(monkeypatch):
    """The table, plot and knee once came from a run whose 1-4 repeats differed by 2.13x."""
    from types import SimpleNamespace

    runs = iter([[2.0, 3.0, 1.4, 5.0], [1.0, 1.1, 1.05, 5.0]])
    monkeypatch.setattr(
        repeat_sweep,
        "sweep",
        lambda *args, **kwargs: [SimpleNamespace(seconds=s) for s in next(runs)],
    )
    points, notes = repeat_sweep.steady_sweep(1024)
    assert [p.seconds for p in points] == [1.0, 1.1, 1.05, 5.0]
    assert len(notes) == 1 and "differed by 2.14x" in notes[0]
    runs = iter([[1.0, 1.2, 1.1, 5.0]])
    points, notes = repeat_sweep.steady_sweep(1024)
    assert notes == [] and points[0].seconds == 1.0  # steady at once: measured once
