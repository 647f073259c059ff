"""What must hold of every number a module computes, whatever the inputs: a step's ops fit inside
the step, shares sum to 1, an op on the ridge has one regime, bytes counted are the rule's bytes
where the rule is exact (and a planted difference shows), and a cache key changes with every field
it names.

Examples agree with a wrong implementation as often as with the right one; these do not. Each names
the planted bug it catches (tests/mutants/mutants.toml). Fixed inputs and fakes; nothing is timed
against a bound."""

import dataclasses
import math
import time

import pytest
import torch

import brrr.device  # noqa: F401  (before triton: the interpreter on a CPU)
from brrr import ceilings, opclasses, reference
from brrr.ceilings import Ceilings
from brrr.device import ON_GPU
from brrr.roofline import Regime, Roof, regime
from brrr.timing import torch_threads

pytestmark = pytest.mark.device_independent

cpu_only = pytest.mark.skipif(ON_GPU, reason="counted and profiled on the CPU clock")


# ---------------------------------------------------------------- the regime at each boundary


@pytest.mark.parametrize("peak, bandwidth", [(100.0, 10.0), (312e12, 1.5e12), (3.0, 7.0)])
def test_an_op_exactly_on_the_ridge_is_compute_bound_and_one_ulp_less_work_is_memory_bound(
    peak, bandwidth
):
    """Planted: ``compute >= memory`` made ``>`` in :func:`brrr.roofline.regime`."""
    roof = Roof(peak_flops=peak, bandwidth=bandwidth)
    flops, nbytes = peak, bandwidth  # one second of each: exactly on the ridge
    assert flops / peak == nbytes / bandwidth
    assert regime(flops, nbytes, roof) is Regime.COMPUTE
    assert regime(math.nextafter(flops, 0), nbytes, roof) is Regime.MEMORY
    assert regime(math.nextafter(flops, math.inf), nbytes, roof) is Regime.COMPUTE


def test_an_op_whose_work_takes_exactly_the_overhead_is_overhead_bound():
    roof = Roof(peak_flops=100.0, bandwidth=10.0, overhead_s=1.0)
    assert regime(100.0, 5.0, roof) is Regime.OVERHEAD  # compute 1 s = the overhead
    assert regime(math.nextafter(100.0, math.inf), 5.0, roof) is Regime.COMPUTE


# ---------------------------------------------------------------- time inside ops fits in the step


@pytest.mark.parametrize("steps", [1, 2, 3, 7])
def test_per_class_times_are_per_step_and_sum_to_the_ops_per_step(steps):
    """Planted: the per-class times not divided by the number of profiled steps."""
    seconds = {"aten::mm": 0.6, "aten::add": 0.12, "aten::softmax": 0.03, "aten::nonsense": 0.09}
    times = opclasses.OpTimes(seconds=seconds, steps=steps, clock="CPU")
    per_step = sum(seconds.values()) / steps
    assert math.isclose(sum(times.per_class().values()), per_step)
    assert math.isclose(times.unclassified()["aten::nonsense"], 0.09 / steps)


def timed_calls(fn, walls: list):
    def call():
        start = time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - start)
        return result

    return call


@cpu_only
def test_the_class_tables_time_per_step_fits_inside_the_profiled_calls_and_its_shares_sum_to_one():
    a = torch.randn(192, 192)
    walls = []
    with torch_threads(1):
        table = opclasses.measure(timed_calls(lambda: (a @ a).relu().sum(), walls), steps=3)
    profiled = walls[-3:]  # the profiled calls come last; the first ones count FLOPs and warm up
    assert 0 < table.step_seconds <= sum(profiled) / 3, (table.step_seconds, profiled)
    assert math.isclose(sum(table.time_share(cls) for cls in table.seconds), 1.0)
    assert math.isclose(sum(table.flop_share(cls) for cls in table.flops), 1.0)


def roomy_ceilings() -> Ceilings:
    """Roofs far above what any op reaches here, so that no op sits above one and nothing is
    measured."""
    return Ceilings(
        copy_bandwidth=1e15,
        matmul_peak={"float32": 1e18, "bfloat16": 1e18},
        vector_peak=1e18,
        dispatch_overhead=1e-6,
        threads=1,
        env=ceilings.environment(),
    )


