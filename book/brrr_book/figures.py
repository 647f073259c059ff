"""The essay's pictures, drawn from data: the factory, fused and unfused trips, the roofline of
three machines, GPU generations, the knee of the repeat sweep, a GPU waiting on its host, the
capstone's fixes, FlashAttention's tiles.

Each function returns a matplotlib ``Figure`` drawn from the numbers it is given (or the book's own
data: ``brrr.datasheets``, ``brrr.essay``, the GPU record), so a picture cannot disagree with the
numbers beside it. :data:`FIGURES` names each picture with its alt text; the book's Sphinx
extension (:mod:`brrr_book.book_pages`) draws them all into ``_figures/`` when a build starts, and
the chapters show them with MyST's ``figure`` directive.

Each picture is drawn twice, once for each mode of the book's theme (:data:`THEMES`): ``<name>.png``
on white and ``<name>-dark.png`` on the theme's dark page with light ink; :func:`themed` switches
matplotlib's style and the colours the drawing functions read from :func:`_colors`, and the chapter
shows the light one with class ``only-light`` and the dark one with class ``only-dark``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from itertools import cycle
from typing import Callable, Iterator

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from brrr import datasheets, essay, units

INK, MUTED, ACCENT, WARM, COOL = "#222222", "#777777", "#1f77b4", "#d62728", "#2ca02c"


@dataclass(frozen=True)
class Theme:
    """The colours of a picture for one of the book theme's modes: its paper (the page behind it),
    its ink, muted ink, a pale fill, and the three accents."""

    name: str
    suffix: str  # of the file: <name><suffix>.png
    paper: str
    ink: str
    muted: str
    shade: str
    accent: str
    warm: str
    cool: str
    style: str  # the matplotlib style the theme starts from


LIGHT = Theme("light", "", "white", INK, MUTED, "#dddddd", ACCENT, WARM, COOL, "default")
# The dark page of sphinx-book-theme (#121212) and pydata-sphinx-theme's text colours on it; the
# accents lightened so that small text in them keeps a contrast above 4.5 on that page.
DARK = Theme(
    "dark",
    "-dark",
    "#121212",
    "#ced6dd",
    "#9ca4af",
    "#3a3f47",
    "#5aa9e6",
    "#ff6b6b",
    "#4cc94c",
    "dark_background",
)
THEMES = (LIGHT, DARK)

_theme = LIGHT  # the theme the drawing functions read; themed() switches it


def _colors() -> Theme:
    """The colours of the theme being drawn: every explicitly coloured mark reads them here."""
    return _theme


@contextmanager
def themed(theme: Theme) -> Iterator[Theme]:
    """Draw in ``theme``: its matplotlib style with its paper and ink for text, axes, ticks and
    legends, and its colours for the drawing functions' own marks."""
    global _theme
    rc = {
        "figure.facecolor": theme.paper,
        "axes.facecolor": theme.paper,
        "savefig.facecolor": theme.paper,
        "figure.edgecolor": theme.paper,
        "savefig.edgecolor": theme.paper,
        "legend.facecolor": theme.paper,
        "legend.edgecolor": theme.muted,
        "text.color": theme.ink,
        "axes.labelcolor": theme.ink,
        "axes.titlecolor": theme.ink,
        "axes.edgecolor": theme.ink,
        "xtick.color": theme.ink,
        "ytick.color": theme.ink,
        "grid.color": theme.muted,
        "axes.prop_cycle": plt.rcParamsDefault["axes.prop_cycle"],
    }
    previous = _theme
    with plt.style.context([theme.style, rc]):
        _theme = theme
        try:
            yield theme
        finally:
            _theme = previous


def _arrow(ax, start, end, text="", color=None, width=2.0, style="-|>"):
    color = color or _colors().ink
    ax.add_patch(
        FancyArrowPatch(
            start, end, arrowstyle=style, mutation_scale=14, linewidth=width, color=color
        )
    )
    if text:
        ax.text(
            (start[0] + end[0]) / 2,
            (start[1] + end[1]) / 2 + 0.25,
            text,
            ha="center",
            va="bottom",
            fontsize=9,
            color=color,
        )


