"""Printed text that fits the book's column: lines of at most :data:`WIDTH` characters.

The book wraps a wider printed line where it would otherwise scroll, and breaks
it wherever the column ends; a sentence wrapped here breaks between words, and
its continuation is indented under it.
"""

from __future__ import annotations

import textwrap

WIDTH = 100  # characters: a printed line in the book's column at a 1280 px window


def fit(text: object, width: int = WIDTH) -> str:
    """``text`` (anything ``print`` takes: its ``str()``) with each line wider than ``width``
    wrapped between words; a continuation keeps the line's indentation plus two spaces. Lines that
    fit, and words longer than ``width``, are kept."""
    lines = []
    for line in str(text).splitlines():
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        lines.extend(
            textwrap.wrap(
                line.strip(),
                width,
                initial_indent=indent,
                subsequent_indent=indent + "  ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines)
