"""The stamp: one line naming the device, the versions and the date.

It is printed beside every measured number, so that a reader can tell a number
measured on an H100 with torch 2.11 from one measured on a laptop yesterday::

    [measured on NVIDIA H100 80GB HBM3 · torch 2.11.0 · triton 3.6.0 · 2026-11-22]
"""

from __future__ import annotations

import datetime
import platform

import torch

from brrr.device import DEVICE, ON_GPU, device_name


def triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "not installed"
    return triton.__version__


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
    }


def format_stamp(env: dict[str, str]) -> str:
    """The stamp of ``env`` (:func:`environment`), on one line of the book's 100 characters where the
    device's name allows: Triton's mode is said once, after its version, and a GPU's mode not at all."""
    triton = f"triton {env['triton']}" + (" interpreted" if env.get("device_type") == "cpu" else "")
    mode = "" if env["mode"] == "GPU" else f" ({env['mode']})"  # a GPU's name says it is one
    return f"[measured on {env['device']}{mode} · torch {env['torch']} · {triton} · {env['date']}]"


def stamp() -> str:
    """The stamp for this process, today."""
    return format_stamp(environment())


def stamped(text: str) -> str:
    """``text`` followed by the stamp on its own line."""
    return f"{text}\n  {stamp()}"