def _box(ax, x, y, w, h, title, body="", color=None):
    c = _colors()
    color = color or c.accent
    ax.add_patch(
        Rectangle((x, y), w, h, facecolor=color, alpha=0.12, edgecolor=color, linewidth=1.5)
    )
    ax.text(
        x + w / 2,
        y + h - 0.3,
        title,
        ha="center",
        va="top",
        fontsize=10,
        weight="bold",
        color=c.ink,
    )
    if body:
        ax.text(
            x + w / 2, y + h / 2 - 0.25, body, ha="center", va="center", fontsize=8, color=c.ink
        )


def factory() -> plt.Figure:
    """The essay's picture of a GPU: orders from the host, materials from the warehouse over a road,
    the factory's work, and where each regime waits."""
    c = _colors()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.set_xlim(0, 18)
    ax.set_ylim(0, 7.2)
    ax.axis("off")
    _box(ax, 0.3, 4.3, 3.6, 2.6, "host (CPU)", "Python, dispatch,\nkernel launches", c.muted)
    _box(ax, 0.3, 0.4, 3.6, 2.8, "warehouse", "main memory\n(HBM on a GPU,\nDRAM on a CPU)", c.warm)
    _box(
        ax,
        10.5,
        0.4,
        7.2,
        6.5,
        "factory",
        "compute units:\ntensor cores for matmuls,\nvector units for the rest",
        c.cool,
    )
    _arrow(ax, (3.9, 5.6), (10.5, 5.6), "orders: one per kernel", c.muted)
    _arrow(ax, (3.9, 1.4), (10.5, 1.4), "the road: memory bandwidth (bytes/s)", c.warm, width=3.5)
    _arrow(ax, (10.5, 2.4), (3.9, 2.4), "", c.warm, width=3.5)
    ax.text(
        7.2,
        3.4,
        "memory-bound: the factory\nwaits for the truck",
        ha="center",
        fontsize=8.5,
        color=c.warm,
    )
    ax.text(
        7.2,
        4.6,
        "overhead-bound: the factory\nwaits for its orders",
        ha="center",
        fontsize=8.5,
        color=c.muted,
    )
    ax.text(
        14.1,
        1.2,
        "compute-bound: the factory\nis busy all the time",
        ha="center",
        fontsize=8.5,
        color=c.cool,
    )
    return fig


def trips(ops: int = 3, n: int = 2**28) -> plt.Figure:
    """A chain of ``ops`` pointwise fp32 ops on ``n`` elements: each a round trip to memory, then
    one, fused; the bytes are :func:`brrr.counting.pointwise`'s."""
    from brrr.counting import pointwise

    c = _colors()
    one_pass = pointwise(n).bytes
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
    for ax, fused in zip(axes, (False, True)):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 6)
        ax.axis("off")
        ax.add_patch(
            Rectangle((0.2, 0.3), 9.6, 1.2, facecolor=c.warm, alpha=0.12, edgecolor=c.warm)
        )
        ax.text(5, 0.9, "memory", ha="center", va="center", fontsize=10, color=c.warm)
        ax.add_patch(
            Rectangle((0.2, 4.3), 9.6, 1.4, facecolor=c.cool, alpha=0.12, edgecolor=c.cool)
        )
        ax.text(
            5,
            5.45,
            "compute: registers and on-chip memory",
            ha="center",
            va="center",
            fontsize=9,
            color=c.cool,
        )
        if fused:
            ax.text(
                5,
                4.75,
                " → ".join(f"op {i + 1}" for i in range(ops)),
                ha="center",
                fontsize=9,
                color=c.ink,
            )
            _arrow(ax, (3.0, 1.5), (3.0, 4.3), "read", c.warm)
            _arrow(ax, (7.0, 4.3), (7.0, 1.5), "write", c.warm)
            moved = one_pass
            ax.set_title(f"fused: one trip, {units.binary_bytes(moved)}", fontsize=10)
        else:
            for i in range(ops):
                x = 0.9 + i * 9.0 / ops
                ax.text(x + 0.9, 4.75, f"op {i + 1}", ha="center", fontsize=9, color=c.ink)
                _arrow(ax, (x + 0.4, 1.5), (x + 0.4, 4.3), "", c.warm, width=1.5)
                _arrow(ax, (x + 1.4, 4.3), (x + 1.4, 1.5), "", c.warm, width=1.5)
            moved = ops * one_pass
            ax.set_title(f"unfused: {ops} round trips, {units.binary_bytes(moved)}", fontsize=10)
    fig.suptitle(f"A chain of {ops} pointwise ops on {n:,} fp32 elements: bytes moved", fontsize=11)
    fig.subplots_adjust(top=0.78)
    return fig


