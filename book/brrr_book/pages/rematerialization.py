"""Notebook 13 (rematerialization): its verdict, its memory checks, its record and its sentences."""

from __future__ import annotations

from dataclasses import dataclass

from brrr import reference, units
from brrr.benchmarks.rematerialization import Split, VariantResult
from brrr_book.claims import glue_text, judge_rematerialization, publish


@dataclass
class Page:
    """What notebook 13 measured."""

    batch: int
    width: int
    blocks: int
    results: list[
        VariantResult
    ]  # eager, checkpointed, compiled saving everything, compiled recomputing
    split: Split  # the compiled speedup split into fusion and rematerialization
    kept: dict[str, float]  # hidden-sized tensors kept per block, by variant


def finish(page: Page) -> None:
    """Publish the rematerialization claim, check the memory claims (bytes, not times: they do not
    vary with load; a miss fails the build), record for ``make gpu-check``, glue the sentences."""
    split, results = page.split, page.results
    publish(judge_rematerialization(split.remat_memory, split.remat_speedup, split.remat_noise))
    reference.record(
        "rematerialization",
        {
            "sizes": {"batch": page.batch, "width": page.width, "blocks": page.blocks},
            **{
                r.name: {
                    "step_s": r.timing.median_s,
                    "peak_bytes": r.peak_bytes,
                    "saved_bytes": r.saved_bytes,
                }
                for r in results
            },
        },
    )
    glue_text(
        "kept",
        "Here, per block, "
        + ", ".join(f"{name} kept about {tensors:.1f}" for name, tensors in page.kept.items())
        + " hidden-sized tensors.",
    )
    glue_text(
        "control-gain",
        (
            f"here {split.fusion_speedup:.2f}x eager's speed at {1 / split.fusion_memory:.2f}x its "
            "peak memory"
        ),
    )
    _, checkpointed, saved, recomputed = results
    assert checkpointed.saved_bytes < recomputed.saved_bytes < saved.saved_bytes, (
        "saved for backward should fall from everything saved to recomputing to checkpointing: "
        + ", ".join(units.binary_bytes(r.saved_bytes) for r in (saved, recomputed, checkpointed))
    )
    assert recomputed.peak_bytes < 0.8 * saved.peak_bytes, (
        "recomputing should lower the compiled step's peak memory: "
        f"{units.binary_bytes(recomputed.peak_bytes)} against "
        f"{units.binary_bytes(saved.peak_bytes)}"
    )
