"""Profiler traces: read one, find when the device sat idle, and draw the timeline.

``torch.profiler`` exports a trace in the Chrome trace-event format (the JSON
that Perfetto and ``chrome://tracing`` open). Its complete events (``"ph": "X"``)
each carry a category, a start ``ts`` and a duration ``dur``, both in
microseconds. We sort them into rows by category:

=============  ==============================================  ==========================
row            categories (Kineto names; older names too)      what it is
=============  ==============================================  ==========================
CPU ops        ``cpu_op`` (``operator``)                       an ATen op on a host thread
launches       ``cuda_runtime``, ``cuda_driver`` (``runtime``)  ``cudaLaunchKernel`` and co.
device         ``kernel``, ``gpu_memcpy``, ``gpu_memset``       work running on the GPU
               (``memcpy``, ``memset``)
annotations    ``user_annotation``                             ``record_function`` ranges
=============  ==============================================  ==========================

Everything else is ignored: metadata (``"M"``), flow arrows (``"s"``/``"f"``),
instant events, ``python_function`` frames, the whole-trace ``Trace`` span and
``gpu_user_annotation`` ranges (they sit on the GPU rows but span many kernels and
idle time, so counting them as busy would hide the gaps we are looking for).

Times in a :class:`Trace` are microseconds from the first kept event. The
*device-idle fraction* is the share of the trace's window (first to last event of
the three work rows) during which no device event was running. One minus it is
roughly what ``nvidia-smi``'s GPU-Util samples, here measured from every event.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

CPU_OP_CATEGORIES = frozenset({"cpu_op", "operator"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
ANNOTATION_CATEGORIES = frozenset({"user_annotation"})


@dataclass(frozen=True)
class Interval:
    """One event on one lane: ``[start_us, end_us)`` in microseconds from the trace origin.

    ``lane`` is the thread id for host events and the stream id for device events.
    """

    name: str
    start_us: float
    end_us: float
    lane: str = ""
    category: str = ""
    correlation: int | None = (
        None  # ties a launch to the kernel it launched (the event's args.correlation)
    )

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


Span = tuple[float, float]


@dataclass(frozen=True)
class Trace:
    """The events of one profile, sorted into rows, each row ordered by start time."""

    cpu_ops: tuple[Interval, ...]
    launches: tuple[Interval, ...]
    device: tuple[Interval, ...]
    annotations: tuple[Interval, ...]
    origin_us: float  # absolute timestamp of time zero, as it appears in the file

    @property
    def has_device(self) -> bool:
        return bool(self.device)

    @property
    def window(self) -> Span:
        """First start to last end over the work rows (CPU ops, launches, device)."""
        work = self.cpu_ops + self.launches + self.device
        if not work:
            raise ValueError("the trace holds no CPU ops, launches or device events")
        return min(e.start_us for e in work), max(e.end_us for e in work)

    def top_level_cpu_ops(self) -> tuple[Interval, ...]:
        """CPU ops not nested inside another op on the same thread (``aten::linear``, not its
        ``aten::addmm``)."""
        return top_level(self.cpu_ops)

    def annotation_spans(self, name: str) -> list[Span]:
        """Each annotation called ``name`` as a ``(start, end)`` span, in order: one per profiled
        step."""
        return [(a.start_us, a.end_us) for a in self.annotations if a.name == name]

    def annotation_span(self, name: str) -> Span:
        """First start to last end of the annotations called ``name`` (e.g. each ``record_function``
        step)."""
        spans = [a for a in self.annotations if a.name == name]
        if not spans:
            raise KeyError(
                f"no annotation named {name!r}; have {sorted({a.name for a in self.annotations})}"
            )
        return min(a.start_us for a in spans), max(a.end_us for a in spans)


# ---------------------------------------------------------------- reading


def load(source: str | os.PathLike | dict | list) -> Trace:
    """Read a Chrome trace: a path (``.json`` or ``.json.gz``), the parsed JSON object, or its event
    list."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as stream:
            source = json.load(stream)
    events = source.get("traceEvents", []) if isinstance(source, dict) else source
    return parse(events)


