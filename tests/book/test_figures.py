"""The essay's pictures (brrr_book/figures.py): each is drawn from its data, with or without a GPU
record, as a small image, and shown in a chapter with the alt text the module gives it."""

import re

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.colors import to_hex

from brrr import counting, units
from brrr_book import figures
from conftest import ROOT

pytestmark = pytest.mark.device_independent

CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
# A picture in a chapter: its light drawing as a figure of class only-light (with its name and
# caption), then its dark drawing as an image of class only-dark with the same alt text.
DIRECTIVE = re.compile(
    r"```\{figure\} \.\./_figures/(?P<name>[\w-]+)\.png\n:alt: (?P<alt>.*)\n"
    r":class: only-light\n:name: fig-(?P=name)\n\n.+\n```\n\n"
    r"```\{image\} \.\./_figures/(?P=name)-dark\.png\n:alt: (?P=alt)\n:class: only-dark\n```\n"
)


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """Every picture drawn in both themes, once for the tests that read the files."""
    return figures.draw_all(tmp_path_factory.mktemp("figures"))


def test_each_picture_draws_as_a_small_image_in_both_themes(drawn):
    assert [path.stem for path in drawn] == [
        f"{picture.name}{theme.suffix}" for picture in figures.FIGURES for theme in figures.THEMES
    ]
    for path in drawn:
        size = path.stat().st_size
        assert 5_000 < size < 200_000, f"{path.name}: {size} bytes"


def _luminance(path) -> float:
    """The mean luminance (0 black, 1 white) of a PNG's opaque pixels."""
    pixels = mpimg.imread(path)
    opaque = pixels[..., 3] > 0.5 if pixels.shape[-1] == 4 else np.ones(pixels.shape[:2], bool)
    return float((pixels[..., :3][opaque] @ np.array([0.2126, 0.7152, 0.0722])).mean())


def test_the_dark_pictures_are_dark_and_the_light_ones_light(drawn):
    """The dark mode's picture sits on a dark page: mostly dark pixels, where the light one is
    mostly white."""
    by_name = {path.name: path for path in drawn}
    for picture in figures.FIGURES:
        light, dark = (
            _luminance(by_name[f"{picture.name}{theme.suffix}.png"]) for theme in figures.THEMES
        )
        assert light > 0.7, f"{picture.name}.png: mean luminance {light:.2f}"
        assert dark < 0.3, (
            f"{picture.name}-dark.png: mean luminance {dark:.2f} (light: {light:.2f})"
        )


def test_the_drawing_functions_colour_their_marks_in_the_theme_being_drawn():
    """Text coloured explicitly (a box's title, a stamp) takes the theme's ink, not the light
    one's."""
    for theme in figures.THEMES:
        with figures.themed(theme):
            fig = figures.factory()
            colours = {to_hex(text.get_color()) for text in fig.axes[0].texts}
            plt.close(fig)
        assert to_hex(theme.ink) in colours, theme.name
        other = next(t for t in figures.THEMES if t is not theme)
        assert to_hex(other.ink) not in colours, theme.name
    assert figures._colors() is figures.LIGHT, "themed() leaves the light theme behind it"


def test_the_pictures_drawn_from_records_draw_without_one(tmp_path, monkeypatch):
    """A fork without brrr/data/reference/ and a machine without measured ceilings: the essay's A100
    and the datasheets still make a picture."""
    monkeypatch.setattr("brrr.beside.recorded", lambda section, folder=None: [])
    monkeypatch.setenv("BRRR_CACHE_DIR", str(tmp_path / "empty-cache"))
    assert list(figures._three_machines()) == ["A100, the essay's figures (quoted)"]
    for picture in figures.FIGURES:
        if picture.name in ("roofline-three", "generations"):
            fig = picture.draw()
            assert fig.axes and fig.axes[0].lines, picture.name
            plt.close(fig)


def test_the_trips_picture_shows_the_counted_bytes():
    fig = figures.trips(ops=3, n=2**20)
    titles = [ax.get_title() for ax in fig.axes]
    one_pass = counting.pointwise(2**20).bytes
    assert titles == [
        f"unfused: 3 round trips, {units.binary_bytes(3 * one_pass)}",
        f"fused: one trip, {units.binary_bytes(one_pass)}",
    ], titles
    plt.close(fig)


def test_the_generations_chart_is_drawn_from_the_datasheets():
    fig = figures.generations({"H100 (measured)": (3.0e12, 745e12)})
    bars = [patch.get_height() for patch in fig.axes[1].patches]
    expected = [g.tensor_flops / g.bandwidth for g in figures.GENERATIONS] + [745e12 / 3.0e12]
    assert bars == pytest.approx(expected)
    plt.close(fig)


def test_each_picture_sits_in_one_chapter_with_its_alt_text():
    """Once, as a light figure and a dark image naming both files, each with the alt text of
    FIGURES."""
    shown = {}
    for chapter in CHAPTERS:
        text = chapter.read_text()
        for match in DIRECTIVE.finditer(text):
            shown.setdefault(match["name"], []).append((chapter.name, match["alt"]))
        assert text.count("../_figures/") == 2 * len(DIRECTIVE.findall(text)), (
            f"{chapter.name}: a picture shown without its light figure and dark image in the form "
            "above"
        )
    for picture in figures.FIGURES:
        assert len(shown.get(picture.name, [])) == 1, (
            f"{picture.name} is shown in {shown.get(picture.name)}"
        )
        ((_, alt),) = shown[picture.name]
        assert alt == picture.alt, (
            f"{picture.name}: the chapter's alt text differs from brrr_book.figures'"
        )
    assert set(shown) <= {picture.name for picture in figures.FIGURES}, (
        "a chapter shows a picture nobody draws"
    )


