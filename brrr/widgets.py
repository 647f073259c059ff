"""Interactive explorers for notebooks (ipywidgets), each backed by a plain function.

Widgets need a live kernel: in the built book and under nbval they render as a
static snapshot or not at all. So every explorer here is a thin layer over a
function that draws and prints one placement, and a notebook calls that function
once with the defaults before it shows the widget. The page then carries a real
figure and numbers even where the sliders cannot move.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from brrr import plots
from brrr.benchmarks.repeat_sweep import DTYPES, Placement, place
from brrr.roofline import Roof

EXPLORER_REPEATS = tuple(2**k for k in range(13))  # 1 … 4096


def show_placement(placement: Placement, *, stamp: str = "", ax=None):
    """Draw ``placement`` on its roofline and print the model's numbers (and ``stamp``). Returns the Axes."""
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


def repeat_explorer(roof: Roof, *, log2_n: int = 26, dtype: str = "float32", repeats: int = 16, stamp: str = ""):
    """Sliders for size, dtype and repeats that redraw :func:`show_placement`. Returns the widget."""
    import ipywidgets as widgets

    def update(log2_n: int, dtype: str, repeats: int) -> None:
        show_placement(place(2**log2_n, dtype, repeats, roof), stamp=stamp)
        plt.show()

    return widgets.interactive(
        update,
        log2_n=widgets.IntSlider(value=log2_n, min=4, max=31, description="log2(n)"),
        dtype=widgets.Dropdown(options=list(DTYPES), value=dtype, description="dtype"),
        repeats=widgets.SelectionSlider(options=list(EXPLORER_REPEATS), value=repeats, description="repeats"),
    )
