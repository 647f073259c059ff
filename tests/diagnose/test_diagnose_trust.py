"""brrr.diagnose on a busy machine: readings that disagree are measured again and then said
plainly, roofs never fall silently and are read again where a reading of the run contradicts them,
and the compute roof of a step that convolves is the better of the matmul and convolution paths
(tests/diagnose/test_zoo.py runs whole models, one of them beside .ci/neighbour_load.py).

A busy moment is planted, not waited for: a step that does twenty times its work while the profiler
is on reads to the diagnosis as a machine busy during the profiled steps, whatever the load.
"""

import dataclasses
import time

import pytest
import torch

from brrr import ceilings as ceilings_module
from brrr.diagnose import core, diagnose, profile, trust

THREADS = 1
# A step this many times slower under the profiler than off it: far outside trust.AGREE on any load.
PLANTED = 20


def _matmul_step(slower_when_profiled: bool):
    """A matmul step that runs :data:`PLANTED` times its work under the profiler (inside ops, where
    the profiled ops' time goes), or with the profiler off (a busy timing). Work, not a sleep: load
    slows both sides alike, so the ratio stays planted (a 40 ms sleep beside a starved matmul read
    0.95 of the profiled step, with the thread on the CPU 7% of the time)."""
    a, b = torch.randn(384, 384), torch.randn(384, 384)

    def step():
        profiled = torch.autograd._profiler_enabled()
        for _ in range(PLANTED if profiled == slower_when_profiled else 1):
            out = a @ b
        return out

    return step


def test_profiled_steps_far_slower_than_the_median_are_measured_again_then_called_busy(
    monkeypatch,
):
    """A 256² matmul read "MFU 95%" beside "larger matmuls can gain at most 121x": its per-op
    numbers came from profiled steps 100x slower than its median step; nothing compared them."""
    taken = []
    measure = core.measure
    monkeypatch.setattr(core, "measure", lambda *a, **k: taken.append(1) or measure(*a, **k))
    found = diagnose(_matmul_step(True), threads=THREADS, warmup=1, steps=2)
    assert len(taken) == trust.MEASUREMENTS, found.report()
    assert found.trust.level == "low" and found.trust.ops_over_timed > trust.AGREE[1]
    text = found.report()
    assert "trust: the machine was busy: the profiled steps spent" in text
    assert f"measuring the step {trust.MEASUREMENTS} times" in text.replace("\n  ", " ")
    data = found.to_json()["trust"]
    assert data["busy"] and data["level"] == "low"


def test_a_timing_far_slower_than_the_profiled_steps_is_busy_too():
    found = diagnose(_matmul_step(False), threads=THREADS, warmup=1, steps=2)
    assert found.trust.profiled_over_timed < trust.AGREE[0] and not found.trust.steps_agree
    assert "faster than the timed median" in found.report().replace("\n  ", " ")


def test_readings_that_agree_are_measured_once_and_say_nothing(monkeypatch):
    """Readings that agree, by construction: beside the neighbour load a real matmul's two readings
    parted in both of two runs (issue 51), and whether they part is not what this asks."""
    monkeypatch.setattr(core, "readings_compared", lambda measured: (1.0, 1.0))
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    found = diagnose(lambda: a @ b, threads=THREADS, warmup=1, steps=3)
    assert found.trust.measurements == 1 and found.trust.steps_agree, found.report()
    assert "the profiled steps" not in found.report()
    # a step all in one regime: its headline says so, never "infx behind"
    alone = dataclasses.replace(found, shares=dict.fromkeys(found.shares, 0.0) | {found.regime: 1})
    headline = alone.report().splitlines()[0]
    assert "inf" not in headline and "no other regime holds any of it" in headline


def test_time_the_step_did_not_get_the_core_is_measured_and_said():
    """Beside other test runs a tiny MLP's thread ran 12% of its wall time and ResNet-18 ran 7x
    slower than quiet; its verdict flipped and no check noticed."""
    start = profile._clocks()
    time.sleep(0.05)  # the core given to nobody, as to another process
    assert profile.cpu_share(start, 1) < trust.CPU_SHARE_LOW
    assert profile.cpu_share(start, 2) == 1.0  # many threads: not a measure of load
    verdict = trust.Trust(1.0, 1.0, 1, {}, cpu_share=0.12)
    assert verdict.busy and verdict.level == "low"
    text = " ".join(verdict.sentences())
    assert "the step's thread ran 12% of the time it was measured" in text
    loaded = trust.Trust(1.0, 1.0, 1, {}, load=(4.0, 2))
    assert loaded.busy and loaded.level == "medium"
    assert "load average was 4.0 on 2 cores" in " ".join(loaded.sentences())
    quiet = trust.Trust(1.0, 1.0, 1, {}, cpu_share=0.97, load=(1.2, 2))
    assert not quiet.busy and quiet.level == "high" and quiet.sentences() == []


def test_agreement_is_a_band_either_way():
    low, high = trust.AGREE
    assert trust.agrees(1.0, 1.0) and trust.agrees(high, low)
    assert not trust.agrees(high * 1.01, 1.0) and not trust.agrees(1.0, low * 0.99)
    assert trust.distance(4.0, 1.0) == 4.0 and trust.distance(0.5, 0.25) == 4.0
    assert trust.distance(0.9, 1.1) == 1.0


def _cached(threads=THREADS):
    return ceilings_module.measure(threads=threads)