@dataclass(frozen=True)
class Generation:
    name: str
    year: int
    bandwidth: float  # B/s, datasheet
    tensor_flops: float  # FLOP/s, dense 16-bit tensor-core matmul, datasheet


# Datasheet figures, dense (no structured sparsity): memory bandwidth and 16-bit tensor-core matmul
# peak.
GENERATIONS = (
    Generation("V100 SXM2", 2017, 900e9, 125e12),
    Generation("T4", 2018, 320e9, 65e12),
    Generation("A100 SXM4", 2020, 1.555e12, 312e12),
    Generation(
        "H100 SXM", 2022, datasheets.H100_SXM.bandwidth, datasheets.H100_SXM.peaks["bfloat16"]
    ),
    Generation(
        "H200 SXM", 2023, datasheets.H200_SXM.bandwidth, datasheets.H200_SXM.peaks["bfloat16"]
    ),
    Generation("B200", 2024, 8e12, 2250e12),
)


def generations(measured: dict[str, tuple[float, float]] | None = None) -> plt.Figure:
    """Datasheet bandwidth and 16-bit matmul peak of NVIDIA generations by year, and their ridge
    points; ``measured``: ``{label: (bandwidth, matmul peak)}`` measured on a real GPU, drawn beside
    its datasheet."""
    c = _colors()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    years = [g.year for g in GENERATIONS]
    left.semilogy(
        years,
        [g.tensor_flops for g in GENERATIONS],
        marker="o",
        color=c.cool,
        label="16-bit tensor-core FLOP/s",
    )
    left.semilogy(
        years,
        [g.bandwidth * 100 for g in GENERATIONS],
        marker="s",
        color=c.warm,
        label="memory bandwidth × 100 (B/s)",
    )
    for g in GENERATIONS:
        left.annotate(
            g.name,
            (g.year, g.tensor_flops),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=7,
        )
    first, last = GENERATIONS[0], GENERATIONS[-1]
    left.set_title(
        f"{first.year}→{last.year}: FLOP/s ×{last.tensor_flops / first.tensor_flops:.0f}, "
        f"bandwidth ×{last.bandwidth / first.bandwidth:.1f}",
        fontsize=10,
    )
    left.set_xlabel("year (datasheets)")
    left.legend(fontsize=8)
    right.bar(
        [g.name for g in GENERATIONS],
        [g.tensor_flops / g.bandwidth for g in GENERATIONS],
        color=c.muted,
        label="datasheet",
    )
    for index, (label, (bandwidth, peak)) in enumerate((measured or {}).items()):
        legend = "measured (recorded)" if index == 0 else None  # one entry for every GPU's bar
        right.bar([label], [peak / bandwidth], color=c.accent, label=legend)
    right.set_ylabel("ridge point (FLOPs per byte)")
    right.set_title("The ridge point rises: more FLOPs per byte to stay compute-bound", fontsize=10)
    right.tick_params(axis="x", labelsize=7, rotation=20)
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def roofline_three(machines: dict[str, tuple[float, float]]) -> plt.Figure:
    """Rooflines of several machines on one pair of axes: ``{label: (peak FLOP/s, bandwidth)}``."""
    c = _colors()
    import numpy as np

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    intensity = np.logspace(-2, 4, 200)
    for (label, (peak, bandwidth)), color in zip(
        machines.items(), cycle((c.muted, c.accent, c.warm, c.cool))
    ):
        ax.loglog(intensity, np.minimum(peak, intensity * bandwidth), color=color, label=label)
        ax.plot([peak / bandwidth], [peak], marker="o", color=color)
        ax.annotate(
            f"ridge {peak / bandwidth:.0f}",
            (peak / bandwidth, peak),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=7,
            color=color,
        )
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.set_title("Memory-bound left of each ridge, compute-bound right of it", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def flash_tiles(n_blocks: int = 4, step: int = 1) -> plt.Figure:
    """FlashAttention for one head: the N×N scores in blocks; at one step a block of Q stays on chip
    while blocks of K and V stream past, and no block of scores is ever written to HBM.

    Long: one picture drawn mark by mark, top to bottom.
    """
    c = _colors()
    fig, ax = plt.subplots(figsize=(7, 4.6))
    ax.set_xlim(-3.2, n_blocks + 3.6)
    ax.set_ylim(-1.6, n_blocks + 1.2)
    ax.set_aspect("equal")
    ax.axis("off")
    for i in range(n_blocks):
        for j in range(n_blocks):
            on_chip = i == step
            done = i == step and j < step + 1
            ax.add_patch(
                Rectangle(
                    (j, n_blocks - 1 - i),
                    1,
                    1,
                    edgecolor=c.muted,
                    linewidth=0.8,
                    facecolor=c.cool if done else (c.shade if on_chip else c.paper),
                    alpha=0.5 if done else 1.0,
                )
            )
    ax.text(
        n_blocks / 2,
        n_blocks + 0.4,
        "scores S = QKᵀ (N×N): computed block by block, never stored",
        ha="center",
        fontsize=8.5,
    )
    for i in range(n_blocks):
        ax.add_patch(
            Rectangle(
                (-2.2, n_blocks - 1 - i),
                1.2,
                1,
                edgecolor=c.ink,
                linewidth=0.8,
                facecolor=c.accent if i == step else c.paper,
                alpha=0.35 if i == step else 1,
            )
        )
        ax.add_patch(
            Rectangle(
                (n_blocks + 1.0, n_blocks - 1 - i),
                1.2,
                1,
                edgecolor=c.ink,
                linewidth=0.8,
                facecolor=c.cool if i == step else c.paper,
                alpha=0.35 if i == step else 1,
            )
        )
    ax.text(-1.6, -0.5, "Q blocks\n(one on chip)", ha="center", va="top", fontsize=8)
    ax.text(n_blocks + 1.6, -0.5, "O blocks\n(one written)", ha="center", va="top", fontsize=8)
    ax.text(
        n_blocks / 2,
        -0.5,
        "K, V blocks stream through on-chip memory;\na running max and sum keep the softmax exact",
        ha="center",
        va="top",
        fontsize=8,
    )
    return fig


@dataclass(frozen=True)
class Picture:
    name: str
    draw: Callable[[], plt.Figure]
    alt: str


def _no_record(ax, what: str) -> None:
    """An empty panel that says which record it waits for."""
    c = _colors()
    ax.text(
        0.5,
        0.5,
        f"no GPU has recorded {what} yet\n(make gpu-check on a GPU node records it)",
        ha="center",
        va="center",
        fontsize=10,
        color=c.muted,
        transform=ax.transAxes,
    )
    ax.set_xticks([])
    ax.set_yticks([])


def _stamps(fig, stamps) -> None:
    """The stamps of the records a picture is drawn from, small, under it."""
    from brrr.plots import add_stamp

    if stamps:
        fig.tight_layout(rect=(0, 0.04 + 0.02 * len(stamps), 1, 1))
        add_stamp(fig, *stamps, color=_colors().muted)


def knee(sweeps: dict[str, dict], stamps: list[str] = ()) -> plt.Figure:
    """Time per call of ``x * 2`` repeated, against the repeats, for each recorded sweep (``{device:
    repeat-sweep record}``): flat while memory sets the time, rising past the knee, with the knee
    the roofs predict and the one measured marked."""
    c = _colors()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    if not sweeps:
        _no_record(ax, "the repeat sweep")
        return fig
    for (device, values), color in zip(sweeps.items(), cycle((c.accent, c.warm, c.cool))):
        repeats = sorted(int(r) for r in values["seconds"])
        ax.semilogx(
            repeats,
            [values["seconds"][str(r)] * 1e3 for r in repeats],
            marker="o",
            color=color,
            label=f"{device}: time per call",
        )
        for key, style, label in (
            ("knee_predicted_multiply", ":", "knee the roofs predict"),
            ("knee_measured", "--", "knee measured"),
        ):
            ax.axvline(
                values[key],
                color=color,
                linestyle=style,
                linewidth=1,
                label=f"{label} ({values[key]:.0f})",
            )
    ax.set_xlabel("multiplies per element (repeats)")
    ax.set_ylabel("ms per call")
    ax.set_ylim(bottom=0)
    ax.set_title("Extra arithmetic is free until the ridge point", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    _stamps(fig, stamps)
    return fig


# The bars of the recorded cos-cos figure: (the record's label, the bar's label), in the essay's
# order.
COS_COS_BARS = (
    ("eager x.cos()", "eager x.cos()\n(1 kernel)"),
    ("eager x.cos().cos()", "eager x.cos().cos()\n(2 kernels)"),
    ("compiled x.cos().cos()", "fused x.cos().cos()\n(1 kernel)"),
)


def cos_cos(records: dict[str, dict], stamps: list[str] = ()) -> plt.Figure:
    """The essay's example as recorded on each GPU (``{device: cos-cos record}``): milliseconds per
    call of eager ``x.cos()``, eager ``x.cos().cos()`` and the fused one, with one pass at the
    recorded copy bandwidth as a line: eager pays two passes, the fused kernel one, the second
    cosine nothing."""
    c = _colors()
    fig, panels = plt.subplots(
        1, max(1, len(records)), figsize=(7 if len(records) < 2 else 9, 3.6), squeeze=False
    )
    if not records:
        _no_record(panels[0][0], "x.cos().cos()")
        return fig
    for ax, (device, values) in zip(panels[0], records.items()):
        ms = [values[label]["seconds"] * 1e3 for label, _ in COS_COS_BARS]
        bars = ax.bar(
            [name for _, name in COS_COS_BARS], ms, color=[c.accent, c.warm, c.cool], width=0.6
        )
        for bar, value in zip(bars, ms):
            ax.annotate(
                f"{value:.2f} ms",
                (bar.get_x() + bar.get_width() / 2, value),
                ha="center",
                va="bottom",
                fontsize=8,
                color=c.ink,
            )
        one_pass = 8 * values["n"] / values["copy_bandwidth"] * 1e3
        ax.axhline(
            one_pass, linestyle="--", linewidth=1, color=c.muted, label="one pass at copy bandwidth"
        )
        ax.set_ylim(0, max(ms) * 1.3)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_ylabel("ms per call")
        speedup = ms[1] / ms[2]
        ax.set_title(f"{device}: fused {speedup:.2f}x faster than eager", fontsize=10)
        ax.legend(fontsize=7, loc="upper right")
    _stamps(fig, stamps)
    return fig


def gpu_waits(trace, idle: dict[str, dict], title: str = "", stamps: list[str] = ()) -> plt.Figure:
    """Above: a recorded GPU training step's trace, CPU ops over device kernels, the device's idle
    time shaded (``trace``: a :class:`brrr.traces.ReferenceTrace` or None). Below: the share of its
    window the device sat idle at each recorded batch (``idle``: the profiler-traces record's
    ``values``)."""
    from brrr import traces

    c = _colors()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 4.6), gridspec_kw={"height_ratios": [3, 2]})
    if trace is None:
        _no_record(top, "a training step's trace")
    else:
        traces.render_timeline(
            trace.trace, window=trace.window, title=title or "one training step", ax=top
        )
    if not idle:
        _no_record(bottom, "the idle share of its device")
    else:
        rows = sorted(idle.items(), key=lambda item: item[1]["batch"])
        labels = [
            (f"{values['gpu']}, " if values.get("gpu") else "") + f"batch {values['batch']:,}"
            for _, values in rows
        ]
        shares = [values["idle_fraction"] for _, values in rows]
        bottom.barh(labels, [1 - s for s in shares], color=c.cool, label="device busy")
        bottom.barh(
            labels,
            shares,
            left=[1 - s for s in shares],
            color=c.warm,
            alpha=0.4,
            label="device idle",
        )
        for y, share in enumerate(shares):
            bottom.text(1.01, y, f"{units.percent(share)} idle", va="center", fontsize=8)
        bottom.set_xlim(0, 1.15)
        bottom.set_xlabel("share of the profiled window: device busy (green), idle (red)")
    fig.tight_layout()
    _stamps(fig, stamps)
    return fig


