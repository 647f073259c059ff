"""What a recorded GPU measured in each lab, one sentence a lab page prints beside the reader's own result.

``make gpu-check`` runs every lab solution on a GPU node and records its figures under ``lab-<name>`` in
``brrr/data/reference/``. A reader on a CPU sees the same lab run on a real GPU, labelled recorded, with
its date; a lab no GPU has run yet says so. Imports nothing a lab hides from the student (``ceilings``,
``timing``).
"""

from __future__ import annotations

from typing import Callable

from brrr import units
from brrr.column import fit
from brrr.beside import Recorded, recorded


def _roofline(v: dict) -> str:
    return (
        f"copy bandwidth {units.bandwidth(v['copy_bandwidth'])}, matmul peak {units.flops(v['matmul_peak'])}, "
        f"ridge point {v['ridge_point']:.0f} FLOPs/byte"
    )


def _fuse_it(v: dict) -> str:
    return (
        f"the fused chain moved its bytes at {units.percent(v['fused_bandwidth'] / v['copy_bandwidth'])} of the "
        f"copy bandwidth, {v['eager_s'] / v['fused_s']:.2f}x faster than eager's three kernels"
    )


def _one_pass(v: dict) -> str:
    kinds = v["kinds"]
    return "; ".join(
        f"{name.replace('_', ' ')} in one pass at {units.percent(k['bandwidth']['yours'] / v['copy_bandwidth'])} of "
        f"the copy bandwidth (torch's own {units.percent(k['bandwidth']['torch'] / v['copy_bandwidth'])}, "
        f"unfused {units.percent(k['bandwidth']['unfused'] / v['copy_bandwidth'])})"
        for name, k in kinds.items()
    )


DESCRIBE: dict[str, Callable[[dict], str]] = {
    "01-roofline": _roofline,
    "02-fuse-it": _fuse_it,
    "03-one-pass": _one_pass,
}


def sentence(lab: str, folder=None) -> str:
    """The recorded GPUs' result of ``lab``, or that no GPU has run it yet."""
    found: list[Recorded] = recorded(f"lab-{lab}", folder)
    describe = DESCRIBE.get(lab)
    if not found or describe is None:
        return fit(
            f"No recorded GPU has run this lab yet: `make gpu-check` on a GPU node records it "
            f"(lab-{lab} in brrr/data/reference/)."
        )
    return fit(
        "\n".join(
            f"Recorded on {gpu.device} ({gpu.env.get('date', '?')}): {describe(gpu.values)}.\n  {gpu.stamp}"
            for gpu in found
        )
    )
