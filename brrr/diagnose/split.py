"""Where a step's wall time goes, read from a profiler trace with one ``step`` annotation per step.

GPU: the device is *busy* while any kernel, memcpy or memset runs (streams merged).
Its idle time is split as Holistic Trace Analysis (HTA,
``TraceAnalysis.get_idle_time_breakdown``) splits it: an idle gap ends when the
next kernel starts, and it is

idle, waiting on the host
    when that kernel's launch (the ``cudaLaunchKernel`` tied to it by its
    correlation id) began after the gap began: the host had not yet issued the
    work, so the device waited on Python and the framework. The gap after the
    step's last kernel counts here too: the device has nothing queued while the
    host finishes the step.
idle, other
    otherwise: the work was already queued (stream synchronization, a memcpy
    the kernel waited on, launch latency). HTA calls the part of this shorter
    than 30 ns between back-to-back kernels "kernel wait"; we fold it into
    "other", since at these sizes it never decides the regime.

HTA itself is not used: ``pip install --dry-run HolisticTraceAnalysis`` (0.5.0,
checked against our pinned environment) would add 14 packages, jupyterlab 4.6,
pandas 3.1 and plotly 7.1 among them, and it analyses a folder of per-rank trace
files through pandas frames. The definition above is implemented on
:mod:`brrr.traces` instead, and tested on a hand-built trace.

CPU: ops run on the host thread, so the split is the time *inside* top-level ops
(dispatch and kernel both) against the time *between* them (Python, the
framework outside any op).

Fractions are of the profiled steps' wall time (the ``step`` annotations), so
they sum to 1. A launch is one kernel on a GPU and one top-level aten op on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from brrr import traces
from brrr.traces import Span, Trace

BUSY = "GPU busy"
HOST_WAIT = "GPU idle, waiting on the host"
IDLE_OTHER = "GPU idle, other"
INSIDE_OPS = "inside ops"
BETWEEN_OPS = "between ops"


@dataclass(frozen=True)
class Split:
    """Named fractions of the step's wall time, summing to 1, and the wall time they divide."""

    fractions: dict[str, float]
    step_us: float  # mean wall time of one profiled step (profiler on), µs
    clock: str  # "GPU" or "CPU"

    def __getitem__(self, name: str) -> float:
        return self.fractions[name]

    def to_json(self) -> dict:
        return {"clock": self.clock, "step_us": self.step_us, "fractions": dict(self.fractions)}


def step_windows(trace: Trace, label: str = "step") -> list[Span]:
    """One ``(start, end)`` per profiled step; the whole trace if it has no such annotation."""
    spans = trace.annotation_spans(label)
    return spans or [trace.window]


def _total(windows: list[Span]) -> float:
    return sum(end - start for start, end in windows)


def gpu_idle_us(trace: Trace, window: Span) -> tuple[float, float]:
    """``(waiting on the host, other)`` idle µs of the device in ``window``, by HTA's rule (see
    above).

    A gap that runs to the end of the window is host wait: :func:`brrr.diagnose.profile.measure`
    synchronizes inside each step, so the device finished everything queued and waits for the host
    to end the step. A gap ended by an event whose launch the trace does not show is "other".
    """
    launch_start = {
        launch.correlation: launch.start_us
        for launch in trace.launches
        if launch.correlation is not None
    }
    host = other = 0.0
    for gap_start, gap_end in traces.idle_gaps(trace.device, window):
        if gap_end >= window[1]:
            host += gap_end - gap_start
            continue
        following = next(event for event in trace.device if event.start_us >= gap_end)
        issued_at = launch_start.get(following.correlation)
        if issued_at is not None and issued_at > gap_start:
            host += gap_end - gap_start
        else:
            other += gap_end - gap_start
    return host, other


def gpu_split(trace: Trace, label: str = "step") -> Split:
    """Busy, idle waiting on the host, idle other: fractions of the profiled steps' wall time."""
    windows = step_windows(trace, label)
    busy = sum(traces.busy_us(trace.device, window) for window in windows)
    host = other = 0.0
    for window in windows:
        window_host, window_other = gpu_idle_us(trace, window)
        host, other = host + window_host, other + window_other
    total = _total(windows)
    return Split(
        {BUSY: busy / total, HOST_WAIT: host / total, IDLE_OTHER: other / total},
        total / len(windows),
        "GPU",
    )


def cpu_split(trace: Trace, label: str = "step") -> Split:
    """Inside top-level ops against between them: fractions of the profiled steps' wall time."""
    windows = step_windows(trace, label)
    ops = trace.top_level_cpu_ops()
    inside = sum(traces.busy_us(ops, window) for window in windows)
    total = _total(windows)
    return Split(
        {INSIDE_OPS: inside / total, BETWEEN_OPS: 1 - inside / total}, total / len(windows), "CPU"
    )


def time_split(trace: Trace, label: str = "step") -> Split:
    """:func:`gpu_split` for a trace with device rows, else :func:`cpu_split`."""
    return gpu_split(trace, label) if trace.has_device else cpu_split(trace, label)


def _inside(start_us: float, windows: list[Span]) -> bool:
    return any(low <= start_us < high for low, high in windows)


def launches_per_step(trace: Trace, label: str = "step") -> float:
    """Kernels started per step (GPU), or outermost aten ops called per step (CPU): the ops the
    step's code dispatched, each paying the framework's per-op overhead (ops they call inside are
    not counted: ``aten::linear`` counts, the ``aten::addmm`` it runs does not). In a compiled step
    the aten ops the compiled code calls count (library calls such as ``addmm``); its fused kernels
    are no aten op."""
    windows = step_windows(trace, label)
    if trace.has_device:
        events = [event for event in trace.device if event.category.lower() == "kernel"]
    else:
        events = traces.top_level(
            [event for event in trace.cpu_ops if event.name.startswith("aten::")]
        )
    return sum(_inside(event.start_us, windows) for event in events) / len(windows)