def parse(events: Iterable[dict]) -> Trace:
    """Sort complete events into rows and shift times so the earliest kept event starts at 0."""
    rows: dict[str, list[tuple[float, float, dict]]] = {
        "cpu": [],
        "launch": [],
        "device": [],
        "annotation": [],
    }
    for event in events:
        if event.get("ph") != "X":
            continue
        row = _row_of(str(event.get("cat", "")))
        if row is None:
            continue
        start = float(event["ts"])
        rows[row].append((start, start + float(event.get("dur", 0.0)), event))
    kept = [start for row in rows.values() for start, _, _ in row]
    origin = min(kept) if kept else 0.0

    def intervals(row: str) -> tuple[Interval, ...]:
        made = [
            Interval(
                name=str(event.get("name", "")),
                start_us=start - origin,
                end_us=end - origin,
                lane=_lane_of(event),
                category=str(event.get("cat", "")),
                correlation=(event.get("args") or {}).get("correlation"),
            )
            for start, end, event in rows[row]
        ]
        return tuple(sorted(made, key=lambda e: (e.start_us, -e.end_us)))

    return Trace(
        intervals("cpu"), intervals("launch"), intervals("device"), intervals("annotation"), origin
    )


def _row_of(category: str) -> str | None:
    category = category.lower()
    if category in CPU_OP_CATEGORIES:
        return "cpu"
    if category in LAUNCH_CATEGORIES:
        return "launch"
    if category in DEVICE_CATEGORIES:
        return "device"
    if category in ANNOTATION_CATEGORIES:
        return "annotation"
    return None


def _lane_of(event: dict) -> str:
    args = event.get("args") or {}
    if "stream" in args:
        return f"stream {args['stream']}"
    return f"thread {event.get('tid', '')}"


# ---------------------------------------------------------------- interval arithmetic


def overlapping(events: Iterable[Interval], window: Span) -> list[Interval]:
    """The events that overlap ``window`` (in part or whole), in their order."""
    start, end = window
    return [event for event in events if event.end_us > start and event.start_us < end]


def top_level(events: Sequence[Interval]) -> tuple[Interval, ...]:
    """Events not contained in an earlier-starting event on the same lane."""
    result: list[Interval] = []
    open_until: dict[str, float] = {}
    for event in sorted(events, key=lambda e: (e.start_us, -e.end_us)):
        if event.start_us >= open_until.get(event.lane, float("-inf")):
            result.append(event)
            open_until[event.lane] = event.end_us
        else:
            open_until[event.lane] = max(open_until[event.lane], event.end_us)
    return tuple(result)


