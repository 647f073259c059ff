"""Interactive explorers for notebooks (ipywidgets), each backed by a plain function.

Widgets need a live kernel: in the built book and under nbval they render as a
static snapshot or not at all. So every explorer here is a thin layer over a
function that draws and prints one placement, and a notebook calls that function
once with the defaults before it shows the widget. The page then carries a real
figure and numbers even where the sliders cannot move.

An explorer also carries its own static rendering: it displays as one output
whose MIME bundle holds the live widget and, as a fallback, an HTML snapshot of
its figure and numbers at the default settings, with a note that the sliders
are live in Jupyter and Colab. Jupyter and Colab show the widget; the built book
(which drops the widget view, see ``_config.yml``) and any viewer without a
widget manager show the snapshot, never an empty box.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from brrr import plots
from brrr.benchmarks.repeat_sweep import DTYPES, Placement, place
from brrr.roofline import Roof

EXPLORER_REPEATS = tuple(2**k for k in range(13))  # 1 … 4096


def show_placement(placement: Placement, *, stamp: str = "", ax=None):
    """Draw ``placement`` on its roofline and print the model's numbers (and ``stamp``). Returns the
    Axes."""
    label = f"{placement.repeats}x, {placement.dtype}, n=2^{placement.n.bit_length() - 1}"
    ax = plots.roofline(
        [placement.roof],
        [(label, placement.intensity, placement.attainable_flops)],
        stamp=stamp,
        ax=ax,
        intensity_range=(1 / 64, 4096),
        title="x = x * 2, repeated: where it sits on this machine's roofline",
    )
    print(placement.describe())
    if stamp:
        print(stamp)
    return ax


GRID_REPEATS = (1, 4, 16, 64, 256, 1024, 4096)
GRID_DTYPES = ("float16", "float32", "float64")
GRID_LOG2_SIZES = (10, 18, 26)  # a thousand elements (overhead), a quarter million, 64 million


def recorded_roofs(folder=None) -> dict[str, Roof]:
    """Each recorded GPU's roof for the x * 2 chain: its multiply rate and copy bandwidth from its
    repeat sweep, its per-op overhead the record's host floor (:func:`brrr_book.two_gpus.roofs`: its
    roofs' ``dispatch_overhead``, else notebook 30's eager-op rate; 0 where it recorded neither)."""
    from brrr_book import two_gpus
    from brrr.beside import recorded
    from brrr.reference import load_all

    records = [two_gpus.gpu(name, data) for name, data in load_all(folder).items()]
    overhead = {record.device: record.roofs.floor for record in records if record.roofs.floor}
    return {
        f"recorded {gpu.device}": Roof(
            gpu.values["multiply_rate"],
            gpu.values["copy_bandwidth"],
            overhead.get(gpu.device, 0.0),
            f"x*2 chain, recorded on {gpu.device}",
        )
        for gpu in recorded("repeat-sweep", folder)
    }


def placement_grid(
    machines: dict[str, Roof],
    *,
    stamps: tuple[str, ...] = (),
    log2_sizes=GRID_LOG2_SIZES,
    dtypes=GRID_DTYPES,
    repeats=GRID_REPEATS,
) -> Figure:
    """The explorer's model precomputed, as small multiples: one row per machine, one panel per
    size, the predicted time per call against the repeats for each dtype. Flat is memory (or, for a
    small tensor, the overhead floor); rising is compute. What the sliders show one point at a time,
    all at once, for a page without a kernel."""
    figure = Figure(figsize=(3.2 * len(log2_sizes), 2.6 * len(machines) + 0.6))
    axes = figure.subplots(len(machines), len(log2_sizes), squeeze=False, sharex=True)
    for row, (label, roof) in zip(axes, machines.items()):
        for ax, log2_n in zip(row, log2_sizes):
            for dtype in dtypes:
                times = [place(2**log2_n, dtype, r, roof).predicted_s for r in repeats]
                ax.loglog(repeats, times, marker="o", markersize=3, label=dtype)
            ax.set_title(f"{label}\nn = 2^{log2_n}", fontsize=8)
            ax.set_xticks(list(repeats[::2]), [str(r) for r in repeats[::2]])
            ax.minorticks_off()
            ax.tick_params(labelsize=7)
        row[0].set_ylabel("predicted s per call", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("repeats", fontsize=8)
    axes[0][0].legend(fontsize=7)
    figure.tight_layout(rect=(0, 0.03 * max(1, len(stamps)), 1, 1))
    plots.add_stamp(figure, *stamps)
    return figure


LIVE_NOTE = (
    "A snapshot at the default settings. In Jupyter and Colab the sliders are live: run "
    "this notebook to move them."
)


def static_snapshot(placement: Placement, *, stamp: str = "") -> str:
    """HTML of :func:`show_placement` for ``placement``: the note, the figure and the numbers.

    Drawn on a bare :class:`~matplotlib.figure.Figure`, so pyplot never sees it
    and a notebook does not show the figure a second time.
    """
    figure = Figure(figsize=(7, 4.5))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        show_placement(placement, stamp=stamp, ax=figure.subplots())
    png = io.BytesIO()
    figure.savefig(png, format="png", bbox_inches="tight", dpi=100)
    image = base64.b64encode(png.getvalue()).decode("ascii")
    alt = html.escape(placement.describe().splitlines()[0], quote=True)
    return (
        f'<div class="brrr-explorer-snapshot">'
        f"<p><em>{html.escape(LIVE_NOTE)}</em></p>"
        f'<img src="data:image/png;base64,{image}" alt="{alt}">'
        f"<pre>{html.escape(printed.getvalue().rstrip())}</pre></div>"
    )


class Explorer:
    """A live ipywidget that also carries a static snapshot for pages without a kernel.

    ``widget`` is the ipywidgets object; displaying the explorer publishes one
    MIME bundle with the widget's view and the snapshot as ``text/html``.
    """

    def __init__(self, widget, snapshot_html: str):
        self.widget = widget
        self.snapshot_html = snapshot_html

    def _repr_mimebundle_(self, include=None, exclude=None):
        widget_repr = self.widget._repr_mimebundle_  # None once the widget is closed
        bundle = dict((widget_repr() if widget_repr else None) or {})
        bundle.setdefault("text/plain", LIVE_NOTE)
        bundle["text/html"] = self.snapshot_html
        return bundle


def repeat_explorer(
    roof: Roof, *, log2_n: int = 26, dtype: str = "float32", repeats: int = 16, stamp: str = ""
):
    """Sliders for size, dtype and repeats that redraw :func:`show_placement`. Returns an
    :class:`Explorer`."""
    import ipywidgets as widgets

    def update(log2_n: int, dtype: str, repeats: int) -> None:
        show_placement(place(2**log2_n, dtype, repeats, roof), stamp=stamp)
        plt.show()

    widget = widgets.interactive(
        update,
        log2_n=widgets.IntSlider(value=log2_n, min=4, max=31, description="log2(n)"),
        dtype=widgets.Dropdown(options=list(DTYPES), value=dtype, description="dtype"),
        repeats=widgets.SelectionSlider(
            options=list(EXPLORER_REPEATS), value=repeats, description="repeats"
        ),
    )
    snapshot = static_snapshot(place(2**log2_n, dtype, repeats, roof), stamp=stamp)
    return Explorer(widget, snapshot)