def stages(rows: list[dict], device: str, stamps: list[str] = ()) -> plt.Figure:
    """Tokens per second after each fix of the capstone, as recorded on ``device`` (the capstone
    record's rows), each bar labelled with the regime the diagnosis then found."""
    return stages_by_gpu({device: rows} if rows else {}, stamps)


def stages_by_gpu(found: dict[str, list[dict]], stamps: list[str] = ()) -> plt.Figure:
    """:func:`stages` for each recorded GPU (``{device: rows}``), one panel each, side by side."""
    fig, panels = plt.subplots(
        1, max(1, len(found)), figsize=(8 + 4 * max(0, len(found) - 1), 3.8), squeeze=False
    )
    if not found:
        _no_record(panels[0][0], "the capstone's fixes")
        return fig
    for index, (ax, (device, rows)) in enumerate(zip(panels[0], found.items())):
        _stage_bars(ax, rows, device, labelled=index == 0)
    fig.suptitle(
        "Each fix moves the step to the next regime, and the next fix follows it", fontsize=10
    )
    fig.tight_layout()
    _stamps(fig, stamps)
    return fig


def _stage_bars(ax, rows: list[dict], device: str, *, labelled: bool) -> None:
    """One GPU's stages as horizontal bars on a log scale, each with its regime and its gain."""
    c = _colors()
    names = [row["stage"].removeprefix("+ ").split(" (torch.compile")[0] for row in rows]
    rates = [row["tokens_per_s"] for row in rows]
    colors = {"overhead-bound": c.warm, "memory-bound": c.accent, "compute-bound": c.cool}
    ax.barh(
        names[::-1], rates[::-1], color=[colors.get(row["regime"], c.muted) for row in rows][::-1]
    )
    for y, row in enumerate(rows[::-1]):
        ax.text(
            row["tokens_per_s"] * 1.1,
            y,
            f"{row['regime']}, {row['tokens_per_s'] / rates[0]:.1f}x",
            va="center",
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_xlim(min(rates) / 2, max(rates) * 20)
    ax.set_xlabel(f"tokens per second on the recorded {device} (log scale)")
    if not labelled:
        ax.set_yticklabels([])


def flamegraph(frames: list, title: str, stamps: list[str] = ()) -> plt.Figure:
    """One op's frames (:func:`flames.nest`): the host's nested events as stacked bars, the op
    at the bottom, and the device kernels it launched on a row of their own, on the same time axis.
    """
    from brrr_book.flames import kernel_share

    c = _colors()
    fig, ax = plt.subplots(figsize=(8, 3.2))
    if not frames:
        _no_record(ax, "an op's nested trace")
        return fig
    host = [frame for frame in frames if not frame.on_device]
    top = max(frame.depth for frame in host)
    _host_frames(ax, host, c)
    _device_frames(ax, [frame for frame in frames if frame.on_device], c)
    ax.set_yticks(
        range(top + 2), ["device"] + [f"host {depth}" for depth in range(top + 1)], fontsize=8
    )
    ax.set_ylim(-0.6, top + 1.6)
    ax.set_xlim(0, max(frame.start_us + frame.duration_us for frame in frames) * 1.25)
    ax.set_xlabel("µs from the op's start")
    ax.set_title(
        f"{title}: the kernel is {units.percent(kernel_share(frames))} of the host's time",
        fontsize=10,
    )
    fig.tight_layout()
    _stamps(fig, stamps)
    return fig


def _host_frames(ax, host: list, c) -> None:
    """The host's frames as stacked bars, one row per depth above the device's, each labelled."""
    for frame in host:
        ax.barh(
            frame.depth + 1,
            frame.duration_us,
            left=frame.start_us,
            height=0.9,
            color=c.accent,
            alpha=0.25,
            edgecolor=c.accent,
        )
        ax.text(
            frame.start_us + 0.3,
            frame.depth + 1,
            f"{frame.name}  {frame.duration_us:.1f} µs",
            va="center",
            fontsize=8,
            color=c.ink,
            clip_on=True,
        )


def _device_frames(ax, device: list, c) -> None:
    """The device kernels on row 0, each with its time beside it."""
    for frame in device:
        ax.barh(
            0,
            frame.duration_us,
            left=frame.start_us,
            height=0.9,
            color=c.cool,
            edgecolor=c.cool,
        )
        ax.annotate(
            f"the kernel: {frame.duration_us:.2f} µs",
            (frame.start_us + frame.duration_us, 0),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
            color=c.ink,
        )


def _recorded(section: str) -> list:
    from brrr.beside import recorded

    return recorded(section)


def _recorded_knees():
    found = _recorded("repeat-sweep")
    return knee({gpu.device: gpu.values for gpu in found}, [gpu.stamp for gpu in found])


def recorded_cos_cos():
    """:func:`cos_cos` drawn from every committed record (notebook 10 opens with it)."""
    found = _recorded("cos-cos")
    return cos_cos(
        {gpu.device.removeprefix("NVIDIA "): gpu.values for gpu in found},
        [gpu.stamp for gpu in found],
    )


def _recorded_waits():
    from brrr import traces

    found = _recorded("overhead/profiler-traces")
    trace = traces.reference_trace()
    trace = trace if trace is not None and not trace.synthetic else None
    idle = {  # every recorded GPU's idle shares, each bar named by its GPU where there are several
        f"{gpu.device} {key}": {**values, "gpu": gpu.device.removeprefix("NVIDIA ").split()[0]}
        if len(found) > 1
        else values
        for gpu in found
        for key, values in gpu.values.items()
    }
    title = ""
    if trace is not None:  # the trace's own GPU, which need not be the first record's
        device = _trace_device(trace)
        small = [
            gpu.values["small"] for gpu in found if gpu.device == device and "small" in gpu.values
        ]
        title = f"{device}, batch {small[0]['batch']}: " if small else f"{device}: "
        title += "one training step"
    return gpu_waits(trace, idle, title, [gpu.stamp for gpu in found])


def _trace_device(trace) -> str:
    """The GPU a committed trace was recorded on, from its stamp."""
    return trace.stamp.split(" · ")[0].strip("[").removeprefix("measured on ")


def _recorded_stages():
    found = [gpu for gpu in _recorded("capstone") if gpu.values.get("rows")]
    return stages_by_gpu(
        {gpu.device: gpu.values["rows"] for gpu in found}, [gpu.stamp for gpu in found]
    )


def _recorded_flame():
    """The last ``aten::relu`` of the recorded GPU's training step (the trace holds no ``a + b``;
    relu is the same kind of op: one pointwise kernel), or of the synthetic trace where no GPU is
    recorded."""
    from brrr import traces
    from brrr_book import flames

    reference = traces.reference_trace()
    if reference is None:
        return flamegraph([], "")
    frames = flames.nest(reference.trace, flames.last_op(reference.trace, "aten::relu"))
    device = "a synthetic GPU trace" if reference.synthetic else _trace_device(reference)
    return flamegraph(frames, f"relu on {device}", [reference.stamp])


def _recorded_gpu() -> dict[str, tuple[float, float]]:
    """The recorded GPUs' measured (copy bandwidth, matmul peak), from Lab 1's record: ``{label:
    ...}``."""
    from brrr.beside import recorded

    return {
        f"{gpu.device.removeprefix('NVIDIA ').split()[0]} (measured)": (
            gpu.values["copy_bandwidth"],
            gpu.values["matmul_peak"],
        )
        for gpu in recorded("lab-01-roofline")
    }


def _three_machines() -> dict[str, tuple[float, float]]:
    """The essay's A100 (quoted), each recorded GPU, and this machine's cached roofs where they
    exist."""
    from brrr import cache
    from brrr.ceilings import cache_path

    machines = {
        "A100, the essay's figures (quoted)": (
            essay.A100["matmul_peak_bf16"],
            essay.A100["bandwidth"],
        )
    }
    machines.update(
        {
            f"{label}, recorded": (peak, bandwidth)
            for label, (bandwidth, peak) in _recorded_gpu().items()
        }
    )
    here = cache.read_json(cache_path(None))
    if here and here.get("matmul_peak"):
        machines["this build's machine (measured)"] = (
            max(here["matmul_peak"].values()),
            here["copy_bandwidth"],
        )
    return machines


FIGURES = (
    Picture(
        "factory",
        factory,
        "A diagram of the essay's factory: the host on the left sends orders (one per kernel) to "
        "the factory on the right, the compute units; the warehouse, main memory, sends "
        "materials to the factory and takes products back over a road, the memory bandwidth. "
        "Labels mark where each regime waits: overhead-bound on orders, memory-bound on the "
        "road, compute-bound busy all the time.",
    ),
    Picture(
        "trips",
        trips,
        "Two panels of a chain of three pointwise ops between memory (bottom) and compute (top). "
        "Unfused, each op reads its input from memory and writes its output back: three round "
        "trips, 6 GiB for 2^28 fp32 elements. Fused, the chain reads once and writes once: one "
        "trip, 2 GiB.",
    ),
    Picture(
        "roofline-three",
        lambda: roofline_three(_three_machines()),
        "Rooflines on log-log axes, attainable FLOP/s against arithmetic intensity: the essay's "
        "A100, each GPU recorded by make gpu-check and, where its roofs were measured before the "
        "build, this machine. Each line rises along its memory bandwidth and flattens at its "
        "peak; a dot marks each ridge point.",
    ),
    Picture(
        "generations",
        lambda: generations(_recorded_gpu()),
        "Left: datasheet 16-bit tensor-core FLOP/s and memory bandwidth of NVIDIA GPUs by year, "
        "V100 to B200, on a log scale; FLOP/s grows far faster. Right: each generation's ridge "
        "point in FLOPs per byte, rising, with each recorded GPU's measured ridge point beside "
        "its datasheet's.",
    ),
    Picture(
        "cos-cos",
        recorded_cos_cos,
        "Bars of milliseconds per call on each recorded GPU, for 2^28 fp32 elements: eager "
        "x.cos(), eager x.cos().cos() twice as tall, and the fused x.cos().cos() as short as one "
        "x.cos(); a dashed line marks one pass over the tensor at the recorded copy bandwidth, "
        "level with the short bars.",
    ),
    Picture(
        "knee",
        _recorded_knees,
        "Time per call of x = x * 2 repeated, against the multiplies per element on a log scale, "
        "as recorded on a GPU: flat for dozens of multiplies, then rising; dotted, the knee the "
        "measured roofs predict, dashed, the knee measured, close together.",
    ),
    Picture(
        "flamegraph",
        _recorded_flame,
        "A flamegraph of one small pointwise op (relu) in eager PyTorch, from the recorded GPU's "
        "profiler trace: the op at the bottom, the dispatcher's clamp_min above it, the CUDA "
        "kernel launch above that; on the device row below, the kernel they queued, a short bar "
        "near the end of the op.",
    ),
    Picture(
        "gpu-waits",
        _recorded_waits,
        "Above: a recorded GPU training step at batch 1, CPU ops on one row and device kernels "
        "on the row below, short kernels separated by long shaded gaps where the device waits "
        "for the CPU. Below: the share of the profiled window the device sat idle, at batch 1 "
        "and at a large batch.",
    ),
    Picture(
        "stages",
        _recorded_stages,
        "Horizontal bars, one per stage of the capstone, in a panel for each recorded GPU, tokens "
        "per second on a log scale: start at batch 1 (overhead-bound), then a bigger batch, bf16, "
        "SDPA attention, torch.compile and CUDA graphs, each bar labelled with its regime and its "
        "gain over the start.",
    ),
    Picture(
        "flash-tiles",
        flash_tiles,
        "FlashAttention for one head as a grid of score blocks: one block of Q sits in on-chip "
        "memory while blocks of K and V stream past; the score blocks it has computed are shaded "
        "and never written to memory; one block of the output is written when the row of blocks "
        "is done.",
    ),
)


def draw_all(folder, dpi: int = 90) -> list:
    """Every picture of :data:`FIGURES` in each theme of :data:`THEMES`, as ``<folder>/<name>.png``
    (light) and ``<folder>/<name>-dark.png`` (dark); returns the paths, each picture's light one
    first."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for picture in FIGURES:
        for theme in THEMES:
            with themed(theme):
                fig = picture.draw()
                path = folder / f"{picture.name}{theme.suffix}.png"
                fig.savefig(path, dpi=dpi, bbox_inches="tight", facecolor=theme.paper)
                plt.close(fig)
            paths.append(path)
    return paths
