"""Notebook 20 (matmul throughput): its figures, its GPU target, its record and its sentences."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt

from brrr import counting, reference, targets, units
from brrr.benchmarks.compute import (
    ABOVE_PEAK,
    TORCH_DTYPES,
    MatmulPoint,
    matmul_check,
)
from brrr.beside import recorded
from brrr.ceilings import Ceilings
from brrr_book.claims import glue_text
from brrr.column import fit
from brrr.device import ON_GPU, bf16_note, device_name
from brrr.plots import add_stamp, loglog_sweep
from brrr.roofline import attainable_flops

Skinny = list[tuple[str, MatmulPoint]]


def plot_square(square: list[MatmulPoint], ceilings: Ceilings, sheet, stamp: str):
    """Achieved FLOP/s of the square sweep, one line per dtype, each with its measured peak (dashed)
    and, on a GPU with a known datasheet, the datasheet's (dotted)."""
    dtypes = list(dict.fromkeys(p.dtype for p in square))
    sizes = sorted({p.n for p in square})
    series = {name: [p.rate for p in square if p.dtype == name] for name in dtypes}
    ax = loglog_sweep(sizes, series, xlabel="n (n×n @ n×n)", ylabel="achieved FLOP/s", stamp=stamp)
    colors = {line.get_label(): line.get_color() for line in ax.get_lines()}
    for name in dtypes:
        ax.axhline(ceilings.matmul(name), color=colors[name], linestyle="--", linewidth=1)
        if sheet and name in sheet.peaks:
            ax.axhline(sheet.peaks[name], color=colors[name], linestyle=":", linewidth=1)
    ax.set_title(
        f"Square matmuls on {device_name()}\n(dashed: measured peak"
        + (", dotted: datasheet)" if sheet else ")"),
        fontsize=10,
    )
    plt.show()


def plot_recorded(square: list[MatmulPoint], stamp: str) -> None:
    """The square sweep beside each recorded GPU's, on the same axes; or a line saying none recorded
    it."""
    from brrr import plots

    gpus = recorded("compute.matmul")
    if not gpus:
        print("No recorded GPU holds this sweep yet (make gpu-check records it).")
    sizes = sorted({p.n for p in square})
    here = {
        name: [p.rate for p in square if p.dtype == name]
        for name in dict.fromkeys(p.dtype for p in square)
    }
    for gpu in gpus:
        there = gpu.values["square"]
        plots.beside_recorded(
            # a series cut short covers the sweep's first sizes
            {f"here: {name}": (sizes[: len(rates)], rates) for name, rates in here.items()},
            {
                f"{gpu.device}: {name}": (
                    [p["n"] for p in there if p["dtype"] == name],
                    [p["flop_per_s"] for p in there if p["dtype"] == name],
                )
                for name in dict.fromkeys(p["dtype"] for p in there)
            },
            xlabel="n (n×n @ n×n)",
            ylabel="achieved FLOP/s",
            title="Square matmuls: this machine and a recorded GPU",
            stamps=[stamp, gpu.stamp],
        )
        plt.show()


def plot_skinny(skinny: Skinny, ceilings: Ceilings, dtype: str, stamp: str) -> None:
    """Achieved FLOP/s of the skinny shapes against their small side, under the measured peak, with
    the roofline's prediction from the counted FLOPs and bytes (dotted)."""
    peak = ceilings.matmul(dtype)
    smalls = [p.m for kind, p in skinny if kind == "small m"]
    large = skinny[-1][1].n
    ax = loglog_sweep(
        smalls,
        {kind: [p.rate for k, p in skinny if k == kind] for kind in ("small m", "small k")},
        xlabel="the small dimension s",
        ylabel="achieved FLOP/s",
        stamp=stamp,
    )
    ax.axhline(peak, color="gray", linestyle="--", linewidth=1, label="measured peak")
    roof = ceilings.roof("matmul", dtype)
    for shape in (lambda s: (s, large, large), lambda s: (large, large, s)):
        predicted = [
            attainable_flops(counting.matmul(*shape(s), TORCH_DTYPES[dtype]).intensity, roof)
            for s in smalls
        ]
        ax.plot(smalls, predicted, linestyle=":", color="gray")
    ax.set_title(
        f"Skinny {dtype} matmuls, other dimensions {large}\n(dotted: roofline prediction from "
        "counted bytes)",
        fontsize=10,
    )
    plt.show()


