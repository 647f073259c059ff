"""A result measured here beside each recorded GPU's and the essay's: the small table under a taught
result.

The essay's lesson is about GPUs, and a CPU alone can teach its opposite: a fused ``x.cos().cos()``
costs three times one ``x.cos()`` on a CPU, where the cosine is a software polynomial, and 1.00x on
an H100, where both hide under the memory time. So a page that teaches a claim shows three kinds of
machine side by side:

* this machine, measured now;
* every GPU recorded in ``brrr/data/reference/`` (by ``make gpu-check``), labelled recorded, with
  its date and versions, or one row saying that none is recorded;
* the essay's figure, quoted with its hardware.

:func:`recorded` reads one section of every record; :class:`Beside` shows the rows as an HTML table
in a notebook and as plain text elsewhere.
"""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass

from brrr import reference
from brrr.stamp import environment, format_stamp

NONE_RECORDED = "none recorded: make gpu-check on a GPU node records one (brrr/data/reference/)"
ESSAY_SOURCE = "Horace He, Making Deep Learning Go Brrrr"


@dataclass(frozen=True)
class Row:
    machine: str  # "this machine: ...", "recorded: <GPU>", "the essay (quoted)"
    result: str
    source: str  # when and with what it was measured, or where it is quoted from


@dataclass(frozen=True)
class Recorded:
    device: str
    values: dict
    env: dict

    @property
    def source(self) -> str:
        env = self.env
        commit = env.get("commit", "")
        at = f" · commit {commit[:10]}" if commit and commit != "unknown" else ""
        return (
            f"recorded {env.get('date', '?')} · torch {env.get('torch', '?')} "
            f"· triton {env.get('triton', '?')}{at}"
        )

    @property
    def stamp(self) -> str:
        """The record's full stamp, labelled recorded: ``recorded [measured on <GPU> · ...]``."""
        return "recorded " + format_stamp(self.env)


def recorded(section: str, folder=None) -> list[Recorded]:
    """What each committed GPU record holds under ``section`` (a claim is ``claims/<key>``), by file
    name."""
    found = []
    for name, data in reference.load_all(folder).items():
        entry = data.get("figures", {}).get(section)
        if entry:
            found.append(
                Recorded(
                    entry.get("env", {}).get("device", name), entry["values"], entry.get("env", {})
                )
            )
    return found


def machine_here(stamp: str) -> str:
    """ "this machine: <device> (<mode>)" as ``stamp`` (:func:`brrr.stamp.format_stamp`) names it:
    the setting the result was measured under, which may not be this process's (a page that
    times on one thread inside its helpers)."""
    measured = stamp.strip("[]").removeprefix("measured on ").split(" · ")[0]
    return f"this machine: {measured or format_stamp(environment())}"


def three_machines(
    title: str, here: str, stamp: str, gpus: list[tuple[Recorded, str]], essay: str
) -> Beside:
    """Each recorded GPU's result first (``(record, result)`` pairs, or one row saying none is
    recorded), then ``here`` (measured under ``stamp``), then the essay's figure, quoted: the lesson
    is the GPU's, and this machine's result reads against it."""
    rows = [Row(f"recorded: {gpu.device}", result, gpu.source) for gpu, result in gpus] or [
        Row("recorded GPU", NONE_RECORDED, "")
    ]
    rows.append(Row(machine_here(stamp), here, stamp.strip("[]")))
    rows.append(Row("the essay (quoted)", essay, ESSAY_SOURCE))
    return Beside(title, tuple(rows))


@dataclass(frozen=True)
class Beside:
    """Rows of (machine, result, source), shown as a table."""

    title: str
    rows: tuple[Row, ...]

    def __str__(self) -> str:
        lines = [self.title]
        for row in self.rows:
            lines.append(f"- {row.machine}: {row.result}")
            if row.source:
                lines.append(textwrap.indent(f"({row.source})", "    "))
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><th scope='row'>{html.escape(row.machine)}</th><td>{html.escape(row.result)}</td>"
            f"<td class='brrr-beside-source'>{html.escape(row.source)}</td></tr>"
            for row in self.rows
        )
        return (
            f"<table class='brrr-beside'><caption>{html.escape(self.title)}</caption>"
            f"<thead><tr><th>machine</th><th>result</th><th>measured</th></tr></thead>"
            f"<tbody>{cells}</tbody></table>"
        )


def show(table: Beside) -> None:
    """Display ``table`` in a notebook (HTML), or print it (a script, a plain Python session)."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(table)
    else:
        print(table)
