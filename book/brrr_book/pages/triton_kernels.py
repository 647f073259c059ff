"""Notebook 12 (writing Triton kernels): its GPU targets, records and sentences."""

from __future__ import annotations

from dataclasses import dataclass

from brrr import reference, units
from brrr.benchmarks import fusion
from brrr.benchmarks.fusion import Measurement
from brrr_book.claims import glue_text
from brrr.device import ON_GPU

Sweep = dict[str, list[fusion.Measurement]]


@dataclass
class Page:
    """What notebook 12 measured."""

    copy: float  # the copy roof of part 1, bytes/s
    row_counts: list[int]
    cols: int
    pointwise_sweep: Sweep
    total: int  # part 2's elements
    widths: list[int]
    softmax_copy: float  # the copy roof at part 2's size
    softmax_sweep: Sweep


def finish(page: Page) -> None:
    """Enforce the GPU's bandwidth targets (a miss is timed again), record both sweeps, glue."""
    if ON_GPU:
        _require_pointwise(page)
        _require_softmax(page)
    reference.record(
        "triton-pointwise",
        {
            "copy_bandwidth": page.copy,
            "rows": page.row_counts,
            "cols": page.cols,
            **{
                name: [r.bandwidth for r in results]
                for name, results in page.pointwise_sweep.items()
            },
        },
    )
    reference.record(
        "triton-softmax",
        {
            "copy_bandwidth": page.copy,
            "total": page.total,
            "widths": page.widths,
            **{
                name: [r.bandwidth for r in results] for name, results in page.softmax_sweep.items()
            },
        },
    )
    glue_text(
        "small-sizes",
        "Here: "
        + " ".join(line.rstrip(".") + "." for line in small_sizes(page.pointwise_sweep, page.copy)),
    )
    glue_text(
        "large-sizes",
        "Here " + "; ".join(largest_sentences(page.pointwise_sweep, page.copy)) + ".",
    )


def _require_pointwise(page: Page) -> None:
    """The fused kernel's share of the copy roof at the sweep's largest size; a miss is measured
    again by ``fusion.measure_target`` at the same size."""
    largest = page.pointwise_sweep["Triton bias_gelu_scale"][-1]
    n = page.row_counts[-1] * page.cols
    fusion.require(
        "pointwise_bandwidth",
        largest.bandwidth / page.copy,
        lambda: fusion.measure_target("pointwise_bandwidth", n, page.copy).measured,
    )


def _require_softmax(page: Page) -> None:
    """The softmax kernel's share of the copy roof at rows of ``fusion.COLS``; a miss is measured
    again by ``fusion.measure_target`` on the same elements."""
    at_target_width = page.softmax_sweep["Triton softmax"][page.widths.index(fusion.COLS)]
    fusion.require(
        "softmax_bandwidth",
        at_target_width.bandwidth / page.softmax_copy,
        lambda: fusion.measure_target("softmax_bandwidth", page.total, page.softmax_copy).measured,
    )


def plot_recorded(sizes: list[int], pointwise_sweep: Sweep, copy: float, stamp: str) -> None:
    """Part 1's sweep beside each recorded GPU's (``brrr/data/reference/``), each as a fraction of
    its own machine's copy bandwidth so that both share one axis, with what the GPU's fused kernel
    reached; or a line saying no GPU has recorded it."""
    import matplotlib.pyplot as plt

    from brrr import plots, units
    from brrr.column import fit
    from brrr.beside import recorded

    gpus = recorded("triton-pointwise")
    if not gpus:
        print("No recorded GPU holds this sweep yet (make gpu-check records it).")
    for gpu in gpus:
        v = gpu.values
        plots.beside_recorded(
            {
                f"here: {name}": (sizes, [r.bandwidth / copy for r in results])
                for name, results in pointwise_sweep.items()
            },
            {
                f"{gpu.device}: {name}": (
                    [4 * r * v["cols"] for r in v["rows"]],
                    [b / v["copy_bandwidth"] for b in v[name]],
                )
                for name in v
                if name not in ("rows", "cols", "copy_bandwidth")
            },
            xlabel="bytes of x",
            ylabel="fraction of the copy bandwidth",
            title="gelu(x + bias) * scale: here and recorded",
            logy=False,
            stamps=[stamp, gpu.stamp],
        )
        plt.show()
        fused = v.get("Triton bias_gelu_scale") or v["torch.compile"]
        print(
            fit(
                f"Recorded on {gpu.device}: the fused kernel reached "
                f"{units.percent(fused[-1] / v['copy_bandwidth'])} of its copy bandwidth at the "
                "largest size, eager "
                f"{units.percent(v['eager (3 kernels)'][-1] / v['copy_bandwidth'])}."
            )
        )
        print(fit(f"  {gpu.stamp}"))