def merge(events: Iterable[Interval | Span]) -> list[Span]:
    """The union of the intervals, as disjoint ``(start, end)`` spans in order. Touching spans
    join."""
    spans = sorted(_span(e) for e in events)
    merged: list[list[float]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def busy_us(events: Iterable[Interval | Span], window: Span) -> float:
    """Microseconds of ``window`` covered by at least one of the intervals."""
    low, high = window
    return sum(max(0.0, min(end, high) - max(start, low)) for start, end in merge(events))


def idle_gaps(
    events: Iterable[Interval | Span], window: Span, min_gap_us: float = 0.0
) -> list[Span]:
    """The parts of ``window`` covered by none of the intervals, at least ``min_gap_us`` long."""
    low, high = window
    gaps: list[Span] = []
    cursor = low
    for start, end in merge(events):
        if end <= low or start >= high:
            continue
        if start > cursor:
            gaps.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < high:
        gaps.append((cursor, high))
    return [(start, end) for start, end in gaps if end - start >= min_gap_us and end > start]


def idle_fraction(events: Iterable[Interval | Span], window: Span) -> float:
    """Share of ``window`` during which none of the intervals was running (0 = always busy)."""
    low, high = window
    if high <= low:
        raise ValueError(f"empty window {window}")
    length = high - low
    return (length - busy_us(events, window)) / length


def device_idle_fraction(trace: Trace, window: Span | None = None) -> float:
    """Share of the trace's window (or ``window``) with no kernel, memcpy or memset on the device.

    Overlapping kernels on different streams count once. A CPU-only trace has no
    device row: that raises, rather than report a device that was never there.
    """
    if not trace.has_device:
        raise ValueError(
            "this trace has no device events (kernels, memcpys, memsets): it was recorded without "
            "a GPU, or without ProfilerActivity.CUDA. Use idle_fraction(trace.cpu_ops, "
            "trace.window) for the host row."
        )
    return idle_fraction(trace.device, window or trace.window)


def _span(event: Interval | Span) -> Span:
    if isinstance(event, Interval):
        return event.start_us, event.end_us
    return float(event[0]), float(event[1])


# ---------------------------------------------------------------- recording


# The profiler's own chatter: start/stop markers, and the allocator's note that a block
# allocated before profiling began will have no deallocation event.
_PROFILER_MARKER = re.compile(
    r"^(USDT|STAGE):.*Profiler|^\[W.*allocated before the profiling started"
)


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Drop the profiler's own log lines from file descriptor 2 for the block.

    Kineto (the profiler's C++ side) logs ``USDT: ... profiler_start/stop`` lines
    straight to fd 2, bypassing Python. In a notebook they become stderr output,
    which the book build treats as a warning. Everything else written to fd 2
    meanwhile, a real error included, is passed on to ``sys.stderr``.
    """
    try:
        saved = os.dup(2)
    except OSError:  # no usable fd 2 (some embedded interpreters): nothing to filter
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as captured:
        sys.stderr.flush()
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [
                line
                for line in captured.read().decode(errors="replace").splitlines(keepends=True)
                if not _PROFILER_MARKER.match(line)
            ]
            if kept:
                sys.stderr.write("".join(kept))


def profile_steps(
    step: Callable[[], object],
    steps: int,
    *,
    on_gpu: bool | None = None,
    label: str = "step",
    synchronize_each: bool = False,
    profiler_warmup: int = 0,
    record_shapes: bool = False,
):
    """Profile ``steps`` calls of ``step``, each inside ``record_function(label)``; return the
    profiler.

    On a GPU the device activity is recorded too and the device is synchronized
    before the profiler stops, so every kernel lands in the profile;
    ``synchronize_each`` synchronizes inside each annotation instead, so that a
    step's kernels fall inside its own span. ``profiler_warmup`` calls run first
    under the profiler and are left out of it (torch.profiler's schedule): the
    first activity a profiler sees pays its start-up (on a GPU, CUPTI's), which
    in a short step reads as time the device waited. The caller reads the
    profiler (``key_averages()``) or exports it (:func:`export`). ``record_shapes`` keeps each op's
    input shapes (``event.input_shapes``).
    """
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    from brrr.device import ON_GPU, synchronize

    on_gpu = ON_GPU if on_gpu is None else on_gpu
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    synchronize()
    plan = (
        schedule(wait=0, warmup=profiler_warmup, active=steps, repeat=1)
        if profiler_warmup
        else None
    )
    profiler = profile(activities=activities, schedule=plan, record_shapes=record_shapes)
    with quiet_native_stderr():
        profiler.__enter__()
    try:
        for call in range(profiler_warmup + steps):
            with record_function(label) if call >= profiler_warmup else contextlib.nullcontext():
                step()
                if synchronize_each:
                    synchronize()
            if plan is not None:
                synchronize()
                with quiet_native_stderr():  # the schedule starts and stops the trace here
                    profiler.step()
        synchronize()
    finally:
        with quiet_native_stderr():
            profiler.__exit__(None, None, None)
    return profiler


def export(profiler, path: str | os.PathLike) -> Trace:
    """Write a stopped profiler's Chrome trace to ``path`` and read it back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with quiet_native_stderr():
        profiler.export_chrome_trace(str(path))
    return load(path)


def record(
    step: Callable[[], object],
    steps: int,
    path: str | os.PathLike,
    *,
    on_gpu: bool | None = None,
    label: str = "step",
) -> Trace:
    """Profile ``steps`` calls of ``step``, write the Chrome trace to ``path``, and read it back.

    Each call is wrapped in ``record_function(label)``, so the trace shows where
    each step begins and ends. On a GPU the device activity is recorded too and
    the device is synchronized before the profiler stops, so every kernel lands in
    the trace. Warm ``step`` up before calling this: the first call of a step pays
    for allocation and (with ``torch.compile``) compilation.
    """
    return export(profile_steps(step, steps, on_gpu=on_gpu, label=label), path)


# ---------------------------------------------------------------- drawing

GAP_LABELS = {True: "device idle", False: "between CPU ops (Python)"}


def render_timeline(
    trace: Trace,
    *,
    window: Span | None = None,
    min_gap_us: float = 0.0,
    title: str = "",
    stamp: str = "",
    ax=None,
):
    """Draw the trace as two rows: CPU ops above, device kernels below, idle gaps shaded red.

    The shaded gaps are those of the device row. A CPU-only trace has no device
    row: then the gaps between CPU ops (time spent in Python, outside any op) are
    shaded on the CPU row instead, and the device row says what a GPU trace would
    show there. Returns the matplotlib ``Axes``.

    Long: one figure drawn row by row.
    """
    import matplotlib.pyplot as plt

    from brrr.stamp import add_stamp

    window = window or trace.window
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 2.6))
    cpu_row, device_row, height = 1.0, 0.0, 0.7
    ops = overlapping(trace.top_level_cpu_ops(), window)
    # alternate two shades so that back-to-back ops stay distinguishable
    ax.broken_barh(
        [(op.start_us, op.duration_us) for op in ops],
        (cpu_row - height / 2, height),
        facecolors=_alternating("tab:blue", "#7fb2e5", len(ops)),
        label="CPU op",
    )
    if trace.has_device:
        kernels = overlapping(trace.device, window)
        ax.broken_barh(
            [(k.start_us, k.duration_us) for k in kernels],
            (device_row - height / 2, height),
            facecolors=_alternating("tab:green", "#8fd18f", len(kernels)),
            label="device kernel",
        )
        gaps, gap_row = idle_gaps(trace.device, window, min_gap_us), device_row
    else:
        ax.text(
            (window[0] + window[1]) / 2,
            device_row,
            "no device in this trace: on a GPU, its kernels would run here, behind the CPU row",
            ha="center",
            va="center",
            fontsize=8,
            color="gray",
        )
        gaps, gap_row = idle_gaps(ops, window, min_gap_us), cpu_row
    ax.broken_barh(
        [(start, end - start) for start, end in gaps],
        (gap_row - 0.45, 0.9),
        facecolors="tab:red",
        alpha=0.3,
        linewidths=0,
        label=GAP_LABELS[trace.has_device],
    )
    # The legend sits in a clear band above the CPU row, not on top of its bars.
    ax.legend(fontsize=7, loc="upper right", ncols=3)
    ax.set_yticks(
        [device_row, cpu_row], ["device kernels" if trace.has_device else "device", "CPU ops"]
    )
    ax.set_ylim(-0.6, 2.4)
    ax.set_xlim(*window)
    ax.set_xlabel("time (µs from the first event)")
    if title:
        ax.set_title(title)
    add_stamp(ax, stamp, bottom=0.16)
    if (
        stamp
    ):  # a short figure needs more than that margin to keep the stamp clear of the axis label
        ax.figure.subplots_adjust(bottom=min(0.4, 0.6 / ax.figure.get_figheight()))
    return ax


def _alternating(first: str, second: str, count: int) -> list[str]:
    return [first if index % 2 == 0 else second for index in range(count)]


# ---------------------------------------------------------------- reference traces
#
# A trace recorded on a GPU, shipped in brrr/data/reference/traces/, so that a
# reader without a GPU sees a device row too. Until `make gpu-check` has
# recorded one (notebook 32 saves its small-batch trace when
# BRRR_RECORD_REFERENCE is set), the folder holds a synthetic trace built by
# :func:`synthetic_gpu_train_step`, labelled as such in its name and metadata.

SYNTHETIC_NAME = "synthetic-gpu-train-step"
SYNTHETIC_DATE = "2026-11-23"

# One synthetic step, in µs from the step's start. Each row: a top-level CPU op,
# the op nested in it (or None), the op's span, the cudaLaunchKernel span, the
# kernel it launched and the kernel's span on stream 7. The shape is that of a
# small-batch training step on a GPU: the host spends 14-20 µs per op, the
# kernels 2-6 µs each, so the device waits most of the time.
SYNTHETIC_STEP_US = 100
SYNTHETIC_STEP = (
    ("aten::linear", "aten::addmm", (0, 20), (10, 15), "sm80_xmma_gemm_f32f32_tn", (20, 26)),
    (
        "aten::relu",
        "aten::clamp_min",
        (24, 34),
        (28, 32),
        "vectorized_elementwise_kernel<clamp_min>",
        (36, 38),
    ),
    ("aten::linear", "aten::addmm", (38, 58), (48, 53), "sm80_xmma_gemm_f32f32_tn", (60, 66)),
    ("aten::mse_loss", None, (62, 76), (68, 72), "reduce_kernel<MeanOps>", (76, 79)),
    (
        "aten::_foreach_add_",
        None,
        (82, 96),
        (88, 92),
        "multi_tensor_apply_kernel<AddOp>",
        (95, 100),
    ),
)
_HOST = {"pid": 1000, "tid": 1000}
_DEVICE = {"pid": 0, "tid": 7}
_BASE_US = 1_000_000.0


def synthetic_gpu_train_step(steps: int = 2) -> dict:
    """A hand-built Chrome/Kineto trace of ``steps`` small training steps on a GPU.

    No GPU ran it. It has the rows a real ``torch.profiler`` trace of a GPU
    step has: a ``user_annotation`` per step, ``cpu_op`` rows (top-level and
    nested), a ``cuda_runtime`` ``cudaLaunchKernel`` per kernel, ``kernel``
    rows on stream 7, and the flow events (``ac2g``) that tie each launch to its
    kernel. Times follow :data:`SYNTHETIC_STEP`, so every figure derived from it
    can be checked by hand: with two steps, the window is 0-200 µs and the
    device is busy 44 µs of it (idle 78%). Its ``brrr`` metadata says it is
    synthetic; ``python -m brrr.traces`` writes it to the reference folder.

    Long: a trace written out event by event, so that every figure from it can be checked by hand.
    """
    events: list[dict] = [
        {
            "ph": "M",
            "name": "process_name",
            **_HOST,
            "ts": _BASE_US,
            "args": {"name": "python (synthetic)"},
        },
        {
            "ph": "M",
            "name": "process_name",
            "pid": 0,
            "tid": 0,
            "ts": _BASE_US,
            "args": {"name": "GPU 0 (synthetic)"},
        },
        {"ph": "M", "name": "thread_name", **_DEVICE, "ts": _BASE_US, "args": {"name": "stream 7"}},
    ]
    correlation = 0
    for step in range(steps):
        t0 = _BASE_US + step * SYNTHETIC_STEP_US
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "step",
                **_HOST,
                "ts": t0,
                "dur": SYNTHETIC_STEP_US,
                "args": {},
            }
        )
        for op, inner, (start, end), (launch_start, launch_end), kernel, (
            k_start,
            k_end,
        ) in SYNTHETIC_STEP:
            correlation += 1
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": op,
                    **_HOST,
                    "ts": t0 + start,
                    "dur": end - start,
                    "args": {},
                }
            )
            if inner is not None:
                events.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": inner,
                        **_HOST,
                        "ts": t0 + start + 2,
                        "dur": end - start - 4,
                        "args": {},
                    }
                )
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    **_HOST,
                    "ts": t0 + launch_start,
                    "dur": launch_end - launch_start,
                    "args": {"correlation": correlation},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": kernel,
                    **_DEVICE,
                    "ts": t0 + k_start,
                    "dur": k_end - k_start,
                    "args": {"stream": 7, "device": 0, "correlation": correlation},
                }
            )
            events.append(
                {
                    "ph": "s",
                    "cat": "ac2g",
                    "name": "ac2g",
                    "id": correlation,
                    **_HOST,
                    "ts": t0 + launch_start,
                }
            )
            events.append(
                {
                    "ph": "f",
                    "cat": "ac2g",
                    "name": "ac2g",
                    "id": correlation,
                    "bp": "e",
                    **_DEVICE,
                    "ts": t0 + k_start,
                }
            )
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "deviceProperties": [{"id": 0, "name": "synthetic: no GPU ran this trace"}],
        "brrr": {
            "synthetic": True,
            "description": (
                f"{steps} small-batch training steps of a two-layer MLP, built by hand by "
                "brrr.traces.synthetic_gpu_train_step: no GPU ran it. It shows the rows a GPU "
                "trace has until `make gpu-check` records a real one."
            ),
            "env": {
                "device": "no device (synthetic trace)",
                "mode": "synthetic",
                "torch": "n/a",
                "triton": "n/a",
                "date": SYNTHETIC_DATE,
            },
        },
        "traceEvents": events,
    }


