"""The book's own diagrams (book/brrr_book/diagrams.py): each follows its rule, is drawn in both
colour modes and is shown on one page, as a light figure and a dark image with one alt text."""

import json
import re

import pytest

from brrr import traces
from brrr_book import figures
from brrr_book import diagrams
from conftest import ROOT

# A diagram on a page: its light drawing as a figure of class only-light, then its dark drawing.
SHOWN = re.compile(
    r"```\{figure\} \.\./_diagrams/(?P<name>[\w-]+)\.png\n:alt: (?P<alt>.*)\n"
    r":class: only-light\n:name: fig-(?P=name)\n\n.+?\n```\n\n"
    r"```\{image\} \.\./_diagrams/(?P=name)-dark\.png\n:alt: (?P=alt)\n:class: only-dark\n```",
    re.S,
)


def _page_texts() -> dict[str, str]:
    pages = {path.name: path.read_text() for path in sorted((ROOT / "chapters").glob("*.md"))}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        pages[path.name] = "\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
        )
    return pages


@pytest.mark.parametrize("tiles_m, tiles_n, group", [(9, 9, 3), (7, 5, 3), (4, 6, 1), (5, 5, 8)])
def test_each_tile_is_taken_once_and_group_1_is_row_major(tiles_m, tiles_n, group):
    taken = [
        diagrams.program_tile(pid, tiles_m, tiles_n, group) for pid in range(tiles_m * tiles_n)
    ]
    assert sorted(taken) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    if group == 1:
        assert taken == [divmod(pid, tiles_n) for pid in range(tiles_m * tiles_n)]


def test_grouped_order_needs_fewer_strips_for_the_first_programs():
    """The picture's claim, as in Triton's matmul tutorial: 10 strips row-major, 6 grouped."""
    for group, strips in ((1, 10), (3, 6)):
        done = [diagrams.program_tile(pid, 9, 9, group) for pid in range(9)]
        assert len({m for m, _ in done}) + len({n for _, n in done}) == strips


def test_the_schedule_queues_a_kernel_behind_the_one_before():
    """s_i = max(recorded start, e_(i-1)): the chapter's rule, with the launch lag kept."""
    kernels = [(0.0, 1.0, 5.0), (2.0, 3.0, 5.0), (20.0, 21.0, 1.0)]
    assert diagrams.schedule(kernels, 1.0) == [1.0, 6.0, 21.0]
    assert diagrams.schedule(kernels, 10.0) == [1.0, 51.0, 101.0]


def test_every_recorded_kernel_is_joined_to_its_launch():
    reference = traces.reference_trace()
    raw = json.loads((traces.reference_traces_dir() / f"{reference.name}.json").read_text())
    joined = diagrams.launches(raw)
    kernels = [e for e in raw["traceEvents"] if e.get("cat") == "kernel"]
    assert len(joined) == len(kernels) > 0
    assert all(launch <= start for launch, start, _ in joined)


def test_each_diagram_is_drawn_in_both_modes_and_shown_once(tmp_path):
    drawn = diagrams.draw_all(tmp_path)
    assert [path.name for path in drawn] == [
        f"{name}{theme.suffix}.png" for name in diagrams.DIAGRAMS for theme in figures.THEMES
    ]
    assert all(5_000 < path.stat().st_size < 200_000 for path in drawn)
    shown = {}
    for page, text in _page_texts().items():
        assert text.count("../_diagrams/") == 2 * len(SHOWN.findall(text)), page
        for match in SHOWN.finditer(text):
            shown.setdefault(match["name"], []).append(page)
    assert {name: len(pages) for name, pages in shown.items()} == dict.fromkeys(
        diagrams.DIAGRAMS, 1
    )
