"""Tile size against arithmetic intensity: the compute chapter's tiling section (notebook 23).

A tiled matmul (:mod:`brrr.kernels.matmul`) does ``2·M·N·K`` FLOPs whatever its
tiles; the tiles decide how many bytes those FLOPs cost
(:func:`brrr.counting.tiled_matmul`). Here:

- :func:`count_tilings` (CPU): the bytes the kernel moves, counted in Triton's
  interpreter by :mod:`brrr.traffic`, for several square tiles, beside the rule;
- :func:`time_tilings` (GPU): the same kernel timed at a large shape for each
  tile, with its output checked afterwards;
- :func:`from_l2_at_least`: where a timed kernel beats the memory roof at its
  counted intensity, the share of its bytes that cannot have come from DRAM
  (the L2 cache served them), so that no point sits above a roof unexplained;
- :func:`plot_tilings`: the tilings on this machine's measured roofline.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from brrr import counting, units
from brrr.device import DEVICE, ON_GPU
from brrr.kernels.matmul import matmul_reference, tile_for, tiled_matmul
from brrr.roofline import Roof, attainable_flops

COUNT_SIZE = 256  # n of the n×n @ n×n float32 matmul counted in the interpreter
COUNTED_TILES = (
    32,
    64,
    128,
    256,
)  # 16 takes 5 s in the interpreter at 256³: drawn by the rule only
RULE_TILES = (8, 16, 32, 64, 128, 256)
TIMED_SIZE = 4096  # GPU: n of the timed n×n @ n×n matmul
TIMED_TILES = (16, 32, 64, 128)


@dataclass(frozen=True)
class Tiling:
    """One square tiling of an n×n @ n×n matmul, with the bytes it moves and, on a GPU, its time."""

    block: int
    n: int
    dtype: str
    rule_bytes: int  # by brrr.counting.tiled_matmul
    counted_bytes: int | None = None  # in the interpreter (CPU)
    seconds: float | None = None  # median per call (GPU)

    @property
    def flops(self) -> int:
        return 2 * self.n**3

    @property
    def bytes(self) -> int:
        """The counted bytes where counted, else the rule's."""
        return self.counted_bytes if self.counted_bytes is not None else self.rule_bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def rate(self) -> float | None:
        return None if self.seconds is None else self.flops / self.seconds


def rule_tiling(block: int, n: int, dtype: torch.dtype) -> Tiling:
    count = counting.tiled_matmul(n, n, n, block, block, dtype)
    return Tiling(block, n, str(dtype).removeprefix("torch."), int(count.bytes))


def count_tilings(n: int = COUNT_SIZE, tiles=COUNTED_TILES) -> list[Tiling]:
    """CPU: the bytes :func:`~brrr.kernels.matmul.tiled_matmul` moves at n³ float32, counted per
    tile size.

    Each output is checked against the reference too: a count of a wrong kernel is no count.
    """
    from brrr import traffic

    if ON_GPU:
        raise RuntimeError(
            "traffic is counted in Triton's interpreter: run on a CPU, or with BRRR_DEVICE=cpu"
        )
    a, b = torch.randn(n, n), torch.randn(n, n)
    expected = matmul_reference(a, b)
    result = []
    for block in tiles:
        out = torch.full((n, n), float("nan"))
        with traffic.count({"a": a, "b": b, "out": out}) as seen:
            tiled_matmul(a, b, out, tile_for(a.dtype, block))
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        rule = rule_tiling(block, n, a.dtype)
        result.append(
            Tiling(block, n, rule.dtype, rule.rule_bytes, seen.loaded_bytes + seen.stored_bytes)
        )
    return result


