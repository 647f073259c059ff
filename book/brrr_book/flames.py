"""One op as a flamegraph: the layers of software a profiler nests under it, and the kernel it
launched.

The essay's flamegraph of ``a + b`` shows how little of a small op's time is the arithmetic: Python,
the dispatcher and the launch wrap a kernel that runs for a sliver of it. :func:`nest` reads the
same nesting from a ``torch.profiler`` trace (:class:`brrr.traces.Trace`): each host event inside
the op's span on the op's thread, at the depth of its containment, and each device kernel its
launches queued (joined by the profiler's correlation id). :func:`figures.flamegraph` draws
the result."""

from __future__ import annotations

from dataclasses import dataclass

from brrr.traces import LAUNCH_CATEGORIES, Interval, Trace


@dataclass(frozen=True)
class Frame:
    """One bar of the flamegraph: ``depth`` 0 is the op itself; device kernels carry
    ``on_device``."""

    name: str
    start_us: float  # from the op's start
    duration_us: float
    depth: int
    on_device: bool = False


def nest(trace: Trace, root: Interval) -> list[Frame]:
    """The host events inside ``root`` on its thread, each at its depth of containment, then the
    device events that its launches queued; times from the start of ``root``."""
    inside = [
        event
        for event in trace.cpu_ops + trace.launches
        if event.lane == root.lane
        and root.start_us <= event.start_us
        and event.end_us <= root.end_us
    ]
    inside.sort(key=lambda event: (event.start_us, -event.end_us))
    frames, open_ends = [], []  # open_ends: the end of each enclosing event, outermost first
    for event in inside:
        while open_ends and event.start_us >= open_ends[-1]:
            open_ends.pop()
        frames.append(
            Frame(event.name, event.start_us - root.start_us, event.duration_us, len(open_ends))
        )
        open_ends.append(event.end_us)
    launched = {
        event.correlation
        for event in inside
        if event.category.lower() in LAUNCH_CATEGORIES and event.correlation is not None
    }
    frames += [
        Frame(event.name, event.start_us - root.start_us, event.duration_us, 0, on_device=True)
        for event in trace.device
        if event.correlation in launched
    ]
    return frames


def last_op(trace: Trace, name: str) -> Interval:
    """The last host event called ``name`` that launched a device kernel (the last step's, past the
    profiler's warm-up); KeyError if none did."""
    for event in reversed(trace.cpu_ops):
        if event.name == name and any(frame.on_device for frame in nest(trace, event)):
            return event
    raise KeyError(f"no {name!r} op with a device kernel in the trace")


def kernel_share(frames: list[Frame]) -> float:
    """The device's kernel time as a share of the op's host time (the root frame's duration)."""
    root = next(frame for frame in frames if frame.depth == 0 and not frame.on_device)
    return sum(frame.duration_us for frame in frames if frame.on_device) / root.duration_us