def test_a_probe_above_a_roof_has_the_roofs_read_again(monkeypatch):
    """The non-matmul roof was measured under load (9.48 GFLOP/s against 288 quiet), cached, and
    divided by: a short reading now above a roof means the roof was read in a busy moment."""
    true = _cached()
    low = dataclasses.replace(
        true,
        matmul_peak={name: peak / 20 for name, peak in true.matmul_peak.items()},
        vector_peak=true.vector_peak / 20,
    )
    again = []
    monkeypatch.setattr(
        ceilings_module, "measured_again", lambda found: again.append(found) or true
    )
    found, readings = ceilings_module.checked_against_probes(low)
    assert again == [low] and found == true
    assert set(readings) == {"float32 matmul", "non-matmul", "copy"}
    assert ceilings_module.contradicted(ceilings_module.probe_readings(low)) != []


def test_a_probe_far_below_its_roof_says_the_machine_is_busy_now(monkeypatch):
    true = _cached()
    high = dataclasses.replace(
        true,
        matmul_peak={name: peak * 20 for name, peak in true.matmul_peak.items()},
        copy_bandwidth=true.copy_bandwidth * 20,
        vector_peak=true.vector_peak * 20,
    )
    monkeypatch.setattr(ceilings_module, "measured_again", lambda found: pytest.fail("read again"))
    found, readings = ceilings_module.checked_against_probes(high)
    assert found == high and readings["float32 matmul"] < trust.BUSY_PROBE
    verdict = trust.Trust(1.0, 1.0, 1, readings)
    assert verdict.busy and verdict.level == "medium"
    assert "busier now than when its roofs were read" in " ".join(verdict.sentences())


def test_refresh_never_lowers_a_roof_and_says_which_read_lower(monkeypatch, tmp_path):
    """--refresh under load lowered the cached non-matmul roof 15x without a word."""
    cached = _cached()
    path = tmp_path / "ceilings.json"
    ceilings_module.cache.write_json(path, cached.to_json())
    loaded = dataclasses.replace(cached, vector_peak=cached.vector_peak / 15)
    monkeypatch.setattr(ceilings_module, "cache_path", lambda threads=None: path)
    monkeypatch.setattr(ceilings_module, "measure_all", lambda threads=None: loaded)
    monkeypatch.setattr(ceilings_module, "checked_against_probes", lambda found: (found, {}))
    monkeypatch.setattr(ceilings_module.reference, "record_ceilings", lambda data: None)
    found, notes = ceilings_module.refreshed(THREADS)
    assert found.vector_peak == cached.vector_peak
    assert ceilings_module.Ceilings.from_json(ceilings_module.cache.read_json(path)) == found
    assert len(notes) == 1 and notes[0].startswith("non-matmul peak read 15.0x lower now")
    assert ceilings_module.measure(refresh=True, threads=THREADS).vector_peak == cached.vector_peak


def test_a_fresh_measurement_a_probe_contradicts_is_measured_again_before_it_is_cached(
    monkeypatch, tmp_path
):
    cached = _cached()
    low = dataclasses.replace(cached, vector_peak=cached.vector_peak / 20)
    path = tmp_path / "ceilings.json"
    monkeypatch.setattr(ceilings_module, "cache_path", lambda threads=None: path)
    monkeypatch.setattr(ceilings_module, "measure_all", lambda threads=None: low)
    monkeypatch.setattr(ceilings_module, "measured_again", lambda found: cached)
    monkeypatch.setattr(ceilings_module.reference, "record_ceilings", lambda data: None)
    found, _ = ceilings_module.refreshed(THREADS)
    assert found.vector_peak == cached.vector_peak
    assert ceilings_module.cache.read_json(path)["vector_peak"] == cached.vector_peak


def test_a_step_that_convolves_is_divided_by_the_better_of_matmul_and_convolution(monkeypatch):
    """oneDNN's direct 3x3 convolution ran at 227 GFLOP/s on one thread against a torch.mm "peak" of
    107: ResNet-18 read an MFU of 135-142% and the report blamed FLOP counting."""
    conv = torch.nn.Conv2d(32, 32, 3, padding=1)
    x = torch.randn(8, 32, 32, 32)
    matmul = _cached().matmul("float32")
    monkeypatch.setattr(
        ceilings_module, "convolution_peak", lambda threads=None, refresh=False: 3 * matmul
    )
    found = diagnose(lambda: conv(x), threads=THREADS, warmup=1, steps=2)
    assert found.convolution_peak == 3 * matmul and found.matmul_peak is not None
    assert found.ceilings.matmul("float32") == 3 * matmul
    assert found.mfu == pytest.approx(found.flops_per_step / found.step_s / (3 * matmul))
    assert "the measured convolution peak, above the matmul peak" in found.report().replace(
        "\n  ", " "
    )
    # the cache keeps the matmul peak apart: dividing by the better roof writes nothing
    assert _cached().matmul("float32") < 3 * matmul
    plain = core.with_convolution_roof(_cached(), "float32", None)
    assert plain == _cached()


def test_the_convolution_roof_is_measured_and_only_rises(monkeypatch, tmp_path):
    path = tmp_path / "convolution.json"
    monkeypatch.setattr(ceilings_module, "convolution_cache_path", lambda threads=None: path)
    readings = iter([5e9, 2e9])
    monkeypatch.setattr(
        ceilings_module, "measure_convolution_peak", lambda threads=None: next(readings)
    )
    assert ceilings_module.convolution_peak(threads=THREADS) == 5e9
    assert ceilings_module.convolution_peak(threads=THREADS, refresh=True) == 5e9  # 2e9 kept out
    assert ceilings_module.convolution_peak(threads=THREADS) == 5e9


def test_the_convolution_peak_is_a_rate_of_real_convolutions():
    assert ceilings_module.measure_convolution_peak(threads=THREADS) > 1e8