def plot_alignment(unaligned: list[MatmulPoint], peak: float, dtype: str, stamp: str) -> None:
    """One bar per size, multiples of 8 in green, under the measured peak (dashed)."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(
        [p.n for p in unaligned],
        [p.rate for p in unaligned],
        color=["C2" if p.n % 8 == 0 else "C0" for p in unaligned],
    )
    ax.axhline(peak, color="gray", linestyle="--", linewidth=1)
    ax.set_xlabel("n (n×n @ n×n); green: multiples of 8")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"{dtype} matmuls one size apart on {device_name()}", fontsize=10)
    add_stamp(ax, stamp, bottom=0.2)
    plt.show()


def gap_lines() -> list[str]:
    """The matmul/non-matmul gap on each recorded GPU, one line each."""
    return [
        f"on the recorded {gpu.device} {gpu.values['matmul_over_vector_peak']:.1f}x"
        for gpu in recorded("compute.matmul")
    ]


@dataclass
class Page:
    """What notebook 20 measured."""

    ceilings: Ceilings
    square: list[MatmulPoint]
    skinny: Skinny
    skinny_dtype: str
    unaligned: list[MatmulPoint]
    matmul_peak: float  # the best dtype's measured matmul peak
    best_dtype: str
    eager_flops: float  # eager x * c from DRAM, FLOP/s


def finish(page: Page) -> None:
    """The chapter's GPU target (the largest bf16 matmul at 80% of its measured peak), the record,
    and the sentences of the page's prose."""
    _target(page)
    _record(page)
    _glue(page)


def _target(page: Page) -> None:
    ceilings, dtype = page.ceilings, page.skinny_dtype
    largest = max((p for p in page.square if p.dtype == dtype), key=lambda p: p.n)
    if ON_GPU:
        check = matmul_check(page.square, ceilings, dtype)
        if dtype != "bfloat16":
            print(bf16_note())
        print(check)
        targets.check(check.passed, str(check))
    else:
        print(
            fit(
                f"largest {dtype} matmul: "
                + units.fraction_of(
                    largest.rate,
                    ceilings.matmul(dtype),
                    "FLOP/s",
                    f"measured {dtype} matmul peak",
                    above=above_peak_at(ceilings, dtype, largest.n),
                )
                + " (the 80% target applies to bf16 on a GPU)"
            )
        )


def _record(page: Page) -> None:
    ceilings, square = page.ceilings, page.square
    dtypes = list(dict.fromkeys(p.dtype for p in square))
    reference.record(
        "compute.matmul",
        {
            "square": [{"dtype": p.dtype, "n": p.n, "flop_per_s": p.rate} for p in square],
            "largest_fraction_of_measured_peak": {
                name: max((p for p in square if p.dtype == name), key=lambda p: p.n).rate
                / ceilings.matmul(name)
                for name in dtypes
            },
            "unaligned": [
                {"n": p.n, "dtype": p.dtype, "flop_per_s": p.rate} for p in page.unaligned
            ],
            "skinny": [
                {"kind": kind, "m": p.m, "n": p.n, "k": p.k, "flop_per_s": p.rate}
                for kind, p in page.skinny
            ],
            "matmul_over_vector_peak": page.matmul_peak / ceilings.vector_peak,
            "eager_elementwise_flop_per_s": page.eager_flops,
        },
    )


