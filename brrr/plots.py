"""Charts: the roofline with this machine's measured roofs, and log-log sweeps.

Both return the matplotlib ``Axes`` so a notebook can add to them, and both put
the stamp under the chart, so a saved figure still says where it was measured.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from matplotlib.transforms import Bbox

import matplotlib.pyplot as plt
import numpy as np

from brrr import units
from brrr.stamp import add_stamp  # noqa: F401  (plots.add_stamp, as pages call it)
from brrr.roofline import Roof
from brrr.roofline import attainable_flops


def roofline(
    roofs: Sequence[Roof],
    points: Iterable[tuple[str, float, float]] = (),
    *,
    stamp: str = "",
    ax=None,
    intensity_range: tuple[float, float] | None = None,
    title: str = "Roofline",
):
    """Draw each roof (FLOP/s against FLOPs/byte, log-log) and named points.

    ``points`` are ``(label, intensity, achieved FLOP/s)``; an achieved rate of
    ``None`` plots the point on the roof of the first roof (a prediction).
    """
    points = list(points)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    ridges = [roof.ridge_point for roof in roofs]
    low, high = intensity_range or (
        min([min(ridges) / 100] + [p[1] / 2 for p in points]),
        max([max(ridges) * 100] + [p[1] * 2 for p in points]),
    )
    x = np.logspace(np.log10(low), np.log10(high), 400)
    for roof in roofs:
        y = [attainable_flops(i, roof) for i in x]
        (line,) = ax.loglog(
            x,
            y,
            label=f"{roof.label}: {units.flops(roof.peak_flops)}, "
            f"{units.bandwidth(roof.bandwidth)}",
        )
        ax.axvline(roof.ridge_point, color=line.get_color(), linestyle=":", linewidth=1)
    labels = []
    for label, op_intensity, achieved in points:
        y = attainable_flops(op_intensity, roofs[0]) if achieved is None else achieved
        ax.scatter([op_intensity], [y], zorder=3)
        labels.append(
            ax.annotate(
                label, (op_intensity, y), fontsize=8, textcoords="offset points", xytext=(4, 4)
            )
        )
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    _add_stamp(ax, stamp)
    _separate_labels(ax, labels)
    return ax


def loglog_sweep(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    stamp: str = "",
    ax=None,
    marks: dict[str, float] | None = None,
    roofs: dict[str, float] | None = None,
):
    """One log-log line per series over a shared ``x``; ``marks`` draws labelled vertical lines,
    ``roofs`` labelled horizontal ones (a measured roof, dotted, its label above its left end).

    A series shorter than ``x`` is a sweep cut short: it covers ``x``'s first values.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for name, values in series.items():
        if len(values) > len(x):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(x)} x values")
        ax.loglog(x[: len(values)], values, marker="o", markersize=3, label=name)
    labels = []
    ground = dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1)
    for label, position in sorted((marks or {}).items(), key=lambda item: item[1]):
        ax.axvline(position, linestyle="--", linewidth=1, color="gray")
        # Left of its line, on a white ground: a curve it crosses stays
        # behind it.
        labels.append(
            ax.annotate(
                label,
                (position, 1),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                fontsize=8,
                bbox=ground,
                textcoords="offset points",
                xytext=(-1, -2),
            )
        )
    for label, height in (roofs or {}).items():
        ax.axhline(height, linestyle=":", color="gray")
        ax.annotate(label, (x[0], height), va="bottom", fontsize=8, color="gray")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    _add_stamp(ax, stamp)
    _separate_labels(ax, labels, vertical=True)
    return ax


# Where to try a label, in points from its anchor, until it overlaps no
# other label and stays inside the axes: beside the point, then further
# above and below.
_POINT_OFFSETS = [
    (4, 4),
    (4, -12),
    (-4, 4),
    (-4, -12),
    (4, 16),
    (4, -24),
    (-4, 16),
    (-4, -24),
    (4, 28),
    (4, -36),
]
# A rotated label on a vertical line: left of the line, right of it, lower.
_MARK_OFFSETS = [(-1, -2), (1, -2), (-1, -60), (1, -60), (-1, -120), (1, -120)]


def _inside(box: Bbox, frame: Bbox) -> bool:
    return frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1


def _separate_labels(ax, labels, *, vertical: bool = False) -> None:
    """Move each annotation to its first free spot, if it would overlap an
    earlier one or leave the axes.

    Only where the text sits changes, never what it points at. Labels placed
    earlier keep their place, so the first of a crowd stays by its point.
    """
    if not labels:
        return
    if not hasattr(
        ax.figure.canvas, "get_renderer"
    ):  # a bare Figure: give it the canvas savefig would use
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(ax.figure)
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    placed: list[Bbox] = []
    for label in labels:
        best = None
        for dx, dy in _MARK_OFFSETS if vertical else _POINT_OFFSETS:
            label.xyann = (dx, dy)
            label.set_horizontalalignment("right" if dx < 0 else "left")
            box = label.get_window_extent(renderer)
            fits = _inside(box, frame)
            if best is None:
                best = (dx, dy)
            if fits and not any(box.overlaps(other) for other in placed):
                best = (dx, dy)
                break
        label.xyann = best
        label.set_horizontalalignment("right" if best[0] < 0 else "left")
        placed.append(label.get_window_extent(renderer))


def _add_stamp(ax, stamp: str) -> None:
    add_stamp(ax, stamp, bottom=0.16)


def bars(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    ylabel: str,
    title: str = "",
    stamp: str = "",
    ax=None,
    annotations: Sequence[str] | None = None,
    lines: dict[str, float] | None = None,
):
    """One bar per label (linear scale); ``annotations`` are printed on the bars, ``lines`` are
    horizontal lines named in the legend."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    positions = np.arange(len(labels))
    drawn = ax.bar(positions, values, color=[f"C{i}" for i in range(len(labels))])
    ax.set_xticks(positions, labels, rotation=15, ha="right", fontsize=8)
    for bar, text in zip(drawn, annotations or []):
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    for (label, level), style in zip((lines or {}).items(), ["--", ":", "-."] * 4):
        ax.axhline(level, linestyle=style, linewidth=1, color="gray", label=label)
    # Headroom above the tallest bar or line, so that the numbers on the
    # bars and the legend in the top corner never meet.
    top = max([*values, *(lines or {}).values()], default=0)
    if top > 0:
        ax.set_ylim(top=top * (1.2 + 0.08 * len(lines or {})))
    if lines:
        ax.legend(fontsize=8, loc="upper left")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    _add_stamp(ax, stamp)
    return ax


def beside_recorded(
    here: dict[str, tuple[Sequence[float], Sequence[float]]],
    recorded: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    stamps: Sequence[str],
    logy: bool = True,
    ax=None,
):
    """This machine's series (solid, circles) and a recorded GPU's (dashed, squares) on one pair of
    axes, each ``label: (x, y)``, with every stamp under the chart: the figure a page that teaches a
    GPU's lesson draws beside a CPU's numbers (brrr.beside)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for label, (x, y) in here.items():
        ax.plot(x, y, marker="o", markersize=3, label=label)
    for label, (x, y) in recorded.items():
        ax.plot(x, y, marker="s", markersize=3, linestyle="--", label=label)
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    add_stamp(ax, *stamps, bottom=0.12 + 0.03 * len(stamps))
    return ax
