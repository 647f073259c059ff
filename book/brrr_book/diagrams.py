"""Three pictures a reader needs that no measurement draws: the order in which a tiled matmul's
programs take their tiles (Lab 5), why a cosine is free on a GPU and not on a CPU (operator
fusion), and the host running ahead of the device (overhead, from the recorded GPU trace).

Each is drawn from its rule, in both colour modes of :mod:`brrr_book.figures` (``THEMES``), into
``_diagrams/`` of the book's source folder when a build of the book starts
(``brrr_book.book_pages``); a page shows the two drawings as a light figure and a dark image, as
the chapters show ``brrr_book.figures``' pictures.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from brrr import traces
from brrr_book import figures

FOLDER = "_diagrams"  # in the book's source folder, never committed


def program_tile(pid: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """The (row, column) of the output tile program ``pid`` computes in grouped order: ``group_m``
    rows of tiles at a time, column by column inside the group (Lab 5's kernel, Triton's matmul
    tutorial). ``group_m = 1`` is row-major order."""
    per_group = group_m * tiles_n
    first_m = (pid // per_group) * group_m
    rows = min(tiles_m - first_m, group_m)
    return first_m + (pid % per_group) % rows, (pid % per_group) // rows


def _square(ax, x: float, y: float, fill: str, edge: str) -> None:
    ax.add_patch(Rectangle((x, y), 1, 1, fc=fill, ec=edge, lw=0.6, alpha=0.6))


def tile_order(c: figures.Theme, tiles: int = 9, group_m: int = 3) -> plt.Figure:
    """The first ``tiles`` programs on a ``tiles`` × ``tiles`` grid of output tiles, in row-major
    and in grouped order, with the strips of ``a`` (left) and ``b`` (top) they load."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.3))
    for ax, group in zip(axes, (1, group_m)):
        done = [program_tile(pid, tiles, tiles, group) for pid in range(tiles)]
        rows, cols = {m for m, _ in done}, {n for _, n in done}
        for i in range(tiles):
            _square(ax, -1.4, tiles - 1 - i, c.accent if i in rows else c.paper, c.ink)
            _square(ax, i, tiles + 0.4, c.warm if i in cols else c.paper, c.ink)
            for n in range(tiles):
                _square(ax, n, tiles - 1 - i, c.cool if (i, n) in done else c.paper, c.muted)
        for pid, (m, n) in enumerate(done):
            ax.text(n + 0.5, tiles - 0.5 - m, str(pid), ha="center", va="center", fontsize=9)
        ax.text(-0.9, -0.5, "a", ha="center", va="center")
        ax.text(tiles + 0.3, tiles + 0.9, "b", va="center")
        name = "row-major (GROUP_M = 1)" if group == 1 else f"grouped (GROUP_M = {group})"
        ax.set_title(
            f"{name}: {len(rows) + len(cols)} strips loaded\n"
            f"for the first {tiles} programs' {tiles} tiles",
            fontsize=9,
        )
        ax.set_xlim(-1.6, tiles + 0.8)
        ax.set_ylim(-0.9, tiles + 1.6)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.tight_layout()
    return fig


def latency_hiding(c: figures.Theme, warps: int = 8, wait: int = 12, cos: int = 3) -> plt.Figure:
    """Schematic: the same chunks and the same cosines on a GPU and on one CPU core. Memory
    delivers one chunk per unit of time, the first ``wait`` units after it was asked for. On the
    GPU every warp asks at once and computes its cosine (1 unit) when its chunk is in: each warp's
    wait covers the others' arithmetic. The core streams the chunks in order, but its cosine
    polynomial takes ``cos`` units a chunk, longer than the memory takes to deliver the next."""
    fig, (gpu, cpu) = plt.subplots(
        2, 1, figsize=(8, 4.8), sharex=True, gridspec_kw={"height_ratios": [warps + 1, 2]}
    )
    arrive = [wait + w for w in range(warps)]  # chunk w's transfer ends here
    for w, t in enumerate(arrive):
        gpu.broken_barh([(0, t)], (w + 0.2, 0.6), color=c.shade)
        gpu.broken_barh([(t, 1)], (w + 0.2, 0.6), color=c.warm, ec=c.paper, lw=0.4)
    gpu.broken_barh([(arrive[0] - 1, warps)], (warps + 0.2, 0.6), color=c.accent)
    gpu.set_yticks([*range(warps), warps], [f"warp {w}" for w in range(warps)] + ["memory"])
    gpu.set_title(
        f"GPU: warps wait (grey) while others compute (red); the cosines end at "
        f"{arrive[-1] + 1}, one unit after the memory",
        fontsize=9,
    )
    end = 0
    for chunk in range(warps):  # chunk k is in at k + 1: the prefetcher streams ahead
        end = max(chunk + 1, end) + cos
        cpu.broken_barh([(end - cos, cos)], (0.2, 0.6), color=c.warm, ec=c.paper, lw=0.4)
    cpu.broken_barh([(0, warps)], (1.2, 0.6), color=c.accent)
    cpu.set_yticks([0, 1], ["core", "memory"])
    cpu.set_title(
        f"CPU core: each chunk's cosine takes {cos} units; the memory is done at "
        f"{warps}, the cosines at {end}",
        fontsize=9,
    )
    cpu.set_xlabel("time (schematic, in units of one chunk's transfer)")
    for ax in (gpu, cpu):
        ax.invert_yaxis()
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    return fig


