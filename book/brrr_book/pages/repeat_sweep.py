"""Notebook 11 (the repeat sweep): its table, its figure, its checks, its record and its
sentences."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import matplotlib.pyplot as plt
import torch

from brrr import column, reference, roofline, targets, units
from brrr.benchmarks import fusion, repeat_sweep
from brrr.benchmarks.repeat_sweep import MULTIPLY_PEAK_PLACE, SweepPoint
from brrr_book.claims import glue_text, judge_knee, publish
from brrr.plots import loglog_sweep

COPY_BEYOND = (
    "the copy bandwidth times dst.copy_(src), other code, which streams slower here than this "
    "kernel: a low memory roof, not a fast kernel"
)


LOW_ROOF = "the roof is below what the same code reaches here: a low roof, not a fast kernel"


def sweep_table(points: list[SweepPoint], multiply: float, copy: float) -> str:
    """One line per repeat count: time, spread, achieved FLOP/s against the multiply roof and
    achieved bandwidth against copy. A rate above its roof is marked (``~`` within the run's noise,
    ``*`` or ``†`` beyond it) and each mark is explained once under the table."""
    lines = [
        f"{'repeats':>7}  {'time':>9}  {'spread':>6}  {'FLOP/s, % of the multiply roof':<30}  "
        "bandwidth, % of copy",
        f"{'':>7}  {'':>9}  {'':>6}  {'(' + units.flops(multiply) + ')':<30}  "
        f"({units.bandwidth(copy)})",
    ]
    reasons: dict[str, str] = {}
    for point in points:
        spread, marks = point.timing.spread, ""
        for value, roof, name, mark, beyond in (
            (point.achieved_flops, multiply, "multiply roof", "*", LOW_ROOF),
            (point.achieved_bandwidth, copy, "copy roof", "†", COPY_BEYOND),
        ):
            why = roofline.above_roof(value, roof, spread)
            if "within this run's spread" in why:
                mark, reason = (
                    "~",
                    "above its roof, within the run's spread and the roof's own noise",
                )
            elif why:
                reason = f"above the {name}, beyond the run's spread: {beyond}"
            else:
                continue
            marks += mark
            reasons.setdefault(mark, reason)
        flops = (
            f"{units.flops(point.achieved_flops)} = "
            f"{units.percent(point.achieved_flops / multiply)}"
        )
        bandwidth = (
            f"{units.bandwidth(point.achieved_bandwidth)} = "
            f"{units.percent(point.achieved_bandwidth / copy)}"
        )
        lines.append(
            f"{point.repeats:>7}  {units.seconds(point.seconds):>9}  {units.percent(spread):>6}  "
            f"{flops:<30}  {bandwidth} {marks}".rstrip()
        )
    return column.fit("\n".join(lines + [f"{mark} {reason}." for mark, reason in reasons.items()]))


def plot_sweep(
    points: list[SweepPoint],
    multiply: float,
    copy: float,
    marks: dict[str, float],
    n: int,
    stamp: str,
) -> None:
    """Runtime, achieved FLOP/s and achieved bandwidth against the repeats, each with the knees
    marked."""
    repeats = [point.repeats for point in points]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    loglog_sweep(
        repeats,
        {"runtime": [p.seconds * 1e3 for p in points]},
        xlabel="repeats",
        ylabel="ms per call",
        title="runtime",
        ax=axes[0],
    )
    loglog_sweep(
        repeats,
        {"achieved": [p.achieved_flops for p in points]},
        xlabel="repeats",
        ylabel="FLOP/s",
        title="achieved FLOP/s",
        ax=axes[1],
        roofs={f"multiply roof ({repeat_sweep.MULTIPLY_PEAK_PLACE})": multiply},
    )
    loglog_sweep(
        repeats,
        {"achieved": [p.achieved_bandwidth for p in points]},
        xlabel="repeats",
        ylabel="B/s",
        title="achieved bandwidth",
        ax=axes[2],
        stamp=stamp,
        roofs={"copy bandwidth": copy},
    )
    for ax in axes:
        vertical_marks(ax, marks, legend=ax is axes[0])
    fig.suptitle(f"x = x * 2, repeated, on {n:,} fp32 elements")
    plt.show()


@dataclass
class Page:
    """What notebook 11 measured."""

    n: int
    points: list[SweepPoint]
    multiply: float  # the multiply roof, FLOP/s
    rates: dict[int, float]  # each chain length's multiply rate
    copy: float
    vector_peak: float
    knee_multiply: float
    knee_vector: float
    knee_measured: float
    knees: str  # the sentence on the knees here and on the recorded GPUs


def finish(page: Page) -> None:
    """The knee's verdict (shown beside the recorded GPU); the shape the chapter claims, enforced (a
    roof is a roof; flat while memory-bound; rising past the knee), each miss timed again; the
    record; glue."""
    publish(judge_knee(page.knee_measured, page.knee_multiply))
    points, n = page.points, page.n
    repeats = [point.repeats for point in points]

    with targets.said_only_if_missed():

        def over_roof_again():
            fastest = max(points, key=lambda point: point.achieved_flops).repeats
            return repeat_sweep.over_roof_in_turns(n, fastest, threads=fusion.THREADS)

        targets.require_at_most(
            "the sweep's best FLOP/s over the multiply roof",
            repeat_sweep.OVER_ROOF_TOLERANCE,
            repeat_sweep.flops_over_roof(points, page.multiply),
            over_roof_again,
        )

        def low_spread_again():  # 1, 2 and 4 repeats, far below any ridge point
            return repeat_sweep.low_spread(
                repeat_sweep.sweep(n, torch.float32, repeats[:3], threads=fusion.THREADS)
            )

        targets.require_at_most(
            "1 to 4 repeats, memory-bound: slowest over fastest",
            repeat_sweep.FLAT_SPREAD,
            repeat_sweep.low_spread(points),
            low_spread_again,
        )
        targets.check(*repeat_sweep.rise_past_knee(points, page.knee_multiply))
    reference.record(
        "repeat-sweep",
        {
            "n": n,
            "copy_bandwidth": page.copy,
            "multiply_rate": page.multiply,
            "vector_peak": page.vector_peak,
            "knee_predicted_multiply": page.knee_multiply,
            "knee_predicted_vector": page.knee_vector,
            "knee_measured": page.knee_measured,
            "seconds": {p.repeats: p.seconds for p in points},
        },
    )
    glue_text("flops-shape", describe_flops(points, page.multiply, page.rates))
    glue_text("knees", page.knees)


def describe_flops(points: Sequence[SweepPoint], roof_flops: float, rates: dict[int, float]) -> str:
    """Where the sweep's FLOP/s peaked against the roof, what the longest chain reached, and why,
    from the run.

    ``rates`` are the rates of :func:`multiply_rates` (measured where memory cannot limit them) the
    roof is the best of.
    """
    best = max(points, key=lambda point: point.achieved_flops)
    last = max(points, key=lambda point: point.repeats)
    text = (
        f"Achieved FLOP/s peaked at {best.repeats} repeats, "
        f"{units.percent(best.achieved_flops / roof_flops)} of the multiply roof; at "
        f"{last.repeats} repeats it was {units.percent(last.achieved_flops / roof_flops)}."
    )
    if last is best or last.achieved_flops >= 0.75 * best.achieved_flops:
        return text + " Past the knee FLOP/s stays under the roof, as the roofline says."
    swept = {point.repeats: point for point in points}
    both = [repeats for repeats in rates if repeats in swept and repeats > best.repeats]
    if not both:
        return text + " Past the knee the rate falls again."
    common = max(both)
    return (
        text
        + f" Past the knee the rate falls again, and not for want of memory: at {common} repeats "
        f"the sweep ran at {units.percent(swept[common].achieved_flops / roof_flops)} of the roof "
        f"and the same chain {MULTIPLY_PEAK_PLACE} at {units.percent(rates[common] / roof_flops)}. "
        "Each element's multiplies depend on one another, and a long chain leaves the hardware "
        "waiting on each one where a short one lets it work on several elements at once."
    )


@dataclass(frozen=True)
class RecordedSweep:
    """A recorded GPU's sweep (``repeat-sweep`` in brrr/data/reference/), for the page's figure
    beside this machine's."""

    device: str
    repeats: list[int]
    seconds: list[float]
    knee_measured: float
    knee_predicted: float
    stamp: str

    @property
    def relative(self) -> list[float]:
        return [s / self.seconds[0] for s in self.seconds]


