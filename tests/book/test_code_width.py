"""Every code line the reader sees fits in 80 characters.

The built book shows a code cell in a fixed-width box: a longer line is cut
off behind a scrollbar. This holds the code cells of the notebooks, the lab
solutions and the labs (generated from them by brrr.labs, stubs included),
and the {code-cell} blocks of the chapters, to 80. Cheap: no build.
"""

import json
import re

import pytest

from conftest import ROOT

WIDTH = 80

NOTEBOOKS = sorted(
    p for folder in ("notebooks", "solutions", "labs") for p in (ROOT / folder).glob("*.ipynb")
)
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
# A MyST code cell: ```{code-cell} ipython3, its options, its code, and a
# closing fence as long as the opening one.
CODE_CELL = re.compile(
    r"^(?P<fence>`{3,})\{code-cell\}[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)

# A fence's opening line: its backticks and its info string (a language, or a directive such as
# {figure}).
FENCE = re.compile(r"^(?P<fence>`{3,})(?P<info>.*)$")
PLAIN = re.compile(
    r"^[\w+-]*$"
)  # ```bash, ```python, ```: shown as it is, in the same fixed-width box


def notebook_cells(text: str) -> list[tuple[str, str]]:
    """(label, source) of each code cell of a notebook's JSON text."""
    cells = json.loads(text)["cells"]
    return [
        (
            f"cell {index}",
            "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"],
        )
        for index, cell in enumerate(cells)
        if cell["cell_type"] == "code"
    ]


def chapter_cells(text: str) -> list[tuple[str, str]]:
    """(label, source) of each {code-cell} block of a MyST page; the label names the page line its
    body starts on."""
    cells = []
    for number, match in enumerate(CODE_CELL.finditer(text)):
        first_line = text.count("\n", 0, match.start("body")) + 1
        cells.append(
            (f"code cell {number} (starts on page line {first_line})", match.group("body"))
        )
    return cells


def chapter_blocks(text: str) -> list[tuple[str, str]]:
    """(label, source) of each plain fenced code block of a MyST page (not a directive such as
    {figure}), read fence by fence: a closing fence is as long as its opening one."""
    blocks, fence, plain, body, first = [], None, False, [], 0
    for number, line in enumerate(text.split("\n"), start=1):
        if fence is None:
            opening = FENCE.match(line)
            if opening:
                fence, plain, body, first = (
                    opening["fence"],
                    bool(PLAIN.match(opening["info"].strip())),
                    [],
                    number,
                )
        elif line.strip() == fence:
            if plain:
                blocks.append(
                    (f"code block {len(blocks)} (starts on page line {first + 1})", "\n".join(body))
                )
            fence = None
        else:
            body.append(line)
    return blocks


def too_wide(where: str, cells: list[tuple[str, str]], width: int = WIDTH) -> list[str]:
    """One message for each line longer than ``width``: file, cell, line in the cell, length."""
    return [
        f"{where}, {label}, line {number}: {len(line)} characters: {line.strip()[:50]}"
        for label, source in cells
        for number, line in enumerate(source.split("\n"), start=1)
        if len(line) > width
    ]


def test_there_is_code_to_check():
    assert {p.parent.name for p in NOTEBOOKS} == {"notebooks", "solutions", "labs"}, (
        "a glob is wrong"
    )
    assert sum(len(chapter_cells(p.read_text(encoding="utf-8"))) for p in CHAPTERS) >= 3, (
        "found no {code-cell} blocks in chapters/: the pattern is wrong"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_code_fits_the_page(path):
    where = str(path.relative_to(ROOT))
    wide = too_wide(where, notebook_cells(path.read_text(encoding="utf-8")))
    hint = (
        "\nbreak them (labs/ is generated: fix solutions/, then `make labs`)"
        if path.parent.name == "labs"
        else ""
    )
    assert not wide, f"{len(wide)} code line(s) over {WIDTH} characters:\n" + "\n".join(wide) + hint


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_chapter_code_cells_fit_the_page(path):
    wide = too_wide(str(path.relative_to(ROOT)), chapter_cells(path.read_text(encoding="utf-8")))
    assert not wide, f"{len(wide)} code line(s) over {WIDTH} characters:\n" + "\n".join(wide)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_chapter_code_blocks_fit_the_page(path):
    """The commands an instructor copies (the grading pages' shell blocks) fit the column too: a
    wider one scrolled sideways in the browser test at 1280 px."""
    wide = too_wide(str(path.relative_to(ROOT)), chapter_blocks(path.read_text(encoding="utf-8")))
    assert not wide, f"{len(wide)} code line(s) over {WIDTH} characters:\n" + "\n".join(wide)


def test_the_block_finder_sees_shell_blocks_and_leaves_directives_out():
    page = "```bash\n" + "x" * 81 + "\n```\n\n```{figure} a.png\n:alt: " + "y" * 200 + "\n```\n"
    assert [len(source.strip()) for _, source in chapter_blocks(page)] == [81]
    assert too_wide("page", chapter_blocks(page))


def test_the_check_catches_a_line_one_character_too_long():
    fits, over = "x = 1  # " + "a" * (WIDTH - 9), "y = 2  # " + "b" * (WIDTH - 8)
    assert (len(fits), len(over)) == (WIDTH, WIDTH + 1)
    notebook = json.dumps(
        {
            "cells": [
                {"cell_type": "markdown", "source": ["# " + "a very long heading " * 10]},
                {"cell_type": "code", "source": [fits + "\n", "z = 3\n", over]},
                {"cell_type": "code", "source": fits},
            ]
        }
    )
    assert too_wide("nb.ipynb", notebook_cells(notebook)) == [
        f"nb.ipynb, cell 1, line 3: {WIDTH + 1} characters: {over[:50]}"
    ]

    page = "\n".join(
        [
            "# A page",
            "",
            "```{code-cell} ipython3",
            ":tags: [hide-input]",
            fits,
            over,
            "```",
            "",
            "prose " * 30,
            "",
            "```python",
            over,
            "```",
        ]
    )
    assert too_wide("page.md", chapter_cells(page)) == [
        f"page.md, code cell 0 (starts on page line 4), line 3: {WIDTH + 1} characters: {over[:50]}"
    ]


# A page reads like a Triton tutorial: what it teaches, not the machinery (which sits in one hidden
# cell calling the page's book/brrr_book/pages module). Counted as the reader sees it: non-blank
# lines of code cells the book does not hide.
MOST_CODE_LINES = 150
HIDDEN = {"remove-input", "remove-cell", "hide-input", "hide-cell"}


def shown_code_lines(notebook: dict) -> int:
    return sum(
        len([line for line in "".join(cell["source"]).splitlines() if line.strip()])
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
        and not HIDDEN & set(cell.get("metadata", {}).get("tags", []))
    )


@pytest.mark.parametrize(
    "path",
    [p for p in NOTEBOOKS if p.parent.name != "labs"],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_a_page_shows_at_most_150_lines_of_code(path):
    shown = shown_code_lines(json.loads(path.read_text()))
    assert shown <= MOST_CODE_LINES, (
        f"{path.name} shows {shown} lines of code: move what the build needs and the reader does "
        "not (targets, retries, records, glue) into the page's book/brrr_book/pages module, "
        "called from a hidden cell"
    )


def test_the_count_leaves_out_hidden_cells():
    cell = {"cell_type": "code", "source": ["a = 1\n", "\n", "b = 2"], "metadata": {}}
    hidden = {"cell_type": "code", "source": ["c = 3"], "metadata": {"tags": ["remove-input"]}}
    assert shown_code_lines({"cells": [cell, hidden]}) == 2
