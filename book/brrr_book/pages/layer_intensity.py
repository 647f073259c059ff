"""Notebook 22 (arithmetic intensity of real layers): its figure, crossings, checks, record and
sentences."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt

from brrr import counting, reference, roofline, targets, units
from brrr.ceilings import Ceilings, measured_again
from brrr_book.claims import glue_text
from brrr.device import device_name
from brrr.plots import roofline as roofline_chart
from brrr.roofline import Roof

# (size: batch, sequence or op name; the op's count; seconds measured; the regime its count
# predicts)
Row = tuple[object, counting.OpCount, float, object]


@dataclass
class Page:
    """What notebook 22 measured."""

    ceilings: Ceilings
    dtype: str
    matmul_roof: Roof
    vector_roof: Roof
    d: int  # the linear layer's width
    linear_rows: list[Row]  # over batch
    rowwise_rows: list[Row]  # layer norm and softmax, far above the cache
    attention_rows: list[Row]  # over sequence length
    rowwise_intensity: list[str]  # each row-wise op's intensity at batch 1, 8, 64
    element_bytes: int  # of dtype

    def summary(self) -> dict[str, dict[str, str]]:
        """Each family's regime at its first and last size."""

        def ends(rows):
            return {"from": str(rows[0][3]), "to": str(rows[-1][3])}

        found = {
            "linear over batch": ends(self.linear_rows),
            "attention over sequence": ends(self.attention_rows),
        }
        found.update(
            {
                name: {"from": str(regime), "to": str(regime)}
                for name, _, _, regime in self.rowwise_rows
            }
        )
        return found


def plot_layers(page: Page, stamp: str) -> None:
    """Every measured layer on this machine's matmul and vector roofs."""
    linear, rowwise, attention = page.linear_rows, page.rowwise_rows, page.attention_rows
    families = {
        f"linear {page.d}->{page.d}, batch {linear[0][0]}..{linear[-1][0]}": [
            (op.intensity, op.flops / s) for _, op, s, _ in linear
        ],
        "layer norm, softmax": [(op.intensity, op.flops / s) for _, op, s, _ in rowwise],
        f"fused attention, seq {attention[0][0]}..{attention[-1][0]}": [
            (op.intensity, op.flops / s) for _, op, s, _ in attention
        ],
    }
    intensities = [i for points in families.values() for i, _ in points] + [
        page.matmul_roof.ridge_point,
        page.vector_roof.ridge_point,
    ]
    ax = roofline_chart(
        [page.matmul_roof, page.vector_roof],
        stamp=stamp,
        intensity_range=(min(intensities) / 4, max(intensities) * 4),
        title=f"Layers of a transformer on {device_name()} ({page.dtype}), measured",
    )
    for (label, points), marker in zip(families.items(), "osD"):
        ax.plot(
            *zip(*points),
            marker=marker,
            linestyle="--" if len(points) > 2 else "none",
            linewidth=0.8,
            label=label,
        )
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(ax.get_title(), fontsize=10)
    plt.show()


def crossing_lines(page: Page) -> list[str]:
    """Which layers cross the ridge as they grow, and where the count predicts the linear layer
    crosses."""
    summary = page.summary()
    linear, attention = page.linear_rows, page.attention_rows

    def said(label, ends):
        return f"{label}: " + (
            f"moves from {ends['from']} to {ends['to']}"
            if ends["from"] != ends["to"]
            else f"stays {ends['from']}"
        )

    lines = [
        said(
            f"linear {page.d}->{page.d}, batch {linear[0][0]} to {linear[-1][0]}",
            summary["linear over batch"],
        ),
        said(
            f"fused attention, sequence {attention[0][0]} to {attention[-1][0]}",
            summary["attention over sequence"],
        ),
    ]
    lines += [
        f"{name}: {regime} at every batch (intensity {op.intensity:.2f} FLOPs/byte, "
        f"ridge {page.vector_roof.ridge_point:.1f})"
        for name, op, _, regime in page.rowwise_rows
    ]
    return lines + [_crossing_said(page)]


