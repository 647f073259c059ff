"""An explorer shows a live widget in Jupyter and a static snapshot everywhere else."""

import base64
import re

import matplotlib.pyplot as plt
import pytest

from brrr.benchmarks.repeat_sweep import place
from brrr.roofline import Roof
from brrr_book.widgets import LIVE_NOTE, repeat_explorer, static_snapshot

ROOF = Roof(peak_flops=1e11, bandwidth=2e10, label="test roof")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def snapshot_png(snapshot: str) -> bytes:
    (encoded,) = re.findall(r'src="data:image/png;base64,([^"]+)"', snapshot)
    return base64.b64decode(encoded)


def test_the_snapshot_holds_the_note_the_figure_and_the_numbers():
    placement = place(2**20, "float32", 16, ROOF)
    figures_before = plt.get_fignums()
    snapshot = static_snapshot(placement, stamp="[test stamp]")
    assert plt.get_fignums() == figures_before, (
        "the snapshot left a pyplot figure to be shown again"
    )
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
    assert (
        explorer._repr_mimebundle_()["text/html"] == explorer.snapshot_html
    )  # still shown once closed


def test_the_static_explorer_precomputes_every_size_dtype_and_repeat_for_each_machine():
    """The built book has no kernel: the grid holds what the sliders would show, for this machine
    and each recorded GPU, one panel per size, one line per dtype, drawn from the same model as the
    sliders."""
    from brrr.benchmarks.repeat_sweep import place
    from brrr.roofline import Roof
    from brrr_book.widgets import GRID_DTYPES, GRID_LOG2_SIZES, GRID_REPEATS, placement_grid

    machines = {"here": Roof(2e10, 1e10, 4e-6, overhead_adds=True), "gpu": Roof(3e13, 3e12, 8e-6)}
    figure = placement_grid(machines)
    axes = figure.axes
    assert len(axes) == len(machines) * len(GRID_LOG2_SIZES)
    for ax in axes:
        assert [line.get_label() for line in ax.get_lines()] == list(GRID_DTYPES)
    first = axes[0].get_lines()[1]  # here, the smallest size, float32
    expected = [
        place(2 ** GRID_LOG2_SIZES[0], "float32", r, machines["here"]).predicted_s
        for r in GRID_REPEATS
    ]
    assert list(first.get_ydata()) == pytest.approx(expected)


def test_recorded_roofs_come_from_the_record(tmp_path):
    import json

    from brrr_book.widgets import recorded_roofs

    assert recorded_roofs(tmp_path) == {}
    (tmp_path / "gpu.json").write_text(
        json.dumps(
            {
                "figures": {
                    "repeat-sweep": {
                        "env": {"device": "GPU X"},
                        "values": {"multiply_rate": 3e13, "copy_bandwidth": 3e12},
                    },
                    "overhead/python-vs-pytorch": {
                        "env": {"device": "GPU X"},
                        "values": {"torch_ops_per_s": 1e5},
                    },
                }
            }
        )
    )
    (roof,) = recorded_roofs(tmp_path).values()
    assert (roof.peak_flops, roof.bandwidth, roof.overhead_s) == (3e13, 3e12, pytest.approx(1e-5))
    # A record without notebook 30's figures (the H200's of 2026-11-28) reads its roofs' overhead.
    (tmp_path / "gpu-y.json").write_text(
        json.dumps(
            {
                "ceilings": {"env": {"device": "GPU Y"}, "dispatch_overhead": 6e-6},
                "figures": {
                    "repeat-sweep": {
                        "env": {"device": "GPU Y"},
                        "values": {"multiply_rate": 3e13, "copy_bandwidth": 4e12},
                    }
                },
            }
        )
    )
    assert recorded_roofs(tmp_path)["recorded GPU Y"].overhead_s == 6e-6
