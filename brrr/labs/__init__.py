"""The labs: one package per lab, holding everything about it.

Each lab (``brrr.labs.roofline`` for ``01-roofline``, ...) is a package of three
modules:

- ``__init__``: ``LAB``, its name; ``HIDDEN_MODULES``, the ``brrr`` modules
  absent from the student's process under the gradebook (the roofline lab hides
  ``ceilings`` and ``timing``); and the given material, re-exported from
  ``given``. This is what the notebook imports (``from brrr.labs.fuse_it import
  chain``), and what :func:`module` returns.
- ``given``: the **given material**: the ops to analyse, the chain to fuse, the
  references that are given, helpers for trying things out, and ``WIRE_TYPES``,
  the dataclasses the student's functions receive.
- ``checks``: how the lab is graded, a :class:`Lab` (:func:`lab` returns it):
  the checks it grades on each device class, each check's function, what a
  check that does not apply says, hints, and the references the grader keeps
  (``GRADER_REFERENCES``: the reference predictions, counts and traffic rules an
  answer is compared with, which the student's process cannot import; the
  notebook shows them, where it must, as tables at one shape).

The student's process imports the package, so neither ``__init__`` nor
``given`` imports at module level anything its ``HIDDEN_MODULES`` name, and
neither imports ``checks``: only the grader process (:mod:`brrr.grading.server`)
and the gradebook do. The labs are built on the check library,
:mod:`brrr.checks`, and import nothing of :mod:`brrr.grading`, which grades
them (docs/DESIGN.md, "Layers").

``python -m brrr.labs`` writes ``labs/`` from ``solutions/``
(:mod:`brrr.labs.generate`).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable, Mapping, Protocol

LABS: dict[str, str] = {
    "01-roofline": "brrr.labs.roofline",
    "02-fuse-it": "brrr.labs.fuse_it",
    "03-one-pass": "brrr.labs.one_pass",
    "04-make-it-fast": "brrr.labs.make_it_fast",
    "05-tile-it": "brrr.labs.tile_it",
    "06-flash-attention": "brrr.labs.flash_attention",
}


class Lab(Protocol):
    """How a lab is graded: its checks module, ``brrr.labs.<lab>.checks``.

    ``CHECKS`` are the checks it grades on each device class (``"cpu"``,
    ``"gpu"``), in gradebook column order, and ``ALL_CHECKS`` their union.
    ``GRADERS`` (:class:`brrr.checks.core.Graders`) holds every check's
    function, and ``grade(check, student)`` runs one: the grader process reaches
    the student's function only through ``student``
    (:class:`brrr.checks.core.Student`). ``prepare()`` imports what the
    checks use, before any student code runs; ``not_applicable(check,
    device_class)`` is the note shown for a check that does not apply on this
    device.
    """

    LAB: str
    CHECKS: Mapping[str, tuple[str, ...]]
    ALL_CHECKS: tuple[str, ...]
    GRADERS: Mapping[str, Callable[[Any], str]]

    def grade(self, check: str, student: Any) -> str: ...

    def prepare(self) -> None: ...

    def not_applicable(self, check: str, device_class: str) -> str: ...


class UnknownLab(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def module(lab: str) -> ModuleType:
    """The package of ``lab``, as the student's process imports it; :class:`UnknownLab` for a name
    that is not one of :data:`LABS`."""
    if lab not in LABS:
        raise UnknownLab(f"unknown lab {lab!r}; the labs are {', '.join(sorted(LABS))}")
    return importlib.import_module(LABS[lab])


def lab(name: str) -> Lab:
    """How ``name`` is graded: its checks module (grader side only); :class:`UnknownLab` for an
    unknown name."""
    module(name)
    return importlib.import_module(f"{LABS[name]}.checks")


def checks(lab_name: str, device_class: str) -> tuple[str, ...]:
    """The checks ``lab_name`` grades on ``device_class`` (``"cpu"`` or ``"gpu"``), in column
    order."""
    return tuple(lab(lab_name).CHECKS[device_class])