def time_tilings(
    n: int = TIMED_SIZE, dtype: torch.dtype = torch.bfloat16, tiles=TIMED_TILES
) -> list[Tiling]:
    """GPU: the median time of the tiled kernel at n³ in ``dtype`` for each square tile, output
    checked."""
    from brrr.timing import bench

    if not ON_GPU:
        raise RuntimeError("the interpreter's times say nothing about a GPU kernel: time on a GPU")
    a = torch.randn(n, n, device=DEVICE, dtype=dtype) * n**-0.25
    b = torch.randn(n, n, device=DEVICE, dtype=dtype) * n**-0.25
    expected = matmul_reference(a, b).float()
    result = []
    for block in tiles:
        out = torch.full((n, n), float("nan"), device=DEVICE, dtype=dtype)
        tile = tile_for(dtype, block)
        timing = bench(lambda: tiled_matmul(a, b, out, tile), budget_s=0.2)
        torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=2e-2)
        rule = rule_tiling(block, n, dtype)
        result.append(Tiling(block, n, rule.dtype, rule.rule_bytes, seconds=timing.median_s))
    return result


def from_l2_at_least(tiling: Tiling, bandwidth: float) -> float:
    """The share of ``tiling``'s counted bytes that cannot have come from DRAM, given its time.

    In ``seconds`` DRAM delivers at most ``seconds · bandwidth`` bytes; the rest of
    what the kernel loaded must have hit in the L2 cache. 0 when DRAM alone could
    have carried it all.
    """
    if tiling.seconds is None:
        raise ValueError("only a timed tiling has a time to compare with")
    return max(0.0, 1 - tiling.seconds * bandwidth / tiling.bytes)


def bound(tiling: Tiling, roof: Roof) -> float:
    """The roofline's attainable FLOP/s at the tiling's intensity."""
    return attainable_flops(tiling.intensity, roof)


def plot_tilings(
    roof: Roof,
    tilings: list[Tiling],
    rule_line: list[Tiling],
    *,
    measured: list[tuple[str, float, float]] = (),
    stamp: str = "",
):
    """The roofline of ``roof``, each tiling at its intensity (on the roof: what it allows; or at
    its measured rate where timed), the rule's line over more tile sizes, and other ``measured``
    points ``(label, intensity, FLOP/s)``."""
    from brrr import plots

    points = [(f"{t.block}×{t.block}", t.intensity, t.rate) for t in tilings]
    intensities = [t.intensity for t in rule_line] + [p[1] for p in measured]
    ax = plots.roofline(
        [roof],
        points + list(measured),
        stamp=stamp,
        intensity_range=(min(intensities) / 4, max(intensities + [roof.ridge_point]) * 4),
        title=f"Square tiles of a {tilings[0].n}³ {tilings[0].dtype} matmul on this roofline",
    )
    ax.plot(
        [t.intensity for t in rule_line],
        [bound(t, roof) for t in rule_line],
        "x",
        color="#999999",
        label="by the rule: " + ", ".join(f"{t.block}" for t in rule_line),
    )
    shown = {t.block for t in tilings}
    for t in rule_line:
        if t.block not in shown:
            ax.annotate(
                f"{t.block}×{t.block}",
                (t.intensity, bound(t, roof)),
                fontsize=8,
                color="#666666",
                textcoords="offset points",
                xytext=(4, -10),
            )
    ax.legend(fontsize=8, loc="lower right")
    return ax


def roof_at_least(roof: Roof, rate: float) -> tuple[Roof, str]:
    """``roof`` with its compute peak raised to ``rate`` where a matmul just ran faster, and why
    (else "").

    Load only slows a measurement, so a roof is the best rate this machine was seen
    to reach. The cached peak was timed at another size, or while something else
    ran; a faster reading now moves the roof up rather than sitting above it.
    """
    if rate <= roof.peak_flops:
        return roof, ""
    why = (
        f"the roof is raised from the cached {units.flops(roof.peak_flops)} to "
        f"{units.flops(rate)}, torch.mm's rate just now: a roof is the best this machine was seen "
        f"to do, and the cached peak was timed at another size or under other load"
    )
    return replace(roof, peak_flops=rate), why