@cpu_only
def test_a_diagnosis_puts_no_more_time_inside_its_ops_than_its_profiled_step_and_shares_sum_to_one(
    monkeypatch,
):
    """Planted: the diagnosis's per-op times not divided by the number of profiled steps (3x too
    long)."""
    from brrr.diagnose import diagnose

    monkeypatch.setattr(ceilings, "measure", lambda **_: roomy_ceilings())
    a = torch.randn(256, 256)
    found = diagnose(lambda: a @ a, threads=1, warmup=1, steps=3)
    inside_s = sum(row.seconds for row in found.op_rows)
    assert 0 < inside_s <= found.split.step_us / 1e6, (inside_s, found.split.step_us)
    assert math.isclose(sum(found.shares.values()), 1.0)
    assert math.isclose(sum(found.split.fractions.values()), 1.0)


# ---------------------------------------------------------------- bytes counted against the rule


@cpu_only
def test_a_tilings_bytes_are_the_counters_equal_to_the_rules_and_a_planted_difference_shows(
    monkeypatch,
):
    """At 64³ with 32 × 32 tiles the rule is exact: counted and ruled bytes agree. A kernel that
    runs the matmul twice moves twice the rule's bytes, and the tiling's bytes say so. Planted: the
    counted bytes taken from the rule."""
    from brrr.benchmarks import tiling

    (honest,) = tiling.count_tilings(n=64, tiles=(32,))
    assert honest.counted_bytes == honest.rule_bytes == honest.bytes

    once = tiling.tiled_matmul

    def twice(a, b, out, tile):
        once(a, b, out, tile)
        once(a, b, out, tile)

    monkeypatch.setattr(tiling, "tiled_matmul", twice)
    (doubled,) = tiling.count_tilings(n=64, tiles=(32,))
    assert doubled.rule_bytes == honest.rule_bytes
    assert doubled.bytes == doubled.counted_bytes == 2 * honest.rule_bytes


# ---------------------------------------------------------------- cache keys


