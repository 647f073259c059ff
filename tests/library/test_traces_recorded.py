"""brrr.traces on a trace that torch.profiler records now, on this machine's device."""

from __future__ import annotations

import torch

from brrr import traces
from brrr.device import DEVICE, ON_GPU


def test_record_writes_a_chrome_trace_that_reads_back(tmp_path, capfd):
    a = torch.ones(8, device=DEVICE)

    def step():
        x = a
        for _ in range(20):
            x = x + 1
        return x

    step()
    path = tmp_path / "nested" / "adds.json"
    trace = traces.record(step, steps=3, path=path)
    assert path.exists() and path.stat().st_size > 0
    assert "profiler_start" not in capfd.readouterr().err  # Kineto's native log lines are silenced

    steps = [a for a in trace.annotations if a.name == "step"]
    assert len(steps) == 3
    adds = [op for op in trace.top_level_cpu_ops() if op.name == "aten::add"]
    assert len(adds) == 60
    for add in adds:
        assert any(s.start_us <= add.start_us and add.end_us <= s.end_us for s in steps)
    window = trace.window
    assert 0 <= window[0] < window[1]
    host_idle = traces.idle_fraction(trace.top_level_cpu_ops(), window)
    assert 0 < host_idle < 1
    assert trace.has_device == ON_GPU
    if ON_GPU:
        assert len(trace.device) >= 60
        assert 0 < traces.device_idle_fraction(trace) < 1


def test_profiler_warmup_calls_run_but_stay_out_of_the_profile(tmp_path, capfd):
    """The warm-up call runs under the profiler (its start-up lands there) and leaves no op or
    annotation."""
    a = torch.ones(8, device=DEVICE)
    calls = []

    def step():
        calls.append(1)
        return a + 1

    profiler = traces.profile_steps(step, 3, profiler_warmup=1, synchronize_each=True)
    trace = traces.export(profiler, tmp_path / "warm.json")
    assert len(calls) == 4
    assert "profiler_start" not in capfd.readouterr().err
    assert len(trace.annotation_spans("step")) == 3
    assert len([op for op in trace.top_level_cpu_ops() if op.name == "aten::add"]) == 3
    assert {e.key: e.count for e in profiler.key_averages()}["aten::add"] == 3