def largest_sentences(sweep_results: dict[str, list[Measurement]], copy: float) -> list[str]:
    """At a sweep's largest size: whether each fused provider (``torch.compile``, the Triton kernel)
    reached the copy line, and eager's effective bandwidth, which counts the fused bytes though it
    moves about 3x."""
    largest = {name: results[-1] for name, results in sweep_results.items()}
    lines = [
        near_copy(f"{name}, fused,", largest[name].bandwidth / copy)
        for name in ("torch.compile", "Triton bias_gelu_scale")
        if name in largest
    ]
    eager = largest["eager (3 kernels)"].bandwidth / copy
    return lines + [
        f"eager, moving about 3x the fused bytes, reached {units.percent(eager)} of copy in "
        "effective bandwidth"
    ]


# A provider whose smallest size runs below this fraction of the copy-bandwidth share it reaches at
# the largest size is held back there by something other than bandwidth: a fixed cost per call.
SMALL_HELD_BACK = 0.75


def small_sizes(sweep_results: dict[str, list[Measurement]], copy: float) -> list[str]:
    """Lines, from the run, on whether the smallest size of a sweep ran below the roof.

    Each provider's share of copy bandwidth at the smallest size is set beside its
    share at the largest. Well below it (under :data:`SMALL_HELD_BACK` of it), a fixed
    cost per call (a launch, dispatch, a compiled graph's guards) set the small size's
    time; about the same or above, each call took long enough that bandwidth or
    arithmetic set it even there.
    """
    lines, held = [], {}
    for name, results in sweep_results.items():
        small, large = results[0].bandwidth / copy, results[-1].bandwidth / copy
        held[name] = small < SMALL_HELD_BACK * large
        lines.append(
            f"{name}: {units.percent(small)} of copy at the smallest size "
            f"({units.seconds(results[0].seconds)} a call), {units.percent(large)} at the largest "
            f"({units.ratio(small / large, (SMALL_HELD_BACK,))} of it)"
        )
    if all(held.values()):
        lines.append(
            "At the smallest size every provider ran further below the copy line than at the "
            "largest: a fixed cost per call, not bandwidth, set its time."
        )
    elif not any(held.values()):
        lines.append(
            "At the smallest size every provider ran about as close to the copy line as at the "
            "largest, or closer: each call took long enough that a fixed cost per call was lost in "
            "it, and the bytes or the arithmetic set its time even there."
        )
    else:
        lines.append(
            "At the smallest size, held back by a fixed cost per call rather than bandwidth: "
            + ", ".join(name for name, h in held.items() if h)
            + "; about as close to the copy "
            "line as at the largest, or closer: "
            + ", ".join(name for name, h in held.items() if not h)
            + "."
        )
    return lines


NEAR_COPY = 0.7  # a fused kernel at 70% of copy bandwidth or more is "near the copy line"


def near_copy(label: str, fraction: float) -> str:
    """A sentence, from the run, on whether ``label`` reached the copy line (``fraction`` of copy
    bandwidth)."""
    if fraction >= NEAR_COPY:
        return (
            f"{label} ran near the copy line ({units.percent(fraction)} of it): memory set its time"
        )
    return (
        f"{label} ran well below the copy line ({units.percent(fraction)} of it): something other "
        "than "
        "memory, such as its arithmetic, set its time here"
    )