def recorded_sweeps(folder=None) -> list[RecordedSweep]:
    """Every recorded GPU's sweep, in repeat order."""
    from brrr.beside import recorded

    found = []
    for gpu in recorded("repeat-sweep", folder):
        pairs = sorted((int(r), s) for r, s in gpu.values["seconds"].items())
        found.append(
            RecordedSweep(
                gpu.device,
                [r for r, _ in pairs],
                [s for _, s in pairs],
                gpu.values["knee_measured"],
                gpu.values["knee_predicted_multiply"],
                gpu.stamp,
            )
        )
    return found


def knees_sentence(knee_here: float, knee_predicted: float, gpus: Sequence[RecordedSweep]) -> str:
    """Where the runtime stopped being flat: here, on each recorded GPU, and in the essay
    (quoted)."""
    from brrr import essay

    said = [
        f"Here the runtime stayed flat up to about {knee_here:.0f} multiplications per element "
        f"(the roofs predicted {knee_predicted:.0f})"
    ]
    said += [
        f"on the recorded {gpu.device} up to about {gpu.knee_measured:.0f} (predicted "
        f"{gpu.knee_predicted:.0f})"
        for gpu in gpus
    ] or ["no recorded GPU holds this sweep"]
    said.append(f"on the essay's A100 until {essay.REPEAT_SWEEP['flat_until']} (quoted)")
    return "; ".join(said) + "."


