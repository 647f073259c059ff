"""Where brrr keeps per-user measurements between runs.

``$BRRR_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/brrr``, else ``~/.cache/brrr``.
The book build and the tests point it (and ``TORCHINDUCTOR_CACHE_DIR``) inside the
project's ``.cache/`` folder, so a build never writes outside the checkout.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path


def cache_dir() -> Path:
    explicit = os.environ.get("BRRR_CACHE_DIR")
    if explicit:
        path = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        path = Path(base) / "brrr"
    path.mkdir(parents=True, exist_ok=True)
    return path


def slug(text: str) -> str:
    """A file-name-safe form of ``text``: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``, or None if it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: dict) -> None:
    """Write atomically, so a crash mid-write never leaves a half file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    partial.replace(path)
