import matplotlib

matplotlib.use("Agg")

from brrr.roofline import Roof
from brrr.plots import loglog_sweep, roofline


def test_roofline_draws_each_roof_and_point():
    roofs = [Roof(100e9, 20e9, label="matmul"), Roof(30e9, 20e9, label="vector")]
    ax = roofline(roofs, [("cos", 0.125, None), ("mm", 100.0, 90e9)], stamp="[stamp]")
    assert len(ax.get_lines()) == 4  # two roofs, two ridge markers
    assert len(ax.collections) == 2
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert any(text.get_text() == "[stamp]" for text in ax.figure.texts)
    ys = [line.get_ydata().max() for line in ax.get_lines()[::2]]
    assert max(ys) == 100e9


def test_sweep_plots_one_line_per_series():
    ax = loglog_sweep([1, 2, 4], {"a": [1, 2, 3], "b": [3, 2, 1]}, xlabel="x", ylabel="y", marks={"knee": 2})
    assert len(ax.get_lines()) == 3
    assert ax.get_legend() is not None
