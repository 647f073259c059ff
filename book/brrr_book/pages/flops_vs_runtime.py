"""Notebook 21 (FLOPs against runtime): its verdicts, the table's shape enforced, its record."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt

from brrr import opclasses, reference, targets
from brrr.benchmarks.compute import EncoderConfig, table_checks
from brrr.ceilings import Ceilings
from brrr_book.claims import judge_contractions, judge_other_ops_rate, publish
from brrr.column import fit
from brrr.opclasses import OpClass
from brrr.plots import add_stamp


@dataclass
class Page:
    """What notebook 21 measured."""

    config: EncoderConfig
    ceilings: Ceilings
    table: opclasses.ClassTable  # FLOPs and time per operator class, one training step
    factors: list[float]  # the contractions' FLOP/s over normalization's and over element-wise's
    of_roof: list[float]  # normalization's and element-wise's FLOP/s over the non-matmul roof


def finish(page: Page) -> None:
    """Publish the other-ops-rate and contractions claims, record the table for ``make gpu-check``,
    and enforce the table's shape (counted FLOPs and profiled time, not a timed rate: a miss fails
    the build)."""
    config, ceilings, table = page.config, page.ceilings, page.table
    publish(
        judge_other_ops_rate(
            *page.factors,
            matmul_over_vector=ceilings.matmul(config.dtype) / ceilings.vector_peak,
            measured=ceilings.setting(config.dtype),
            normalization_of_roof=page.of_roof[0],
            elementwise_of_roof=page.of_roof[1],
        )
    )
    checks = table_checks(table)
    reference.record(
        "compute.flops_vs_runtime",
        {
            "config": config.__dict__,
            "table": table.to_json(),
            "checks": [check.__dict__ for check in checks],
        },
    )
    publish(
        judge_contractions(
            table.flop_share(OpClass.CONTRACTION), table.time_share(OpClass.CONTRACTION)
        )
    )
    with targets.said_only_if_missed():
        for check in checks:
            print(fit(check))
        targets.check(
            all(check.passed for check in checks), "the table's shape does not hold on this machine"
        )


def share_bars(
    shares: dict[str, dict[str, float]],
    *,
    title: str = "",
    stamp: str = "",
    ax=None,
):
    """One horizontal stacked bar per row of ``shares`` ({bar label: {part: percent}}), parts in
    order.

    Used for the essay's table: a bar of FLOP shares and a bar of runtime shares
    per operator class, ours beside the essay's. Parts under 1% still get their
    number printed at the bar's end, so a 0.2% sliver is not lost.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.6 * len(shares) + 1.6))
    labels = list(shares)
    parts = list(dict.fromkeys(part for row in shares.values() for part in row))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for y, label in enumerate(labels):
        left = 0.0
        for i, part in enumerate(parts):
            value = shares[label].get(part, 0.0)
            ax.barh(
                y, value, left=left, color=colors[i % len(colors)], label=part if y == 0 else None
            )
            if value >= 8:
                ax.text(
                    left + value / 2,
                    y,
                    f"{value:.1f}%",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
            left += value
        small = [
            f"{shares[label][part]:.2f}%" if part in shares[label] else "-" for part in parts[1:]
        ]
        ax.text(101, y, " / ".join(small), va="center", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"percent (numbers at the right: {' / '.join(parts[1:])})", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(
        fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=len(parts), frameon=False
    )
    add_stamp(ax, stamp, bottom=0.16)
    ax.figure.subplots_adjust(left=0.28, right=0.8, bottom=0.32)
