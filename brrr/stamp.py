"""The stamp: one line naming the device, the versions and the date.

It is printed beside every measured number, so that a reader can tell a number
measured on an H100 with torch 2.11 from one measured on a laptop yesterday::

    [measured on NVIDIA H100 80GB HBM3 · torch 2.11.0 · triton 3.6.0 · 2026-11-22]
"""

from __future__ import annotations

import datetime
import functools
import os
import platform
import subprocess
from pathlib import Path

import torch

from brrr.device import DEVICE, ON_GPU, device_name


def triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "not installed"
    return triton.__version__


COMMIT_VAR = (
    "BRRR_COMMIT"  # set where the code runs without its .git (a GPU node given a copy of the tree)
)


@functools.lru_cache(maxsize=1)
def commit() -> str:
    """The commit the code was run from: ``$BRRR_COMMIT``, else git's HEAD (with ``+dirty`` where
    the tracked files differ from it), else ``unknown`` (an installed package, a copy without
    .git)."""
    if os.environ.get(COMMIT_VAR):
        return os.environ[COMMIT_VAR]
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--"], cwd=root, capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 1 else "")


def environment() -> dict[str, str]:
    """The facts a stamp is made of, for writing next to measurements in JSON."""
    threads = torch.get_num_threads()
    mode = "GPU" if ON_GPU else f"CPU, {threads} thread{'s' * (threads != 1)}"
    return {
        "device": device_name(),
        "device_type": DEVICE.type,
        "mode": mode,
        "torch": torch.__version__,
        "triton": triton_version(),
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
    }


def format_stamp(env: dict[str, str]) -> str:
    """The stamp of ``env`` (:func:`environment`), on one line of the book's 100 characters where
    the device's name allows: Triton's mode is said once, after its version, and a GPU's mode not at
    all."""
    triton = f"triton {env['triton']}" + (" interpreted" if env.get("device_type") == "cpu" else "")
    mode = "" if env["mode"] == "GPU" else f" ({env['mode']})"  # a GPU's name says it is one
    return f"[measured on {env['device']}{mode} · torch {env['torch']} · {triton} · {env['date']}]"


def stamp() -> str:
    """The stamp for this process, today."""
    return format_stamp(environment())


def add_stamp(ax_or_figure, *stamps: str, bottom: float | None = None, color: str = "gray") -> None:
    """The stamps of what a figure shows, one a line, small, at its bottom left (empty ones left
    out). ``bottom`` makes room for them under the axes; without it the caller lays the figure
    out."""
    from matplotlib.figure import Figure  # only where a figure is drawn

    figure = ax_or_figure if isinstance(ax_or_figure, Figure) else ax_or_figure.figure
    stamps = [stamp for stamp in stamps if stamp]
    if not stamps:
        return
    figure.text(0.01, 0.005, "\n".join(stamps), fontsize=6, color=color, ha="left", va="bottom")
    if bottom is not None:
        figure.subplots_adjust(bottom=bottom)
