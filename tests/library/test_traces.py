"""brrr.traces on a hand-written Chrome trace whose every expected value is known.

The fixture ``tests/fixtures/traces/two-row-step.json`` (see the README beside it)
is one 100 µs step in Kineto's format, offset to a realistic absolute timestamp:

    time (µs)     0    10   20   30   40   50   60   70   80   90   100
    CPU ops       [linear------)    [relu)         [sum)  [bwd-----)        thread 4991 / 5002
    device                  [gemm-----)     [relu+fill)   [ms]   [memcpy]  streams 7 and 8

Device busy: [20,35) [50,60) [80,82) [90,100) = 37 µs of 100, so idle 63%.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from brrr import traces

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "two-row-step.json"
ORIGIN = 4459508754497.5


@pytest.fixture(scope="module")
def trace() -> traces.Trace:
    return traces.load(FIXTURE)


def test_rows_hold_the_right_events(trace):
    assert [op.name for op in trace.cpu_ops] == [
        "aten::linear",
        "aten::addmm",
        "aten::relu",
        "aten::clamp_min",
        "aten::sum",
        "autograd::engine::evaluate_function: AddmmBackward0",
        "aten::mm",
    ]
    assert [e.name for e in trace.launches] == [
        "cudaLaunchKernel",
        "cudaLaunchKernel",
        "cudaLaunchKernel",
        "cuLaunchKernel",
        "cudaMemcpyAsync",
    ]
    # gpu_user_annotation spans 20-100 on stream 7 but is not device work: it must not appear
    assert [(e.start_us, e.end_us) for e in trace.device] == [
        (20, 35),
        (50, 55),
        (52, 60),
        (80, 82),
        (90, 100),
    ]
    assert [e.category for e in trace.device] == [
        "kernel",
        "kernel",
        "kernel",
        "gpu_memset",
        "gpu_memcpy",
    ]
    assert [e.lane for e in trace.device] == [
        "stream 7",
        "stream 7",
        "stream 8",
        "stream 7",
        "stream 7",
    ]
    assert [(a.name, a.start_us, a.end_us) for a in trace.annotations] == [("step", 0, 100)]


def test_times_are_microseconds_from_the_first_kept_event(trace):
    # the 'Trace' span starts 5 µs earlier but is not a kept category
    assert trace.origin_us == ORIGIN
    assert trace.cpu_ops[0].start_us == 0
    assert trace.cpu_ops[1].start_us == 5 and trace.cpu_ops[1].duration_us == 23
    assert trace.window == (0, 100)
    assert trace.annotation_span("step") == (0, 100)
    with pytest.raises(KeyError, match="no annotation named 'nope'"):
        trace.annotation_span("nope")


def test_top_level_cpu_ops_drop_nested_ones_per_thread(trace):
    top = trace.top_level_cpu_ops()
    assert [(op.name, op.start_us, op.end_us) for op in top] == [
        ("aten::linear", 0, 30),
        ("aten::relu", 40, 50),
        ("aten::sum", 70, 80),
        ("autograd::engine::evaluate_function: AddmmBackward0", 82, 95),
    ]
    assert top[-1].lane == "thread 5002"


def test_device_busy_time_gaps_and_idle_fraction(trace):
    assert traces.merge(trace.device) == [(20, 35), (50, 60), (80, 82), (90, 100)]
    assert traces.busy_us(trace.device, trace.window) == 37
    assert traces.idle_gaps(trace.device, trace.window) == [(0, 20), (35, 50), (60, 80), (82, 90)]
    assert traces.idle_gaps(trace.device, trace.window, min_gap_us=10) == [
        (0, 20),
        (35, 50),
        (60, 80),
    ]
    assert traces.device_idle_fraction(trace) == 0.63
    # over a chosen window: [20, 60) holds 15 + 10 busy µs of 40
    assert traces.device_idle_fraction(trace, (20, 60)) == 0.375
    assert traces.idle_gaps(trace.device, (20, 60)) == [(35, 50)]


def test_cpu_row_gaps_and_idle_fraction(trace):
    ops = trace.top_level_cpu_ops()
    assert traces.idle_gaps(ops, trace.window) == [(30, 40), (50, 70), (80, 82), (95, 100)]
    assert traces.idle_fraction(ops, trace.window) == 0.37
    # nested ops change nothing: the union of all ops is the union of the top-level ones
    assert traces.idle_fraction(trace.cpu_ops, trace.window) == 0.37


def test_interval_arithmetic_edge_cases():
    assert traces.merge([(5, 6), (0, 2), (2, 3), (1, 2.5)]) == [(0, 3), (5, 6)]
    assert traces.merge([]) == []
    assert traces.idle_gaps([], (0, 4)) == [(0, 4)]
    assert traces.idle_fraction([], (0, 4)) == 1.0
    assert traces.idle_fraction([(-1, 9)], (0, 4)) == 0.0  # clipped to the window
    assert traces.busy_us([(-1, 1), (3, 9)], (0, 4)) == 2
    with pytest.raises(ValueError, match="empty window"):
        traces.idle_fraction([], (3, 3))


def test_gzipped_trace_and_event_list_read_the_same(tmp_path, trace):
    packed = tmp_path / "trace.json.gz"
    with gzip.open(packed, "wt") as stream:
        stream.write(FIXTURE.read_text())
    assert traces.load(packed) == trace
    document = json.loads(FIXTURE.read_text())
    assert traces.load(document["traceEvents"]) == trace
    assert traces.load(document) == trace


def test_older_category_names_are_understood():
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::add", "ts": 10, "dur": 4, "tid": 1},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "ts": 11, "dur": 1, "tid": 1},
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "add_kernel",
            "ts": 16,
            "dur": 2,
            "args": {"stream": 7},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy DtoH",
            "ts": 19,
            "dur": 1,
            "args": {"stream": 7},
        },
    ]
    trace = traces.parse(events)
    assert [len(trace.cpu_ops), len(trace.launches), len(trace.device)] == [1, 1, 2]
    assert trace.window == (0, 10)
    assert traces.device_idle_fraction(trace) == 0.7


def test_a_cpu_only_trace_has_no_device_idle_fraction():
    trace = traces.parse([{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 1}])
    assert not trace.has_device
    with pytest.raises(ValueError, match="no device events"):
        traces.device_idle_fraction(trace)
    with pytest.raises(ValueError, match="no CPU ops"):
        traces.parse([]).window


def drawn_gaps(ax) -> list[tuple[float, float]]:
    """The idle gaps that ``render_timeline`` shaded on ``ax``, as sorted ``(start, end)`` spans."""
    spans = []
    for collection in ax.collections:
        if collection.get_label() in traces.GAP_LABELS.values():
            for path in collection.get_paths():
                xs = path.vertices[:, 0]
                spans.append((float(xs.min()), float(xs.max())))
    return sorted(spans)


def test_timeline_shades_exactly_the_device_gaps(trace):
    import matplotlib.pyplot as plt

    ax = traces.render_timeline(trace, title="fixture")
    assert drawn_gaps(ax) == [(0, 20), (35, 50), (60, 80), (82, 90)]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["device kernels", "CPU ops"]
    plt.close(ax.figure)


def test_timeline_of_a_cpu_only_trace_shades_the_gaps_between_ops():
    import matplotlib.pyplot as plt

    trace = traces.parse(
        [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 3, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "ts": 5, "dur": 2, "tid": 1},
        ]
    )
    ax = traces.render_timeline(trace)
    assert drawn_gaps(ax) == [(3, 5)]
    assert any("no device in this trace" in t.get_text() for t in ax.texts)
    plt.close(ax.figure)


def test_quiet_native_stderr_drops_profiler_chatter_and_keeps_the_rest(capfd):
    import os

    from brrr.traces import quiet_native_stderr

    with quiet_native_stderr():
        os.write(2, b"USDT: Profiler start\n")
        os.write(
            2,
            b"[W1122 03:48:39.9 CPUAllocator.cpp:245] Memory block of unknown size was allocated "
            b"before the profiling started, profiler results will not include the deallocation "
            b"event\n",
        )
        os.write(2, b"a real error\n")
    assert capfd.readouterr().err == "a real error\n"


CPU_ONLY = traces.parse(
    [  # ops and Python gaps across the whole window
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": 10 * i, "dur": 7, "tid": 1}
        for i in range(10)
    ]
)


@pytest.mark.parametrize("panels", [1, 2])
@pytest.mark.parametrize("which", ["fixture", "cpu only"])
def test_timeline_legend_stays_clear_of_the_bars(which, panels, request):
    trace = request.getfixturevalue("trace") if which == "fixture" else CPU_ONLY
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # As notebook 32 draws them: one step, or two panels in one figure.
    if panels == 1:
        _, ax = plt.subplots(figsize=(10, 2.8))
        traces.render_timeline(trace, title="fixture", ax=ax, stamp="[stamp]")
    else:
        fig, axes = plt.subplots(2, 1, figsize=(10, 5.4))
        for ax in axes:
            traces.render_timeline(trace, title="fixture", ax=ax)
        fig.tight_layout()
        fig.subplots_adjust(bottom=0.13)
    renderer = ax.figure.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    for bars in ax.collections:
        for path in bars.get_paths():
            box = path.get_extents(bars.get_transform())
            assert not legend.overlaps(box), "the legend covers a bar"
    plt.close(ax.figure)


# ---------------------------------------------------------------- the reference GPU trace


def _synthetic():
    return traces.read_reference_trace(
        traces.reference_traces_dir() / f"{traces.SYNTHETIC_NAME}.json"
    )


def test_the_synthetic_gpu_trace_ships_labelled_and_loads_with_device_rows():
    shipped = _synthetic()
    assert shipped.synthetic and "synthetic" in shipped.name and "synthetic" in shipped.stamp
    assert shipped.label == "synthetic, built by hand"
    trace = shipped.trace
    assert trace.has_device and len(trace.device) == 10 and len(trace.launches) == 10
    assert {k.category for k in trace.device} == {"kernel"} and {k.lane for k in trace.device} == {
        "stream 7"
    }
    assert {launch.name for launch in trace.launches} == {"cudaLaunchKernel"}
    assert (
        len(trace.top_level_cpu_ops()) == 10 and len(trace.cpu_ops) == 16
    )  # three ops nest one each, per step
    assert trace.annotation_spans("step") == [(0.0, 100.0), (100.0, 200.0)]


def test_the_synthetic_trace_gives_the_idle_split_worked_by_hand():
    trace = _synthetic().trace
    # kernels per step: [20,26) [36,38) [60,66) [76,79) [95,100): 6 + 2 + 6 + 3 + 5 = 22 µs
    assert trace.window == (0.0, 200.0)
    assert traces.busy_us(trace.device, trace.window) == 44.0
    assert traces.device_idle_fraction(trace) == 0.78
    one_step = [(0.0, 20.0), (26.0, 36.0), (38.0, 60.0), (66.0, 76.0), (79.0, 95.0)]
    assert traces.idle_gaps(trace.device, trace.window) == one_step + [
        (s + 100, e + 100) for s, e in one_step
    ]
    # the host row: ops of 20 + 10 + 20 + 14 + 14 = 78 µs per step
    assert traces.busy_us(trace.top_level_cpu_ops(), trace.window) == 156.0
    # the steady-state window the notebook uses: the second step only
    assert _synthetic().window == (100.0, 200.0)
    assert traces.device_idle_fraction(trace, _synthetic().window) == 0.78


def test_the_committed_synthetic_trace_is_what_the_function_builds():
    # Reproducible: `python -m brrr.traces` writes exactly the committed file.
    path = traces.reference_traces_dir() / f"{traces.SYNTHETIC_NAME}.json"
    assert json.loads(path.read_text()) == json.loads(json.dumps(traces.synthetic_gpu_train_step()))


def test_a_recorded_gpu_trace_replaces_the_synthetic_one(tmp_path):
    folder = tmp_path / "traces"
    traces.write_trace_json(
        traces.synthetic_gpu_train_step(), folder / f"{traces.SYNTHETIC_NAME}.json"
    )
    assert traces.reference_trace(folder).synthetic
    # a CPU-only recording (no device rows) does not replace it
    cpu_only = {
        "brrr": {"synthetic": False},
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}
        ],
    }
    traces.write_trace_json(cpu_only, folder / "a-cpu-train-step.json")
    assert traces.reference_trace(folder).synthetic
    # a GPU recording saved by notebook 32 does, and carries that run's stamp
    saved = traces.save_reference_trace(
        FIXTURE, folder, description="the hand-written fixture, as if recorded"
    )
    shown = traces.reference_trace(folder)
    assert not shown.synthetic and shown.name == saved.stem and shown.label == "recorded elsewhere"
    assert shown.stamp.startswith("[measured on ")
    # only what the rows need was kept: the python_function frame and the Trace span are gone, the
    # rows are not
    kept = json.loads(saved.read_text())["traceEvents"]
    assert not [e for e in kept if e.get("cat") in ("python_function", "Trace")]
    original = traces.load(FIXTURE)
    assert (shown.trace.cpu_ops, shown.trace.device, shown.trace.launches) == (
        original.cpu_ops,
        original.device,
        original.launches,
    )
