"""Reference measurements from real GPUs, kept in ``brrr/data/reference/<gpu-name>.json``.

The files ship inside the package and are read through :mod:`importlib.resources`,
so a pip-installed brrr shows the same GPU figures as a checkout.

``make gpu-check`` sets ``BRRR_RECORD_REFERENCE`` to the reference folder, and
every notebook that calls :func:`record` then adds its figures, stamped, to that
GPU's file. Elsewhere :func:`record` does nothing, so a reader's run never edits
the committed data. Chapters load the committed files with :func:`load_all` to
show our GPU figures beside the reader's own.

File layout::

    {"ceilings": {...Ceilings.to_json()...},
     "figures": {"<section>": {"env": {...stamp...}, "values": {...}}}}
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from brrr import cache
from brrr.device import device_name
from brrr.stamp import environment

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

ENV_VAR = "BRRR_RECORD_REFERENCE"


def committed() -> Traversable:
    """The package's folder of committed reference files (in a checkout: brrr/data/reference)."""
    return resources.files("brrr") / "data" / "reference"


def recording_dir() -> Path | None:
    folder = os.environ.get(ENV_VAR)
    return Path(folder) if folder else None


def reference_path(folder: Path) -> Path:
    return folder / f"{cache.slug(device_name())}.json"


def record(section: str, values: dict) -> Path | None:
    """Add ``values`` under ``figures[section]`` of this GPU's reference file, when recording."""
    folder = recording_dir()
    if folder is None:
        return None
    path = reference_path(folder)
    data = cache.read_json(path) or {}
    data.setdefault("figures", {})[section] = {"env": environment(), "values": values}
    cache.write_json(path, data)
    return path


def record_ceilings(ceilings_json: dict) -> Path | None:
    folder = recording_dir()
    if folder is None:
        return None
    path = reference_path(folder)
    data = cache.read_json(path) or {}
    data["ceilings"] = ceilings_json
    cache.write_json(path, data)
    return path


def load_all(folder: Path | Traversable | None = None) -> dict[str, dict]:
    """Every reference file in ``folder`` (default: the committed ones), by file stem."""
    folder = committed() if folder is None else folder
    if not folder.is_dir():
        return {}
    files = sorted((entry for entry in folder.iterdir() if entry.name.endswith(".json")), key=lambda entry: entry.name)
    return {entry.name.removesuffix(".json"): cache.read_json(entry) or {} for entry in files}
