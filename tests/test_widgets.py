"""An explorer shows a live widget in Jupyter and a static snapshot everywhere else."""

import base64
import re

import matplotlib.pyplot as plt

from brrr.benchmarks.repeat_sweep import place
from brrr.roofline import Roof
from brrr.widgets import LIVE_NOTE, repeat_explorer, static_snapshot

ROOF = Roof(peak_flops=1e11, bandwidth=2e10, label="test roof")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def snapshot_png(snapshot: str) -> bytes:
    (encoded,) = re.findall(r'src="data:image/png;base64,([^"]+)"', snapshot)
    return base64.b64decode(encoded)


def test_the_snapshot_holds_the_note_the_figure_and_the_numbers():
    placement = place(2**20, "float32", 16, ROOF)
    figures_before = plt.get_fignums()
    snapshot = static_snapshot(placement, stamp="[test stamp]")
    assert plt.get_fignums() == figures_before, "the snapshot left a pyplot figure to be shown again"
    assert snapshot_png(snapshot).startswith(b"\x89PNG")
    assert LIVE_NOTE in snapshot
    assert placement.describe().splitlines()[0] in snapshot and "[test stamp]" in snapshot


def test_an_explorer_offers_the_widget_and_the_snapshot_in_one_output():
    explorer = repeat_explorer(ROOF, log2_n=20, repeats=16)
    bundle = explorer._repr_mimebundle_()
    assert WIDGET_VIEW in bundle, "Jupyter and Colab would get no live widget"
    assert bundle["text/html"] == explorer.snapshot_html
    assert "text/plain" in bundle
    plt.close("all")
    explorer.widget.close()
    assert explorer._repr_mimebundle_()["text/html"] == explorer.snapshot_html  # still shown once closed
