"""One op as a flamegraph (brrr_book/flames.py): the profiler's nesting under an op, and the kernel
it queued."""

import pytest

from brrr import traces
from brrr_book import figures, flames

pytestmark = pytest.mark.device_independent


def _event(name, cat, ts, dur, tid=1, correlation=None):
    args = {"correlation": correlation} if correlation is not None else {}
    if cat == "kernel":
        args["stream"] = 7
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid, "args": args}


# An add as a GPU profiler nests it, with a second op after it and an op on another thread inside
# its span.
ADD = [
    _event("aten::add", "cpu_op", 100, 20),
    _event("aten::empty", "cpu_op", 102, 3),
    _event("cudaLaunchKernel", "cuda_runtime", 110, 6, correlation=5),
    _event("add_kernel", "kernel", 118, 2, correlation=5),
    _event("aten::mul", "cpu_op", 125, 10),
    _event("cudaLaunchKernel", "cuda_runtime", 128, 4, correlation=6),
    _event("mul_kernel", "kernel", 134, 2, correlation=6),
    _event("aten::copy_", "cpu_op", 104, 4, tid=2),
]


def test_the_frames_of_an_op_nest_by_containment_and_take_its_own_kernel():
    trace = traces.parse(ADD)
    frames = flames.nest(trace, flames.last_op(trace, "aten::add"))
    assert [(f.name, f.start_us, f.duration_us, f.depth, f.on_device) for f in frames] == [
        ("aten::add", 0, 20, 0, False),
        ("aten::empty", 2, 3, 1, False),  # inside the op, closed before the launch starts
        ("cudaLaunchKernel", 10, 6, 1, False),
        (
            "add_kernel",
            18,
            2,
            0,
            True,
        ),  # the mul's kernel and the other thread's copy are not the add's
    ]
    assert flames.kernel_share(frames) == pytest.approx(2 / 20)


def test_an_op_that_launched_nothing_is_not_taken():
    trace = traces.parse([_event("aten::relu", "cpu_op", 0, 5)] + ADD)
    with pytest.raises(KeyError, match="aten::relu"):
        flames.last_op(trace, "aten::relu")


def test_the_synthetic_trace_draws_a_flamegraph_with_its_kernel():
    """Without a recorded GPU the book draws the synthetic trace's relu: a launch above it, a kernel
    below."""
    trace = traces.load(traces.synthetic_gpu_train_step())
    frames = flames.nest(trace, flames.last_op(trace, "aten::relu"))
    assert {f.name for f in frames if not f.on_device} >= {
        "aten::relu",
        "aten::clamp_min",
        "cudaLaunchKernel",
    }
    assert [f.depth for f in frames if f.name == "cudaLaunchKernel"] == [2]
    assert 0 < flames.kernel_share(frames) < 1
    fig = figures.flamegraph(frames, "relu on a synthetic GPU trace")
    assert "the kernel is" in fig.axes[0].get_title() and len(fig.axes[0].patches) == len(frames)
    assert figures.flamegraph([], "").axes[0].texts, (
        "no frames: the panel says which record it waits for"
    )