def reference_traces_dir():
    """The committed reference traces (in a checkout: brrr/data/reference/traces)."""
    from brrr import reference

    return reference.committed() / "traces"


def write_trace_json(data: dict, path: str | os.PathLike) -> Path:
    """Write a trace JSON file: one event per line, so a diff shows which events changed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {key: value for key, value in data.items() if key != "traceEvents"}
    lines = ",\n".join(
        "  " + json.dumps(event, sort_keys=True) for event in data.get("traceEvents", [])
    )
    text = (
        json.dumps(head, indent=1, sort_keys=True)[:-2]
        + ',\n "traceEvents": [\n'
        + lines
        + "\n ]\n}\n"
    )
    path.write_text(text, encoding="utf-8")
    return path


@dataclass(frozen=True)
class ReferenceTrace:
    """A trace that ships with brrr: parsed, with where it came from."""

    name: str
    trace: Trace
    synthetic: bool
    description: str
    stamp: str

    @property
    def label(self) -> str:
        return "synthetic, built by hand" if self.synthetic else "recorded elsewhere"

    @property
    def window(self) -> Span:
        """From the second step's start to the last event: the first step pays for the profiler
        starting up."""
        steps = self.trace.annotation_spans("step")
        start = steps[1][0] if len(steps) >= 2 else self.trace.window[0]
        return start, self.trace.window[1]


def read_reference_trace(source) -> ReferenceTrace:
    """A reference trace file (a path or a Traversable) with its ``brrr`` metadata."""
    from brrr.stamp import format_stamp

    with (
        source.open("r", encoding="utf-8")
        if hasattr(source, "open")
        else open(source, encoding="utf-8") as stream
    ):
        data = json.load(stream)
    meta = data.get("brrr") or {}
    synthetic = bool(meta.get("synthetic", False))
    env = meta.get("env") or {}
    if synthetic:
        stamp = f"[synthetic trace: built by hand, no device ran it · {env.get('date', '?')}]"
    elif {"device", "mode", "torch", "triton", "date"} <= env.keys():
        stamp = format_stamp(env)
    else:
        stamp = "[recorded elsewhere: no stamp in the file]"
    name = Path(str(getattr(source, "name", source))).name.removesuffix(".json")
    return ReferenceTrace(name, load(data), synthetic, str(meta.get("description", "")), stamp)


def reference_trace(folder=None) -> ReferenceTrace | None:
    """The trace to show beside a reader's own: a recorded GPU trace if one is committed, else the
    synthetic one."""
    folder = reference_traces_dir() if folder is None else folder
    if not folder.is_dir():
        return None
    found = [
        read_reference_trace(entry)
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".json")
    ]
    found = [entry for entry in found if entry.trace.has_device]
    return min(found, key=lambda entry: entry.synthetic, default=None)


def copy_reference_trace(reference: ReferenceTrace, folder: str | os.PathLike) -> Path:
    """Copy the file of ``reference`` (a committed trace) into ``folder``, so that a page can link
    it for download (to open in Perfetto); returns the copy's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{reference.name}.json"
    target.write_bytes((reference_traces_dir() / f"{reference.name}.json").read_bytes())
    return target