def launches(trace: dict) -> list[tuple[float, float, float]]:
    """(launch start, kernel start, kernel duration) in µs for each kernel of a profiler trace, the
    kernel matched to its launch by correlation id, in launch order."""
    events = trace["traceEvents"]
    launched = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in e["name"]
    }
    return sorted(
        (launched[e["args"]["correlation"]], e["ts"], e["dur"])
        for e in events
        if e.get("cat") == "kernel" and e["args"].get("correlation") in launched
    )


def schedule(kernels: list[tuple[float, float, float]], longer: float) -> list[float]:
    """The device's start times if each kernel ran ``longer`` times as long: s_i = max(H_i + the
    launch's recorded lag, e_(i-1)), the chapter's queue rule {eq}`async-schedule`."""
    starts, end = [], float("-inf")
    for launch, start, duration in kernels:
        starts.append(max(start, end))
        end = starts[-1] + duration * longer
    return starts


def running_ahead(c: figures.Theme, longer: float = 30) -> plt.Figure:
    """One training step of the recorded GPU trace (batch 1): each launch on the host joined to its
    kernel on the device. Above, as recorded: every kernel ends long before the next launch, and
    the device waits. Below, computed from the same launches with every kernel ``longer`` times as
    long: the queue never drains and the host runs ahead."""
    reference = traces.reference_trace()
    raw = json.loads((traces.reference_traces_dir() / f"{reference.name}.json").read_text())
    steps = sorted(e["ts"] for e in raw["traceEvents"] if e.get("name") == "step")
    step_start, step_end = steps[1], steps[2]  # the second: the first starts the profiler up
    kernels = [k for k in launches(raw) if step_start <= k[0] <= step_end]
    fig, axes = plt.subplots(2, 1, figsize=(8, 4.4), sharex=True)
    rows = (
        ("recorded", [k[1] for k in kernels], 1.0),
        (f"each kernel {longer:g}× as long (computed)", schedule(kernels, longer), longer),
    )
    for ax, (name, starts, scale) in zip(axes, rows):
        for (launch, _, duration), start in zip(kernels, starts):
            x = [(launch - step_start) / 1e3, (start - step_start) / 1e3]
            ax.plot(x, [0.3, 0.7], color=c.muted, lw=0.6)
            ax.plot([x[0]] * 2, [0.1, 0.3], color=c.accent, lw=1.2)
            edge = c.paper if scale > 1 else c.warm  # a line between queued kernels
            ax.broken_barh(
                [(x[1], duration * scale / 1e3)], (0.7, 0.25), fc=c.warm, ec=edge, lw=0.4
            )
        ahead = (starts[-1] - kernels[-1][0]) / 1e3
        ax.set_title(f"{name}: the last kernel starts {ahead:.2f} ms after its launch", fontsize=9)
        ax.set_yticks([0.2, 0.82], ["host: launch", "device: kernel"])
        ax.set_ylim(1.05, 0)
        ax.tick_params(labelsize=8)
    axes[1].set_xlabel(f"ms from the start of the step · {reference.stamp}", fontsize=7)
    fig.tight_layout()
    return fig


DIAGRAMS = {
    "tile-order": tile_order,
    "latency-hiding": latency_hiding,
    "running-ahead": running_ahead,
}


def draw_all(folder: Path, dpi: int = 90) -> list[Path]:
    """Every diagram in each colour mode, as ``<folder>/<name>.png`` and ``<name>-dark.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, draw in DIAGRAMS.items():
        for theme in figures.THEMES:
            with figures.themed(theme):
                fig = draw(theme)
                paths.append(folder / f"{name}{theme.suffix}.png")
                fig.savefig(paths[-1], dpi=dpi, bbox_inches="tight", facecolor=theme.paper)
                plt.close(fig)
    return paths