@pytest.fixture
def measured_ceilings(tmp_path, monkeypatch):
    """The ceilings' cache in a temporary folder, ``measure_all`` faked; returns the list of its
    calls."""
    monkeypatch.setenv("BRRR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(reference.ENV_VAR, raising=False)  # fakes must not reach data/reference
    calls = []

    def fake_measure_all(threads=None):
        calls.append(threads)
        return Ceilings(
            copy_bandwidth=20e9,
            matmul_peak={"float32": 200e9},
            vector_peak=30e9,
            dispatch_overhead=2e-6,
            threads=threads,
            env=ceilings.environment(),
        )

    monkeypatch.setattr(ceilings, "measure_all", fake_measure_all)
    return calls


@pytest.mark.parametrize("field", ["device", "device_type", "torch", "triton"])
def test_the_ceilings_cache_is_measured_again_when_any_field_of_its_environment_changes(
    measured_ceilings, field
):
    """Planted: the ceilings' cache blind to the Triton version."""
    first = ceilings.measure()
    assert ceilings.measure() == first and len(measured_ceilings) == 1
    stale = first.to_json()
    stale["env"] = {**stale["env"], field: stale["env"][field] + " (another)"}
    ceilings.cache.write_json(ceilings.cache_path(), stale)
    ceilings.measure()
    assert len(measured_ceilings) == 2


def test_the_ceilings_cache_is_measured_again_when_its_format_changes(measured_ceilings):
    first = ceilings.measure()
    stale = {**first.to_json(), "format": ceilings.FORMAT_VERSION - 1}
    ceilings.cache.write_json(ceilings.cache_path(), stale)
    ceilings.measure()
    assert len(measured_ceilings) == 2


def test_the_ceilings_cache_file_differs_with_threads_device_and_cpu_capability(monkeypatch):
    paths = {ceilings.cache_path(None), ceilings.cache_path(1), ceilings.cache_path(2)}
    assert len(paths) == 3
    here = ceilings.cache_path(1)
    monkeypatch.setattr(ceilings, "device_name", lambda: "Another Device 9000")
    assert ceilings.cache_path(1) != here
    monkeypatch.undo()
    if not ON_GPU:
        monkeypatch.setattr(ceilings, "cpu_capability", lambda: "SOMETHING-ELSE")
        assert ceilings.cache_path(1) != here


@pytest.fixture
def compiled_call(tmp_path, monkeypatch):
    """:func:`brrr.diagnose.profile.compiled_call_seconds` with its cache in a temporary folder,
    nothing compiled and a fake clock; returns the list of measurements taken."""
    from brrr.diagnose import profile
    from brrr.timing import Timing

    monkeypatch.setenv("BRRR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch, "compile", lambda fn, **_: fn)
    taken = []

    def fake_bench(fn, **_):
        taken.append(fn)
        return Timing(median_s=1e-5, p20_s=1e-5, p80_s=1e-5, runs=1, device="cpu")

    monkeypatch.setattr(profile, "bench", fake_bench)
    return taken


def test_the_compiled_call_floor_is_cached_and_measured_again_for_another_torch_device_or_threads(
    compiled_call, monkeypatch
):
    """Planted: the compiled-call floor's cache blind to the torch version."""
    from brrr import device
    from brrr.diagnose import profile

    readings = profile.FLOOR_READINGS
    profile.compiled_call_seconds(1)
    profile.compiled_call_seconds(1)
    assert len(compiled_call) == readings  # the second call read the cache
    profile.compiled_call_seconds(2)
    assert len(compiled_call) == 2 * readings
    monkeypatch.setattr(torch, "__version__", "0.0.1-another")
    profile.compiled_call_seconds(1)
    assert len(compiled_call) == 3 * readings
    monkeypatch.setattr(device, "device_name", lambda: "Another Device 9000")
    profile.compiled_call_seconds(1)
    assert len(compiled_call) == 4 * readings


# ---------------------------------------------------------------- a roof above its readings


def readings_of(*values):
    """A fake measurement whose calls read ``values`` in turn, whatever they are asked."""
    given = iter(values)
    return lambda *args, **kwargs: next(given)


@cpu_only
def test_every_roof_is_at_least_every_reading_taken_for_it_and_the_overhead_at_most(monkeypatch):
    """Readings that differ, the best neither first nor last where there are three."""
    ways = list(ceilings.COPY_WAYS)
    first = {way: 10e9 + i for i, way in enumerate(ways)}
    last = {way: 12e9 - i for i, way in enumerate(ways)}
    monkeypatch.setattr(ceilings, "matmul_dtypes", lambda: ["float32", "bfloat16"])
    monkeypatch.setattr(ceilings, "measure_copy_ways", readings_of(first, last))
    monkeypatch.setattr(ceilings, "measure_vector_peak", readings_of(40e9, 30e9))
    monkeypatch.setattr(
        ceilings,
        "measure_best_matmul_peak",
        readings_of((90e9, 512), (30e9, 256), (100e9, 384), (20e9, 128)),
    )
    monkeypatch.setattr(ceilings, "measure_dispatch_overhead", readings_of(3e-6))
    found = ceilings.measure_all(threads=1)
    for way in ways:
        assert found.copy_rates[way] == max(first[way], last[way]) <= found.copy_bandwidth
    assert found.copy_bandwidth == max(found.copy_rates.values())
    assert found.vector_peak == 40e9
    assert found.matmul_peak == {"float32": 100e9, "bfloat16": 30e9}

    later = dataclasses.replace(
        found,
        copy_bandwidth=11e9,
        copy_rates={way: 11e9 for way in ways},
        vector_peak=50e9,
        matmul_peak={"float32": 80e9, "bfloat16": 35e9},
        dispatch_overhead=1e-6,
    )
    for kept in (found.best_with(later), later.best_with(found)):
        for one in (found, later):
            assert kept.copy_bandwidth >= one.copy_bandwidth
            assert kept.vector_peak >= one.vector_peak
            assert all(kept.matmul_peak[d] >= peak for d, peak in one.matmul_peak.items())
            assert all(kept.copy_rates[w] >= rate for w, rate in one.copy_rates.items())
            assert kept.dispatch_overhead <= one.dispatch_overhead
