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
    ax = loglog_sweep(
        [1, 2, 4], {"a": [1, 2, 3], "b": [3, 2, 1]}, xlabel="x", ylabel="y", marks={"knee": 2}
    )
    assert len(ax.get_lines()) == 3
    assert ax.get_legend() is not None


def _label_boxes(ax):
    renderer = ax.figure.canvas.get_renderer()
    return [text.get_window_extent(renderer) for text in ax.texts]


def _assert_apart_and_inside(ax):
    boxes = _label_boxes(ax)
    inside = ax.get_window_extent(ax.figure.canvas.get_renderer())
    for i, box in enumerate(boxes):
        assert (
            inside.x0 <= box.x0
            and box.x1 <= inside.x1
            and inside.y0 <= box.y0
            and box.y1 <= inside.y1
        )
        assert not any(box.overlaps(other) for other in boxes[:i]), [t.get_text() for t in ax.texts]


def test_roofline_labels_of_close_points_do_not_overlap():
    # Softmax and layer norm sit a factor 1.4 apart, two matmuls near the
    # right edge: with one fixed offset their labels ran into each other.
    roofs = [Roof(72.5e9, 13.2e9, label="matmul"), Roof(6.3e9, 13.2e9, label="vector")]
    points = [
        ("x.cos()", 0.125, None),
        ("softmax", 0.625, 6.3e9),
        ("layer norm", 0.875, 6.3e9),
        ("matmul 16x4096 @ 4096x4096", 7.9, 72.5e9),
        ("matmul 4096^3", 683, 72.5e9),
    ]
    ax = roofline(roofs, points)
    assert len(ax.texts) == len(points)
    _assert_apart_and_inside(ax)


def test_sweep_mark_labels_of_close_marks_do_not_overlap():
    ax = loglog_sweep(
        [1, 2, 4, 8],
        {"a": [1, 2, 3, 4]},
        xlabel="x",
        ylabel="y",
        marks={"2x floor (measured)": 3.0, "predicted": 3.1},
    )
    assert len(ax.texts) == 2
    _assert_apart_and_inside(ax)
