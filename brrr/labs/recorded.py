"""What a recorded GPU measured in each lab, one sentence a lab page prints beside the reader's own
result.

``make gpu-check`` runs every lab solution on a GPU node and records its figures under
``lab-<name>`` in ``brrr/data/reference/``. A reader on a CPU sees the same lab run on a real GPU,
labelled recorded, with its date; a lab no GPU has run yet says so. Imports nothing a lab hides from
the student (``ceilings``, ``timing``).
"""

from __future__ import annotations

from typing import Callable

from brrr import reference, units
from brrr.column import fit
from brrr.beside import Recorded, recorded


def _roofline(v: dict) -> str:
    return (
        f"copy bandwidth {units.bandwidth(v['copy_bandwidth'])}, matmul peak "
        f"{units.flops(v['matmul_peak'])}, ridge point {v['ridge_point']:.0f} FLOPs/byte"
    )


def _fuse_it(v: dict) -> str:
    return (
        f"the fused chain moved its bytes at "
        f"{units.percent(v['fused_bandwidth'] / v['copy_bandwidth'])} of the copy bandwidth, "
        f"{v['eager_s'] / v['fused_s']:.2f}x faster than eager's five kernels"
    )


def _one_pass(v: dict) -> str:
    kinds = v["kinds"]
    return "; ".join(
        f"{name.replace('_', ' ')} in one pass at "
        f"{units.percent(k['bandwidth']['yours'] / v['copy_bandwidth'])} of the copy bandwidth "
        f"(torch's own {units.percent(k['bandwidth']['torch'] / v['copy_bandwidth'])}, unfused "
        f"{units.percent(k['bandwidth']['unfused'] / v['copy_bandwidth'])})"
        for name, k in kinds.items()
    )


def _tile_it(v: dict) -> str:
    return ", ".join(
        f"{n:,}³ {v.get('dtype', '')} at {units.percent(yours / theirs)} of torch.mm"
        for n, yours, theirs in zip(v["sizes"], v["yours"], v["torch"])
        if n >= 4096
    )


def _flash_attention(v: dict) -> str:
    n, yours, sdpa = v["sizes"][-1], v["yours"][-1], v["sdpa"][-1]
    return (
        f"at N = {n:,} ({v.get('shape', '')}) the solution took {units.seconds(yours)}, SDPA "
        f"{units.seconds(sdpa)}"
    )


DESCRIBE: dict[str, Callable[[dict], str]] = {
    "01-roofline": _roofline,
    "02-fuse-it": _fuse_it,
    "03-one-pass": _one_pass,
    "05-tile-it": _tile_it,
    "06-flash-attention": _flash_attention,
}


def graded(lab: str, folder=None) -> list[str]:
    """Per recorded GPU, the grader's verdicts on the lab's solution there (schema 2 records), in
    one line: ``"NVIDIA H100: correct passed, peak_8192 failed (0.85; at_least 0.9)"``."""
    lines = []
    for name, data in reference.load_all(folder).items():
        checks = [
            c
            for c in data.get("checks", {}).values()
            if c.get("kind") == "grader" and c["name"].startswith(f"{lab}/")
        ]
        if not checks:
            continue
        said = []
        for check in checks:
            figure = ""
            if check.get("value") is not None and check.get("bound"):
                rule, bound = next(iter(check["bound"].items()))
                figure = f" ({check['value']:.3g}; {rule} {bound:g})"
            said.append(f"{check['name'].split('/', 1)[1]} {check['verdict']}{figure}")
        device = data.get("stamp", {}).get("device", name)
        commit = data.get("stamp", {}).get("commit", "?")[:10]
        lines.append(f"The grader there, on {device} (commit {commit}): {', '.join(said)}.")
    return lines


def sentence(lab: str, folder=None) -> str:
    """The recorded GPUs' result of ``lab``, or that no GPU has run it yet."""
    found: list[Recorded] = recorded(f"lab-{lab}", folder)
    describe = DESCRIBE.get(lab)
    verdicts = graded(lab, folder)
    if (not found or describe is None) and not verdicts:
        return fit(
            f"No recorded GPU has run this lab yet: `make gpu-check` on a GPU node records it "
            f"(lab-{lab} in brrr/data/reference/)."
        )
    lines = [
        f"Recorded on {gpu.device} ({gpu.env.get('date', '?')}): {describe(gpu.values)}.\n  "
        f"{gpu.stamp}"
        for gpu in (found if describe is not None else [])
    ]
    return fit("\n".join(lines + verdicts))