def test_the_recorded_gpu_pictures_say_what_they_wait_for_without_a_record(monkeypatch):
    """No record (a fork without brrr/data/reference/): each picture drawn from a GPU record is one
    panel saying which record it waits for, not an empty or broken image."""
    monkeypatch.setattr("brrr.beside.recorded", lambda section, folder=None: [])
    monkeypatch.setattr("brrr.traces.reference_trace", lambda folder=None: None)
    for picture in figures.FIGURES:
        if picture.name in ("knee", "gpu-waits", "stages"):
            fig = picture.draw()
            said = " ".join(text.get_text() for ax in fig.axes for text in ax.texts)
            assert "no GPU has recorded" in said, picture.name
            plt.close(fig)


def test_the_recorded_gpu_pictures_draw_the_record():
    """With the committed record: the knee's sweep, the trace's kernels and idle shares, the stages'
    bars."""
    knee = figures.knee(
        {
            "GPU": {
                "seconds": {"1": 1e-3, "64": 1e-3, "256": 3e-3},
                "knee_measured": 80.0,
                "knee_predicted_multiply": 79.0,
            }
        }
    )
    assert list(knee.axes[0].lines[0].get_ydata()) == [1.0, 1.0, 3.0]
    waits = figures.gpu_waits(
        None,
        {
            "small": {"batch": 1, "idle_fraction": 0.96},
            "large": {"batch": 4096, "idle_fraction": 0.15},
        },
    )
    assert [text.get_text() for text in waits.axes[1].texts] == ["96% idle", "15% idle"]
    rows = [
        {"stage": "start", "tokens_per_s": 1e5, "regime": "overhead-bound"},
        {"stage": "+ bigger batch", "tokens_per_s": 4e5, "regime": "compute-bound"},
    ]
    bars = [patch.get_width() for patch in figures.stages(rows, "GPU").axes[0].patches]
    assert bars == [4e5, 1e5]
    plt.close("all")


def test_the_dark_image_joins_its_figure_under_one_caption():
    """The theme hides a caption that follows a hidden image: brrr_book.book_pages moves the dark
    image into the figure, both drawings in one div ahead of the caption (parsed as MyST, without
    Sphinx)."""
    from docutils import nodes
    from docutils.core import publish_doctree, publish_from_doctree
    from myst_parser.parsers.docutils_ import Parser

    from brrr_book.book_pages import LIGHT_DARK, pair_light_dark

    text = (ROOT / "chapters" / "intro.md").read_text()
    match = next(m for m in DIRECTIVE.finditer(text) if m["name"] == "factory")
    doctree = publish_doctree(
        f"# A page\n\n{match[0]}\nAfter it.\n",
        parser=Parser(),
        settings_overrides={"report_level": 4},
    )
    assert pair_light_dark(doctree) == 1
    (figure,) = doctree.findall(nodes.figure)
    assert [child.tagname for child in figure.children] == ["container", "caption"]
    assert figure[0]["classes"] == [LIGHT_DARK]
    assert [(image["uri"], image["classes"]) for image in figure[0].children] == [
        ("../_figures/factory.png", ["only-light"]),
        ("../_figures/factory-dark.png", ["only-dark"]),
    ]
    assert not [image for image in doctree.findall(nodes.image) if image.parent is not figure[0]]
    html = publish_from_doctree(doctree, writer_name="html5").decode()
    assert re.search(
        r'<div class="[^"]*brrr-light-dark[^"]*">\s*<img[^>]*only-light[^>]*/>\s*'
        r"<img[^>]*only-dark[^>]*/>\s*</div>\s*<figcaption>",
        html,
    ), html
    assert pair_light_dark(doctree) == 0, "a figure already paired is left alone"


def test_every_recorded_gpu_is_drawn_beside_the_others():
    """Issue 49: a picture that shows one recorded GPU shows each: the capstone's stages get a panel
    per GPU (the H100 and the H200 both recorded it), the knee a curve per sweep however many, the
    generations chart the H200's datasheet beside the H100's, the idle shares a bar per GPU."""
    fig = figures.FIGURES[[p.name for p in figures.FIGURES].index("stages")].draw()
    labels = [ax.get_xlabel() for ax in fig.axes]
    assert [any(gpu in label for label in labels) for gpu in ("H100", "H200")] == [True, True]
    sweep = {"seconds": {"1": 1e-3, "256": 3e-3}, "knee_measured": 80.0}
    sweeps = {f"GPU {i}": {**sweep, "knee_predicted_multiply": 79.0} for i in range(4)}
    curves = [line for line in figures.knee(sweeps).axes[0].lines if line.get_marker() == "o"]
    assert len(curves) == 4
    assert "H200 SXM" in [g.name for g in figures.GENERATIONS]
    idle = {
        "a small": {"batch": 1, "idle_fraction": 0.9, "gpu": "H100"},
        "b small": {"batch": 1, "idle_fraction": 0.8, "gpu": "H200"},
    }
    waits = figures.gpu_waits(None, idle)
    assert [t.get_text() for t in waits.axes[1].get_yticklabels()] == [
        "H100, batch 1",
        "H200, batch 1",
    ]
    plt.close("all")