def plot_beside_recorded(
    repeats: Sequence[int],
    seconds: Sequence[float],
    knee_here: float,
    stamp: str,
    gpus: Sequence[RecordedSweep],
    ax=None,
):
    """Runtime relative to one repeat, this machine's beside each recorded GPU's (:func:`brrr.plots.
    beside_recorded`), with each machine's knee in its colour and the essay's A100 knee."""
    from brrr import essay, plots

    ax = plots.beside_recorded(
        {f"this machine (knee {knee_here:.0f})": (repeats, [s / seconds[0] for s in seconds])},
        {
            f"recorded: {gpu.device} (knee {gpu.knee_measured:.0f})": (gpu.repeats, gpu.relative)
            for gpu in gpus
        },
        xlabel="repeats (multiplications per element)",
        ylabel="runtime / runtime at 1 repeat",
        title="Flat while memory-bound, then rising: each machine at its own knee",
        stamps=[stamp] + [gpu.stamp for gpu in gpus],
        ax=ax,
    )
    for line, knee in zip(ax.get_lines(), [knee_here] + [gpu.knee_measured for gpu in gpus]):
        ax.axvline(knee, linestyle="--", linewidth=1, color=line.get_color())
    flat_until = essay.REPEAT_SWEEP["flat_until"]
    ax.axvline(
        flat_until,
        linestyle=":",
        linewidth=1,
        color="gray",
        label=f"essay's A100: flat until {flat_until} (quoted)",
    )
    ax.legend(fontsize=7)
    return ax


def vertical_marks(ax, marks: dict[str, float], *, legend: bool = True):
    """Labelled vertical lines in distinct styles (e.g. a predicted and a measured knee), named in
    the legend.

    Unlike ``loglog_sweep``'s ``marks``, which share one grey style and write their
    labels on the chart, these stay readable when two positions nearly coincide.
    """
    styles = [("C3", "--"), ("C2", ":"), ("C4", "-."), ("C1", (0, (5, 1)))]
    for (label, position), (color, style) in zip(
        marks.items(), styles * (len(marks) // len(styles) + 1)
    ):
        ax.axvline(position, color=color, linestyle=style, linewidth=1.2, label=label)
    if legend:
        ax.legend(fontsize=8)
    return ax