def _glue(page: Page) -> None:
    ceilings = page.ceilings
    shape_lines = sweep_shape(page.square, ceilings)
    over = [p for p in page.square if p.rate > ceilings.matmul(p.dtype)]
    most = max(over, key=lambda p: p.rate / ceilings.matmul(p.dtype), default=None)
    glue_text(
        "square-shape",
        "Here "
        + "; ".join(shape_lines)
        + "."
        + (
            " A reading above 100% is not a machine faster than its roof: "
            + above_peak_at(ceilings, most.dtype, most.n)
            + "."
            if most
            else ""
        ),
    )

    peak = ceilings.matmul(page.skinny_dtype)
    ends = []
    for kind in ("small m", "small k"):
        points = [p for k, p in page.skinny if k == kind]
        small_side = min(points, key=lambda p: min(p.m, p.k))
        large_side = max(points, key=lambda p: min(p.m, p.k))
        ends.append(
            f"{kind} ran at {units.percent(small_side.rate / peak)} of the peak with "
            f"s={min(small_side.m, small_side.k)} and {units.percent(large_side.rate / peak)} with "
            f"s={min(large_side.m, large_side.k)}"
        )
    above = any(p.rate > peak for _, p in page.skinny)
    glue_text(
        "skinny-ends",
        "Here " + "; ".join(ends) + "." + (f" Above 100%: {ABOVE_PEAK}." if above else ""),
    )

    best = max(page.unaligned, key=lambda p: p.rate)
    eights = [p.rate / best.rate for p in page.unaligned if p.n % 8 == 0]
    others = [p.rate / best.rate for p in page.unaligned if p.n % 8]
    glue_text(
        "alignment",
        (
            f"Here the fastest size was n={best.n}; the multiples of 8 ran at "
            f"{units.percent(min(eights))} to {units.percent(max(eights))} of it, the other sizes "
            f"at {units.percent(min(others))} to {units.percent(max(others))}."
        ),
    )

    gap = page.matmul_peak / ceilings.vector_peak
    gaps = gap_lines()
    glue_text(
        "gap",
        f"Here the gap is {gap:.1f}x ({page.best_dtype} matmuls against the fp32 non-matmul peak)"
        + (f"; {'; '.join(gaps)}" if gaps else "")
        + ".",
    )


def above_peak_at(ceilings: Ceilings, dtype: str, n: int) -> str:
    """Why an n³ ``dtype`` matmul can read above the cached peak, naming the size the peak was timed
    at."""
    timed = ceilings.matmul_n.get(dtype)
    if timed == n:
        return (
            f"brrr.ceilings timed this same size, {n}, at a busier moment on a shared machine: the "
            "roof "
            "is a measurement, with its noise (python -m brrr.ceilings --refresh measures it again)"
        )
    return (
        f"brrr.ceilings times one size, {timed}, and this one, {n}, suits the library better, or "
        "ran at "
        "a quieter moment on a shared machine: the roof is a measurement, with its noise"
    )


def sweep_shape(points: list[MatmulPoint], ceilings: Ceilings) -> list[str]:
    """Per dtype, one sentence on how the square sweep's rate moved with n, as fractions of its
    peak: whether it rose to its best and stayed, or peaked early and fell (the prose must not
    assume a shape)."""
    lines = []
    for dtype in dict.fromkeys(point.dtype for point in points):
        mine = [point for point in points if point.dtype == dtype]
        peak = ceilings.matmul(dtype)
        best = max(mine, key=lambda point: point.rate)
        first, last = mine[0], mine[-1]

        def at(point: MatmulPoint) -> str:
            return f"n={point.n} ({units.percent(point.rate / peak, (1.0,))} of the peak)"

        if best is first:
            text = f"fastest at the smallest size, {at(first)}"
        else:
            text = f"rose from {at(first)} to its best at {at(best)}"
        if best is not last:
            text += (
                f", then fell to {at(last)}"
                if last.rate < 0.9 * best.rate
                else f", and held within 10% of it up to {at(last)}"
            )
        lines.append(f"{dtype}: {text}")
    return lines
