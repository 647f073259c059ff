"""Reference measurements from real GPUs, kept in ``data/reference/<gpu-name>.json``.

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
from pathlib import Path

from brrr import cache
from brrr.device import device_name
from brrr.stamp import environment

ENV_VAR = "BRRR_RECORD_REFERENCE"
COMMITTED = Path(__file__).resolve().parent.parent / "data" / "reference"


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


def load_all(folder: Path = COMMITTED) -> dict[str, dict]:
    """Every committed reference file, by file stem."""
    return {path.stem: cache.read_json(path) or {} for path in sorted(folder.glob("*.json"))}
