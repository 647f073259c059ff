"""The labs: one module per lab, holding everything about it.

Each lab module (``brrr.labs.roofline`` for ``01-roofline``, ...) has:

- the **given material** the notebook imports: the ops to analyse, the chain to
  fuse, the reference, helpers for trying things out;
- ``LAB``, its name, and ``CHECKS``, the checks it grades on each device class,
  in gradebook column order (``ALL_CHECKS`` is their union);
- ``grade(check, student)``, run by the grader process
  (:mod:`brrr.grading.server`), which reaches the student's function only
  through ``student`` (:class:`brrr.grading.server.Student`);
- ``not_applicable(check, device_class)``, the note shown for a check that does
  not apply on this device;
- ``HIDDEN_MODULES``: ``brrr`` modules absent from the student's process under
  the gradebook (the roofline lab hides ``ceilings`` and ``timing``);
- ``WIRE_TYPES``: dataclasses the student's functions receive.

A lab module imports nothing at module level that its ``HIDDEN_MODULES`` name:
the student's process imports the module for its given material.

``python -m brrr.labs`` writes ``labs/`` from ``solutions/``
(:mod:`brrr.labs.generate`).
"""

from __future__ import annotations

import importlib
from types import ModuleType

LABS: dict[str, str] = {
    "01-roofline": "brrr.labs.roofline",
    "02-fuse-it": "brrr.labs.fuse_it",
    "03-one-pass": "brrr.labs.one_pass",
    "04-make-it-fast": "brrr.labs.make_it_fast",
    "05-tile-it": "brrr.labs.tile_it",
    "06-flash-attention": "brrr.labs.flash_attention",
}


class UnknownLab(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def module(lab: str) -> ModuleType:
    """The module of ``lab``; :class:`UnknownLab` for a name that is not one of :data:`LABS`."""
    if lab not in LABS:
        raise UnknownLab(f"unknown lab {lab!r}; the labs are {', '.join(sorted(LABS))}")
    return importlib.import_module(LABS[lab])


def checks(lab: str, device_class: str) -> tuple[str, ...]:
    """The checks ``lab`` grades on ``device_class`` (``"cpu"`` or ``"gpu"``), in column order."""
    return tuple(module(lab).CHECKS[device_class])
