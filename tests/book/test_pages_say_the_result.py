"""Pages say their result; they do not send the reader to find it (issue 25: 24 sentences once did, such
as "the lines below say which" and "the printed gap says how much").

A sentence about a measurement carries its numbers (myst-nb ``glue``, or a sentence the notebook writes
from its result). This scans the prose of every page for the phrasings that defer instead."""

import json
import re

import pytest

from conftest import ROOT

pytestmark = pytest.mark.device_independent

DEFERS = re.compile(
    r"\b(?:the\s+)?(?:lines?|numbers?|output|table|gap|verdict)\s+(?:below|above|under\s+the\s+\w+)\s+says?\b"
    r"|\bprinted\s+(?:above|below)\b"
    r"|\bthe\s+printed\s+(?:lines?|gap|numbers?|table|predictions?)\b"
    r"|\blines?\s+(?:below|above)\s+(?:say|show|tell)\b"
    r"|\bsays?\s+which\s+happened\b"
    r"|\bcompare\s+the\s+printed\b",
    re.IGNORECASE,
)
PAGES = (
    sorted(ROOT.glob("notebooks/*.ipynb"))
    + sorted(ROOT.glob("solutions/*.ipynb"))
    + sorted(ROOT.glob("chapters/*.md"))
)


def prose(path) -> str:
    if path.suffix == ".md":
        return re.sub(
            r"```.*?```", "", path.read_text(), flags=re.DOTALL
        )  # code cells are not prose
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_no_sentence_sends_the_reader_to_printed_lines(page):
    text = " ".join(prose(page).split())
    found = [text[max(0, m.start() - 60) : m.end() + 30] for m in DEFERS.finditer(text)]
    assert not found, f"{page.name} defers to printed output instead of saying it: {found}"


def test_the_scan_catches_a_deferring_sentence():
    for sentence in (
        "The lines below say which happened here.",
        "the printed gap says how much",
        "Compare your ridge point with the A100's printed above.",
        "The line under the sweep's table says which happened here.",
    ):
        assert DEFERS.search(" ".join(sentence.split())), sentence
    assert not DEFERS.search("The page on doing the labs says how to run a lab.")
