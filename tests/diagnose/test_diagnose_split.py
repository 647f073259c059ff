"""The GPU time split of brrr.diagnose on a hand-built Kineto trace with exact, hand-checked values.

One step, 0-100 µs, annotated "step"; kernels on stream 7 (and one on stream 8, overlapping):

    launch   kernel        the gap before it                  why
    2-4      K1 10-30      0-10 host wait   launch at 2 > gap start 0: not yet issued
    5-7      K2 35-50      30-35 other      launch at 5 < 30: queued, the device lagged
    8-9      K5 40-45      (stream 8, inside K2: no gap, busy counted once)
    60-62    K3 65-80      50-65 host wait  launch at 60 > 50
    63-64    K4 85-90      80-85 other      launch at 63 < 80
             (none)        90-100 host wait nothing left queued while the host finishes the step

busy 20 + 15 + 15 + 5 = 55, host wait 10 + 15 + 10 = 35, other 5 + 5 = 10; 5 kernels. The trace
holds two such steps, the second 100 µs later, so each figure is a per-step mean.
"""

import pytest

from brrr import traces
from brrr.diagnose import split

STEP = 100
LAUNCHES = [  # (kernel name, stream, launch span, kernel span)
    ("K1", 7, (2, 4), (10, 30)),
    ("K2", 7, (5, 7), (35, 50)),
    ("K5", 8, (8, 9), (40, 45)),
    ("K3", 7, (60, 62), (65, 80)),
    ("K4", 7, (63, 64), (85, 90)),
]


def hand_built_trace(steps: int = 2) -> dict:
    events = []
    correlation = 0
    for index in range(steps):
        t0 = 5_000.0 + index * STEP
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "step",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": STEP,
                "args": {},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": t0 + 1,
                "dur": 70,
                "args": {},
            }
        )
        for name, stream, (l0, l1), (k0, k1) in LAUNCHES:
            correlation += 1
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t0 + l0,
                    "dur": l1 - l0,
                    "args": {"correlation": correlation},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": stream,
                    "ts": t0 + k0,
                    "dur": k1 - k0,
                    "args": {"stream": stream, "correlation": correlation},
                }
            )
    events.append(
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "tid": 7,
            "ts": 5_000.0 + steps * STEP + 50,
            "dur": 5,
            "args": {"stream": 7},
        }
    )  # after the steps
    return {"traceEvents": events}


def test_gpu_split_matches_the_hand_computed_values():
    found = split.time_split(traces.load(hand_built_trace()))
    assert found.clock == "GPU"
    assert found.step_us == STEP
    assert found[split.BUSY] == pytest.approx(0.55, abs=1e-12)
    assert found[split.HOST_WAIT] == pytest.approx(0.35, abs=1e-12)
    assert found[split.IDLE_OTHER] == pytest.approx(0.10, abs=1e-12)


def test_launches_per_step_counts_kernels_inside_the_steps():
    # the memcpy after the steps is not in a step, and not a kernel
    assert split.launches_per_step(traces.load(hand_built_trace())) == 5


def test_gaps_are_host_wait_only_when_the_next_launch_came_later():
    trace = traces.load(hand_built_trace(steps=1))
    assert split.gpu_idle_us(trace, (0.0, 100.0)) == pytest.approx((35.0, 10.0))
    assert split.gpu_idle_us(trace, (25.0, 40.0)) == pytest.approx(
        (0.0, 5.0)
    )  # K2 was queued at 5 µs
    assert split.gpu_idle_us(trace, (45.0, 70.0)) == pytest.approx(
        (15.0, 0.0)
    )  # K3 launched at 60 µs
    assert split.gpu_idle_us(trace, (85.0, 100.0)) == pytest.approx(
        (10.0, 0.0)
    )  # nothing left queued


def test_cpu_split_is_inside_against_between_top_level_ops():
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "step",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::linear",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 30,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::addmm",
            "pid": 1,
            "tid": 1,
            "ts": 15,
            "dur": 20,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 60, "dur": 15},
    ]
    found = split.time_split(traces.load(events))
    assert found.clock == "CPU"
    assert found[split.INSIDE_OPS] == pytest.approx(0.45)
    assert found[split.BETWEEN_OPS] == pytest.approx(0.55)
    assert (
        split.launches_per_step(traces.load(events)) == 2
    )  # top-level ops: addmm runs inside linear


def test_an_op_with_no_work_counted_is_overhead_on_a_cpu_and_data_movement_on_a_gpu():
    from brrr.diagnose.ops import op_regime
    from brrr.roofline import Roof

    cpu = Roof(1e11, 1e10, 2e-6, overhead_adds=True)
    gpu = Roof(1e14, 3e12, 5e-6, overhead_adds=False)
    assert (
        op_regime(0, 0, cpu).value == "overhead-bound"
    )  # a view or a wrapper: its time is dispatch
    assert (
        op_regime(0, 0, gpu).value == "memory-bound"
    )  # device time is kernel time: a nested copy, a fill
    assert op_regime(2 * 4096**3, 3 * 4096**2 * 4, gpu).value == "compute-bound"
    assert op_regime(2**28, 2 * 4 * 2**28, gpu).value == "memory-bound"
    assert (
        op_regime(32, 2 * 4 * 32, gpu).value == "overhead-bound"
    )  # 32 elements: less work than a launch


def test_cpu_launches_count_aten_ops_inside_a_compiled_region():
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "step",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "Torch-Compiled Region: 0/0",
            "pid": 1,
            "tid": 1,
            "ts": 5,
            "dur": 90,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::addmm",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 20,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 12, "dur": 5},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::addmm",
            "pid": 1,
            "tid": 1,
            "ts": 50,
            "dur": 20,
        },
    ]
    assert (
        split.launches_per_step(traces.load(events)) == 2
    )  # two library calls; copy_ runs inside one
