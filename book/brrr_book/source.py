"""Show the source of a function or Triton kernel in a notebook, highlighted.

The book's kernels live in :mod:`brrr.kernels`, in one copy that notebooks, tests
and benchmarks share. A notebook still has to *teach* the kernel, so it shows the
code it is about to run::

    from brrr_book.source import show_source
    from brrr.kernels.pointwise import cos_cos_kernel
    show_source(cos_cos_kernel)

The result renders as a fenced ``python`` block: highlighted by Jupyter, and by
Sphinx in the built book, with no HTML or styles stored in the notebook.
"""

from __future__ import annotations

import inspect
import textwrap


def source_of(obj) -> str:
    """The source text of a function, class or ``@triton.jit`` kernel, decorators included."""
    target = getattr(obj, "fn", obj)  # triton.JITFunction keeps the Python function in .fn
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError) as error:
        raise TypeError(f"cannot find the source of {obj!r}: {error}") from error
    return textwrap.dedent(text).rstrip() + "\n"


class SourceBlock:
    """A code block that Jupyter and the book render as highlighted Python."""

    def __init__(self, code: str, title: str = ""):
        self.code = code
        self.title = title

    def markdown(self) -> str:
        fence = "````" if "```" in self.code else "```"
        heading = f"**{self.title}**\n\n" if self.title else ""
        return f"{heading}{fence}python\n{self.code}{fence}\n"

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def __repr__(self) -> str:  # plain-text fallback, e.g. in a terminal
        return (f"# {self.title}\n" if self.title else "") + self.code


def show_source(*objects, title: str | None = None) -> SourceBlock:
    """One highlighted block holding the source of each object, in order.

    ``title`` defaults to where the code lives, e.g. ``brrr/kernels/pointwise.py``.
    """
    if not objects:
        raise TypeError("show_source needs at least one function, class or kernel")
    code = "\n\n".join(source_of(obj) for obj in objects)
    if title is None:
        module = inspect.getmodule(getattr(objects[0], "fn", objects[0]))
        title = f"from {module.__name__}" if module else ""
    return SourceBlock(code, title)