def _crossing_said(page: Page) -> str:
    element = page.element_bytes
    ridge = page.matmul_roof.ridge_point
    first_compute = next(
        (batch for batch, _, _, regime in page.linear_rows if str(regime) == "compute-bound"), None
    )
    return (
        f"Here, in {page.dtype}, that predicts a crossing near batch {ridge * element / 2:.0f} "
        f"(ridge {ridge:.0f} FLOPs/byte × {element} bytes / 2); "
        + (
            f"the first batch of the sweep on the compute side was {first_compute}."
            if first_compute
            else "no batch of the sweep reached the compute side."
        )
    )


def finish(page: Page) -> None:
    """Check what "What it means" says against this machine's roofs (a miss fails the build), record
    the layers for ``make gpu-check``, glue the page's sentences."""
    # "far left of any ridge": layer norm and softmax are memory-bound by their counts; a roof
    # measured low is measured again before that fails
    if roofline.require_memory_bound(
        {name: op for name, op, _, _ in page.rowwise_rows},
        page.vector_roof,
        lambda: measured_again(page.ceilings).roof("vector"),
    ):
        print("layer norm and softmax: memory-bound against the measured vector roof")
    summary = page.summary()
    linear_regimes = summary["linear over batch"]
    targets.check(
        linear_regimes == {"from": "memory-bound", "to": "compute-bound"},
        f"the linear layer should cross the ridge with batch: {linear_regimes}",
    )
    attention_intensity = [op.intensity for _, op, _, _ in page.attention_rows]
    assert attention_intensity == sorted(attention_intensity), (
        f"attention should gain intensity with sequence: {attention_intensity}"
    )
    reference.record(
        "compute.layer_intensity",
        {
            "dtype": page.dtype,
            "summary": summary,
            "linear": [
                {"batch": batch, "intensity": op.intensity, "flop_per_s": op.flops / s}
                for batch, op, s, _ in page.linear_rows
            ],
            "attention": [
                {"seq": seq, "intensity": op.intensity, "flop_per_s": op.flops / s}
                for seq, op, s, _ in page.attention_rows
            ],
            "rowwise": [
                {"op": name, "intensity": op.intensity, "bytes_per_s": op.bytes / s}
                for name, op, s, _ in page.rowwise_rows
            ],
        },
    )
    glue_text(
        "rowwise-intensity", "; ".join(page.rowwise_intensity) + " FLOPs/byte at batch 1, 8 and 64"
    )
    glue_text("rowwise-speed", _rowwise_speed(page))
    glue_text("linear-crossing", _crossing_said(page))
    glue_text("layers-recorded", recorded_layers())


def _rowwise_speed(page: Page) -> str:
    speeds = {
        name: op.bytes / s / page.ceilings.copy_bandwidth for name, op, s, _ in page.rowwise_rows
    }
    under = [name for name, share in speeds.items() if share < 0.5]
    (first, first_share), (second, second_share) = speeds.items()
    return (
        f"Measured, {first} moved its counted bytes at {units.percent(first_share)} of the copy "
        f"bandwidth and {second} at {units.percent(second_share)}."
        + (
            f" {' and '.join(under).capitalize()} ran well under the memory roof: something other "
            "than the "
            "minimum traffic sets the time there (eager's extra passes over each row, reductions "
            "that do not vectorise). The count says where an op sits on the roofline; only the "
            "measurement says how close to its roof it runs."
            if under
            else " Both ran near the memory roof, as memory-bound ops should."
        )
    )


def recorded_layers(folder=None) -> str:
    """Notebook 22's result as each recorded GPU measured it, in one sentence per GPU, or that none
    did."""
    from brrr.beside import recorded

    said = []
    for gpu in recorded("compute.layer_intensity", folder):
        values = gpu.values
        linear, rows = values["summary"]["linear over batch"], values["linear"]
        moved = (
            f"moved from {linear['from']} to {linear['to']}"
            if linear["from"] != linear["to"]
            else f"stayed {linear['from']}"
        )
        rowwise = " and ".join(
            f"{row['op']} at {units.bandwidth(row['bytes_per_s'])}" for row in values["rowwise"]
        )
        said.append(
            f"On the recorded {gpu.device} ({values['dtype']}, {gpu.env.get('date', '?')}), the "
            f"linear layer {moved} between batch {rows[0]['batch']} and {rows[-1]['batch']}, and "
            f"the row-wise ops moved their counted bytes with {rowwise}."
        )
    return " ".join(said) or "No recorded GPU holds this page's sweep yet."
