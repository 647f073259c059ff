import dataclasses
import math

import pytest

from brrr import ceilings, reference
from brrr.ceilings import Ceilings
from brrr.device import ON_GPU


def _fake(**overrides) -> Ceilings:
    values = dict(
        copy_bandwidth=20e9,
        matmul_peak={"float32": 200e9, "bfloat16": 60e9},
        vector_peak=30e9,
        dispatch_overhead=2e-6,
        threads=None,
        env={"device": "Test CPU", "device_type": "cpu", "torch": "x", "triton": "y", "mode": "CPU", "date": "2026-01-01"},
    )
    values.update(overrides)
    return Ceilings(**values)


def test_each_measurement_gives_a_plausible_positive_rate():
    bandwidth = ceilings.measure_copy_bandwidth(n=2**22, threads=1)
    matmul = ceilings.measure_matmul_peak("float32", n=256, threads=1)
    overhead = ceilings.measure_dispatch_overhead(ops=200, threads=1)
    for value in (bandwidth, matmul, overhead):
        assert math.isfinite(value) and value > 0
    # Sanity bounds no real machine breaks: 100 MB/s .. 100 TB/s, and 10 ns .. 1 ms per op.
    assert 1e8 < bandwidth < 1e14
    assert 1e-8 < overhead < 1e-3


def test_the_non_matmul_peak_is_a_throughput_not_a_latency():
    """Independent accumulators keep the units busy; one dependent chain waits on each result (measured here)."""
    throughput = ceilings.measure_vector_peak(n=2**16, threads=1)
    latency = ceilings.measure_vector_peak(n=2**16, steps=64, chains=1, threads=1)
    assert throughput > 1.5 * latency, (throughput, latency)


@pytest.mark.skipif(not ON_GPU, reason="on a CPU, matmuls and other arithmetic share the same vector units")
def test_tensor_cores_beat_non_matmul_arithmetic():
    # The gap the essay makes much of, measured in one run.
    matmul = ceilings.measure_matmul_peak("bfloat16", n=4096)
    vector = ceilings.measure_vector_peak()
    assert matmul > 4 * vector


def test_a_cpus_roofs_add_the_overhead_and_a_gpus_overlap_it():
    assert _fake().roof("vector").overhead_adds and _fake().roof("matmul").overhead_adds
    gpu = _fake(env={**_fake().env, "device_type": "cuda"})
    assert not gpu.roof("vector").overhead_adds


def test_roofs_use_the_right_peak():
    fake = _fake()
    assert fake.roof("matmul").peak_flops == 200e9
    assert fake.roof("matmul", "bfloat16").peak_flops == 60e9
    assert fake.roof("vector").peak_flops == 30e9
    assert fake.roof("vector").ridge_point == pytest.approx(1.5)
    with pytest.raises(KeyError, match="no matmul peak measured for float16"):
        fake.roof("matmul", "float16")
    with pytest.raises(ValueError):
        fake.roof("tensor")


def test_json_round_trip_and_summary_carry_the_stamp():
    fake = _fake()
    assert Ceilings.from_json(fake.to_json()) == fake
    summary = fake.summary()
    assert "20.0 GB/s" in summary and "Test CPU" in summary and "2026-01-01" in summary


def test_cache_is_used_then_invalidated_by_a_version_change(tmp_path, monkeypatch):
    monkeypatch.setenv("BRRR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(reference.ENV_VAR, raising=False)  # fake ceilings must not reach data/reference
    calls = []

    def fake_measure_all(threads=None):
        calls.append(threads)
        return _fake(env=ceilings.environment())

    monkeypatch.setattr(ceilings, "measure_all", fake_measure_all)
    first = ceilings.measure()
    second = ceilings.measure()
    assert first == second and len(calls) == 1
    ceilings.measure(refresh=True)
    assert len(calls) == 2

    stale = first.to_json()
    stale["env"] = {**stale["env"], "torch": "0.0.1"}
    ceilings.cache.write_json(ceilings.cache_path(), stale)
    ceilings.measure()
    assert len(calls) == 3


def test_cli_prints_the_summary(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BRRR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(reference.ENV_VAR, raising=False)  # fake ceilings must not reach data/reference
    monkeypatch.setattr(ceilings, "measure_all", lambda threads=None: _fake(env=ceilings.environment()))
    assert ceilings.main([]) == 0
    assert "copy bandwidth" in capsys.readouterr().out
    assert ceilings.main(["--json"]) == 0
    assert '"copy_bandwidth": 20000000000.0' in capsys.readouterr().out


def test_dataclass_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _fake().copy_bandwidth = 1


def test_only_default_thread_ceilings_are_recorded_as_the_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("BRRR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path / "reference"))
    monkeypatch.setattr(ceilings, "measure_all", lambda threads=None: _fake(threads=threads, env=ceilings.environment()))
    ceilings.measure(threads=1)  # what the overhead notebooks ask for
    assert not (tmp_path / "reference").exists()
    ceilings.measure()  # what `python -m brrr.ceilings --refresh` measures
    (recorded,) = reference.load_all(tmp_path / "reference").values()
    assert recorded["ceilings"]["threads"] is None