def save_reference_trace(
    path: str | os.PathLike, folder: str | os.PathLike, *, description: str
) -> Path:
    """Copy a trace ``torch.profiler`` exported at ``path`` into ``folder`` as
    ``<gpu>-train-step.json``.

    Only what :func:`parse` reads (complete events of its rows) and the flow
    arrows are kept, so the committed file stays small; the ``brrr`` metadata
    carries the stamp of this run.
    """
    from brrr import cache
    from brrr.device import device_name
    from brrr.stamp import environment

    with open(path, encoding="utf-8") as stream:
        data = json.load(stream)
    kept = [
        event
        for event in data.get("traceEvents", [])
        if event.get("ph") == "M"
        or (event.get("ph") == "X" and _row_of(str(event.get("cat", ""))) is not None)
        or (event.get("ph") in ("s", "f") and event.get("cat") == "ac2g")
    ]
    out = {
        key: data[key]
        for key in ("schemaVersion", "displayTimeUnit", "deviceProperties")
        if key in data
    }
    out["brrr"] = {"synthetic": False, "description": description, "env": environment()}
    out["traceEvents"] = kept
    return write_trace_json(out, Path(folder) / f"{cache.slug(device_name())}-train-step.json")


def main(argv: list[str] | None = None) -> int:
    """``python -m brrr.traces``: write the synthetic reference trace into the package's reference
    folder."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m brrr.traces", description=main.__doc__)
    parser.add_argument(
        "--folder", default=str(Path(__file__).parent / "data" / "reference" / "traces")
    )
    args = parser.parse_args(argv)
    path = write_trace_json(
        synthetic_gpu_train_step(), Path(args.folder) / f"{SYNTHETIC_NAME}.json"
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
