"""Notebook 21 (FLOPs against runtime): its verdicts, the table's shape enforced, its record."""

from __future__ import annotations

from dataclasses import dataclass

from brrr import opclasses, reference, targets
from brrr.benchmarks.compute import EncoderConfig, table_checks
from brrr.ceilings import Ceilings
from brrr.claims import judge_contractions, judge_other_ops_rate, publish
from brrr.column import fit
from brrr.opclasses import OpClass


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
