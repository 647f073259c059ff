"""What an executed notebook printed and drew, saved small: a CPU build can show what the GPU
printed.

Per notebook, a folder ``<stem>/`` with ``outputs.json`` and one PNG per figure::

    {"notebook": "notebooks/23-tiling.ipynb", "format": 1,
     "cells": [{"cell": 4, "passed": true,
                "outputs": [{"type": "stream", "name": "stdout", "text": "..."},
                            {"type": "text", "text": "<the text/plain of a result or display>"},
                            {"type": "image", "file": "cell-04-1.png", "bytes": 41230},
                            {"type": "error", "text": "TargetMissed: ..."}]}]}

Only text and PNGs are kept, each text cut at :data:`MAX_TEXT_CHARS` and a PNG over
:data:`MAX_IMAGE_BYTES` left out with a note: never the whole notebook, its HTML or its widgets'
state. ``.ci/notebook_record.py`` (a pytest plugin, under nbval) calls :func:`saved_cell` after each
cell.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

FORMAT = 1
MAX_TEXT_CHARS = 20_000
MAX_IMAGE_BYTES = 400_000


def _text(value) -> str:
    text = "".join(value) if isinstance(value, list) else str(value)
    return (
        text
        if len(text) <= MAX_TEXT_CHARS
        else text[:MAX_TEXT_CHARS] + f"\n[... {len(text):,} characters, cut]"
    )


def saved_cell(folder: Path, cell: int, outputs: list[dict], passed: bool, error: str = "") -> dict:
    """One cell's outputs (nbformat's dicts) in the saved form, its PNGs written into ``folder``."""
    kept = []
    for output in outputs or []:
        kind = output.get("output_type")
        if kind == "stream":
            kept.append(
                {
                    "type": "stream",
                    "name": output.get("name", "stdout"),
                    "text": _text(output.get("text", "")),
                }
            )
        elif kind == "error":
            kept.append(
                {
                    "type": "error",
                    "text": _text(f"{output.get('ename', '')}: {output.get('evalue', '')}"),
                }
            )
        elif kind in ("display_data", "execute_result"):
            data = output.get("data", {})
            if "image/png" in data:
                kept.append(
                    _image(
                        folder,
                        cell,
                        sum(1 for o in kept if o["type"] == "image") + 1,
                        data["image/png"],
                    )
                )
            elif "text/plain" in data:
                kept.append({"type": "text", "text": _text(data["text/plain"])})
    if error and not any(output["type"] == "error" for output in kept):
        kept.append({"type": "error", "text": _text(error)})
    return {"cell": cell, "passed": passed, "outputs": kept}


def _image(folder: Path, cell: int, number: int, encoded) -> dict:
    png = base64.b64decode("".join(encoded) if isinstance(encoded, list) else encoded)
    name = f"cell-{cell:02d}-{number}.png"
    if len(png) > MAX_IMAGE_BYTES:
        return {
            "type": "image",
            "file": None,
            "bytes": len(png),
            "note": f"left out: over {MAX_IMAGE_BYTES:,} bytes",
        }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(png)
    return {"type": "image", "file": name, "bytes": len(png)}


def folder_for(root: Path, notebook: str) -> Path:
    return root / Path(notebook).stem


def write(root: Path, notebook: str, cells: list[dict]) -> Path:
    """Write a notebook's saved cells to ``root/<stem>/outputs.json``; return its path."""
    path = folder_for(root, notebook) / "outputs.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"notebook": notebook, "format": FORMAT, "cells": cells}, indent=1) + "\n"
    )
    return path
